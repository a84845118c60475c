//! Adaptive: leaf-aware eviction by learned hit density. kvcm-worker runs the same rule live
//! (`POLICY_ADAPTIVE`: lua/evict.lua, with the arithmetic of [`super::hit_density`] shared with
//! kvcm-core); docs/optimizer.md, "adaptive live", compares the two.
//!
//! Only leaves of the prefix tree are evictable, as in [`super::leaf_lru`]. Among them the victim
//! is the one expected to get the fewest hits per unit of time it would still occupy the cache,
//! learned from this cache's own history of hits and evictions by age
//! ([`super::hit_density`], where the arithmetic and an example live). It models only what a
//! live policy can observe:
//!
//! * a **hit** is a read whose deepest block is a resident leaf (kvcm's read path touches
//!   only the deepest block of a read), counted at the leaf's age — the time since its last
//!   access, in trace time;
//! * an **eviction** is counted at the victim's age;
//! * each eviction samples [`SAMPLES`] leaves uniformly (with replacement) and evicts the one with
//!   the lowest density, the least recently accessed on a tie;
//! * the density table is recomputed, and the histograms decay, every [`DECAY_EVENTS`] events;
//! * leaves are counted and ranked in three **classes**, each with its own histograms and table:
//!   - *shared*: a block that has had two resident children at once (a system prompt or another
//!     prefix that several requests branch from). The live store sees this where it counts
//!     children as a write finishes. An evicted shared block is remembered in a small FIFO
//!     (1/[`GHOST_DIVISOR`] of the largest resident count seen), so that it is shared again
//!     when written back, rather than only after its second child;
//!   - *long write*: the [`LONG_RUN`]-th block of its request's run of new blocks and every one
//!     after it (a pasted document, a long tool output; the live store knows it when a write
//!     session starts);
//!   - the rest (conversation turns, short suffixes).
//!
//! Ages are milliseconds of trace time (a live cache would measure wall-clock time; a replay
//! sped up S× shifts every age by log2(S) doublings, which the learned table absorbs). The
//! sampler is seeded: a replay is deterministic.

use std::collections::VecDeque;

use super::hit_density::{self, BUCKETS, CLASSES, DECAY, DECAY_EVENTS, SAMPLES, bucket};

use super::forest::Forest;
use super::{Access, EvictionPolicy, Position};
use crate::trace::BlockId;

const ABSENT: u32 = u32::MAX;

pub use super::hit_density::{GHOST_DIVISOR, LONG_RUN};

/// Leaf-aware eviction by learned hit density.
#[derive(Debug, Clone)]
pub struct Adaptive {
    forest: Forest,
    /// Resident leaves, for uniform sampling, and each block's slot in it.
    leaves: Vec<BlockId>,
    slot: Vec<u32>,
    last_ms: Vec<u64>,
    /// Per class, `BUCKETS` entries each.
    hits: Vec<f64>,
    evictions: Vec<f64>,
    table: Vec<f64>,
    /// Whether a block is shared: it has had two resident children at once since it was
    /// written, or it was written back from the ghost. Left as it is when the block is evicted
    /// (set afresh when it is written back).
    shared: Vec<bool>,
    /// Evicted shared blocks, oldest first, each with the number of its eviction; `ghost_seq`
    /// is a block's number while it is remembered (0: not). An entry whose number is no longer
    /// its block's (the block was written back, or evicted again later) is stale: skipped.
    ghost: VecDeque<(BlockId, u64)>,
    ghost_seq: Vec<u64>,
    /// Evictions of shared blocks so far: the number the next ghost entry gets.
    evicted: u64,
    /// The largest resident count seen, which bounds the ghost.
    peak: usize,
    /// Whether a resident block is the [`LONG_RUN`]-th of its request's run of new blocks or
    /// later.
    long: Vec<bool>,
    /// Length of the current run of new blocks (consecutive inserts, each the child of the one
    /// before: one request's new suffix), and the position of its last access.
    run: u32,
    last_insert: Option<Position>,
    events: u64,
    now_ms: u64,
    rng: fastrand::Rng,
}

impl Adaptive {
    /// An empty cache over block ids `0..blocks`, sampling with a generator seeded by `seed`.
    pub fn new(blocks: usize, seed: u64) -> Self {
        Self {
            forest: Forest::new(blocks),
            leaves: Vec::new(),
            slot: vec![ABSENT; blocks],
            last_ms: vec![0; blocks],
            hits: vec![0.0; CLASSES * BUCKETS],
            evictions: vec![0.0; CLASSES * BUCKETS],
            table: vec![0.0; CLASSES * BUCKETS],
            shared: vec![false; blocks],
            ghost: VecDeque::new(),
            ghost_seq: vec![0; blocks],
            evicted: 0,
            peak: 0,
            long: vec![false; blocks],
            run: 0,
            last_insert: None,
            events: 0,
            now_ms: 0,
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    fn age(&self, block: BlockId) -> u64 {
        self.now_ms.saturating_sub(self.last_ms[block as usize])
    }

    fn add_leaf(&mut self, block: BlockId) {
        self.slot[block as usize] = self.leaves.len() as u32;
        self.leaves.push(block);
    }

    fn remove_leaf_slot(&mut self, block: BlockId) {
        let at = std::mem::replace(&mut self.slot[block as usize], ABSENT) as usize;
        self.leaves.swap_remove(at);
        if let Some(&moved) = self.leaves.get(at) {
            self.slot[moved as usize] = at as u32;
        }
    }

    /// Index of `block`'s first bucket in the per-class vectors.
    fn class(&self, block: BlockId) -> usize {
        if self.shared[block as usize] {
            BUCKETS
        } else if self.long[block as usize] {
            2 * BUCKETS
        } else {
            0
        }
    }

    fn count(&mut self, hit: bool, block: BlockId) {
        let at = self.class(block) + bucket(self.age(block));
        let histogram = if hit { &mut self.hits } else { &mut self.evictions };
        histogram[at] += 1.0;
        self.events += 1;
        if self.events.is_multiple_of(DECAY_EVENTS) {
            self.table = hit_density::table(&self.hits, &self.evictions);
            for v in self.hits.iter_mut().chain(self.evictions.iter_mut()) {
                *v *= DECAY;
            }
        }
    }

    fn score(&self, block: BlockId) -> (f64, u64) {
        (self.table[self.class(block) + bucket(self.age(block))], self.last_ms[block as usize])
    }
}

impl EvictionPolicy for Adaptive {
    fn name(&self) -> &'static str {
        "adaptive"
    }

    fn contains(&self, block: BlockId) -> bool {
        self.forest.contains(block)
    }

    fn access(&mut self, access: Access) {
        self.now_ms = access.time_us / 1_000;
        let b = access.block;
        if self.forest.contains(b) {
            // In a prefix-chained trace a resident leaf is the deepest hit of its request.
            if self.forest.is_leaf(b) {
                self.count(true, b);
            }
        } else {
            let parent = access.parent.filter(|&p| p != b && self.forest.contains(p));
            let parent_leaf = parent.filter(|&p| self.forest.is_leaf(p));
            self.forest.insert(&access);
            match (parent, parent_leaf) {
                (_, Some(p)) => self.remove_leaf_slot(p),
                // A second resident child: the parent is a prefix requests branch from.
                (Some(p), None) => self.shared[p as usize] = true,
                (None, _) => {}
            }
            // Written back: shared at once if the ghost remembers it (its entry goes stale).
            self.shared[b as usize] = std::mem::take(&mut self.ghost_seq[b as usize]) != 0;
            let continues = access.parent.is_some() && self.last_insert.is_some_and(|p| p + 1 == access.position);
            self.run = if continues { self.run + 1 } else { 1 };
            self.last_insert = Some(access.position);
            self.long[b as usize] = self.run >= LONG_RUN;
            self.add_leaf(b);
            self.peak = self.peak.max(self.forest.len());
        }
        self.last_ms[b as usize] = self.now_ms;
    }

    fn len(&self) -> usize {
        self.forest.len()
    }

    fn evict(&mut self) -> Option<BlockId> {
        if self.leaves.is_empty() {
            debug_assert_eq!(self.forest.len(), 0, "resident blocks but no leaf");
            return None;
        }
        let mut victim = self.leaves[self.rng.usize(..self.leaves.len())];
        let mut coldest = self.score(victim);
        for _ in 1..SAMPLES {
            let candidate = self.leaves[self.rng.usize(..self.leaves.len())];
            let s = self.score(candidate);
            if hit_density::colder(s, coldest) {
                (victim, coldest) = (candidate, s);
            }
        }
        self.count(false, victim);
        if self.shared[victim as usize] {
            self.evicted += 1;
            self.ghost.push_back((victim, self.evicted));
            self.ghost_seq[victim as usize] = self.evicted;
            // Stale entries count against the bound too, so the FIFO's memory stays bounded.
            while self.ghost.len() * GHOST_DIVISOR > self.peak.max(GHOST_DIVISOR) {
                let (forgotten, seq) = self.ghost.pop_front().expect("a non-empty ghost");
                if self.ghost_seq[forgotten as usize] == seq {
                    self.ghost_seq[forgotten as usize] = 0;
                }
            }
        }
        self.remove_leaf_slot(victim);
        if let Some(parent) = self.forest.remove_leaf(victim) {
            self.add_leaf(parent);
        }
        Some(victim)
    }
}

#[cfg(test)]
mod tests {
    use crate::policy::{PolicyKind, PolicyParams};
    use crate::replay::simulate;
    use crate::trace::Trace;
    use crate::workload::{WorkloadKind, generate};

    /// A generated workload (docs/optimizer.md, "Generated workloads") as a trace.
    fn workload(kind: WorkloadKind, requests: usize) -> Trace {
        let requests = generate(kind, requests, 1);
        Trace::from_requests(
            requests.into_iter().map(|r| (r.time_ms * 1_000, r.blocks.iter().map(|&b| b as i64).collect::<Vec<_>>())),
        )
    }

    /// Replays `requests` of a generated `kind` at 1/`divisor` of its distinct blocks; asserts
    /// that adaptive's hit rate is above `gain` × LRU's and never above OPT's.
    fn assert_beats_lru(kind: WorkloadKind, requests: usize, divisor: usize, gain: f64) {
        let trace = workload(kind, requests);
        let (capacity, params) = (trace.distinct_blocks() / divisor, PolicyParams::default());
        let run = |policy| simulate(&trace, policy, capacity, &params, None);
        let (lru, adaptive, opt) = (run(PolicyKind::Lru), run(PolicyKind::Adaptive), run(PolicyKind::Opt));
        assert!(
            adaptive.hit_rate() > gain * lru.hit_rate(),
            "{kind:?} at 1/{divisor}: adaptive {:.3} vs lru {:.3} (opt {:.3})",
            adaptive.hit_rate(),
            lru.hit_rate(),
            opt.hit_rate()
        );
        assert!(adaptive.hit_blocks <= opt.hit_blocks);
    }

    #[test]
    fn on_tool_agent_loops_it_keeps_what_comes_back_and_beats_lru() {
        // Agent loops come back after 1–5 s of "thinking", many at once: at 0.5% of the distinct
        // blocks LRU evicts contexts just before their next turn (here 13.1% vs adaptive 35.8%,
        // OPT 45.1%; docs/optimizer.md has 20,000 requests).
        assert_beats_lru(WorkloadKind::Agent, 6_000, 200, 1.5);
    }

    #[test]
    fn shared_prompts_are_ranked_apart_from_conversation_turns() {
        // At 0.25% of the distinct blocks a few popular system prompts decide the hit rate: with
        // one age table for every leaf, conversation tails push them out (here chat 1.93× LRU
        // with the classes, 1.59× with one table; mix 1.80× and 1.36×; docs/optimizer.md).
        assert_beats_lru(WorkloadKind::Chat, 6_000, 400, 1.75);
        assert_beats_lru(WorkloadKind::Mix, 6_000, 400, 1.6);
    }

    #[test]
    fn a_block_is_classed_by_what_its_writes_and_its_children_show() {
        use super::{Adaptive, BUCKETS, LONG_RUN};
        use crate::policy::{Access, EvictionPolicy};
        let mut cache = Adaptive::new(64, 1);
        let mut position = 0;
        let mut request = |cache: &mut Adaptive, time_us: u64, blocks: &[u32]| {
            for (i, &block) in blocks.iter().enumerate() {
                let parent = i.checked_sub(1).map(|p| blocks[p]);
                cache.access(Access { block, position, time_us, parent });
                position += 1;
            }
        };
        // A prompt of 20 new blocks: the 16th on are long writes, the ones before are not.
        let prompt: Vec<u32> = (0..20).collect();
        request(&mut cache, 1_000, &prompt);
        let run = LONG_RUN as usize;
        assert_eq!(cache.class(prompt[run - 2]), 0, "{} blocks into the run", run - 1);
        assert_eq!(cache.class(prompt[run - 1]), 2 * BUCKETS, "{run} blocks into the run");
        // Two requests branch from block 3: it becomes shared; its first child (4) does not.
        request(&mut cache, 2_000, &[0, 1, 2, 3, 40]);
        assert_eq!(cache.class(3), BUCKETS);
        assert_eq!(cache.class(4), 0);
        assert_eq!(cache.class(40), 0, "a short suffix after a hit prefix");
        // Evicting everything: shared block 3 is remembered, and shared again when written back
        // (before any second child); the others come back as what their new write makes them.
        while cache.evict().is_some() {}
        assert!(cache.ghost_seq[3] != 0 && cache.ghost_seq[4] == 0);
        request(&mut cache, 3_000, &[0, 1, 2, 3]);
        assert_eq!(cache.class(3), BUCKETS);
        assert_eq!(cache.class(2), 0);
    }

    #[test]
    fn the_ghost_remembers_only_the_latest_evicted_shared_blocks() {
        use super::{Adaptive, BUCKETS, GHOST_DIVISOR};
        use crate::policy::{Access, EvictionPolicy};
        let (roots, mut position) = (20u32, 0);
        let mut cache = Adaptive::new(3 * roots as usize, 1);
        let mut request = |cache: &mut Adaptive, blocks: [u32; 2]| {
            cache.access(Access { block: blocks[0], position, time_us: 1_000, parent: None });
            cache.access(Access { block: blocks[1], position: position + 1, time_us: 1_000, parent: Some(blocks[0]) });
            position += 2;
        };
        // 20 roots with two children each: 60 resident blocks, every root shared.
        for r in 0..roots {
            request(&mut cache, [r, roots + r]);
            request(&mut cache, [r, 2 * roots + r]);
        }
        let shared_evicted: Vec<u32> = std::iter::from_fn(|| cache.evict()).filter(|&b| b < roots).collect();
        assert_eq!(shared_evicted.len(), roots as usize);
        let kept = 3 * roots as usize / GHOST_DIVISOR;
        let (forgotten, remembered) = shared_evicted.split_at(shared_evicted.len() - kept);
        assert!(remembered.iter().all(|&b| cache.ghost_seq[b as usize] != 0), "the last {kept} evicted");
        assert!(forgotten.iter().all(|&b| cache.ghost_seq[b as usize] == 0));
        // Written back: a remembered root is shared at once, a forgotten one is not.
        request(&mut cache, [remembered[0], 3 * roots - 1]);
        request(&mut cache, [forgotten[0], 3 * roots - 2]);
        assert_eq!(cache.class(remembered[0]), BUCKETS);
        assert_eq!(cache.class(forgotten[0]), 0);
        assert_eq!(cache.ghost_seq[remembered[0] as usize], 0, "its entry is stale now");
    }

    #[test]
    fn long_writes_are_what_lifts_a_mix_of_documents_and_conversations() {
        // 20,000 requests of `mix` at 0.25%: 1.31× LRU (30.1% vs 23.0%); without the long-write
        // class 1.14× (26.1%), the documents' long runs ranked with conversation turns.
        assert_beats_lru(WorkloadKind::Mix, 20_000, 400, 1.22);
    }

    #[test]
    fn no_seed_traps_a_class_that_was_never_hit() {
        // 2,000 requests of `chat` at 2%: ranked by its own empty table, the shared class was
        // evicted before any of it could be hit in three of eight seeds (44.7–45.3% against
        // 49–50.5%); with a class never hit ranked by the pooled table, 52.5–53.6% for every seed.
        let trace = workload(WorkloadKind::Chat, 2_000);
        let capacity = trace.distinct_blocks() / 50;
        for seed in 1..=8 {
            let params = PolicyParams { seed, ..PolicyParams::default() };
            let rate = simulate(&trace, PolicyKind::Adaptive, capacity, &params, None).hit_rate();
            assert!(rate > 0.51, "seed {seed}: {rate:.4}");
        }
    }

    #[test]
    fn a_replay_is_deterministic_for_a_seed() {
        let trace = workload(WorkloadKind::Chat, 3_000);
        let (capacity, params) = (trace.distinct_blocks() / 200, PolicyParams::default());
        let a = simulate(&trace, PolicyKind::Adaptive, capacity, &params, None);
        assert_eq!(a, simulate(&trace, PolicyKind::Adaptive, capacity, &params, None));
        // Another seed samples other leaves; the learned ranking keeps the result close.
        let other = simulate(&trace, PolicyKind::Adaptive, capacity, &PolicyParams { seed: 99, ..params }, None);
        assert_ne!(a, other, "the seed drives the sampler");
        assert!(a.hit_blocks.abs_diff(other.hit_blocks) * 20 < a.hit_blocks.max(1), "{a:?} vs {other:?}");
    }
}
