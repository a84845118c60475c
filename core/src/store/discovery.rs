//! Which instances have keys in Valkey — registered or not: every primary is scanned for the
//! namespace's deletion streams, session sets and block hashes (SCAN reaches one node at a time).
//! An instance removed from the registry keeps its deletion stream until the workers have
//! drained it, so this is how workers find work the registry no longer names, and how
//! removeStorage sees deletions still pending for removed instances. Node addresses are those
//! CLUSTER NODES announces (a TLS port where a terminator fronts the node); each node is reached
//! with the seeds' scheme, credentials and TLS settings ([`Access::node`]).

use crate::error::Result;
use crate::valkey::Access;
use redis::cluster_async::ClusterConnection;
use std::collections::BTreeSet;

/// Adds to `found` every instance with keys on a primary; one unreachable node does not stop
/// the others from being scanned (its error is returned once all were tried).
pub async fn scan_instances(
    conn: &mut ClusterConnection,
    access: &Access,
    namespace: &str,
    found: &mut BTreeSet<String>,
) -> Result<()> {
    scan_instances_with(conn, access, namespace, &["del", "sessions", "blocks"], found).await
}

/// Adds to `found` every instance with a key named `suffix` (`<ns>:v1:{i:<id>}:<suffix>`) for
/// one of `suffixes` on a primary: one SCAN pass per suffix and node.
pub async fn scan_instances_with(
    conn: &mut ClusterConnection,
    access: &Access,
    namespace: &str,
    suffixes: &[&str],
    found: &mut BTreeSet<String>,
) -> Result<()> {
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(conn).await?;
    let mut failed = None;
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let flags: Vec<&str> = fields.get(2).map(|f| f.split(',').collect()).unwrap_or_default();
        if !flags.contains(&"master") || flags.contains(&"fail") {
            continue;
        }
        let Some(addr) = fields.get(1).and_then(|a| client_addr(a)) else { continue };
        if let Err(e) = scan_node(access, &addr, namespace, suffixes, found).await {
            tracing::warn!(node = %addr, error = %e, "scanning a node for instances failed");
            failed = Some(e);
        }
    }
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

async fn scan_node(
    access: &Access,
    addr: &str,
    ns: &str,
    suffixes: &[&str],
    found: &mut BTreeSet<String>,
) -> Result<()> {
    let mut node = access.node(addr).await.map_err(|e| crate::Error::internal(format!("connecting to {addr}: {e}")))?;
    for pattern in suffixes.iter().map(|s| format!("{ns}:v1:{{i:*}}:{s}")) {
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
            found.extend(keys.iter().filter_map(|k| crate::keys::instance_of_key(ns, k)).map(String::from));
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(())
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
