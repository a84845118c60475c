//! Tair's `GenConfigSnapshot` / `LoadConfigSnapshot`: the registry's configuration as one JSON
//! document — storages (with their enabled flag), instance groups and instance registrations —
//! to back it up, review it, or recreate it in another namespace or cluster. Tair declares the
//! two RPCs and leaves the format open (its own registry answers `EC_UNIMPLEMENTED`); kvcm's is:
//!
//! ```json
//! {"kvcm_config_snapshot": 1, "registry_version": "42",
//!  "storages": [StorageConfig…], "instance_groups": [InstanceGroup…], "instances": [InstanceInfo…]}
//! ```
//!
//! each entity in its protobuf JSON (what `listStorage`, `listInstanceGroup` and
//! `listInstanceInfo` answer). Credentials (accounts, API keys) are not configuration and are
//! never exported: a snapshot can be handed around without leaking a password hash.
//!
//! Loading **creates what is missing and leaves what is identical**, so it is idempotent and
//! safe to run again. Everything is checked before the first write — every entity validated as
//! its create RPC would, storage roots disjoint from each other and from the existing ones, and
//! each entity that exists already compared with the snapshot's — and any difference or invalid
//! entity refuses the whole load, naming them, with nothing written. Loading never changes or
//! removes what exists. (Another admin's change landing between the check and the writes can
//! stop a load part-way; running it again finishes it.)

use super::{Registry, validate};
use crate::error::{Error, Result};
use crate::wire::admin::{InstanceGroup, StorageConfig};
use crate::wire::{InstanceInfo, RegisterInstanceRequest};
use serde::{Deserialize, Serialize};

/// The format's version (`kvcm_config_snapshot`).
pub const FORMAT: u32 = 1;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConfigSnapshot {
    pub kvcm_config_snapshot: u32,
    /// The registry version it was taken at (informational; ignored by a load).
    pub registry_version: String,
    pub storages: Vec<StorageConfig>,
    pub instance_groups: Vec<InstanceGroup>,
    pub instances: Vec<InstanceInfo>,
}

/// What a load did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Loaded {
    pub created: usize,
    pub unchanged: usize,
}

/// A snapshot's storage compared with a stored one: the same configuration (health is observed,
/// not configured).
fn same_storage(a: &StorageConfig, b: &StorageConfig) -> bool {
    let strip = |s: &StorageConfig| StorageConfig { is_healthy: true, ..validate::normalized(s) };
    strip(a) == strip(b)
}

fn registration(info: &InstanceInfo) -> RegisterInstanceRequest {
    RegisterInstanceRequest {
        trace_id: String::new(),
        instance_group: info.instance_group_name.clone(),
        instance_id: info.instance_id.clone(),
        block_size: info.block_size,
        location_spec_infos: info.location_spec_infos.clone(),
        model_deployment: Some(info.model_deployment.clone()),
        location_spec_groups: info.location_spec_groups.clone(),
    }
}

impl Registry {
    /// The registry's configuration as a [`ConfigSnapshot`] JSON document.
    pub async fn gen_config_snapshot(&self) -> Result<String> {
        let snap = self.current().await?;
        let mut instances: Vec<InstanceInfo> = snap.instances.values().map(|i| (**i).clone()).collect();
        instances.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
        let doc = ConfigSnapshot {
            kvcm_config_snapshot: FORMAT,
            registry_version: snap.version.to_string(),
            storages: snap.storages.values().cloned().collect(),
            instance_groups: snap.groups.values().cloned().collect(),
            instances,
        };
        serde_json::to_string(&doc).map_err(|e| Error::internal(e.to_string()))
    }

    /// Loads a [`ConfigSnapshot`]: checks everything, then creates what is missing (module docs).
    pub async fn load_config_snapshot(&self, json: &str) -> Result<Loaded> {
        let mut jd = serde_json::Deserializer::from_str(json);
        let doc: ConfigSnapshot = serde_path_to_error::deserialize(&mut jd)
            .map_err(|e| Error::invalid(format!("config_snapshot.{}: {}", e.path(), e.inner())))?;
        if doc.kvcm_config_snapshot != FORMAT {
            return Err(Error::invalid(format!(
                "config_snapshot.kvcm_config_snapshot must be {FORMAT} (a snapshot made by GenConfigSnapshot), got {}",
                doc.kvcm_config_snapshot
            )));
        }
        let cur = self.current().await?;
        let limits = &self.limits;
        let mut problems = Vec::new();
        let mut loaded = Loaded::default();

        // Storages: validated as addStorage would; roots disjoint from every other one.
        let mut storages = Vec::new();
        let mut seen_roots: Vec<StorageConfig> = cur.storages.values().cloned().collect();
        for s in &doc.storages {
            let name = &s.global_unique_name;
            let mut cfg = s.clone();
            if let Err(e) = validate::storage(limits, &mut cfg) {
                problems.push(format!("storage '{name}': {}", e.public_message()));
                continue;
            }
            match cur.storages.get(name) {
                Some(stored) if same_storage(stored, s) => loaded.unchanged += 1,
                Some(_) => problems.push(format!("storage '{name}' exists with another configuration")),
                None if storages.iter().any(|(c, _): &(StorageConfig, bool)| c.global_unique_name == *name) => {
                    problems.push(format!("storage '{name}' appears twice"))
                }
                None => match validate::roots_disjoint(&cfg, &seen_roots) {
                    Err(e) => problems.push(format!("storage '{name}': {}", e.public_message())),
                    Ok(()) => {
                        seen_roots.push(cfg.clone());
                        // (Validation resets the flags; the snapshot's enabled flag is kept.)
                        storages.push((cfg, s.is_available));
                    }
                },
            }
        }
        // Groups: validated as createInstanceGroup would (candidates may name storages not added yet).
        let mut groups = Vec::new();
        for g in &doc.instance_groups {
            if let Err(e) = validate::group(limits, g) {
                problems.push(format!("instance group '{}': {}", g.name, e.public_message()));
                continue;
            }
            match cur.groups.get(&g.name) {
                Some(stored) if stored == g => loaded.unchanged += 1,
                Some(_) => problems.push(format!("instance group '{}' exists with another configuration", g.name)),
                None if groups.iter().any(|c: &InstanceGroup| c.name == g.name) => {
                    problems.push(format!("instance group '{}' appears twice", g.name))
                }
                None => groups.push(g.clone()),
            }
        }
        // Instances: validated as registerInstance would; their group must exist or be loaded.
        let mut instances = Vec::new();
        for i in &doc.instances {
            let id = &i.instance_id;
            let req = registration(i);
            let info = match validate::registration(limits, &req) {
                Ok(info) => info,
                Err(e) => {
                    problems.push(format!("instance '{id}': {}", e.public_message()));
                    continue;
                }
            };
            let group = &i.instance_group_name;
            if !cur.groups.contains_key(group) && !groups.iter().any(|g| g.name == *group) {
                problems.push(format!(
                    "instance '{id}': instance group '{group}' is neither registered nor in the snapshot"
                ));
                continue;
            }
            match cur.instances.get(id) {
                Some(stored) if validate::fingerprint(stored) == validate::fingerprint(&info) => loaded.unchanged += 1,
                Some(stored) => problems.push(format!(
                    "instance '{id}' is registered differently ({})",
                    validate::registration_diff(stored, &info).join("; ")
                )),
                None if instances.iter().any(|r: &RegisterInstanceRequest| r.instance_id == *id) => {
                    problems.push(format!("instance '{id}' appears twice"))
                }
                None => instances.push(req),
            }
        }
        if !problems.is_empty() {
            let shown = problems.iter().take(10).cloned().collect::<Vec<_>>().join("; ");
            let more = problems.len().saturating_sub(10);
            let more = if more > 0 { format!(" (and {more} more)") } else { String::new() };
            return Err(Error::invalid(format!("config_snapshot not loaded, nothing written: {shown}{more}")));
        }

        for (cfg, available) in storages {
            let name = cfg.global_unique_name.clone();
            self.add_storage(cfg).await?;
            if !available {
                self.set_storage_available(&name, false).await?;
            }
            loaded.created += 1;
        }
        for g in groups {
            self.create_group(g).await?;
            loaded.created += 1;
        }
        for req in instances {
            self.register_instance(&req).await?;
            loaded.created += 1;
        }
        Ok(loaded)
    }
}
