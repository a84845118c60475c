//! Replay: one policy, one capacity, one pass over a trace.
//!
//! The replay semantics, which every number this crate reports follows:
//!
//! 1. Requests are replayed in timestamp order (ties keep file order).
//! 2. A request's blocks are its key sequence.
//! 3. Its hit count is the length of the longest prefix of that sequence present in the cache
//!    when it arrives.
//! 4. Then every block of the request is accessed in order (present blocks refreshed, missing
//!    ones inserted).
//! 5. Then blocks are evicted until the cache holds at most `capacity` blocks.
//!
//! Hit rate = total hit blocks / total requested blocks.
//!
//! Consequences worth knowing: the cache may hold `capacity + request length` blocks for an
//! instant (step 4 before step 5), a request longer than the capacity can evict its own blocks,
//! and capacity 0 never hits. Time-based policies also expire blocks when a request arrives,
//! before step 3 ([`EvictionPolicy::expire`]).
//!
//! [`replay`] is generic so the per-access calls are inlined for each policy; [`simulate`]
//! picks the policy by [`PolicyKind`]. Neither allocates per request.

use std::time::Instant;

use crate::policy::leaf_lru::LeafLru;
use crate::policy::lfu::Lfu;
use crate::policy::lru::Lru;
use crate::policy::opt::Opt;
use crate::policy::random_lru::RandomLru;
use crate::policy::ttl::Ttl;
use crate::policy::{Access, EvictionPolicy, NextUse, PolicyKind, PolicyParams};
use crate::trace::{Position, Trace};

/// What one replay measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Requests replayed.
    pub requests: u64,
    /// Blocks requested (sum of request lengths).
    pub requested_blocks: u64,
    /// Blocks served from the cache (sum of prefix hits).
    pub hit_blocks: u64,
    /// Blocks evicted, expirations included.
    pub evictions: u64,
    /// Most blocks resident after any request's evictions.
    pub peak_resident: u64,
}

impl ReplayStats {
    /// Hit blocks / requested blocks, 0 for an empty trace.
    pub fn hit_rate(&self) -> f64 {
        if self.requested_blocks == 0 { 0.0 } else { self.hit_blocks as f64 / self.requested_blocks as f64 }
    }
}

/// Replays `trace` against `policy` holding at most `capacity` blocks between requests.
pub fn replay<P: EvictionPolicy>(trace: &Trace, policy: &mut P, capacity: usize) -> ReplayStats {
    let mut stats = ReplayStats::default();
    for request in 0..trace.requests() {
        let blocks = trace.request(request);
        let time_us = trace.time_us(request);
        let start = trace.start(request);
        stats.evictions += policy.expire(time_us);

        let hits = blocks.iter().take_while(|&&b| policy.contains(b)).count();

        let mut parent = None;
        for (offset, &block) in blocks.iter().enumerate() {
            policy.access(Access { block, position: start + offset as Position, time_us, parent });
            parent = Some(block);
        }

        while policy.len() > capacity {
            policy.evict().expect("a policy holding more blocks than its capacity names a victim");
            stats.evictions += 1;
        }

        stats.requests += 1;
        stats.requested_blocks += blocks.len() as u64;
        stats.hit_blocks += hits as u64;
        stats.peak_resident = stats.peak_resident.max(policy.len() as u64);
    }
    stats
}

/// Replays `trace` with the policy `kind`. `next_use` must be `Some` (computed from this trace)
/// for [`PolicyKind::Opt`]; it is computed here if missing.
pub fn simulate(
    trace: &Trace,
    kind: PolicyKind,
    capacity: usize,
    params: &PolicyParams,
    next_use: Option<&NextUse>,
) -> ReplayStats {
    let blocks = trace.distinct_blocks();
    match kind {
        PolicyKind::Lru => replay(trace, &mut Lru::new(blocks), capacity),
        PolicyKind::Lfu => replay(trace, &mut Lfu::new(blocks), capacity),
        PolicyKind::Ttl => replay(trace, &mut Ttl::new(blocks, params.ttl_us), capacity),
        PolicyKind::RandomLru => {
            replay(trace, &mut RandomLru::new(blocks, params.random_samples, params.seed), capacity)
        }
        PolicyKind::LeafLru => replay(trace, &mut LeafLru::new(blocks), capacity),
        PolicyKind::LeafLfu => replay(trace, &mut crate::policy::leaf_lfu::LeafLfu::new(blocks), capacity),
        PolicyKind::Adaptive => {
            replay(trace, &mut crate::policy::adaptive::Adaptive::new(blocks, params.seed), capacity)
        }
        PolicyKind::S3Fifo => replay(trace, &mut crate::policy::s3fifo::S3Fifo::new(blocks, capacity), capacity),
        PolicyKind::Opt => match next_use {
            Some(next_use) => replay(trace, &mut Opt::new(blocks, next_use), capacity),
            None => {
                let next_use = NextUse::compute(trace.flat(), blocks);
                replay(trace, &mut Opt::new(blocks, &next_use), capacity)
            }
        },
    }
}

/// A replay with its wall-clock time, for throughput reports.
#[derive(Debug, Clone, Copy)]
pub struct TimedReplay {
    /// What the replay measured.
    pub stats: ReplayStats,
    /// Seconds spent replaying (parsing and next-use precomputation excluded).
    pub seconds: f64,
}

impl TimedReplay {
    /// Simulated block accesses per second on one core.
    pub fn accesses_per_second(&self) -> f64 {
        self.stats.requested_blocks as f64 / self.seconds.max(1e-9)
    }
}

/// [`simulate`], timed.
pub fn simulate_timed(
    trace: &Trace,
    kind: PolicyKind,
    capacity: usize,
    params: &PolicyParams,
    next_use: Option<&NextUse>,
) -> TimedReplay {
    let started = Instant::now();
    let stats = simulate(trace, kind, capacity, params, next_use);
    TimedReplay { stats, seconds: started.elapsed().as_secs_f64() }
}

#[cfg(test)]
mod tests {
    //! Hand-computed traces, one or more per policy. Times are in microseconds; every request
    //! is written as its block keys.

    use super::*;

    fn run(kind: PolicyKind, capacity: usize, requests: &[(u64, &[i64])]) -> ReplayStats {
        run_with(kind, capacity, &PolicyParams::default(), requests)
    }

    fn run_with(kind: PolicyKind, capacity: usize, params: &PolicyParams, requests: &[(u64, &[i64])]) -> ReplayStats {
        let trace = Trace::from_requests(requests.iter().map(|&(t, keys)| (t, keys)));
        simulate(&trace, kind, capacity, params, None)
    }

    /// A trace on which LRU and LFU disagree. Capacity 2, one block per request:
    /// A A A B C A B. LRU: A(miss) A(hit) A(hit) B(miss) C(miss, evicts A) A(miss, evicts B)
    /// B(miss, evicts C) → 2 hits, 3 evictions. LFU-DA: A reaches K=3; B and C enter at K=1:
    /// C's insertion evicts B (equal K, older; L=1), A hits (K=5), B re-enters at K=2 and
    /// evicts C (K=1) → 3 hits, 2 evictions.
    const FREQUENCY: &[(u64, &[i64])] = &[(0, &[1]), (1, &[1]), (2, &[1]), (3, &[2]), (4, &[3]), (5, &[1]), (6, &[2])];

    #[test]
    fn lru_evicts_the_least_recently_used_block() {
        let stats = run(PolicyKind::Lru, 2, FREQUENCY);
        assert_eq!(stats.hit_blocks, 2);
        assert_eq!(stats.evictions, 3);
        assert_eq!(stats.requested_blocks, 7);
        assert_eq!(stats.peak_resident, 2);
    }

    #[test]
    fn lfu_keeps_the_frequently_used_block_that_lru_loses() {
        let stats = run(PolicyKind::Lfu, 2, FREQUENCY);
        assert_eq!(stats.hit_blocks, 3);
        assert_eq!(stats.evictions, 2);
    }

    #[test]
    fn lfu_ages_out_a_block_that_stopped_being_used() {
        // Capacity 1. A is used 3 times (K=3). Then B arrives: with no aging (L=0) B's K=1 < 3
        // and B would be evicted forever while A stays. LFU-DA evicts the smaller K each time
        // and raises L: B(K=1) evicted → L=1; B again K=2 evicted → L=2; B again K=3 ties with
        // A's 3 and is the more recent, so A (older) goes → L=3; then B hits.
        let stats =
            run(PolicyKind::Lfu, 1, &[(0, &[1]), (1, &[1]), (2, &[1]), (3, &[2]), (4, &[2]), (5, &[2]), (6, &[2])]);
        // Hits: A, A (2), then B's fourth access.
        assert_eq!(stats.hit_blocks, 3);
        assert_eq!(stats.evictions, 3);
    }

    #[test]
    fn hit_count_stops_at_the_first_missing_block_of_the_prefix() {
        // Unbounded cache. Request 2 has 1 and 3 cached but not 9: only its first block hits;
        // 3 is present but after the gap.
        let stats = run(PolicyKind::Lru, 100, &[(0, &[1, 2, 3]), (1, &[1, 9, 3])]);
        assert_eq!(stats.hit_blocks, 1);
        assert_eq!(stats.requested_blocks, 6);
        assert!((stats.hit_rate() - 1.0 / 6.0).abs() < 1e-12);
    }

    #[test]
    fn a_request_longer_than_the_capacity_evicts_its_own_prefix_under_lru() {
        // Capacity 2, the same 3-block request twice: after the first, LRU keeps 2 and 3 and
        // drops 1, so the second request misses at its first block and hits nothing (2 and 3
        // are present but behind the gap).
        let stats = run(PolicyKind::Lru, 2, &[(0, &[1, 2, 3]), (1, &[1, 2, 3])]);
        assert_eq!(stats.hit_blocks, 0);
        assert_eq!(stats.evictions, 2);
    }

    #[test]
    fn leaf_lru_evicts_suffixes_before_prefixes_and_keeps_hits_that_lru_loses() {
        // Same trace as above: leaf-aware LRU may only evict the leaf 3, keeping the prefix
        // 1, 2, so the second request hits two blocks.
        let requests: &[(u64, &[i64])] = &[(0, &[1, 2, 3]), (1, &[1, 2, 3])];
        let stats = run(PolicyKind::LeafLru, 2, requests);
        assert_eq!(stats.hit_blocks, 2);
        assert_eq!(stats.evictions, 2);
    }

    #[test]
    fn leaf_lru_picks_the_least_recent_leaf_and_then_its_parent() {
        // Capacity 3. Request a: 1 2 (leaf 2). Request b: 5 (leaf 5). Request c: 7 8 forces two
        // evictions. Leaves by recency: 2 (pos 1), 5 (pos 2), 8. Evict 2, which makes 1 a leaf
        // with last access pos 0 — older than 5 — so 1 goes next, not 5.
        // Request d: 5 hits; request e: 1 misses.
        let stats = run(PolicyKind::LeafLru, 3, &[(0, &[1, 2]), (1, &[5]), (2, &[7, 8]), (3, &[5]), (4, &[1])]);
        assert_eq!(stats.hit_blocks, 1);
        assert_eq!(stats.evictions, 2 + 1);
    }

    #[test]
    fn ttl_expires_old_blocks_even_when_the_cache_has_room() {
        // TTL 10 µs, plenty of capacity. Block 1 at t=0, again at t=10 (age 10, not older than
        // the TTL: hit), again at t=21 (age 11: expired before the lookup, miss).
        let params = PolicyParams { ttl_us: 10, ..PolicyParams::default() };
        let stats = run_with(PolicyKind::Ttl, 100, &params, &[(0, &[1]), (10, &[1]), (21, &[1])]);
        assert_eq!(stats.hit_blocks, 1);
        assert_eq!(stats.evictions, 1);
        // LRU at the same capacity keeps the block.
        assert_eq!(run(PolicyKind::Lru, 100, &[(0, &[1]), (10, &[1]), (21, &[1])]).hit_blocks, 2);
    }

    #[test]
    fn ttl_falls_back_to_lru_order_within_the_ttl() {
        // Long TTL: identical to LRU on the frequency trace.
        let params = PolicyParams { ttl_us: 1_000, ..PolicyParams::default() };
        let ttl = run_with(PolicyKind::Ttl, 2, &params, FREQUENCY);
        assert_eq!(ttl, run(PolicyKind::Lru, 2, FREQUENCY));
    }

    #[test]
    fn random_lru_is_deterministic_for_a_seed_and_depends_on_it() {
        let params = PolicyParams { random_samples: 3, seed: 7, ..PolicyParams::default() };
        // Single-block requests over 20 keys, skewed towards small keys (a product of two
        // pseudo-random draws), so a capacity of 5 hits often and the victim choice matters.
        let mut x: u64 = 1;
        let requests: Vec<(u64, Vec<i64>)> = (0..200)
            .map(|i| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                let (a, b) = ((x >> 33) % 20, (x >> 45) % 20);
                (i, vec![(a * b / 20) as i64])
            })
            .collect();
        let trace = Trace::from_requests(requests);
        let a = simulate(&trace, PolicyKind::RandomLru, 5, &params, None);
        let b = simulate(&trace, PolicyKind::RandomLru, 5, &params, None);
        assert_eq!(a, b);
        let other_seed = PolicyParams { seed: 8, ..params };
        let c = simulate(&trace, PolicyKind::RandomLru, 5, &other_seed, None);
        // Different seeds sample differently; on 200 requests the results differ.
        assert_ne!(a.hit_blocks, c.hit_blocks);
    }

    #[test]
    fn random_lru_with_many_samples_on_two_blocks_evicts_the_older_one() {
        // Capacity 1 and 64 samples of a 2-block resident set: the chance of never sampling
        // the older block is 2^-64 (and the seed is fixed), so this behaves as LRU on A B B A:
        // B's insertion evicts A, B hits, A's insertion evicts B.
        let params = PolicyParams { random_samples: 64, ..PolicyParams::default() };
        let stats = run_with(PolicyKind::RandomLru, 1, &params, &[(0, &[1]), (1, &[2]), (2, &[2]), (3, &[1])]);
        assert_eq!(stats.hit_blocks, 1);
        assert_eq!(stats.evictions, 2);
    }

    #[test]
    fn opt_evicts_the_block_needed_furthest_in_the_future() {
        // Capacity 2, one block per request: A B C A B. After C is inserted one of A (next
        // use at position 3), B (4) and C (never) must go: C. Then A and B both hit. LRU
        // evicts A at C, B at A, C at B and hits nothing.
        let requests: &[(u64, &[i64])] = &[(0, &[1]), (1, &[2]), (2, &[3]), (3, &[1]), (4, &[2])];
        assert_eq!(run(PolicyKind::Opt, 2, requests).hit_blocks, 2);
        assert_eq!(run(PolicyKind::Lru, 2, requests).hit_blocks, 0);
    }

    #[test]
    fn opt_prefers_to_keep_a_prefix_over_its_suffix_within_one_future_request() {
        // Capacity 2, request 1 2 3 then 1 2 3: all three blocks are next needed by the same
        // request, but at positions 3, 4, 5; OPT drops 3 and the second request hits 1 2.
        let stats = run(PolicyKind::Opt, 2, &[(0, &[1, 2, 3]), (1, &[1, 2, 3])]);
        assert_eq!(stats.hit_blocks, 2);
    }

    #[test]
    fn opt_beats_lru_on_a_cyclic_scan_larger_than_the_cache() {
        // The scan 0 1 2 3 repeated 10 times, capacity 3: LRU always misses. OPT may evict
        // the block it just inserted, so it keeps 0 1 2 for good and misses only on 3.
        let requests: Vec<(u64, Vec<i64>)> = (0..40).map(|i| (i, vec![(i % 4) as i64])).collect();
        let trace = Trace::from_requests(requests);
        let params = PolicyParams::default();
        let lru = simulate(&trace, PolicyKind::Lru, 3, &params, None);
        let opt = simulate(&trace, PolicyKind::Opt, 3, &params, None);
        assert_eq!(lru.hit_blocks, 0);
        // 30 accesses of 0..=2 minus 3 compulsory misses; all 10 accesses of 3 miss.
        assert_eq!(opt.hit_blocks, 27);
    }

    #[test]
    fn capacity_zero_never_hits() {
        for kind in PolicyKind::ALL {
            let stats = run(kind, 0, FREQUENCY);
            assert_eq!(stats.hit_blocks, 0, "{kind}");
            assert_eq!(stats.evictions, 7, "{kind}");
        }
    }
}
