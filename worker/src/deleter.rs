//! Deleter: consumer group `kvcm-deleters` over every instance's deletion stream.
//!
//! For each entry: wait until it is `delay_before_delete_ms` old, delete the data on the storage
//! backend (idempotent: a missing file is success), then release the location's metadata and
//! ack in one script — in that order, so a crash never loses a delete (the entry stays pending
//! and another worker claims it after `claim_idle_ms`). Delivery is at-least-once; every step is
//! idempotent. Entries failing `max_delete_attempts` times move to the instance's dead-letter
//! stream with the error.
//!
//! Entry kinds: `k`/`l` (one location of one block), `f`/`l` (a packed file whose last block was
//! released), `trash` (a trimmed blocks hash, expanded into `k`/`l` entries in batches).
//!
//! The storage operations themselves (what a deletion unlinks, and never: symbolic links,
//! other instances' trees; a missing root is a failure; the timeout) are the backend's, in
//! `kvcm_core::backend::file`.

use crate::Worker;
use kvcm_core::backend::Backend;
use kvcm_core::keys::InstanceKeys;
use kvcm_core::registry::validate::root_overlap;
use kvcm_core::store::maintenance::DeadLettered;
use kvcm_core::store::record::decode_location;
use redis::streams::{StreamId, StreamReadReply};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

pub const GROUP: &str = "kvcm-deleters";

/// What happened to one entry.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Done,
    NotDue,
    Failed(String),
}

/// One pass over every instance; one instance's failure does not starve the others.
pub async fn run_once(w: &Worker) -> anyhow::Result<()> {
    let mut first_error = None;
    for instance in crate::discovery::instances(w) {
        if let Err(e) = process_instance(w, &instance).await {
            tracing::warn!(%instance, error = %e, "deletion pass failed");
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// One pass over one instance's stream: claimed, own pending, then new entries. Returns how
/// many entries were completed.
pub async fn process_instance(w: &Worker, instance: &str) -> anyhow::Result<usize> {
    let keys = w.data.keys(instance);
    let mut conn = w.conn.clone();
    let exists: i64 = redis::cmd("EXISTS").arg(&keys.del).query_async(&mut conn).await?;
    if exists == 0 {
        return Ok(0);
    }
    let created: redis::RedisResult<()> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&keys.del)
        .arg(GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await;
    if let Err(e) = created
        && !e.to_string().contains("BUSYGROUP")
    {
        return Err(e.into());
    }
    let batch = w.config.worker.delete_batch;
    // XAUTOCLAIM scans a bounded part of the pending list per call: continue from where the
    // last call stopped, so dead consumers' entries deep in the list are reached too.
    let cursor = w.claim_cursors.lock().unwrap_or_else(|p| p.into_inner()).get(instance).cloned();
    let claimed: redis::Value = redis::cmd("XAUTOCLAIM")
        .arg(&keys.del)
        .arg(GROUP)
        .arg(&w.id)
        .arg(w.config.worker.claim_idle_ms)
        .arg(cursor.as_deref().unwrap_or("0-0"))
        .arg("COUNT")
        .arg(batch)
        .query_async(&mut conn)
        .await?;
    if let redis::Value::Array(parts) = claimed
        && let Some(next) = parts.into_iter().next().and_then(|v| redis::from_redis_value::<String>(v).ok())
    {
        w.claim_cursors.lock().unwrap_or_else(|p| p.into_inner()).insert(instance.to_string(), next);
    }
    forget_dead_consumers(w, &keys).await;
    let mut done = 0;
    for from in ["0", ">"] {
        let reply: Option<StreamReadReply> = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(GROUP)
            .arg(&w.id)
            .arg("COUNT")
            .arg(batch)
            .arg("STREAMS")
            .arg(&keys.del)
            .arg(from)
            .query_async(&mut conn)
            .await?;
        let entries: Vec<StreamId> = reply.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids).collect();
        for entry in entries {
            // A retry waits out its backoff (set by `fail`); only redelivered entries can have one.
            if from == "0" && backing_off(w, &keys, &entry.id).await? {
                continue;
            }
            match handle(w, instance, &keys, &entry).await {
                Outcome::Done => {
                    done += 1;
                    let (t, hung) = (format!("{}:t", entry.id), format!("{}:hung", entry.id));
                    let _: redis::RedisResult<i64> = redis::cmd("HDEL")
                        .arg(&keys.del_fail)
                        .arg(&entry.id)
                        .arg(t)
                        .arg(hung)
                        .query_async(&mut conn)
                        .await;
                }
                Outcome::NotDue => {}
                Outcome::Failed(why) => fail(w, &keys, &entry, &why).await?,
            }
        }
    }
    let len: i64 = redis::cmd("XLEN").arg(&keys.del).query_async(&mut conn).await.unwrap_or(0);
    w.metrics.stream_length.with_label_values(&[instance]).set(len);
    let dead: i64 = redis::cmd("XLEN").arg(&keys.del_dead).query_async(&mut conn).await.unwrap_or(0);
    w.metrics.dead_letter_entries.with_label_values(&[instance]).set(dead);
    let pending: redis::Value = redis::cmd("XPENDING").arg(&keys.del).arg(GROUP).query_async(&mut conn).await?;
    if let redis::Value::Array(v) = pending
        && let Some(redis::Value::Int(n)) = v.first()
    {
        w.metrics.stream_pending.with_label_values(&[instance]).set(*n);
    }
    Ok(done)
}

/// Removes consumers that hold nothing and have been idle for ten claim periods (workers that
/// stopped), so the group's consumer list does not grow with every restart. Best effort.
async fn forget_dead_consumers(w: &Worker, keys: &InstanceKeys) {
    let mut conn = w.conn.clone();
    let Ok(consumers) = redis::cmd("XINFO")
        .arg("CONSUMERS")
        .arg(&keys.del)
        .arg(GROUP)
        .query_async::<Vec<HashMap<String, redis::Value>>>(&mut conn)
        .await
    else {
        return;
    };
    let idle_limit = (w.config.worker.claim_idle_ms * 10) as i64;
    for c in consumers {
        let int = |k: &str| c.get(k).and_then(|v| redis::from_redis_value::<i64>(v.clone()).ok()).unwrap_or(0);
        let name = c.get("name").and_then(|v| redis::from_redis_value::<String>(v.clone()).ok()).unwrap_or_default();
        if name != w.id && int("pending") == 0 && int("idle") > idle_limit {
            let _: redis::RedisResult<i64> = redis::cmd("XGROUP")
                .arg("DELCONSUMER")
                .arg(&keys.del)
                .arg(GROUP)
                .arg(&name)
                .query_async(&mut conn)
                .await;
        }
    }
}

fn bytes(entry: &StreamId, field: &str) -> Option<Vec<u8>> {
    match entry.map.get(field)? {
        redis::Value::BulkString(b) => Some(b.clone()),
        redis::Value::SimpleString(s) => Some(s.as_bytes().to_vec()),
        _ => None,
    }
}

async fn handle(w: &Worker, instance: &str, keys: &InstanceKeys, entry: &StreamId) -> Outcome {
    // delay_before_delete_ms of the instance's group (0 once the instance is gone).
    let snap = w.registry.snapshot();
    let delay = snap
        .instances
        .get(instance)
        .and_then(|i| snap.groups.get(&i.instance_group_name))
        .map(|g| g.cache_config.reclaim_strategy.delay_before_delete_ms.max(0) as u64)
        .unwrap_or(0);
    let queued_ms: u64 = entry.id.split('-').next().and_then(|t| t.parse().ok()).unwrap_or(0);
    if queued_ms + delay > kvcm_core::store::now_ms() {
        return Outcome::NotDue;
    }
    let reason = bytes(entry, "r").map(|r| String::from_utf8_lossy(&r).into_owned()).unwrap_or_default();
    if let Some(trash) = bytes(entry, "trash") {
        let trash = String::from_utf8_lossy(&trash).into_owned();
        return match w.data.expand_trash(keys, &trash, GROUP, &entry.id, 256).await {
            Ok(true) => Outcome::Done,
            Ok(false) => Outcome::NotDue, // more batches next round; the entry stays pending
            Err(e) => Outcome::Failed(e.to_string()),
        };
    }
    let Some(loc_bytes) = bytes(entry, "l") else { return Outcome::Failed("entry has no location".into()) };
    let Some((loc, _)) = decode_location(&loc_bytes, 0) else { return Outcome::Failed("undecodable location".into()) };
    // A storage removed meanwhile (a straggler: a session a frontend started from a registry
    // copy a moment old, a re-driven dead letter) is deleted on with the configuration it had.
    let removed;
    let cfg = match kvcm_core::store::storage_of(&snap, loc.storage) {
        Some(cfg) => cfg,
        None => match w.registry.removed_storage(loc.storage).await {
            // A live storage now using the same directories (re-added at the same root) owns
            // the files there: a late deletion of the removed one must not unlink them. Checked
            // against the registry as it is now, not this worker's copy (a rare path).
            Ok(Some(cfg)) if let Some(live) = live_overlap(w, &cfg).await => {
                return Outcome::Failed(format!(
                    "storage id {} was removed and its root now belongs to storage '{live}'; not deleting there",
                    loc.storage
                ));
            }
            Ok(Some(cfg)) => {
                removed = cfg;
                &removed
            }
            Ok(None) => {
                return Outcome::Failed(format!(
                    "storage id {} no longer exists in the registry; its data cannot be deleted",
                    loc.storage
                ));
            }
            Err(e) => return Outcome::Failed(e.to_string()),
        },
    };
    let backend = Backend::of(cfg);
    let storage = cfg.global_unique_name.clone();
    if let Some(fid) = bytes(entry, "f") {
        // A packed file whose blocks are all released: unlink it, then ack.
        let Some(first) = fid.get(..8).and_then(|b| b.try_into().ok()).map(i64::from_be_bytes) else {
            return Outcome::Failed("bad packed file id".into());
        };
        if let Err(e) = unlink(w, &backend, instance, first, &loc).await {
            return Outcome::Failed(e);
        }
        let mut conn = w.conn.clone();
        let acked: redis::RedisResult<()> = ack(&mut redis::pipe(), keys, &entry.id).query_async(&mut conn).await;
        return match acked {
            Ok(()) => {
                w.metrics.deletions.with_label_values(&[&storage, "file_released"]).inc();
                Outcome::Done
            }
            Err(e) => Outcome::Failed(e.to_string()),
        };
    }
    let Some(key_bytes) = bytes(entry, "k") else { return Outcome::Failed("entry has no block key".into()) };
    let Some(key) = key_bytes.as_slice().try_into().ok().map(i64::from_be_bytes) else {
        return Outcome::Failed("bad block key".into());
    };
    if loc.packed.is_none() {
        // The path is a function of the key: only unlink if the file still belongs to this
        // deletion (a newer write of the key may own it), and hold the key while unlinking.
        match w.data.claim_delete(keys, &entry.id, &key_bytes, &loc_bytes).await.as_deref() {
            Ok("gone") => return Outcome::Done,
            Ok("keep") => {}
            Ok(_) => {
                if let Err(e) = unlink(w, &backend, instance, key, &loc).await {
                    return Outcome::Failed(e);
                }
            }
            Err(e) => return Outcome::Failed(e.to_string()),
        }
    }
    match w.data.release_block(keys, GROUP, &entry.id, &key_bytes, &loc_bytes).await {
        Ok(()) => {
            w.metrics.deletions.with_label_values(&[&storage, &reason]).inc();
            Outcome::Done
        }
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

/// The live storage whose root overlaps a removed storage's `cfg`, read from a fresh registry
/// (an error reading it counts as an overlap: nothing is deleted on a doubt).
async fn live_overlap(w: &Worker, cfg: &kvcm_core::wire::admin::StorageConfig) -> Option<String> {
    match w.registry.reload().await {
        Ok(snap) => root_overlap(cfg, snap.storages.values()).map(|(live, _)| live.global_unique_name.clone()),
        Err(e) => Some(format!("(unknown: the registry could not be read: {e})")),
    }
}

static MOONCAKE_NOTED: AtomicBool = AtomicBool::new(false);

/// Deletes a block's (or packed file's) files on its storage, within `worker.file_op_timeout_ms`.
async fn unlink(
    w: &Worker,
    backend: &Backend,
    instance: &str,
    key: i64,
    loc: &kvcm_core::store::record::Location,
) -> Result<(), String> {
    let timeout = std::time::Duration::from_millis(w.config.worker.file_op_timeout_ms);
    if !backend.unlink(instance, key, loc, timeout).await? && !MOONCAKE_NOTED.swap(true, Ordering::Relaxed) {
        tracing::info!("deletions on mooncake (and tair_mem_pool) storages are metadata-only: no client is configured");
    }
    Ok(())
}

/// Whether a failed entry is still waiting out its backoff.
async fn backing_off(w: &Worker, keys: &InstanceKeys, id: &str) -> anyhow::Result<bool> {
    let mut conn = w.conn.clone();
    let next: Option<u64> =
        redis::cmd("HGET").arg(&keys.del_fail).arg(format!("{id}:t")).query_async(&mut conn).await?;
    Ok(next.is_some_and(|t| t > kvcm_core::store::now_ms()))
}

/// The wait before retry `attempts` + 1: 1 s, 2 s, 4 s, … capped at 5 minutes, so a storage
/// outage of a few minutes does not dead-letter its deletions.
pub fn backoff_ms(attempts: u64) -> u64 {
    1000u64.saturating_mul(1 << attempts.saturating_sub(1).min(16)).min(300_000)
}

/// Adds the acknowledgement and removal of one entry to a pipeline.
fn ack<'a>(pipe: &'a mut redis::Pipeline, keys: &InstanceKeys, id: &str) -> &'a mut redis::Pipeline {
    pipe.cmd("XACK").arg(&keys.del).arg(GROUP).arg(id).ignore().cmd("XDEL").arg(&keys.del).arg(id).ignore()
}

/// Schedules the next attempt of entry `id` in `wait_ms` (until then `backing_off` skips it).
async fn retry_after(
    conn: &mut redis::cluster_async::ClusterConnection,
    keys: &InstanceKeys,
    id: &str,
    wait_ms: u64,
) -> anyhow::Result<()> {
    let next = kvcm_core::store::now_ms() + wait_ms;
    let _: () = redis::cmd("HSET").arg(&keys.del_fail).arg(format!("{id}:t")).arg(next).query_async(conn).await?;
    Ok(())
}

/// Counts a failure and schedules the retry; after `max_delete_attempts` moves the entry to the
/// dead-letter stream.
async fn fail(w: &Worker, keys: &InstanceKeys, entry: &StreamId, why: &str) -> anyhow::Result<()> {
    let mut conn = w.conn.clone();
    let attempts: u64 = redis::cmd("HINCRBY").arg(&keys.del_fail).arg(&entry.id).arg(1).query_async(&mut conn).await?;
    let timed_out = why.starts_with(kvcm_core::backend::file::TIMED_OUT);
    w.metrics.deletion_failures.with_label_values(&[if timed_out { "timeout" } else { "error" }]).inc();
    if timed_out {
        // Remembered for the entry's whole life (any worker's attempts): an unlink that timed
        // out may still land later, whatever the next attempts do.
        let _: () = redis::cmd("HSET")
            .arg(&keys.del_fail)
            .arg(format!("{}:hung", entry.id))
            .arg(1)
            .query_async(&mut conn)
            .await?;
    }
    tracing::warn!(stream = %keys.del, id = %entry.id, attempts, error = %why, "deletion failed");
    if attempts < w.config.worker.max_delete_attempts {
        return retry_after(&mut conn, keys, &entry.id, backoff_ms(attempts)).await;
    }
    // The dead letter carries the entry's fields, the error and the attempts; the script also
    // frees the key from the location it was deleting, so the key can be written again.
    let attempts_text = attempts.to_string();
    let mut fields: Vec<(&[u8], &[u8])> = entry
        .map
        .iter()
        .filter_map(|(k, v)| match v {
            redis::Value::BulkString(b) => Some((k.as_bytes(), b.as_slice())),
            _ => None,
        })
        .collect();
    fields.sort();
    fields.extend([
        (&b"error"[..], why.as_bytes()),
        (b"attempts", attempts_text.as_bytes()),
        (b"entry", entry.id.as_bytes()),
    ]);
    // After any timed-out attempt (this worker's or another's) an unlink may still be running
    // on a hung mount: the key stays held (its location stays 'X'), so that no new write of it
    // can start on the same path and lose its file to that unlink. Otherwise it is freed.
    let hung: Option<String> =
        redis::cmd("HGET").arg(&keys.del_fail).arg(format!("{}:hung", entry.id)).query_async(&mut conn).await?;
    let (key, loc) = if timed_out || hung.is_some() {
        (Vec::new(), Vec::new())
    } else {
        (bytes(entry, "k").unwrap_or_default(), bytes(entry, "l").unwrap_or_default())
    };
    let bound = w.config.worker.max_dead_letters;
    match w.data.dead_letter(keys, GROUP, &entry.id, &key, &loc, bound, &fields).await? {
        DeadLettered::Moved { .. } => {}
        DeadLettered::Gone => return Ok(()), // already completed by someone else
        DeadLettered::Full => {
            // Nothing is forgotten: the entry stays queued and is tried again at the longest
            // backoff, until an operator re-drives or clears dead letters.
            w.metrics.dead_letters_refused.inc();
            tracing::warn!(stream = %keys.del, id = %entry.id, bound, error = %why,
                "the dead-letter stream is full: the deletion stays queued and is retried every 5 minutes");
            return retry_after(&mut conn, keys, &entry.id, backoff_ms(u64::MAX)).await;
        }
    }
    w.metrics.dead_letters.inc();
    tracing::error!(stream = %keys.del, id = %entry.id, error = %why, "deletion moved to the dead-letter stream");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn retries_back_off_exponentially_up_to_five_minutes() {
        let waits: Vec<u64> = (1..=10).map(super::backoff_ms).collect();
        assert_eq!(&waits[..5], &[1000, 2000, 4000, 8000, 16000]);
        assert_eq!(super::backoff_ms(40), 300_000);
    }
}
