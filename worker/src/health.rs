//! Storage health checks: every `health_interval_ms`, each storage is probed and the worker's
//! verdict recorded in the registry (`registry_set_storage_health.lua`). A storage is unhealthy
//! while no worker's verdict of the last three intervals finds it healthy — one worker on a host
//! without the mount does not stop writes cluster-wide — and a change bumps the registry
//! version. Unhealthy storages are skipped by startWriteCache and weighted out of reads until a
//! worker's check passes again.
//!
//! Probes (`StorageBackend::probe`; `kvcm_core::backend::file::probe`): `file` / `hf3fs` — the root directory exists (it
//! is not created: a missing root usually means an unmounted NFS or 3FS, and writing to the
//! local disk underneath would be wrong) and a probe file can be written and removed in it,
//! within `worker.file_op_timeout_ms` (a hung mount is unhealthy, and does not hold up the
//! loop or shutdown). `mooncake` / `tair_mem_pool` — no client is configured, so they are
//! reported healthy.
//!
//! After a passing probe, the filesystem's size and free space (`StorageBackend::capacity`,
//! `statvfs`) are published as `kvcm_storage_filesystem_bytes{storage, kind="total"|"free"}`.
//!
//! The probe file is `StorageBackend::health_probe_path` (`<root>~kvcm-health-<worker>`), a name no
//! instance id maps to: an engine cannot make a storage look unhealthy by registering an
//! instance whose directory sits where the probe writes, and the probe never touches an
//! instance's directory.

use crate::Worker;
use kvcm_core::backend::Backend;

pub async fn run_once(w: &Worker) -> anyhow::Result<()> {
    let snap = w.registry.snapshot();
    for (name, cfg) in &snap.storages {
        let timeout = std::time::Duration::from_millis(w.config.worker.file_op_timeout_ms);
        let backend = Backend::of(cfg);
        let result = backend.probe(&w.id, timeout).await;
        let healthy = result.is_ok();
        w.metrics.storage_healthy.with_label_values(&[name]).set(healthy as i64);
        let bytes = &w.metrics.storage_bytes;
        match if healthy { backend.capacity(timeout).await } else { Ok(None) } {
            Ok(Some(c)) => {
                bytes.with_label_values(&[name.as_str(), "total"]).set(c.total_bytes.min(i64::MAX as u64) as i64);
                bytes.with_label_values(&[name.as_str(), "free"]).set(c.free_bytes.min(i64::MAX as u64) as i64);
            }
            // Not known now: no stale figure stays published.
            _ => {
                let _ = bytes.remove_label_values(&[name.as_str(), "total"]);
                let _ = bytes.remove_label_values(&[name.as_str(), "free"]);
            }
        }
        // A verdict counts for three probe intervals: a stopped worker's soon stops counting.
        let fresh_ms = w.config.worker.health_interval_ms.saturating_mul(3);
        let Some(changed) = w.registry.set_storage_health(name, healthy, &w.id, fresh_ms).await? else {
            continue; // removed meanwhile
        };
        if changed {
            match result {
                Ok(()) => tracing::info!(storage = %name, "storage passes its health check again"),
                Err(why) => tracing::warn!(storage = %name, %why, "storage failed its health check; writes skip it"),
            }
        }
    }
    Ok(())
}
