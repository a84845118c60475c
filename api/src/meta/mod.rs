//! The meta plane (engines; default port 6382): the Tair KVCM `MetaService` RPCs under
//! `POST /api/<rpc>`, plus `GET /api/healthy` for load balancers.

pub mod cache;
pub mod instance;

use crate::state::AppState;
use axum::Router;
use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/api/registerInstance", post(instance::register))
        .route("/api/getInstanceInfo", post(instance::get))
        .route("/api/getCacheLocation", post(cache::get_cache_location))
        .route("/api/getCacheMeta", post(cache::get_cache_meta))
        .route("/api/startWriteCache", post(cache::start_write_cache))
        .route("/api/finishWriteCache", post(cache::finish_write_cache))
        .route("/api/removeCache", post(cache::remove_cache))
        .route("/api/trimCache", post(cache::trim_cache))
        .route_layer(from_fn_with_state(state.clone(), crate::auth::meta_guard))
        .route("/api/healthy", get(crate::healthy))
        .with_state(state)
}
