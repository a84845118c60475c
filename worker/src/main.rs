//! `kvcm-worker`: load config, start logging, build, run until SIGINT/SIGTERM.

use anyhow::Context;
use clap::Parser;
use kvcm_core::config::Config;
use std::path::PathBuf;

// The allocator of every kvcm binary (docs/benchmarks.md: glibc malloc cost a loaded frontend a
// fifth of its CPU).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// kvcm background worker: deletes data queued for deletion, expires abandoned write sessions,
/// and reclaims space when instance groups pass their watermarks. Run any number of them.
///
/// Configuration is shared with kvcm-api (see `kvcm-api --print-default-config`; the [worker]
/// section, e.g. KVCM_WORKER__METRICS_PORT=6592).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// TOML config file layered over the embedded defaults.
    #[arg(short = 'c', long = "config", global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Compare Valkey with the storage directories and print what differs, as JSON: files of
    /// serving blocks that are missing, files no block accounts for (leaks), usage counters that
    /// differ from the serving blocks, deletions nothing will finish. Read-only; run it on a
    /// quiet system. Exit status 1 when a problem was found.
    Audit,
    /// Ingest one vLLM engine's KV-cache events (ZMQ) and report them to kvcm as that engine's
    /// hot tier (docs/events.md, "vLLM engines"): run one next to each engine. Serves the
    /// metrics listener too; runs no other job.
    Events(kvcm_worker::vllm_events::Subscription),
}

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let result = runtime.block_on(run());
    // A storage operation blocked on a hung mount keeps its blocking-pool thread: do not wait
    // for it at exit (every job has stopped; the operation had already been given up).
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    result
}

async fn run() -> anyhow::Result<()> {
    let args = Args::parse();
    let (config, notes) = Config::load(args.config.as_deref())?;
    kvcm_core::telemetry::init(&config);
    for var in notes.ignored_env {
        tracing::warn!(%var, "ignoring environment variable: no such config key");
    }
    if let Some(Command::Audit) = args.command {
        let worker = kvcm_worker::connect(config).await.context("kvcm-worker audit failed to start")?;
        let audit = kvcm_worker::audit::run(&worker).await?;
        println!("{}", serde_json::to_string_pretty(&audit)?);
        std::process::exit(if audit.clean() { 0 } else { 1 });
    }
    let shutdown = kvcm_core::shutdown::signal();
    if let Some(Command::Events(sub)) = args.command {
        let server = kvcm_worker::build(config).await.context("kvcm-worker events failed to start")?;
        println!("kvcm-worker events {} metrics=http://{}", server.worker.id, server.metrics_addr);
        return server.run_events(sub, shutdown).await;
    }
    let server = kvcm_worker::build(config).await.context("kvcm-worker failed to start")?;
    println!("kvcm-worker {} metrics=http://{}", server.worker.id, server.metrics_addr);
    tracing::info!(id = %server.worker.id, metrics = %server.metrics_addr, "kvcm-worker running");
    server.run(shutdown).await
}
