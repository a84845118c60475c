//! `startWriteCache`: phase 1 of a write — where to write the blocks not stored yet.

use super::*;

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
