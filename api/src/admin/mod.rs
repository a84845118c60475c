//! The admin plane (operators; default port 6492): every RPC of DESIGN §2.4 under
//! `POST /api/<rpc>`, plus `GET /metrics` (Prometheus text), `GET /api/healthy` and
//! `GET /openapi.json`, the plane's OpenAPI description (see [`crate::openapi`]).
//! Guarded by [`crate::auth::admin_guard`] (except the GET routes, which load balancers,
//! scrapers and client generators call without credentials).

mod account;
mod cluster;
mod dead_letters;
mod group;
mod instance;
mod storage;

use crate::openapi::{Plane, Rpcs};
use crate::state::AppState;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode as Http;
use axum::middleware::from_fn_with_state;
use axum::routing::get;

/// The plane's RPCs, one line each: the line serves `POST /api/<rpc>` and describes it in the
/// plane's OpenAPI description (request and reply types come from the handler).
pub fn rpcs() -> Rpcs {
    use crate::meta::cache;
    Rpcs::new(Plane::Admin)
        .rpc("addStorage", storage::add, "Add a storage backend")
        .rpc("updateStorage", storage::update, "Change a storage backend's configuration")
        .rpc("enableStorage", storage::enable, "Let new blocks be written to a storage")
        .rpc("disableStorage", storage::disable, "Stop writing new blocks to a storage")
        .rpc(
            "removeStorage",
            storage::remove,
            "Remove a storage no group uses, no block is on and no write or deletion is pending on",
        )
        .rpc("listStorage", storage::list, "Every storage backend")
        .rpc("createInstanceGroup", group::create, "Create an instance group (storages, quota, eviction)")
        .rpc("updateInstanceGroup", group::update, "Replace a group; optimistic on `current_version`")
        .rpc("removeInstanceGroup", group::remove, "Remove an instance group without instances")
        .rpc("getInstanceGroup", group::get, "One instance group")
        .rpc("listInstanceGroup", group::list, "Every instance group")
        .rpc("registerInstance", instance::register, "Register an engine instance (idempotent)")
        .rpc("removeInstance", instance::remove, "Remove an instance and all its blocks")
        .rpc("getInstanceInfo", instance::get, "One instance's registration")
        .rpc("listInstanceInfo", instance::list, "The instances of a group")
        .rpc("getCacheMeta", cache::get_cache_meta, "Blocks' locations and states, for debugging")
        .rpc("removeCache", cache::remove_cache, "Remove blocks (deleted in the background)")
        .rpc(
            "listDeadLetters",
            dead_letters::list,
            "kvcm: an instance's deletions the workers gave up on, oldest first, page by page",
        )
        .rpc(
            "redriveDeadLetters",
            dead_letters::redrive,
            "kvcm: queue dead letters for deletion again (attempts start over), once their cause is fixed",
        )
        .rpc("addAccount", account::add, "Add an account (admin or user)")
        .rpc("deleteAccount", account::delete, "Delete an account")
        .rpc(
            "genConfigSnapshot",
            cluster::gen_config_snapshot,
            "The registry's configuration (storages, instance groups, instances; no credentials) as one JSON document",
        )
        .rpc(
            "loadConfigSnapshot",
            cluster::load_config_snapshot,
            "Create what a config snapshot has and the registry lacks; refused whole, nothing written, if anything differs",
        )
        .rpc("listAccount", account::list, "Every account (names, roles and instance-group scopes)")
        .rpc("createApiKey", account::create_api_key, "kvcm: create an API key; its token is shown once")
        .rpc("listApiKeys", account::list_api_keys, "kvcm: every API key (never its token)")
        .rpc("revokeApiKey", account::revoke_api_key, "kvcm: revoke an API key")
        .rpc(
            "getMetrics",
            cluster::get_metrics,
            "This frontend's metrics as MetricsData: kvcm's names, then Tair's (service.query_counter, service.query_rt_us, service.qps, ... tagged api_name) for the same measurements",
        )
        .rpc("checkHealth", cluster::check_health, "Whether Valkey is reachable")
        .rpc("getManagerClusterInfo", cluster::cluster_info, "This frontend as the cluster's (only) leader")
        .rpc("leaderDemote", cluster::leader_demote, "UNSUPPORTED: kvcm has no leader")
        .rpc("getLeaderElectorConfig", cluster::get_leader_elector_config, "UNSUPPORTED: kvcm has no leader")
        .rpc("updateLeaderElectorConfig", cluster::update_leader_elector_config, "UNSUPPORTED: kvcm has no leader")
        .rpc(
            "updateLogger",
            cluster::update_logger,
            "This frontend's log level (DEBUG, INFO, WARN, ERROR), of one module when module_name is set",
        )
        .rpc(
            "injectFault",
            crate::faults::inject,
            "Debug: make an RPC of this frontend answer INTERNAL_ERROR, always or once (debug_faults)",
        )
        .rpc("removeFault", crate::faults::remove, "Debug: stop injecting faults into an RPC (debug_faults)")
        .rpc("clearFaults", crate::faults::clear, "Debug: stop injecting every fault (debug_faults)")
}

pub fn router(state: AppState) -> Router {
    let (rpcs, openapi) = rpcs().into_routes();
    rpcs.route_layer(from_fn_with_state(state.clone(), crate::auth::admin_guard))
        .route("/metrics", get(prometheus_text))
        .route("/api/healthy", get(crate::healthy))
        .route("/openapi.json", openapi)
        .with_state(state)
}

async fn prometheus_text(State(s): State<AppState>) -> (Http, [(&'static str, &'static str); 1], String) {
    (Http::OK, [("content-type", "text/plain; version=0.0.4")], s.metrics.render())
}
