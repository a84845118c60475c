//! The debug service on the worker's metrics listener, for tests (`debug_faults = true`):
//! `POST /api/injectFault`, `/api/removeFault`, `/api/clearFaults` with the frontends' JSON
//! (Tair's `DebugService` messages). A worker has no RPC of its own to fault; the points that
//! matter here are its storage operations (`StorageUnlink`, `StorageProbe`: the deleter's
//! unlink and the health probe, [`kvcm_core::faults`]). The metrics listener has no
//! authentication, so the service is served only when the worker binds a loopback address
//! (`bind = "127.0.0.1"`, as tests do); otherwise, or with `debug_faults = false`, each answers
//! `UNSUPPORTED` (and a worker started with `debug_faults` on another address says why in its log).

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use kvcm_core::Error;
use kvcm_core::faults;
use kvcm_core::wire::StatusCode;
use kvcm_core::wire::debug::{InjectFaultRequest, RemoveFaultRequest};
use serde_json::json;

/// Whether this worker serves the debug service: `debug_faults` and a loopback `bind`.
pub fn enabled(config: &kvcm_core::config::Config) -> bool {
    if !config.debug_faults {
        return false;
    }
    let loopback = config.bind == "localhost" || config.bind.parse::<std::net::IpAddr>().is_ok_and(|a| a.is_loopback());
    if !loopback {
        tracing::error!(bind = %config.bind,
            "debug_faults is on but the worker's metrics listener is not on a loopback address: \
             its debug service (unauthenticated) stays off");
    }
    loopback
}

/// The three routes; `enabled` from [`enabled`].
pub fn router(enabled: bool) -> Router {
    Router::new()
        .route("/api/injectFault", post(inject))
        .route("/api/removeFault", post(remove))
        .route("/api/clearFaults", post(clear))
        .with_state(enabled)
}

/// Tair's reply envelope with the outcome in its header.
fn reply(outcome: Result<(), Error>) -> axum::Json<serde_json::Value> {
    let (code, message) = match outcome {
        Ok(()) => (StatusCode::OK, String::new()),
        Err(e) => (e.code(), e.public_message()),
    };
    axum::Json(json!({"header": {"status": {"code": code, "message": message}, "request_id": ""}}))
}

fn parse<T: serde::de::DeserializeOwned>(enabled: bool, body: &Bytes) -> Result<T, Error> {
    if !enabled {
        return Err(Error::status(
            StatusCode::UNSUPPORTED,
            "fault injection is off on this worker: set debug_faults = true and bind a loopback address (tests only)",
        ));
    }
    serde_json::from_slice(body).map_err(|e| Error::invalid(format!("request body: {e}")))
}

async fn inject(State(enabled): State<bool>, body: Bytes) -> axum::Json<serde_json::Value> {
    reply(parse::<InjectFaultRequest>(enabled, &body).and_then(|req| faults::global().inject(&req)))
}

async fn remove(State(enabled): State<bool>, body: Bytes) -> axum::Json<serde_json::Value> {
    reply(parse::<RemoveFaultRequest>(enabled, &body).and_then(|req| faults::global().remove(&req.api_name)))
}

async fn clear(State(enabled): State<bool>, body: Bytes) -> axum::Json<serde_json::Value> {
    reply(parse::<serde_json::Value>(enabled, &body).map(|_| faults::global().clear()))
}
