//! Cache RPCs of the meta plane: getCacheLocation, getCacheMeta, startWriteCache,
//! finishWriteCache, removeCache, trimCache. Each handler resolves the instance and checks that
//! the caller may act on its group, validates every field against the configured bounds (keys,
//! tokens, masks, the size of the response it would build) before anything touches Valkey,
//! calls one data-plane function, and records metrics and the event log.

use crate::auth::Caller;
use crate::event_log::{Event, EventKind};
use crate::reply::{Rendered, Reply, WireJson};
use crate::state::AppState;
use axum::extract::State;
use kvcm_core::block_key::request_keys;
use kvcm_core::error::Result;
use kvcm_core::mask::BlockMask;
use kvcm_core::registry::Snapshot;
use kvcm_core::registry::validate;
use kvcm_core::wire::meta::*;
use kvcm_core::wire::{Empty, InstanceInfo, StorageType};
use std::sync::Arc;
use std::time::Instant;

/// The instance a request names, with the snapshot it was found in, once the caller is known to
/// be allowed to act on its group.
pub async fn instance(s: &AppState, caller: &Caller, id: &str) -> Result<(Arc<Snapshot>, Arc<InstanceInfo>)> {
    validate::instance_id(s.registry.lookup_limits(), id)?;
    let inst = s.registry.instance(id).await?;
    caller.authorize(&inst.instance_group_name, id)?;
    Ok((s.registry.snapshot(), inst))
}

/// The request's block keys, within `max_token_ids_per_request` and `max_keys_per_request`.
fn keys(s: &AppState, inst: &InstanceInfo, block_keys: &[i64], token_ids: &[i64]) -> Result<Vec<i64>> {
    s.registry.limits().token_ids(token_ids.len())?;
    request_keys(block_keys, token_ids, inst.block_size, s.config.max_keys_per_request)
}

/// How many specs each returned location carries at most, after `location_spec_names`.
fn specs_per_location(s: &AppState, inst: &InstanceInfo, filter: &[String]) -> Result<usize> {
    let limits = s.registry.limits();
    limits.count("location_spec_names", filter.len(), limits.max_specs_per_instance, "max_specs_per_instance")?;
    let specs = &inst.location_spec_infos;
    Ok(if filter.is_empty() { specs.len() } else { specs.iter().filter(|x| filter.contains(&x.name)).count() })
}

pub async fn get_cache_location(
    State(s): State<AppState>,
    caller: Caller,
    WireJson(req): WireJson<GetCacheLocationRequest>,
) -> Reply<Rendered<LocationsResponse>> {
    Reply(
        async {
            let (snap, inst) = instance(&s, &caller, &req.instance_id).await?;
            let blocks = keys(&s, &inst, &req.block_keys, &req.token_ids)?;
            let mask = BlockMask::parse("block_mask", req.block_mask.as_ref(), blocks.len())?;
            s.registry.limits().response(blocks.len(), specs_per_location(&s, &inst, &req.location_spec_names)?)?;
            let t = Instant::now();
            // The locations are rendered straight to JSON (the bytes serde would write for
            // `LocationsResponse`): a long read would otherwise spend most of its time building
            // and dropping one struct and three strings per block.
            let mut locations = Rendered::<LocationsResponse>::field("locations");
            let stats = s
                .data
                .get_cache_location_json(
                    &snap,
                    &inst,
                    req.query_type,
                    &blocks,
                    &mask,
                    req.sw_size,
                    &req.location_spec_names,
                    &mut locations,
                )
                .await?;
            s.metrics.data_op("hmget_blocks", t.elapsed());
            s.metrics.lookup(&inst.instance_id, stats.requested, stats.hits, stats.matched);
            if let Some(log) = &s.events {
                let block_mask = mask.to_wire();
                log.emit(&Event {
                    query_type: req.query_type.name(),
                    keys: &blocks,
                    block_mask: Some(&block_mask),
                    sw_size: req.sw_size,
                    ..Event::new(EventKind::GetCacheLocation, &inst.instance_id)
                });
            }
            Ok(Rendered::new(locations))
        }
        .await,
    )
}

pub async fn get_cache_locations_by_backend(
    State(s): State<AppState>,
    caller: Caller,
    WireJson(req): WireJson<GetCacheLocationsByBackendRequest>,
) -> Reply<GetCacheLocationsByBackendResponse> {
    Reply(
        async {
            let (snap, inst) = instance(&s, &caller, &req.instance_id).await?;
            let blocks = keys(&s, &inst, &req.block_keys, &req.token_ids)?;
            let mask = BlockMask::parse("block_mask", req.block_mask.as_ref(), blocks.len())?;
            let limits = s.registry.limits();
            limits.count("backend_selectors", req.backend_selectors.len(), 16, "16 (one per backend type)")?;
            // Per block: one location per storage type (one, usually) and one per engine tier asked.
            let engine_tiers = [StorageType::ST_EVENT_REPORT_L1P5, StorageType::ST_EVENT_REPORT_L2]
                .iter()
                .filter(|t| {
                    req.backend_selectors.is_empty() || req.backend_selectors.iter().any(|s| s.backend_type == **t)
                })
                .count();
            let specs = specs_per_location(&s, &inst, &req.location_spec_names)?;
            limits.response(blocks.len().saturating_mul(1 + engine_tiers), specs)?;
            let t = Instant::now();
            let (key_locations, stats) = s
                .data
                .get_cache_locations_by_backend(
                    &snap,
                    &inst,
                    req.query_type,
                    &blocks,
                    &mask,
                    req.sw_size,
                    &req.location_spec_names,
                    &req.backend_selectors,
                )
                .await?;
            s.metrics.data_op("hmget_blocks_by_backend", t.elapsed());
            s.metrics.lookup(&inst.instance_id, stats.requested, stats.hits, stats.matched);
            Ok(GetCacheLocationsByBackendResponse { key_locations })
        }
        .await,
    )
}

pub async fn get_cache_location_len(
    State(s): State<AppState>,
    caller: Caller,
    WireJson(req): WireJson<GetCacheLocationLenRequest>,
) -> Reply<GetCacheLocationLenResponse> {
    Reply(
        async {
            let (snap, inst) = instance(&s, &caller, &req.instance_id).await?;
            let blocks = keys(&s, &inst, &req.block_keys, &req.token_ids)?;
            let t = Instant::now();
            let stats = s.data.get_cache_location_len(&snap, &inst, req.query_type, &blocks, req.sw_size).await?;
            s.metrics.data_op("hmget_blocks_len", t.elapsed());
            Ok(GetCacheLocationLenResponse { cache_location_len: stats.matched as i64 })
        }
        .await,
    )
}

pub async fn get_cache_meta(
    State(s): State<AppState>,
    caller: Caller,
    WireJson(req): WireJson<GetCacheMetaRequest>,
) -> Reply<GetCacheMetaResponse> {
    Reply(
        async {
            let (snap, inst) = instance(&s, &caller, &req.instance_id).await?;
            let blocks = keys(&s, &inst, &req.block_keys, &req.token_ids)?;
            let mask = BlockMask::parse("block_mask", req.block_mask.as_ref(), blocks.len())?;
            s.registry.limits().response(blocks.len(), specs_per_location(&s, &inst, &[])?)?;
            let (locations, metas) = s.data.get_cache_meta(&snap, &inst, &blocks, &mask, req.detail_level).await?;
            Ok(GetCacheMetaResponse { locations, metas })
        }
        .await,
    )
}

pub async fn start_write_cache(
    State(s): State<AppState>,
    caller: Caller,
    WireJson(req): WireJson<StartWriteCacheRequest>,
) -> Reply<StartWriteCacheResponse> {
    Reply(
        async {
            let (snap, inst) = instance(&s, &caller, &req.instance_id).await?;
            let blocks = keys(&s, &inst, &req.block_keys, &req.token_ids)?;
            s.registry.limits().response(blocks.len(), specs_per_location(&s, &inst, &[])?)?;
            let t = Instant::now();
            let w = s
                .data
                .start_write_cache(&snap, &inst, &blocks, &req.location_spec_group_names, req.write_timeout_seconds)
                .await?;
            s.metrics.data_op("start_write_cache", t.elapsed());
            s.metrics.written(&inst.instance_id, w.locations.len());
            let block_mask = w.mask.to_wire();
            if let Some(log) = &s.events {
                log.emit(&Event {
                    keys: &blocks,
                    block_mask: Some(&block_mask),
                    write_session_id: &w.session_id,
                    ..Event::new(EventKind::StartWriteCache, &inst.instance_id)
                });
            }
            Ok(StartWriteCacheResponse { write_session_id: w.session_id, block_mask, locations: w.locations })
        }
        .await,
    )
}

pub async fn finish_write_cache(
    State(s): State<AppState>,
    caller: Caller,
    WireJson(req): WireJson<FinishWriteCacheRequest>,
) -> Reply<Empty> {
    Reply(
        async {
            let (_, inst) = instance(&s, &caller, &req.instance_id).await?;
            let t = Instant::now();
            s.data.finish_write_cache(&inst.instance_id, &req.write_session_id, req.success_blocks.as_ref()).await?;
            s.metrics.data_op("finish_write_cache", t.elapsed());
            if let Some(log) = &s.events {
                log.emit(&Event {
                    write_session_id: &req.write_session_id,
                    success_blocks: req.success_blocks.as_ref(),
                    ..Event::new(EventKind::FinishWriteCache, &inst.instance_id)
                });
            }
            Ok(Empty {})
        }
        .await,
    )
}

pub async fn remove_cache(
    State(s): State<AppState>,
    caller: Caller,
    WireJson(req): WireJson<RemoveCacheRequest>,
) -> Reply<Empty> {
    Reply(
        async {
            let (_, inst) = instance(&s, &caller, &req.instance_id).await?;
            let blocks = keys(&s, &inst, &req.block_keys, &req.token_ids)?;
            let mask = BlockMask::parse("block_mask", req.block_mask.as_ref(), blocks.len())?;
            let t = Instant::now();
            s.data.remove_cache(&inst, &blocks, &mask).await?;
            s.metrics.data_op("remove_cache", t.elapsed());
            Ok(Empty {})
        }
        .await,
    )
}

pub async fn trim_cache(
    State(s): State<AppState>,
    caller: Caller,
    WireJson(req): WireJson<TrimCacheRequest>,
) -> Reply<Empty> {
    Reply(
        async {
            let (_, inst) = instance(&s, &caller, &req.instance_id).await?;
            let t = Instant::now();
            s.data.trim_cache(&inst, req.strategy, req.begin_timestamp, req.end_timestamp).await?;
            s.metrics.data_op("trim_cache", t.elapsed());
            Ok(Empty {})
        }
        .await,
    )
}
