//! `removeCache`: remove blocks (their data is deleted in the background).

use super::*;

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
