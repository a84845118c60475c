//! Storages in the registry: add, update (with `force`), availability and health, remove, list.
//! Each write re-reads the stored storages and checks the new one against them (roots may not
//! overlap) inside its script, retried while another admin's storage write races it.

use super::{Registry, parse_storages, retry_on_conflict, validate};
use crate::error::{Error, Result};
use crate::scripts::{self, status_reply};
use crate::wire::admin::StorageConfig;
use std::collections::BTreeMap;

impl Registry {
    pub async fn add_storage(&self, mut cfg: StorageConfig) -> Result<()> {
        validate::storage(&self.limits, &mut cfg)?;
        retry_on_conflict(|| self.try_add_storage(&cfg)).await
    }

    async fn try_add_storage(&self, cfg: &StorageConfig) -> Result<bool> {
        let stored = self.stored_storages().await?;
        if let Some(existing) = stored.get(&cfg.global_unique_name) {
            // Exactly this storage, stored before kvcm answered `storage_type`: done already.
            let same = serde_json::from_str::<StorageConfig>(existing)
                .is_ok_and(|e| validate::normalized(&e) == validate::normalized(cfg));
            if same {
                return Ok(true);
            }
        } else {
            // (An existing name is left to the script, which answers DUPLICATE_ENTITY.)
            validate::roots_disjoint(cfg, &parse_storages(&stored))?;
        }
        let json = serde_json::to_string(cfg).map_err(|e| Error::internal(e.to_string()))?;
        let k = &self.keys;
        let mut args: Vec<&str> = vec![&cfg.global_unique_name, &json];
        args.extend(stored.iter().flat_map(|(name, json)| [name.as_str(), json.as_str()]));
        self.storage_write(
            &scripts::REGISTRY_ADD_STORAGE,
            &[&k.version, &k.storages, &k.storage_ids, &k.storage_id_seq],
            &args,
        )
        .await
    }

    /// The stored storage configs, name → JSON, read fresh (not from the cached snapshot). The
    /// roots check runs against them, and the add/update scripts refuse to write if the hash
    /// changed meanwhile, so two admins adding nested roots at once cannot both pass the check.
    async fn stored_storages(&self) -> Result<BTreeMap<String, String>> {
        Ok(redis::cmd("HGETALL").arg(&self.keys.storages).query_async(&mut self.conn()).await?)
    }

    /// Replaces a storage's config. Changing where its blocks live (type, root path, mount
    /// point, mooncake master…) requires `force`: blocks already written there would no longer
    /// be found by their URIs.
    pub async fn update_storage(&self, mut cfg: StorageConfig, force: bool) -> Result<()> {
        validate::storage(&self.lookup_limits, &mut cfg)?;
        retry_on_conflict(|| self.try_update_storage(&cfg, force)).await
    }

    async fn try_update_storage(&self, cfg: &StorageConfig, force: bool) -> Result<bool> {
        let name = cfg.global_unique_name.clone();
        let k = &self.keys;
        let mut others = self.stored_storages().await?;
        let Some(current) = others.remove(&name) else {
            return Err(Error::invalid(format!("storage '{name}' does not exist; add it with addStorage")));
        };
        let old: StorageConfig = serde_json::from_str(&current).map_err(|e| Error::internal(e.to_string()))?;
        if !force && validate::storage_placement(&old) != validate::storage_placement(cfg) {
            return Err(Error::invalid(format!(
                "this update changes where storage '{name}' keeps its blocks (type, path or key space); \
                 blocks already written there would be lost to kvcm. Set force_update to do it anyway"
            )));
        }
        validate::roots_disjoint(cfg, &parse_storages(&others))?;
        let json = serde_json::to_string(cfg).map_err(|e| Error::internal(e.to_string()))?;
        let mut args: Vec<&str> = vec![&name, &current, &json];
        args.extend(others.iter().flat_map(|(name, json)| [name.as_str(), json.as_str()]));
        self.storage_write(&scripts::REGISTRY_UPDATE_STORAGE, &[&k.version, &k.storages], &args).await
    }

    pub async fn set_storage_available(&self, name: &str, available: bool) -> Result<()> {
        validate::name(&self.lookup_limits, "storage_unique_name", name)?;
        let k = &self.keys;
        let flag = if available { "1" } else { "0" };
        self.write(
            &scripts::REGISTRY_SET_STORAGE_AVAILABLE,
            &[&k.version, &k.storages, &k.storages_disabled],
            &[name, flag],
        )
        .await
        .map(drop)
    }

    /// Records worker `worker`'s health check of a storage; the storage is unhealthy only while
    /// no worker's verdict younger than `fresh_ms` finds it healthy. Returns whether the
    /// storage's health changed (the version bumps only then); `None` when the storage is gone
    /// (removed since the caller read the registry).
    pub async fn set_storage_health(
        &self,
        name: &str,
        healthy: bool,
        worker: &str,
        fresh_ms: u64,
    ) -> Result<Option<bool>> {
        let k = &self.keys;
        let flag = if healthy { "1" } else { "0" };
        let (now, fresh) = (crate::store::now_ms().to_string(), fresh_ms.to_string());
        let reply = self
            .run_reply(
                &scripts::REGISTRY_SET_STORAGE_HEALTH,
                &[&k.version, &k.storages, &k.storages_unhealthy, &k.storage_health],
                &[name, flag, worker, &now, &fresh],
            )
            .await?;
        if reply.0 == scripts::NO_SUCH_STORAGE {
            return Ok(None);
        }
        Ok(Some(status_reply(reply)? == "1"))
    }

    pub async fn remove_storage(&self, name: &str) -> Result<()> {
        validate::name(&self.lookup_limits, "storage_unique_name", name)?;
        let k = &self.keys;
        self.write(
            &scripts::REGISTRY_REMOVE_STORAGE,
            &[
                &k.version,
                &k.storages,
                &k.storages_disabled,
                &k.groups,
                &k.storage_ids,
                &k.storages_unhealthy,
                &k.removed("storage", name),
                &k.removed_storages,
            ],
            &[name, &crate::keys::call_id()],
        )
        .await
        .map(drop)
    }

    /// The configuration a removed storage had, by id (`removed_storages`): for deleting files a
    /// straggler left on it. `None` for ids never removed.
    pub async fn removed_storage(&self, id: u16) -> Result<Option<StorageConfig>> {
        let json: Option<String> =
            redis::cmd("HGET").arg(&self.keys.removed_storages).arg(id).query_async(&mut self.conn()).await?;
        json.map(|j| serde_json::from_str(&j).map_err(|e| Error::internal(format!("removed storage {id}: {e}"))))
            .transpose()
    }

    pub async fn list_storages(&self) -> Result<Vec<StorageConfig>> {
        Ok(self.current().await?.storages.values().cloned().collect())
    }
}
