//! Replay throughput: simulated block accesses per second on one core (DESIGN §7: ≥ 2M).
//!
//! Two inputs:
//! * the shared Mooncake synthetic trace (`../../shared/traces/mooncake_synthetic_trace.jsonl`
//!   relative to this crate; skipped with a message when absent), at 1% and 10% of its distinct
//!   blocks — small enough to live in the CPU caches;
//! * a generated prefix-chained trace of ~2M accesses over ~400k distinct blocks, at 10% — a
//!   working set that does not fit in L2, closer to a production trace.
//!
//! Criterion reports `elem/s` = block accesses per second. Parsing and OPT's next-use table are
//! outside the timed region (both are once per trace, not per capacity).
//!
//! Run: `cargo bench -p kvcm-optimizer --bench replay`.

use std::path::Path;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kvcm_optimizer::policy::NextUse;
use kvcm_optimizer::{PolicyKind, PolicyParams, Trace, TraceFormat, simulate};

const POLICIES: [PolicyKind; 9] = PolicyKind::ALL;

/// A prefix-chained trace: 20k conversations of growing turns over a few shared system prompts.
fn generated_trace() -> Trace {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let mut next_id = 0i64;
    let mut fresh = |count: u64, out: &mut Vec<i64>| {
        for _ in 0..count {
            out.push(next_id);
            next_id += 1;
        }
    };
    let mut prompts: Vec<Vec<i64>> = Vec::new();
    for _ in 0..16 {
        let mut prompt = Vec::new();
        fresh(8 + next(24), &mut prompt);
        prompts.push(prompt);
    }
    let mut conversations: Vec<Vec<i64>> = Vec::new();
    let mut requests = Vec::new();
    let mut accesses = 0usize;
    let mut time_us = 0u64;
    while accesses < 2_000_000 {
        time_us += next(2_000);
        let grow = next(4) != 0 && !conversations.is_empty();
        let blocks = if grow {
            // A later turn: the whole conversation so far plus a few new blocks.
            let i = next(conversations.len() as u64) as usize;
            let mut turn = conversations[i].clone();
            fresh(1 + next(6), &mut turn);
            if turn.len() > 400 {
                turn.truncate(64);
            }
            conversations[i] = turn.clone();
            turn
        } else {
            let mut first = prompts[next(prompts.len() as u64) as usize].clone();
            fresh(2 + next(30), &mut first);
            if conversations.len() < 20_000 {
                conversations.push(first.clone());
            } else {
                let slot = next(conversations.len() as u64) as usize;
                conversations[slot] = first.clone();
            }
            first
        };
        accesses += blocks.len();
        requests.push((time_us, blocks));
    }
    Trace::from_requests(requests)
}

fn bench_trace(c: &mut Criterion, name: &str, trace: &Trace, fractions: &[f64]) {
    let params = PolicyParams::default();
    let next_use = NextUse::compute(trace.flat(), trace.distinct_blocks());
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(trace.accesses() as u64));
    group.sample_size(10);
    group.measurement_time(std::time::Duration::from_secs(2));
    group.warm_up_time(std::time::Duration::from_millis(500));
    for &fraction in fractions {
        let capacity = (trace.distinct_blocks() as f64 * fraction).round() as usize;
        for policy in POLICIES {
            group.bench_with_input(
                BenchmarkId::new(policy.name(), format!("{:.0}%", fraction * 100.0)),
                &capacity,
                |b, &capacity| b.iter(|| simulate(trace, policy, capacity, &params, Some(&next_use))),
            );
        }
    }
    group.finish();
}

fn replay_benches(c: &mut Criterion) {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces/mooncake_synthetic_trace.jsonl");
    if shared.exists() {
        let trace = Trace::read(&shared, TraceFormat::Mooncake).expect("the shared trace parses");
        bench_trace(c, "mooncake_synthetic", &trace, &[0.01, 0.1]);
    } else {
        eprintln!("skipping the Mooncake benchmark: {} not found", shared.display());
    }
    let generated = generated_trace();
    eprintln!(
        "generated trace: {} requests, {} accesses, {} distinct blocks",
        generated.requests(),
        generated.accesses(),
        generated.distinct_blocks()
    );
    bench_trace(c, "generated_2m", &generated, &[0.1]);
}

criterion_group!(benches, replay_benches);
criterion_main!(benches);
