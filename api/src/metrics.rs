//! Prometheus metrics of the frontend, served as text on `GET /metrics` (admin listener) and as
//! `MetricsData` by the `getMetrics` RPC.
//!
//! Per-route request counters (labelled by plane, route template and wire status code) and
//! latency histograms (by plane and route template) are recorded by [`track`], a middleware on
//! both routers. Route templates come from axum's `MatchedPath`, so label cardinality is bounded
//! by the routes we declare; unmatched paths count as `unmatched`.

use crate::reply::WireCode;
use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use kvcm_core::wire::admin::{MetricValue, MetricsData, MetricsTag};
use prometheus::{Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder};
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct Metrics {
    pub registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    access_log: bool,
}

impl Metrics {
    pub fn new(access_log: bool) -> Arc<Metrics> {
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
        registry.register(Box::new(requests.clone())).expect("unique metric");
        registry.register(Box::new(latency.clone())).expect("unique metric");
        Arc::new(Metrics { registry, requests, latency, access_log })
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

/// Middleware: counts and times every request by route template; writes the access log line.
pub async fn track(plane: &'static str, metrics: Arc<Metrics>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_string());
    let route = route.unwrap_or_else(|| "unmatched".to_string());
    let method = req.method().clone();
    let start = Instant::now();
    let resp = next.run(req).await;
    let elapsed = start.elapsed();
    let code = resp.extensions().get::<WireCode>().map(|c| c.0.name()).unwrap_or("");
    metrics.requests.with_label_values(&[plane, &route, code]).inc();
    metrics.latency.with_label_values(&[plane, &route]).observe(elapsed.as_secs_f64());
    if metrics.access_log {
        tracing::info!(target: "kvcm::access", plane, %method, route, http = resp.status().as_u16(), code,
            micros = elapsed.as_micros() as u64, "request");
    }
    resp
}
