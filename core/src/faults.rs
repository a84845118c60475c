//! Fault points for tests: Tair's debug service (`InjectFault`, `RemoveFault`, `ClearFaults`),
//! extended to kvcm's own fault points. Off unless `debug_faults = true` (the services answer
//! `UNSUPPORTED` and nothing is ever faulted); while no fault is set, a check is one atomic load.
//!
//! A fault names a point: an RPC in Tair's spelling (`GetCacheLocation`; the frontend's
//! middleware checks it before the handler runs) or a storage operation of the process it is
//! injected into (checked by the storage backend on the blocking thread that does the work):
//!
//! | point | where | what fails |
//! |---|---|---|
//! | `StorageUnlink` | the worker's deleter (`StorageBackend::unlink`) | deleting a block's files |
//! | `StorageProbe` | the worker's health check (`StorageBackend::probe`) | the probe write |
//!
//! What it does (`fault_type`): `FT_INTERNAL_ERROR` (Tair's) fails the call; `FT_HANG` (a kvcm
//! extension, with `hang_ms`) makes it wait first — a storage operation then blocks its thread
//! the way a hung mount does (so the operation's timeout and the hung-root guard take over), and
//! returns, doing its work, once `hang_ms` has passed or the fault is removed or cleared (the
//! mount recovered). When (`fault_trigger_strategy`): on every call (`ALWAYS`) or once, at the
//! `trigger_at_call`-th call after the injection (`ONCE`). Faults live in the process: kvcm has
//! no leader, so a test injects into each frontend (its admin plane) or worker (its metrics
//! listener, `/api/injectFault`) it means.

use crate::error::Error;
use crate::wire::debug::{FaultTriggerStrategy, FaultType, InjectFaultRequest};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Most faults set at once.
const MAX_FAULTS: usize = 64;

/// The longest `FT_HANG` (10 minutes).
pub const MAX_HANG_MS: i32 = 600_000;

/// The fault point of a storage backend's unlink.
pub const STORAGE_UNLINK: &str = "StorageUnlink";
/// The fault point of a storage backend's health probe.
pub const STORAGE_PROBE: &str = "StorageProbe";

#[derive(Debug)]
struct Fault {
    /// Unique per injection: a hang waits while *its* fault is still set.
    id: u64,
    hang: Option<Duration>,
    /// `None`: every call; `Some(n)`: the n-th call after the injection.
    once_at: Option<u32>,
    calls: u32,
}

/// What a call at a fault point is to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hit {
    /// Nothing: go on.
    Pass,
    /// Fail.
    Fail,
    /// Wait this long, or until fault `fault` is removed or replaced ([`Faults::hang`]), then
    /// go on.
    Hang { wait: Duration, fault: u64 },
}

/// The faults set in this process, by point.
#[derive(Debug, Default)]
pub struct Faults {
    /// Whether `set` is non-empty; changed only under its lock.
    any: AtomicBool,
    next_id: AtomicU64,
    set: Mutex<HashMap<String, Fault>>,
}

/// The process's faults (frontend middleware, storage backends and the debug services share it).
pub fn global() -> &'static Faults {
    static FAULTS: OnceLock<Faults> = OnceLock::new();
    FAULTS.get_or_init(Faults::default)
}

/// A point's name in Tair's spelling (`getCacheLocation` and `GetCacheLocation` are the same).
pub fn normalized(name: &str) -> Result<String, Error> {
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(Error::invalid(
            "api_name must name an RPC (e.g. GetCacheLocation) or a fault point (StorageUnlink, StorageProbe): \
             1..64 letters and digits",
        ));
    }
    let mut out = name.to_string();
    if let Some(first) = out.get_mut(..1) {
        first.make_ascii_uppercase();
    }
    Ok(out)
}

impl Faults {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Fault>> {
        self.set.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether any fault is set (one atomic load).
    pub fn any(&self) -> bool {
        self.any.load(Relaxed)
    }

    /// What this call at `point` (Tair's spelling) is to do; counts the call.
    pub fn hit(&self, point: &str) -> Hit {
        if !self.any() {
            return Hit::Pass;
        }
        let mut set = self.lock();
        let Some(fault) = set.get_mut(point) else { return Hit::Pass };
        fault.calls = fault.calls.saturating_add(1);
        let fires = fault.once_at.is_none_or(|n| fault.calls == n);
        match (fires, fault.hang) {
            (false, _) => Hit::Pass,
            (true, None) => Hit::Fail,
            (true, Some(wait)) => Hit::Hang { wait, fault: fault.id },
        }
    }

    /// Whether fault `id` at `point` is still set (not removed, cleared or replaced).
    pub fn still_set(&self, point: &str, id: u64) -> bool {
        self.lock().get(point).is_some_and(|f| f.id == id)
    }

    /// How long a [`Hit::Hang`] is still to wait, checked every 20 ms: `None` once it is over.
    pub fn hang_left(&self, point: &str, fault: u64, until: Instant) -> Option<Duration> {
        let now = Instant::now();
        (now < until && self.still_set(point, fault)).then(|| (until - now).min(Duration::from_millis(20)))
    }

    /// A fault point on a blocking thread (storage operations): an error to return when the
    /// fault fails the call; a hang blocks this thread first (until it ends or any fault is
    /// removed), then lets the operation go on.
    pub fn check_blocking(&self, point: &str) -> Result<(), String> {
        match self.hit(point) {
            Hit::Pass => Ok(()),
            Hit::Fail => Err(format!("fault injected into {point} (injectFault, debug_faults = true)")),
            Hit::Hang { wait, fault } => {
                let until = Instant::now() + wait;
                while let Some(step) = self.hang_left(point, fault, until) {
                    std::thread::sleep(step);
                }
                Ok(())
            }
        }
    }

    pub fn inject(&self, req: &InjectFaultRequest) -> Result<(), Error> {
        let name = normalized(&req.api_name)?;
        let once_at = match req.fault_trigger_strategy {
            FaultTriggerStrategy::ALWAYS => None,
            FaultTriggerStrategy::ONCE if req.trigger_at_call >= 1 => Some(req.trigger_at_call as u32),
            FaultTriggerStrategy::ONCE => {
                return Err(Error::invalid("trigger_at_call must be at least 1 with fault_trigger_strategy ONCE"));
            }
        };
        let hang = match req.fault_type {
            FaultType::FT_INTERNAL_ERROR if req.hang_ms == 0 => None,
            FaultType::FT_INTERNAL_ERROR => return Err(Error::invalid("hang_ms is for fault_type FT_HANG")),
            FaultType::FT_HANG if (1..=MAX_HANG_MS).contains(&req.hang_ms) => {
                Some(Duration::from_millis(req.hang_ms as u64))
            }
            FaultType::FT_HANG => {
                return Err(Error::invalid(format!(
                    "hang_ms must be within 1..={MAX_HANG_MS} with fault_type FT_HANG"
                )));
            }
        };
        let mut set = self.lock();
        if !set.contains_key(&name) && set.len() >= MAX_FAULTS {
            return Err(Error::invalid(format!("at most {MAX_FAULTS} faults at once; clearFaults first")));
        }
        let id = self.next_id.fetch_add(1, Relaxed);
        set.insert(name, Fault { id, hang, once_at, calls: 0 });
        self.any.store(true, Relaxed);
        Ok(())
    }

    pub fn remove(&self, api_name: &str) -> Result<(), Error> {
        let name = normalized(api_name)?;
        let mut set = self.lock();
        set.remove(&name);
        self.any.store(!set.is_empty(), Relaxed);
        Ok(())
    }

    pub fn clear(&self) {
        let mut set = self.lock();
        set.clear();
        self.any.store(false, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inject(f: &Faults, api: &str, once: Option<i32>, hang_ms: i32) -> Result<(), Error> {
        let (strategy, at) = match once {
            Some(n) => (FaultTriggerStrategy::ONCE, n),
            None => (FaultTriggerStrategy::ALWAYS, 0),
        };
        f.inject(&InjectFaultRequest {
            api_name: api.into(),
            fault_type: if hang_ms > 0 { FaultType::FT_HANG } else { FaultType::FT_INTERNAL_ERROR },
            fault_trigger_strategy: strategy,
            trigger_at_call: at,
            hang_ms,
        })
    }

    #[test]
    fn always_fails_every_call_once_fails_only_the_nth_and_removal_ends_both() {
        let f = Faults::default();
        assert_eq!(f.hit("GetCacheLocation"), Hit::Pass, "nothing set");
        inject(&f, "getCacheLocation", None, 0).unwrap();
        assert_eq!([f.hit("GetCacheLocation"), f.hit("GetCacheLocation")], [Hit::Fail; 2], "both spellings");
        inject(&f, "StartWriteCache", Some(2), 0).unwrap();
        assert_eq!(
            [f.hit("StartWriteCache"), f.hit("StartWriteCache"), f.hit("StartWriteCache")],
            [Hit::Pass, Hit::Fail, Hit::Pass]
        );
        f.remove("GetCacheLocation").unwrap();
        assert_eq!(f.hit("GetCacheLocation"), Hit::Pass);
        f.clear();
        assert!(!f.any());
        assert!(inject(&f, "Start Write", None, 0).is_err());
        assert!(inject(&f, "StartWriteCache", Some(0), 0).is_err());
        assert!(inject(&f, "StorageUnlink", None, MAX_HANG_MS + 1).is_err());
        let mut bad = InjectFaultRequest { api_name: "StorageUnlink".into(), hang_ms: 5, ..Default::default() };
        assert!(f.inject(&bad).is_err(), "hang_ms without FT_HANG");
        bad.fault_type = FaultType::FT_HANG;
        bad.hang_ms = 0;
        assert!(f.inject(&bad).is_err(), "FT_HANG without hang_ms");
    }

    #[test]
    fn a_hang_blocks_until_its_time_or_its_removal_and_then_lets_the_operation_go_on() {
        let f = std::sync::Arc::new(Faults::default());
        inject(&f, STORAGE_UNLINK, None, 150).unwrap();
        let t = Instant::now();
        assert_eq!(f.check_blocking(STORAGE_UNLINK), Ok(()));
        assert!(t.elapsed() >= Duration::from_millis(150), "{:?}", t.elapsed());
        // A long hang ends when the fault is removed (the mount recovers).
        inject(&f, STORAGE_UNLINK, None, MAX_HANG_MS).unwrap();
        let blocked = {
            let f = f.clone();
            std::thread::spawn(move || {
                let t = Instant::now();
                (f.check_blocking(STORAGE_UNLINK), t.elapsed())
            })
        };
        while f.lock().get(STORAGE_UNLINK).is_none_or(|x| x.calls == 0) {
            std::thread::sleep(Duration::from_millis(5));
        }
        // Removing another fault does not end it; removing its own does.
        inject(&f, STORAGE_PROBE, None, 0).unwrap();
        f.remove(STORAGE_PROBE).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(!blocked.is_finished(), "another fault's removal ended the hang");
        f.clear();
        let (result, took) = blocked.join().unwrap();
        assert_eq!(result, Ok(()));
        assert!(took < Duration::from_secs(5), "{took:?}");
        inject(&f, STORAGE_PROBE, None, 0).unwrap();
        assert!(f.check_blocking(STORAGE_PROBE).unwrap_err().contains("StorageProbe"));
        assert_eq!(f.check_blocking(STORAGE_UNLINK), Ok(()), "other points pass");
    }
}
