//! Dead letters as operators see them (admin RPCs listDeadLetters / redriveDeadLetters): an
//! instance's deletions given up on, listed page by page, and queued for deletion again once
//! their cause is fixed (`lua/redrive_dead_letters.lua`).

use super::DataPlane;
use crate::error::{Error, Result};
use crate::registry::Snapshot;
use crate::scripts;
use crate::store::record::decode_location;
use crate::wire::admin::DeadLetter;
use std::collections::HashMap;

/// A stream entry id (`<ms>-<seq>`, two u64), checked before it reaches XRANGE.
fn entry_id(field: &str, id: &str) -> Result<()> {
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u64>().is_ok();
    match id.split_once('-') {
        Some((ms, seq)) if digits(ms) && digits(seq) => Ok(()),
        _ => Err(Error::invalid(format!("{field} \"{}\" is not a dead-letter id (<ms>-<seq>)", id.escape_debug()))),
    }
}

impl DataPlane {
    /// Up to `limit` dead letters after `start_after` (""), the total, and the next page's start.
    pub async fn list_dead_letters(
        &self,
        snap: &Snapshot,
        instance_id: &str,
        start_after: &str,
        limit: usize,
    ) -> Result<(Vec<DeadLetter>, i64, String)> {
        if !start_after.is_empty() {
            entry_id("start_after", start_after)?;
        }
        // Nothing comes after the largest id (and XRANGE refuses an interval starting past it).
        let last_possible = format!("{0}-{0}", u64::MAX);
        let keys = self.keys(instance_id);
        let start = if start_after.is_empty() { "-".to_string() } else { format!("({start_after}") };
        if start_after == last_possible {
            let total: i64 = redis::cmd("XLEN").arg(&keys.del_dead).query_async(&mut self.conn()).await?;
            return Ok((Vec::new(), total, String::new()));
        }
        let mut conn = self.conn();
        let (page, total): (redis::streams::StreamRangeReply, i64) = redis::pipe()
            .cmd("XRANGE")
            .arg(&keys.del_dead)
            .arg(&start)
            .arg("+")
            .arg("COUNT")
            .arg(limit + 1)
            .cmd("XLEN")
            .arg(&keys.del_dead)
            .query_async(&mut conn)
            .await?;
        let more = page.ids.len() > limit;
        let letters: Vec<DeadLetter> = page.ids.into_iter().take(limit).map(|e| letter(snap, e)).collect();
        let next = if more { letters.last().map(|l| l.id.clone()).unwrap_or_default() } else { String::new() };
        Ok((letters, total, next))
    }

    /// Queues the dead letters `ids` (or, with none, the `limit` oldest) for deletion again;
    /// returns how many were, and how many ids were not dead letters.
    pub async fn redrive_dead_letters(&self, instance_id: &str, ids: &[String], limit: usize) -> Result<(i64, i64)> {
        for id in ids {
            entry_id("ids", id)?;
        }
        let keys = self.keys(instance_id);
        let n = if ids.is_empty() { limit } else { ids.len() }.to_string();
        let mut args: Vec<&[u8]> = vec![n.as_bytes()];
        args.extend(ids.iter().map(|i| i.as_bytes()));
        let r = self.run(&scripts::REDRIVE_DEAD_LETTERS, &[&keys.del_dead, &keys.del], &args).await?;
        let counts: Vec<i64> = r.into_iter().map(redis::from_redis_value).collect::<Result<_, _>>()?;
        match counts[..] {
            [redriven, missing] => Ok((redriven, missing)),
            _ => Err(Error::internal(format!("redrive_dead_letters.lua answered {counts:?}"))),
        }
    }
}

/// A dead letter as listed, from its stream entry (fields as the deleter wrote them).
fn letter(snap: &Snapshot, e: redis::streams::StreamId) -> DeadLetter {
    let id = e.id.clone();
    let f: HashMap<String, Vec<u8>> = super::entry_fields(e);
    let text = |k: &str| f.get(k).map(|v| String::from_utf8_lossy(v).into_owned()).unwrap_or_default();
    let loc = f.get("l").and_then(|l| decode_location(l, 0)).map(|(l, _)| l);
    let storage = loc
        .map(|l| {
            super::storage_of(snap, l.storage)
                .map(|c| c.global_unique_name.clone())
                .unwrap_or(format!("#{}", l.storage))
        })
        .unwrap_or_default();
    let packed_file = match (f.get("f"), loc.and_then(|l| l.packed)) {
        (Some(_), Some(p)) => format!("{:016x}_{:08x}", p.file_first as u64, p.file_hash),
        _ => String::new(),
    };
    DeadLetter {
        dead_since_ms: id.split('-').next().and_then(|ms| ms.parse().ok()).unwrap_or(0),
        block_key: f.get("k").and_then(|k| <[u8; 8]>::try_from(k.as_slice()).ok()).map(i64::from_be_bytes).unwrap_or(0),
        packed_file,
        storage,
        reason: text("r"),
        error: text("error"),
        attempts: text("attempts").parse().unwrap_or(0),
        id,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dead_letter_ids_are_two_u64() {
        assert!(super::entry_id("ids", "1700000000000-0").is_ok());
        assert!(super::entry_id("ids", "18446744073709551615-18446744073709551615").is_ok());
        for bad in ["", "1", "1-", "-1", "1-x", "+1-0", "18446744073709551616-0", "1-0-0", "99999999999999999999-1"] {
            assert!(super::entry_id("ids", bad).is_err(), "{bad}");
        }
    }
}
