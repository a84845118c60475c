//! kvcm-worker: the background jobs of DESIGN §4, safe to run on any number of processes.
//!
//! * [`deleter`]: a consumer group over every instance's deletion stream — delete on storage,
//!   then release the metadata and ack in one script; dead consumers' entries are claimed after
//!   `claim_idle_ms`; entries failing `max_delete_attempts` times go to a dead-letter stream.
//! * [`expirer`]: fails write sessions past their deadline, like a finish with no successes.
//! * [`health`]: probes every storage and records the result in the registry.
//! * [`reclaimer`]: when a group's usage passes its watermark, evicts leaves by the group's policy
//!   under a per-instance fenced lease, and publishes usage and quota gauges.
//! * [`touch_gc`]: drops read bookkeeping (interior touches, LFU counts) whose block no longer
//!   serves — left by a read's touch that landed after its block went.
//!
//! Instances are found by scanning Valkey for their streams and session sets ([`discovery`]),
//! so an instance removed from the registry still has its deletions finished. Each job is a
//! step function over one instance, driven by a loop that adds timing and shutdown; tests call
//! the steps directly or run whole processes.

pub mod audit;
pub mod debug;
pub mod deleter;
pub mod discovery;
pub mod engine_gc;
pub mod expirer;
pub mod health;
pub mod metrics;
pub mod reclaimer;
pub mod touch_gc;
pub mod vllm_events;

use anyhow::Context;
use kvcm_core::config::Config;
use kvcm_core::registry::Registry;
use kvcm_core::store::DataPlane;
use redis::cluster_async::ClusterConnection;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// What every job shares.
#[derive(Clone)]
pub struct Worker {
    pub id: String,
    pub config: Arc<Config>,
    pub conn: ClusterConnection,
    /// How to reach Valkey (seeds, credentials, TLS), for the per-node connections of discovery.
    pub valkey: kvcm_core::valkey::Access,
    pub registry: Arc<Registry>,
    pub data: DataPlane,
    pub metrics: Arc<metrics::Metrics>,
    pub instances: Arc<std::sync::RwLock<Vec<String>>>,
    /// Per instance: where the next XAUTOCLAIM continues in the pending list.
    pub claim_cursors: Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>,
    /// Per instance: where the collection of engine-reported entries continues (an HSCAN cursor).
    pub engine_cursors: Arc<std::sync::Mutex<std::collections::HashMap<String, engine_gc::Cursor>>>,
    /// Where the collection of stale read bookkeeping stands ([`touch_gc`]).
    pub touch_gc: Arc<std::sync::Mutex<touch_gc::State>>,
}

/// A built worker with its metrics listener bound.
pub struct Server {
    pub worker: Worker,
    pub metrics_addr: SocketAddr,
    listener: tokio::net::TcpListener,
}

pub async fn build(config: Config) -> anyhow::Result<Server> {
    let port = config.worker.metrics_port;
    let bind = config.bind.clone();
    let worker = connect(config).await?;
    let listener = tokio::net::TcpListener::bind((bind.as_str(), port))
        .await
        .with_context(|| format!("cannot bind the worker metrics port {port}"))?;
    warn_dangerous_settings(&worker);
    Ok(Server { metrics_addr: listener.local_addr()?, worker, listener })
}

/// A worker connected to Valkey with its registry loaded, running nothing yet (what `build`
/// and the auditor start from).
pub async fn connect(config: Config) -> anyhow::Result<Worker> {
    let valkey = kvcm_core::valkey::Access::from_config(&config)?;
    let conn = valkey
        .connect()
        .await
        .with_context(|| format!("cannot connect to the Valkey cluster at {}", config.valkey_url))?;
    let registry =
        Registry::open(conn.clone(), &config.namespace, (&config).into()).await.context("cannot load the registry")?;
    let data = DataPlane::new(conn.clone(), &config.namespace, config.limits());
    // Consumer names and lease owners must be unique per process, even when a config file
    // sets the same id on several workers: a random suffix makes them so.
    let base = if config.worker.id.is_empty() {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}-{}", host.trim(), std::process::id())
    } else {
        config.worker.id.clone()
    };
    let id = format!("{base}-{:06x}", fastrand::u32(..) & 0xff_ffff);
    Ok(Worker {
        id,
        config: Arc::new(config),
        conn,
        valkey,
        registry,
        data,
        metrics: metrics::Metrics::new(),
        instances: Default::default(),
        claim_cursors: Default::default(),
        engine_cursors: Default::default(),
        touch_gc: Default::default(),
    })
}

/// Settings that work but waste effort or surprise: logged once at start.
fn warn_dangerous_settings(w: &Worker) {
    let claim = w.config.worker.claim_idle_ms;
    for g in w.registry.snapshot().groups.values() {
        let delay = g.cache_config.reclaim_strategy.delay_before_delete_ms.max(0) as u64;
        if delay >= claim {
            tracing::warn!(group = %g.name, delay_before_delete_ms = delay, claim_idle_ms = claim,
                "delay_before_delete_ms is not shorter than worker.claim_idle_ms: entries waiting out their delay \
                 look dead and are claimed back and forth between workers; raise claim_idle_ms");
        }
    }
    if claim < 1000 {
        tracing::warn!(
            claim_idle_ms = claim,
            "worker.claim_idle_ms under 1 s: a slow storage makes workers claim each other's entries"
        );
    }
    if w.config.worker.lease_ms < 4 * w.config.worker.reclaim_interval_ms.min(1000) {
        tracing::warn!(
            lease_ms = w.config.worker.lease_ms,
            "worker.lease_ms is short: a slow eviction batch may lose its lease"
        );
    }
}

impl Server {
    /// Runs every job until `shutdown` completes; in-flight steps finish first.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        let w = self.worker;
        let (tx, rx) = tokio::sync::watch::channel(false);
        let cfg = w.config.worker.clone();
        let mut jobs = Vec::new();
        jobs.push(spawn_loop("discovery", rx.clone(), cfg.discover_interval_ms, w.clone(), |w| {
            Box::pin(async move { discovery::refresh(&w).await })
        }));
        jobs.push(spawn_loop("deleter", rx.clone(), cfg.poll_interval_ms, w.clone(), |w| {
            Box::pin(async move { deleter::run_once(&w).await })
        }));
        jobs.push(spawn_loop("expirer", rx.clone(), cfg.poll_interval_ms, w.clone(), |w| {
            Box::pin(async move { expirer::run_once(&w).await })
        }));
        jobs.push(spawn_loop("engine-gc", rx.clone(), cfg.poll_interval_ms, w.clone(), |w| {
            Box::pin(async move { engine_gc::run_once(&w).await })
        }));
        if cfg.touch_gc_pause_ms > 0 {
            jobs.push(spawn_loop("touch-gc", rx.clone(), cfg.poll_interval_ms, w.clone(), |w| {
                Box::pin(async move { touch_gc::run_once(&w).await })
            }));
        }
        jobs.push(spawn_loop("health", rx.clone(), cfg.health_interval_ms, w.clone(), |w| {
            Box::pin(async move { health::run_once(&w).await })
        }));
        jobs.push(spawn_loop("reclaimer", rx.clone(), cfg.reclaim_interval_ms, w.clone(), |w| {
            Box::pin(async move { reclaimer::run_once(&w).await })
        }));
        let http = serve_metrics(self.listener, &w, rx.clone());
        shutdown.await;
        tracing::info!("kvcm-worker shutting down");
        let _ = tx.send(true);
        for j in jobs {
            let _ = j.await;
        }
        http.await??;
        Ok(())
    }

    /// `kvcm-worker events`: runs one engine event subscription ([`vllm_events`]) and the
    /// metrics listener, nothing else, until `shutdown` completes or the subscription fails.
    pub async fn run_events(
        self,
        sub: vllm_events::Subscription,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let w = self.worker;
        let (tx, rx) = tokio::sync::watch::channel(false);
        let http = serve_metrics(self.listener, &w, rx.clone());
        let events = tokio::spawn(vllm_events::run(w.clone(), sub, rx));
        tokio::pin!(events);
        let result = tokio::select! {
            () = shutdown => {
                tracing::info!("kvcm-worker events shutting down");
                let _ = tx.send(true);
                events.await?
            }
            done = &mut events => done?,
        };
        let _ = tx.send(true);
        http.await??;
        result
    }
}

/// Serves the metrics listener (and the debug service) until `stop` turns true.
fn serve_metrics(
    listener: tokio::net::TcpListener,
    w: &Worker,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    let app = metrics::router(w.metrics.clone()).merge(debug::router(debug::enabled(&w.config)));
    tokio::spawn(
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .into_future(),
    )
}

type Step = fn(Worker) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>>;

/// Runs `step` every `period_ms` until stopped; errors are logged (once per streak) and retried.
fn spawn_loop(
    name: &'static str,
    mut stop: tokio::sync::watch::Receiver<bool>,
    period_ms: u64,
    w: Worker,
    step: Step,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut failing = false;
        loop {
            if *stop.borrow() {
                return;
            }
            match step(w.clone()).await {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!(job = name, "job recovered");
                }
                Ok(()) => {}
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(job = name, error = %e, "job step failed; retrying");
                }
                Err(_) => {}
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(period_ms)) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    })
}
