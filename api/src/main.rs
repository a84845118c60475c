//! `kvcm-api`: load config, start logging, then either build the server and serve both planes
//! until SIGINT/SIGTERM, or — in the AWS Lambda runtime — serve one plane's invocations
//! (`kvcm_api::lambda`).

use anyhow::Context;
use clap::Parser;
use kvcm_core::config::Config;
use std::path::PathBuf;

// glibc malloc was a fifth of a loaded frontend's CPU (docs/benchmarks.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// kvcm HTTP frontend: serves the meta plane (engines) and the admin plane (operators) of the
/// Tair KVCM protocol over a Valkey cluster.
///
/// Configuration: embedded defaults (see `kvcm-api --print-default-config`), then the TOML file
/// given with -c, then KVCM_<KEY> environment variables (e.g. KVCM_META_PORT=6382,
/// KVCM_VALKEY_URL=redis://10.0.0.5:6379).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// TOML config file layered over the embedded defaults.
    #[arg(short = 'c', long = "config")]
    config: Option<PathBuf>,
    /// Print the embedded default configuration (documented) and exit.
    #[arg(long)]
    print_default_config: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let args = Args::parse();
    if args.print_default_config {
        print!("{}", kvcm_core::config::DEFAULT_TOML);
        return Ok(());
    }
    let (config, notes) = Config::load(args.config.as_deref())?;
    kvcm_core::telemetry::init(&config);
    for var in notes.ignored_env {
        tracing::warn!(%var, "ignoring environment variable: no such config key");
    }
    if kvcm_api::lambda::in_lambda_runtime() {
        let function = kvcm_api::lambda::prepare(config).await.context("kvcm-api failed to start in AWS Lambda")?;
        // One machine-readable line on stdout, as in server mode (tests wait for it).
        println!("kvcm-api serving lambda_plane={}", function.plane.name());
        tracing::info!(plane = function.plane.name(), "kvcm-api serving as an AWS Lambda function");
        return function.run(started).await;
    }
    let shutdown = kvcm_core::shutdown::signal();
    let server = kvcm_api::build(config).await.context("kvcm-api failed to start")?;
    // One machine-readable line on stdout: scripts and tests read the bound ports from it.
    match server.grpc_addrs {
        Some((grpc_meta, grpc_admin)) => println!(
            "kvcm-api listening meta=http://{} admin=http://{} meta_grpc=http://{grpc_meta} admin_grpc=http://{grpc_admin}",
            server.meta_addr, server.admin_addr
        ),
        None => println!("kvcm-api listening meta=http://{} admin=http://{}", server.meta_addr, server.admin_addr),
    }
    tracing::info!(meta = %server.meta_addr, admin = %server.admin_addr, "kvcm-api serving");
    server.run(shutdown).await
}
