//! `getCacheMeta`: blocks' locations and states, for debugging.

use super::*;

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
