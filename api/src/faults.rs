//! Tair's debug service: fault injection for tests (`debug_faults = true`, off by default).
//!
//! `injectFault` makes one RPC of *this frontend* answer `INTERNAL_ERROR` — on every call
//! (`ALWAYS`), or once, at the `trigger_at_call`-th call after the injection (`ONCE`) —
//! `removeFault` undoes it for one RPC, `clearFaults` for all. Faults live in the process (kvcm
//! has no leader: inject on each frontend a test talks to). A faulted call does nothing else: it
//! is answered before its handler runs, with the header only (clients fill in default fields),
//! and counted in the metrics like any reply. With `debug_faults = false` the three RPCs answer
//! `UNSUPPORTED` and nothing is ever faulted; the check on the request path is one atomic load
//! while no fault is set.

use crate::reply::{Reply, WireJson, error_response};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode as Http;
use axum::response::Response;
use kvcm_core::Error;
use kvcm_core::wire::debug::{ClearFaultsRequest, FaultTriggerStrategy, InjectFaultRequest, RemoveFaultRequest};
use kvcm_core::wire::{Empty, StatusCode};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// Most faults set at once (each names an RPC; there are fewer RPCs than this).
const MAX_FAULTS: usize = 64;

#[derive(Debug)]
struct Fault {
    /// `None`: every call; `Some(n)`: the n-th call after the injection.
    once_at: Option<u32>,
    calls: u32,
}

/// The faults set on this frontend, by RPC (Tair's spelling).
#[derive(Debug, Default)]
pub struct Faults {
    any: AtomicBool,
    set: Mutex<HashMap<String, Fault>>,
}

/// An RPC's name in Tair's spelling (`getCacheLocation` and `GetCacheLocation` are the same).
fn normalized(api_name: &str) -> Result<String, Error> {
    if api_name.is_empty() || api_name.len() > 64 || !api_name.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(Error::invalid("api_name must name an RPC, e.g. GetCacheLocation (1..64 letters and digits)"));
    }
    Ok(crate::tair_rpc_name(api_name))
}

impl Faults {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Fault>> {
        self.set.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this call of `api_name` (Tair's spelling) is to fail; counts the call.
    pub fn hit(&self, api_name: &str) -> bool {
        if !self.any.load(Relaxed) {
            return false;
        }
        let mut set = self.lock();
        let Some(fault) = set.get_mut(api_name) else { return false };
        fault.calls = fault.calls.saturating_add(1);
        match fault.once_at {
            None => true,
            Some(n) => fault.calls == n,
        }
    }

    fn inject(&self, req: &InjectFaultRequest) -> Result<(), Error> {
        let name = normalized(&req.api_name)?;
        let once_at = match req.fault_trigger_strategy {
            FaultTriggerStrategy::ALWAYS => None,
            FaultTriggerStrategy::ONCE if req.trigger_at_call >= 1 => Some(req.trigger_at_call as u32),
            FaultTriggerStrategy::ONCE => {
                return Err(Error::invalid("trigger_at_call must be at least 1 with fault_trigger_strategy ONCE"));
            }
        };
        let mut set = self.lock();
        if !set.contains_key(&name) && set.len() >= MAX_FAULTS {
            return Err(Error::invalid(format!("at most {MAX_FAULTS} faults at once; clearFaults first")));
        }
        set.insert(name, Fault { once_at, calls: 0 });
        self.any.store(true, Relaxed);
        Ok(())
    }

    fn remove(&self, api_name: &str) -> Result<(), Error> {
        let name = normalized(api_name)?;
        let mut set = self.lock();
        set.remove(&name);
        self.any.store(!set.is_empty(), Relaxed);
        Ok(())
    }

    fn clear(&self) {
        self.lock().clear();
        self.any.store(false, Relaxed);
    }
}

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

/// Middleware of both planes: answers a faulted call with `INTERNAL_ERROR` before its handler.
pub async fn faulted(
    faults: std::sync::Arc<Faults>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    // No fault set (always, unless debug_faults is on and a test set one): one atomic load.
    if let Some(rpc) = req.uri().path().strip_prefix("/api/").filter(|_| faults.any.load(Relaxed)) {
        let name = crate::tair_rpc_name(rpc);
        // The debug service itself is never faulted: a test could not undo its faults.
        let debug = matches!(name.as_str(), "InjectFault" | "RemoveFault" | "ClearFaults");
        if !debug && faults.hit(&name) {
            return error_response(
                Http::OK,
                StatusCode::INTERNAL_ERROR,
                format!("fault injected into {name} on this frontend (injectFault, debug_faults = true)"),
            );
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inject(f: &Faults, api: &str, once: Option<i32>) -> Result<(), Error> {
        let (strategy, at) = match once {
            Some(n) => (FaultTriggerStrategy::ONCE, n),
            None => (FaultTriggerStrategy::ALWAYS, 0),
        };
        f.inject(&InjectFaultRequest {
            api_name: api.into(),
            fault_trigger_strategy: strategy,
            trigger_at_call: at,
            ..Default::default()
        })
    }

    #[test]
    fn always_fails_every_call_once_fails_only_the_nth_and_removal_ends_both() {
        let f = Faults::default();
        assert!(!f.hit("GetCacheLocation"), "nothing set");
        inject(&f, "getCacheLocation", None).unwrap();
        assert!(f.hit("GetCacheLocation") && f.hit("GetCacheLocation"), "both spellings, every call");
        inject(&f, "StartWriteCache", Some(2)).unwrap();
        assert_eq!(
            [f.hit("StartWriteCache"), f.hit("StartWriteCache"), f.hit("StartWriteCache")],
            [false, true, false]
        );
        f.remove("GetCacheLocation").unwrap();
        assert!(!f.hit("GetCacheLocation"));
        f.clear();
        assert!(!f.any.load(Relaxed));
        assert!(inject(&f, "Start Write", None).is_err());
        assert!(inject(&f, "StartWriteCache", Some(0)).is_err());
    }
}
