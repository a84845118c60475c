//! Storage health checks: every `health_interval_ms`, each storage is probed and the worker's
//! verdict recorded in the registry (`registry_set_storage_health.lua`). A storage is unhealthy
//! while no worker's verdict of the last three intervals finds it healthy — one worker on a host
//! without the mount does not stop writes cluster-wide — and a change bumps the registry
//! version. Unhealthy storages are skipped by startWriteCache and weighted out of reads until a
//! worker's check passes again.
//!
//! Probes: `file` / `hf3fs` — the root directory exists (it is not created: a missing root
//! usually means an unmounted NFS or 3FS, and writing to the local disk underneath would be
//! wrong) and a probe file can be written and removed in it. `mooncake` / `tair_mem_pool` — no client is
//! configured, so they are reported healthy.
//!
//! The probe file is `Backend::health_probe_path` (`<root>~kvcm-health-<worker>`), a name no
//! instance id maps to: an engine cannot make a storage look unhealthy by registering an
//! instance whose directory sits where the probe writes, and the probe never touches an
//! instance's directory.

use crate::Worker;
use kvcm_core::backend::Backend;

/// Probes one storage; `Err` says why it is unhealthy.
pub async fn probe(backend: &Backend, worker_id: &str) -> Result<(), String> {
    let (Some(root), Some(probe)) = (backend.root().map(str::to_string), backend.health_probe_path(worker_id)) else {
        return Ok(());
    };
    tokio::task::spawn_blocking(move || {
        if !std::path::Path::new(&root).is_dir() {
            return Err(format!("root {root} is not a directory (not mounted?)"));
        }
        std::fs::write(&probe, b"kvcm").map_err(|e| format!("cannot write {probe}: {e}"))?;
        std::fs::remove_file(&probe).map_err(|e| format!("cannot remove {probe}: {e}"))
    })
    .await
    .map_err(|e| e.to_string())?
}

pub async fn run_once(w: &Worker) -> anyhow::Result<()> {
    let snap = w.registry.snapshot();
    for (name, cfg) in &snap.storages {
        let result = probe(&Backend::of(cfg), &w.id).await;
        let healthy = result.is_ok();
        w.metrics.storage_healthy.with_label_values(&[name]).set(healthy as i64);
        // A verdict counts for three probe intervals: a stopped worker's soon stops counting.
        let fresh_ms = w.config.worker.health_interval_ms.saturating_mul(3);
        let changed = match w.registry.set_storage_health(name, healthy, &w.id, fresh_ms).await {
            Ok(c) => c,
            Err(kvcm_core::Error::Status { .. }) => continue, // removed meanwhile
            Err(e) => return Err(e.into()),
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
