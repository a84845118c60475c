//! getCacheLocation: prefix match, batch get and reverse-rolling sliding-window match over one
//! HMGET, then one recency/frequency update for the deepest block hit.

use super::record::serving_view;
use super::{DataPlane, now_ms, storage_of};
use crate::backend;
use crate::error::{Error, Result};
use crate::keys::block_field;
use crate::mask::BlockMask;
use crate::registry::Snapshot;
use crate::store::record::Location;
use crate::wire::admin::StorageConfig;
use crate::wire::{CacheLocation, InstanceInfo};
use redis::cluster_async::ClusterConnection;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};

crate::wire_enum! {
    pub enum QueryType { QT_UNSPECIFIED = 0, QT_BATCH_GET = 1, QT_PREFIX_MATCH = 2, QT_REVERSE_ROLL_SW_MATCH = 3 }
}

/// What a lookup found, for metrics and the event log.
#[derive(Debug, Clone, Default)]
pub struct MatchStats {
    pub requested: usize,
    pub hits: usize,
    /// Prefix match length (QT_PREFIX_MATCH), window hits otherwise.
    pub matched: usize,
}

/// Which indices a query returns as real locations, given which keys are hits.
pub fn select(query: QueryType, hits: &[bool], mask: &BlockMask, sw_size: i32) -> Result<Selection> {
    let n = hits.len();
    match query {
        QueryType::QT_PREFIX_MATCH => {
            let mut out = Vec::new();
            for (i, hit) in hits.iter().enumerate() {
                if mask.contains(i) {
                    continue;
                }
                if !hit {
                    break;
                }
                out.push(i);
            }
            Ok(Selection::Prefix(out))
        }
        QueryType::QT_BATCH_GET => Ok(Selection::Each),
        QueryType::QT_REVERSE_ROLL_SW_MATCH => {
            if sw_size < 1 || sw_size as usize > n {
                return Err(Error::invalid(format!(
                    "sw_size must be within 1..={n} (the number of blocks) for QT_REVERSE_ROLL_SW_MATCH, got {sw_size}"
                )));
            }
            let sw = sw_size as usize;
            let mut end = n; // exclusive
            while end >= sw {
                let start = end - sw;
                match (start..end).rev().find(|&i| !hits[i]) {
                    None => return Ok(Selection::Window(start, end)),
                    Some(miss) => end = miss,
                }
            }
            Ok(Selection::Window(0, 0))
        }
        QueryType::QT_UNSPECIFIED => {
            Err(Error::invalid("query_type is required: QT_PREFIX_MATCH, QT_BATCH_GET or QT_REVERSE_ROLL_SW_MATCH"))
        }
    }
}

/// What a read's touch keeps besides recency, by the policy the instance's group reclaims by:
/// LFU keeps per-block read counts (a prefix ranked by every read through it,
/// lua/lib/record.lua); `adaptive` counts a hit on a leaf at its age and class
/// (lua/evict.lua). Other groups' reads skip both. A group switched to either starts keeping it
/// then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keeps {
    Recency,
    Counts,
    Hits,
}

fn keeps(snap: &Snapshot, inst: &InstanceInfo) -> Keeps {
    use crate::wire::admin::ReclaimPolicy as P;
    match super::reclaim_policy(snap, inst) {
        P::POLICY_LFU => Keeps::Counts,
        P::POLICY_ADAPTIVE => Keeps::Hits,
        _ => Keeps::Recency,
    }
}

/// Refuses a query `select` would refuse whatever the hits, before anything is read.
fn check_query(query: QueryType, n: usize, mask: &BlockMask, sw_size: i32) -> Result<()> {
    if query == QueryType::QT_UNSPECIFIED {
        select(query, &[], mask, sw_size)?;
    }
    if query == QueryType::QT_REVERSE_ROLL_SW_MATCH && (sw_size < 1 || sw_size as usize > n) {
        select(query, &vec![false; n], mask, sw_size)?;
    }
    Ok(())
}

/// The indices a query returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Only these indices, in order, no placeholders.
    Prefix(Vec<usize>),
    /// One entry per key; hits real, misses placeholders.
    Each,
    /// One entry per key; real inside `[start, end)`, placeholders elsewhere.
    Window(usize, usize),
}

/// Where the selected locations go: built as wire structs, or rendered straight to JSON.
trait Sink {
    /// Adds the location of `key`; `false` when its storage cannot express it.
    fn real(&mut self, builder: &mut backend::LocationBuilder, key: i64, loc: &Location) -> bool;
    /// Adds an engine-reported location (a block no storage holds, a live engine does).
    fn engine(&mut self, loc: &CacheLocation);
    fn placeholder(&mut self);
    fn len(&self) -> usize;
    /// Whether the read refreshes the recency of its deepest hit (a read an engine will use does;
    /// a scheduler's probe of how much would hit does not).
    fn touches(&self) -> bool {
        true
    }
}

/// Counts what a query would return, without keeping it (`getCacheLocationLen`).
struct Counted {
    real: usize,
}

impl Sink for Counted {
    fn real(&mut self, builder: &mut backend::LocationBuilder, key: i64, loc: &Location) -> bool {
        let expressible = builder.build(key, loc).is_some();
        self.real += expressible as usize;
        expressible
    }
    fn engine(&mut self, _: &CacheLocation) {
        self.real += 1;
    }
    fn placeholder(&mut self) {}
    fn len(&self) -> usize {
        self.real
    }
    fn touches(&self) -> bool {
        false
    }
}

struct Built<'a> {
    out: Vec<CacheLocation>,
    inst: &'a InstanceInfo,
    filter: &'a [String],
}

impl Sink for Built<'_> {
    fn real(&mut self, builder: &mut backend::LocationBuilder, key: i64, loc: &Location) -> bool {
        builder.build(key, loc).map(|l| self.out.push(l)).is_some()
    }
    fn engine(&mut self, loc: &CacheLocation) {
        self.out.push(loc.clone());
    }
    fn placeholder(&mut self) {
        self.out.push(backend::placeholder(self.inst, self.filter));
    }
    fn len(&self) -> usize {
        self.out.len()
    }
}

/// Renders a JSON array of locations into `out`, byte for byte what serde writes for the
/// `Vec<CacheLocation>` that [`Built`] would collect.
struct Rendered<'a> {
    out: &'a mut Vec<u8>,
    count: usize,
    placeholder: Option<Vec<u8>>,
    inst: &'a InstanceInfo,
    filter: &'a [String],
    /// Expected number of locations, to size `out` once the first one is rendered.
    expected: usize,
}

/// Most bytes a read reserves for its reply before it has rendered them.
const RESERVE_CAP: usize = 8 << 20;

impl Rendered<'_> {
    fn separator(&mut self) {
        if self.count > 0 {
            self.out.push(b',');
        }
    }
    fn added(&mut self, start: usize) {
        if self.count == 0 {
            // Sized by the first location for every requested block, but never more than
            // RESERVE_CAP up front: a prefix read of many keys may match only a few, and the
            // buffer grows as usual past the cap.
            let want = (self.out.len() - start + 1).saturating_mul(self.expected.saturating_sub(1)) + 1;
            self.out.reserve(want.min(RESERVE_CAP));
        }
        self.count += 1;
    }
}

impl Sink for Rendered<'_> {
    fn real(&mut self, builder: &mut backend::LocationBuilder, key: i64, loc: &Location) -> bool {
        let start = self.out.len();
        self.separator();
        if !builder.write_json(self.out, key, loc) {
            self.out.truncate(start);
            return false;
        }
        self.added(start);
        true
    }
    fn engine(&mut self, loc: &CacheLocation) {
        let start = self.out.len();
        self.separator();
        // Plain structs with string keys: serialising cannot fail.
        let _ = serde_json::to_writer(&mut *self.out, loc);
        self.added(start);
    }
    fn placeholder(&mut self) {
        let start = self.out.len();
        self.separator();
        let (inst, filter) = (self.inst, self.filter);
        let p = self
            .placeholder
            .get_or_insert_with(|| serde_json::to_vec(&backend::placeholder(inst, filter)).unwrap_or_default());
        self.out.extend_from_slice(p);
        self.added(start);
    }
    fn len(&self) -> usize {
        self.count
    }
}

/// The storage configs of a read's records, looked up once per storage id rather than per block
/// (a read touches one or two storages).
struct Storages<'a> {
    snap: &'a Snapshot,
    seen: Vec<(u16, Option<&'a StorageConfig>)>,
}

impl<'a> Storages<'a> {
    fn get(&mut self, id: u16) -> Option<&'a StorageConfig> {
        if let Some((_, cfg)) = self.seen.iter().find(|(i, _)| *i == id) {
            return *cfg;
        }
        let cfg = storage_of(self.snap, id);
        self.seen.push((id, cfg));
        cfg
    }
    fn usable(&mut self, id: u16) -> bool {
        self.get(id).is_some_and(|s| s.is_available && s.is_healthy)
    }
}

impl DataPlane {
    /// The locations a query selects, as wire structs.
    #[allow(clippy::too_many_arguments, reason = "one argument per request field")]
    pub async fn get_cache_location(
        &self,
        snap: &Snapshot,
        inst: &InstanceInfo,
        query: QueryType,
        blocks: &[i64],
        mask: &BlockMask,
        sw_size: i32,
        spec_filter: &[String],
    ) -> Result<(Vec<CacheLocation>, MatchStats)> {
        let mut sink = Built { out: Vec::new(), inst, filter: spec_filter };
        let stats = self.lookup(snap, inst, query, blocks, mask, sw_size, spec_filter, &mut sink, true).await?;
        Ok((sink.out, stats))
    }

    /// The same read as [`Self::get_cache_location`], with the locations appended to `out` as
    /// the JSON array serde would write for them, rendered from the records and per-storage URI
    /// templates without building the structs (what the HTTP frontend answers with).
    #[allow(clippy::too_many_arguments, reason = "one argument per request field")]
    pub async fn get_cache_location_json(
        &self,
        snap: &Snapshot,
        inst: &InstanceInfo,
        query: QueryType,
        blocks: &[i64],
        mask: &BlockMask,
        sw_size: i32,
        spec_filter: &[String],
        out: &mut Vec<u8>,
    ) -> Result<MatchStats> {
        out.push(b'[');
        let mut sink = Rendered { out, count: 0, placeholder: None, inst, filter: spec_filter, expected: blocks.len() };
        let stats = self.lookup(snap, inst, query, blocks, mask, sw_size, spec_filter, &mut sink, true).await?;
        out.push(b']');
        Ok(stats)
    }

    /// How many blocks a query would return as real locations (`getCacheLocationLen`): the
    /// matched prefix (QT_PREFIX_MATCH), the hits (QT_BATCH_GET) or the window's blocks
    /// (QT_REVERSE_ROLL_SW_MATCH), each counted only if its storage can express it — exactly the
    /// non-placeholder locations of the same [`Self::get_cache_location`] — without building the
    /// reply or refreshing any block's recency (the returned `matched` is that count).
    pub async fn get_cache_location_len(
        &self,
        snap: &Snapshot,
        inst: &InstanceInfo,
        query: QueryType,
        blocks: &[i64],
        sw_size: i32,
    ) -> Result<MatchStats> {
        let mut sink = Counted { real: 0 };
        let stats =
            self.lookup(snap, inst, query, blocks, &BlockMask::Offset(0), sw_size, &[], &mut sink, true).await?;
        Ok(MatchStats { matched: sink.real, ..stats })
    }

    /// GetCacheLocationsByBackend: per block, one location per backend holding it — its storage
    /// (kvcm's own location) and each engine-reported tier (`ST_EVENT_REPORT_L1P5`, `_L2`), one
    /// holder picked per tier by the selector's strategy — limited to the `selectors`' backends
    /// when there are any. A block counts as a hit when any of them holds it; the query type
    /// selects blocks as getCacheLocation does (a miss is an empty vector where it returns one).
    #[allow(clippy::too_many_arguments, reason = "one argument per request field")]
    pub async fn get_cache_locations_by_backend(
        &self,
        snap: &Snapshot,
        inst: &InstanceInfo,
        query: QueryType,
        blocks: &[i64],
        mask: &BlockMask,
        sw_size: i32,
        spec_filter: &[String],
        selectors: &[crate::wire::meta::BackendLocationSelector],
    ) -> Result<(Vec<crate::wire::meta::CacheLocationVector>, MatchStats)> {
        use crate::wire::StorageType;
        use crate::wire::meta::LocationSelectStrategy as Lss;
        check_query(query, blocks.len(), mask, sw_size)?;
        let wanted = |t: StorageType| selectors.is_empty() || selectors.iter().any(|s| s.backend_type == t);
        let strategy = |t: StorageType| selectors.iter().find(|s| s.backend_type == t).map(|s| s.strategy);
        // kvcm's own locations: one per storage type serving the block (a usable storage first).
        let records = self.records(&self.keys(&inst.instance_id), blocks).await?;
        let mut per_block: Vec<Vec<CacheLocation>> = Vec::with_capacity(blocks.len());
        let mut children: Vec<Option<u16>> = Vec::with_capacity(blocks.len());
        // Each record's flags byte (its `adaptive` class), for the touch of an `adaptive` group.
        let keeps = keeps(snap, inst);
        let mut flags: Vec<u8> = Vec::with_capacity(if keeps == Keeps::Hits { blocks.len() } else { 0 });
        {
            let lookup = |id: u16| storage_of(snap, id);
            let mut builder = backend::LocationBuilder::new(&lookup, inst, spec_filter);
            for (i, r) in records.iter().enumerate() {
                if keeps == Keeps::Hits {
                    flags.push(r.and_then(|b| b.first().copied()).unwrap_or(0));
                }
                let mut here: Vec<CacheLocation> = Vec::new();
                let rec = r.and_then(super::record::BlockRecord::decode);
                if let Some(rec) = &rec {
                    let usable = |id: u16| storage_of(snap, id).is_some_and(|s| s.is_available && s.is_healthy);
                    let mut serving: Vec<&Location> =
                        rec.locations.iter().filter(|l| l.state == super::record::LocState::Serving).collect();
                    serving.sort_by_key(|l| !usable(l.storage));
                    for loc in serving {
                        let Some(t) = storage_of(snap, loc.storage).map(backend::storage_type) else { continue };
                        if wanted(t) && !here.iter().any(|h| h.storage_type == t) {
                            here.extend(builder.build(blocks[i], loc));
                        }
                    }
                }
                children.push(rec.filter(|_| !here.is_empty()).map(|r| r.children));
                per_block.push(here);
            }
        }
        drop(records);
        // The engine-reported tiers: one holder per block and tier.
        let tiers = [(false, StorageType::ST_EVENT_REPORT_L1P5), (true, StorageType::ST_EVENT_REPORT_L2)];
        if tiers.iter().any(|(_, t)| wanted(*t))
            && self.may_have_reporters(&inst.instance_id).await?
            && let Some(holders) = self
                .engine_holders(
                    &inst.instance_id,
                    blocks,
                    super::report_event::liveness(snap, &inst.instance_group_name, self.report_settings),
                )
                .await?
        {
            // Per reporter: which blocks it holds.
            let mut holds: std::collections::HashMap<u32, Vec<bool>> = std::collections::HashMap::new();
            for (i, held) in holders.per_block.iter().enumerate() {
                for (idx, _) in held {
                    holds.entry(*idx).or_insert_with(|| vec![false; blocks.len()])[i] = true;
                }
            }
            let mut picks = Vec::new();
            let mut at = Vec::new();
            for (l2, tier) in tiers.into_iter().filter(|(_, t)| wanted(*t)) {
                let strategy = strategy(tier).unwrap_or(Lss::LSS_UNSPECIFIED);
                for (i, held) in holders.per_block.iter().enumerate() {
                    let mut candidates: Vec<(u32, u8, &str)> = held
                        .iter()
                        .filter_map(|(idx, mid)| {
                            let (is_l2, host) = holders.tier_and_host(*idx)?;
                            (is_l2 == l2).then_some((*idx, *mid, host))
                        })
                        .collect();
                    // One candidate per holder (a host holding it in two media counts once).
                    candidates.dedup_by_key(|(idx, _, _)| *idx);
                    let pick = match strategy {
                        _ if candidates.is_empty() => None,
                        Lss::LSS_WEIGHTED_RANDOM => Some(candidates[fastrand::usize(..candidates.len())]),
                        Lss::LSS_V6D_COVERAGE => candidates
                            .iter()
                            .min_by_key(|(idx, _, host)| {
                                (std::cmp::Reverse(holds[idx].iter().filter(|h| **h).count()), *host)
                            })
                            .copied(),
                        Lss::LSS_V6D_PREFIX | Lss::LSS_UNSPECIFIED => candidates
                            .iter()
                            .min_by_key(|(idx, _, host)| {
                                (std::cmp::Reverse(holds[idx][i..].iter().take_while(|h| **h).count()), *host)
                            })
                            .copied(),
                    };
                    if let Some((idx, mid, _)) = pick {
                        at.push(i);
                        picks.push((blocks[i], idx, mid));
                    }
                }
            }
            let found = self.engine_location_of(&inst.instance_id, &holders, &picks, spec_filter).await?;
            for (i, loc) in at.into_iter().zip(found) {
                per_block[i].extend(loc);
            }
        }
        let hits: Vec<bool> = per_block.iter().map(|v| !v.is_empty()).collect();
        let selection = select(query, &hits, mask, sw_size)?;
        // Recency: the deepest block returned that kvcm's storage holds.
        let returned: Vec<usize> = match &selection {
            Selection::Prefix(idx) => idx.clone(),
            Selection::Each => (0..blocks.len()).collect(),
            Selection::Window(s, e) => (*s..*e).collect(),
        };
        if let Some(&i) = returned.iter().rev().find(|&&i| children[i].is_some()) {
            self.touch(&inst.instance_id, blocks[i], children[i] == Some(0), keeps, flags.get(i).copied().unwrap_or(0));
        }
        let vector = |v: Vec<CacheLocation>| crate::wire::meta::CacheLocationVector { locations: v };
        let out: Vec<_> = match selection {
            Selection::Prefix(idx) => idx.into_iter().map(|i| vector(std::mem::take(&mut per_block[i]))).collect(),
            Selection::Each => per_block.into_iter().map(vector).collect(),
            Selection::Window(s, e) => per_block
                .into_iter()
                .enumerate()
                .map(|(i, v)| vector(if i >= s && i < e { v } else { Vec::new() }))
                .collect(),
        };
        let hit_count = hits.iter().filter(|h| **h).count();
        let matched = out.iter().filter(|v| !v.locations.is_empty()).count();
        Ok((out, MatchStats { requested: blocks.len(), hits: hit_count, matched }))
    }

    #[allow(clippy::too_many_arguments, reason = "one argument per request field")]
    async fn lookup(
        &self,
        snap: &Snapshot,
        inst: &InstanceInfo,
        query: QueryType,
        blocks: &[i64],
        mask: &BlockMask,
        sw_size: i32,
        spec_filter: &[String],
        sink: &mut impl Sink,
        with_engine: bool,
    ) -> Result<MatchStats> {
        check_query(query, blocks.len(), mask, sw_size)?;
        let keys = self.keys(&inst.instance_id);
        let records = self.records(&keys, blocks).await?;
        let mut storages = Storages { snap, seen: Vec::with_capacity(2) };
        let mut hits = Vec::with_capacity(blocks.len());
        let mut views = Vec::with_capacity(blocks.len());
        // The deepest block's flags (its `adaptive` class), kept past the records for the touch.
        let keeps = keeps(snap, inst);
        let mut flags = Vec::with_capacity(if keeps == Keeps::Hits { blocks.len() } else { 0 });
        for r in records.iter() {
            if keeps == Keeps::Hits {
                flags.push(r.and_then(|b| b.first().copied()).unwrap_or(0));
            }
            let view = r.and_then(serving_view).filter(|(l, _)| storages.get(l.storage).is_some());
            // Prefer an available storage when a block has several serving locations.
            let view = match (view, r) {
                (Some((l, c)), Some(bytes)) if !storages.usable(l.storage) => super::record::BlockRecord::decode(bytes)
                    .and_then(|rec| {
                        rec.serving(|id| storage_of(snap, id).is_some_and(|s| s.is_available && s.is_healthy)).copied()
                    })
                    .map(|l| (l, c))
                    .or(Some((l, c))),
                (v, _) => v,
            };
            hits.push(view.is_some());
            views.push(view);
        }
        drop(records);
        // Blocks no storage holds may be held by a live engine (reportEvent): read those only
        // for an instance with reporters.
        let mut engine: Vec<Option<CacheLocation>> = Vec::new();
        let missing: Vec<usize> = (0..blocks.len()).filter(|&i| views[i].is_none()).collect();
        if with_engine && !missing.is_empty() && self.may_have_reporters(&inst.instance_id).await? {
            let keys: Vec<i64> = missing.iter().map(|&i| blocks[i]).collect();
            let liveness = super::report_event::liveness(snap, &inst.instance_group_name, self.report_settings);
            let found = self.engine_locations(&inst.instance_id, &keys, spec_filter, liveness).await?;
            engine = vec![None; blocks.len()];
            for (&i, loc) in missing.iter().zip(found) {
                hits[i] = loc.is_some();
                engine[i] = loc;
            }
        }
        let selection = select(query, &hits, mask, sw_size)?;
        let lookup = |id: u16| storage_of(snap, id);
        let mut builder = backend::LocationBuilder::new(&lookup, inst, spec_filter);
        let mut real = |sink: &mut dyn Sink, i: usize| match (views[i], engine.get(i)) {
            (Some((loc, _)), _) => sink.real(&mut builder, blocks[i], &loc),
            (None, Some(Some(loc))) => {
                sink.engine(loc);
                true
            }
            _ => false,
        };
        let deepest: Option<usize> = match &selection {
            Selection::Prefix(idx) => {
                let mut deepest = None;
                for &i in idx {
                    if !real(sink, i) {
                        break;
                    }
                    deepest = views[i].is_some().then_some(i).or(deepest);
                }
                deepest
            }
            Selection::Each => {
                for i in 0..blocks.len() {
                    if !real(sink, i) {
                        sink.placeholder();
                    }
                }
                (0..blocks.len()).rev().find(|&i| views[i].is_some())
            }
            Selection::Window(s, e) => {
                for i in 0..blocks.len() {
                    if !(i >= *s && i < *e && real(sink, i)) {
                        sink.placeholder();
                    }
                }
                (*s..*e).rev().find(|&i| views[i].is_some())
            }
        };
        let stats = MatchStats {
            requested: blocks.len(),
            hits: hits.iter().filter(|h| **h).count(),
            matched: match &selection {
                Selection::Prefix(_) => sink.len(),
                Selection::Window(s, e) => e - s,
                Selection::Each => hits.iter().filter(|h| **h).count(),
            },
        };
        // Recency is kvcm's own blocks' (an engine-held block is the engine's business): the
        // deepest block a storage holds.
        if let Some(i) = deepest.filter(|_| sink.touches()) {
            let leaf = views[i].map(|(_, children)| children == 0).unwrap_or(false);
            self.touch(&inst.instance_id, blocks[i], leaf, keeps, flags.get(i).copied().unwrap_or(0));
        }
        Ok(stats)
    }

    /// Recency/frequency bookkeeping for the deepest block a read hit, off the request's
    /// critical path: a leaf's recency and LFU priority are updated in place (XX: an evicted
    /// leaf is never re-added), an interior block's touch is remembered for when it becomes a
    /// leaf; in an LFU group ([`Keeps::Counts`]) the block's count of reads (`icount`,
    /// lua/lib/record.lua) grows by one; in an `adaptive` group ([`Keeps::Hits`]) a read that
    /// ends at a leaf is a hit, counted in the `adaptive` hash at the leaf's age (since its last
    /// access, read in the same pipeline) and class (`flags`: the record's flags byte), the
    /// histograms `lua/evict.lua` ranks leaves by. A pipeline, not a script: a script call
    /// costs Valkey ~2.8 µs more per read than the two `ZADD`s (docs/benchmarks.md, "The read's
    /// touch: a pipeline, not a script"). A hit's cell is known once the pipeline answers; the
    /// hit then waits in [`PendingHits`] and goes to Valkey with the instance's other hits of
    /// the next [`HIT_FLUSH`] (one pipeline of one `HINCRBY` per cell hit), not in a round trip
    /// of its own. The recency bookkeeping is right whether or not the block is still a leaf
    /// when the pipeline lands; a count added after the block was unlinked is dropped when the
    /// deleter releases the block (`drop_deleting`), and one that lands even later (or an
    /// interior touch that lands after its block went) by the worker's touch-gc.
    fn touch(&self, instance_id: &str, block: i64, leaf: bool, keeps: Keeps, flags: u8) {
        let keys = self.keys(instance_id);
        let mut conn = self.conn();
        let field = block_field(block);
        let now = now_ms();
        let pending = self.pending_hits.clone();
        let (hints, in_flight) = (self.read_hints.clone(), self.hints_in_flight.clone());
        let sending = Sending::start(&in_flight);
        tokio::spawn(async move {
            let mut pipe = redis::pipe();
            let hit = leaf && keeps == Keeps::Hits;
            if hit {
                pipe.cmd("ZSCORE").arg(&keys.lru).arg(&field[..]);
            }
            if leaf {
                pipe.cmd("ZADD").arg(&keys.lru).arg("XX").arg(now).arg(&field[..]).ignore();
                pipe.cmd("ZADD").arg(&keys.lfu).arg("XX").arg("INCR").arg(1).arg(&field[..]).ignore();
            } else {
                pipe.cmd("ZADD").arg(&keys.itouch).arg(now).arg(&field[..]).ignore();
            }
            if keeps == Keeps::Counts {
                pipe.cmd("HINCRBY").arg(&keys.icount).arg(&field[..]).arg(1).ignore();
            }
            let outcome = pipe.query_async::<Vec<Option<f64>>>(&mut conn).await;
            let last = match outcome {
                Ok(v) => v.into_iter().next().flatten(),
                Err(e) => {
                    hints.recency_failed.fetch_add(1, Relaxed);
                    tracing::debug!(error = %e, "recency update failed (a hint; the read succeeded)");
                    return;
                }
            };
            // Still a leaf when the pipeline ran (ZSCORE found it): a hit at its age.
            if let Some(last) = last.filter(|_| hit) {
                let age = now.saturating_sub(last as u64);
                let cell = crate::hit_density::cell(crate::hit_density::class_of(flags), age);
                let (batch, _sending) = match pending.add(&keys.adaptive, cell) {
                    Added::Pending => return,
                    Added::Full(batch) => (batch, sending),
                    // The instance's first hit since its last flush: this task flushes them all.
                    // While it waits the hit is in `pending`, where a stopping frontend finds it
                    // (flush_pending_hits), so the wait is not a write under way.
                    Added::First => {
                        drop(sending);
                        tokio::time::sleep(HIT_FLUSH).await;
                        // Under way again before the batch leaves `pending`, so that a stopping
                        // frontend finds it in one place or the other.
                        let sending = Sending::start(&in_flight);
                        match pending.take(&keys.adaptive) {
                            Some(batch) => (batch, sending),
                            None => return, // taken full in the meantime
                        }
                    }
                };
                batch.send(&keys.adaptive, &mut conn, &hints).await;
            }
        });
    }

    /// Waits, for at most `bound`, until no read hint of this data plane's connection is being
    /// written (a read's touch pipeline, or a batch of hit counts being sent): what a serving
    /// thread does before its runtime, and the tasks on it, are dropped. Whether none was left.
    pub async fn hints_settled(&self, bound: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + bound;
        while self.hints_in_flight.load(Acquire) > 0 {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        true
    }

    /// Sends every hit count still waiting in [`PendingHits`] now, all instances' batches at once,
    /// without waiting for [`HIT_FLUSH`]: what a frontend does once it has stopped serving (after
    /// [`DataPlane::hints_settled`] on every runtime that served reads), so that a stop loses no
    /// hit of an answered read — but for a batch that was being sent when its runtime was
    /// dropped, or a touch still under way past its runtime's bound (its hit lands in
    /// `PendingHits` after this took them). Batches not answered within `bound` are lost (some
    /// may have been applied all the same).
    pub async fn flush_pending_hits(&self, bound: std::time::Duration) -> FlushedHits {
        let batches = self.pending_hits.take_all();
        let total: u64 = batches.iter().map(|(_, b)| u64::from(b.events)).sum();
        let counted = AtomicU64::new(0);
        let sends = batches.iter().map(|(key, batch)| {
            let (mut conn, counted) = (self.conn(), &counted);
            async move {
                if batch.send(key, &mut conn, &self.read_hints).await {
                    counted.fetch_add(u64::from(batch.events), Relaxed);
                }
            }
        });
        let _ = tokio::time::timeout(bound, futures::future::join_all(sends)).await;
        let counted = counted.into_inner();
        FlushedHits { counted, lost: total - counted }
    }
}

/// What [`DataPlane::flush_pending_hits`] did: hits counted in Valkey, and hits whose batch
/// failed or was not answered in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushedHits {
    pub counted: u64,
    pub lost: u64,
}

/// A read hint being written (counted in a data plane's `hints_in_flight`) while this lives.
struct Sending(Arc<AtomicUsize>);

impl Sending {
    fn start(in_flight: &Arc<AtomicUsize>) -> Sending {
        in_flight.fetch_add(1, Relaxed);
        Sending(in_flight.clone())
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        // Release: what the hint's task did before (a hit added to `PendingHits`) is seen by
        // whoever reads the count 0 ([`DataPlane::hints_settled`], Acquire).
        self.0.fetch_sub(1, Release);
    }
}

/// How this frontend's read hints (recency updates and `adaptive` hit counts, sent after the
/// read was answered) fared: `kvcm_read_hint_failures_total{hint}` and
/// `kvcm_adaptive_hits_total{outcome}`.
#[derive(Debug, Default)]
pub struct ReadHints {
    /// Recency pipelines (a read's touch) that failed.
    pub recency_failed: AtomicU64,
    /// `adaptive` hits whose counts reached Valkey.
    pub hits_counted: AtomicU64,
    /// `adaptive` hits whose counts did not: their batch failed, or was dropped unanswered
    /// (its runtime stopped, or a stopping frontend's last flush ran out of time).
    pub hits_lost: AtomicU64,
    /// Batches of hit counts that failed.
    pub hit_batches_failed: AtomicU64,
}

/// How long a hit of an `adaptive` group waits for others of its instance before its count goes
/// to Valkey: a frontend that is killed loses about this much of its hits' counts (statistics
/// the policy learns from, not state; the worker's learning step waits for 2,048 events).
pub(crate) const HIT_FLUSH: std::time::Duration = std::time::Duration::from_millis(100);

/// Hits of one instance sent at once, sooner than [`HIT_FLUSH`]: a busy instance's batch never
/// grows past this.
const HITS_PER_FLUSH: u32 = 256;

/// Hits of `adaptive` groups' reads, per instance (its `adaptive` hash), counted on the
/// frontend until they go to Valkey together: one pipeline per instance per [`HIT_FLUSH`] (or per
/// [`HITS_PER_FLUSH`] hits) instead of a second round trip per read. At most one batch per
/// instance, each at most `CLASSES × BUCKETS` cells.
#[derive(Debug, Default)]
pub(crate) struct PendingHits {
    by_instance: std::sync::Mutex<std::collections::HashMap<String, HitBatch>>,
}

/// An instance's hits waiting to be counted: per histogram cell, and in all.
#[derive(Debug, Default)]
pub(crate) struct HitBatch {
    cells: std::collections::BTreeMap<usize, u32>,
    events: u32,
}

/// What [`PendingHits::add`] did with a hit.
#[derive(Debug)]
pub(crate) enum Added {
    /// The instance's first pending hit: the caller flushes the batch after [`HIT_FLUSH`].
    First,
    /// Added to a pending batch that someone will flush.
    Pending,
    /// The batch reached [`HITS_PER_FLUSH`] and is the caller's to flush now.
    Full(HitBatch),
}

impl PendingHits {
    pub(crate) fn add(&self, adaptive_key: &str, cell: usize) -> Added {
        let mut all = self.by_instance.lock().unwrap_or_else(|e| e.into_inner());
        // The key is copied only for an instance's first pending hit.
        let (batch, first) = match all.get_mut(adaptive_key) {
            Some(batch) => (batch, false),
            None => (all.entry(adaptive_key.to_string()).or_default(), true),
        };
        *batch.cells.entry(cell).or_default() += 1;
        batch.events += 1;
        if batch.events >= HITS_PER_FLUSH {
            return Added::Full(all.remove(adaptive_key).unwrap_or_default());
        }
        if first { Added::First } else { Added::Pending }
    }

    pub(crate) fn take(&self, adaptive_key: &str) -> Option<HitBatch> {
        self.by_instance.lock().unwrap_or_else(|e| e.into_inner()).remove(adaptive_key)
    }

    /// Every pending batch, with its instance's `adaptive` key (the tasks that would have sent
    /// them find nothing to take).
    pub(crate) fn take_all(&self) -> Vec<(String, HitBatch)> {
        self.by_instance.lock().unwrap_or_else(|e| e.into_inner()).drain().collect()
    }
}

impl HitBatch {
    /// The `HINCRBY`s that count the batch: each cell's hits (in thousandths,
    /// [`crate::hit_density::UNIT`]) and the events.
    fn pipeline(&self, adaptive_key: &str) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        for (cell, hits) in &self.cells {
            let by = i64::from(*hits) * crate::hit_density::UNIT;
            pipe.cmd("HINCRBY").arg(adaptive_key).arg(format!("h{cell}")).arg(by).ignore();
        }
        pipe.cmd("HINCRBY").arg(adaptive_key).arg("events").arg(self.events).ignore();
        pipe
    }

    /// Counts the batch in Valkey; whether it was, with the outcome in `hints` (a send dropped
    /// before its answer counts its hits lost).
    async fn send(&self, adaptive_key: &str, conn: &mut ClusterConnection, hints: &ReadHints) -> bool {
        /// Counts the batch's hits lost unless defused: a send dropped mid-way.
        struct Unanswered<'a>(&'a ReadHints, u64);
        impl Drop for Unanswered<'_> {
            fn drop(&mut self) {
                self.0.hits_lost.fetch_add(self.1, Relaxed);
            }
        }
        let events = u64::from(self.events);
        let unanswered = Unanswered(hints, events);
        let outcome = self.pipeline(adaptive_key).query_async::<()>(conn).await;
        std::mem::forget(unanswered);
        match outcome {
            Ok(()) => {
                hints.hits_counted.fetch_add(events, Relaxed);
                true
            }
            Err(e) => {
                hints.hits_lost.fetch_add(events, Relaxed);
                hints.hit_batches_failed.fetch_add(1, Relaxed);
                tracing::debug!(error = %e, hits = self.events, "adaptive hit counts failed (hints; the reads succeeded)");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_wait_per_instance_and_a_full_batch_goes_at_once() {
        let p = PendingHits::default();
        assert!(matches!(p.add("a", 3), Added::First));
        assert!(matches!(p.add("a", 3), Added::Pending));
        assert!(matches!(p.add("b", 7), Added::First), "instances batch apart");
        let a = p.take("a").unwrap();
        assert_eq!((a.events, a.cells.get(&3).copied()), (2, Some(2)));
        assert!(p.take("a").is_none(), "taken once");
        assert!(matches!(p.add("a", 1), Added::First), "a new batch after a flush");
        for _ in 1..HITS_PER_FLUSH - 1 {
            assert!(matches!(p.add("a", 2), Added::Pending));
        }
        match p.add("a", 2) {
            Added::Full(batch) => {
                assert_eq!(batch.events, HITS_PER_FLUSH);
                assert_eq!(batch.cells.values().sum::<u32>(), HITS_PER_FLUSH);
            }
            other => panic!("{other:?}"),
        }
        assert!(p.take("a").is_none(), "the full batch left nothing behind");
        assert_eq!(p.take("b").unwrap().events, 1);
    }

    #[test]
    fn a_batch_counts_each_cells_hits_in_thousandths_and_the_events() {
        let p = PendingHits::default();
        for cell in [3, 3, 130] {
            p.add("k", cell);
        }
        let packed = String::from_utf8(p.take("k").unwrap().pipeline("k").get_packed_pipeline()).unwrap();
        let hincrby = |field: &str, by: &str| {
            format!("*4\r\n$7\r\nHINCRBY\r\n$1\r\nk\r\n${}\r\n{field}\r\n${}\r\n{by}\r\n", field.len(), by.len())
        };
        assert_eq!(packed, [hincrby("h3", "2000"), hincrby("h130", "1000"), hincrby("events", "3")].concat());
    }

    fn hits(s: &str) -> Vec<bool> {
        s.chars().map(|c| c == '1').collect()
    }

    #[test]
    fn sliding_window_examples_from_the_design() {
        // keys 1..5 serving; query [1..7], sw 2 -> hits at 3, 4
        let w = select(QueryType::QT_REVERSE_ROLL_SW_MATCH, &hits("1111100"), &BlockMask::Offset(0), 2).unwrap();
        assert_eq!(w, Selection::Window(3, 5));
        // query [1,2,3,10,5,6,7], sw 2 -> hits at 1, 2
        let w = select(QueryType::QT_REVERSE_ROLL_SW_MATCH, &hits("1110100"), &BlockMask::Offset(0), 2).unwrap();
        assert_eq!(w, Selection::Window(1, 3));
        let none = select(QueryType::QT_REVERSE_ROLL_SW_MATCH, &hits("1010101"), &BlockMask::Offset(0), 2).unwrap();
        assert_eq!(none, Selection::Window(0, 0));
        let all = select(QueryType::QT_REVERSE_ROLL_SW_MATCH, &hits("111"), &BlockMask::Offset(0), 3).unwrap();
        assert_eq!(all, Selection::Window(0, 3));
        for bad in [0, 4, -1] {
            assert!(select(QueryType::QT_REVERSE_ROLL_SW_MATCH, &hits("111"), &BlockMask::Offset(0), bad).is_err());
        }
    }

    #[test]
    fn prefix_match_skips_masked_blocks_and_stops_at_the_first_miss() {
        let p = select(QueryType::QT_PREFIX_MATCH, &hits("0011011"), &BlockMask::Offset(2), 0).unwrap();
        assert_eq!(p, Selection::Prefix(vec![2, 3]));
        let p =
            select(QueryType::QT_PREFIX_MATCH, &hits("1011"), &BlockMask::Bools(vec![false, true, false, false]), 0)
                .unwrap();
        assert_eq!(p, Selection::Prefix(vec![0, 2, 3]));
        let p = select(QueryType::QT_PREFIX_MATCH, &hits("0111"), &BlockMask::Offset(0), 0).unwrap();
        assert_eq!(p, Selection::Prefix(vec![]));
    }

    proptest::proptest! {
        #[test]
        fn the_window_found_is_the_right_most_run_of_hits(h in proptest::collection::vec(proptest::bool::ANY, 1..40), sw in 1usize..8) {
            proptest::prop_assume!(sw <= h.len());
            let sel = select(QueryType::QT_REVERSE_ROLL_SW_MATCH, &h, &BlockMask::Offset(0), sw as i32).unwrap();
            let expected = (sw..=h.len()).rev().find(|&end| h[end - sw..end].iter().all(|x| *x));
            match (sel, expected) {
                (Selection::Window(s, e), Some(end)) => proptest::prop_assert_eq!((s, e), (end - sw, end)),
                (Selection::Window(0, 0), None) => {}
                (other, exp) => proptest::prop_assert!(false, "{other:?} vs {exp:?}"),
            }
        }
    }
}
