//! One simulated engine request, as a connector does it:
//!
//! 1. `getCacheLocation` `QT_PREFIX_MATCH` of all the request's block keys → `h` blocks hit (the
//!    matched prefix);
//! 2. if `h < n`: `startWriteCache` of all `n` keys, the matched prefix included, as connectors
//!    send it (Tair's vLLM connector sends the request's every token) → a session, a
//!    `block_mask` of the keys already present (the matched prefix, and suffix keys being
//!    written by a concurrent request or serving behind a gap), and one location per new key.
//!    kvcm links a new block under the key before it in the request, so the prefix must be
//!    there: a suffix sent alone would start a tree of its own, and the prefix's last block
//!    would stay a leaf above it, evictable before it (its reads never counted below it);
//! 3. optionally, real bytes written to each new location's `file://` URIs (a write that fails
//!    marks its block failed);
//! 4. `finishWriteCache` with the blocks that were written.
//!
//! A failing RPC ends the request (its hit count stands; nothing more is written) and is counted
//! by RPC and kind. A session whose finish fails is left to kvcm's session expirer, as a crashed
//! engine's would be.

use crate::client::{Client, Rpc};
use crate::report::Stats;
use serde_json::{Value, json};
use std::sync::Mutex;

/// What every request of a replay shares.
#[derive(Debug)]
pub struct Engine {
    pub meta: Client,
    pub instance: String,
    /// Write `size` bytes to every `file://` URI a session hands out.
    pub write_bytes: bool,
    /// `write_timeout_seconds` sent with startWriteCache (0 = the server's default).
    pub write_timeout_s: u32,
    pub stats: Mutex<Stats>,
}

impl Engine {
    /// Replays one request of `keys` (first block first).
    pub async fn request(&self, keys: &[i64]) {
        let n = keys.len() as u64;
        let read = json!({"instance_id": self.instance, "query_type": "QT_PREFIX_MATCH", "block_keys": keys});
        let (took, reply) = self.meta.call(Rpc::GetCacheLocation.name(), &read).await;
        let hit = match reply {
            Ok(r) => r["locations"].as_array().map_or(0, Vec::len) as u64,
            Err(e) => {
                self.stats.lock().unwrap().failed(Rpc::GetCacheLocation, took, &e.kind(), n);
                return;
            }
        };
        self.stats.lock().unwrap().read(took, n, hit);
        if hit >= n {
            return;
        }
        let suffix = &keys[hit as usize..];
        let start =
            json!({"instance_id": self.instance, "block_keys": keys, "write_timeout_seconds": self.write_timeout_s});
        let (took, reply) = self.meta.call(Rpc::StartWriteCache.name(), &start).await;
        let session = match reply {
            Ok(r) => r,
            Err(e) => {
                self.stats.lock().unwrap().failed(Rpc::StartWriteCache, took, &e.kind(), 0);
                self.stats.lock().unwrap().write_refused_blocks += suffix.len() as u64;
                return;
            }
        };
        let locations = session["locations"].as_array().cloned().unwrap_or_default();
        let present = masked(&session["block_mask"], keys.len(), hit as usize);
        self.stats.lock().unwrap().started(took, present, locations.len() as u64);
        if locations.is_empty() {
            return; // every missing block is already being written by someone else
        }
        let mut ok = vec![true; locations.len()];
        if self.write_bytes {
            for (i, loc) in locations.iter().enumerate() {
                if let Err(e) = write_location(loc).await {
                    tracing::debug!(error = %e, "writing a block's bytes failed");
                    ok[i] = false;
                }
            }
        }
        let failed = ok.iter().filter(|o| !**o).count() as u64;
        let success =
            if failed == 0 { json!({"offset": ok.len()}) } else { json!({"bool_masks": {"values": ok.clone()}}) };
        let finish = json!({"instance_id": self.instance, "write_session_id": session["write_session_id"], "success_blocks": success});
        let (took, reply) = self.meta.call(Rpc::FinishWriteCache.name(), &finish).await;
        let mut stats = self.stats.lock().unwrap();
        stats.bytes_failed_blocks += failed;
        match reply {
            Ok(_) => stats.finished(took, ok.len() as u64 - failed),
            Err(e) => stats.failed(Rpc::FinishWriteCache, took, &e.kind(), 0),
        }
    }
}

/// How many of the keys after the read's matched prefix (the first `hit` of `len`) a
/// startWriteCache `block_mask` marks present, and how many of them lead (the run right after
/// the prefix): blocks a concurrent request is writing.
fn masked(mask: &Value, len: usize, hit: usize) -> (u64, u64) {
    if let Some(k) = mask["offset"].as_u64() {
        let k = (k.min(len as u64)).saturating_sub(hit as u64);
        return (k, k);
    }
    let Some(v) = mask["bool_masks"]["values"].as_array() else { return (0, 0) };
    let present = |b: &&Value| b.as_bool() == Some(true);
    let suffix = || v.iter().skip(hit);
    (suffix().filter(present).count() as u64, suffix().take_while(present).count() as u64)
}

/// A `file://<storage>/<path>?[blkid=j&]size=n` URI: the file, the byte offset and the length.
pub fn parse_file_uri(uri: &str) -> Option<(std::path::PathBuf, u64, u64)> {
    let rest = uri.strip_prefix("file://")?;
    let path_and_query = &rest[rest.find('/')?..];
    let (path, query) = path_and_query.split_once('?').unwrap_or((path_and_query, ""));
    let mut size = None;
    let mut blkid = 0;
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("size", v)) => size = v.parse().ok(),
            Some(("blkid", v)) => blkid = v.parse().ok()?,
            _ => {}
        }
    }
    let size = size?;
    Some((path.into(), blkid * size, size))
}

/// Writes zeroes to every spec URI of a location (file storages only; other schemes are skipped,
/// as kvcm hands them out as metadata).
async fn write_location(loc: &Value) -> std::io::Result<()> {
    use tokio::io::{AsyncSeekExt, AsyncWriteExt};
    for spec in loc["location_specs"].as_array().into_iter().flatten() {
        let uri = spec["uri"].as_str().unwrap_or("");
        if !uri.starts_with("file://") {
            continue;
        }
        let (path, offset, size) = parse_file_uri(uri)
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("unparsable URI {uri}")))?;
        if let Some(dir) = path.parent() {
            tokio::fs::create_dir_all(dir).await?;
        }
        let mut file = tokio::fs::OpenOptions::new().create(true).write(true).truncate(false).open(&path).await?;
        file.seek(std::io::SeekFrom::Start(offset)).await?;
        file.write_all(&vec![0u8; size as usize]).await?;
        file.flush().await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_uri_names_its_path_offset_and_size() {
        let (p, off, len) = parse_file_uri("file://nfs_01/mnt/kv/inst/tp0/00ff?size=4096").unwrap();
        assert_eq!((p.to_str().unwrap(), off, len), ("/mnt/kv/inst/tp0/00ff", 0, 4096));
        let (_, off, len) = parse_file_uri("file://nfs_01/mnt/kv/inst/tp0/00ff?blkid=3&size=10").unwrap();
        assert_eq!((off, len), (30, 10));
        assert!(parse_file_uri("mooncake://m/?key=a&size=1").is_none());
        assert!(parse_file_uri("file://nfs_01/no-size").is_none());
    }

    #[test]
    fn a_block_mask_counts_present_keys_in_either_form() {
        assert_eq!(masked(&json!({"offset": 2}), 5, 0), (2, 2));
        assert_eq!(masked(&json!({"offset": 9}), 5, 0), (5, 5));
        // The matched prefix is present too, and not counted.
        assert_eq!(masked(&json!({"offset": 4}), 5, 3), (1, 1));
        assert_eq!(masked(&json!({"offset": 3}), 5, 3), (0, 0));
        // A prefix evicted since the read: its keys are written again, nothing is in flight.
        assert_eq!(masked(&json!({"offset": 1}), 5, 3), (0, 0));
        assert_eq!(masked(&json!({"bool_masks": {"values": [true, false, true]}}), 3, 0), (2, 1));
        assert_eq!(masked(&json!({"bool_masks": {"values": [false, true]}}), 2, 0), (1, 0));
        assert_eq!(masked(&json!({"bool_masks": {"values": [true, true, true, false, true]}}), 5, 2), (2, 1));
        assert_eq!(masked(&json!({}), 3, 0), (0, 0));
    }
}
