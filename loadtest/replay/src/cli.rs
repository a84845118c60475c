//! The command line: flags, the paced (or unpaced) dispatch of requests, the prediction and
//! the report.
//!
//! Requests are read with the optimizer's trace readers ([`kvcm_optimizer::Trace`]), in the
//! optimizer's replay order (timestamp order, ties in file order). The block keys sent to kvcm
//! are the trace's interned block ids: equal ids are equal blocks, exactly as the optimizer sees
//! them, and an event log's instances (namespaces) stay apart because the interner gives their
//! keys different ids. Every request goes to one instance, whose group holds the capacity — the
//! single cache the optimizer simulates.
//!
//! Pacing: with `--speedup S`, request `i` starts at `(t_i − t_0) / S` after the start, or later
//! if all `--concurrency` engines are busy (the lag is reported); without it, requests start as
//! soon as an engine is free.

use crate::backpressure::Backpressure;
use crate::client::{Client, Credential};
use crate::engine::Engine;
use crate::report::{Report, ReportContext, Stats};
use crate::setup::Setup;
use anyhow::Context;
use clap::Parser;
use kvcm_optimizer::{PolicyKind, PolicyParams, Trace, TraceFormat};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Replays a trace against a running kvcm as a fleet of engines and reports the hit rate kvcm
/// really served, next to the optimizer's prediction for the same requests.
#[derive(Parser, Debug, Clone)]
#[command(name = "kvcm-replay", version)]
pub struct Args {
    /// Trace file (JSON lines).
    #[arg(long)]
    pub trace: PathBuf,
    /// Trace format: mooncake, bailian or kvcm (kvcm's event log; its getCacheLocation events).
    #[arg(long, default_value = "mooncake")]
    pub format: TraceFormat,
    /// Replay only the first N requests (in replay order).
    #[arg(long)]
    pub requests: Option<usize>,
    /// Meta plane base URL.
    #[arg(long, env = "KVCM_META_URL", default_value = "http://127.0.0.1:6382")]
    pub meta: String,
    /// Admin plane base URL (setup mode only).
    #[arg(long, env = "KVCM_ADMIN_URL", default_value = "http://127.0.0.1:6492")]
    pub admin: String,
    /// Meta-plane API key (sent as `Bearer <key>`).
    #[arg(long, env = "KVCM_API_KEY", hide_env_values = true, conflicts_with = "user")]
    pub api_key: Option<String>,
    /// Meta-plane account as `user:password` (sent as `Bearer user:password`).
    #[arg(long, env = "KVCM_USER", hide_env_values = true)]
    pub user: Option<String>,
    /// Admin-plane API key (default: the meta credential).
    #[arg(long, env = "KVCM_ADMIN_API_KEY", hide_env_values = true, conflicts_with = "admin_user")]
    pub admin_api_key: Option<String>,
    /// Admin-plane account as `user:password` (default: the meta credential).
    #[arg(long, env = "KVCM_ADMIN_USER", hide_env_values = true)]
    pub admin_user: Option<String>,
    /// Instance the engines use (setup mode: created; default `replay-<random>`).
    #[arg(long, env = "KVCM_REPLAY_INSTANCE")]
    pub instance: Option<String>,
    /// Trace time runs N times faster than recorded. Absent: as fast as --concurrency allows.
    #[arg(long)]
    pub speedup: Option<f64>,
    /// Engines (requests in flight at once).
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Write real bytes (zeroes, `size` each) to the `file://` URIs sessions hand out.
    #[arg(long)]
    pub write_bytes: bool,
    /// Deadline of one RPC, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// `write_timeout_seconds` of each write session (0 = the server's default).
    #[arg(long, default_value_t = 0)]
    pub write_timeout_s: u32,

    /// Setup mode: create (or update) a file storage, a group with the capacity and policy
    /// below, and the instance, before replaying.
    #[arg(long)]
    pub setup: bool,
    /// Setup: storage name.
    #[arg(long, default_value = "replay-files")]
    pub storage: String,
    /// Setup: the storage's root directory.
    #[arg(long, default_value = "/tmp/kvcm-replay")]
    pub storage_root: String,
    /// Setup: instance group name.
    #[arg(long, default_value = "replay")]
    pub group: String,
    /// Bytes of one block (setup: the instance's single spec, `tp0`).
    #[arg(long, default_value_t = 4096)]
    pub block_bytes: u64,
    /// Capacity in blocks: the level kvcm's reclaimer evicts down to (setup: the group's
    /// watermark), and the optimizer's capacity for the prediction.
    #[arg(long, conflicts_with = "capacity_fraction")]
    pub capacity_blocks: Option<u64>,
    /// Capacity as a fraction of the replayed requests' distinct blocks.
    #[arg(long)]
    pub capacity_fraction: Option<f64>,
    /// Setup: quota above the watermark, as a fraction of it (room for blocks written between
    /// two reclaim rounds).
    #[arg(long, default_value_t = 1.0)]
    pub headroom: f64,
    /// Setup: reclaim policy, lru, lfu, ttl or adaptive (kvcm's POLICY_*; all leaf-aware but TTL).
    #[arg(long, default_value = "lru")]
    pub policy: String,
    /// Optimizer policies to predict with (default: lru,leaf_lru for lru; lfu,leaf_lfu for lfu;
    /// ttl).
    #[arg(long, value_delimiter = ',')]
    pub predict: Vec<PolicyKind>,
    /// TTL of the `ttl` prediction, in trace seconds (match it to the worker's `ttl_s` ×
    /// speed-up).
    #[arg(long, default_value_t = 3600.0)]
    pub ttl_s: f64,
    /// Only read the trace and print the prediction: no setup, no requests to kvcm.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Never draw the progress bar (it draws only on a terminal anyway).
    #[arg(long)]
    pub no_progress: bool,

    /// Back-pressure: a kvcm-worker's metrics URL (`http://host:port/metrics`). New requests
    /// pause while the group's usage there (`kvcm_group_usage_bytes`, published each reclaim
    /// round) is more than --backpressure-over above the capacity, until the reclaimer catches
    /// up: the cache the replay measures then stays within that margin of the optimizer's,
    /// however fast the machine's worker evicts. Needs a capacity; reads --group's usage.
    #[arg(long)]
    pub backpressure_metrics: Option<String>,
    /// Back-pressure: allowed usage above the capacity, as a fraction of it.
    #[arg(long, default_value_t = 0.05)]
    pub backpressure_over: f64,
    /// Back-pressure: the longest pause before the replay fails (the reclaimer is not keeping up
    /// at all: no worker, wrong URL or group).
    #[arg(long, default_value_t = 60)]
    pub backpressure_timeout_s: u64,
}

fn credential(api_key: &Option<String>, user: &Option<String>) -> Option<Credential> {
    api_key.clone().map(Credential::ApiKey).or_else(|| user.clone().map(Credential::Account))
}

/// The first `limit` requests of `trace` as their own trace (ids re-interned, same order).
fn slice(trace: &Trace, limit: usize) -> Trace {
    Trace::from_requests(
        (0..limit).map(|i| (trace.time_us(i), trace.request(i).iter().map(|&b| b as i64).collect::<Vec<_>>())),
    )
}

/// Runs the replay described by `args`; the report.
pub async fn run(args: Args) -> anyhow::Result<Report> {
    anyhow::ensure!(args.concurrency > 0, "--concurrency must be at least 1");
    if let Some(s) = args.speedup {
        anyhow::ensure!(s > 0.0 && s.is_finite(), "--speedup must be a positive number, got {s}");
    }
    let full = Trace::read(&args.trace, args.format).with_context(|| format!("reading {}", args.trace.display()))?;
    let n = args.requests.unwrap_or(full.requests()).min(full.requests());
    let trace = slice(&full, n);
    drop(full);
    let distinct = trace.distinct_blocks();
    let capacity =
        args.capacity_blocks.or_else(|| args.capacity_fraction.map(|f| (f * distinct as f64).round() as u64));
    let policy = match args.policy.to_ascii_lowercase().trim_start_matches("policy_") {
        "lru" => "POLICY_LRU",
        "lfu" => "POLICY_LFU",
        "ttl" => "POLICY_TTL",
        "adaptive" => "POLICY_ADAPTIVE",
        other => anyhow::bail!("--policy must be lru, lfu, ttl or adaptive, got {other}"),
    };
    let timeout = Duration::from_millis(args.timeout_ms);
    let meta_cred = credential(&args.api_key, &args.user);
    let meta = Client::new(&args.meta, meta_cred.as_ref(), timeout)?;
    let instance = args.instance.clone().unwrap_or_else(|| format!("replay-{:08x}", fastrand::u32(..)));
    if args.setup && !args.dry_run {
        let admin_cred = credential(&args.admin_api_key, &args.admin_user).or(meta_cred);
        let admin = Client::new(&args.admin, admin_cred.as_ref(), timeout)?;
        let setup = Setup {
            storage: args.storage.clone(),
            root: args.storage_root.clone(),
            group: args.group.clone(),
            instance: instance.clone(),
            block_bytes: args.block_bytes,
            capacity_blocks: capacity.unwrap_or(0),
            headroom: args.headroom,
            policy: policy.into(),
            block_size: args.format.default_tokens_per_block().unwrap_or(16) as u32,
        };
        setup.run(&admin).await?;
        let (quota, pct) = setup.quota();
        tracing::info!(%instance, quota, used_percentage = pct, "set up");
    } else if !args.dry_run {
        anyhow::ensure!(args.instance.is_some(), "--instance is required without --setup");
    }

    let predict = if args.predict.is_empty() {
        match policy {
            "POLICY_LFU" => vec![PolicyKind::Lfu, PolicyKind::LeafLfu],
            "POLICY_TTL" => vec![PolicyKind::Ttl],
            "POLICY_ADAPTIVE" => vec![PolicyKind::LeafLru, PolicyKind::LeafLfu, PolicyKind::Adaptive],
            _ => vec![PolicyKind::Lru, PolicyKind::LeafLru],
        }
    } else {
        args.predict.clone()
    };
    let params = PolicyParams { ttl_us: (args.ttl_s * 1e6) as u64, ..PolicyParams::default() };
    let predicted: BTreeMap<String, f64> = match capacity {
        Some(cap) => predict
            .iter()
            .map(|&k| {
                (k.name().to_string(), kvcm_optimizer::simulate(&trace, k, cap as usize, &params, None).hit_rate())
            })
            .collect(),
        None => BTreeMap::new(),
    };
    let max_hit_rate =
        if trace.accesses() == 0 { 0.0 } else { trace.unbounded_hit_blocks() as f64 / trace.accesses() as f64 };

    let engine = Arc::new(Engine {
        meta,
        instance,
        write_bytes: args.write_bytes,
        write_timeout_s: args.write_timeout_s,
        stats: Mutex::new(Stats::default()),
    });
    let bar = if args.no_progress || !std::io::stderr().is_terminal() {
        indicatif::ProgressBar::hidden()
    } else {
        let bar = indicatif::ProgressBar::new(n as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} requests, {per_sec}, eta {eta} {msg}")
                .expect("a valid template"),
        );
        bar
    };
    let mut backpressure = match (&args.backpressure_metrics, capacity) {
        (Some(url), Some(cap)) if !args.dry_run => {
            anyhow::ensure!(args.backpressure_over >= 0.0, "--backpressure-over must be at least 0");
            // The limit is in bytes as --setup sizes the instance (one spec of --block-bytes);
            // an existing instance may have other specs, so its blocks' bytes are unknown here.
            anyhow::ensure!(
                args.setup,
                "--backpressure-metrics needs --setup (the instance it creates defines bytes per block)"
            );
            let limit = cap as f64 * args.block_bytes as f64 * (1.0 + args.backpressure_over);
            let timeout = Duration::from_secs(args.backpressure_timeout_s);
            // About the reclaimer's own pace: scraping faster only competes with it for CPU.
            Some(Backpressure::start(url, &args.group, limit, Duration::from_millis(50), timeout))
        }
        (Some(_), None) => {
            anyhow::bail!("--backpressure-metrics needs a capacity (--capacity-blocks or --capacity-fraction)")
        }
        _ => None,
    };
    let started = Instant::now();
    let wall_seconds =
        if args.dry_run { 0.0 } else { dispatch(&trace, &engine, &args, &bar, backpressure.as_mut()).await? };
    bar.finish_and_clear();
    tracing::debug!(elapsed = ?started.elapsed(), "replay done");

    let stats = engine.stats.lock().unwrap();
    Ok(stats.report(ReportContext {
        trace: args.trace.display().to_string(),
        format: args.format.name().to_string(),
        trace_requests: n,
        distinct_blocks: distinct,
        speedup: args.speedup,
        concurrency: args.concurrency,
        wall_seconds,
        capacity_blocks: capacity,
        predicted,
        max_hit_rate,
    }))
}

/// Starts every request at its (scaled) time with at most `--concurrency` in flight; waits for
/// all. Returns the wall time in seconds. With back-pressure, a request first waits until the
/// cache is within its margin; trace time stands still meanwhile (the schedule shifts by the
/// pause), so pacing resumes at the same rate instead of bursting to catch up.
async fn dispatch(
    trace: &Trace,
    engine: &Arc<Engine>,
    args: &Args,
    bar: &indicatif::ProgressBar,
    mut backpressure: Option<&mut Backpressure>,
) -> anyhow::Result<f64> {
    let engines = Arc::new(tokio::sync::Semaphore::new(args.concurrency));
    let t0 = tokio::time::Instant::now();
    let first = if trace.requests() > 0 { trace.time_us(0) } else { 0 };
    let mut paused = Duration::ZERO;
    for i in 0..trace.requests() {
        if let Some(bp) = backpressure.as_deref_mut() {
            let waited = bp.wait().await?;
            if !waited.is_zero() {
                paused += waited;
                let mut stats = engine.stats.lock().unwrap();
                stats.backpressure_pauses += 1;
                stats.backpressure_paused_ms += waited.as_secs_f64() * 1000.0;
            }
        }
        let due =
            args.speedup.map(|s| t0 + paused + Duration::from_secs_f64((trace.time_us(i) - first) as f64 / 1e6 / s));
        if let Some(due) = due {
            tokio::time::sleep_until(due).await;
        }
        let permit = engines.clone().acquire_owned().await.expect("the semaphore is never closed");
        if let Some(due) = due {
            let lag = tokio::time::Instant::now().saturating_duration_since(due).as_secs_f64() * 1000.0;
            let mut stats = engine.stats.lock().unwrap();
            stats.max_lag_ms = stats.max_lag_ms.max(lag);
        }
        let keys: Vec<i64> = trace.request(i).iter().map(|&b| b as i64).collect();
        let (engine, bar) = (engine.clone(), bar.clone());
        tokio::spawn(async move {
            engine.request(&keys).await;
            drop(permit);
            bar.inc(1);
            if bar.position() % 64 == 0 {
                bar.set_message(format!("hit rate {:.2}%", 100.0 * engine.stats.lock().unwrap().hit_rate()));
            }
        });
    }
    // Every engine free again = every request done.
    let _all = engines.acquire_many(args.concurrency as u32).await.expect("the semaphore is never closed");
    Ok(t0.elapsed().as_secs_f64())
}
