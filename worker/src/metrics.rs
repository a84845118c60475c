//! The worker's Prometheus metrics, served on `GET /metrics` of the worker's metrics port:
//! deletions per storage and reason, dead letters, expired sessions, evictions per policy and
//! group, leases taken per instance, reclaim round duration, deletion stream lengths, and usage /
//! quota / ratio gauges per group and storage type.

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use kvcm_core::wire::StorageType;
use kvcm_core::wire::admin::InstanceGroup;
use prometheus::{Encoder, GaugeVec, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry};
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug)]
pub struct Metrics {
    pub registry: Registry,
    pub deletions: IntCounterVec,
    pub dead_letters: IntCounter,
    pub deletion_failures: IntCounterVec,
    pub engine_stream: IntCounterVec,
    pub dead_letters_refused: IntCounter,
    pub sessions_expired: IntCounter,
    pub engine_entries_dropped: IntCounter,
    pub engine_reporters_forgotten: IntCounter,
    pub touch_entries_dropped: IntCounterVec,
    pub evictions: IntCounterVec,
    pub adaptive_steps: IntCounterVec,
    pub leases: IntCounterVec,
    pub reclaim_seconds: Histogram,
    pub stream_length: IntGaugeVec,
    pub stream_pending: IntGaugeVec,
    pub dead_letter_entries: IntGaugeVec,
    pub storage_healthy: IntGaugeVec,
    pub storage_bytes: IntGaugeVec,
    pub usage: GaugeVec,
    pub quota: GaugeVec,
    pub ratio: GaugeVec,
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        let registry = Registry::new();
        let cv = |n: &str, h: &str, l: &[&str]| IntCounterVec::new(Opts::new(n, h), l).expect("metric");
        let gv = |n: &str, h: &str, l: &[&str]| GaugeVec::new(Opts::new(n, h), l).expect("metric");
        let m = Metrics {
            deletions: cv(
                "kvcm_worker_deletions_total",
                "Locations deleted, per storage and reason",
                &["storage", "reason"],
            ),
            engine_stream: cv(
                "kvcm_worker_engine_stream_total",
                "kvcm-worker events: engine event stream happenings (batch applied, gap, replayed, restart, lifecycle started, connected, disconnected)",
                &["what"],
            ),
            deletion_failures: cv(
                "kvcm_worker_deletion_failures_total",
                "Failed deletion attempts (retried with backoff), by kind: timeout (a storage operation past worker.file_op_timeout_ms or on a root with one still blocked: a hung mount) or error",
                &["kind"],
            ),
            dead_letters: IntCounter::new("kvcm_worker_dead_letters_total", "Deletions moved to a dead-letter stream")
                .expect("metric"),
            dead_letters_refused: IntCounter::new(
                "kvcm_worker_dead_letters_refused_total",
                "Deletions that gave up while their instance's dead-letter stream was full (kept queued, retried)",
            )
            .expect("metric"),
            sessions_expired: IntCounter::new(
                "kvcm_worker_sessions_expired_total",
                "Write sessions failed at their deadline",
            )
            .expect("metric"),
            engine_entries_dropped: IntCounter::new(
                "kvcm_worker_engine_entries_dropped_total",
                "Engine-reported entries collected because they can never be visible again",
            )
            .expect("metric"),
            engine_reporters_forgotten: IntCounter::new(
                "kvcm_worker_engine_reporters_forgotten_total",
                "Engine reporters forgotten a cleanup grace after they were unregistered",
            )
            .expect("metric"),
            touch_entries_dropped: cv(
                "kvcm_worker_touch_entries_dropped_total",
                "Read bookkeeping collected because its block no longer serves (a touch that landed after the block went), per index: itouch (interior touches) or icount (LFU counts)",
                &["index"],
            ),
            evictions: cv("kvcm_worker_evictions_total", "Blocks evicted, per policy and group", &["policy", "group"]),
            adaptive_steps: cv(
                "kvcm_worker_adaptive_steps_total",
                "The adaptive policy's learning steps before an instance's eviction round: learned (a new table), not_due (fewer than 2,048 events since the last, or another worker took it) or failed (evictions went on with the stored ranks)",
                &["outcome"],
            ),
            leases: cv("kvcm_worker_leases_total", "Reclaim leases this worker took, per instance", &["instance"]),
            reclaim_seconds: Histogram::with_opts(HistogramOpts::new(
                "kvcm_worker_reclaim_round_seconds",
                "Duration of one reclaim",
            ))
            .expect("metric"),
            stream_length: IntGaugeVec::new(
                Opts::new("kvcm_worker_deletion_stream_length", "Entries in a deletion stream"),
                &["instance"],
            )
            .expect("metric"),
            stream_pending: IntGaugeVec::new(
                Opts::new("kvcm_worker_deletion_pending", "Deletion entries delivered but not yet acknowledged"),
                &["instance"],
            )
            .expect("metric"),
            dead_letter_entries: IntGaugeVec::new(
                Opts::new(
                    "kvcm_worker_dead_letter_entries",
                    "Deletions given up on, waiting in an instance's dead-letter stream for an operator",
                ),
                &["instance"],
            )
            .expect("metric"),
            storage_healthy: IntGaugeVec::new(
                Opts::new("kvcm_storage_healthy", "1 if the storage passed its last health check"),
                &["storage"],
            )
            .expect("metric"),
            storage_bytes: IntGaugeVec::new(
                Opts::new(
                    "kvcm_storage_filesystem_bytes",
                    "Size (kind=\"total\") and space left to writers (kind=\"free\") of a file-like storage's filesystem, from the health check",
                ),
                &["storage", "kind"],
            )
            .expect("metric"),
            usage: gv(
                "kvcm_group_usage_bytes",
                "Serving bytes per group and storage type (\"all\" = total)",
                &["group", "storage_type"],
            ),
            quota: gv(
                "kvcm_group_quota_bytes",
                "Quota per group and storage type (\"all\" = total)",
                &["group", "storage_type"],
            ),
            ratio: gv("kvcm_group_usage_ratio", "Usage / quota per group and storage type", &["group", "storage_type"]),
            registry,
        };
        for c in [
            Box::new(m.deletions.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(m.dead_letters.clone()),
            Box::new(m.dead_letters_refused.clone()),
            Box::new(m.sessions_expired.clone()),
            Box::new(m.engine_entries_dropped.clone()),
            Box::new(m.engine_reporters_forgotten.clone()),
            Box::new(m.touch_entries_dropped.clone()),
            Box::new(m.evictions.clone()),
            Box::new(m.adaptive_steps.clone()),
            Box::new(m.leases.clone()),
            Box::new(m.reclaim_seconds.clone()),
            Box::new(m.stream_length.clone()),
            Box::new(m.storage_healthy.clone()),
            Box::new(m.deletion_failures.clone()),
            Box::new(m.engine_stream.clone()),
            Box::new(m.storage_bytes.clone()),
            Box::new(m.stream_pending.clone()),
            Box::new(m.dead_letter_entries.clone()),
            Box::new(m.usage.clone()),
            Box::new(m.quota.clone()),
            Box::new(m.ratio.clone()),
        ] {
            m.registry.register(c).expect("unique metric");
        }
        Arc::new(m)
    }

    /// Publishes a group's usage, quota and ratio (total and per storage type).
    pub fn publish_usage(&self, group: &InstanceGroup, total: i64, by_type: &HashMap<StorageType, i64>) {
        let set = |ty: &str, used: i64, cap: i64| {
            self.usage.with_label_values(&[&group.name, ty]).set(used as f64);
            self.quota.with_label_values(&[&group.name, ty]).set(cap as f64);
            if cap > 0 {
                self.ratio.with_label_values(&[&group.name, ty]).set(used as f64 / cap as f64);
            }
        };
        set("all", total, group.quota.capacity);
        for q in &group.quota.quota_config {
            set(q.storage_type.name(), by_type.get(&q.storage_type).copied().unwrap_or(0), q.capacity);
        }
    }

    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

pub fn router(m: Arc<Metrics>) -> Router {
    Router::new().route("/metrics", get(|State(m): State<Arc<Metrics>>| async move { m.render() })).with_state(m)
}
