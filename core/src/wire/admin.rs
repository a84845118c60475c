//! Admin-plane messages (`AdminService` of Tair KVCM): storages, instance groups, instance
//! listing, accounts, metrics, health and cluster info.
//!
//! Storage and group messages are also what the registry stores, so fields kvcm does not use
//! (`global_quota_group_name`, `data_storage_strategy`, `meta_indexer_config`, …) survive a
//! round trip unchanged.

use super::codec::{Int64, UInt64, int64, null_default, uint64};
use super::common::{InstanceInfo, StorageType};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct LocalStorageSpec {
    pub path: String,
}

/// Tair's `EventReportStorageSpec`: a backend that takes ReportEvent for one engine tier (the
/// storage's `storage_type`, `ST_EVENT_REPORT_L1P5` or `_L2`), with that tier's liveness and
/// snapshot settings (0: kvcm's `event_report_*` config keys).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct EventReportStorageSpec {
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub heartbeat_timeout_ms: i64,
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub cleanup_grace_ms: i64,
    /// Accepted and echoed: kvcm checks liveness at read time, it has no checking loop.
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub liveness_check_interval_ms: i64,
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub snapshot_min_interval_ms: i64,
    /// Accepted and echoed: a kvcm snapshot is one atomic script, there is nothing to drain.
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub snapshot_delta_drain_timeout_ms: i64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct NfsStorageSpec {
    pub root_path: String,
    pub key_count_per_file: i32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct ThreeFsStorageSpec {
    pub cluster_name: String,
    pub mountpoint: String,
    pub root_dir: String,
    pub key_count_per_file: i32,
    pub touch_file_when_create: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct VcnsThreeFsStorageSpec {
    pub cluster_name: String,
    pub mountpoint: String,
    pub root_dir: String,
    pub key_count_per_file: i32,
    pub touch_file_when_create: bool,
    pub remote_host: String,
    pub remote_port: i32,
    pub meta_storage_uri: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct MooncakeStorageSpec {
    pub local_hostname: String,
    pub metadata_connstring: String,
    pub protocol: String,
    pub rdma_device: String,
    pub master_service_entry: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct TairMemPoolStorageSpec {
    pub domain: String,
    pub timeout: i32,
    pub service_discovery_url: String,
}

/// `StorageConfig`: a name plus exactly one spec (a protobuf oneof: unset members are omitted).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct StorageConfig {
    pub global_unique_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalStorageSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threefs: Option<ThreeFsStorageSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mooncake: Option<MooncakeStorageSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tair_mem_pool: Option<TairMemPoolStorageSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nfs: Option<NfsStorageSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vcnsthreefs: Option<VcnsThreeFsStorageSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_report: Option<EventReportStorageSpec>,
    pub check_storage_available_when_open: bool,
    /// Tair's `storage_type`: required for an event-report storage (`ST_EVENT_REPORT_L1P5` or
    /// `_L2`); otherwise the spec's type, filled in by kvcm (a different one is refused).
    #[serde(rename = "storage_type")]
    pub declared_type: StorageType,
    /// kvcm extension (Tair keeps this internal): false after `disableStorage`.
    /// Ignored on input; the registry owns it.
    #[serde(default = "yes")]
    #[schema(read_only, default = true)]
    pub is_available: bool,
    /// kvcm extension: false while the storage fails the workers' health checks.
    /// Ignored on input.
    #[serde(default = "yes")]
    #[schema(read_only, default = true)]
    pub is_healthy: bool,
}

fn yes() -> bool {
    true
}

impl StorageConfig {
    /// The storage type of the spec that is set, or `None` when no spec (or several) is set.
    pub fn storage_type(&self) -> Option<StorageType> {
        let set = [
            self.local.is_some(),
            self.threefs.is_some(),
            self.mooncake.is_some(),
            self.tair_mem_pool.is_some(),
            self.nfs.is_some(),
            self.vcnsthreefs.is_some(),
            self.event_report.is_some(),
        ];
        if set.iter().filter(|s| **s).count() != 1 {
            return None;
        }
        Some(if self.event_report.is_some() {
            self.declared_type
        } else if self.local.is_some() || self.nfs.is_some() {
            StorageType::ST_NFS
        } else if self.threefs.is_some() {
            StorageType::ST_3FS
        } else if self.mooncake.is_some() {
            StorageType::ST_MOONCAKE
        } else if self.tair_mem_pool.is_some() {
            StorageType::ST_TAIRMEMPOOL
        } else {
            StorageType::ST_VCNS_3FS
        })
    }
}

crate::wire_enum! {
    /// Tair's policies, plus one of kvcm's own: `POLICY_ADAPTIVE` (100, far from Tair's numbers),
    /// leaf eviction by learned hit density (docs/worker.md, docs/optimizer.md).
    pub enum ReclaimPolicy {
        POLICY_UNSPECIFIED = 0,
        POLICY_LRU = 1,
        POLICY_LFU = 2,
        POLICY_TTL = 3,
        POLICY_ADAPTIVE = 100,
    }
}

crate::wire_enum! {
    /// `CacheConfig.data_storage_strategy`; stored and echoed, the candidates order decides.
    pub enum CachePreferStrategy {
        CPS_UNSPECIFIED = 0,
        CPS_ALWAYS_3FS = 1,
        CPS_PREFER_3FS = 2,
        CPS_ALWAYS_MOONCAKE = 3,
        CPS_PREFER_MOONCAKE = 4,
        CPS_ALWAYS_TAIR_MEMPOOL = 5,
        CPS_PREFER_TAIR_MEMPOOL = 6,
        CPS_ALWAYS_VCNS_3FS = 7,
        CPS_PREFER_VCNS_3FS = 8,
    }
}

crate::wire_enum! {
    pub enum AccountRole { ROLE_USER = 0, ROLE_ADMIN = 1 }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(default)]
pub struct TriggerStrategy {
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub used_size: i64,
    pub used_percentage: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(default)]
pub struct QuotaConfig {
    pub storage_type: StorageType,
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub capacity: i64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(default)]
pub struct InstanceGroupQuota {
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub capacity: i64,
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub quota_config: Vec<QuotaConfig>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(default)]
pub struct CacheReclaimStrategy {
    pub storage_unique_name: String,
    pub reclaim_policy: ReclaimPolicy,
    pub trigger_strategy: TriggerStrategy,
    pub trigger_period_seconds: i32,
    pub reclaim_step_size: i32,
    pub reclaim_step_percentage: i32,
    pub delay_before_delete_ms: i32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(default)]
pub struct CacheConfig {
    pub reclaim_strategy: CacheReclaimStrategy,
    pub data_storage_strategy: CachePreferStrategy,
    /// Tair's meta indexer tuning; kvcm keeps its metadata in Valkey and echoes this back.
    #[serde(deserialize_with = "null_default")]
    #[schema(value_type = Option<Object>)]
    pub meta_indexer_config: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(default)]
pub struct InstanceGroup {
    pub name: String,
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub storage_candidates: Vec<String>,
    pub global_quota_group_name: String,
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub max_instance_count: i64,
    pub quota: InstanceGroupQuota,
    pub cache_config: CacheConfig,
    pub user_data: String,
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub version: i64,
    /// Tair's: the event-report storages that take this group's ReportEvents (one per tier).
    /// Empty: every tier's reporters follow kvcm's `event_report_*` config keys.
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub event_report_storage_candidates: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct Account {
    pub user_name: String,
    pub role: AccountRole,
    /// kvcm extension: the instance groups a ROLE_USER account may act on (`*` = all).
    pub instance_groups: Vec<String>,
}

/// kvcm extension: an API key as listed (never its token).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct ApiKey {
    /// The key's public id (16 hex digits), also the part after `kvcm_` of its token.
    pub key_id: String,
    pub name: String,
    pub role: AccountRole,
    /// The instance groups a ROLE_USER key may act on (`*` = all).
    pub instance_groups: Vec<String>,
    /// Creation time, unix milliseconds.
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub create_time_ms: i64,
}

// ---- requests ----

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(default)]
pub struct AddStorageRequest {
    pub trace_id: String,
    pub storage: Option<StorageConfig>,
}

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(default)]
pub struct UpdateStorageRequest {
    pub trace_id: String,
    pub storage: Option<StorageConfig>,
    pub force_update: bool,
}

/// enableStorage / disableStorage / removeStorage.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(default)]
pub struct StorageNameRequest {
    pub trace_id: String,
    pub storage_unique_name: String,
}

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(default)]
pub struct CreateInstanceGroupRequest {
    pub trace_id: String,
    pub instance_group: Option<InstanceGroup>,
}

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(default)]
pub struct UpdateInstanceGroupRequest {
    pub trace_id: String,
    pub instance_group: Option<InstanceGroup>,
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub current_version: i64,
}

/// removeInstanceGroup / getInstanceGroup.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(default)]
pub struct GroupNameRequest {
    pub trace_id: String,
    pub name: String,
}

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(default)]
pub struct RemoveInstanceRequest {
    pub trace_id: String,
    pub instance_group: String,
    pub instance_id: String,
}

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(default)]
pub struct ListInstanceInfoRequest {
    pub trace_id: String,
    pub instance_group_name: String,
}

// (Its `Debug` omits the password.)
#[derive(Clone, Default, Deserialize, ToSchema)]
#[serde(default)]
pub struct AddAccountRequest {
    pub trace_id: String,
    pub user_name: String,
    pub password: String,
    pub role: AccountRole,
    /// kvcm extension: instance groups a ROLE_USER account may act on (`*` = all). Tair's
    /// requests omit it: such an account may act on no instance group until re-created.
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub instance_groups: Vec<String>,
}

impl std::fmt::Debug for AddAccountRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddAccountRequest")
            .field("user_name", &self.user_name)
            .field("role", &self.role)
            .field("instance_groups", &self.instance_groups)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for CreateApiKeyResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateApiKeyResponse").field("api_key", &self.api_key).finish_non_exhaustive()
    }
}

/// kvcm extension: `createApiKey`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(default)]
pub struct CreateApiKeyRequest {
    pub trace_id: String,
    /// What the key is for (e.g. the engine fleet using it); shown by listApiKeys.
    pub name: String,
    pub role: AccountRole,
    /// The instance groups a ROLE_USER key may act on (`*` = all); none for ROLE_ADMIN.
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub instance_groups: Vec<String>,
}

/// kvcm extension: `revokeApiKey`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(default)]
pub struct RevokeApiKeyRequest {
    pub trace_id: String,
    pub key_id: String,
}

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(default)]
pub struct DeleteAccountRequest {
    pub trace_id: String,
    pub user_name: String,
}

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(default)]
pub struct UpdateLeaderElectorConfigRequest {
    pub trace_id: String,
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub campaign_delay_time_ms: i64,
}

/// Tair's `UpdateLoggerRequest`: the log level of this process (`DEBUG`, `INFO`, `WARN`,
/// `ERROR`), of one module (a `tracing` target such as `kvcm_core::store`) when `module_name` is
/// set — Tair reserves the field; kvcm honours it.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(default)]
pub struct UpdateLoggerRequest {
    pub trace_id: String,
    pub module_name: String,
    pub log_level: String,
}

/// Tair's `LoadConfigSnapshotRequest`: a document `GenConfigSnapshot` made
/// (`kvcm_core::registry::config_snapshot`).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(default)]
pub struct LoadConfigSnapshotRequest {
    pub trace_id: String,
    pub config_snapshot: String,
}

// ---- responses (header added by the API layer) ----

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct ListStorageResponse {
    pub storage: Vec<StorageConfig>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct GetInstanceGroupResponse {
    pub instance_group: InstanceGroup,
    /// kvcm extension, present only when non-empty: the group's storage candidates that do not
    /// exist (yet). They are skipped when choosing where to write and used once added.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_storage_candidates: Vec<String>,
}

/// Tair's `ConfigSnapShotResponse`: the registry's configuration as one JSON document.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct ConfigSnapShotResponse {
    pub config_snapshot: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct ListInstanceGroupResponse {
    pub instance_group: Vec<InstanceGroup>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct AdminGetInstanceInfoResponse {
    pub instance_info: InstanceInfo,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct ListInstanceInfoResponse {
    pub instance_info: Vec<InstanceInfo>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct ListAccountResponse {
    pub accounts: Vec<Account>,
}

/// kvcm extension: the new key, with its token — shown this once, never again.
// (Its `Debug` omits the token.)
#[derive(Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct CreateApiKeyResponse {
    /// `kvcm_<key id>_<secret>`: send it as `Authorization: Bearer <token>`. Not stored.
    pub token: String,
    pub api_key: ApiKey,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct ListApiKeysResponse {
    pub api_keys: Vec<ApiKey>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MetricValue {
    #[schema(value_type = Int64)]
    IntValue(#[serde(with = "int64")] i64),
    FloatValue(f64),
    StringValue(String),
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(default)]
pub struct MetricsTag {
    pub tag_key: String,
    pub tag_value: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct MetricsData {
    pub metric_name: String,
    pub metric_value: MetricValue,
    pub metric_tags: Vec<MetricsTag>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct GetMetricsResponse {
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub timestamp: i64,
    pub metrics: Vec<MetricsData>,
    pub extra_data: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct CheckHealthResponse {
    pub is_leader: bool,
    pub is_health: bool,
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub elector_last_loop_time_ms: i64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct NodeEndpoint {
    pub node_id: String,
    pub host: String,
    pub meta_rpc_port: i32,
    pub meta_http_port: i32,
    pub admin_rpc_port: i32,
    pub admin_http_port: i32,
    pub custom_info: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct GetManagerClusterInfoResponse {
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub info_updated_time: i64,
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub self_leader_expiration_time: i64,
    pub self_node_id: String,
    pub leader_node_id: String,
    pub leader_endpoint: NodeEndpoint,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct GetLeaderElectorConfigResponse {
    #[serde(with = "uint64")]
    #[schema(value_type = UInt64)]
    pub campaign_delay_time_ms: u64,
}

/// kvcm extension: listDeadLetters — an instance's deletions given up on, oldest first.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(default)]
pub struct ListDeadLettersRequest {
    pub trace_id: String,
    /// Registered, or removed and still draining.
    pub instance_id: String,
    /// Only dead letters after this id (`next_start_after` of the previous page); "" = oldest.
    pub start_after: String,
    /// At most this many (1..=1000; 0 = 100).
    pub limit: i32,
}

/// kvcm extension: one deletion given up on.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(default)]
pub struct DeadLetter {
    /// The dead letter's id (what redriveDeadLetters takes).
    pub id: String,
    /// When it was given up on, unix milliseconds.
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub dead_since_ms: i64,
    /// The block whose location was being deleted (0 for a packed file's own deletion).
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub block_key: i64,
    /// The packed file (`<first block hex>_<hash hex>`) for a packed file's own deletion, else "".
    pub packed_file: String,
    /// The storage (its `global_unique_name`; `#<id>` if it no longer exists).
    pub storage: String,
    /// Why it was queued (`removed`, `evicted`, `write_failed`, `trim_all`, `file_released`, …).
    pub reason: String,
    /// The last attempt's error.
    pub error: String,
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub attempts: i64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct ListDeadLettersResponse {
    pub dead_letters: Vec<DeadLetter>,
    /// Dead letters of the instance in all.
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub total: i64,
    /// Pass as `start_after` for the next page; "" when this page is the last.
    pub next_start_after: String,
}

/// kvcm extension: redriveDeadLetters — queue dead letters for deletion again (their attempts
/// start over), once their cause is fixed.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(default)]
pub struct RedriveDeadLettersRequest {
    pub trace_id: String,
    pub instance_id: String,
    /// The dead letters to re-drive (at most 1000); empty: the `limit` oldest.
    pub ids: Vec<String>,
    /// With no `ids`: at most this many (1..=1000; 0 = 1000).
    pub limit: i32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct RedriveDeadLettersResponse {
    /// Dead letters queued for deletion again.
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub redriven: i64,
    /// Ids given that are not dead letters (already re-driven, or never were).
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub not_found: i64,
}
