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
//!
//! What a call costs: per-instance usage is reported for the instances kvcm's own series label
//! (those this frontend has served), and group ratios for groups with a `quota.capacity`, from
//! one set of at most `max_instance_metric_labels` instance reads, [`USAGE_READS_IN_FLIGHT`]
//! `HGETALL`s at a time, bounded by `valkey_timeout_ms`: past it, or for a group or instance
//! whose reads fail or did not fit, the series is left out rather than reported wrong —
//! `getMetrics` answers while Valkey is down, with kvcm's names.
//! Rates cover the last completed window of at least [`RATE_WINDOW`] between two calls (the
//! first window starts with the process): calls closer together than that repeat it.

use crate::state::AppState;
use futures::StreamExt;
use kvcm_core::wire::admin::{MetricValue, MetricsData, MetricsTag};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Instance usage reads in flight at once.
pub const USAGE_READS_IN_FLIGHT: usize = 16;
/// The shortest window rates are computed over.
pub const RATE_WINDOW: Duration = Duration::from_secs(1);

/// Requests and errors per route.
type RouteCounts = HashMap<String, (u64, u64)>;

/// Where the current rate window started (its counts and when) and the last completed window's
/// rates per route: (requests/s, errors/s).
#[derive(Debug, Default)]
pub struct RateState(Mutex<Option<Window>>);

#[derive(Debug)]
struct Window {
    started: Instant,
    counts: RouteCounts,
    rates: HashMap<String, (f64, f64)>,
}

impl RateState {
    /// The rates of the last completed window, closing the current one first when it is at
    /// least [`RATE_WINDOW`] long. `counts` must be read under the same lock as the window is
    /// advanced, so that two concurrent calls cannot store counts older than their timestamp.
    fn rates(&self, process_start: Instant, counts: impl FnOnce() -> RouteCounts) -> HashMap<String, (f64, f64)> {
        let mut window = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let (started, before) = match window.as_ref() {
            Some(w) if now.duration_since(w.started) < RATE_WINDOW => return w.rates.clone(),
            Some(w) => (w.started, Some(&w.counts)),
            None => (process_start, None),
        };
        let counts = counts();
        let seconds = now.duration_since(started).as_secs_f64().max(RATE_WINDOW.as_secs_f64());
        let rates = counts
            .iter()
            .map(|(route, &(requests, errors))| {
                let (r0, e0) = before.and_then(|b| b.get(route)).copied().unwrap_or((0, 0));
                let per_s = |n: u64, n0: u64| n.saturating_sub(n0) as f64 / seconds;
                (route.clone(), (per_s(requests, r0), per_s(errors, e0)))
            })
            .collect::<HashMap<_, _>>();
        *window = Some(Window { started: now, counts, rates: rates.clone() });
        rates
    }
}

/// Tair's spelling of an RPC served at `route` (`/api/getCacheLocation` → `GetCacheLocation`).
fn api_name(route: &str) -> Option<String> {
    let rpc = route.strip_prefix("/api/")?;
    (!rpc.is_empty() && rpc != "healthy").then(|| crate::tair_rpc_name(rpc))
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

    let per_second = rates.rates(s.started, || routes.iter().map(|(route, v)| (route.clone(), (v.0, v.1))).collect());
    for (route, (requests, _, latency_sum, latency_count)) in &routes {
        let Some(name) = api_name(route) else { continue };
        let t = || tags(&[("api_name", &name)]);
        out.push(data("service.query_counter", MetricValue::IntValue(*requests as i64), t()));
        if *latency_count > 0 {
            let mean_us = latency_sum / *latency_count as f64 * 1e6;
            out.push(data("service.query_rt_us", MetricValue::FloatValue(mean_us), t()));
        }
        let (qps, error_qps) = per_second.get(route).copied().unwrap_or((0.0, 0.0));
        out.push(data("service.qps", MetricValue::FloatValue(qps), t()));
        out.push(data("service.error_qps", MetricValue::FloatValue(error_qps), t()));
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
    // One bounded set of usage reads serves both the per-instance series (the instances kvcm's
    // own series label) and the group ratios (every instance of each group with a capacity):
    // at most max_instance_metric_labels instances, USAGE_READS_IN_FLIGHT at a time, within
    // valkey_timeout_ms. A group is left out unless all its instances were read.
    let bound = Duration::from_millis(s.config.valkey_timeout_ms);
    let labelled = s.metrics.labelled_instances();
    let mut ids: Vec<&str> =
        labelled.iter().map(String::as_str).filter(|id| snap.instances.contains_key(*id)).collect();
    let capacity_groups: Vec<(&String, i64)> =
        snap.groups.iter().filter(|(_, g)| g.quota.capacity > 0).map(|(n, g)| (n, g.quota.capacity)).collect();
    let mut members: Vec<&str> = snap
        .instances
        .values()
        .filter(|i| capacity_groups.iter().any(|(g, _)| **g == i.instance_group_name))
        .map(|i| i.instance_id.as_str())
        .collect();
    members.sort_unstable();
    for id in members {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids.truncate(s.config.max_instance_metric_labels);
    // The futures are made before they are streamed: a lazily mapped iterator would not be Send.
    let reads: Vec<_> = ids.iter().map(|id| s.data.instance_usage(id)).collect();
    let reads = futures::stream::iter(reads).buffered(USAGE_READS_IN_FLIGHT).collect::<Vec<_>>();
    let usages = tokio::time::timeout(bound, reads).await.unwrap_or_default();
    let read: HashMap<&str, (i64, i64)> = ids
        .iter()
        .zip(usages)
        .filter_map(|(id, usage)| {
            let usage = usage.ok()?;
            Some((*id, usage.values().fold((0, 0), |(b, n), (ub, un)| (b + ub, n + un))))
        })
        .collect();
    for id in &labelled {
        let (Some(&(bytes, blocks)), Some(info)) = (read.get(id.as_str()), snap.instances.get(id)) else { continue };
        let t = || tags(&[("instance_group", &info.instance_group_name), ("instance_id", id)]);
        out.push(data("meta_indexer.total_key_count", MetricValue::IntValue(blocks), t()));
        out.push(data("cache_manager_instance.key_count", MetricValue::IntValue(blocks), t()));
        out.push(data("cache_manager_instance.byte_size", MetricValue::IntValue(bytes), t()));
    }
    for (group, capacity) in capacity_groups {
        let mut bytes = Some(0);
        for i in snap.instances.values().filter(|i| &i.instance_group_name == group) {
            bytes = bytes.zip(read.get(i.instance_id.as_str())).map(|(sum, (b, _))| sum + b);
        }
        let Some(bytes) = bytes else { continue };
        let ratio = bytes as f64 / capacity as f64;
        out.push(data(
            "cache_manager_group.usage_ratio",
            MetricValue::FloatValue(ratio),
            tags(&[("instance_group", group)]),
        ));
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
