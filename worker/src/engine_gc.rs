//! Collection of engine-reported entries that can never be visible again (docs/events.md):
//! entries of reporters that went down, fell silent past the cleanup grace, started a new
//! lifecycle, or committed a snapshot that left them out. Queries already hide them (O(1) per
//! reporter); this frees their memory. Each step scans the next batch of every instance's
//! engine-reported blocks from where the last step stopped (`lua/prune_engine.lua`, atomic per
//! batch); any number of workers may run it at once (the script is idempotent).

use crate::Worker;

/// Blocks checked per instance and step.
const BATCH: usize = 256;

pub async fn run_once(w: &Worker) -> anyhow::Result<()> {
    let grace = w.config.event_report_cleanup_grace_ms;
    for instance in crate::discovery::instances(w) {
        let cursor = w.engine_cursors.lock().unwrap_or_else(|e| e.into_inner()).get(&instance).copied().unwrap_or(0);
        let pruned = w.data.prune_engine_reports(&instance, grace, cursor, BATCH).await?;
        w.metrics.engine_entries_dropped.inc_by(pruned.entries_dropped);
        w.engine_cursors.lock().unwrap_or_else(|e| e.into_inner()).insert(instance, pruned.cursor);
    }
    Ok(())
}
