//! Finds the instances with background work: every primary is scanned for the namespace's
//! deletion streams, session sets and block hashes (SCAN reaches one node at a time). Registry instances are
//! included too, so a new instance is covered before its first deletion.

use crate::Worker;
use std::collections::BTreeSet;

/// Rescans and replaces the worker's instance list.
pub async fn refresh(w: &Worker) -> anyhow::Result<()> {
    let _ = w.registry.refresh().await;
    let mut found: BTreeSet<String> = w.registry.snapshot().instances.keys().cloned().collect();
    let mut conn = w.conn.clone();
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut conn).await?;
    let mut failed = None;
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let flags: Vec<&str> = fields.get(2).map(|f| f.split(',').collect()).unwrap_or_default();
        if !flags.contains(&"master") || flags.contains(&"fail") {
            continue;
        }
        let Some(addr) = fields.get(1).and_then(|a| a.split('@').next()) else { continue };
        // One unreachable node must not stop the deletions known on the others.
        if let Err(e) = scan_node(w, addr, &mut found).await {
            tracing::warn!(node = %addr, error = %e, "discovery scan of a node failed");
            failed = Some(e);
        }
    }
    *w.instances.write().unwrap_or_else(|p| p.into_inner()) = found.into_iter().collect();
    failed.map_or(Ok(()), Err)
}

/// The seed URL with its host:port replaced by `addr` (keeping scheme, credentials, query).
fn node_url(seed: &str, addr: &str) -> String {
    let (scheme, rest) = seed.split_once("://").unwrap_or(("redis", seed));
    let (auth, hostpart) = match rest.rsplit_once('@') {
        Some((a, h)) => (Some(a), h),
        None => (None, rest),
    };
    let tail = hostpart.find(['/', '?', '#']).map(|i| &hostpart[i..]).unwrap_or("");
    match auth {
        Some(a) => format!("{scheme}://{a}@{addr}{tail}"),
        None => format!("{scheme}://{addr}{tail}"),
    }
}

async fn scan_node(w: &Worker, addr: &str, found: &mut BTreeSet<String>) -> anyhow::Result<()> {
    let ns = &w.config.namespace;
    let seed = w.config.valkey_urls().into_iter().next().unwrap_or_default();
    let client = redis::Client::open(node_url(&seed, addr))?;
    let mut node = tokio::time::timeout(
        std::time::Duration::from_millis(w.config.valkey_connect_timeout_ms),
        client.get_multiplexed_async_connection(),
    )
    .await??;
    for pattern in
        [format!("{ns}:v1:{{i:*}}:del"), format!("{ns}:v1:{{i:*}}:sessions"), format!("{ns}:v1:{{i:*}}:blocks")]
    {
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
    Ok(())
}

/// The instances found by the last scan.
pub fn instances(w: &Worker) -> Vec<String> {
    w.instances.read().unwrap_or_else(|p| p.into_inner()).clone()
}

#[cfg(test)]
mod tests {
    #[test]
    fn node_urls_keep_scheme_credentials_and_options() {
        assert_eq!(super::node_url("redis://10.0.0.1:7001", "10.0.0.2:7002"), "redis://10.0.0.2:7002");
        assert_eq!(
            super::node_url("rediss://u:p@h:6379/0#insecure", "1.2.3.4:6380"),
            "rediss://u:p@1.2.3.4:6380/0#insecure"
        );
    }
}
