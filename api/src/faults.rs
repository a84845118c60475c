//! Tair's debug service: fault injection for tests (`debug_faults = true`, off by default).
//!
//! `injectFault` makes one RPC of *this frontend* answer `INTERNAL_ERROR` — on every call
//! (`ALWAYS`), or once, at the `trigger_at_call`-th call after the injection (`ONCE`) — or, with
//! `FT_HANG` (a kvcm extension), wait `hang_ms` before its handler runs; `removeFault` undoes it
//! for one RPC, `clearFaults` for all. The faults are the process's ([`kvcm_core::faults`],
//! which also has the storage fault points workers serve the same RPCs for). Faults live in the
//! process (kvcm has no leader: inject on each frontend a test talks to). A faulted call does
//! nothing else: it is answered before its handler runs, with the header only (clients fill in
//! default fields), and counted in the metrics like any reply. With `debug_faults = false` the
//! three RPCs answer `UNSUPPORTED` and nothing is ever faulted; the check on the request path is
//! one atomic load while no fault is set.

use crate::reply::{Reply, WireJson, error_response};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode as Http;
use axum::response::Response;
use kvcm_core::Error;
use kvcm_core::faults::{Faults, Hit};
use kvcm_core::wire::debug::{ClearFaultsRequest, InjectFaultRequest, RemoveFaultRequest};
use kvcm_core::wire::{Empty, StatusCode};

fn enabled(s: &AppState) -> Result<(), Error> {
    if s.config.debug_faults {
        Ok(())
    } else {
        Err(Error::status(
            StatusCode::UNSUPPORTED,
            "fault injection is off on this frontend: set debug_faults = true (tests only)",
        ))
    }
}

pub async fn inject(State(s): State<AppState>, WireJson(req): WireJson<InjectFaultRequest>) -> Reply<Empty> {
    Reply(enabled(&s).and_then(|()| s.faults.inject(&req)).map(|()| Empty {}))
}

pub async fn remove(State(s): State<AppState>, WireJson(req): WireJson<RemoveFaultRequest>) -> Reply<Empty> {
    Reply(enabled(&s).and_then(|()| s.faults.remove(&req.api_name)).map(|()| Empty {}))
}

pub async fn clear(State(s): State<AppState>, WireJson(_): WireJson<ClearFaultsRequest>) -> Reply<Empty> {
    Reply(enabled(&s).map(|()| {
        s.faults.clear();
        Empty {}
    }))
}

/// The fault check of both planes' layer ([`crate::guard`]): the reply of a call faulted with
/// `INTERNAL_ERROR`, answered before its handler, or `None` once any `FT_HANG` is over.
pub async fn check(faults: &'static Faults, path: &str) -> Option<Response> {
    // No fault set (always, unless debug_faults is on and a test set one): one atomic load.
    let rpc = path.strip_prefix("/api/").filter(|_| faults.any())?;
    let name = crate::tair_rpc_name(rpc);
    // The debug service itself is never faulted: a test could not undo its faults.
    let debug = matches!(name.as_str(), "InjectFault" | "RemoveFault" | "ClearFaults");
    match if debug { Hit::Pass } else { faults.hit(&name) } {
        Hit::Pass => None,
        Hit::Fail => Some(error_response(
            Http::OK,
            StatusCode::INTERNAL_ERROR,
            format!("fault injected into {name} on this frontend (injectFault, debug_faults = true)"),
        )),
        Hit::Hang { wait, fault } => {
            // Until its time is up or the fault is removed (before the request's deadline
            // starts: a hang models a slow path in front of the handler).
            let until = std::time::Instant::now() + wait;
            while let Some(step) = faults.hang_left(&name, fault, until) {
                tokio::time::sleep(step).await;
            }
            None
        }
    }
}
