//! Property tests on generated prefix-chained traces.
//!
//! Real traces name a block by a hash of its whole prefix (Mooncake's `hash_ids`, kvcm's
//! running block-key hash), so an id determines its whole prefix: equal ids at a position imply
//! equal prefixes, and no id repeats within a request. The generator reproduces that: a request
//! is a sequence of small "token" symbols, built by taking a prefix of an earlier request (how
//! conversations and shared system prompts arise) and appending fresh symbols, and the id of
//! block `i` is the interned symbol sequence `0..=i`. Ids are never drawn at random.

use std::collections::HashMap;

use kvcm_optimizer::policy::opt::Opt;
use kvcm_optimizer::policy::{Access, EvictionPolicy, NextUse};
use kvcm_optimizer::{PolicyKind, PolicyParams, Trace, simulate};
use proptest::prelude::*;

/// One generated request: reuse `keep` symbols of earlier request `base`, then append `tail`.
#[derive(Debug, Clone)]
struct RequestShape {
    base: usize,
    keep: usize,
    tail: Vec<u8>,
    delay_us: u64,
}

fn shapes() -> impl Strategy<Value = Vec<RequestShape>> {
    prop::collection::vec(
        (any::<usize>(), 0usize..14, prop::collection::vec(0u8..3, 0..6), prop_oneof![Just(0u64), 1u64..40])
            .prop_map(|(base, keep, tail, delay_us)| RequestShape { base, keep, tail, delay_us }),
        1..50,
    )
}

/// Builds a prefix-chained trace from shapes: block `i` of a request is named by its prefix of
/// `i + 1` symbols.
fn chained_trace(shapes: &[RequestShape]) -> Trace {
    let mut sequences: Vec<Vec<u8>> = Vec::new();
    let mut ids: HashMap<Vec<u8>, i64> = HashMap::new();
    let mut requests = Vec::new();
    let mut time_us = 0;
    for shape in shapes {
        let mut symbols: Vec<u8> = match sequences.len() {
            0 => Vec::new(),
            n => {
                let base = &sequences[shape.base % n];
                base[..shape.keep.min(base.len())].to_vec()
            }
        };
        symbols.extend_from_slice(&shape.tail);
        if symbols.is_empty() {
            symbols.push(0);
        }
        let keys: Vec<i64> = (1..=symbols.len())
            .map(|len| {
                let next = ids.len() as i64;
                *ids.entry(symbols[..len].to_vec()).or_insert(next)
            })
            .collect();
        time_us += shape.delay_us;
        requests.push((time_us, keys));
        sequences.push(symbols);
    }
    Trace::from_requests(requests)
}

fn capacity_samples(distinct: usize) -> Vec<usize> {
    let mut caps = vec![
        0,
        1,
        2,
        3,
        distinct / 4,
        distinct / 3,
        distinct / 2,
        (distinct * 3) / 4,
        distinct.saturating_sub(1),
        distinct,
    ];
    caps.sort_unstable();
    caps.dedup();
    caps
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn generated_traces_are_prefix_chained(shapes in shapes()) {
        let trace = chained_trace(&shapes);
        prop_assert_eq!(trace.prefix_chain_check().inconsistent_blocks, 0);
        prop_assert_eq!(
            trace.unbounded_hit_blocks() as usize,
            trace.accesses() - trace.distinct_blocks()
        );
    }

    #[test]
    fn opt_hits_at_least_as_much_as_every_other_policy_at_the_same_capacity(
        shapes in shapes(),
        ttl_us in 1u64..200,
        seed in any::<u64>(),
    ) {
        let trace = chained_trace(&shapes);
        let params = PolicyParams { ttl_us, random_samples: 3, seed };
        let next_use = NextUse::compute(trace.flat(), trace.distinct_blocks());
        for capacity in capacity_samples(trace.distinct_blocks()) {
            let opt = simulate(&trace, PolicyKind::Opt, capacity, &params, Some(&next_use));
            for kind in PolicyKind::ALL {
                let other = simulate(&trace, kind, capacity, &params, None);
                prop_assert!(
                    opt.hit_blocks >= other.hit_blocks,
                    "capacity {}: opt {} < {} {}", capacity, opt.hit_blocks, kind, other.hit_blocks
                );
            }
        }
    }

    #[test]
    fn opt_holds_only_whole_prefixes_of_each_arriving_request(
        shapes in shapes(),
        capacity in 0usize..30,
    ) {
        // The argument for OPT being the prefix-hit bound: on a prefix-chained trace the blocks
        // of an arriving request that OPT holds always form a prefix, so every per-block hit is
        // a prefix hit. Replayed by hand to look at the cache at each arrival.
        let trace = chained_trace(&shapes);
        let next_use = NextUse::compute(trace.flat(), trace.distinct_blocks());
        let mut opt = Opt::new(trace.distinct_blocks(), &next_use);
        for r in 0..trace.requests() {
            let blocks = trace.request(r);
            let present = blocks.iter().filter(|&&b| opt.contains(b)).count();
            let prefix = blocks.iter().take_while(|&&b| opt.contains(b)).count();
            prop_assert_eq!(present, prefix, "request {}", r);
            let mut parent = None;
            for (i, &block) in blocks.iter().enumerate() {
                opt.access(Access {
                    block,
                    position: trace.start(r) + i as u32,
                    time_us: trace.time_us(r),
                    parent,
                });
                parent = Some(block);
            }
            while opt.len() > capacity {
                prop_assert!(opt.evict().is_some());
            }
        }
    }

    #[test]
    fn lru_hit_rate_never_decreases_as_capacity_grows(shapes in shapes()) {
        let trace = chained_trace(&shapes);
        let params = PolicyParams::default();
        let mut previous = 0;
        for capacity in 0..=trace.distinct_blocks() + 1 {
            let hits = simulate(&trace, PolicyKind::Lru, capacity, &params, None).hit_blocks;
            prop_assert!(hits >= previous, "capacity {}: {} < {}", capacity, hits, previous);
            previous = hits;
        }
    }

    #[test]
    fn opt_hit_rate_never_decreases_as_capacity_grows(shapes in shapes()) {
        let trace = chained_trace(&shapes);
        let params = PolicyParams::default();
        let next_use = NextUse::compute(trace.flat(), trace.distinct_blocks());
        let mut previous = 0;
        for capacity in 0..=trace.distinct_blocks() + 1 {
            let hits = simulate(&trace, PolicyKind::Opt, capacity, &params, Some(&next_use)).hit_blocks;
            prop_assert!(hits >= previous, "capacity {}: {} < {}", capacity, hits, previous);
            previous = hits;
        }
    }

    #[test]
    fn with_room_for_every_distinct_block_every_policy_reaches_the_compulsory_miss_bound(
        shapes in shapes(),
        extra in 0usize..3,
        seed in any::<u64>(),
    ) {
        let trace = chained_trace(&shapes);
        // TTL evicts by age whatever the capacity (that is its purpose), so it reaches the
        // bound only when nothing outlives its TTL: give it a TTL longer than the trace.
        let params = PolicyParams { ttl_us: trace.span_us() + 1, random_samples: 2, seed };
        let bound = (trace.accesses() - trace.distinct_blocks()) as u64;
        for kind in PolicyKind::ALL {
            let stats = simulate(&trace, kind, trace.distinct_blocks() + extra, &params, None);
            prop_assert_eq!(stats.hit_blocks, bound, "{}", kind);
            prop_assert_eq!(stats.evictions, 0, "{}", kind);
            prop_assert_eq!(stats.requested_blocks as usize, trace.accesses());
        }
    }

    #[test]
    fn no_policy_holds_more_than_its_capacity_after_a_request(
        shapes in shapes(),
        capacity in 0usize..40,
    ) {
        let trace = chained_trace(&shapes);
        let params = PolicyParams::default();
        for kind in PolicyKind::ALL {
            let stats = simulate(&trace, kind, capacity, &params, None);
            prop_assert!(stats.peak_resident as usize <= capacity, "{}", kind);
            // Every inserted block is either still resident or was evicted.
            let misses = stats.requested_blocks - stats.hit_blocks;
            prop_assert!(stats.evictions <= misses, "{}", kind);
        }
    }
}
