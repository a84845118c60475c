//! Capacity sweeps: many capacities × policies over one trace, in parallel.
//!
//! Each (capacity, policy) pair is an independent single-threaded [`simulate`] call; rayon
//! spreads the pairs over the cores, most expensive policies first so the last job to finish is
//! a short one. OPT's next-use table is computed once and shared. Results come back sorted by
//! policy, then capacity, whatever order the jobs finished in, so a sweep is reproducible.
//!
//! Capacities are always in blocks here; [`capacities_from_fractions`] and
//! [`capacities_from_bytes`] convert the other ways an operator can ask, and [`parse_size`]
//! reads sizes like `64GiB`.

use rayon::prelude::*;

use crate::policy::{NextUse, PolicyKind, PolicyParams};
use crate::replay::{ReplayStats, simulate_timed};
use crate::trace::Trace;

/// The default capacities of a sweep, as fractions of the trace's distinct blocks: ten points
/// from 1% to 100%, denser where hit-rate curves bend.
pub const DEFAULT_FRACTIONS: [f64; 10] = [0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0];

/// What to sweep.
#[derive(Debug, Clone)]
pub struct SweepConfig {
    /// Capacities in blocks.
    pub capacities: Vec<usize>,
    /// Policies to replay at each capacity.
    pub policies: Vec<PolicyKind>,
    /// Policy parameters.
    pub params: PolicyParams,
}

/// One replay of a sweep.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SweepRow {
    /// Capacity in blocks.
    pub capacity: usize,
    /// The policy.
    pub policy: PolicyKind,
    /// What the replay measured.
    pub stats: ReplayStats,
    /// Seconds the replay took on its core.
    pub seconds: f64,
}

impl SweepRow {
    /// Simulated block accesses per second on one core.
    pub fn accesses_per_second(&self) -> f64 {
        self.stats.requested_blocks as f64 / self.seconds.max(1e-9)
    }
}

/// Runs every (capacity, policy) pair of `config` over `trace` on the rayon pool, calling
/// `on_done` as each finishes (from worker threads, in completion order).
pub fn run_sweep(trace: &Trace, config: &SweepConfig, on_done: impl Fn(&SweepRow) + Sync) -> Vec<SweepRow> {
    let next_use =
        config.policies.contains(&PolicyKind::Opt).then(|| NextUse::compute(trace.flat(), trace.distinct_blocks()));
    let mut jobs: Vec<(usize, PolicyKind)> =
        config.policies.iter().flat_map(|&policy| config.capacities.iter().map(move |&c| (c, policy))).collect();
    jobs.sort_by_key(|&(capacity, policy)| (std::cmp::Reverse(policy.relative_cost()), std::cmp::Reverse(capacity)));
    let mut rows: Vec<SweepRow> = jobs
        .into_par_iter()
        .map(|(capacity, policy)| {
            let timed = simulate_timed(trace, policy, capacity, &config.params, next_use.as_ref());
            let row = SweepRow { capacity, policy, stats: timed.stats, seconds: timed.seconds };
            on_done(&row);
            row
        })
        .collect();
    let order = |p: PolicyKind| config.policies.iter().position(|&q| q == p);
    rows.sort_by_key(|row| (order(row.policy), row.capacity));
    rows
}

/// Capacities (blocks) for fractions of `distinct` blocks, rounded to the nearest block, at
/// least 1 for a positive fraction, sorted and deduplicated.
pub fn capacities_from_fractions(distinct: usize, fractions: &[f64]) -> Vec<usize> {
    let mut capacities: Vec<usize> = fractions
        .iter()
        .map(|&f| {
            let blocks = (f * distinct as f64).round() as usize;
            if f > 0.0 { blocks.max(1) } else { 0 }
        })
        .collect();
    capacities.sort_unstable();
    capacities.dedup();
    capacities
}

/// Capacities (blocks) for cache sizes in bytes: `bytes / block_bytes`, rounded down (a partial
/// block holds nothing), sorted and deduplicated.
pub fn capacities_from_bytes(sizes: &[u64], block_bytes: u64) -> Vec<usize> {
    let mut capacities: Vec<usize> = sizes.iter().map(|&bytes| (bytes / block_bytes.max(1)) as usize).collect();
    capacities.sort_unstable();
    capacities.dedup();
    capacities
}

/// Parses a size in bytes: a number with an optional unit, `K`/`M`/`G`/`T` (powers of 1000,
/// also `KB`…) or `Ki`/`Mi`/`Gi`/`Ti` (powers of 1024, also `KiB`…), case-insensitive;
/// fractions are allowed (`1.5GiB`), and `_` may separate digits.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let cleaned = text.trim().replace('_', "");
    let split =
        cleaned.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E')).unwrap_or(cleaned.len());
    // `e` could start a unit only in "EiB", which is too large to matter; treat it as exponent.
    let (number, unit) = cleaned.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("`{text}` is not a size (examples: 4096, 512MiB, 1.5TB)"))?;
    let multiplier: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "ki" | "kib" => 1024.0,
        "mi" | "mib" => 1024.0 * 1024.0,
        "gi" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "ti" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown size unit `{other}` in `{text}`; use K, M, G, T (×1000) or Ki, Mi, Gi, Ti (×1024)"
            ));
        }
    };
    let bytes = value * multiplier;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("size `{text}` is out of range"));
    }
    Ok(bytes.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_become_rounded_deduplicated_block_counts() {
        assert_eq!(capacities_from_fractions(43_924, &[0.01, 1.0, 0.5, 0.5]), vec![439, 21_962, 43_924]);
        assert_eq!(capacities_from_fractions(10, &[0.001, 0.0]), vec![0, 1]);
    }

    #[test]
    fn byte_sizes_become_whole_blocks() {
        assert_eq!(capacities_from_bytes(&[10 << 20, 1 << 20, (1 << 20) + 1], 1 << 20), vec![1, 10]);
    }

    #[test]
    fn sizes_parse_with_decimal_and_binary_units() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("2K").unwrap(), 2000);
        assert_eq!(parse_size("1.5GiB").unwrap(), 1_610_612_736);
        assert_eq!(parse_size("3 tb").unwrap(), 3_000_000_000_000);
        assert_eq!(parse_size("1_000_000").unwrap(), 1_000_000);
        assert!(parse_size("12 bananas").unwrap_err().contains("unknown size unit"));
        assert!(parse_size("GiB").is_err());
    }

    #[test]
    fn a_sweep_returns_one_row_per_pair_sorted_by_policy_then_capacity() {
        let trace = Trace::from_requests((0..50u64).map(|i| (i, vec![(i % 7) as i64, 100])));
        let config = SweepConfig {
            capacities: vec![4, 1, 2],
            policies: vec![PolicyKind::Opt, PolicyKind::Lru],
            params: PolicyParams::default(),
        };
        let done = std::sync::atomic::AtomicUsize::new(0);
        let rows = run_sweep(&trace, &config, |_| {
            done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        let order: Vec<(PolicyKind, usize)> = rows.iter().map(|r| (r.policy, r.capacity)).collect();
        assert_eq!(
            order,
            vec![
                (PolicyKind::Opt, 1),
                (PolicyKind::Opt, 2),
                (PolicyKind::Opt, 4),
                (PolicyKind::Lru, 1),
                (PolicyKind::Lru, 2),
                (PolicyKind::Lru, 4),
            ]
        );
        assert_eq!(done.load(std::sync::atomic::Ordering::Relaxed), 6);
        for row in &rows {
            let alone = crate::replay::simulate(&trace, row.policy, row.capacity, &config.params, None);
            assert_eq!(row.stats, alone, "{} at {}", row.policy, row.capacity);
        }
    }
}
