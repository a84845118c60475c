//! `GET /api/healthy` from memory: a background task PINGs every Valkey node each
//! `health_check_interval_ms` ([`keep_checking`]) and stores the outcome in [`Health`]; the
//! handler only reads it. Load-balancer probes on the unauthenticated endpoint (both listeners)
//! therefore never reach Valkey, however often they come.
//!
//! [`Health`] is one `AtomicU64`: when the last check finished (milliseconds since the
//! `Health` was made, upper bits) and how it went (low two bits). A result older than three
//! intervals plus `valkey_timeout_ms` — the checker is stuck or gone — counts as unhealthy, so a
//! stale OK is never reported forever. Before the first check completes the state is unhealthy
//! too; `Server::run` checks once before it starts serving.
//!
//! The handler reads its server's `Health` from `AppState` (a router-wide `Extension` layer
//! would cost every request of both planes an extension insert and a boxed service clone).
//!
//! Replies keep today's shapes: `200 {"status":"OK"}` or `503 {"status":"UNHEALTHY","reason":…}`
//! where the reason is one of a few fixed sentences: Valkey's own error (addresses, OS errors)
//! is logged by the checker, never sent to the unauthenticated caller.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use redis::cluster_async::ClusterConnection;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tokio::time::Instant;

/// The `/api/healthy` reply from this server's health state.
pub fn respond(health: &Health) -> Response {
    reply(health.verdict_at(Instant::now()))
}

fn reply(verdict: Verdict) -> Response {
    let json = [("content-type", "application/json")];
    match verdict {
        Verdict::Healthy => (StatusCode::OK, json, r#"{"status":"OK"}"#).into_response(),
        Verdict::Unhealthy(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json,
            serde_json::json!({"status": "UNHEALTHY", "reason": reason}).to_string(),
        )
            .into_response(),
    }
}

/// How one check went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// Some node answered PING with an error, or could not be reached.
    Unreachable,
    /// No complete answer within `valkey_timeout_ms`.
    TimedOut,
}

/// What `/api/healthy` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Healthy,
    Unhealthy(&'static str),
}

const NEVER: u64 = 0;
const OK: u64 = 1;
const UNREACHABLE: u64 = 2;
const TIMED_OUT: u64 = 3;

/// The last health check's outcome and age. See the module docs.
#[derive(Debug)]
pub struct Health {
    origin: Instant,
    word: AtomicU64,
    stale_after: Duration,
}

impl Health {
    /// No check yet; results of checks every `interval`, each bounded by `valkey_timeout`, count
    /// as stale after three intervals plus one timeout.
    pub fn new(interval: Duration, valkey_timeout: Duration) -> Health {
        Health { origin: Instant::now(), word: AtomicU64::new(NEVER), stale_after: 3 * interval + valkey_timeout }
    }

    /// Stores the outcome of a check that finished now.
    pub fn record(&self, outcome: Outcome) {
        let code = match outcome {
            Outcome::Ok => OK,
            Outcome::Unreachable => UNREACHABLE,
            Outcome::TimedOut => TIMED_OUT,
        };
        let ms = self.origin.elapsed().as_millis() as u64;
        self.word.store(ms << 2 | code, Relaxed);
    }

    /// The verdict at `now`.
    pub fn verdict_at(&self, now: Instant) -> Verdict {
        let word = self.word.load(Relaxed);
        let checked_at = self.origin + Duration::from_millis(word >> 2);
        match word & 3 {
            NEVER => Verdict::Unhealthy("no health check has completed yet"),
            _ if now.saturating_duration_since(checked_at) > self.stale_after => {
                Verdict::Unhealthy("the last Valkey health check is too old")
            }
            OK => Verdict::Healthy,
            UNREACHABLE => Verdict::Unhealthy("a Valkey node did not answer PING"),
            _ => Verdict::Unhealthy("Valkey did not answer PING in time"),
        }
    }

    /// PINGs every node once (as `kvcm_core::valkey::ping_all` does), waiting at most
    /// `timeout`, and records the outcome. Returns Valkey's error for the log.
    pub async fn check(&self, conn: &mut ClusterConnection, timeout: Duration) -> Result<(), String> {
        let (outcome, result) = match tokio::time::timeout(timeout, kvcm_core::valkey::ping_all(conn)).await {
            Ok(Ok(())) => (Outcome::Ok, Ok(())),
            Ok(Err(e)) => (Outcome::Unreachable, Err(e.to_string())),
            Err(_) => (Outcome::TimedOut, Err(format!("no answer within {timeout:?}"))),
        };
        self.record(outcome);
        result
    }
}

/// Checks every `interval` until `stop` turns true. Logs when Valkey becomes unreachable and
/// when it recovers, not on every tick.
pub async fn keep_checking(
    health: Arc<Health>,
    mut conn: ClusterConnection,
    interval: Duration,
    timeout: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut failing = false;
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        match health.check(&mut conn, timeout).await {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("Valkey answers PING again: /api/healthy reports OK");
            }
            Ok(()) => {}
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "Valkey health check failed: /api/healthy reports UNHEALTHY");
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health() -> Health {
        Health::new(Duration::from_millis(100), Duration::from_millis(200))
    }

    #[test]
    fn before_the_first_check_the_frontend_is_unhealthy() {
        assert!(matches!(health().verdict_at(Instant::now()), Verdict::Unhealthy(_)));
    }

    #[test]
    fn the_last_outcome_is_the_verdict_while_it_is_fresh() {
        let h = health();
        h.record(Outcome::Ok);
        assert_eq!(h.verdict_at(Instant::now()), Verdict::Healthy);
        h.record(Outcome::Unreachable);
        assert_eq!(h.verdict_at(Instant::now()), Verdict::Unhealthy("a Valkey node did not answer PING"));
        h.record(Outcome::TimedOut);
        assert_eq!(h.verdict_at(Instant::now()), Verdict::Unhealthy("Valkey did not answer PING in time"));
    }

    #[test]
    fn an_ok_older_than_three_intervals_and_a_timeout_is_unhealthy() {
        let h = health();
        h.record(Outcome::Ok);
        // stale_after = 3 * 100 ms + 200 ms.
        assert_eq!(h.verdict_at(Instant::now() + Duration::from_millis(450)), Verdict::Healthy);
        assert_eq!(
            h.verdict_at(Instant::now() + Duration::from_millis(600)),
            Verdict::Unhealthy("the last Valkey health check is too old")
        );
    }
}
