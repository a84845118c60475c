//! Adaptive: leaf-aware eviction by learned hit density (issue 12's current candidate; not yet
//! run by the worker — docs/optimizer.md, "Third candidate", has the live experiment).
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
//! * the density table is recomputed, and the histograms decay, every [`DECAY_EVENTS`] events.
//!
//! Ages are milliseconds of trace time (a live cache would measure wall-clock time; a replay
//! sped up S× shifts every age by log2(S) doublings, which the learned table absorbs). The
//! sampler is seeded: a replay is deterministic.

use super::hit_density::{self, BUCKETS, DECAY, DECAY_EVENTS, SAMPLES, bucket};

use super::forest::Forest;
use super::{Access, EvictionPolicy};
use crate::trace::BlockId;

const ABSENT: u32 = u32::MAX;

/// Leaf-aware eviction by learned hit density.
#[derive(Debug, Clone)]
pub struct Adaptive {
    forest: Forest,
    /// Resident leaves, for uniform sampling, and each block's slot in it.
    leaves: Vec<BlockId>,
    slot: Vec<u32>,
    last_ms: Vec<u64>,
    hits: Vec<f64>,
    evictions: Vec<f64>,
    table: Vec<f64>,
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
            hits: vec![0.0; BUCKETS],
            evictions: vec![0.0; BUCKETS],
            table: vec![0.0; BUCKETS],
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

    fn count(&mut self, hit: bool, age_ms: u64) {
        let histogram = if hit { &mut self.hits } else { &mut self.evictions };
        histogram[bucket(age_ms)] += 1.0;
        self.events += 1;
        if self.events.is_multiple_of(DECAY_EVENTS) {
            self.table = hit_density::densities(&self.hits, &self.evictions);
            for v in self.hits.iter_mut().chain(self.evictions.iter_mut()) {
                *v *= DECAY;
            }
        }
    }

    fn score(&self, block: BlockId) -> (f64, u64) {
        (self.table[bucket(self.age(block))], self.last_ms[block as usize])
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
                self.count(true, self.age(b));
            }
        } else {
            let parent_leaf = access.parent.filter(|&p| p != b && self.forest.is_leaf(p));
            self.forest.insert(&access);
            if let Some(p) = parent_leaf {
                self.remove_leaf_slot(p);
            }
            self.add_leaf(b);
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
        self.count(false, self.age(victim));
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

    #[test]
    fn on_tool_agent_loops_it_keeps_what_comes_back_and_beats_lru() {
        // Agent loops come back after 1–5 s of "thinking", many at once: at 0.5% of the distinct
        // blocks LRU evicts contexts just before their next turn (here 13.1% vs adaptive 31.7%,
        // OPT 45.1%; docs/optimizer.md has 20,000 requests).
        let trace = workload(WorkloadKind::Agent, 6_000);
        let capacity = trace.distinct_blocks() / 200;
        let params = PolicyParams::default();
        let (lru, adaptive, opt) = (
            simulate(&trace, PolicyKind::Lru, capacity, &params, None),
            simulate(&trace, PolicyKind::Adaptive, capacity, &params, None),
            simulate(&trace, PolicyKind::Opt, capacity, &params, None),
        );
        assert!(
            adaptive.hit_rate() > 1.5 * lru.hit_rate(),
            "adaptive {:.3} vs lru {:.3} (opt {:.3})",
            adaptive.hit_rate(),
            lru.hit_rate(),
            opt.hit_rate()
        );
        assert!(adaptive.hit_blocks <= opt.hit_blocks);
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
