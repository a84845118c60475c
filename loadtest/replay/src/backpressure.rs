//! Back-pressure: pause issuing new requests while the cache is further above its capacity than
//! the optimizer's model allows, until kvcm's reclaimer catches up.
//!
//! Why: the optimizer evicts back to capacity after every request; kvcm's reclaimer evicts in
//! rounds, and between two rounds the cache holds what arrived since. How far above capacity the
//! cache runs depends on the insert rate (the speed-up) *and* on how fast this machine's worker
//! evicts — so on a slow or loaded machine a paced replay measures a larger cache than the one
//! predicted (docs/replay.md). With back-pressure the overshoot is bounded by
//! `--backpressure-over` whatever the machine's speed; only wall time changes.
//!
//! What is read: the worker's Prometheus gauge `kvcm_group_usage_bytes{group=G,
//! storage_type="all"}`, which the reclaimer publishes at the start of every round for every
//! group (the usage it found before evicting). A background task polls the worker's `/metrics`
//! every `poll`; the dispatcher asks [`Backpressure::wait`] before each new request, which
//! returns at once while the last reading is within `limit_bytes`, and otherwise waits for a
//! reading within it (a later round's, after the reclaimer evicted). Requests already in flight
//! continue; trace time stands still while paused (the dispatcher shifts its schedule), so
//! pacing resumes at the same rate. No reading within `timeout` — no worker, a reclaimer that
//! never catches up, a wrong group or URL — is an error: the replay stops instead of measuring
//! a cache that is not the one it claims to.

use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// A poller of one group's usage on a worker's metrics endpoint.
#[derive(Debug)]
pub struct Backpressure {
    latest: watch::Receiver<Option<f64>>,
    limit_bytes: f64,
    timeout: Duration,
    poller: tokio::task::JoinHandle<()>,
}

/// Why the replay cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum Stalled {
    #[error(
        "back-pressure: group usage {usage} bytes stayed above {limit} bytes for {waited:?} \
         (is a kvcm-worker reclaiming this group, and is --backpressure-metrics its /metrics?)"
    )]
    OverLimit { usage: String, limit: f64, waited: Duration },
}

impl Backpressure {
    /// Starts polling `metrics_url` (a worker's `…/metrics`) for `group`'s usage every `poll`.
    pub fn start(metrics_url: &str, group: &str, limit_bytes: f64, poll: Duration, timeout: Duration) -> Backpressure {
        let (tx, latest) = watch::channel(None);
        let (url, group) = (metrics_url.to_string(), group.to_string());
        let poller = tokio::spawn(async move {
            let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().expect("an HTTP client");
            loop {
                let reading = match http.get(&url).send().await {
                    Ok(r) => r.text().await.ok().and_then(|t| group_usage(&t, &group)),
                    Err(e) => {
                        tracing::debug!(error = %e, "back-pressure: metrics unreachable");
                        None
                    }
                };
                if tx.send(reading).is_err() {
                    return;
                }
                tokio::time::sleep(poll).await;
            }
        });
        Backpressure { latest, limit_bytes, timeout, poller }
    }

    /// Waits until the last reading is within the limit; how long it waited (zero if it did not).
    pub async fn wait(&mut self) -> Result<Duration, Stalled> {
        let started = Instant::now();
        let mut waited = false;
        loop {
            if let Some(usage) = *self.latest.borrow_and_update()
                && usage <= self.limit_bytes
            {
                return Ok(if waited { started.elapsed() } else { Duration::ZERO });
            }
            waited = true;
            let left = self.timeout.saturating_sub(started.elapsed());
            // A timeout, or a poller that has ended (it will never send again): stalled.
            if left.is_zero() || !matches!(tokio::time::timeout(left, self.latest.changed()).await, Ok(Ok(()))) {
                let usage = self.latest.borrow().map_or("unknown".to_string(), |u| format!("{u:.0}"));
                return Err(Stalled::OverLimit { usage, limit: self.limit_bytes, waited: started.elapsed() });
            }
        }
    }
}

impl Drop for Backpressure {
    fn drop(&mut self) {
        self.poller.abort();
    }
}

/// `kvcm_group_usage_bytes{…group="<group>"…storage_type="all"…} <value>` from Prometheus text.
pub fn group_usage(text: &str, group: &str) -> Option<f64> {
    let want_group = format!("group=\"{group}\"");
    text.lines().find_map(|line| {
        let rest = line.strip_prefix("kvcm_group_usage_bytes{")?;
        let (labels, value) = rest.split_once('}')?;
        let labels: Vec<&str> = labels.split(',').map(str::trim).collect();
        (labels.contains(&want_group.as_str()) && labels.contains(&"storage_type=\"all\""))
            .then(|| value.trim().parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usage_of_one_group_is_read_from_prometheus_text() {
        let text = "# HELP kvcm_group_usage_bytes Serving bytes\n\
                    kvcm_group_usage_bytes{group=\"other\",storage_type=\"all\"} 7\n\
                    kvcm_group_usage_bytes{group=\"replay\",storage_type=\"file\"} 5\n\
                    kvcm_group_usage_bytes{group=\"replay\",storage_type=\"all\"} 212992\n\
                    kvcm_group_quota_bytes{group=\"replay\",storage_type=\"all\"} 1\n";
        assert_eq!(group_usage(text, "replay"), Some(212992.0));
        assert_eq!(group_usage(text, "other"), Some(7.0));
        assert_eq!(group_usage(text, "missing"), None);
    }

    #[tokio::test]
    async fn a_replay_over_the_limit_waits_until_a_reading_is_under_it_again() {
        // A real HTTP server whose gauge starts over the limit (1,000 bytes) and drops under it.
        let usage = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(5000));
        let served = usage.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/metrics", listener.local_addr().unwrap());
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let body = format!(
                    "kvcm_group_usage_bytes{{group=\"g\",storage_type=\"all\"}} {}\n",
                    served.load(std::sync::atomic::Ordering::Relaxed)
                );
                let reply =
                    format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
                let _ = s.write_all(reply.as_bytes()).await;
            }
        });
        let mut bp = Backpressure::start(&url, "g", 1000.0, Duration::from_millis(10), Duration::from_secs(10));
        let drop_later = usage.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            drop_later.store(900, std::sync::atomic::Ordering::Relaxed);
        });
        let waited = bp.wait().await.expect("resumes once under the limit");
        assert_eq!(usage.load(std::sync::atomic::Ordering::Relaxed), 900, "it resumed while still over the limit");
        assert!(waited > Duration::ZERO, "a wait over the limit is reported");
        assert_eq!(bp.wait().await.expect("still under"), Duration::ZERO, "under the limit: no wait");
    }

    #[tokio::test]
    async fn waiting_without_any_reading_fails_after_the_timeout() {
        let mut bp = Backpressure::start(
            "http://127.0.0.1:9/metrics",
            "g",
            1.0,
            Duration::from_millis(10),
            Duration::from_millis(100),
        );
        assert!(matches!(bp.wait().await, Err(Stalled::OverLimit { .. })));
    }
}
