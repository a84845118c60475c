//! The meta plane (engines; default port 6382): the Tair KVCM `MetaService` RPCs under
//! `POST /api/<rpc>`, plus `GET /api/healthy` for load balancers and `GET /openapi.json`, the
//! plane's OpenAPI description (see [`crate::openapi`]).

pub mod cache;
pub mod events;
pub mod instance;

use crate::openapi::{Plane, Rpcs};
use crate::state::AppState;
use axum::Router;
use axum::middleware::from_fn_with_state;
use axum::routing::get;

/// The plane's RPCs, one line each: the line serves `POST /api/<rpc>` and describes it in the
/// plane's OpenAPI description (request and reply types come from the handler).
pub fn rpcs() -> Rpcs {
    Rpcs::new(Plane::Meta)
        .rpc("registerInstance", instance::register, "Register an engine instance (idempotent)")
        .rpc("getInstanceInfo", instance::get, "An instance's registration and group")
        .rpc("getCacheLocation", cache::get_cache_location, "Where blocks are stored: prefix, batch or window")
        .rpc(
            "getCacheLocationLen",
            cache::get_cache_location_len,
            "How many blocks getCacheLocation would return, without them (no recency refresh)",
        )
        .rpc(
            "getCacheLocationsByBackend",
            cache::get_cache_locations_by_backend,
            "Per block, one location per backend holding it (storage, engine tiers: a holder picked by strategy)",
        )
        .rpc("getCacheMeta", cache::get_cache_meta, "Blocks' locations and states, for debugging")
        .rpc("startWriteCache", cache::start_write_cache, "Phase 1 of a write: where to write new blocks")
        .rpc("finishWriteCache", cache::finish_write_cache, "Phase 2 of a write: which blocks were written")
        .rpc("removeCache", cache::remove_cache, "Remove blocks (deleted in the background)")
        .rpc("trimCache", cache::trim_cache, "Remove all, or a time range of, an instance's blocks")
        .rpc("getClusterInfo", instance::cluster_info, "Who serves: this frontend (kvcm has no leader)")
        .rpc("reportEvent", events::report_event, "What an engine holds in its own cache tiers (per host)")
        .rpc(
            "getHostCacheState",
            events::get_host_cache_state,
            "For a prompt, how much of its prefix each live engine host holds (for routers)",
        )
}

pub fn router(state: AppState) -> Router {
    let (rpcs, openapi) = rpcs().into_routes();
    rpcs.route_layer(from_fn_with_state(state.clone(), crate::auth::meta_guard))
        .route("/api/healthy", get(crate::healthy))
        .route("/openapi.json", openapi)
        .with_state(state)
}
