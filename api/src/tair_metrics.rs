//! Tair KVCM's metric names in `getMetrics`, next to kvcm's own, for operators whose dashboards
//! read Tair's: each one is derived from what kvcm already measures (never a second counter on
//! the request path).
//!
//! | Tair name | value | tags | from |
//! |---|---|---|---|
//! | `service.query_counter` | int, requests since start | `api_name` (Tair's spelling: `GetCacheLocation`) | `kvcm_http_requests_total` |
//! | `service.query_rt_us` | float, mean latency (µs) since start | `api_name` | `kvcm_http_request_duration_seconds` |
//! | `service.qps`, `service.error_qps` | float, requests (not `OK`) per second since the previous `getMetrics` of this frontend (since start for the first) | `api_name` | `kvcm_http_requests_total` |
//! | `manager.request_key_count` | int, blocks named by `getCacheLocation` since start | `instance_id` | `kvcm_blocks_requested_total` |
//! | `manager.prefix_match_len` | float, mean matched blocks per `getCacheLocation` | `instance_id` | `kvcm_match_length_blocks` |
//! | `meta_indexer.total_key_count`, `cache_manager_instance.key_count` | int, serving blocks | `instance_group`, `instance_id` | the instance's usage hash |
//! | `cache_manager_instance.byte_size` | int, serving bytes | `instance_group`, `instance_id` | the instance's usage hash |
//! | `cache_manager_group.usage_ratio` | float, serving bytes / `quota.capacity` (groups with a capacity) | `instance_group` | usage, summed |
//! | `data_storage.healthy_status` | int, 1 when available and passing health checks, else 0 | `storage_unique_name` | the registry |
//!
//! Tair's `cache_reclaimer.block_del_count` counts evictions, which kvcm's workers do: it is the
//! worker's `kvcm_worker_evictions_total` on its `/metrics`, not a frontend metric.
//! Per-instance series are bounded like kvcm's own: at most `max_instance_metric_labels`
//! instances are reported (the instance usage reads are one `HGETALL` each, concurrently).

use crate::state::AppState;
use kvcm_core::wire::admin::{MetricValue, MetricsData, MetricsTag};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Instant;

/// Requests and errors per route.
type RouteCounts = HashMap<String, (u64, u64)>;

/// The counts the previous `getMetrics` saw, and when.
#[derive(Debug, Default)]
pub struct RateState(Mutex<Option<(Instant, RouteCounts)>>);

/// Tair's spelling of an RPC served at `route` (`/api/getCacheLocation` → `GetCacheLocation`).
fn api_name(route: &str) -> Option<String> {
    let rpc = route.strip_prefix("/api/")?;
    let mut chars = rpc.chars();
    let first = chars.next()?;
    (rpc != "healthy").then(|| first.to_ascii_uppercase().to_string() + chars.as_str())
}

fn tags(pairs: &[(&str, &str)]) -> Vec<MetricsTag> {
    pairs.iter().map(|(k, v)| MetricsTag { tag_key: k.to_string(), tag_value: v.to_string() }).collect()
}

fn data(name: &str, value: MetricValue, metric_tags: Vec<MetricsTag>) -> MetricsData {
    MetricsData { metric_name: name.to_string(), metric_value: value, metric_tags }
}

fn label<'a>(m: &'a prometheus::proto::Metric, name: &str) -> &'a str {
    m.get_label().iter().find(|l| l.name() == name).map_or("", |l| l.value())
}

/// Every Tair-named metric this frontend can give (module table).
pub async fn tair_metrics(s: &AppState, rates: &RateState) -> Vec<MetricsData> {
    let mut out = Vec::new();
    // Per route: requests, errors, latency sum (s) and count; per instance: keys, match sum/count.
    let mut routes: BTreeMap<String, (u64, u64, f64, u64)> = BTreeMap::new();
    let mut instances: BTreeMap<String, (u64, f64, u64)> = BTreeMap::new();
    for family in s.metrics.registry.gather() {
        for m in family.get_metric() {
            match family.name() {
                "kvcm_http_requests_total" => {
                    let e = routes.entry(label(m, "route").to_string()).or_default();
                    let n = m.get_counter().get_value() as u64;
                    e.0 += n;
                    if label(m, "code") != "OK" {
                        e.1 += n;
                    }
                }
                "kvcm_http_request_duration_seconds" => {
                    let e = routes.entry(label(m, "route").to_string()).or_default();
                    e.2 += m.get_histogram().get_sample_sum();
                    e.3 += m.get_histogram().get_sample_count();
                }
                "kvcm_blocks_requested_total" => {
                    instances.entry(label(m, "instance").to_string()).or_default().0 +=
                        m.get_counter().get_value() as u64;
                }
                "kvcm_match_length_blocks" => {
                    let e = instances.entry(label(m, "instance").to_string()).or_default();
                    e.1 += m.get_histogram().get_sample_sum();
                    e.2 += m.get_histogram().get_sample_count();
                }
                _ => {}
            }
        }
    }

    let now = Instant::now();
    let previous = {
        let mut last = rates.0.lock().unwrap_or_else(|p| p.into_inner());
        let counts = routes.iter().map(|(r, v)| (r.clone(), (v.0, v.1))).collect();
        last.replace((now, counts))
    };
    let (since, before) = match &previous {
        Some((at, counts)) => (now.duration_since(*at), Some(counts)),
        None => (now.duration_since(s.started), None),
    };
    let seconds = since.as_secs_f64().max(1e-3);
    for (route, (requests, errors, latency_sum, latency_count)) in &routes {
        let Some(name) = api_name(route) else { continue };
        let t = || tags(&[("api_name", &name)]);
        out.push(data("service.query_counter", MetricValue::IntValue(*requests as i64), t()));
        if *latency_count > 0 {
            let mean_us = latency_sum / *latency_count as f64 * 1e6;
            out.push(data("service.query_rt_us", MetricValue::FloatValue(mean_us), t()));
        }
        let (r0, e0) = before.and_then(|b| b.get(route)).copied().unwrap_or((0, 0));
        let qps = requests.saturating_sub(r0) as f64 / seconds;
        out.push(data("service.qps", MetricValue::FloatValue(qps), t()));
        out.push(data("service.error_qps", MetricValue::FloatValue(errors.saturating_sub(e0) as f64 / seconds), t()));
    }
    for (instance, (keys, match_sum, match_count)) in &instances {
        let t = || tags(&[("instance_id", instance)]);
        out.push(data("manager.request_key_count", MetricValue::IntValue(*keys as i64), t()));
        if *match_count > 0 {
            out.push(data("manager.prefix_match_len", MetricValue::FloatValue(match_sum / *match_count as f64), t()));
        }
    }

    let snap = s.registry.snapshot();
    for (name, storage) in &snap.storages {
        let healthy = (storage.is_available && storage.is_healthy) as i64;
        out.push(data(
            "data_storage.healthy_status",
            MetricValue::IntValue(healthy),
            tags(&[("storage_unique_name", name)]),
        ));
    }
    let mut ids: Vec<(&str, &str)> =
        snap.instances.values().map(|i| (i.instance_id.as_str(), i.instance_group_name.as_str())).collect();
    ids.sort_unstable();
    ids.truncate(s.config.max_instance_metric_labels);
    let usages = futures::future::join_all(ids.iter().map(|(id, _)| s.data.instance_usage(id))).await;
    let mut group_bytes: BTreeMap<&str, i64> = BTreeMap::new();
    for ((id, group), usage) in ids.iter().zip(usages) {
        let Ok(usage) = usage else { continue }; // Valkey unreachable: the series is left out
        let (bytes, blocks) = usage.values().fold((0, 0), |(b, n), (ub, un)| (b + ub, n + un));
        *group_bytes.entry(group).or_default() += bytes;
        let t = || tags(&[("instance_group", group), ("instance_id", id)]);
        out.push(data("meta_indexer.total_key_count", MetricValue::IntValue(blocks), t()));
        out.push(data("cache_manager_instance.key_count", MetricValue::IntValue(blocks), t()));
        out.push(data("cache_manager_instance.byte_size", MetricValue::IntValue(bytes), t()));
    }
    for (group, bytes) in group_bytes {
        let Some(g) = snap.groups.get(group) else { continue };
        if g.quota.capacity > 0 {
            let ratio = bytes as f64 / g.quota.capacity as f64;
            out.push(data(
                "cache_manager_group.usage_ratio",
                MetricValue::FloatValue(ratio),
                tags(&[("instance_group", group)]),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::api_name;

    #[test]
    fn routes_take_tairs_rpc_spelling() {
        assert_eq!(api_name("/api/getCacheLocation").as_deref(), Some("GetCacheLocation"));
        assert_eq!(api_name("/api/addStorage").as_deref(), Some("AddStorage"));
        assert_eq!(api_name("/api/healthy"), None, "not an RPC");
        assert_eq!(api_name("/metrics"), None);
        assert_eq!(api_name("unmatched"), None);
    }
}
