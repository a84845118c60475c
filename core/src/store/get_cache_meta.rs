//! getCacheMeta (debugging): per unmasked key, its first location in any state and a JSON meta
//! string with the location id and status (`CLS_WRITING` / `CLS_SERVING` / `CLS_DELETING` /
//! `CLS_NOT_FOUND`). `detail_level >= 1` adds every location, the write time and the tree links.

use super::record::BlockRecord;
use super::{DataPlane, storage_of};
use crate::backend;
use crate::error::Result;
use crate::mask::BlockMask;
use crate::registry::Snapshot;
use crate::wire::{CacheLocation, InstanceInfo};
use serde_json::json;

impl DataPlane {
    pub async fn get_cache_meta(
        &self,
        snap: &Snapshot,
        inst: &InstanceInfo,
        blocks: &[i64],
        mask: &BlockMask,
        detail_level: i32,
    ) -> Result<(Vec<CacheLocation>, Vec<String>)> {
        let unmasked: Vec<i64> =
            blocks.iter().enumerate().filter(|(i, _)| !mask.contains(*i)).map(|(_, k)| *k).collect();
        let records = self.records(&self.keys(&inst.instance_id), &unmasked).await?;
        let mut locations = Vec::with_capacity(unmasked.len());
        let mut metas = Vec::with_capacity(unmasked.len());
        for (key, raw) in unmasked.iter().zip(records.iter()) {
            let rec = raw.and_then(BlockRecord::decode);
            let first = rec.as_ref().and_then(|r| r.locations.first().copied());
            let loc_json = |l: &super::record::Location| {
                json!({
                    "location_id": format!("{:08x}-{}", l.seq, l.storage),
                    "status": l.state.cls_name(),
                    "storage": storage_of(snap, l.storage).map(|s| s.global_unique_name.as_str()).unwrap_or(""),
                    "written": l.written,
                })
            };
            match first {
                Some(l) => {
                    let wire = storage_of(snap, l.storage)
                        .and_then(|cfg| backend::cache_location(cfg, inst, *key, &l, &[]))
                        .unwrap_or_else(|| backend::placeholder(inst, &[]));
                    locations.push(wire);
                    let mut meta =
                        json!({"location_id": format!("{:08x}-{}", l.seq, l.storage), "status": l.state.cls_name()});
                    if detail_level >= 1
                        && let Some(r) = &rec
                    {
                        meta["locations"] = r.locations.iter().map(loc_json).collect();
                        meta["parent"] = json!(r.parent.map(|p| p.to_string()));
                        meta["serving_children"] = json!(r.children);
                    }
                    metas.push(meta.to_string());
                }
                None => {
                    locations.push(backend::placeholder(inst, &[]));
                    metas.push(json!({"location_id": "", "status": "CLS_NOT_FOUND"}).to_string());
                }
            }
        }
        Ok((locations, metas))
    }
}
