//! Finds the instances with background work: every primary is scanned for the namespace's
//! deletion streams, session sets and block hashes (SCAN reaches one node at a time). Registry instances are
//! included too, so a new instance is covered before its first deletion. Node addresses are
//! those CLUSTER NODES announces (a TLS port where a terminator fronts the node); each node is
//! reached with the seeds' scheme, credentials and TLS settings (`kvcm_core::valkey::Access`).

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
        let Some(addr) = fields.get(1).and_then(|a| client_addr(a)) else { continue };
        let addr = addr.as_str();
        // One unreachable node must not stop the deletions known on the others.
        if let Err(e) = scan_node(w, addr, &mut found).await {
            tracing::warn!(node = %addr, error = %e, "discovery scan of a node failed");
            failed = Some(e);
        }
    }
    *w.instances.write().unwrap_or_else(|p| p.into_inner()) = found.into_iter().collect();
    failed.map_or(Ok(()), Err)
}

/// The address clients use for a node, from the second field of a CLUSTER NODES line,
/// `ip:port@cport[,hostname]`: the hostname when the node announces one — with TLS it is the name
/// the node's certificate carries (ElastiCache's nodes announce theirs), where the IP is not.
fn client_addr(field: &str) -> Option<String> {
    let (ip_port, rest) = field.split_once('@')?;
    let (_, port) = ip_port.rsplit_once(':')?;
    match rest.split_once(',') {
        Some((_, host)) if !host.is_empty() => Some(format!("{host}:{port}")),
        _ => Some(ip_port.to_string()),
    }
}

async fn scan_node(w: &Worker, addr: &str, found: &mut BTreeSet<String>) -> anyhow::Result<()> {
    let ns = &w.config.namespace;
    // The seeds' scheme, credentials and TLS settings; connect and response timeouts bounded.
    let mut node = w.valkey.node(addr).await?;
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
    fn nodes_are_reached_at_their_announced_hostname_when_they_have_one() {
        assert_eq!(super::client_addr("10.0.0.2:7002@17002").as_deref(), Some("10.0.0.2:7002"));
        assert_eq!(super::client_addr("10.0.0.2:7002@17002,").as_deref(), Some("10.0.0.2:7002"));
        assert_eq!(
            super::client_addr("10.0.0.2:6379@1122,kvcm-0001-001.abc.cache.amazonaws.com").as_deref(),
            Some("kvcm-0001-001.abc.cache.amazonaws.com:6379")
        );
        assert_eq!(super::client_addr("garbage"), None);
    }
}
