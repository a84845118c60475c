//! `finishWriteCache`: phase 2 of a write — which of the session's blocks were written.

use super::*;

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
