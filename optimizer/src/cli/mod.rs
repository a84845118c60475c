//! The command line: `sweep`, `replay`, `stats`, `bench` and `generate`.
//!
//! Each subcommand reads the trace once, then calls into the library; this module (the flags and
//! what the subcommands share) and one file per subcommand only turn flags into library calls
//! and results into text and files. `--help` on every subcommand
//! explains the flags with their units, because operators script this tool and read it rarely.
//! Errors are `anyhow` chains whose first line says what to fix (a bad flag, a malformed trace
//! line with its number, an unwritable output directory).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::plot::{PlotFormats, plot_hit_rates};
use crate::policy::{NextUse, PolicyKind, PolicyParams};
use crate::replay::simulate_timed;
use crate::report::{self, ReportContext};
use crate::sweep::{SweepConfig, SweepRow};
use crate::trace::{Trace, TraceFormat};

mod bench;
mod generate;
mod replay;
mod stats;
mod sweep;

const ABOUT: &str = "Replay KV-cache access traces to size a cache and choose its eviction policy.";

const LONG_ABOUT: &str = "\
Replay KV-cache access traces to size a cache and choose its eviction policy.

kvcm-optimizer replays a recorded trace of prompt lookups against simulated caches and reports how
much hit rate each capacity buys under each eviction policy, next to Belady's offline optimum
(opt), the best any policy could do.

Replay semantics (identical for every command and policy): requests are replayed in timestamp
order (ties keep file order); a request's blocks are its key sequence; its hit count is the length
of the longest prefix of that sequence present in the cache when it arrives; then every block of
the request is accessed in order (present blocks refreshed, missing ones inserted); then blocks are
evicted until the cache holds at most `capacity` blocks. Hit rate = total hit blocks / total
requested blocks.

Typical use:
  kvcm-optimizer stats --trace trace.jsonl
  kvcm-optimizer sweep --trace trace.jsonl --format mooncake --policies lru,lfu,leaf_lru,opt --out out/
  kvcm-optimizer sweep --trace trace.jsonl --bytes 64GiB,128GiB,256GiB --block-bytes 2MiB --out out/
  kvcm-optimizer replay --trace trace.jsonl --policy leaf_lru --capacity-fraction 0.1
  kvcm-optimizer bench --trace trace.jsonl

See docs/optimizer.md for the policies' exact definitions.";

/// The command line.
#[derive(Debug, Parser)]
#[command(name = "kvcm-optimizer", version, about = ABOUT, long_about = LONG_ABOUT)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay many capacities × policies in parallel; write sweep.csv, recommendation.md/.csv,
    /// hit_rate_table.md and hit_rate.svg/.png into --out.
    Sweep(SweepArgs),
    /// Replay one policy at one capacity and print hit rate, evictions and throughput.
    Replay(ReplayArgs),
    /// Print trace statistics: requests, block accesses, distinct blocks, the maximum
    /// achievable hit rate, and whether ids are prefix-chained.
    Stats(StatsArgs),
    /// Measure simulated block accesses per second on one core (median of --runs timed runs).
    Bench(BenchArgs),
    /// Write a synthetic workload as a Mooncake-format trace: chat (multi-turn conversations
    /// behind shared system prompts), agent (tool-calling loops), documents (one-off long
    /// documents), bursty (chat with bursts of arrivals) or mix (all of them at once).
    Generate(GenerateArgs),
}

/// What `generate` writes.
/// Every policy, in report order: the default of `--policies` (`PolicyKind::ALL` by name).
const ALL_POLICIES: &str = "lru,lfu,ttl,random_lru,leaf_lru,s3fifo,leaf_lfu,adaptive,opt";

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// chat, agent, documents, bursty or mix (see docs/optimizer.md).
    #[arg(long, value_name = "KIND")]
    pub workload: crate::workload::WorkloadKind,
    /// Requests to generate.
    #[arg(long, default_value_t = 20_000, value_name = "N")]
    pub requests: usize,
    /// Seed: the same workload, size and seed give the same file.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output file (JSON lines, Mooncake format: `timestamp` ms, `hash_ids`).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

/// Where the trace is and how to read it.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// Trace file, one JSON object per line. Read line by line; only the interned block ids
    /// are kept (4 bytes per block access).
    #[arg(long, value_name = "FILE")]
    pub trace: PathBuf,

    /// Trace format: mooncake (`timestamp` ms, `hash_ids`, 512-token blocks), bailian
    /// (Qwen-Bailian: `timestamp` s, `hash_ids`, 16-token blocks) or kvcm (kvcm's event log:
    /// `getCacheLocation` events, keys namespaced by `source`; other events ignored).
    #[arg(long, default_value = "mooncake", value_name = "FORMAT")]
    pub format: TraceFormat,
}

/// Policy parameters.
#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// ttl policy: seconds of trace time after its last access before a block expires.
    #[arg(long, default_value_t = 300.0, value_name = "SECONDS")]
    pub ttl_s: f64,

    /// random_lru policy: resident blocks sampled per eviction (the least recent is evicted).
    #[arg(long, default_value_t = 5, value_name = "K")]
    pub random_samples: usize,

    /// random_lru and adaptive policies: sampler seed; the same seed gives the same result.
    #[arg(long, default_value_t = PolicyParams::default().seed, value_name = "SEED")]
    pub seed: u64,
}

impl PolicyArgs {
    fn params(&self) -> anyhow::Result<PolicyParams> {
        if !(self.ttl_s.is_finite() && self.ttl_s >= 0.0) {
            bail!("--ttl-s must be a non-negative number of seconds, got {}", self.ttl_s);
        }
        if self.random_samples == 0 {
            bail!("--random-samples must be at least 1");
        }
        Ok(PolicyParams {
            ttl_us: (self.ttl_s * 1e6).round() as u64,
            random_samples: self.random_samples,
            seed: self.seed,
        })
    }
}

/// What a hit is worth.
#[derive(Debug, Args)]
pub struct SavingsArgs {
    /// Tokens per block, to report prefill tokens saved (= hit blocks × this). Defaults to the
    /// format's block size (mooncake 512, bailian 16); kvcm event logs have none, so without
    /// this flag they report no tokens saved.
    #[arg(long, value_name = "TOKENS")]
    pub tokens_per_block: Option<u64>,

    /// GPU seconds of prefill per token, to report GPU seconds saved (= tokens saved × this),
    /// e.g. 0.00005 for 20k prefill tokens/s per GPU.
    #[arg(long, value_name = "SECONDS")]
    pub gpu_s_per_token: Option<f64>,
}

/// Output formats of the plot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlotChoice {
    /// hit_rate.svg and hit_rate.png.
    Both,
    /// hit_rate.svg only.
    Svg,
    /// hit_rate.png only.
    Png,
    /// No plot.
    None,
}

/// `sweep` flags.
#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    trace: TraceArgs,

    /// Capacities in blocks, comma-separated (e.g. 1000,2000,5000).
    #[arg(long, value_delimiter = ',', value_name = "BLOCKS")]
    capacities: Vec<usize>,

    /// Capacities as fractions of the trace's distinct blocks, comma-separated (e.g.
    /// 0.01,0.1,0.5,1). Used alone when no capacity flag is given:
    /// 0.01,0.02,0.05,0.1,0.2,0.3,0.4,0.5,0.75,1.
    #[arg(long, value_delimiter = ',', value_name = "FRACTIONS")]
    capacity_fractions: Vec<f64>,

    /// Capacities in bytes, comma-separated, with units (e.g. 64GiB,128GiB,1.5TB); needs
    /// --block-bytes. Rounded down to whole blocks.
    #[arg(long, value_delimiter = ',', value_name = "SIZES", requires = "block_bytes")]
    bytes: Vec<String>,

    /// Bytes per block (e.g. 2MiB): converts --bytes to blocks and adds capacity_bytes to the
    /// reports.
    #[arg(long, value_name = "SIZE")]
    block_bytes: Option<String>,

    /// Policies, comma-separated: lru, lfu, ttl, random_lru, leaf_lru, s3fifo, leaf_lfu, adaptive, opt.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "POLICIES",
        default_value = ALL_POLICIES
    )]
    policies: Vec<PolicyKind>,

    /// Output directory (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,

    /// Recommend, per policy, the smallest capacity reaching this fraction of the maximum
    /// achievable (unbounded-cache) hit rate.
    #[arg(long, default_value_t = 0.9, value_name = "FRACTION")]
    target_fraction: f64,

    /// Plot formats to write.
    #[arg(long, value_enum, default_value_t = PlotChoice::Both)]
    plot: PlotChoice,

    /// Worker threads for the sweep (default: one per core).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,

    /// Never draw a progress bar (it is drawn only when stderr is a terminal anyway).
    #[arg(long)]
    no_progress: bool,

    #[command(flatten)]
    policy: PolicyArgs,

    #[command(flatten)]
    savings: SavingsArgs,
}

/// One capacity, in one of three units.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct CapacityArg {
    /// Capacity in blocks.
    #[arg(long, value_name = "BLOCKS")]
    capacity: Option<usize>,

    /// Capacity as a fraction of the trace's distinct blocks.
    #[arg(long, value_name = "FRACTION")]
    capacity_fraction: Option<f64>,

    /// Capacity in bytes with a unit (e.g. 64GiB); needs --block-bytes.
    #[arg(long, value_name = "SIZE", requires = "block_bytes")]
    bytes: Option<String>,
}

/// `replay` flags.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    trace: TraceArgs,

    /// The policy: lru, lfu, ttl, random_lru, leaf_lru, s3fifo, leaf_lfu, adaptive or opt.
    #[arg(long, default_value = "lru", value_name = "POLICY")]
    policy: PolicyKind,

    #[command(flatten)]
    capacity: CapacityArg,

    /// Bytes per block, for --bytes.
    #[arg(long, value_name = "SIZE")]
    block_bytes: Option<String>,

    #[command(flatten)]
    params: PolicyArgs,

    #[command(flatten)]
    savings: SavingsArgs,
}

/// `stats` flags.
#[derive(Debug, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    trace: TraceArgs,
}

/// `bench` flags.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    trace: TraceArgs,

    /// Policies to time, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "POLICIES",
        default_value = ALL_POLICIES
    )]
    policies: Vec<PolicyKind>,

    /// Capacity as a fraction of the distinct blocks (eviction-heavy at small fractions).
    #[arg(long, default_value_t = 0.1, value_name = "FRACTION")]
    capacity_fraction: f64,

    /// Timed runs per policy (each repeats whole replays for at least 0.2 s); the median is
    /// reported.
    #[arg(long, default_value_t = 7, value_name = "N")]
    runs: usize,

    #[command(flatten)]
    params: PolicyArgs,
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Sweep(args) => sweep::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Stats(args) => stats::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Generate(args) => generate::run(args),
    }
}

fn load(args: &TraceArgs) -> anyhow::Result<Trace> {
    let started = Instant::now();
    let trace = Trace::read(&args.trace, args.format)
        .with_context(|| format!("reading {} trace {}", args.format, args.trace.display()))?;
    tracing::info!(
        requests = trace.requests(),
        accesses = trace.accesses(),
        distinct_blocks = trace.distinct_blocks(),
        seconds = started.elapsed().as_secs_f64(),
        "trace loaded"
    );
    Ok(trace)
}

fn parse_block_bytes(text: Option<&str>) -> anyhow::Result<Option<u64>> {
    let Some(text) = text else { return Ok(None) };
    let bytes = crate::sweep::parse_size(text).map_err(|e| anyhow::anyhow!("--block-bytes: {e}"))?;
    if bytes == 0 {
        bail!("--block-bytes must be positive");
    }
    Ok(Some(bytes))
}

fn report_context(
    trace: &Trace,
    format: TraceFormat,
    savings: &SavingsArgs,
    block_bytes: Option<u64>,
) -> ReportContext {
    ReportContext {
        distinct_blocks: trace.distinct_blocks(),
        max_hit_rate: if trace.accesses() == 0 {
            0.0
        } else {
            trace.unbounded_hit_blocks() as f64 / trace.accesses() as f64
        },
        tokens_per_block: savings.tokens_per_block.or(format.default_tokens_per_block()),
        gpu_s_per_token: savings.gpu_s_per_token,
        block_bytes,
    }
}

fn check_fraction(name: &str, f: f64) -> anyhow::Result<()> {
    if !(f.is_finite() && f >= 0.0) {
        bail!("{name} must be a non-negative fraction, got {f}");
    }
    Ok(())
}

fn print_trace_summary(trace: &Trace, ctx: &ReportContext) {
    println!(
        "trace: {} requests, {} block accesses, {} distinct blocks; maximum achievable hit rate {:.2}%",
        trace.requests(),
        trace.accesses(),
        trace.distinct_blocks(),
        ctx.max_hit_rate * 100.0
    );
}

/// The directory holding the shared traces, relative to this crate (`../../shared/traces`).
pub fn shared_traces_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_default_policies_are_every_policy_in_report_order() {
        let names: Vec<&str> = PolicyKind::ALL.iter().map(|p| p.name()).collect();
        assert_eq!(ALL_POLICIES, names.join(","));
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_scripted_sweep_form_parses() {
        let cli = Cli::try_parse_from([
            "kvcm-optimizer",
            "sweep",
            "--trace",
            "t.jsonl",
            "--format",
            "mooncake",
            "--capacities",
            "1000,2000,4000",
            "--policies",
            "lru,lfu,opt",
            "--out",
            "dir",
        ])
        .unwrap();
        let Command::Sweep(args) = cli.command else { panic!("not a sweep") };
        assert_eq!(args.capacities, vec![1000, 2000, 4000]);
        assert_eq!(args.policies, vec![PolicyKind::Lru, PolicyKind::Lfu, PolicyKind::Opt]);
        assert_eq!(args.out, PathBuf::from("dir"));
        assert_eq!(args.trace.format, TraceFormat::Mooncake);
    }

    #[test]
    fn bytes_without_a_block_size_are_rejected() {
        let err = Cli::try_parse_from(["kvcm-optimizer", "sweep", "--trace", "t", "--out", "o", "--bytes", "1GiB"])
            .unwrap_err();
        assert!(err.to_string().contains("--block-bytes"), "{err}");
    }

    #[test]
    fn replay_needs_exactly_one_capacity() {
        assert!(Cli::try_parse_from(["kvcm-optimizer", "replay", "--trace", "t"]).is_err());
        assert!(
            Cli::try_parse_from([
                "kvcm-optimizer",
                "replay",
                "--trace",
                "t",
                "--capacity",
                "5",
                "--capacity-fraction",
                "0.5"
            ])
            .is_err()
        );
    }

    #[test]
    fn an_unknown_policy_is_rejected_with_the_choices() {
        let err =
            Cli::try_parse_from(["kvcm-optimizer", "sweep", "--trace", "t", "--out", "o", "--policies", "lru,fifo"])
                .unwrap_err();
        assert!(err.to_string().contains("leaf_lru"), "{err}");
    }
}
