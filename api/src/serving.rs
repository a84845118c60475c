//! The meta plane's serving threads: engines' connections are served by `serving_threads` OS
//! threads, each running its own single-threaded tokio runtime with its own connection to the
//! Valkey cluster.
//!
//! Why: on a multi-threaded runtime a request hops between threads — hyper's connection task,
//! the Valkey connection's task and the I/O driver can each run on a different worker, and every
//! hop is a futex wake-up of a sleeping thread (`strace -c` of serial reads: ~4 futex calls per
//! request). On a serving thread the whole request — HTTP parsing, the handler, the Valkey round
//! trip and its reply — runs on one thread, which sleeps only in `epoll_wait` (no futex call at
//! all). Serial 128-block reads take ~20% less time and ~30% less frontend CPU
//! (docs/benchmarks.md, "Serving threads").
//!
//! How:
//! * The meta listener's accept loop ([`crate::transport::serve`]) runs on the process's shared
//!   runtime and hands each accepted connection, for its whole life, to the serving thread with
//!   the fewest open connections (keep-alive connections stay put; one hand-off per
//!   connection, not per request). The connection cap, timeouts and drain are the listener's,
//!   as before.
//! * A thread's [`AppState`] is the process's with the thread's own cluster connection
//!   ([`AppState::with_connection`]): registry, caches, metrics, limits and the request-body
//!   budget are shared.
//! * A thread's cluster connection is opened in [`spawn`], before the frontend reports that it
//!   listens, so a cluster that refuses it fails the start with the reason.
//! * The admin plane, gRPC and background work (registry refresh, health checks) stay on the
//!   shared runtime.
//! * What it costs: a long request (a 20,000-block read renders ~3 MB of JSON in a few ms) holds
//!   up the other connections of its thread for that long, where a work-stealing runtime would
//!   move them to an idle worker. One thread per core, with connections spread evenly, keeps
//!   that to one thread's share.
//!
//! Shutdown: once the accept loop has drained every connection, [`Threads::stop`] ends the
//! threads; each drops its runtime, which cancels what its requests left running (a recency
//! update after a read, which is a hint).

use crate::state::AppState;
use crate::transport::ServingThread;
use anyhow::Context;
use std::sync::Arc;
use tokio::sync::oneshot;

/// The running serving threads.
pub struct Threads {
    /// What the accept loop hands connections to.
    pub targets: Arc<[ServingThread]>,
    stops: Vec<oneshot::Sender<()>>,
    done: Vec<oneshot::Receiver<()>>,
}

/// How many serving threads `serving_threads` asks for: itself, or with 0 one per CPU this
/// process may run on.
pub fn count(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Starts `n` serving threads for `state`'s meta plane; each opens its own connection to the
/// cluster before this returns (an error names the thread's failure).
pub async fn spawn(n: usize, state: &AppState) -> anyhow::Result<Threads> {
    let access = kvcm_core::valkey::Access::from_config(&state.config)?;
    let open = prometheus::IntGaugeVec::new(
        prometheus::Opts::new(
            "kvcm_serving_thread_connections",
            "Open meta-plane connections per serving thread (each connection stays on one thread)",
        ),
        &["thread"],
    )
    .expect("valid metric");
    state.metrics.registry.register(Box::new(open.clone())).context("registering serving-thread metrics")?;
    let (mut targets, mut stops, mut done) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        let (ready_tx, ready_rx) = oneshot::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (done_tx, done_rx) = oneshot::channel();
        let access = access.clone();
        std::thread::Builder::new()
            .name(format!("kvcm-serve-{i}"))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready_tx.send(Err(anyhow::Error::new(e).context("cannot start a tokio runtime")));
                        return;
                    }
                };
                runtime.block_on(async move {
                    match access.cluster().await {
                        Ok(conn) => {
                            let _ = ready_tx.send(Ok((tokio::runtime::Handle::current(), conn)));
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(anyhow::Error::new(e)));
                            return;
                        }
                    }
                    // Serves the connections handed to this runtime until told to stop (or the
                    // frontend is dropped).
                    let _ = stop_rx.await;
                });
                drop(runtime);
                let _ = done_tx.send(());
            })
            .with_context(|| format!("cannot start serving thread {i}"))?;
        let (runtime, conn) = ready_rx
            .await
            .context("a serving thread stopped before connecting")?
            .with_context(|| format!("serving thread {i} cannot connect to the Valkey cluster"))?;
        let router = crate::meta_router(&state.with_connection(conn));
        targets.push(ServingThread { runtime, router, open: open.with_label_values(&[&i.to_string()]) });
        stops.push(stop_tx);
        done.push(done_rx);
    }
    Ok(Threads { targets: targets.into(), stops, done })
}

impl Threads {
    /// Ends every thread (after the accept loop has drained its connections) and waits for them.
    pub async fn stop(self) {
        drop(self.targets);
        for stop in self.stops {
            let _ = stop.send(());
        }
        for done in self.done {
            let _ = done.await;
        }
    }
}
