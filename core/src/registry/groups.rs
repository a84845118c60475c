//! Instance groups in the registry: create, update (optimistic, by version), remove, get, list.

use super::{Registry, validate};
use crate::error::{Error, Result};
use crate::scripts;
use crate::wire::admin::InstanceGroup;

impl Registry {
    pub async fn create_group(&self, g: InstanceGroup) -> Result<()> {
        let json = validate::group(&self.limits, &g)?;
        let k = &self.keys;
        // Candidates that do not exist yet are accepted (Tair does): skipped for writes until added.
        self.write(&scripts::REGISTRY_CREATE_GROUP, &[&k.version, &k.groups], &[&g.name, &json]).await.map(drop)
    }

    /// Optimistic update: the stored version must equal `current_version`, and the new group's
    /// version must be larger.
    pub async fn update_group(&self, g: InstanceGroup, current_version: i64) -> Result<()> {
        let json = validate::group(&self.lookup_limits, &g)?;
        if g.version <= current_version {
            return Err(Error::invalid(format!(
                "instance_group.version ({}) must be larger than current_version ({current_version})",
                g.version
            )));
        }
        let cur = current_version.to_string();
        let k = &self.keys;
        self.write(&scripts::REGISTRY_UPDATE_GROUP, &[&k.version, &k.groups], &[&g.name, &json, &cur]).await.map(drop)
    }

    pub async fn remove_group(&self, name: &str) -> Result<()> {
        validate::name(&self.lookup_limits, "name", name)?;
        let k = &self.keys;
        self.write(
            &scripts::REGISTRY_REMOVE_GROUP,
            &[&k.version, &k.groups, &k.group_instances, &k.removed("group", name)],
            &[name, &crate::keys::call_id()],
        )
        .await
        .map(drop)
    }

    pub async fn get_group(&self, name: &str) -> Result<InstanceGroup> {
        validate::name(&self.lookup_limits, "name", name)?;
        self.current()
            .await?
            .groups
            .get(name)
            .cloned()
            .ok_or_else(|| Error::invalid(format!("instance group '{name}' does not exist")))
    }

    pub async fn list_groups(&self) -> Result<Vec<InstanceGroup>> {
        Ok(self.current().await?.groups.values().cloned().collect())
    }
}
