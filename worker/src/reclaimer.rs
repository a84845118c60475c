//! Reclaimer and usage aggregator. Every `reclaim_interval_ms`, for each instance group:
//! sums its instances' usage (published as gauges), and when the total passes
//! `trigger_strategy.used_percentage` of `quota.capacity` (or `used_size`), or one storage
//! type passes that fraction of its `quota_config` capacity, evicts serving leaves by the
//! group's `reclaim_policy` until usage is back under the watermark — only from storages of the
//! over-quota type when only that type is over.
//!
//! Each instance is reclaimed under a fenced lease (`lease_acquire.lua`): two workers never
//! evict the same instance at once, and a worker that lost its lease is refused by the evict
//! script. Evictions run `evict_batch` leaves per script call, so no call holds Valkey long.
//! Policies: POLICY_LRU (and unspecified) — least recently used leaf first, which is leaf-aware
//! LRU (suffixes go before their prefixes); POLICY_LFU — least frequently used leaf first;
//! POLICY_TTL — leaves not accessed for `ttl_s` first, then LRU; POLICY_ADAPTIVE (kvcm's own) —
//! the leaf of lowest learned hit density among 32 sampled (lua/evict.lua, docs/worker.md).

use crate::Worker;
use kvcm_core::backend;
use kvcm_core::registry::Snapshot;
use kvcm_core::store::maintenance::EvictIndex;
use kvcm_core::wire::StorageType;
use kvcm_core::wire::admin::{InstanceGroup, ReclaimPolicy};
use std::collections::HashMap;
use std::time::Instant;

/// Leaves per evict call by `adaptive`, whose every eviction samples 32 leaves and reads their
/// records (docs/benchmarks.md has the cost of a call).
const ADAPTIVE_BATCH: usize = 4;

/// One round over every group; one group's failure does not starve the others.
pub async fn run_once(w: &Worker) -> anyhow::Result<()> {
    let snap = w.registry.snapshot();
    let mut first_error = None;
    for group in snap.groups.values() {
        if let Err(e) = reclaim_group(w, &snap, group).await {
            tracing::warn!(group = %group.name, error = %e, "reclaim failed");
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Usage of one instance: bytes per storage id.
type InstanceUsage = HashMap<u16, (i64, i64)>;

/// The watermark of a capacity: the lower of `used_percentage × capacity` and `used_size`.
fn watermark(group: &InstanceGroup, capacity: i64) -> Option<i64> {
    let t = &group.cache_config.reclaim_strategy.trigger_strategy;
    let by_pct = (capacity > 0 && t.used_percentage > 0.0).then_some((t.used_percentage * capacity as f64) as i64);
    let by_size = (t.used_size > 0).then_some(t.used_size);
    match (by_pct, by_size) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// One group: publish usage, and reclaim what is over its watermarks, under the group's lease
/// (so two workers never both evict the same excess). Returns bytes freed.
pub async fn reclaim_group(w: &Worker, snap: &Snapshot, group: &InstanceGroup) -> anyhow::Result<i64> {
    let (total, by_type, _) = group_usage(w, snap, group).await?;
    w.metrics.publish_usage(group, total, &by_type);
    if over_watermarks(group, total, &by_type).is_empty() {
        return Ok(0);
    }
    let Some(lease) = w.data.group_lease_acquire(&group.name, &w.id, w.config.worker.lease_ms).await? else {
        return Ok(0); // another worker is reclaiming this group
    };
    let result = reclaim_group_leased(w, snap, group, &lease).await;
    w.data.group_lease_release(&group.name, &lease).await?;
    result
}

/// The excess per scope: `None` = the group's total, `Some(type)` = one storage type.
fn over_watermarks(
    group: &InstanceGroup,
    total: i64,
    by_type: &HashMap<StorageType, i64>,
) -> Vec<(Option<StorageType>, i64)> {
    let mut out = Vec::new();
    if let Some(wm) = watermark(group, group.quota.capacity)
        && total > wm
    {
        out.push((None, total - wm));
    }
    for q in &group.quota.quota_config {
        let used = by_type.get(&q.storage_type).copied().unwrap_or(0);
        if let Some(wm) = watermark(group, q.capacity)
            && q.capacity > 0
            && used > wm
        {
            out.push((Some(q.storage_type), used - wm));
        }
    }
    out
}

/// The group's usage: total bytes, bytes per storage type, and per instance per storage id.
async fn group_usage<'a>(
    w: &Worker,
    snap: &'a Snapshot,
    group: &InstanceGroup,
) -> anyhow::Result<(i64, HashMap<StorageType, i64>, Vec<(&'a str, InstanceUsage)>)> {
    let instances: Vec<&str> = snap
        .instances
        .values()
        .filter(|i| i.instance_group_name == group.name)
        .map(|i| i.instance_id.as_str())
        .collect();
    let mut usage: Vec<(&'a str, InstanceUsage)> = Vec::with_capacity(instances.len());
    for id in &instances {
        usage.push((id, w.data.instance_usage(id).await?));
    }
    let type_of = |sid: u16| kvcm_core::store::storage_of(snap, sid).map(backend::storage_type);
    let total: i64 = usage.iter().flat_map(|(_, u)| u.values()).map(|(b, _)| b).sum();
    let mut by_type: HashMap<StorageType, i64> = HashMap::new();
    for (_, u) in &usage {
        for (sid, (b, _)) in u {
            if let Some(t) = type_of(*sid) {
                *by_type.entry(t).or_default() += b;
            }
        }
    }
    Ok((total, by_type, usage))
}

/// Under the group lease: usage read again (another worker may just have reclaimed), then one
/// excess evicted at a time, usage read again after each. Evicting for one scope also lowers
/// the others (bytes of an over-quota storage type count in the group's total too), so the
/// excesses are never evicted as if independent — that evicted a group over both its total and
/// a type quota up to twice what it should. A storage type's excess goes first (it can only be
/// freed on that type; the total's can be freed anywhere), the largest first.
async fn reclaim_group_leased(
    w: &Worker,
    snap: &Snapshot,
    group: &InstanceGroup,
    group_lease: &str,
) -> anyhow::Result<i64> {
    let mut freed = 0;
    // Scopes that freed nothing this round (no leaves there, a lease lost): left for the next.
    let mut stuck: Vec<Option<StorageType>> = Vec::new();
    // Each scope is reclaimed at most once per round: one pass per scope.
    for _ in 0..=group.quota.quota_config.len() {
        let (total, by_type, usage) = group_usage(w, snap, group).await?;
        let mut over: Vec<_> =
            over_watermarks(group, total, &by_type).into_iter().filter(|(scope, _)| !stuck.contains(scope)).collect();
        over.sort_by_key(|(scope, need)| (scope.is_none(), -need));
        let Some(&(scope, need)) = over.first() else { break };
        let bytes = reclaim(w, snap, group, group_lease, &usage, need, scope).await?;
        freed += bytes;
        if bytes == 0 {
            stuck.push(scope);
        }
    }
    Ok(freed)
}

/// Evicts at least `need` bytes from the group's instances (largest first), optionally only
/// from storages of one type.
#[allow(clippy::too_many_arguments, reason = "the round's context, one argument each")]
async fn reclaim(
    w: &Worker,
    snap: &Snapshot,
    group: &InstanceGroup,
    group_lease: &str,
    usage: &[(&str, InstanceUsage)],
    need: i64,
    only_type: Option<StorageType>,
) -> anyhow::Result<i64> {
    let started = Instant::now();
    let policy = group.cache_config.reclaim_strategy.reclaim_policy;
    let mut order: Vec<&(&str, InstanceUsage)> = usage.iter().collect();
    order.sort_by_key(|(_, u)| -u.values().map(|(b, _)| b).sum::<i64>());
    let mut freed = 0;
    for (instance, per_storage) in order {
        let storages: Vec<Option<u16>> = match only_type {
            None => vec![None],
            Some(t) => per_storage
                .keys()
                .filter(|sid| kvcm_core::store::storage_of(snap, **sid).map(backend::storage_type) == Some(t))
                .map(|s| Some(*s))
                .collect(),
        };
        let Some(inst) = snap.instances.get(*instance) else { continue };
        let sizes = backend::group_sizes(inst);
        // The group's lease is renewed before each instance, so a round longer than `lease_ms`
        // never lets a second worker start evicting the same excess; losing it ends the round.
        let renewed = w.data.group_lease_acquire(&group.name, &w.id, w.config.worker.lease_ms).await?;
        if renewed.as_deref() != Some(group_lease) {
            tracing::warn!(group = %group.name, "group reclaim lease lost mid-round; stopping");
            break;
        }
        let Some(lease) = w.data.lease_acquire(instance, &w.id, w.config.worker.lease_ms).await? else {
            continue; // another worker is reclaiming this instance
        };
        w.metrics.leases.with_label_values(&[instance]).inc();
        let outcome = evict_instance(w, instance, &sizes, policy, &storages, &lease, need - freed, &group.name).await;
        w.data.lease_release(instance, &lease).await?;
        let (bytes, lost) = outcome?;
        freed += bytes;
        if lost {
            tracing::warn!(%instance, "reclaim lease lost mid-eviction; moving on");
        }
        if freed >= need {
            break;
        }
    }
    w.metrics.reclaim_seconds.observe(started.elapsed().as_secs_f64());
    tracing::info!(group = %group.name, need, freed, "reclaimed");
    Ok(freed)
}

#[allow(clippy::too_many_arguments, reason = "the eviction's whole context")]
/// Evicts up to `need` bytes from one leased instance. Returns the bytes freed and whether the
/// lease was lost on the way.
async fn evict_instance(
    w: &Worker,
    instance: &str,
    sizes: &[i64],
    policy: ReclaimPolicy,
    storages: &[Option<u16>],
    lease: &str,
    need: i64,
    group: &str,
) -> anyhow::Result<(i64, bool)> {
    let mut freed = 0;
    for storage in storages {
        let ttl_cutoff = kvcm_core::store::now_ms().saturating_sub(w.config.worker.ttl_s.saturating_mul(1000));
        let passes: Vec<(EvictIndex, Option<u64>)> = match policy {
            ReclaimPolicy::POLICY_LFU => vec![(EvictIndex::Lfu, None)],
            ReclaimPolicy::POLICY_ADAPTIVE => {
                // The ranks evictions compare follow what was counted since the last round. A
                // step that fails is retried next round; evictions go on with the stored ranks.
                let outcome = match w.data.adaptive_learn(instance).await {
                    Ok(0) => "not_due",
                    Ok(_) => "learned",
                    Err(e) => {
                        tracing::warn!(%instance, error = %e, "adaptive learning step failed");
                        "failed"
                    }
                };
                w.metrics.adaptive_steps.with_label_values(&[outcome]).inc();
                vec![(EvictIndex::Adaptive, None)]
            }
            ReclaimPolicy::POLICY_TTL => vec![(EvictIndex::Lru, Some(ttl_cutoff)), (EvictIndex::Lru, None)],
            _ => vec![(EvictIndex::Lru, None)],
        };
        for (index, before) in passes {
            let mut offset = 0;
            while freed < need {
                // Renew the lease between batches; losing it stops this worker at once.
                if w.data.lease_acquire(instance, &w.id, w.config.worker.lease_ms).await?.as_deref() != Some(lease) {
                    return Ok((freed, true));
                }
                let r = match w
                    .data
                    .evict(
                        instance,
                        sizes,
                        index,
                        // A sampled eviction reads SAMPLES records: fewer per call keep it ~1 ms.
                        if index == EvictIndex::Adaptive {
                            w.config.worker.evict_batch.min(ADAPTIVE_BATCH)
                        } else {
                            w.config.worker.evict_batch
                        },
                        before,
                        *storage,
                        lease,
                        need - freed,
                        offset,
                    )
                    .await
                {
                    Ok(Some(r)) => r,
                    Ok(None) => return Ok((freed, true)), // lease lost
                    Err(e) => return Err(e.into()),
                };
                freed += r.bytes;
                w.metrics.evictions.with_label_values(&[policy.name(), group]).inc_by(r.blocks as u64);
                if r.blocks == 0 && r.exhausted {
                    break;
                }
                offset = r.next_offset;
            }
        }
    }
    Ok((freed, false))
}
