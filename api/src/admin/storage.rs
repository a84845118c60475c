//! Storage RPCs: addStorage, updateStorage, enableStorage, disableStorage, removeStorage,
//! listStorage.

use crate::reply::{Reply, WireJson};
use crate::state::AppState;
use axum::extract::State;
use kvcm_core::Error;
use kvcm_core::wire::Empty;
use kvcm_core::wire::admin::*;
use kvcm_core::wire::common::TraceOnly;

fn required(storage: Option<StorageConfig>) -> Result<StorageConfig, Error> {
    storage.ok_or_else(|| Error::invalid("storage is required (a StorageConfig with global_unique_name and one spec)"))
}

pub async fn add(State(s): State<AppState>, WireJson(req): WireJson<AddStorageRequest>) -> Reply<Empty> {
    Reply(async { s.registry.add_storage(required(req.storage)?).await.map(|_| Empty {}) }.await)
}

pub async fn update(State(s): State<AppState>, WireJson(req): WireJson<UpdateStorageRequest>) -> Reply<Empty> {
    Reply(async { s.registry.update_storage(required(req.storage)?, req.force_update).await.map(|_| Empty {}) }.await)
}

pub async fn enable(State(s): State<AppState>, WireJson(req): WireJson<StorageNameRequest>) -> Reply<Empty> {
    Reply(s.registry.set_storage_available(&req.storage_unique_name, true).await.map(|_| Empty {}))
}

pub async fn disable(State(s): State<AppState>, WireJson(req): WireJson<StorageNameRequest>) -> Reply<Empty> {
    Reply(s.registry.set_storage_available(&req.storage_unique_name, false).await.map(|_| Empty {}))
}

/// Refused while a group lists the storage (checked atomically by the script) or while an
/// instance still has serving blocks on it (checked first: a storage no group lists receives no
/// new blocks, so the count can only fall). Removing it then would leave blocks whose data no
/// worker could delete.
pub async fn remove(State(s): State<AppState>, WireJson(req): WireJson<StorageNameRequest>) -> Reply<Empty> {
    Reply(
        async {
            let name = &req.storage_unique_name;
            let snap = s.registry.reload().await?;
            if let Some(&id) = snap.storage_ids.get(name) {
                for instance in snap.instances.keys() {
                    let blocks = s.data.instance_usage(instance).await?.get(&id).map(|(_, n)| *n).unwrap_or(0);
                    if blocks > 0 {
                        return Err(Error::invalid(format!(
                            "storage '{name}' still holds {blocks} block(s) of instance '{instance}'; \
                             remove them (removeCache / trimCache) and let the workers delete them first"
                        )));
                    }
                }
                // Files being written, or waiting to be deleted, would be left without an owner:
                // the deleter needs the storage's configuration to delete them. Instances removed
                // from the registry keep their deletion streams until drained: found by a scan.
                let mut instances: std::collections::BTreeSet<String> = snap.instances.keys().cloned().collect();
                let access = kvcm_core::valkey::Access::from_config(&s.config)
                    .map_err(|e| Error::internal(format!("valkey access: {e}")))?;
                kvcm_core::store::discovery::scan_instances(
                    &mut s.conn.clone(),
                    &access,
                    &s.config.namespace,
                    &mut instances,
                )
                .await?;
                for instance in &instances {
                    let p = s.data.pending_on_storage(instance, id).await?;
                    let removed = if snap.instances.contains_key(instance) { "" } else { " (removed, still draining)" };
                    if p.sessions + p.deletions > 0 {
                        return Err(Error::invalid(format!(
                            "storage '{name}' still has {} write session(s) open and {} deletion(s) queued for \
                             instance '{instance}'{removed}; let the sessions finish or expire and the workers \
                             delete the files, then remove it",
                            p.sessions, p.deletions
                        )));
                    }
                    if p.dead_letters > 0 {
                        // Not a reason to refuse: a storage gone for good could never be removed.
                        // They stay listed and can be re-driven after the removal (the deleter
                        // keeps the removed storage's configuration).
                        tracing::warn!(storage = %name, %instance, dead_letters = p.dead_letters,
                            "removing a storage with dead letters on it: their files stay until re-driven");
                    }
                }
            }
            s.registry.remove_storage(name).await.map(|_| Empty {})
        }
        .await,
    )
}

pub async fn list(State(s): State<AppState>, WireJson(_): WireJson<TraceOnly>) -> Reply<ListStorageResponse> {
    Reply(s.registry.list_storages().await.map(|storage| ListStorageResponse { storage }))
}
