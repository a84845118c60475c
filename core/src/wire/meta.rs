//! Meta-plane messages (`MetaService` of Tair KVCM) used by engines.

use super::common::InstanceInfo;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct RegisterInstanceResponse {
    /// JSON text: the group's candidate storages, in the startup-config format.
    pub storage_configs: String,
}

/// The meta plane's `GetInstanceInfoResponse` (differs from the admin one).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct MetaGetInstanceInfoResponse {
    pub instance_group: String,
    pub instance_info: InstanceInfo,
}

use super::codec::{Int64, int64_vec, null_default};
use super::common::{CacheLocation, WireBlockMask};
use crate::store::get_cache_location::QueryType;
use crate::store::trim_cache::TrimStrategy;

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct GetCacheLocationRequest {
    pub trace_id: String,
    pub instance_id: String,
    pub query_type: QueryType,
    #[serde(with = "int64_vec")]
    #[schema(value_type = Option<Vec<Int64>>)]
    pub block_keys: Vec<i64>,
    #[serde(with = "int64_vec")]
    #[schema(value_type = Option<Vec<Int64>>)]
    pub token_ids: Vec<i64>,
    pub block_mask: Option<WireBlockMask>,
    pub sw_size: i32,
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub location_spec_names: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct LocationsResponse {
    pub locations: Vec<CacheLocation>,
}

/// `GetCacheLocationLen`: how many blocks `getCacheLocation` would return as real locations,
/// without the locations (cheaper for schedulers). No mask or spec filter, as in Tair.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct GetCacheLocationLenRequest {
    pub trace_id: String,
    pub instance_id: String,
    pub query_type: QueryType,
    #[serde(with = "int64_vec")]
    #[schema(value_type = Option<Vec<Int64>>)]
    pub block_keys: Vec<i64>,
    #[serde(with = "int64_vec")]
    #[schema(value_type = Option<Vec<Int64>>)]
    pub token_ids: Vec<i64>,
    pub sw_size: i32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct GetCacheLocationLenResponse {
    /// The matched prefix (QT_PREFIX_MATCH), the hits (QT_BATCH_GET) or the window's blocks
    /// (QT_REVERSE_ROLL_SW_MATCH).
    #[serde(with = "super::codec::int64")]
    #[schema(value_type = Int64)]
    pub cache_location_len: i64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct GetClusterInfoRequest {
    pub trace_id: String,
    pub instance_id: String,
}

/// A node's meta-plane endpoint (Tair's `MetaNodeEndpoint`: no admin ports).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct MetaNodeEndpoint {
    pub node_id: String,
    pub host: String,
    pub meta_rpc_port: i32,
    pub meta_http_port: i32,
    pub custom_info: String,
}

/// `GetClusterInfo`: who serves. kvcm has no leader — every frontend serves every request — so
/// each names itself as the leader, and `custom_info` says so.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct GetClusterInfoResponse {
    pub self_node_id: String,
    pub leader_node_id: String,
    pub leader_endpoint: MetaNodeEndpoint,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct GetCacheMetaRequest {
    pub trace_id: String,
    pub instance_id: String,
    #[serde(with = "int64_vec")]
    #[schema(value_type = Option<Vec<Int64>>)]
    pub block_keys: Vec<i64>,
    #[serde(with = "int64_vec")]
    #[schema(value_type = Option<Vec<Int64>>)]
    pub token_ids: Vec<i64>,
    pub block_mask: Option<WireBlockMask>,
    pub detail_level: i32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct GetCacheMetaResponse {
    pub locations: Vec<CacheLocation>,
    pub metas: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct StartWriteCacheRequest {
    pub trace_id: String,
    pub instance_id: String,
    #[serde(with = "int64_vec")]
    #[schema(value_type = Option<Vec<Int64>>)]
    pub block_keys: Vec<i64>,
    #[serde(with = "int64_vec")]
    #[schema(value_type = Option<Vec<Int64>>)]
    pub token_ids: Vec<i64>,
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub location_spec_group_names: Vec<String>,
    pub write_timeout_seconds: i32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct StartWriteCacheResponse {
    pub write_session_id: String,
    pub block_mask: WireBlockMask,
    pub locations: Vec<CacheLocation>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct FinishWriteCacheRequest {
    pub trace_id: String,
    pub instance_id: String,
    pub write_session_id: String,
    pub success_blocks: Option<WireBlockMask>,
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub locations: Vec<CacheLocation>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct RemoveCacheRequest {
    pub trace_id: String,
    pub instance_id: String,
    #[serde(with = "int64_vec")]
    #[schema(value_type = Option<Vec<Int64>>)]
    pub block_keys: Vec<i64>,
    #[serde(with = "int64_vec")]
    #[schema(value_type = Option<Vec<Int64>>)]
    pub token_ids: Vec<i64>,
    pub block_mask: Option<WireBlockMask>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct TrimCacheRequest {
    pub trace_id: String,
    pub instance_id: String,
    pub strategy: TrimStrategy,
    pub begin_timestamp: i32,
    pub end_timestamp: i32,
}
