//! Logging setup shared by kvcm binaries: `tracing` to stderr, as text or JSON lines, filtered
//! by `RUST_LOG` if set, else by the configured level. The filter can be replaced at runtime
//! ([`set_filter`], the admin RPC `updateLogger`).

use crate::config::{Config, LogFormat};
use std::sync::OnceLock;
use tracing_subscriber::EnvFilter;

type Reload = Box<dyn Fn(EnvFilter) -> Result<(), String> + Send + Sync>;

/// Replaces the installed subscriber's filter (set by [`init`]).
static RELOAD: OnceLock<Reload> = OnceLock::new();

/// Installs the global subscriber. Call once, first thing in `main`.
pub fn init(config: &Config) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&config.log_level));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let installed = match config.log_format {
        LogFormat::Json => {
            let builder = builder.json().flatten_event(true).with_filter_reloading();
            let handle = builder.reload_handle();
            builder.try_init().map(|()| -> Reload { Box::new(move |f| handle.reload(f).map_err(|e| e.to_string())) })
        }
        LogFormat::Text => {
            let builder = builder.with_filter_reloading();
            let handle = builder.reload_handle();
            builder.try_init().map(|()| -> Reload { Box::new(move |f| handle.reload(f).map_err(|e| e.to_string())) })
        }
    };
    if let Ok(reload) = installed {
        let _ = RELOAD.set(reload);
    }
}

/// Replaces the log filter of this process (`RUST_LOG` syntax: `info`, `kvcm_core=debug,warn`).
/// An error when the directives do not parse or no subscriber was installed by [`init`].
pub fn set_filter(directives: &str) -> Result<(), String> {
    let filter = EnvFilter::try_new(directives).map_err(|e| format!("log filter '{directives}': {e}"))?;
    let reload = RELOAD.get().ok_or("logging was not set up by kvcm (an embedding process?)")?;
    reload(filter)
}
