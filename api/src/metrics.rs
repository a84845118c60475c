//! Prometheus metrics of the frontend, served as text on `GET /metrics` (admin listener) and as
//! `MetricsData` by the `getMetrics` RPC.
//!
//! Per-route request counters (labelled by plane, route template and wire status code) and
//! latency histograms (by plane and route template) are recorded by [`Metrics::request`], which
//! the request layer of both routers calls ([`crate::guard`]). Route templates come from axum's `MatchedPath`, so label cardinality is bounded
//! by the routes we declare; unmatched paths count as `unmatched`.
//!
//! Per-instance series are bounded too: only registered instances are ever labelled (handlers
//! record after resolving the instance), at most `max_instance_metric_labels` of them (later
//! ones count as `{other}`), and [`Metrics::retain_instances`] drops the series of instances that
//! were removed.

use crate::reply::WireCode;
use axum::response::Response;
use kvcm_core::wire::admin::{MetricValue, MetricsData, MetricsTag};
use prometheus::{Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder};
use std::collections::HashSet;
use std::sync::{Arc, RwLock};

/// The instance label of instances past the cap (braces: no instance id can be this).
pub const OTHER_INSTANCES: &str = "{other}";

#[derive(Debug, Clone)]
pub struct Metrics {
    pub registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    access_log: bool,
    blocks_requested: IntCounterVec,
    blocks_hit: IntCounterVec,
    blocks_written: IntCounterVec,
    prefix_len: HistogramVec,
    data_ops: HistogramVec,
    auth: IntCounterVec,
    password_checks: prometheus::IntCounter,
    pub event_log_dropped: prometheus::IntCounter,
    /// Engine-reported blocks a reportEvent batch stored as the frontend prepared them.
    pub engine_blocks_prepared: prometheus::IntCounter,
    /// Instances with their own label, and the cap.
    labelled: Arc<RwLock<HashSet<String>>>,
    max_labelled: usize,
}

impl Metrics {
    pub fn new(access_log: bool, max_labelled: usize) -> Arc<Metrics> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new("kvcm_http_requests_total", "HTTP requests by plane, route template and wire status code"),
            &["plane", "route", "code"],
        )
        .expect("valid metric");
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "kvcm_http_request_duration_seconds",
                "HTTP request latency by plane and route template",
            )
            .buckets(vec![0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5]),
            &["plane", "route"],
        )
        .expect("valid metric");
        let blocks_requested = IntCounterVec::new(
            Opts::new("kvcm_blocks_requested_total", "Blocks named by getCacheLocation, per instance"),
            &["instance"],
        )
        .expect("valid metric");
        let blocks_hit = IntCounterVec::new(
            Opts::new("kvcm_blocks_hit_total", "Blocks of getCacheLocation that had a serving location, per instance"),
            &["instance"],
        )
        .expect("valid metric");
        let blocks_written = IntCounterVec::new(
            Opts::new(
                "kvcm_blocks_write_started_total",
                "New writing locations handed out by startWriteCache, per instance",
            ),
            &["instance"],
        )
        .expect("valid metric");
        let prefix_len = HistogramVec::new(
            HistogramOpts::new(
                "kvcm_match_length_blocks",
                "Blocks matched per getCacheLocation (prefix length or window)",
            )
            .buckets(vec![0.0, 1.0, 4.0, 16.0, 64.0, 128.0, 256.0, 1024.0, 4096.0]),
            &["instance"],
        )
        .expect("valid metric");
        let data_ops = HistogramVec::new(
            HistogramOpts::new(
                "kvcm_valkey_op_duration_seconds",
                "Latency of data-plane operations (their Valkey calls and rendering their locations), per operation",
            )
            .buckets(vec![0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25]),
            &["op"],
        )
        .expect("valid metric");
        let auth = IntCounterVec::new(
            Opts::new(
                "kvcm_auth_total",
                "Authentication outcomes by plane: ok, denied, backoff (HTTP 429), unavailable",
            ),
            &["plane", "result"],
        )
        .expect("valid metric");
        let password_checks = prometheus::IntCounter::new(
            "kvcm_auth_password_checks_total",
            "Argon2 password verifications run (unknown users included: they cost the same)",
        )
        .expect("valid metric");
        let engine_blocks_prepared = prometheus::IntCounter::new(
            "kvcm_engine_blocks_prepared_total",
            "Engine-reported blocks a reportEvent batch stored as this frontend prepared them, without the single-add path",
        )
        .expect("valid metric");
        let event_log_dropped = prometheus::IntCounter::new(
            "kvcm_event_log_dropped_total",
            "Events dropped because the event log fell behind",
        )
        .expect("valid metric");
        for m in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(latency.clone()),
            Box::new(blocks_requested.clone()),
            Box::new(blocks_hit.clone()),
            Box::new(blocks_written.clone()),
            Box::new(prefix_len.clone()),
            Box::new(data_ops.clone()),
            Box::new(auth.clone()),
            Box::new(password_checks.clone()),
            Box::new(event_log_dropped.clone()),
            Box::new(engine_blocks_prepared.clone()),
        ] {
            registry.register(m).expect("unique metric");
        }
        Arc::new(Metrics {
            registry,
            requests,
            latency,
            access_log,
            blocks_requested,
            blocks_hit,
            blocks_written,
            prefix_len,
            data_ops,
            auth,
            password_checks,
            event_log_dropped,
            engine_blocks_prepared,
            labelled: Arc::default(),
            max_labelled,
        })
    }

    /// The label of a (registered) instance: its id while under the cap, else `{other}`.
    fn instance_label<'a>(&self, instance: &'a str) -> &'a str {
        {
            let labelled = self.labelled.read().unwrap_or_else(|p| p.into_inner());
            if labelled.contains(instance) {
                return instance;
            }
            // Past the cap, instances stay `{other}` without taking the write lock.
            if labelled.len() >= self.max_labelled {
                return OTHER_INSTANCES;
            }
        }
        let mut labelled = self.labelled.write().unwrap_or_else(|p| p.into_inner());
        if labelled.contains(instance) || labelled.len() < self.max_labelled {
            labelled.insert(instance.to_string());
            return instance;
        }
        OTHER_INSTANCES
    }

    /// The instances that have series of their own (at most `max_instance_metric_labels`).
    pub fn labelled_instances(&self) -> Vec<String> {
        let mut all: Vec<String> = self.labelled.read().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect();
        all.sort_unstable();
        all
    }

    /// Drops the series of labelled instances for which `registered` is false (removed ones),
    /// making room under the cap.
    pub fn retain_instances(&self, registered: impl Fn(&str) -> bool) {
        let mut labelled = self.labelled.write().unwrap_or_else(|p| p.into_inner());
        labelled.retain(|instance| {
            if registered(instance) {
                return true;
            }
            for vec in [&self.blocks_requested, &self.blocks_hit, &self.blocks_written] {
                let _ = vec.remove_label_values(&[instance]);
            }
            let _ = self.prefix_len.remove_label_values(&[instance]);
            false
        });
    }

    /// Records one lookup of an instance.
    pub fn lookup(&self, instance: &str, requested: usize, hits: usize, matched: usize) {
        let instance = self.instance_label(instance);
        self.blocks_requested.with_label_values(&[instance]).inc_by(requested as u64);
        self.blocks_hit.with_label_values(&[instance]).inc_by(hits as u64);
        self.prefix_len.with_label_values(&[instance]).observe(matched as f64);
    }

    /// Records new writing locations of an instance.
    pub fn written(&self, instance: &str, n: usize) {
        let instance = self.instance_label(instance);
        self.blocks_written.with_label_values(&[instance]).inc_by(n as u64);
    }

    /// Records an authentication outcome.
    pub fn auth(&self, plane: &str, result: &str) {
        self.auth.with_label_values(&[plane, result]).inc();
    }

    /// Records one Argon2 verification.
    pub fn password_check(&self) {
        self.password_checks.inc();
    }

    /// Records the latency of one data-plane operation: its Valkey calls and rendering its
    /// locations (`hmget_blocks` is a getCacheLocation read, reply JSON included).
    pub fn data_op(&self, op: &str, elapsed: std::time::Duration) {
        self.data_ops.with_label_values(&[op]).observe(elapsed.as_secs_f64());
    }

    /// Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }

    /// Every metric as Tair KVCM `MetricsData`: counters as ints, gauges as floats, histograms as
    /// `<name>_count` and `<name>_sum`.
    pub fn as_metrics_data(&self) -> Vec<MetricsData> {
        let mut out = Vec::new();
        for family in self.registry.gather() {
            let name = family.name();
            for m in family.get_metric() {
                let tags: Vec<MetricsTag> = m
                    .get_label()
                    .iter()
                    .map(|l| MetricsTag { tag_key: l.name().to_string(), tag_value: l.value().to_string() })
                    .collect();
                let mut push = |metric_name: String, metric_value: MetricValue| {
                    out.push(MetricsData { metric_name, metric_value, metric_tags: tags.clone() })
                };
                match family.get_field_type() {
                    prometheus::proto::MetricType::COUNTER => {
                        push(name.to_string(), MetricValue::IntValue(m.get_counter().get_value() as i64))
                    }
                    prometheus::proto::MetricType::GAUGE => {
                        push(name.to_string(), MetricValue::FloatValue(m.get_gauge().get_value()))
                    }
                    prometheus::proto::MetricType::HISTOGRAM => {
                        let h = m.get_histogram();
                        push(format!("{name}_count"), MetricValue::IntValue(h.get_sample_count() as i64));
                        push(format!("{name}_sum"), MetricValue::FloatValue(h.get_sample_sum()));
                    }
                    _ => {}
                }
            }
        }
        out
    }
}

/// Exposes a registry client's Valkey traffic: `kvcm_registry_checks_total` (version GETs) and
/// `kvcm_registry_reloads_total` (full snapshot reads). Both stay flat under floods of requests
/// naming unknown instances, groups or API keys (see `core/src/registry`).
pub struct RegistryCollector {
    registry: Arc<kvcm_core::registry::Registry>,
    descs: Vec<prometheus::core::Desc>,
}

impl RegistryCollector {
    pub fn new(registry: Arc<kvcm_core::registry::Registry>) -> Self {
        let desc = |name: &str, help: &str| {
            prometheus::core::Desc::new(name.into(), help.into(), vec![], Default::default()).expect("valid metric")
        };
        let descs = vec![
            desc("kvcm_registry_checks_total", "Registry version checks sent to Valkey"),
            desc("kvcm_registry_reloads_total", "Full registry reloads sent to Valkey"),
        ];
        RegistryCollector { registry, descs }
    }
}

impl prometheus::core::Collector for RegistryCollector {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let (checks, reloads) = self.registry.stats();
        [(&self.descs[0], checks), (&self.descs[1], reloads)]
            .into_iter()
            .map(|(desc, v)| {
                let mut counter = prometheus::proto::Counter::default();
                counter.set_value(v as f64);
                let mut m = prometheus::proto::Metric::default();
                m.set_counter(counter);
                let mut family = prometheus::proto::MetricFamily::default();
                family.set_name(desc.fq_name.clone());
                family.set_help(desc.help.clone());
                family.set_field_type(prometheus::proto::MetricType::COUNTER);
                family.mut_metric().push(m);
                family
            })
            .collect()
    }
}

/// Counters kept elsewhere (atomics of the data plane, a runtime's own metrics), read at scrape
/// time as one family with one label: `read` gives each series' label value and count.
pub struct ScrapedCounters {
    desc: prometheus::core::Desc,
    label: &'static str,
    read: Box<dyn Fn() -> Vec<(String, f64)> + Send + Sync>,
}

impl ScrapedCounters {
    pub fn new(
        name: &str,
        help: &str,
        label: &'static str,
        read: impl Fn() -> Vec<(String, f64)> + Send + Sync + 'static,
    ) -> ScrapedCounters {
        let desc = prometheus::core::Desc::new(name.into(), help.into(), vec![label.into()], Default::default())
            .expect("valid metric");
        ScrapedCounters { desc, label, read: Box::new(read) }
    }

    /// How this frontend's reads of engine-reported tiers got each instance's reporters
    /// (`kvcm_engine_reporter_reads_total{source="cached"|"read"}`, from the data plane's
    /// counters).
    pub fn reporter_reads(reads: Arc<kvcm_core::store::report_event::ReporterReads>) -> ScrapedCounters {
        use std::sync::atomic::Ordering::Relaxed;
        ScrapedCounters::new(
            "kvcm_engine_reporter_reads_total",
            "Reads of engine-reported tiers by where the instance's reporters came from: this frontend's copy (cached) or Valkey (read)",
            "source",
            move || {
                vec![
                    ("cached".into(), reads.cached.load(Relaxed) as f64),
                    ("read".into(), reads.read.load(Relaxed) as f64),
                ]
            },
        )
    }

    /// How this frontend's read hints fared, two families: recency updates and batches of
    /// `adaptive` hit counts that failed (`kvcm_read_hint_failures_total{hint}`), and `adaptive`
    /// hits counted in Valkey or lost (`kvcm_adaptive_hits_total{outcome}`).
    pub fn read_hints(hints: Arc<kvcm_core::store::get_cache_location::ReadHints>) -> [ScrapedCounters; 2] {
        use std::sync::atomic::Ordering::Relaxed;
        let failures = hints.clone();
        [
            ScrapedCounters::new(
                "kvcm_read_hint_failures_total",
                "Hints sent after a read was answered that failed: recency updates (recency) and batches of adaptive hit counts (hit_counts)",
                "hint",
                move || {
                    vec![
                        ("recency".into(), failures.recency_failed.load(Relaxed) as f64),
                        ("hit_counts".into(), failures.hit_batches_failed.load(Relaxed) as f64),
                    ]
                },
            ),
            ScrapedCounters::new(
                "kvcm_adaptive_hits_total",
                "Hits of adaptive groups' reads whose counts reached Valkey (counted), or whose batch failed or was dropped unanswered (lost)",
                "outcome",
                move || {
                    vec![
                        ("counted".into(), hints.hits_counted.load(Relaxed) as f64),
                        ("lost".into(), hints.hits_lost.load(Relaxed) as f64),
                    ]
                },
            ),
        ]
    }
}

impl prometheus::core::Collector for ScrapedCounters {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        vec![counter_family(&self.desc, self.label, (self.read)())]
    }
}

/// A counter family of `desc`, one series per (value of the label `label`, count).
fn counter_family(
    desc: &prometheus::core::Desc,
    label: &str,
    series: impl IntoIterator<Item = (String, f64)>,
) -> prometheus::proto::MetricFamily {
    let mut family = prometheus::proto::MetricFamily::default();
    family.set_name(desc.fq_name.clone());
    family.set_help(desc.help.clone());
    family.set_field_type(prometheus::proto::MetricType::COUNTER);
    for (value, count) in series {
        let mut counter = prometheus::proto::Counter::default();
        counter.set_value(count);
        let mut pair = prometheus::proto::LabelPair::default();
        pair.set_name(label.into());
        pair.set_value(value);
        let mut m = prometheus::proto::Metric::default();
        m.set_label(vec![pair]);
        m.set_counter(counter);
        family.mut_metric().push(m);
    }
    family
}

impl Metrics {
    /// Counts and times one request by route template (`None`: no route matched) and writes its
    /// access log line (`method`: the request's, when the access log is on).
    pub fn request(
        &self,
        plane: &'static str,
        route: Option<&str>,
        method: Option<&axum::http::Method>,
        resp: &Response,
        elapsed: std::time::Duration,
    ) {
        let route = route.unwrap_or("unmatched");
        let code = resp.extensions().get::<WireCode>().map(|c| c.0.name()).unwrap_or("");
        self.requests.with_label_values(&[plane, route, code]).inc();
        self.latency.with_label_values(&[plane, route]).observe(elapsed.as_secs_f64());
        if let Some(method) = method.filter(|_| self.access_log) {
            tracing::info!(target: "kvcm::access", plane, %method, route, http = resp.status().as_u16(), code,
                micros = elapsed.as_micros() as u64, "request");
        }
    }

    /// Whether each request writes an access log line.
    pub fn access_log(&self) -> bool {
        self.access_log
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_labels_are_capped_and_removed_instances_dropped() {
        let m = Metrics::new(false, 2);
        m.lookup("a", 1, 1, 1);
        m.lookup("b", 1, 1, 1);
        m.written("c", 3);
        let text = m.render();
        assert!(text.contains(r#"instance="a""#) && text.contains(r#"instance="b""#), "{text}");
        assert!(!text.contains(r#"instance="c""#) && text.contains(r#"instance="{other}""#), "{text}");
        m.retain_instances(|i| i != "a");
        let text = m.render();
        assert!(!text.contains(r#"instance="a""#), "{text}");
        m.written("c", 1);
        assert!(m.render().contains(r#"kvcm_blocks_write_started_total{instance="c"} 1"#), "room was made");
    }
}
