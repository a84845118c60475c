//! Session expirer: every poll, fails each instance's write sessions past their deadline
//! (`finish_write_cache.lua` in expire mode: locations removed, space queued for deletion).
//! Idempotent and safe on many workers: a session is failed by exactly one script call.

use crate::Worker;

/// One sweep over every known instance. Returns how many sessions expired.
pub async fn sweep(w: &Worker) -> anyhow::Result<usize> {
    let mut total = 0;
    for instance in crate::discovery::instances(w) {
        loop {
            let n = match w.data.expire_sessions(&instance, 100).await {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(%instance, error = %e, "session expiry failed");
                    break;
                }
            };
            total += n;
            w.metrics.sessions_expired.inc_by(n as u64);
            if n < 100 {
                break;
            }
        }
    }
    Ok(total)
}

pub async fn run_once(w: &Worker) -> anyhow::Result<()> {
    sweep(w).await.map(drop)
}
