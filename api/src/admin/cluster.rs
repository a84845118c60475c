//! Cluster and observability RPCs: getMetrics, checkHealth, getManagerClusterInfo, and the
//! leader RPCs, which answer UNSUPPORTED because kvcm has no leader.
//!
//! For connectors that look for "the leader", every frontend reports itself as leader: each
//! one serves every request, so whichever a client picks is right.

use crate::reply::{Reply, WireJson};
use crate::state::AppState;
use axum::extract::State;
use kvcm_core::Error;
use kvcm_core::wire::admin::*;
use kvcm_core::wire::common::TraceOnly;
use kvcm_core::wire::{Empty, StatusCode};
use std::time::{SystemTime, UNIX_EPOCH};

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// kvcm's metrics (Prometheus names) followed by Tair's names for the same measurements
/// (`crate::tair_metrics`).
pub async fn get_metrics(State(s): State<AppState>, WireJson(_): WireJson<TraceOnly>) -> Reply<GetMetricsResponse> {
    let mut metrics = s.metrics.as_metrics_data();
    metrics.extend(crate::tair_metrics::tair_metrics(&s, &s.tair_rates).await);
    Reply(Ok(GetMetricsResponse { timestamp: now_ms(), metrics, extra_data: String::new() }))
}

pub async fn check_health(State(s): State<AppState>, WireJson(_): WireJson<TraceOnly>) -> Reply<CheckHealthResponse> {
    let mut conn = s.conn.clone();
    let healthy = kvcm_core::valkey::ping_all(&mut conn).await;
    if let Err(e) = &healthy {
        tracing::warn!(error = %e, "health check: Valkey unreachable");
    }
    Reply(Ok(CheckHealthResponse { is_leader: true, is_health: healthy.is_ok(), elector_last_loop_time_ms: now_ms() }))
}

pub async fn cluster_info(
    State(s): State<AppState>,
    WireJson(_): WireJson<TraceOnly>,
) -> Reply<GetManagerClusterInfoResponse> {
    let n = &s.node;
    Reply(Ok(GetManagerClusterInfoResponse {
        info_updated_time: 0,
        self_leader_expiration_time: 0,
        self_node_id: n.id.clone(),
        leader_node_id: n.id.clone(),
        leader_endpoint: NodeEndpoint {
            node_id: n.id.clone(),
            host: n.host.clone(),
            meta_rpc_port: n.grpc_meta_port as i32,
            meta_http_port: n.meta_port as i32,
            admin_rpc_port: n.grpc_admin_port as i32,
            admin_http_port: n.admin_port as i32,
            custom_info: String::new(),
        },
    }))
}

fn no_leader() -> Error {
    Error::status(
        StatusCode::UNSUPPORTED,
        "kvcm has no leader: every frontend serves every request and state lives in Valkey",
    )
}

pub async fn leader_demote(WireJson(_): WireJson<TraceOnly>) -> Reply<Empty> {
    Reply(Err(no_leader()))
}

pub async fn get_leader_elector_config(WireJson(_): WireJson<TraceOnly>) -> Reply<GetLeaderElectorConfigResponse> {
    Reply(Err(no_leader()))
}

pub async fn update_leader_elector_config(WireJson(_): WireJson<UpdateLeaderElectorConfigRequest>) -> Reply<Empty> {
    Reply(Err(no_leader()))
}

/// Tair's UpdateLogger: replaces this frontend's log filter (each frontend its own: there is no
/// leader to forward it). `log_level` one of Tair's `DEBUG`, `INFO`, `WARN`, `ERROR` (any case);
/// `module_name` empty for the whole process, else a `tracing` target (`kvcm_core::store`) whose
/// level changes over the configured `log_level`.
pub async fn update_logger(State(s): State<AppState>, WireJson(req): WireJson<UpdateLoggerRequest>) -> Reply<Empty> {
    let level = req.log_level.to_ascii_lowercase();
    if !matches!(level.as_str(), "debug" | "info" | "warn" | "error") {
        return Reply(Err(Error::invalid(format!(
            "log_level must be one of DEBUG, INFO, WARN, ERROR, got '{}'",
            req.log_level.chars().take(32).collect::<String>()
        ))));
    }
    let module = &req.module_name;
    if module.len() > 128 || !module.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
        return Reply(Err(Error::invalid(
            "module_name must be empty or a tracing target such as kvcm_core::store (letters, digits, _ and ::)",
        )));
    }
    let directives = if module.is_empty() { level.clone() } else { format!("{},{module}={level}", s.config.log_level) };
    Reply(match kvcm_core::telemetry::set_filter(&directives) {
        Ok(()) => {
            tracing::info!(filter = %directives, "log filter replaced (updateLogger)");
            tracing::debug!("debug logging is on");
            Ok(Empty {})
        }
        Err(e) => Err(Error::internal(e)),
    })
}

/// Tair's GenConfigSnapshot (`kvcm_core::registry::config_snapshot` has the format).
pub async fn gen_config_snapshot(
    State(s): State<AppState>,
    WireJson(_): WireJson<TraceOnly>,
) -> Reply<ConfigSnapShotResponse> {
    Reply(s.registry.gen_config_snapshot().await.map(|config_snapshot| ConfigSnapShotResponse { config_snapshot }))
}

/// Tair's LoadConfigSnapshot: creates what is missing, leaves what is identical, refuses the
/// whole load (nothing written) when anything differs or is invalid.
pub async fn load_config_snapshot(
    State(s): State<AppState>,
    WireJson(req): WireJson<LoadConfigSnapshotRequest>,
) -> Reply<Empty> {
    Reply(s.registry.load_config_snapshot(&req.config_snapshot).await.map(|loaded| {
        tracing::info!(created = loaded.created, unchanged = loaded.unchanged, "config snapshot loaded");
        Empty {}
    }))
}
