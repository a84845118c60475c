//! Instances in the registry: register (idempotent for an identical registration), remove, list,
//! and the `storage_configs` a registration answers with.

use super::{Kind, Registry, tair_format, validate};
use crate::error::{Error, Result};
use crate::scripts;
use crate::wire::{InstanceInfo, RegisterInstanceRequest, StatusCode};

impl Registry {
    /// Registers an instance (idempotent for an identical registration) and returns the
    /// `storage_configs` JSON string of its group's candidate storages.
    pub async fn register_instance(&self, req: &RegisterInstanceRequest) -> Result<String> {
        self.register_instance_as(req, |_| Ok(())).await
    }

    /// [`Registry::register_instance`] for a caller that may not see every instance: when the id
    /// is taken, `may_see` is asked about the stored registration (as the script read it) before
    /// the DUPLICATE_ENTITY message names any of its fields.
    pub async fn register_instance_as(
        &self,
        req: &RegisterInstanceRequest,
        may_see: impl Fn(&InstanceInfo) -> Result<()>,
    ) -> Result<String> {
        // A re-registration (idempotent) is checked against the caps of what exists: lowering a
        // bound must not keep an engine that registered under a higher one from restarting.
        let existing = self.snapshot().instances.contains_key(&req.instance_id);
        let mut info = validate::registration(if existing { &self.lookup_limits } else { &self.limits }, req)?;
        let name = &req.instance_group;
        let Some(group) = self.lookup(Kind::Group, name, |s| s.groups.get(name).cloned()).await? else {
            return Err(Error::invalid(format!(
                "instance group '{name}' does not exist; create it with createInstanceGroup"
            )));
        };
        info.quota_group_name = group.global_quota_group_name.clone();
        let fp = validate::fingerprint(&info);
        let json = serde_json::to_string(&info).map_err(|e| Error::internal(e.to_string()))?;
        let k = &self.keys;
        let res = self
            .write(
                &scripts::REGISTRY_REGISTER_INSTANCE,
                &[&k.version, &k.groups, &k.group_instances, &k.instances, &k.instance_fp],
                &[&info.instance_id, &info.instance_group_name, &json, &fp],
            )
            .await;
        match res {
            Ok(_) => Ok(self.storage_configs(&info.instance_group_name)),
            Err(Error::Status { code: StatusCode::DUPLICATE_ENTITY, message }) => {
                let stored = serde_json::from_str::<InstanceInfo>(&message).ok();
                if let Some(stored) = &stored {
                    may_see(stored)?;
                }
                let diff = stored.map(|stored| validate::registration_diff(&stored, &info)).unwrap_or_default();
                Err(Error::status(
                    StatusCode::DUPLICATE_ENTITY,
                    format!(
                        "instance '{}' is already registered with a different {}; remove it first or use another instance_id",
                        info.instance_id,
                        if diff.is_empty() { "configuration".to_string() } else { diff.join(", ") }
                    ),
                ))
            }
            Err(e) => Err(e),
        }
    }

    /// The group's candidate storages as Tair-format JSON text.
    pub fn storage_configs(&self, group: &str) -> String {
        let snap = self.snapshot();
        let list: Vec<_> = snap.group_storages(group).into_iter().map(tair_format::storage_to_value).collect();
        serde_json::Value::Array(list).to_string()
    }

    /// Removes an instance from the registry. `group`, if not empty, must be its group.
    pub async fn remove_instance(&self, id: &str, group: &str) -> Result<String> {
        validate::instance_id(&self.lookup_limits, id)?;
        let k = &self.keys;
        self.write(
            &scripts::REGISTRY_REMOVE_INSTANCE,
            &[&k.version, &k.group_instances, &k.instances, &k.instance_fp, &k.removed("instance", id)],
            &[id, group, &crate::keys::call_id()],
        )
        .await
    }

    /// Instances of one group, or of all groups when `group` is empty, sorted by id.
    pub async fn list_instances(&self, group: &str) -> Result<Vec<InstanceInfo>> {
        let snap = self.current().await?;
        if !group.is_empty() && !snap.groups.contains_key(group) {
            return Err(Error::invalid(format!("instance group '{group}' does not exist")));
        }
        let mut out: Vec<InstanceInfo> = snap
            .instances
            .values()
            .filter(|i| group.is_empty() || i.instance_group_name == group)
            .map(|i| (**i).clone())
            .collect();
        out.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
        Ok(out)
    }
}
