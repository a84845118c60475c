//! Usage per instance and per group, for startWriteCache's quota checks.
//!
//! Each instance's serving bytes and blocks per storage id live in its `usage` hash, changed by
//! the same scripts that change block state. A group's usage is the sum over its instances; a
//! frontend computes it with one HGETALL per instance (pipelined) and caches it for
//! `usage_cache_ms`, so quota checks add no Valkey work to most writes. Quotas are therefore
//! soft by up to one cache period of writes; the worker's reclaimer keeps usage under the
//! watermark.

use super::DataPlane;
use crate::error::Result;
use crate::registry::Snapshot;
use crate::wire::StorageType;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A hash field and its value.
type Field = (Vec<u8>, Vec<u8>);

/// Serving bytes and blocks of one group.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupUsage {
    pub bytes: i64,
    pub blocks: i64,
    pub bytes_by_type: HashMap<StorageType, i64>,
}

#[derive(Debug)]
pub struct UsageCache {
    ttl: Duration,
    entries: Mutex<HashMap<String, (Instant, GroupUsage)>>,
}

impl UsageCache {
    pub fn new(ttl_ms: u64) -> Self {
        UsageCache { ttl: Duration::from_millis(ttl_ms), entries: Mutex::default() }
    }
}

/// Parses an instance's usage hash (`b<id>` bytes, `n<id>` blocks) into per-storage-id totals.
pub fn parse_usage(fields: &HashMap<String, i64>) -> HashMap<u16, (i64, i64)> {
    let mut out: HashMap<u16, (i64, i64)> = HashMap::new();
    for (f, v) in fields {
        let (kind, id) = f.split_at(1.min(f.len()));
        let Ok(id) = id.parse::<u16>() else { continue };
        let e = out.entry(id).or_default();
        match kind {
            "b" => e.0 += v,
            "n" => e.1 += v,
            _ => {}
        }
    }
    out
}

impl DataPlane {
    /// Whether a trim's trash (a renamed blocks hash) holds a location on `storage`; read in
    /// pages until the first one (a trash shrinks as workers expand it). An empty or vanished
    /// trash counts too: a worker is expanding it right now, into entries this scan may have
    /// read past already.
    async fn trash_holds(&self, trash: &str, storage: u16) -> Result<bool> {
        let mut conn = self.conn();
        let mut cursor = 0u64;
        loop {
            let (next, page): (u64, Vec<Field>) =
                redis::cmd("HSCAN").arg(trash).arg(cursor).arg("COUNT").arg(1000).query_async(&mut conn).await?;
            if cursor == 0 && next == 0 && page.is_empty() {
                return Ok(true);
            }
            let on = |raw: &Vec<u8>| {
                super::record::BlockRecord::decode(raw).is_none_or(|r| r.locations.iter().any(|l| l.storage == storage))
            };
            if page.iter().any(|(_, raw)| on(raw)) {
                return Ok(true);
            }
            if next == 0 {
                return Ok(false);
            }
            cursor = next;
        }
    }

    /// Work of an instance still tied to storage `storage`: write sessions open on it,
    /// deletions queued for it, and deletions given up on (dead letters) naming it. What
    /// `removeStorage` waits for, so that no file on the storage is left without an owner.
    pub async fn pending_on_storage(&self, instance_id: &str, storage: u16) -> Result<Pending> {
        let keys = self.keys(instance_id);
        let mut conn = self.conn();
        let ids: Vec<String> = redis::cmd("ZRANGE").arg(&keys.sessions).arg(0).arg(-1).query_async(&mut conn).await?;
        let mut sessions = 0;
        for id in ids {
            let record: Option<Vec<u8>> = redis::cmd("GET").arg(keys.session(&id)).query_async(&mut conn).await?;
            // Session record: 12-byte header, then entries of key (8) | bytes (4) | location,
            // whose storage id is the u16 after the location's state byte (lua/lib/record.lua).
            // A session without new locations, or finished, holds nothing.
            if let Some(id) = record.as_deref().and_then(|r| r.get(25..27)) {
                sessions += (u16::from_le_bytes([id[0], id[1]]) == storage) as usize;
            }
        }
        Ok(Pending {
            sessions,
            deletions: self.stream_on_storage(&keys.del, storage).await?,
            dead_letters: self.stream_on_storage(&keys.del_dead, storage).await?,
        })
    }

    /// Entries of a deletion stream (the queue or its dead letters) on `storage`, read in pages.
    async fn stream_on_storage(&self, stream: &str, storage: u16) -> Result<usize> {
        let mut conn = self.conn();
        let mut count = 0;
        let mut from = "-".to_string();
        loop {
            let page: Vec<(String, HashMap<String, Vec<u8>>)> = redis::cmd("XRANGE")
                .arg(stream)
                .arg(&from)
                .arg("+")
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await?;
            let Some((last, _)) = page.last() else { break };
            from = format!("({last}");
            // A trash being expanded while it is read appends its entries after this page: read
            // on until a page comes back empty, so none of them is missed.
            let mut saw_trash = false;
            for (_, fields) in &page {
                saw_trash |= fields.contains_key("trash");
                // A trim's trash names no storage until a worker expands it into one entry per
                // location: it counts when it holds a location on the storage (as does an entry
                // with a location too short to read).
                let on = match (fields.get("l"), fields.get("trash")) {
                    (Some(l), _) => l.get(1..3).is_none_or(|id| u16::from_le_bytes([id[0], id[1]]) == storage),
                    (None, Some(trash)) => self.trash_holds(&String::from_utf8_lossy(trash), storage).await?,
                    (None, None) => false,
                };
                count += on as usize;
            }
            if page.len() < 1000 && !saw_trash {
                break;
            }
        }
        Ok(count)
    }

    /// One instance's usage per storage id: (bytes, blocks).
    pub async fn instance_usage(&self, instance_id: &str) -> Result<HashMap<u16, (i64, i64)>> {
        let fields: HashMap<String, i64> =
            redis::cmd("HGETALL").arg(&self.keys(instance_id).usage).query_async(&mut self.conn()).await?;
        Ok(parse_usage(&fields))
    }

    /// The group's usage, summed over its instances (cached for `usage_cache_ms`).
    pub async fn group_usage(&self, snap: &Snapshot, group: &str) -> Result<GroupUsage> {
        if let Some((at, u)) = self.usage.entries.lock().unwrap_or_else(|p| p.into_inner()).get(group)
            && at.elapsed() < self.usage.ttl
        {
            return Ok(u.clone());
        }
        let ids: Vec<&str> = snap
            .instances
            .values()
            .filter(|i| i.instance_group_name == group)
            .map(|i| i.instance_id.as_str())
            .collect();
        let all = futures::future::try_join_all(ids.iter().map(|id| self.instance_usage(id))).await?;
        let mut usage = GroupUsage::default();
        for per_storage in all {
            for (id, (bytes, blocks)) in per_storage {
                usage.bytes += bytes;
                usage.blocks += blocks;
                if let Some(cfg) = super::storage_of(snap, id) {
                    *usage.bytes_by_type.entry(crate::backend::storage_type(cfg)).or_default() += bytes;
                }
            }
        }
        self.usage
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(group.to_string(), (Instant::now(), usage.clone()));
        Ok(usage)
    }
}

/// What [`DataPlane::pending_on_storage`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pending {
    pub sessions: usize,
    pub deletions: usize,
    pub dead_letters: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_fields_sum_per_storage_id() {
        let f: HashMap<String, i64> = [("b1", 100), ("n1", 2), ("b2", 7), ("n2", 1), ("junk", 5)]
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        let u = parse_usage(&f);
        assert_eq!(u[&1], (100, 2));
        assert_eq!(u[&2], (7, 1));
        assert_eq!(u.len(), 2);
    }
}
