//! `getCacheLocationLen`: how many blocks `getCacheLocation` would return, without them (and without
//! refreshing their recency).

use super::*;

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
