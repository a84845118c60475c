//! Tests on the shared Mooncake synthetic trace, vendored in `tests/data/traces/` (see its
//! README) so that they run on every checkout.

use std::path::PathBuf;

use kvcm_optimizer::policy::NextUse;
use kvcm_optimizer::sweep::{SweepConfig, capacities_from_fractions, run_sweep};
use kvcm_optimizer::{PolicyKind, PolicyParams, Trace, TraceFormat, simulate};

fn shared_trace() -> Option<Trace> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/traces/mooncake_synthetic_trace.jsonl");
    Some(Trace::read(&path, TraceFormat::Mooncake).expect("the vendored shared trace parses"))
}

#[test]
fn the_shared_trace_has_the_documented_size_and_is_prefix_chained() {
    let Some(trace) = shared_trace() else { return };
    assert_eq!(trace.requests(), 3_993);
    assert_eq!(trace.accesses(), 121_877);
    assert_eq!(trace.distinct_blocks(), 43_924);
    assert_eq!(trace.prefix_chain_check().inconsistent_blocks, 0);
    assert_eq!(trace.unbounded_hit_blocks(), 121_877 - 43_924);
}

#[test]
fn on_the_shared_trace_opt_bounds_every_policy_and_all_but_ttl_reach_the_maximum() {
    let Some(trace) = shared_trace() else { return };
    let config = SweepConfig {
        capacities: capacities_from_fractions(trace.distinct_blocks(), &[0.01, 0.1, 0.5, 1.0]),
        policies: PolicyKind::ALL.to_vec(),
        params: PolicyParams::default(),
    };
    let rows = run_sweep(&trace, &config, |_| {});
    assert_eq!(rows.len(), 4 * PolicyKind::ALL.len());
    let max = trace.unbounded_hit_blocks();
    for row in &rows {
        let opt = rows.iter().find(|r| r.policy == PolicyKind::Opt && r.capacity == row.capacity).unwrap();
        assert!(opt.stats.hit_blocks >= row.stats.hit_blocks, "{} at {}", row.policy, row.capacity);
        if row.capacity == trace.distinct_blocks() && row.policy != PolicyKind::Ttl {
            assert_eq!(row.stats.hit_blocks, max, "{}", row.policy);
        }
    }
}

#[test]
fn the_documented_hit_counts_on_the_shared_trace_are_reproduced() {
    // These are the numbers in docs/optimizer.md (1% = 439 and 10% = 4392 blocks). A change
    // here is a change of replay semantics or of a policy: update the docs with it.
    let Some(trace) = shared_trace() else { return };
    let params = PolicyParams::default();
    let next_use = NextUse::compute(trace.flat(), trace.distinct_blocks());
    let hits = |kind, capacity| simulate(&trace, kind, capacity, &params, Some(&next_use)).hit_blocks;
    assert_eq!(hits(PolicyKind::Lru, 439), 4_184);
    assert_eq!(hits(PolicyKind::Lru, 4_392), 31_668);
    assert_eq!(hits(PolicyKind::Opt, 4_392), 61_707);
    assert_eq!(hits(PolicyKind::LeafLru, 4_392), 31_973);
}
