//! `getCacheLocation`: where blocks are stored — a prefix, a batch or a window of them.

use super::*;

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
