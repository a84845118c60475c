//! Typed wrappers of the scripts the worker runs: expiring sessions, releasing deleted
//! locations, expanding trimmed trash, evicting leaves under a fenced lease, collecting read
//! bookkeeping that outlived its block.

use super::DataPlane;
use crate::error::Result;
use crate::keys::InstanceKeys;
use crate::scripts;

/// Which eviction index a policy walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictIndex {
    /// Least recently used leaf first (leaf-aware LRU: suffixes before prefixes).
    Lru,
    /// Least frequently used leaf first.
    Lfu,
    /// The lowest learned hit density among leaves sampled at random (`adaptive`,
    /// [`DataPlane::adaptive_learn`] keeps its table current).
    Adaptive,
}

/// What one evict call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evicted {
    pub blocks: i64,
    pub bytes: i64,
    /// Where the next call should start in the index (leaves on other storages are skipped).
    pub next_offset: i64,
    /// Whether the index had no more candidates.
    pub exhausted: bool,
}

impl DataPlane {
    /// Fails up to `limit` of the instance's sessions past their deadline, like a finish with
    /// no successes. Returns how many were expired.
    pub async fn expire_sessions(&self, instance_id: &str, limit: usize) -> Result<usize> {
        let keys = self.keys(instance_id);
        let now = super::now_ms() / 1000;
        let due: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(&keys.sessions)
            .arg("-inf")
            .arg(now)
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut self.conn())
            .await?;
        let mut expired = 0;
        for id in due {
            let session_key = keys.session(&id);
            let r = self
                .run(&scripts::FINISH_WRITE_CACHE, &keys.finish_keys(&session_key), &[id.as_bytes(), b"o0", b"expire"])
                .await?;
            if super::first::<i64>(r)? >= 0 {
                expired += 1;
            }
        }
        Ok(expired)
    }

    /// Removes a deleted location's metadata, releases its packed-file slot and acks its entry.
    pub async fn release_block(
        &self,
        keys: &InstanceKeys,
        group: &str,
        id: &str,
        key: &[u8],
        loc: &[u8],
    ) -> Result<()> {
        self.run(
            &scripts::RELEASE_BLOCK,
            &[&keys.blocks, &keys.files, &keys.del, &keys.icount],
            &[group.as_bytes(), id.as_bytes(), key, loc],
        )
        .await
        .map(drop)
    }

    /// Gives up on a deletion: moves its entry to the dead-letter stream with `fields`, and
    /// drops the location from the key's record so the key can be written again (see
    /// `lua/dead_letter.lua`; an empty `key` leaves the record as it is) — unless the stream
    /// already holds `bound` dead letters.
    #[allow(clippy::too_many_arguments, reason = "one argument per script input")]
    pub async fn dead_letter(
        &self,
        keys: &InstanceKeys,
        group: &str,
        id: &str,
        key: &[u8],
        loc: &[u8],
        bound: u64,
        fields: &[(&[u8], &[u8])],
    ) -> Result<DeadLettered> {
        let bound = bound.to_string();
        let mut args: Vec<&[u8]> = vec![group.as_bytes(), id.as_bytes(), key, loc, bound.as_bytes()];
        for (k, v) in fields {
            args.push(k);
            args.push(v);
        }
        let r = self
            .run(&scripts::DEAD_LETTER, &[&keys.blocks, &keys.del, &keys.del_dead, &keys.del_fail, &keys.icount], &args)
            .await?;
        match super::first::<i64>(r)? {
            -1 => Ok(DeadLettered::Gone),
            -2 => Ok(DeadLettered::Full),
            released @ (0 | 1) => Ok(DeadLettered::Moved { released: released == 1 }),
            other => Err(crate::Error::internal(format!("dead_letter.lua answered {other}"))),
        }
    }

    /// Before unlinking an unpacked block's file: `"unlink"`, `"keep"` (a newer write owns the
    /// path) or `"gone"` (entry already completed). See `lua/claim_delete.lua`.
    pub async fn claim_delete(&self, keys: &InstanceKeys, id: &str, key: &[u8], loc: &[u8]) -> Result<String> {
        let r = self.run(&scripts::CLAIM_DELETE, &[&keys.blocks, &keys.del], &[id.as_bytes(), key, loc]).await?;
        super::first(r)
    }

    /// Queues up to `n` trash records as per-location entries. Returns whether the trash is done.
    pub async fn expand_trash(
        &self,
        keys: &InstanceKeys,
        trash: &str,
        group: &str,
        id: &str,
        n: usize,
    ) -> Result<bool> {
        let n = n.to_string();
        let r = self
            .run(&scripts::EXPAND_TRASH, &[trash, &keys.del], &[group.as_bytes(), id.as_bytes(), n.as_bytes()])
            .await?;
        let done: i64 = r.into_iter().nth(1).map(redis::from_redis_value).transpose()?.unwrap_or(0);
        Ok(done == 1)
    }

    /// Takes or renews the reclaim lease on an instance; `None` when another worker holds it.
    pub async fn lease_acquire(&self, instance_id: &str, worker: &str, ms: u64) -> Result<Option<String>> {
        let keys = self.keys(instance_id);
        self.lease_acquire_at(&keys.lease, &keys.lease_seq, worker, ms).await
    }

    /// Gives the lease back if still held.
    pub async fn lease_release(&self, instance_id: &str, lease: &str) -> Result<()> {
        self.lease_release_at(&self.keys(instance_id).lease, lease).await
    }

    /// Takes or renews a group's reclaim lease.
    pub async fn group_lease_acquire(&self, group: &str, worker: &str, ms: u64) -> Result<Option<String>> {
        let keys = crate::keys::GroupKeys::new(&self.namespace, group);
        self.lease_acquire_at(&keys.lease, &keys.lease_seq, worker, ms).await
    }

    /// Gives a group's lease back if still held.
    pub async fn group_lease_release(&self, group: &str, lease: &str) -> Result<()> {
        self.lease_release_at(&crate::keys::GroupKeys::new(&self.namespace, group).lease, lease).await
    }

    async fn lease_acquire_at(&self, lease: &str, seq: &str, worker: &str, ms: u64) -> Result<Option<String>> {
        let ms = ms.to_string();
        let r = self.run(&scripts::LEASE_ACQUIRE, &[lease, seq], &[worker.as_bytes(), ms.as_bytes()]).await?;
        // "" = another worker holds it; a bad argument is an error, never read as "held".
        let value: String = super::first(r)?;
        Ok((!value.is_empty()).then_some(value))
    }

    async fn lease_release_at(&self, lease_key: &str, lease: &str) -> Result<()> {
        self.run(&scripts::LEASE_RELEASE, &[lease_key], &[lease.as_bytes()]).await.map(drop)
    }

    /// The `adaptive` policy's learning step for one instance, before its evictions: once
    /// [`crate::hit_density::DECAY_EVENTS`] hits and evictions were counted since the last step, the
    /// density table computed from the histograms is stored with its ranks (what evictions
    /// compare, [`crate::hit_density::ranks_field`]), and the
    /// histograms decay (`lua/adaptive_decay.lua`). Returns the decays applied (0: not due, or
    /// another worker took the step).
    pub async fn adaptive_learn(&self, instance_id: &str) -> Result<u64> {
        use crate::hit_density::{BUCKETS, CLASSES, DECAY, DECAY_EVENTS, UNIT, ranks_field, table};
        let keys = self.keys(instance_id);
        let fields: Vec<(String, String)> =
            redis::cmd("HGETALL").arg(&keys.adaptive).query_async(&mut self.conn()).await?;
        let (mut hits, mut evictions, mut events) = (vec![0.0; CLASSES * BUCKETS], vec![0.0; CLASSES * BUCKETS], 0.0);
        // The table's own field, `peak` and `gseq` are not histogram cells: skipped.
        for (name, v) in fields.iter().filter_map(|(n, v)| Some((n, v.parse::<f64>().ok()?))) {
            let (kind, cell) = name.split_at(1.min(name.len()));
            match (kind, cell.parse::<usize>()) {
                ("h", Ok(c)) if c < hits.len() => hits[c] = v / UNIT as f64,
                ("e", Ok(c)) if c < evictions.len() => evictions[c] = v / UNIT as f64,
                _ if name == "events" => events = v,
                _ => {}
            }
        }
        if events < DECAY_EVENTS as f64 {
            return Ok(0);
        }
        let learned = table(&hits, &evictions);
        let densities = learned
            .iter()
            .map(|d| if *d == 0.0 { "0".to_string() } else { format!("{d:e}") })
            .collect::<Vec<_>>()
            .join(",");
        let r = self
            .run(
                &scripts::ADAPTIVE_DECAY,
                &[&keys.adaptive],
                &[
                    densities.as_bytes(),
                    DECAY_EVENTS.to_string().as_bytes(),
                    DECAY.to_string().as_bytes(),
                    ranks_field(&learned).as_bytes(),
                ],
            )
            .await?;
        Ok(r.into_iter().next().map(redis::from_redis_value::<u64>).transpose()?.unwrap_or(0))
    }

    /// Evicts up to `n` serving leaves by `index` (only those accessed before `before_ms`, and only
    /// on `storage` when given), under `lease`, stopping once `budget` bytes are freed (0 = no
    /// byte limit), starting `offset` leaves into the index. Returns what it did, or `None` when
    /// `lease` is no longer the caller's (nothing was done).
    #[allow(clippy::too_many_arguments, reason = "one argument per script parameter")]
    pub async fn evict(
        &self,
        instance_id: &str,
        group_sizes: &[i64],
        index: EvictIndex,
        n: usize,
        before_ms: Option<u64>,
        storage: Option<u16>,
        lease: &str,
        budget: i64,
        offset: i64,
    ) -> Result<Option<Evicted>> {
        let keys = self.keys(instance_id);
        let sizes = group_sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",");
        let index = match index {
            EvictIndex::Lru => "lru",
            EvictIndex::Lfu => "lfu",
            EvictIndex::Adaptive => "adaptive",
        };
        let (n, before, storage, budget) = (
            n.to_string(),
            before_ms.map_or("inf".to_string(), |b| b.to_string()),
            storage.unwrap_or(0).to_string(),
            budget.max(0).to_string(),
        );
        let offset = offset.max(0).to_string();
        // A resent call (its reply lost with a connection) answers what it did, once.
        let call = format!("{:016x}", fastrand::u64(..));
        let r = self
            .run(
                &scripts::EVICT,
                &[
                    &keys.blocks,
                    &keys.usage,
                    &keys.lru,
                    &keys.lfu,
                    &keys.itouch,
                    &keys.del,
                    &keys.lease,
                    &keys.evict_last,
                    &keys.icount,
                    &keys.adaptive,
                    &keys.ighost,
                ],
                &[
                    sizes.as_bytes(),
                    index.as_bytes(),
                    n.as_bytes(),
                    before.as_bytes(),
                    storage.as_bytes(),
                    lease.as_bytes(),
                    budget.as_bytes(),
                    offset.as_bytes(),
                    call.as_bytes(),
                ],
            )
            .await?;
        let mut it = r.into_iter().map(redis::from_redis_value::<i64>);
        let mut next = || -> Result<i64> { Ok(it.next().transpose()?.unwrap_or(0)) };
        let blocks = next()?;
        if blocks < 0 {
            return Ok(None); // the lease is not the caller's any more
        }
        Ok(Some(Evicted { blocks, bytes: next()?, next_offset: next()?, exhausted: next()? == 1 }))
    }
}

/// Where one instance's collection of stale read bookkeeping stands: an SCAN cursor into each
/// of `itouch` and `icount`, `None` once that index's pass is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TouchCursor {
    pub itouch: Option<u64>,
    pub icount: Option<u64>,
}

impl TouchCursor {
    /// A pass from the start of both indexes.
    pub const START: TouchCursor = TouchCursor { itouch: Some(0), icount: Some(0) };

    /// Whether both indexes have been scanned to their end.
    pub fn done(&self) -> bool {
        self.itouch.is_none() && self.icount.is_none()
    }
}

/// What one [`DataPlane::prune_touches`] step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TouchesPruned {
    pub itouch_dropped: u64,
    pub icount_dropped: u64,
    pub cursor: TouchCursor,
}

impl DataPlane {
    /// Drops the `adaptive` state (`adaptive`, `ighost`) of an instance with no block left, which
    /// a late batch of hits re-created after its removal (`lua/drop_orphan_adaptive.lua`).
    /// Returns the keys deleted.
    pub async fn drop_orphan_adaptive(&self, instance_id: &str) -> Result<u64> {
        let keys = self.keys(instance_id);
        let r = self.run(&scripts::DROP_ORPHAN_ADAPTIVE, &[&keys.blocks, &keys.adaptive, &keys.ighost], &[]).await?;
        Ok(r.into_iter().next().map(redis::from_redis_value::<u64>).transpose()?.unwrap_or(0))
    }

    /// One step of the worker's collection of read bookkeeping whose block no longer serves
    /// (`lua/prune_touch.lua`): the next ~`count` entries of the instance's `itouch` and of its
    /// `icount` from `cursor`, checked against their records and dropped atomically. A read's
    /// touch that lands after its block was unlinked re-creates such an entry; nothing else
    /// removes it (docs/data-plane.md).
    pub async fn prune_touches(&self, instance_id: &str, cursor: TouchCursor, count: usize) -> Result<TouchesPruned> {
        let keys = self.keys(instance_id);
        let count = count.clamp(1, 512);
        let mut fields: Vec<Vec<u8>> = Vec::new();
        let mut next = TouchCursor { itouch: None, icount: None };
        // ZSCAN and HSCAN both reply `[cursor, [field, value, field, value…]]`.
        for (scan, index, at, out) in [
            ("ZSCAN", &keys.itouch, cursor.itouch, &mut next.itouch),
            ("HSCAN", &keys.icount, cursor.icount, &mut next.icount),
        ] {
            let Some(at) = at else { continue };
            let (n, page): (u64, Vec<Vec<u8>>) =
                redis::cmd(scan).arg(index).arg(at).arg("COUNT").arg(count).query_async(&mut self.conn()).await?;
            fields.extend(page.into_iter().step_by(2));
            *out = (n != 0).then_some(n);
        }
        let mut out = TouchesPruned { itouch_dropped: 0, icount_dropped: 0, cursor: next };
        // A field that is not a block key was not written by kvcm: left alone.
        fields.retain(|f| f.len() == 8);
        fields.sort_unstable();
        fields.dedup();
        // A scan page may exceed COUNT (small encodings come whole); the script takes 1,024 keys.
        for chunk in fields.chunks(1024) {
            let args: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
            let r = self.run(&scripts::PRUNE_TOUCH, &[&keys.blocks, &keys.itouch, &keys.icount], &args).await?;
            let mut it = r.into_iter().map(redis::from_redis_value::<u64>);
            out.itouch_dropped += it.next().transpose()?.unwrap_or(0);
            out.icount_dropped += it.next().transpose()?.unwrap_or(0);
        }
        Ok(out)
    }
}

/// What [`DataPlane::dead_letter`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLettered {
    /// Moved to the dead-letter stream; `released`: a location was dropped from the key's record.
    Moved { released: bool },
    /// The entry was gone already (another worker completed it): nothing done.
    Gone,
    /// The dead-letter stream is at its bound: nothing done, the entry stays queued.
    Full,
}
