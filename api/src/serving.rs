//! The meta plane's serving threads: engines' connections are served by `serving_threads` OS
//! threads, each running its own single-threaded tokio runtime with its own connection to the
//! Valkey cluster.
//!
//! Why: on a multi-threaded runtime a request hops between threads — hyper's connection task,
//! the Valkey connection's task and the I/O driver can each run on a different worker, and every
//! hop wakes a sleeping thread (`strace -c` of serial 128-block reads: ~4 futex calls per
//! request). On a serving thread a read — HTTP parsing, the handler, the Valkey round trip and
//! its reply, the response — runs on one thread, which sleeps only in `epoll_wait` (no futex
//! call at all). Serial 128-block reads take ~16% less time and ~30% less frontend CPU
//! (docs/benchmarks.md, "Serving threads").
//!
//! How:
//! * The meta listener's accept loop ([`crate::transport::serve`]) runs on the process's shared
//!   runtime and hands each accepted connection, for its whole life, to the live serving thread
//!   with the fewest open connections (one hand-off per connection, not per request; per
//!   thread, `kvcm_serving_thread_connections` counts them and
//!   `kvcm_serving_thread_busy_seconds_total` is the time spent running requests). The
//!   connection cap, timeouts and drain are the listener's, as before.
//! * A thread's [`AppState`] is the process's with the thread's own cluster connection
//!   ([`AppState::with_connection`]): registry, caches, metrics, limits and the request-body
//!   budget are shared. What still leaves the thread: registry reads (an unknown instance,
//!   `registerInstance`) on the registry's connection, `replica_ack` waits on their own
//!   connections, password checks on the blocking pool, event-log lines to its writer thread.
//! * A thread's cluster connection is opened in [`spawn`], before the frontend reports that it
//!   listens, so a cluster that refuses it fails the start with the reason. Each connection
//!   learns of a cluster change (a failover, a node back) on its own, from a command that fails
//!   on it, as the single connection did before.
//! * The admin plane, gRPC and background work (registry refresh, health checks) stay on the
//!   shared runtime.
//! * What it costs: CPU-heavy requests hold up the other connections of their thread while they
//!   run, where a work-stealing runtime would move those to an idle worker — a 16,384-block read
//!   (`max_keys_per_request`) renders ~2.5 MB of JSON in a few ms; a reportEvent of 20,000 adds
//!   decodes for ~6 ms. Connections are spread by count, not by load, so a few busy ones can
//!   share a thread while another idles. With one thread per core and many engine connections
//!   this evens out; a fleet of few, very uneven connections can set more threads than cores.
//!   And each thread holds one more connection to every Valkey node.
//!
//! Shutdown: once the accept loop has drained every connection (see [`crate::transport`]),
//! [`Threads::stop`] ends the threads. Each waits (for at most `valkey_timeout_ms`) until no
//! read hint is being written — a read's touch, a batch of `adaptive` hit counts — and drops its
//! runtime, which closes what is still open past the drain bound and cancels what is left: a hit
//! count waiting for its batch (`HIT_FLUSH`) stays in the data plane's pending hits, which
//! [`crate::Server::run`] sends after the threads are gone.

use crate::state::AppState;
use crate::transport::ServingThread;
use anyhow::Context;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;
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

/// Marks its thread as gone when the thread ends, however it ends: the accept loop then stops
/// handing it connections.
struct Alive(Arc<AtomicBool>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.store(false, Relaxed);
    }
}

/// Starts `n` serving threads for `state`'s meta plane; each opens its own connection to the
/// cluster (all at once) before this returns, and an error names the thread that failed.
pub async fn spawn(n: usize, state: &AppState) -> anyhow::Result<Threads> {
    let access = kvcm_core::valkey::Access::from_config(&state.config)?;
    let hints_bound = Duration::from_millis(state.config.valkey_timeout_ms);
    let open = prometheus::IntGaugeVec::new(
        prometheus::Opts::new(
            "kvcm_serving_thread_connections",
            "Open meta-plane connections per serving thread (each connection stays on one thread)",
        ),
        &["thread"],
    )
    .expect("valid metric");
    state.metrics.registry.register(Box::new(open.clone())).context("registering serving-thread metrics")?;
    let (mut ready, mut stops, mut done, mut alive) =
        (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        let (ready_tx, ready_rx) = oneshot::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (done_tx, done_rx) = oneshot::channel();
        let flag = Arc::new(AtomicBool::new(true));
        // The thread's own data plane, once built on its connection (below): what it waits on.
        let (data_tx, data_rx) = oneshot::channel::<kvcm_core::store::DataPlane>();
        let (access, guard) = (access.clone(), Alive(flag.clone()));
        std::thread::Builder::new()
            .name(format!("kvcm-serve-{i}"))
            .spawn(move || {
                let _alive = guard;
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
                    // This thread's read hints still being written (a touch, a batch of hit
                    // counts) finish before the runtime drops their tasks.
                    if let Ok(data) = data_rx.await
                        && !data.hints_settled(hints_bound).await
                    {
                        tracing::warn!("read hints still being written after {hints_bound:?}: dropped");
                    }
                });
                // Connections still open here (past the drain bound) are closed with the runtime.
                drop(runtime);
                let _ = done_tx.send(());
            })
            .with_context(|| format!("cannot start serving thread {i}"))?;
        ready.push((ready_rx, data_tx));
        stops.push(stop_tx);
        done.push(done_rx);
        alive.push(flag);
    }
    let mut targets = Vec::with_capacity(n);
    for (i, ((ready, data_tx), alive)) in ready.into_iter().zip(alive).enumerate() {
        let (runtime, conn) = ready
            .await
            .context("a serving thread stopped before connecting")?
            .with_context(|| format!("serving thread {i} cannot connect to the Valkey cluster"))?;
        let thread_state = state.with_connection(conn);
        let _ = data_tx.send(thread_state.data.clone());
        let router = crate::meta_router(&thread_state);
        targets.push(ServingThread { runtime, router, open: open.with_label_values(&[&i.to_string()]), alive });
    }
    // `kvcm_serving_thread_busy_seconds_total{thread}`: a thread that carries more than its
    // share shows even when the process's CPU average does not.
    let runtimes: Vec<tokio::runtime::Handle> = targets.iter().map(|t| t.runtime.clone()).collect();
    let busy = crate::metrics::ScrapedCounters::new(
        "kvcm_serving_thread_busy_seconds_total",
        "Time each meta-plane serving thread spent running requests (not waiting for them)",
        "thread",
        // A current-thread runtime has one worker: the thread itself.
        move || {
            let seconds = |r: &tokio::runtime::Handle| r.metrics().worker_total_busy_duration(0).as_secs_f64();
            runtimes.iter().enumerate().map(|(i, r)| (i.to_string(), seconds(r))).collect()
        },
    );
    state.metrics.registry.register(Box::new(busy)).context("registering serving-thread metrics")?;
    tracing::info!(threads = n, "the meta plane is served by {n} serving threads");
    Ok(Threads { targets: targets.into(), stops, done })
}

impl Threads {
    /// Ends every thread (after the accept loop has drained its connections) and waits for them,
    /// for at most `bound`.
    pub async fn stop(self, bound: Duration) {
        drop(self.targets);
        for stop in self.stops {
            let _ = stop.send(());
        }
        let all = futures::future::join_all(self.done);
        if tokio::time::timeout(bound, all).await.is_err() {
            tracing::warn!("serving threads still running after {bound:?}; no longer waiting for them");
        }
    }
}
