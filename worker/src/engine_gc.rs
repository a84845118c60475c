//! Collection of engine-reported entries that can never be visible again (docs/events.md):
//! entries of reporters that went down, fell silent past the cleanup grace, started a new
//! lifecycle, or committed a snapshot that left them out. Queries already hide them (O(1) per
//! reporter); this frees their memory. Each step scans the next batch of every instance's
//! engine-reported blocks from where the last step stopped (`lua/prune_engine.lua`, atomic per
//! batch); any number of workers may run it at once (the script is idempotent). After each
//! complete pass over an instance, reporters unregistered for longer than the cleanup grace are
//! forgotten (`lua/reap_reporters.lua`).

use crate::Worker;
use kvcm_core::store::report_event::settings_for;
use kvcm_core::wire::StorageType;

/// Blocks checked per instance and step.
const BATCH: usize = 256;
/// After a complete pass over an instance's blocks, the next pass starts this much later (an
/// instance without engine-reported blocks costs one HSCAN per pause, not one per step).
const PAUSE: std::time::Duration = std::time::Duration::from_secs(5);

/// Where an instance's collection stands.
#[derive(Debug, Clone, Copy)]
pub struct Cursor {
    scan: u64,
    not_before: std::time::Instant,
}

pub async fn run_once(w: &Worker) -> anyhow::Result<()> {
    let now = std::time::Instant::now();
    for instance in crate::discovery::instances(w) {
        // The longer of the instance's two tiers' graces (their event-report storages', or the
        // config key's): a reporter is forgotten only once neither tier could still want it.
        let snap = w.registry.snapshot();
        let defaults = w.config.report_settings();
        // Tiers the group does not route take no events, so only routed ones count.
        let grace = snap
            .instances
            .get(&instance)
            .and_then(|inst| {
                [StorageType::ST_EVENT_REPORT_L1P5, StorageType::ST_EVENT_REPORT_L2]
                    .into_iter()
                    .filter_map(|t| settings_for(&snap, &inst.instance_group_name, t, defaults).ok())
                    .map(|s| s.cleanup_grace_ms)
                    .max()
            })
            .unwrap_or(defaults.cleanup_grace_ms);
        let at = w.engine_cursors.lock().unwrap_or_else(|e| e.into_inner()).get(&instance).copied();
        if at.is_some_and(|c| c.not_before > now) {
            continue;
        }
        if !w.registry.snapshot().instances.contains_key(&instance) {
            // Removed: what engines reported goes with it. (removeInstance drops it; a report
            // that raced the removal may have written it again.) Only a definite answer drops.
            if let Err(kvcm_core::Error::Status { code: kvcm_core::wire::StatusCode::INSTANCE_NOT_EXIST, .. }) =
                w.registry.instance(&instance).await
            {
                w.data.drop_engine_reports(&instance).await?;
            }
            let not_before = now + PAUSE;
            w.engine_cursors.lock().unwrap_or_else(|e| e.into_inner()).insert(instance, Cursor { scan: 0, not_before });
            continue;
        }
        let pruned = w.data.prune_engine_reports(&instance, grace, at.map_or(0, |c| c.scan), BATCH).await?;
        w.metrics.engine_entries_dropped.inc_by(pruned.entries_dropped);
        if pruned.cursor == 0 {
            // A complete pass: reporters gone for longer than the grace can be forgotten.
            w.metrics.engine_reporters_forgotten.inc_by(w.data.reap_reporters(&instance, grace).await?);
        }
        let not_before = if pruned.cursor == 0 { now + PAUSE } else { now };
        w.engine_cursors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(instance, Cursor { scan: pruned.cursor, not_before });
    }
    Ok(())
}
