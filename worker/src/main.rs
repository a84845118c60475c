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
    #[arg(short = 'c', long = "config")]
    config: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (config, notes) = Config::load(args.config.as_deref())?;
    kvcm_core::telemetry::init(&config);
    for var in notes.ignored_env {
        tracing::warn!(%var, "ignoring environment variable: no such config key");
    }
    let shutdown = kvcm_core::shutdown::signal();
    let server = kvcm_worker::build(config).await.context("kvcm-worker failed to start")?;
    println!("kvcm-worker {} metrics=http://{}", server.worker.id, server.metrics_addr);
    tracing::info!(id = %server.worker.id, metrics = %server.metrics_addr, "kvcm-worker running");
    server.run(shutdown).await
}
