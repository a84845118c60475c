//! kvcm-api: the stateless HTTP frontend. Two listeners — the meta plane for engines and the
//! admin plane for operators — serve the Tair KVCM protocol (DESIGN §2) over state kept in
//! Valkey. Any number of frontends can run side by side.
//!
//! [`build`] connects to Valkey, loads the scripts and the registry, applies the startup
//! config, binds both listeners (port 0 picks a free port) and returns a [`Server`] that knows
//! its addresses; [`Server::run`] serves until the shutdown future completes, then drains
//! in-flight requests. Connections are handled by [`transport`] (timeouts, connection cap,
//! graceful shutdown); `GET /api/healthy` answers from [`health`], kept fresh in the background.
//!
//! In the AWS Lambda runtime, [`lambda`] serves one plane's router instead, built by the same
//! steps ([`connect`], [`open_registry`], [`app_state`]) without binding any socket.

pub mod admin;
pub mod auth;
pub mod event_log;
pub mod faults;
pub mod grpc;
pub mod guard;
pub mod health;
pub mod lambda;
pub mod meta;
pub mod metrics;
pub mod openapi;
pub mod reply;
pub mod serving;
pub mod state;
pub mod tair_metrics;
pub mod transport;

use crate::metrics::Metrics;
use crate::reply::error_response;
use crate::state::{AppState, Node};
use anyhow::Context;
use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode as Http, Uri};
use axum::middleware::from_fn;
use axum::response::Response;
use kvcm_core::config::{Config, LambdaPlane};
use kvcm_core::registry::Registry;
use kvcm_core::store::get_cache_location::FlushedHits;
use kvcm_core::wire::StatusCode;
use redis::cluster_async::ClusterConnection;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;
use tokio::net::TcpListener;

/// A built, bound, not yet serving frontend.
pub struct Server {
    pub meta_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// Tair's gRPC services (`grpc = true`): MetaService's and AdminService's addresses.
    pub grpc_addrs: Option<(SocketAddr, SocketAddr)>,
    pub state: AppState,
    meta: TcpListener,
    /// The meta plane's serving threads (connected, waiting for [`Server::run`]).
    serving: serving::Threads,
    admin: TcpListener,
    grpc: Option<(TcpListener, TcpListener)>,
    health: Arc<health::Health>,
}

/// Connects, loads, applies the startup config, creates the bootstrap admin, checks that the
/// configuration is safe to serve (fail closed, docs/security.md), binds both listeners and
/// starts the meta plane's serving threads, each connected to the cluster ([`serving`]).
/// (An AWS Lambda function binds nothing: see [`lambda::prepare`].)
pub async fn build(config: Config) -> anyhow::Result<Server> {
    if let Some(plane) = config.lambda_plane {
        anyhow::bail!(
            "lambda_plane = \"{}\" but this process is not running in AWS Lambda (AWS_LAMBDA_RUNTIME_API is \
             unset): unset lambda_plane to serve both planes on listeners",
            plane.name()
        );
    }
    let conn = connect(&config).await?;
    let ack = replica_ack(&config).await?;
    let registry = open_registry(&config, conn.clone()).await?;
    let meta = TcpListener::bind((config.bind.as_str(), config.meta_port))
        .await
        .with_context(|| format!("cannot bind the meta plane to {}:{}", config.bind, config.meta_port))?;
    let admin = TcpListener::bind((config.admin_bind(), config.admin_port))
        .await
        .with_context(|| format!("cannot bind the admin plane to {}:{}", config.admin_bind(), config.admin_port))?;
    let (meta_addr, admin_addr) = (meta.local_addr()?, admin.local_addr()?);
    let grpc = if config.grpc {
        let bind = |addr: String, port: u16, what: &'static str| async move {
            TcpListener::bind((addr.as_str(), port)).await.with_context(|| {
                format!("cannot bind the {what} gRPC service to {addr}:{port} (set grpc = false to not serve gRPC)")
            })
        };
        let meta = bind(config.bind.clone(), config.grpc_meta_port, "meta").await?;
        let admin = bind(config.admin_bind().to_string(), config.grpc_admin_port, "admin").await?;
        Some((meta, admin))
    } else {
        None
    };
    let grpc_addrs = match &grpc {
        Some((m, a)) => Some((m.local_addr()?, a.local_addr()?)),
        None => None,
    };
    let host = hostname();
    let node = Node {
        id: if config.node_id.is_empty() { format!("{host}:{}", admin_addr.port()) } else { config.node_id.clone() },
        host,
        meta_port: meta_addr.port(),
        admin_port: admin_addr.port(),
        grpc_meta_port: grpc_addrs.map_or(0, |(m, _)| m.port()),
        grpc_admin_port: grpc_addrs.map_or(0, |(_, a)| a.port()),
    };
    let state = app_state(config, conn, registry, node, ack)?;
    let serving = serving::spawn(serving::count(state.config.serving_threads), &state).await?;
    let health = state.health.clone();
    Ok(Server { meta_addr, admin_addr, grpc_addrs, state, meta, serving, admin, grpc, health })
}

/// With `durability = "replica_ack"`, the connections acknowledged writes travel on (see
/// `kvcm_core::store::durability`); `None` with `durability = "off"`.
pub async fn replica_ack(config: &Config) -> anyhow::Result<Option<kvcm_core::store::durability::ReplicaAck>> {
    use kvcm_core::store::durability::{CONNECTIONS, ReplicaAck};
    if config.durability == kvcm_core::config::Durability::Off {
        return Ok(None);
    }
    let access = kvcm_core::valkey::Access::from_config(config)?;
    let mut conns = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        conns.push(access.cluster().await.context("cannot open the replica_ack connections")?);
    }
    tracing::info!(
        replicas = config.replica_ack_replicas,
        timeout_ms = config.replica_ack_timeout_ms,
        "durability = replica_ack: writes are answered once replicas hold them"
    );
    Ok(Some(ReplicaAck::new(conns, config.replica_ack_replicas, config.replica_ack_timeout_ms)))
}

/// Opens the cluster connection and loads every Lua script on every primary.
pub async fn connect(config: &Config) -> anyhow::Result<ClusterConnection> {
    kvcm_core::valkey::connect(config)
        .await
        .with_context(|| format!("cannot connect to the Valkey cluster at {}", config.valkey_url))
}

/// Loads the registry, applies `startup_config`, creates the bootstrap admin and refuses
/// configurations unsafe to serve ([`refuse_unsafe_exposure`]).
pub async fn open_registry(config: &Config, conn: ClusterConnection) -> anyhow::Result<Arc<Registry>> {
    let registry = Registry::open(conn, &config.namespace, config.into()).await.context("cannot load the registry")?;
    if !config.startup_config.is_empty() {
        let text = std::fs::read_to_string(&config.startup_config)
            .with_context(|| format!("cannot read startup_config {}", config.startup_config))?;
        let startup = kvcm_core::registry::tair_format::parse_startup(&text)
            .map_err(|e| anyhow::anyhow!("startup_config {}: {}", config.startup_config, e.public_message()))?;
        registry.apply_startup(startup).await.map_err(|e| anyhow::anyhow!("{}", e.public_message()))?;
    }
    bootstrap_admin(config, &registry).await?;
    refuse_unsafe_exposure(config, &registry.snapshot())?;
    Ok(registry)
}

/// Everything the handlers share, around an opened connection and registry: metrics, the event
/// log, the data plane (its writes waiting for replicas with `replica_ack`), auth and health
/// state. No sockets, no background tasks.
pub fn app_state(
    config: Config,
    conn: ClusterConnection,
    registry: Arc<Registry>,
    node: Node,
    replica_ack: Option<kvcm_core::store::durability::ReplicaAck>,
) -> anyhow::Result<AppState> {
    let metrics = Metrics::new(config.access_log, config.max_instance_metric_labels);
    metrics
        .registry
        .register(Box::new(metrics::RegistryCollector::new(registry.clone())))
        .context("registering registry metrics")?;
    let events = if config.event_log_path.is_empty() {
        None
    } else {
        Some(
            event_log::EventLog::open(
                &config.event_log_path,
                config.event_log_max_bytes,
                config.event_log_max_files,
                metrics.event_log_dropped.clone(),
            )
            .with_context(|| format!("cannot open event_log_path {}", config.event_log_path))?,
        )
    };
    let data = kvcm_core::store::DataPlane::new(conn.clone(), &config.namespace, config.limits())
        .with_replica_ack(replica_ack)
        .with_report_settings(config.report_settings());
    metrics
        .registry
        .register(Box::new(metrics::ScrapedCounters::reporter_reads(data.reporter_reads.clone())))
        .context("registering engine reporter metrics")?;
    for family in metrics::ScrapedCounters::read_hints(data.read_hints.clone()) {
        metrics.registry.register(Box::new(family)).context("registering read-hint metrics")?;
    }
    let inflight_kib = config.max_inflight_body_bytes.div_ceil(1024).min(tokio::sync::Semaphore::MAX_PERMITS);
    let health = Arc::new(health::Health::new(
        Duration::from_millis(config.health_check_interval_ms),
        Duration::from_millis(config.valkey_timeout_ms),
    ));
    Ok(AppState::new(state::Shared {
        metrics,
        data,
        events,
        auth: Arc::new(auth::AuthState::new(&config.namespace)),
        config: Arc::new(config),
        registry,
        conn,
        node: Arc::new(node),
        health,
        bodies: Arc::new(tokio::sync::Semaphore::new(inflight_kib)),
        started: std::time::Instant::now(),
        tair_rates: Arc::default(),
        faults: kvcm_core::faults::global(),
    }))
}

/// Creates `bootstrap_admin_user` if configured and missing. The password comes from
/// `bootstrap_admin_password_file` or `KVCM_BOOTSTRAP_ADMIN_PASSWORD`, never from the config.
async fn bootstrap_admin(config: &Config, registry: &Registry) -> anyhow::Result<()> {
    let user = &config.bootstrap_admin_user;
    if user.is_empty() {
        return Ok(());
    }
    let password = if !config.bootstrap_admin_password_file.is_empty() {
        let path = &config.bootstrap_admin_password_file;
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read bootstrap_admin_password_file {path}"))?;
        text.trim_end_matches(['\r', '\n']).to_string()
    } else {
        std::env::var(kvcm_core::config::BOOTSTRAP_PASSWORD_ENV).map_err(|_| {
            anyhow::anyhow!(
                "bootstrap_admin_user is set but no password is given: set bootstrap_admin_password_file or \
                 the environment variable {}",
                kvcm_core::config::BOOTSTRAP_PASSWORD_ENV
            )
        })?
    };
    let created = registry
        .ensure_admin(user, &password, config.min_password_length)
        .await
        .map_err(|e| anyhow::anyhow!("bootstrap admin '{user}': {}", e.public_message()))?;
    if created {
        tracing::info!(%user, "bootstrap admin account created");
    }
    Ok(())
}

/// Fails closed (docs/security.md): meta auth with no credential to pass it, or a listener
/// reachable beyond loopback with no admin in charge, refuse to start. An AWS Lambda function
/// (`lambda_plane` set) is reachable beyond loopback by definition, whatever `bind` says.
fn refuse_unsafe_exposure(config: &Config, snap: &kvcm_core::registry::Snapshot) -> anyhow::Result<()> {
    // Computed now, so the first unknown user costs what every later one does (and a failure of
    // the system's random source stops the start, not a login).
    kvcm_core::auth::init_dummy_hash().context("cannot prepare password checks")?;
    let on_loopback = |addr: &str| addr.parse::<std::net::IpAddr>().is_ok_and(|a| a.is_loopback());
    if config.meta_auth && !snap.has_credentials() {
        anyhow::bail!(
            "meta_auth = true but no account or API key exists, so no engine could ever pass: set \
             bootstrap_admin_user (and KVCM_BOOTSTRAP_ADMIN_PASSWORD or bootstrap_admin_password_file) to \
             create the first admin, then create engine API keys with createApiKey"
        );
    }
    // Either listener beyond loopback, or a Lambda function (it binds no listener and is reachable
    // from wherever its trigger is): whoever reaches it must find an admin in charge.
    let exposed = match config.lambda_plane {
        Some(plane) => {
            Some(format!("serve the {} plane as an AWS Lambda function (reachable beyond loopback)", plane.name()))
        }
        None => [config.bind.as_str(), config.admin_bind()]
            .into_iter()
            .find(|a| !on_loopback(a))
            .map(|a| format!("listen on {a} (not loopback)")),
    };
    if let Some(what) = exposed
        && !snap.has_admin()
        && !config.allow_anonymous_admin
    {
        anyhow::bail!(
            "kvcm-api would {what} with no admin account or admin API key: set \
             bootstrap_admin_user (and KVCM_BOOTSTRAP_ADMIN_PASSWORD or bootstrap_admin_password_file), listen \
             on loopback only, or accept an admin plane open to whoever reaches it with \
             allow_anonymous_admin = true"
        );
    }
    let meta_exposed = match config.lambda_plane {
        Some(plane) => plane == LambdaPlane::Meta,
        None => !on_loopback(&config.bind),
    };
    if meta_exposed && !config.meta_auth {
        tracing::warn!(
            bind = %config.bind,
            lambda_plane = config.lambda_plane.map(|p| p.name()),
            "the meta plane serves beyond loopback without authentication (meta_auth = false): any host \
             that reaches it can read and change every instance's cache metadata"
        );
    }
    Ok(())
}

/// An RPC's name in Tair's spelling (`getCacheLocation` → `GetCacheLocation`): how gRPC methods,
/// Tair's metric tags (`api_name`) and the debug service's fault targets name what HTTP serves
/// at `/api/getCacheLocation`.
pub fn tair_rpc_name(rpc: &str) -> String {
    let mut chars = rpc.chars();
    chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
}

/// The reverse of [`tair_rpc_name`]: the `/api/<rpc>` name of a Tair method.
pub fn http_rpc_name(method: &str) -> String {
    let mut chars = method.chars();
    chars.next().map(|c| c.to_ascii_lowercase().to_string() + chars.as_str()).unwrap_or_default()
}

pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Wraps a plane's router with the layer both planes share ([`guard`]: metrics and access log,
/// faults, body budget, panic catching, request deadline), the body limit, and JSON replies for
/// unknown RPCs and wrong methods. Every response kvcm produces — also 404, 405, 408 and 500 —
/// carries the Tair header shape.
pub fn with_common_layers(plane: &'static str, router: Router, state: &AppState) -> Router {
    let guard = Arc::new(guard::Guard {
        plane,
        metrics: state.metrics.clone(),
        deadline: Duration::from_millis(state.config.request_timeout_ms),
        bodies: state.bodies.clone(),
        max_body: state.config.max_body_bytes,
        faults: state.faults,
    });
    router
        .fallback(unknown_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(state.config.max_body_bytes))
        .layer(from_fn(move |req, next| guard::run(guard.clone(), req, next)))
}

async fn unknown_route(uri: Uri) -> Response {
    error_response(
        Http::NOT_FOUND,
        StatusCode::UNSUPPORTED,
        format!("unknown route {}: RPCs are POST /api/<rpcName>", uri.path()),
    )
}

async fn wrong_method(method: axum::http::Method, uri: Uri) -> Response {
    error_response(
        Http::METHOD_NOT_ALLOWED,
        StatusCode::UNSUPPORTED,
        format!("{method} is not served on {}: RPCs are POST /api/<rpcName>", uri.path()),
    )
}

/// `GET /api/healthy`: 200 while the background check finds every Valkey node answering, 503
/// otherwise; never touches Valkey itself (see [`health`]).
pub async fn healthy(State(s): State<AppState>) -> Response {
    health::respond(&s.health)
}

/// The meta-plane router with all layers (what the server's meta listener and the meta plane's
/// Lambda function serve).
pub fn meta_router(state: &AppState) -> Router {
    with_common_layers("meta", meta::router(state.clone()), state)
}

/// The admin-plane router with all layers.
pub fn admin_router(state: &AppState) -> Router {
    with_common_layers("admin", admin::router(state.clone()), state)
}

impl Server {
    /// The meta-plane router with all layers.
    pub fn meta_router(&self) -> Router {
        meta_router(&self.state)
    }

    /// The admin-plane router with all layers.
    pub fn admin_router(&self) -> Router {
        admin_router(&self.state)
    }

    /// Serves both planes, refreshes the registry and checks Valkey's health until `shutdown`
    /// completes; then stops accepting, lets in-flight requests finish (for at most
    /// `request_timeout_ms`, the most any request may take) and their read hints (recency,
    /// `adaptive` hit counts; [`kvcm_core::store::DataPlane::hints_settled`]), and, at once,
    /// writes the event log's queued events ([`event_log::EventLog::sync`]) and sends the hit
    /// counts still pending ([`kvcm_core::store::DataPlane::flush_pending_hits`]); returns. Past
    /// the drain, each step is bounded by `valkey_timeout_ms`.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        let (meta_router, admin_router) = (self.meta_router(), self.admin_router());
        let config = self.state.config.clone();
        let limits = transport::Limits {
            timeouts: transport::Timeouts {
                header_read: Duration::from_millis(config.header_read_timeout_ms),
                idle: Duration::from_millis(config.idle_timeout_ms),
            },
            max_connections: config.max_connections,
            drain_timeout: Duration::from_millis(config.request_timeout_ms),
        };
        let valkey_timeout = Duration::from_millis(config.valkey_timeout_ms);
        // One check before serving, so /api/healthy never answers from an empty state.
        if let Err(e) = self.health.check(&mut self.state.conn.clone(), valkey_timeout).await {
            tracing::warn!(error = %e, "Valkey health check failed: /api/healthy reports UNHEALTHY");
        }
        let (tx, rx) = tokio::sync::watch::channel(false);
        let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|stop| *stop).await;
        };
        let refresher = tokio::spawn(refresh_registry(self.state.clone(), rx.clone()));
        let checker = tokio::spawn(health::keep_checking(
            self.health.clone(),
            self.state.conn.clone(),
            Duration::from_millis(config.health_check_interval_ms),
            valkey_timeout,
            rx.clone(),
        ));
        let grpc = self.grpc.map(|(meta_listener, admin_listener)| {
            let timeout = Duration::from_millis(config.request_timeout_ms);
            let max = config.max_body_bytes;
            let bodies = self.state.bodies.clone();
            let meta =
                grpc::MetaService(grpc::Plane::new(grpc::META_SERVICE, meta_router.clone(), max, bodies.clone()));
            let admin_plane = |service| grpc::Plane::new(service, admin_router.clone(), max, bodies.clone());
            let meta = tonic::service::Routes::new(meta);
            let admin = tonic::service::Routes::new(grpc::AdminService(admin_plane(grpc::ADMIN_SERVICE)))
                .add_service(grpc::DebugService(admin_plane(grpc::DEBUG_SERVICE)));
            let (conns, first) = (config.max_connections, limits.timeouts.header_read);
            [
                tokio::spawn(grpc::serve(meta_listener, meta, timeout, conns, first, wait(rx.clone()))),
                tokio::spawn(grpc::serve(admin_listener, admin, timeout, conns, first, wait(rx.clone()))),
            ]
        });
        let meta_threads = transport::Serving::Threads(self.serving.targets.clone());
        let meta = tokio::spawn(transport::serve("meta", self.meta, meta_threads, limits, wait(rx.clone())));
        let admin_here = transport::Serving::Here(admin_router);
        let admin = tokio::spawn(transport::serve("admin", self.admin, admin_here, limits, wait(rx.clone())));
        shutdown.await;
        tracing::info!("shutting down: draining in-flight requests");
        let _ = tx.send(true);
        meta.await?;
        // Each thread also lets its read hints under way finish, for at most valkey_timeout_ms.
        self.serving.stop(limits.drain_timeout + valkey_timeout + Duration::from_secs(1)).await;
        admin.await?;
        // gRPC drains like HTTP, within request_timeout_ms; a connection still open after that
        // (one that never finished its HTTP/2 handshake, say) does not keep the process alive.
        for served in grpc.into_iter().flatten() {
            let abort = served.abort_handle();
            match tokio::time::timeout(limits.drain_timeout + Duration::from_secs(1), served).await {
                Ok(Ok(Err(e))) => tracing::warn!(error = %e, "a gRPC service stopped with an error"),
                Ok(_) => {}
                Err(_) => {
                    tracing::warn!("gRPC connections still open after the drain timeout: closing them");
                    abort.abort();
                }
            }
        }
        // What answered requests left behind, both at once (each within valkey_timeout_ms):
        // events still queued for the event log's writer thread, and hit counts (HTTP and gRPC
        // reads) waiting for their batch (HIT_FLUSH) — gRPC reads ran on this runtime, so their
        // touches finish first.
        let events = self.state.events.clone();
        let sync_events = async move {
            let Some(events) = events else { return };
            match tokio::task::spawn_blocking(move || events.sync(valkey_timeout)).await {
                Ok(true) => {}
                _ => tracing::warn!("the event log's last events were not all written within {valkey_timeout:?}"),
            }
        };
        let send_hits = async {
            if !self.state.data.hints_settled(valkey_timeout).await {
                tracing::warn!("gRPC reads' hints still being written after {valkey_timeout:?}: their hits are lost");
            }
            match self.state.data.flush_pending_hits(valkey_timeout).await {
                FlushedHits { counted: 0, lost: 0 } => {}
                FlushedHits { counted, lost: 0 } => {
                    tracing::info!(hits = counted, "sent the adaptive hit counts still pending")
                }
                FlushedHits { counted, lost } => tracing::warn!(
                    counted,
                    lost,
                    "adaptive hit counts still pending at shutdown were not all sent (hints: no read is affected)"
                ),
            }
        };
        tokio::join!(sync_events, send_hits);
        refresher.abort();
        checker.abort();
        Ok(())
    }
}

/// Keeps this frontend's registry snapshot fresh and drops the metric series of removed
/// instances, every `registry_refresh_ms`.
async fn refresh_registry(state: AppState, mut stop: tokio::sync::watch::Receiver<bool>) {
    let period = Duration::from_millis(state.config.registry_refresh_ms);
    let failing = AtomicBool::new(false);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        refresh_registry_once(&state, &failing).await;
    }
}

/// One registry refresh (one version GET, a reload if it moved) and metric pruning. `failing`
/// remembers whether the last refresh failed, so Valkey becoming unreachable and recovering are
/// logged once each, not on every refresh. Used by the server's loop and, on demand, by
/// [`lambda`].
pub(crate) async fn refresh_registry_once(state: &AppState, failing: &AtomicBool) {
    let result = state.registry.refresh().await;
    // Every time (cheap: at most max_instance_metric_labels entries), so a request in flight
    // that re-labelled a just-removed instance is pruned again too.
    let snap = state.registry.snapshot();
    state.metrics.retain_instances(|i| snap.instances.contains_key(i));
    match result {
        Ok(_) => {
            if failing.swap(false, Relaxed) {
                tracing::info!("registry refresh works again");
            }
        }
        Err(e) => {
            if !failing.swap(true, Relaxed) {
                tracing::warn!(error = %e, "registry refresh failed; serving the cached registry");
            }
        }
    }
}
