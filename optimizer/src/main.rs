//! `kvcm-optimizer` binary: parse the command line, start logging, run. Everything else lives in
//! the library (`kvcm_optimizer::cli`), where it is tested.

use clap::Parser;
use kvcm_optimizer::cli::{self, Cli};
use tracing_subscriber::EnvFilter;

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_env("KVCM_LOG").unwrap_or_else(|_| EnvFilter::new("warn")))
        .with_writer(std::io::stderr)
        .init();
    cli::run(Cli::parse())
}
