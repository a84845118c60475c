//! `AppState`: what every handler shares — the registry, the Valkey connection, metrics, config,
//! this node's identity and its health state. Cheap to clone: one reference count (axum clones the
//! state for every extractor and middleware of every request; a struct of a dozen `Arc`s and two
//! connection handles cost ~3% of a loaded frontend's CPU in clones and drops).

use crate::auth::AuthState;
use crate::event_log::EventLog;
use crate::metrics::Metrics;
use kvcm_core::config::Config;
use kvcm_core::registry::Registry;
use kvcm_core::store::DataPlane;
use redis::cluster_async::ClusterConnection;
use std::sync::Arc;

#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> AppState {
        AppState(Arc::new(shared))
    }
}

impl AppState {
    /// This state on another connection to the same cluster (handlers' and the data plane's);
    /// everything else is shared. A serving thread's state: the data plane's Valkey traffic
    /// then runs on the thread that serves the request (`crate::serving`).
    pub fn with_connection(&self, conn: ClusterConnection) -> AppState {
        let s = &self.0;
        AppState::new(Shared {
            config: s.config.clone(),
            registry: s.registry.clone(),
            data: s.data.with_connection(conn.clone()),
            conn,
            metrics: s.metrics.clone(),
            auth: s.auth.clone(),
            node: s.node.clone(),
            events: s.events.clone(),
            health: s.health.clone(),
            bodies: s.bodies.clone(),
            started: s.started,
            tair_rates: s.tair_rates.clone(),
            faults: s.faults,
        })
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`AppState`] shares.
pub struct Shared {
    pub config: Arc<Config>,
    pub registry: Arc<Registry>,
    pub conn: ClusterConnection,
    pub metrics: Arc<Metrics>,
    pub auth: Arc<AuthState>,
    pub node: Arc<Node>,
    pub data: DataPlane,
    pub events: Option<EventLog>,
    /// Valkey reachability as last checked in the background (what `/api/healthy` answers).
    pub health: Arc<crate::health::Health>,
    /// The frontend's budget of request-body bytes in flight, in KiB (`max_inflight_body_bytes`).
    pub bodies: Arc<tokio::sync::Semaphore>,
    /// When this state was built (the process started serving).
    pub started: std::time::Instant,
    /// What the previous `getMetrics` counted, for Tair's per-second rates.
    pub tair_rates: Arc<crate::tair_metrics::RateState>,
    /// Faults injected by the debug service (`debug_faults`): the process's.
    pub faults: &'static kvcm_core::faults::Faults,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState").field("node", &self.node).finish()
    }
}

/// This frontend's identity and addresses, for getManagerClusterInfo.
#[derive(Debug, Clone)]
pub struct Node {
    pub id: String,
    pub host: String,
    pub meta_port: u16,
    pub admin_port: u16,
    /// Tair's gRPC services' ports (0: not served).
    pub grpc_meta_port: u16,
    pub grpc_admin_port: u16,
}
