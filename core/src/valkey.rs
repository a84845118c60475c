//! Connecting to the Valkey cluster: one multiplexed cluster connection per process, cloned
//! into every handler (no pool on the request path; see TOOLS.md), with per-command and
//! connect timeouts from the config. Scripts are loaded on every primary once connected.

use crate::config::Config;
use crate::error::Result;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use std::time::Duration;

/// Opens the cluster connection described by the config and loads every Lua script.
pub async fn connect(config: &Config) -> Result<ClusterConnection> {
    connect_urls(&config.valkey_urls(), config.valkey_timeout_ms, config.valkey_connect_timeout_ms).await
}

/// Opens a cluster connection to the given seeds and loads every Lua script.
pub async fn connect_urls(urls: &[String], timeout_ms: u64, connect_timeout_ms: u64) -> Result<ClusterConnection> {
    let client = ClusterClient::builder(urls.to_vec())
        .response_timeout(Duration::from_millis(timeout_ms))
        .connection_timeout(Duration::from_millis(connect_timeout_ms))
        .retries(2)
        .build()?;
    let mut conn = client.get_async_connection().await?;
    crate::scripts::load_all(&mut conn).await?;
    Ok(conn)
}

/// PINGs every node of the cluster; Ok only if all answer.
pub async fn ping_all(conn: &mut ClusterConnection) -> Result<()> {
    let _: String = redis::cmd("PING").query_async(conn).await?;
    Ok(())
}
