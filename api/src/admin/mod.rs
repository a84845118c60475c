//! The admin plane (operators; default port 6492): every RPC of DESIGN §2.4 under
//! `POST /api/<rpc>`, plus `GET /metrics` (Prometheus text) and `GET /api/healthy`.
//! Guarded by [`crate::auth::admin_guard`] (except the two GET routes, which load balancers and
//! scrapers call without credentials).

mod account;
mod cluster;
mod group;
mod instance;
mod storage;

use crate::state::AppState;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode as Http;
use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};

pub fn router(state: AppState) -> Router {
    let rpcs = Router::new()
        .route("/api/addStorage", post(storage::add))
        .route("/api/updateStorage", post(storage::update))
        .route("/api/enableStorage", post(storage::enable))
        .route("/api/disableStorage", post(storage::disable))
        .route("/api/removeStorage", post(storage::remove))
        .route("/api/listStorage", post(storage::list))
        .route("/api/createInstanceGroup", post(group::create))
        .route("/api/updateInstanceGroup", post(group::update))
        .route("/api/removeInstanceGroup", post(group::remove))
        .route("/api/getInstanceGroup", post(group::get))
        .route("/api/listInstanceGroup", post(group::list))
        .route("/api/registerInstance", post(instance::register))
        .route("/api/removeInstance", post(instance::remove))
        .route("/api/getInstanceInfo", post(instance::get))
        .route("/api/listInstanceInfo", post(instance::list))
        .route("/api/getCacheMeta", post(crate::meta::cache::get_cache_meta))
        .route("/api/removeCache", post(crate::meta::cache::remove_cache))
        .route("/api/addAccount", post(account::add))
        .route("/api/deleteAccount", post(account::delete))
        .route("/api/listAccount", post(account::list))
        .route("/api/createApiKey", post(account::create_api_key))
        .route("/api/listApiKeys", post(account::list_api_keys))
        .route("/api/revokeApiKey", post(account::revoke_api_key))
        .route("/api/getMetrics", post(cluster::get_metrics))
        .route("/api/checkHealth", post(cluster::check_health))
        .route("/api/getManagerClusterInfo", post(cluster::cluster_info))
        .route("/api/leaderDemote", post(cluster::leader_demote))
        .route("/api/getLeaderElectorConfig", post(cluster::get_leader_elector_config))
        .route("/api/updateLeaderElectorConfig", post(cluster::update_leader_elector_config))
        .route_layer(from_fn_with_state(state.clone(), crate::auth::admin_guard));
    Router::new()
        .merge(rpcs)
        .route("/metrics", get(prometheus_text))
        .route("/api/healthy", get(crate::healthy))
        .with_state(state)
}

async fn prometheus_text(State(s): State<AppState>) -> (Http, [(&'static str, &'static str); 1], String) {
    (Http::OK, [("content-type", "text/plain; version=0.0.4")], s.metrics.render())
}
