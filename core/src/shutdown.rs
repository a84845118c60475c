//! Process shutdown for kvcm binaries: SIGTERM and SIGINT handlers installed up front.

/// Installs the SIGTERM/SIGINT handlers now (before anything is served, so a signal that
/// arrives early is not lost to the default action) and returns the future that completes on
/// the first of them. Call it from within the Tokio runtime, first thing in `main`.
pub fn signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    }
}
