//! removeCache: marks the unmasked blocks' locations deleting and queues their physical
//! deletion, in batches of one script call each (each batch atomic).

use super::DataPlane;
use crate::backend;
use crate::error::Result;
use crate::keys::block_field;
use crate::mask::BlockMask;
use crate::scripts;
use crate::wire::InstanceInfo;

/// Keys per script call: bounds how long one call holds Valkey.
pub const REMOVE_BATCH: usize = 512;

impl DataPlane {
    /// Removes blocks written in `[begin, end)` (unix s; `0..u32::MAX+1` for any). Returns the
    /// number of locations marked.
    pub async fn remove_blocks(&self, inst: &InstanceInfo, blocks: &[i64], begin: u64, end: u64) -> Result<i64> {
        let keys = self.keys(&inst.instance_id);
        let sizes = backend::group_sizes(inst).iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",");
        let (b, e) = (begin.to_string(), end.to_string());
        let mut marked = 0;
        for chunk in blocks.chunks(REMOVE_BATCH) {
            let fields: Vec<[u8; 8]> = chunk.iter().map(|k| block_field(*k)).collect();
            let mut args: Vec<&[u8]> = vec![sizes.as_bytes(), b.as_bytes(), e.as_bytes()];
            args.extend(fields.iter().map(|f| &f[..]));
            let reply = self
                .run(
                    &scripts::REMOVE_CACHE,
                    &[&keys.blocks, &keys.usage, &keys.lru, &keys.lfu, &keys.itouch, &keys.del, &keys.icount],
                    &args,
                )
                .await?;
            marked += super::first::<i64>(reply)?;
        }
        Ok(marked)
    }

    /// removeCache: every unmasked block.
    pub async fn remove_cache(&self, inst: &InstanceInfo, blocks: &[i64], mask: &BlockMask) -> Result<i64> {
        let unmasked: Vec<i64> =
            blocks.iter().enumerate().filter(|(i, _)| !mask.contains(*i)).map(|(_, k)| *k).collect();
        self.remove_blocks(inst, &unmasked, 0, 1 << 32).await
    }
}
