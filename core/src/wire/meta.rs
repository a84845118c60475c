//! Meta-plane messages (`MetaService` of Tair KVCM) used by engines.

use super::common::InstanceInfo;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RegisterInstanceResponse {
    /// JSON text: the group's candidate storages, in the startup-config format.
    pub storage_configs: String,
}

/// The meta plane's `GetInstanceInfoResponse` (differs from the admin one).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct MetaGetInstanceInfoResponse {
    pub instance_group: String,
    pub instance_info: InstanceInfo,
}
