//! Reports: sweep CSV, savings, the capacity recommendation and markdown tables.
//!
//! Savings: a hit block is a block whose KV cache need not be recomputed, so the prefill tokens
//! saved at a point are `hit_blocks × tokens_per_block` (counting a trailing partial block as
//! full, a small overestimate), and the GPU seconds saved are `tokens_saved × gpu_s_per_token`.
//!
//! Recommendation: the maximum achievable hit rate is the unbounded-cache hit rate of the trace
//! (every block that was ever seen is still there — the compulsory-miss bound). For each policy,
//! the recommended capacity is the smallest swept capacity whose hit rate reaches
//! `target_fraction ×` that maximum; if none does, the report says so and suggests sweeping
//! larger capacities. The answer is only as fine as the sweep's capacity grid.
//!
//! Files are written with plain `std::fmt` (every field is a number or a fixed name, so no CSV
//! quoting is needed). I/O errors carry the path.

use std::fmt::Write as _;
use std::path::Path;

use crate::policy::PolicyKind;
use crate::sweep::SweepRow;

/// Facts about the run that reports need besides the rows.
#[derive(Debug, Clone, Copy)]
pub struct ReportContext {
    /// Distinct blocks in the trace.
    pub distinct_blocks: usize,
    /// Unbounded-cache hit rate (the maximum achievable).
    pub max_hit_rate: f64,
    /// Tokens per block, if known (for tokens saved).
    pub tokens_per_block: Option<u64>,
    /// GPU seconds of prefill per token, if given (for GPU seconds saved).
    pub gpu_s_per_token: Option<f64>,
    /// Bytes per block, if capacities are sized in bytes.
    pub block_bytes: Option<u64>,
}

impl ReportContext {
    /// Prefill tokens saved by `hit_blocks` hits.
    pub fn tokens_saved(&self, hit_blocks: u64) -> Option<u64> {
        self.tokens_per_block.map(|t| t * hit_blocks)
    }

    /// GPU seconds saved by `hit_blocks` hits.
    pub fn gpu_seconds_saved(&self, hit_blocks: u64) -> Option<f64> {
        Some(self.tokens_saved(hit_blocks)? as f64 * self.gpu_s_per_token?)
    }

    /// Capacity in bytes, if a block size was given.
    pub fn capacity_bytes(&self, capacity: usize) -> Option<u64> {
        self.block_bytes.map(|b| b * capacity as u64)
    }
}

fn opt_to_string<T: ToString>(value: Option<T>) -> String {
    value.map(|v| v.to_string()).unwrap_or_default()
}

/// The header of `sweep.csv`.
pub const SWEEP_CSV_HEADER: &str = "capacity,capacity_bytes,capacity_fraction,policy,hit_rate,hit_blocks,requested_blocks,evictions,requests,peak_resident,max_hit_rate,tokens_saved,gpu_seconds_saved,accesses_per_s";

/// `sweep.csv`: one line per (capacity, policy). Empty cells where a value is unknown.
pub fn sweep_csv(rows: &[SweepRow], ctx: &ReportContext) -> String {
    let mut out = String::from(SWEEP_CSV_HEADER);
    out.push('\n');
    for row in rows {
        let s = &row.stats;
        let fraction = if ctx.distinct_blocks == 0 { 0.0 } else { row.capacity as f64 / ctx.distinct_blocks as f64 };
        let _ = writeln!(
            out,
            "{},{},{:.6},{},{:.6},{},{},{},{},{},{:.6},{},{},{:.0}",
            row.capacity,
            opt_to_string(ctx.capacity_bytes(row.capacity)),
            fraction,
            row.policy,
            s.hit_rate(),
            s.hit_blocks,
            s.requested_blocks,
            s.evictions,
            s.requests,
            s.peak_resident,
            ctx.max_hit_rate,
            opt_to_string(ctx.tokens_saved(s.hit_blocks)),
            opt_to_string(ctx.gpu_seconds_saved(s.hit_blocks).map(|g| format!("{g:.3}"))),
            row.accesses_per_second(),
        );
    }
    out
}

/// The recommendation for one policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recommendation {
    /// The policy.
    pub policy: PolicyKind,
    /// The hit rate to reach: `target_fraction × max_hit_rate`.
    pub target_hit_rate: f64,
    /// The smallest swept capacity reaching it, with its row, or `None` if no capacity did.
    pub row: Option<SweepRow>,
}

/// For each policy in `rows` (in order of first appearance), the smallest capacity reaching
/// `target_fraction` of `max_hit_rate`.
pub fn recommend(rows: &[SweepRow], max_hit_rate: f64, target_fraction: f64) -> Vec<Recommendation> {
    let target = target_fraction * max_hit_rate;
    let mut policies: Vec<PolicyKind> = Vec::new();
    for row in rows {
        if !policies.contains(&row.policy) {
            policies.push(row.policy);
        }
    }
    policies
        .into_iter()
        .map(|policy| Recommendation {
            policy,
            target_hit_rate: target,
            row: rows
                .iter()
                .filter(|r| r.policy == policy && r.stats.hit_rate() >= target - 1e-12)
                .min_by_key(|r| r.capacity)
                .copied(),
        })
        .collect()
}

/// What to run in kvcm: among the policies kvcm runs live ([`PolicyKind::kvcm_policy`]), the
/// one whose smallest capacity reaching the target is smallest (ties: the higher hit rate there).
pub fn live_choice(recs: &[Recommendation]) -> Option<(&'static str, SweepRow)> {
    recs.iter()
        .filter_map(|r| Some((r.policy.kvcm_policy()?, r.row?)))
        .min_by(|a, b| a.1.capacity.cmp(&b.1.capacity).then(b.1.stats.hit_rate().total_cmp(&a.1.stats.hit_rate())))
}

/// The header of `recommendation.csv`.
pub const RECOMMENDATION_CSV_HEADER: &str =
    "policy,target_fraction,target_hit_rate,capacity,capacity_bytes,hit_rate,hit_blocks,tokens_saved,gpu_seconds_saved";

/// `recommendation.csv`: one line per policy; capacity cells empty when the target was not
/// reached.
pub fn recommendation_csv(recs: &[Recommendation], target_fraction: f64, ctx: &ReportContext) -> String {
    let mut out = String::from(RECOMMENDATION_CSV_HEADER);
    out.push('\n');
    for rec in recs {
        let _ = write!(out, "{},{target_fraction},{:.6},", rec.policy, rec.target_hit_rate);
        match rec.row {
            Some(row) => {
                let _ = writeln!(
                    out,
                    "{},{},{:.6},{},{},{}",
                    row.capacity,
                    opt_to_string(ctx.capacity_bytes(row.capacity)),
                    row.stats.hit_rate(),
                    row.stats.hit_blocks,
                    opt_to_string(ctx.tokens_saved(row.stats.hit_blocks)),
                    opt_to_string(ctx.gpu_seconds_saved(row.stats.hit_blocks).map(|g| format!("{g:.3}"))),
                );
            }
            None => out.push_str(",,,,,\n"),
        }
    }
    out
}

/// `recommendation.md`: the recommendation in words and a table.
pub fn recommendation_md(
    recs: &[Recommendation],
    target_fraction: f64,
    ctx: &ReportContext,
    trace_name: &str,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Capacity recommendation for `{trace_name}`\n");
    let _ = writeln!(
        out,
        "Maximum achievable hit rate (unbounded cache, compulsory misses only): **{:.2}%**. \
         Target: {:.0}% of it = **{:.2}%**. Each line is the smallest swept capacity whose hit \
         rate reaches the target.\n",
        ctx.max_hit_rate * 100.0,
        target_fraction * 100.0,
        target_fraction * ctx.max_hit_rate * 100.0
    );
    let _ = writeln!(
        out,
        "| policy | capacity (blocks) | capacity (bytes) | hit rate | hit blocks | prefill tokens saved | GPU s saved |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
    for rec in recs {
        match rec.row {
            Some(row) => {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {:.2}% | {} | {} | {} |",
                    rec.policy,
                    row.capacity,
                    ctx.capacity_bytes(row.capacity).map(human_bytes).unwrap_or_else(|| "–".into()),
                    row.stats.hit_rate() * 100.0,
                    row.stats.hit_blocks,
                    opt_to_string(ctx.tokens_saved(row.stats.hit_blocks)),
                    ctx.gpu_seconds_saved(row.stats.hit_blocks)
                        .map(|g| format!("{g:.1}"))
                        .unwrap_or_else(|| "–".into()),
                );
            }
            None => {
                let _ = writeln!(out, "| {} | not reached | – | – | – | – | – |", rec.policy);
            }
        }
    }
    match live_choice(recs) {
        Some((policy, row)) => {
            let _ = writeln!(
                out,
                "\n**To run in kvcm:** `reclaim_policy: {policy}` with a capacity of {} blocks{} \
                 (the live policy that reaches the target with the least capacity; set the group's \
                 quota so that its reclaim watermark is this capacity).",
                row.capacity,
                ctx.capacity_bytes(row.capacity).map(|b| format!(" ({})", human_bytes(b))).unwrap_or_default()
            );
        }
        None => {
            let _ = writeln!(
                out,
                "\n**To run in kvcm:** no policy kvcm runs live (leaf_lru, leaf_lfu, ttl, adaptive) reached the \
                 target at the swept capacities."
            );
        }
    }
    if recs.iter().any(|r| r.row.is_none()) {
        let _ = writeln!(
            out,
            "\n\"not reached\": no swept capacity reached the target with that policy; sweep larger capacities (for ttl, also try a longer --ttl-s: expiry caps its hit rate whatever the capacity)."
        );
    }
    out
}

/// A markdown table of hit rates: one line per capacity, one column per policy.
pub fn hit_rate_table_md(rows: &[SweepRow], ctx: &ReportContext) -> String {
    let mut policies: Vec<PolicyKind> = Vec::new();
    let mut capacities: Vec<usize> = Vec::new();
    for row in rows {
        if !policies.contains(&row.policy) {
            policies.push(row.policy);
        }
        if !capacities.contains(&row.capacity) {
            capacities.push(row.capacity);
        }
    }
    capacities.sort_unstable();
    let mut out = String::from("| capacity (blocks) | % of distinct |");
    for p in &policies {
        let _ = write!(out, " {p} |");
    }
    out.push_str("\n|---:|---:|");
    for _ in &policies {
        out.push_str("---:|");
    }
    out.push('\n');
    for &capacity in &capacities {
        let fraction =
            if ctx.distinct_blocks == 0 { 0.0 } else { capacity as f64 / ctx.distinct_blocks as f64 * 100.0 };
        let _ = write!(out, "| {capacity} | {}% |", short_percent(fraction));
        for &p in &policies {
            match rows.iter().find(|r| r.policy == p && r.capacity == capacity) {
                Some(r) => {
                    let _ = write!(out, " {:.2}% |", r.stats.hit_rate() * 100.0);
                }
                None => out.push_str(" – |"),
            }
        }
        out.push('\n');
    }
    out
}

/// A percentage with at most two decimals and no trailing zeros (`20`, `0.5`, `0.25`): a
/// sweep at 0.25% and 0.5% of the distinct blocks must not print both as `0%`.
pub(crate) fn short_percent(p: f64) -> String {
    let s = format!("{p:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A byte count in binary units, e.g. `1.50 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.2} {}", UNITS[unit]) }
}

/// Writes `contents` to `dir/name`, naming the path on failure.
pub fn write_file(dir: &Path, name: &str, contents: &str) -> anyhow::Result<std::path::PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, contents).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::ReplayStats;

    fn row(policy: PolicyKind, capacity: usize, hit_blocks: u64) -> SweepRow {
        SweepRow {
            capacity,
            policy,
            stats: ReplayStats {
                requests: 10,
                requested_blocks: 100,
                hit_blocks,
                evictions: 3,
                peak_resident: capacity as u64,
            },
            seconds: 0.001,
        }
    }

    fn ctx() -> ReportContext {
        ReportContext {
            distinct_blocks: 50,
            max_hit_rate: 0.5,
            tokens_per_block: Some(512),
            gpu_s_per_token: Some(0.001),
            block_bytes: Some(1 << 20),
        }
    }

    #[test]
    fn the_recommendation_is_the_smallest_capacity_reaching_the_target() {
        let rows = vec![
            row(PolicyKind::Lru, 10, 20),
            row(PolicyKind::Lru, 20, 44),
            row(PolicyKind::Lru, 40, 48),
            row(PolicyKind::Opt, 10, 45),
            row(PolicyKind::Opt, 20, 50),
        ];
        // Target 90% of 0.5 = 0.45.
        let recs = recommend(&rows, 0.5, 0.9);
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].policy, PolicyKind::Lru);
        assert_eq!(recs[0].row.unwrap().capacity, 40);
        assert_eq!(recs[1].row.unwrap().capacity, 10);
        assert!((recs[0].target_hit_rate - 0.45).abs() < 1e-12);
        // 99% of 0.5 = 0.495: LRU never gets there.
        let strict = recommend(&rows, 0.5, 0.99);
        assert_eq!(strict[0].row, None);
        assert_eq!(strict[1].row.unwrap().capacity, 20);
    }

    #[test]
    fn what_to_run_is_the_live_policy_needing_the_least_capacity() {
        let rows = vec![
            row(PolicyKind::Opt, 10, 48),
            row(PolicyKind::S3Fifo, 10, 46),
            row(PolicyKind::LeafLru, 10, 30),
            row(PolicyKind::LeafLru, 40, 47),
            row(PolicyKind::Adaptive, 10, 40),
            row(PolicyKind::Adaptive, 20, 46),
            row(PolicyKind::LeafLfu, 20, 45),
        ];
        // Target 0.45: OPT and S3-FIFO need the least, but kvcm runs neither; adaptive and
        // leaf_lfu both reach it at 20 blocks, adaptive with the higher hit rate there.
        let recs = recommend(&rows, 0.5, 0.9);
        let (policy, at) = live_choice(&recs).unwrap();
        assert_eq!((policy, at.capacity), ("POLICY_ADAPTIVE", 20));
        assert!(
            recommendation_md(&recs, 0.9, &ctx(), "t")
                .contains("`reclaim_policy: POLICY_ADAPTIVE` with a capacity of 20 blocks")
        );
        assert_eq!(live_choice(&recommend(&rows[..2], 0.5, 0.9)), None, "only simulated policies");
    }

    #[test]
    fn the_sweep_csv_has_the_documented_columns_and_savings() {
        let csv = sweep_csv(&[row(PolicyKind::LeafLru, 10, 20)], &ctx());
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let values: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(header.len(), values.len());
        let get = |name: &str| values[header.iter().position(|h| *h == name).unwrap()];
        assert_eq!(get("capacity"), "10");
        assert_eq!(get("capacity_bytes"), "10485760");
        assert_eq!(get("policy"), "leaf_lru");
        assert_eq!(get("hit_rate"), "0.200000");
        assert_eq!(get("hit_blocks"), "20");
        assert_eq!(get("requested_blocks"), "100");
        assert_eq!(get("evictions"), "3");
        assert_eq!(get("tokens_saved"), "10240");
        assert_eq!(get("gpu_seconds_saved"), "10.240");
        assert!(lines.next().is_none());
    }

    #[test]
    fn unknown_savings_leave_empty_cells() {
        let ctx = ReportContext { tokens_per_block: None, block_bytes: None, ..ctx() };
        let recs = recommend(&[row(PolicyKind::Lru, 10, 50)], 0.5, 0.9);
        let csv = recommendation_csv(&recs, 0.9, &ctx);
        assert_eq!(csv.lines().nth(1).unwrap(), "lru,0.9,0.450000,10,,0.500000,50,,");
        let md = recommendation_md(&recs, 0.9, &ctx, "t");
        assert!(md.contains("| lru | 10 | – | 50.00% | 50 |  | – |"), "{md}");
    }

    #[test]
    fn the_hit_rate_table_pivots_policies_into_columns() {
        let rows = vec![row(PolicyKind::Lru, 10, 20), row(PolicyKind::Lru, 20, 30), row(PolicyKind::Opt, 10, 40)];
        let table = hit_rate_table_md(&rows, &ctx());
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "| capacity (blocks) | % of distinct | lru | opt |");
        assert_eq!(lines[2], "| 10 | 20% | 20.00% | 40.00% |");
        assert_eq!(lines[3], "| 20 | 40% | 30.00% | – |");
    }

    #[test]
    fn small_capacities_keep_their_fraction_in_the_hit_rate_table() {
        // Of 400 distinct blocks, 1 is 0.25% and 2 are 0.5%; rounded to whole percents both were 0%.
        let ctx = ReportContext { distinct_blocks: 400, ..ctx() };
        let rows = vec![row(PolicyKind::Lru, 1, 20), row(PolicyKind::Lru, 2, 30), row(PolicyKind::Lru, 40, 40)];
        let table = hit_rate_table_md(&rows, &ctx);
        let fractions: Vec<&str> = table.lines().skip(2).map(|l| l.split(" | ").nth(1).unwrap()).collect();
        assert_eq!(fractions, ["0.25%", "0.5%", "10%"], "{table}");
    }

    #[test]
    fn byte_counts_are_shown_in_binary_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 29), "1.50 GiB");
    }
}
