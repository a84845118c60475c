//! Open-loop load: requests arrive at a fixed rate whatever the server's latency, as engines'
//! requests do, and each one's latency counts from its *scheduled* start — so a server that
//! falls behind shows it in the percentiles instead of slowing the load down (no coordinated
//! omission). `throughput --open-loop-fraction F` uses it at F × the closed-loop saturation rate.
//!
//! The dispatcher sleeps until each request's due time (`i / rate` after the start) and spawns
//! it; if it is late it spawns at once, so the average rate holds. In-flight requests are capped
//! (`MAX_IN_FLIGHT`); a request that would exceed the cap is counted as dropped, not queued.
//! Requests go over a pool of kept-alive connections of the lean client (`h1`), the same client
//! the closed-loop phase measured saturation with; a new connection is opened when all are busy.

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

const MAX_IN_FLIGHT: usize = 4096;

/// What an open-loop run measured.
#[derive(Debug)]
pub struct OpenLoop {
    pub offered_per_s: f64,
    pub completed_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub errors: u64,
    pub dropped: u64,
}

/// Whether a kvcm reply says OK: kvcm answers domain errors with HTTP 200 and a non-OK code in
/// the header, which every reply starts with.
pub fn reply_ok(body: &[u8]) -> bool {
    body.get(..64).unwrap_or(body).windows(11).any(|w| w == br#""code":"OK""#)
}

/// POSTs `bodies` (round robin) to `path` on `addr` at `rate` per second for `duration`.
pub async fn open_loop(
    addr: std::net::SocketAddr,
    path: &'static str,
    bodies: Arc<Vec<bytes::Bytes>>,
    rate: f64,
    duration: Duration,
) -> OpenLoop {
    let total = (rate * duration.as_secs_f64()).round() as usize;
    let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let pool: Arc<std::sync::Mutex<Vec<crate::h1::H1>>> = Default::default();
    let t0 = Instant::now();
    let mut handles = Vec::with_capacity(total);
    let mut dropped = 0u64;
    for i in 0..total {
        let due = t0 + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(due).await;
        let Ok(permit) = in_flight.clone().try_acquire_owned() else {
            dropped += 1;
            continue;
        };
        let (pool, bodies) = (pool.clone(), bodies.clone());
        handles.push(tokio::spawn(async move {
            let body = bodies[i % bodies.len()].clone();
            let idle = pool.lock().unwrap().pop();
            let conn = match idle {
                Some(c) => Some(c),
                None => crate::h1::H1::connect(addr).await.ok(),
            };
            let ok = match conn {
                Some(mut c) => match c.post(path, body).await {
                    Ok(reply) => {
                        pool.lock().unwrap().push(c);
                        reply_ok(&reply)
                    }
                    Err(_) => false,
                },
                None => false,
            };
            drop(permit);
            (ok, due.elapsed().as_secs_f64() * 1000.0)
        }));
    }
    let mut lat = Vec::with_capacity(handles.len());
    let mut errors = 0;
    for h in handles {
        match h.await {
            Ok((true, ms)) => lat.push(ms),
            _ => errors += 1,
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    lat.sort_by(|a, b| a.total_cmp(b));
    let p = |q: f64| if lat.is_empty() { f64::NAN } else { crate::percentile(&lat, q) };
    OpenLoop {
        offered_per_s: rate,
        completed_per_s: lat.len() as f64 / elapsed,
        p50_ms: p(0.5),
        p99_ms: p(0.99),
        errors,
        dropped,
    }
}
