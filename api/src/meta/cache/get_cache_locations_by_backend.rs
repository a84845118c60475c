//! `getCacheLocationsByBackend`: per block, one location per backend that holds it (storages, and
//! engine tiers through a holder picked by strategy).

use super::*;

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
