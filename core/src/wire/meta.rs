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
use std::borrow::Cow;

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

crate::wire_enum! {
    /// How `GetCacheLocationsByBackend` picks one of several holders of a block in a backend:
    /// the one holding the longest run of the request's blocks from it (`LSS_V6D_PREFIX`), the
    /// one holding the most of them (`LSS_V6D_COVERAGE`), or at random (`LSS_WEIGHTED_RANDOM`;
    /// kvcm weighs holders equally). Unspecified: the prefix rule.
    pub enum LocationSelectStrategy { LSS_UNSPECIFIED = 0, LSS_V6D_PREFIX = 1, LSS_V6D_COVERAGE = 2, LSS_WEIGHTED_RANDOM = 3 }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct BackendLocationSelector {
    pub backend_type: super::common::StorageType,
    pub strategy: LocationSelectStrategy,
}

/// `GetCacheLocationsByBackend`: getCacheLocation's fields, and which backends to answer from
/// (none: every backend holding the block) with how to pick among several holders.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct GetCacheLocationsByBackendRequest {
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
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub backend_selectors: Vec<BackendLocationSelector>,
}

/// One block's locations, one per backend holding it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(default)]
pub struct CacheLocationVector {
    pub locations: Vec<CacheLocation>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct GetCacheLocationsByBackendResponse {
    pub key_locations: Vec<CacheLocationVector>,
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

crate::wire_enum! {
    /// `EventItem.event_type` (ReportEvent).
    pub enum ReportEventType {
        EVENT_UNSPECIFIED = 0,
        EVENT_NODE_REGISTER = 1,
        EVENT_BLOCK_ADD = 2,
        EVENT_BLOCK_DELETE = 3,
        EVENT_HOST_DOWN = 4,
        EVENT_HEARTBEAT = 5,
        EVENT_BLOCK_SNAPSHOT = 6,
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct NodeRegisterEventParams {
    /// Cache tiers the reporter holds blocks in ("gpu", "mem", "disk"…).
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub mediums: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct BlockAddEventParams {
    /// The block key, an int64 in decimal text.
    pub block_key: String,
    /// Deprecated in Tair, ignored: use `specs`.
    pub uri: String,
    pub medium: String,
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub specs: Vec<super::common::LocationSpec>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct BlockDeleteEventParams {
    pub block_key: String,
    pub medium: String,
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub spec_names: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct BlockSnapshotItem {
    pub block_key: String,
    pub medium: String,
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub specs: Vec<super::common::LocationSpec>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct BlockSnapshotEventParams {
    /// Deprecated in Tair, ignored: each item names its medium.
    pub medium: String,
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub blocks: Vec<BlockSnapshotItem>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct HostDownEventParams {}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct HeartbeatEventParams {
    /// Free-form status of the reporter (accepted, bounded, not stored).
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub system_status: std::collections::BTreeMap<String, String>,
}

// Payloads are boxed, so an event takes 48 bytes rather than 280: a request of 20,000 adds
// decodes about a third faster (fewer bytes moved as the list grows; docs/benchmarks.md).
/// One event: `event_type` and the one payload that matches it (a protobuf oneof).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct EventItem {
    pub event_type: ReportEventType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_register: Option<Box<NodeRegisterEventParams>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_add: Option<Box<BlockAddEventParams>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_delete: Option<Box<BlockDeleteEventParams>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_down: Option<HostDownEventParams>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<Box<HeartbeatEventParams>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_snapshot: Option<Box<BlockSnapshotEventParams>>,
}

/// `ReportEvent`: a reporter (`instance_id` + `storage_type` + `host_ip_port`: one engine's own
/// cache tier on one host) tells kvcm what it holds (docs/events.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct ReportEventRequest {
    pub trace_id: String,
    pub instance_id: String,
    pub host_ip_port: String,
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub events: Vec<EventItem>,
    /// `ST_EVENT_REPORT_L1P5` or `ST_EVENT_REPORT_L2`.
    pub storage_type: super::common::StorageType,
}

/// [`ReportEventRequest`] as the HTTP handler decodes it (each type named as its owned one, so
/// that error messages read the same): the strings of block adds — nearly all of a large
/// request — borrowed from the request body where JSON allows (no escapes), so decoding 20,000
/// adds allocates two small blocks per add rather than six (docs/benchmarks.md, "The body
/// decoded borrowing its strings"). Accepts exactly what [`ReportEventRequest`] accepts (a test
/// below decodes the same bodies both ways); the other payloads, rare, are decoded as their
/// owned types.
#[derive(Debug, Default, Deserialize)]
#[serde(default, expecting = "struct ReportEventRequest")]
pub struct ReportEventBody<'a> {
    #[serde(borrow)]
    pub trace_id: Cow<'a, str>,
    #[serde(borrow)]
    pub instance_id: Cow<'a, str>,
    #[serde(borrow)]
    pub host_ip_port: Cow<'a, str>,
    #[serde(borrow, deserialize_with = "null_default")]
    pub events: Vec<EventRef<'a>>,
    pub storage_type: super::common::StorageType,
}

/// [`EventItem`] in a [`ReportEventBody`].
#[derive(Debug, Default, Deserialize)]
#[serde(default, expecting = "struct EventItem")]
pub struct EventRef<'a> {
    pub event_type: ReportEventType,
    pub node_register: Option<Box<NodeRegisterEventParams>>,
    #[serde(borrow)]
    pub block_add: Option<Box<BlockAddRef<'a>>>,
    pub block_delete: Option<Box<BlockDeleteEventParams>>,
    pub host_down: Option<HostDownEventParams>,
    pub heartbeat: Option<Box<HeartbeatEventParams>>,
    pub block_snapshot: Option<Box<BlockSnapshotEventParams>>,
}

/// [`BlockAddEventParams`] in a [`ReportEventBody`].
#[derive(Debug, Default, Deserialize)]
#[serde(default, expecting = "struct BlockAddEventParams")]
pub struct BlockAddRef<'a> {
    #[serde(borrow)]
    pub block_key: Cow<'a, str>,
    /// Deprecated in Tair, ignored.
    #[serde(borrow)]
    pub uri: Cow<'a, str>,
    #[serde(borrow)]
    pub medium: Cow<'a, str>,
    #[serde(borrow, deserialize_with = "null_default")]
    pub specs: Vec<SpecRef<'a>>,
}

/// [`super::common::LocationSpec`] in a [`ReportEventBody`].
#[derive(Debug, Default, Deserialize)]
#[serde(default, expecting = "struct LocationSpec")]
pub struct SpecRef<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(borrow)]
    pub uri: Cow<'a, str>,
}

impl ReportEventRequest {
    /// The request as [`ReportEventBody`] (for callers that build the owned request, as the
    /// worker's vLLM ingestion does): block adds borrow their strings, the other payloads are
    /// cloned.
    pub fn body(&self) -> ReportEventBody<'_> {
        // Destructured whole, so that a field added to the owned messages does not compile
        // until the borrowed ones decode it too.
        let ReportEventRequest { trace_id, instance_id, host_ip_port, events, storage_type } = self;
        let events = events
            .iter()
            .map(|e| {
                let EventItem {
                    event_type,
                    node_register,
                    block_add,
                    block_delete,
                    host_down,
                    heartbeat,
                    block_snapshot,
                } = e;
                EventRef {
                    event_type: *event_type,
                    node_register: node_register.clone(),
                    block_add: block_add.as_deref().map(|a| {
                        let BlockAddEventParams { block_key, uri, medium, specs } = a;
                        Box::new(BlockAddRef {
                            block_key: Cow::Borrowed(block_key),
                            uri: Cow::Borrowed(uri),
                            medium: Cow::Borrowed(medium),
                            specs: specs
                                .iter()
                                .map(|s| {
                                    let super::common::LocationSpec { name, uri } = s;
                                    SpecRef { name: Cow::Borrowed(name), uri: Cow::Borrowed(uri) }
                                })
                                .collect(),
                        })
                    }),
                    block_delete: block_delete.clone(),
                    host_down: host_down.clone(),
                    heartbeat: heartbeat.clone(),
                    block_snapshot: block_snapshot.clone(),
                }
            })
            .collect();
        ReportEventBody {
            trace_id: Cow::Borrowed(trace_id),
            instance_id: Cow::Borrowed(instance_id),
            host_ip_port: Cow::Borrowed(host_ip_port),
            events,
            storage_type: *storage_type,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct ReportEventResponse {
    /// Empty when every event succeeded; else one code per event, in order.
    pub item_results: Vec<super::common::StatusCode>,
    /// The reporter's committed generation: opaque, compare for equality only ('' if none).
    pub committed_snapshot_version: String,
    /// With SNAPSHOT_RATE_LIMITED: how long to wait before the next snapshot.
    #[serde(with = "super::codec::int64")]
    #[schema(value_type = Int64)]
    pub retry_after_ms: i64,
    /// The reporter had no generation when the request arrived: send a full snapshot.
    pub snapshot_required: bool,
    pub extra_info: String,
}

/// `GetHostCacheState`: for a prompt, how much of its prefix each live engine host holds — the
/// input a router needs to send it where the prefix already is.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct GetHostCacheStateRequest {
    pub trace_id: String,
    pub instance_id: String,
    /// QT_PREFIX_MATCH (QT_UNSPECIFIED means it too).
    pub query_type: QueryType,
    #[serde(with = "int64_vec")]
    #[schema(value_type = Option<Vec<Int64>>)]
    pub block_cache_keys: Vec<i64>,
    /// Only these media count (empty: all).
    #[serde(deserialize_with = "null_default")]
    #[schema(nullable)]
    pub medium: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(default)]
pub struct HostCacheMatch {
    pub host_ip_port: String,
    /// Leading blocks the host holds itself (any of its tiers).
    #[serde(with = "super::codec::int64")]
    #[schema(value_type = Int64)]
    pub local: i64,
    /// Blocks of the prefix past `local` it could fetch from one peer's L2 tier.
    #[serde(with = "super::codec::int64")]
    #[schema(value_type = Int64)]
    pub p2p_1_fetch: i64,
    /// The prefix it holds with that peer's help (`local` when no peer helps).
    #[serde(with = "super::codec::int64")]
    #[schema(value_type = Int64)]
    pub p2p_1_total_match: i64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct GetHostCacheStateResponse {
    /// Hosts holding at least the first block, by host_ip_port.
    pub hosts: Vec<HostCacheMatch>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `body` both ways: the same message, or the same error.
    fn same(body: &str) {
        let owned = serde_json::from_str::<ReportEventRequest>(body);
        let borrowed = serde_json::from_str::<ReportEventBody>(body);
        match (owned, borrowed) {
            (Ok(o), Ok(b)) => assert_eq!(format!("{:?}", o.body()), format!("{b:?}"), "{body}"),
            (Err(o), Err(b)) => assert_eq!(o.to_string(), b.to_string(), "{body}"),
            (o, b) => panic!("{body}: owned {:?}, borrowed {:?}", o.map(|_| ()), b.map(|_| ())),
        }
    }

    #[test]
    fn the_borrowed_report_event_decodes_exactly_as_the_owned_one() {
        let full = r#"{"trace_id": "t\u0031", "instance_id": "i", "host_ip_port": "h:1",
            "storage_type": "ST_EVENT_REPORT_L2", "unknown": [1, {"x": null}], "events": [
            {"event_type": "EVENT_NODE_REGISTER", "node_register": {"mediums": ["gpu", "c\"pu"]}},
            {"event_type": 5, "heartbeat": {"system_status": {"k": "v"}}},
            {"event_type": "EVENT_BLOCK_ADD", "block_add": {"block_key": "12", "uri": "", "medium": "g\u0070u",
                "specs": [{"name": "tp0", "uri": "x://a\/b"}, {"name": "tp1", "uri": "y://\u00e9"}]}},
            {"event_type": "EVENT_BLOCK_ADD", "block_add": {"block_key": "13", "medium": "gpu", "specs": null}},
            {"event_type": "EVENT_BLOCK_DELETE", "block_delete": {"block_key": "12", "medium": "gpu", "spec_names": ["tp0"]}},
            {"event_type": "EVENT_BLOCK_SNAPSHOT", "block_snapshot": {"blocks": [{"block_key": "1", "medium": "gpu",
                "specs": [{"name": "tp0", "uri": "x://1"}]}]}},
            {"event_type": "EVENT_HOST_DOWN", "host_down": {}},
            {"block_add": {"block_key": "14", "medium": "gpu", "extra": 1, "specs": [{"name": "tp0", "uri": "x://1", "more": true}]}}
        ]}"#;
        same(full);
        // Every prefix of it (truncated bodies), and wrong types in each place.
        for end in 0..full.len() {
            if full.is_char_boundary(end) {
                same(&full[..end]);
            }
        }
        for body in [
            r#"{"events": null}"#,
            r#"{"events": {}}"#,
            r#"{"events": [null]}"#,
            r#"{"events": ["x"]}"#,
            r#"{"instance_id": 7}"#,
            r#"{"instance_id": null}"#,
            r#"{"events": [{"block_add": "x"}]}"#,
            r#"{"events": [{"block_add": {"block_key": 5}}]}"#,
            r#"{"events": [{"block_add": {"uri": 3}}]}"#,
            r#"{"events": [{"block_add": {"specs": ["x"]}}]}"#,
            r#"{"events": [{"block_add": {"specs": [{"name": null}]}}]}"#,
            r#"{"events": [{"block_add": {"medium": "\ud800"}}]}"#,
            r#"{"events": [{"event_type": "EVENT_NOPE"}]}"#,
            r#"{"events": [], "events": []}"#,
            r#"{"events": [{"block_add": {"block_key": "1", "block_key": "2"}}]}"#,
            r#"["i", "h", []]"#,
        ] {
            same(body);
        }
    }
}
