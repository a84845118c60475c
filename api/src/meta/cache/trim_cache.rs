//! `trimCache`: remove all of an instance's blocks, or those of a time range.

use super::*;

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
