//! Session expirer: every poll, fails each instance's write sessions past their deadline
//! (`finish_write_cache.lua` in expire mode: locations removed, space queued for deletion).
//! Idempotent and safe on many workers: a session is failed by exactly one script call.
//!
//! It also sweeps orphans: an instance that is no longer registered but still has blocks (a
//! write raced `removeInstance`, which trims before it unregisters) is trimmed again, so its
//! data is deleted rather than forgotten.

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

/// Trims the blocks of instances that are no longer registered. Returns how many it trimmed.
pub async fn sweep_orphans(w: &Worker) -> anyhow::Result<usize> {
    let snap = w.registry.snapshot();
    let mut trimmed = 0;
    for instance in crate::discovery::instances(w) {
        if snap.instances.contains_key(&instance) {
            continue;
        }
        let mut conn = w.conn.clone();
        let blocks: i64 = redis::cmd("HLEN").arg(&w.data.keys(&instance).blocks).query_async(&mut conn).await?;
        if blocks == 0 {
            continue;
        }
        // Re-check against a fresh registry: the instance may have been registered just now.
        // Only a definite "not registered" trims; a Valkey error does not.
        match w.registry.instance(&instance).await {
            Err(kvcm_core::Error::Status { code: kvcm_core::wire::StatusCode::INSTANCE_NOT_EXIST, .. }) => {}
            Ok(_) => continue,
            Err(e) => return Err(e.into()),
        }
        let info = kvcm_core::wire::InstanceInfo { instance_id: instance.clone(), ..Default::default() };
        w.data.trim_cache(&info, kvcm_core::store::trim_cache::TrimStrategy::TS_REMOVE_ALL_CACHE, 0, 0).await?;
        tracing::warn!(%instance, blocks, "trimmed the blocks of an unregistered instance");
        trimmed += 1;
    }
    Ok(trimmed)
}

pub async fn run_once(w: &Worker) -> anyhow::Result<()> {
    sweep(w).await?;
    sweep_orphans(w).await.map(drop)
}
