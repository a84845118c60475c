//! startWriteCache: storage choice (candidates in order, skipping disabled storages, storages
//! kvcm cannot place blocks on, and storage types whose quota is used up), then one atomic
//! script that dedups against present blocks and creates `writing` locations in a new session.

use super::record::decode_location;
use super::{DataPlane, storage_of};
use crate::backend::{self, Backend};
use crate::error::{Error, Result};
use crate::keys::block_field;
use crate::mask::BlockMask;
use crate::registry::Snapshot;
use crate::scripts;
use crate::wire::admin::StorageConfig;
use crate::wire::{CacheLocation, InstanceInfo, StatusCode};

/// What startWriteCache hands back.
#[derive(Debug, Clone)]
pub struct WriteSession {
    pub session_id: String,
    pub mask: BlockMask,
    pub locations: Vec<CacheLocation>,
}

/// Spec group index per key (0 = every spec), from `location_spec_group_names`.
pub fn spec_groups(inst: &InstanceInfo, names: &[String], n: usize) -> Result<Vec<u8>> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    if names.len() != n {
        return Err(Error::invalid(format!(
            "location_spec_group_names has {} entries for {n} blocks; send none or one per block",
            names.len()
        )));
    }
    names
        .iter()
        .map(|name| match inst.location_spec_groups.iter().position(|g| &g.name == name) {
            Some(i) if i < 254 => Ok(i as u8 + 1),
            _ => Err(Error::invalid(format!(
                "location_spec_group_names names \"{name}\", which is not one of the instance's location_spec_groups"
            ))),
        })
        .collect()
}

impl DataPlane {
    /// Picks the storage for new blocks of `bytes` bytes in total.
    async fn choose_storage<'a>(
        &self,
        snap: &'a Snapshot,
        inst: &InstanceInfo,
        bytes: i64,
    ) -> Result<(&'a StorageConfig, u16)> {
        let group_name = &inst.instance_group_name;
        let group = snap.groups.get(group_name).ok_or_else(|| {
            Error::internal(format!("instance {} names missing group {group_name}", inst.instance_id))
        })?;
        let quota = &group.quota;
        // A write that adds nothing needs no quota.
        let need_usage = bytes > 0 && (quota.capacity > 0 || quota.quota_config.iter().any(|q| q.capacity > 0));
        let usage = if need_usage { Some(self.group_usage(snap, group_name).await?) } else { None };
        if let Some(u) = &usage
            && quota.capacity > 0
            && u.bytes + bytes > quota.capacity
        {
            return Err(Error::status(
                StatusCode::REACH_MAX_ENTITY_CAPACITY,
                format!(
                    "instance group '{group_name}' quota is used up ({} of {} bytes; this write needs {bytes}); \
                     wait for reclamation or raise quota.capacity",
                    u.bytes, quota.capacity
                ),
            ));
        }
        let mut skipped = Vec::new();
        for name in &group.storage_candidates {
            let Some(cfg) = snap.storages.get(name) else {
                skipped.push(format!("{name} (not added yet: addStorage)"));
                continue;
            };
            let Some(&id) = snap.storage_ids.get(name) else {
                skipped.push(format!("{name} (has no storage id; remove and re-add it)"));
                continue;
            };
            if !cfg.is_available {
                skipped.push(format!("{name} (disabled)"));
                continue;
            }
            if !cfg.is_healthy {
                skipped.push(format!("{name} (failing health checks)"));
                continue;
            }
            if !Backend::of(cfg).writable() {
                skipped.push(format!("{name} (kvcm cannot place blocks on this storage type)"));
                continue;
            }
            let ty = backend::storage_type(cfg);
            if let (Some(u), Some(q)) = (&usage, quota.quota_config.iter().find(|q| q.storage_type == ty))
                && q.capacity > 0
                && u.bytes_by_type.get(&ty).copied().unwrap_or(0) + bytes > q.capacity
            {
                skipped.push(format!("{name} ({ty} quota used up)"));
                continue;
            }
            return Ok((cfg, id));
        }
        Err(Error::status(
            StatusCode::REACH_MAX_ENTITY_CAPACITY,
            format!("no storage of instance group '{group_name}' can take new blocks: {}", skipped.join(", ")),
        ))
    }

    pub async fn start_write_cache(
        &self,
        snap: &Snapshot,
        inst: &InstanceInfo,
        blocks: &[i64],
        group_names: &[String],
        timeout_s: i32,
    ) -> Result<WriteSession> {
        let groups = spec_groups(inst, group_names, blocks.len())?;
        let timeout = match timeout_s {
            0 => self.limits.write_timeout_default_s,
            t if t < 0 || t as u32 > self.limits.write_timeout_max_s => {
                return Err(Error::invalid(format!(
                    "write_timeout_seconds must be within 1..={} (0 = the default {}), got {t}",
                    self.limits.write_timeout_max_s, self.limits.write_timeout_default_s
                )));
            }
            t => t as u32,
        };
        let sizes = backend::group_sizes(inst);
        let bytes: i64 = (0..blocks.len()).map(|i| sizes[groups.get(i).copied().unwrap_or(0) as usize]).sum();
        // The quota check first assumes every key is new; only when that does not fit does it
        // count the keys that really are (one HMGET), so the common path costs nothing extra.
        let (cfg, storage_id) = match self.choose_storage(snap, inst, bytes).await {
            Err(Error::Status { code: StatusCode::REACH_MAX_ENTITY_CAPACITY, .. }) => {
                let records = self.records(&self.keys(&inst.instance_id), blocks).await?;
                let mut seen = std::collections::HashSet::new();
                let exact: i64 = records
                    .iter()
                    .enumerate()
                    .filter(|(i, r)| {
                        seen.insert(blocks[*i])
                            && !r.and_then(super::record::BlockRecord::decode).is_some_and(|rec| {
                                rec.locations.iter().any(|l| l.state != super::record::LocState::Deleting)
                            })
                    })
                    .map(|(i, _)| sizes[groups.get(i).copied().unwrap_or(0) as usize])
                    .sum();
                self.choose_storage(snap, inst, exact).await?
            }
            other => other?,
        };
        let keys = self.keys(&inst.instance_id);
        let sizes_arg = sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",");
        let (timeout_arg, storage_arg, per_file_arg) =
            (timeout.to_string(), storage_id.to_string(), Backend::of(cfg).key_count_per_file().to_string());
        let fields: Vec<[u8; 8]> = blocks.iter().map(|b| block_field(*b)).collect();
        // In a group that reclaims by `adaptive`, new records are classed (lua/lib/record.lua).
        let adaptive = super::reclaim_policy(snap, inst) == crate::wire::admin::ReclaimPolicy::POLICY_ADAPTIVE;
        // A session id another request holds (1 in 2^64) is drawn again.
        let mut attempts = 0;
        let (session_id, reply) = loop {
            let session_id = format!("{:016x}", fastrand::u64(..));
            let session_key = keys.session(&session_id);
            let mut args: Vec<&[u8]> = vec![
                session_id.as_bytes(),
                timeout_arg.as_bytes(),
                storage_arg.as_bytes(),
                per_file_arg.as_bytes(),
                &groups,
                sizes_arg.as_bytes(),
            ];
            args.extend(fields.iter().map(|f| &f[..]));
            let mut script_keys: Vec<&str> = vec![&keys.blocks, &session_key, &keys.sessions, &keys.seq, &keys.files];
            if adaptive {
                script_keys.push(&keys.ighost);
            }
            let outcome = self.run_outcome(&scripts::START_WRITE_CACHE, &script_keys, &args).await?;
            attempts += 1;
            match outcome {
                Ok(reply) => break (session_id, reply),
                Err((scripts::SESSION_ID_TAKEN, _)) if attempts < 3 => continue,
                Err(other) => return Err(scripts::reply_error(other)),
            }
        };
        let mut it = reply.into_iter();
        let present: Vec<u8> = it.next().map(redis::from_redis_value).transpose()?.unwrap_or_default();
        let flags: Vec<bool> = present.iter().map(|c| *c == b'1').collect();
        let new_index: Vec<usize> = flags.iter().enumerate().filter(|(_, p)| !**p).map(|(i, _)| i).collect();
        // One location per new key, or one standing for every new key's (the script's reply for
        // a session whose new locations are all the same bytes).
        let raw: Vec<Vec<u8>> = it.map(redis::from_redis_value).collect::<std::result::Result<_, _>>()?;
        let one_for_all = raw.len() == 1 && !new_index.is_empty();
        if raw.len() != new_index.len() && !one_for_all {
            return Err(Error::internal(format!(
                "start_write_cache: {} locations for {} new keys",
                raw.len(),
                new_index.len()
            )));
        }
        let decoded = raw
            .iter()
            .map(|bytes| decode_location(bytes, 0).map(|(loc, _)| loc))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::internal("start_write_cache: bad location"))?;
        let mut locations = Vec::with_capacity(new_index.len());
        // One builder for the session: URI prefixes are made once per storage, not per block.
        let storages = |id: u16| Some(storage_of(snap, id).unwrap_or(cfg));
        let mut builder = backend::LocationBuilder::new(&storages, inst, &[]);
        for (n, i) in new_index.into_iter().enumerate() {
            let loc = &decoded[n.min(decoded.len() - 1)];
            locations.push(
                builder
                    .build(blocks[i], loc)
                    .ok_or_else(|| Error::internal("start_write_cache: location without URIs"))?,
            );
        }
        Ok(WriteSession { session_id, mask: BlockMask::from_flags(&flags), locations })
    }
}
