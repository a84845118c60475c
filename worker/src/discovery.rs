//! Finds the instances with background work: every primary is scanned for the namespace's
//! deletion streams and session sets (SCAN reaches one node at a time). Registry instances are
//! included too, so a new instance is covered before its first deletion.

use crate::Worker;
use std::collections::BTreeSet;

/// Rescans and replaces the worker's instance list.
pub async fn refresh(w: &Worker) -> anyhow::Result<()> {
    let ns = &w.config.namespace;
    let mut found: BTreeSet<String> = w.registry.snapshot().instances.keys().cloned().collect();
    let mut conn = w.conn.clone();
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut conn).await?;
    for line in nodes.lines().filter(|l| l.contains("master") && !l.contains("fail")) {
        let Some(addr) = line.split_whitespace().nth(1).and_then(|a| a.split('@').next()) else { continue };
        let scheme = if w.config.valkey_url.starts_with("rediss://") { "rediss" } else { "redis" };
        let url =
            match w.config.valkey_urls().first().and_then(|u| u.split_once("://")).and_then(|(_, r)| r.split_once('@'))
            {
                Some((auth, _)) => format!("{scheme}://{auth}@{addr}"),
                None => format!("{scheme}://{addr}"),
            };
        let mut node = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
        for pattern in [format!("{ns}:v1:{{i:*}}:del"), format!("{ns}:v1:{{i:*}}:sessions")] {
            let mut cursor: u64 = 0;
            loop {
                let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut node)
                    .await?;
                found.extend(keys.iter().filter_map(|k| kvcm_core::keys::instance_of_key(ns, k)).map(String::from));
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
    }
    *w.instances.write().unwrap_or_else(|p| p.into_inner()) = found.into_iter().collect();
    let _ = w.registry.refresh().await;
    Ok(())
}

/// The instances found by the last scan.
pub fn instances(w: &Worker) -> Vec<String> {
    w.instances.read().unwrap_or_else(|p| p.into_inner()).clone()
}
