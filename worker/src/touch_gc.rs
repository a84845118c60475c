//! Collection of read bookkeeping that outlived its block (`lua/prune_touch.lua`): an
//! interior block's last touch (`itouch`) and an LFU group's read count (`icount`) exist only
//! while their block serves, but a read's touch is a pipeline sent after the read, and one that
//! lands after its block was evicted, trimmed or its instance removed re-creates its entry.
//! Rare (a touch follows its read by well under a millisecond) but unbounded over months, so
//! each step checks the next batch of every instance's entries from where the last step stopped,
//! and a complete pass over an instance waits `worker.touch_gc_pause_ms` (an hour by default)
//! before the next. Instances with such keys but none that discovery looks for (removed from the
//! registry, their deletions done) are found by a scan of their own, as often. An instance the
//! scan finds that is not in the registry also loses the `adaptive` policy's state that a late
//! batch of hits re-created, once no block of it is left (`lua/drop_orphan_adaptive.lua`). Any number of
//! workers may run it at once (the script is idempotent); each repeats the others' passes, which
//! the long pause keeps cheap.

use crate::Worker;
use kvcm_core::store::maintenance::TouchCursor;
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// Entries scanned per index, instance and step.
const BATCH: usize = 256;
/// After a step that failed for an instance (its node unreachable), it is tried again this much
/// later.
const RETRY: Duration = Duration::from_secs(5);

/// The collection's progress, per worker process.
#[derive(Debug, Default)]
pub struct State {
    cursors: HashMap<String, (TouchCursor, Instant)>,
    /// Every instance with an `itouch`, `icount` or `adaptive` key, as of the last scan.
    with_keys: Vec<String>,
    scanned: Option<Instant>,
}

pub async fn run_once(w: &Worker) -> anyhow::Result<()> {
    let now = Instant::now();
    let pause = Duration::from_millis(w.config.worker.touch_gc_pause_ms);
    let scan_due = {
        let st = w.touch_gc.lock().unwrap_or_else(|e| e.into_inner());
        st.scanned.is_none_or(|t| now.duration_since(t) >= pause)
    };
    if scan_due {
        let mut found = BTreeSet::new();
        let mut conn = w.conn.clone();
        let scanned = kvcm_core::store::discovery::scan_instances_with(
            &mut conn,
            &w.valkey,
            &w.config.namespace,
            &["itouch", "icount", "adaptive"],
            &mut found,
        )
        .await;
        let mut st = w.touch_gc.lock().unwrap_or_else(|e| e.into_inner());
        st.with_keys = found.into_iter().collect();
        st.scanned = Some(now);
        // A node that could not be scanned is tried again at the next scan; the others' finds stand.
        if let Err(e) = scanned {
            tracing::warn!(error = %e, "scanning for read bookkeeping of removed instances failed");
        }
    }
    let mut instances: BTreeSet<String> = crate::discovery::instances(w).into_iter().collect();
    let found = w.touch_gc.lock().unwrap_or_else(|e| e.into_inner()).with_keys.clone();
    // Removed: not in the registry, which the worker loaded before any job ran. (Discovery also
    // lists every instance that ever had a deletion: its emptied stream stays.)
    let registered = w.registry.snapshot();
    let removed: BTreeSet<String> = found.iter().filter(|i| !registered.instances.contains_key(*i)).cloned().collect();
    instances.extend(found);
    // Progress of instances no longer found goes (the map stays as large as the instance list).
    w.touch_gc.lock().unwrap_or_else(|e| e.into_inner()).cursors.retain(|i, _| instances.contains(i));
    // One instance's failure (its node unreachable) must not stop the others' collection.
    let mut first_error = None;
    for instance in instances {
        let at = w.touch_gc.lock().unwrap_or_else(|e| e.into_inner()).cursors.get(&instance).copied();
        let cursor = match at {
            Some((_, not_before)) if not_before > now => continue,
            Some((c, _)) if !c.done() => c,
            _ => TouchCursor::START,
        };
        // A removed instance's `adaptive` state, re-created by a late batch of hits.
        if cursor == TouchCursor::START
            && removed.contains(&instance)
            && let Err(e) = w.data.drop_orphan_adaptive(&instance).await
        {
            tracing::warn!(%instance, error = %e, "dropping a removed instance's adaptive state failed");
        }
        let pruned = match w.data.prune_touches(&instance, cursor, BATCH).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(%instance, error = %e, "collecting stale read bookkeeping failed");
                first_error.get_or_insert(e);
                let retry = (cursor, now + RETRY);
                w.touch_gc.lock().unwrap_or_else(|e| e.into_inner()).cursors.insert(instance, retry);
                continue;
            }
        };
        w.metrics.touch_entries_dropped.with_label_values(&["itouch"]).inc_by(pruned.itouch_dropped);
        w.metrics.touch_entries_dropped.with_label_values(&["icount"]).inc_by(pruned.icount_dropped);
        let not_before = if pruned.cursor.done() { now + pause } else { now };
        w.touch_gc.lock().unwrap_or_else(|e| e.into_inner()).cursors.insert(instance, (pruned.cursor, not_before));
    }
    first_error.map_or(Ok(()), |e| Err(e.into()))
}
