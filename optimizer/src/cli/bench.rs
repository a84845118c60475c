//! `kvcm-optimizer bench`: simulated block accesses per second on one core, per policy.

use super::*;

pub(super) fn run(args: BenchArgs) -> anyhow::Result<()> {
    let params = args.params.params()?;
    check_fraction("--capacity-fraction", args.capacity_fraction)?;
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let trace = load(&args.trace)?;
    let capacity = crate::sweep::capacities_from_fractions(trace.distinct_blocks(), &[args.capacity_fraction])[0];
    println!(
        "trace {}: {} block accesses per replay; capacity {capacity} blocks ({}% of {} distinct); {} runs of at least 0.2 s per policy, one thread, median reported",
        args.trace.trace.display(),
        trace.accesses(),
        crate::report::short_percent(args.capacity_fraction * 100.0),
        trace.distinct_blocks(),
        args.runs
    );
    let started = Instant::now();
    let next_use = NextUse::compute(trace.flat(), trace.distinct_blocks());
    println!(
        "opt next-use precomputation: {:.1} ms (once per trace, shared by every capacity)",
        started.elapsed().as_secs_f64() * 1e3
    );
    println!("| policy | median accesses/s | min | max |");
    println!("|---|---:|---:|---:|");
    for &policy in &args.policies {
        let mut rates: Vec<f64> =
            (0..args.runs).map(|_| timed_run(&trace, policy, capacity, &params, &next_use)).collect();
        rates.sort_by(f64::total_cmp);
        println!(
            "| {} | {:.2}M | {:.2}M | {:.2}M |",
            policy,
            median(&rates) / 1e6,
            rates[0] / 1e6,
            rates[rates.len() - 1] / 1e6
        );
    }
    Ok(())
}

/// One bench run: whole replays repeated until at least 0.2 s have passed (a replay of a small
/// trace takes well under a millisecond, too short to time alone); accesses per second over the
/// run.
fn timed_run(trace: &Trace, policy: PolicyKind, capacity: usize, params: &PolicyParams, next_use: &NextUse) -> f64 {
    let mut accesses = 0u64;
    let mut seconds = 0f64;
    while seconds < 0.2 {
        let timed = simulate_timed(trace, policy, capacity, params, Some(next_use));
        accesses += timed.stats.requested_blocks;
        seconds += timed.seconds;
        if timed.stats.requested_blocks == 0 {
            break;
        }
    }
    accesses as f64 / seconds.max(1e-9)
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[1.0, 2.0, 4.0]), 2.0);
        assert_eq!(median(&[1.0, 2.0, 4.0, 8.0]), 3.0);
    }
}
