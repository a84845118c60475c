//! Finds the instances with background work: the registry's instances, and every instance with
//! keys on a primary (`kvcm_core::store::discovery`), so a new instance is covered before its
//! first deletion and a removed one until its deletions are done.

use crate::Worker;
use std::collections::BTreeSet;

/// Rescans and replaces the worker's instance list.
pub async fn refresh(w: &Worker) -> anyhow::Result<()> {
    let _ = w.registry.refresh().await;
    let mut found: BTreeSet<String> = w.registry.snapshot().instances.keys().cloned().collect();
    let mut conn = w.conn.clone();
    let scanned =
        kvcm_core::store::discovery::scan_instances(&mut conn, &w.valkey, &w.config.namespace, &mut found).await;
    // One unreachable node must not stop the deletions known on the others.
    *w.instances.write().unwrap_or_else(|p| p.into_inner()) = found.into_iter().collect();
    scanned.map_err(Into::into)
}

/// The instances found by the last scan.
pub fn instances(w: &Worker) -> Vec<String> {
    w.instances.read().unwrap_or_else(|p| p.into_inner()).clone()
}
