//! Messages shared by both planes: response header and status codes, storage types, block
//! masks, cache locations, instance descriptions.
//!
//! Field names, enum names and numbers follow Tair KVCM's protobuf definitions so that existing
//! connectors parse our JSON unchanged. Every field has a default, so a response built from
//! `Default::default()` (used for error replies) still carries every field.

use super::codec::{Int64, int64, null_default};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

crate::wire_enum! {
    /// `header.status.code`. OK is 1, not 0.
    pub enum StatusCode {
        UNSPECIFIED = 0,
        OK = 1,
        UNSUPPORTED = 2,
        INTERNAL_ERROR = 3,
        SERVICE_NOT_READY = 4,
        INVALID_ARGUMENT = 5,
        DUPLICATE_ENTITY = 6,
        REACH_MAX_ENTITY_CAPACITY = 7,
        INSTANCE_NOT_EXIST = 8,
        SERVER_NOT_LEADER = 9,
        /// ReportEvent: the reporter is unregistered (HOST_DOWN, or silent past the grace):
        /// send NODE_REGISTER first.
        NODE_NOT_REGISTERED = 10,
        SNAPSHOT_IN_PROGRESS = 11,
        /// ReportEvent: a snapshot came sooner than the minimum interval after the last one.
        SNAPSHOT_RATE_LIMITED = 13,
        SNAPSHOT_REQUIRED = 14,
        IO_ERROR = 20,
        UNKNOWN_ERROR = 100,
    }
}

crate::wire_enum! {
    /// Where a location's bytes live.
    pub enum StorageType {
        ST_UNSPECIFIED = 0,
        ST_3FS = 1,
        ST_MOONCAKE = 2,
        ST_TAIRMEMPOOL = 3,
        ST_NFS = 4,
        ST_VCNS_3FS = 5,
        ST_DUMMY = 6,
        /// A cache tier engines report holding themselves (ReportEvent): host memory…
        ST_EVENT_REPORT_L1P5 = 7,
        /// …or a second tier peers can fetch from.
        ST_EVENT_REPORT_L2 = 8,
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(default)]
pub struct Status {
    #[schema(required = true)]
    pub code: StatusCode,
    #[schema(required = true)]
    pub message: String,
}

/// The header of every reply (required there: replies always carry every field).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(default)]
pub struct Header {
    #[schema(required = true)]
    pub status: Status,
    #[schema(required = true)]
    pub request_id: String,
}

/// A reply that carries nothing but its header (`CommonResponse`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, ToSchema)]
#[schema(as = CommonResponse)]
pub struct Empty {}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct BoolMasks {
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub values: Vec<bool>,
}

/// `BlockMask` on the wire: a oneof of `offset` and `bool_masks`; both absent means "no mask".
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
#[schema(as = BlockMask)]
pub struct WireBlockMask {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bool_masks: Option<BoolMasks>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct LocationSpecInfo {
    pub name: String,
    #[serde(with = "int64")]
    #[schema(value_type = Int64)]
    pub size: i64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct LocationSpecGroup {
    pub name: String,
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub spec_names: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct LocationSpec {
    pub name: String,
    pub uri: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct CacheLocation {
    #[serde(rename = "type")]
    pub storage_type: StorageType,
    pub spec_size: i32,
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub location_specs: Vec<LocationSpec>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct ModelDeployment {
    pub model_name: String,
    pub dtype: String,
    pub use_mla: bool,
    pub tp_size: i32,
    pub dp_size: i32,
    pub lora_name: String,
    pub pp_size: i32,
    pub extra: String,
    pub user_data: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct InstanceInfo {
    pub quota_group_name: String,
    pub instance_group_name: String,
    pub instance_id: String,
    pub block_size: i32,
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub location_spec_infos: Vec<LocationSpecInfo>,
    pub model_deployment: ModelDeployment,
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub location_spec_groups: Vec<LocationSpecGroup>,
}

/// `RegisterInstanceRequest`, the same on both planes.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct RegisterInstanceRequest {
    pub trace_id: String,
    pub instance_group: String,
    pub instance_id: String,
    pub block_size: i32,
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub location_spec_infos: Vec<LocationSpecInfo>,
    pub model_deployment: Option<ModelDeployment>,
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub location_spec_groups: Vec<LocationSpecGroup>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct GetInstanceInfoRequest {
    pub trace_id: String,
    pub instance_id: String,
}

/// Requests that carry nothing but a trace id (`listStorage`, `checkHealth`, …).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct TraceOnly {
    pub trace_id: String,
}
