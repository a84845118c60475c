//! trimCache: TS_REMOVE_ALL_CACHE (O(1): the blocks hash moves to a trash key that the deleter
//! expands), TS_REMOVE_ALL_META (drop metadata, keep storage), TS_TIMESTAMP (scan the blocks in
//! batches and remove those last written in `[begin, end)`).

use super::DataPlane;
use crate::error::{Error, Result};
use crate::scripts;
use crate::wire::InstanceInfo;

crate::wire_enum! {
    pub enum TrimStrategy { TS_UNSPECIFIED = 0, TS_REMOVE_ALL_CACHE = 1, TS_REMOVE_ALL_META = 2, TS_TIMESTAMP = 3 }
}

impl DataPlane {
    pub async fn trim_cache(&self, inst: &InstanceInfo, strategy: TrimStrategy, begin: i32, end: i32) -> Result<i64> {
        let keys = self.keys(&inst.instance_id);
        match strategy {
            TrimStrategy::TS_REMOVE_ALL_CACHE => {
                let trash = keys.trash(&format!("{:016x}", fastrand::u64(..)));
                let r = self
                    .run(
                        &scripts::TRIM_ALL_CACHE,
                        &[
                            &keys.blocks,
                            &trash,
                            &keys.usage,
                            &keys.lru,
                            &keys.lfu,
                            &keys.itouch,
                            &keys.del,
                            &keys.icount,
                            &keys.adaptive,
                            &keys.ighost,
                        ],
                        &[],
                    )
                    .await?;
                super::first(r)
            }
            TrimStrategy::TS_REMOVE_ALL_META => {
                let r = self
                    .run(
                        &scripts::TRIM_ALL_META,
                        &[
                            &keys.blocks,
                            &keys.usage,
                            &keys.lru,
                            &keys.lfu,
                            &keys.itouch,
                            &keys.files,
                            &keys.icount,
                            &keys.adaptive,
                            &keys.ighost,
                        ],
                        &[],
                    )
                    .await?;
                super::first(r)
            }
            TrimStrategy::TS_TIMESTAMP => {
                if begin < 0 || end < 0 || begin >= end {
                    return Err(Error::invalid(format!(
                        "TS_TIMESTAMP needs 0 <= begin_timestamp < end_timestamp (unix seconds), got [{begin}, {end})"
                    )));
                }
                let mut cursor: u64 = 0;
                let mut marked = 0;
                loop {
                    let (next, page): (u64, Vec<Vec<u8>>) = redis::cmd("HSCAN")
                        .arg(&keys.blocks)
                        .arg(cursor)
                        .arg("COUNT")
                        .arg(super::remove_cache::REMOVE_BATCH)
                        .query_async(&mut self.conn())
                        .await?;
                    let blocks: Vec<i64> = page
                        .chunks(2)
                        .filter_map(|kv| kv[0].as_slice().try_into().ok().map(i64::from_be_bytes))
                        .collect();
                    marked += self.remove_blocks(inst, &blocks, begin as u64, end as u64).await?;
                    if next == 0 {
                        return Ok(marked);
                    }
                    cursor = next;
                }
            }
            TrimStrategy::TS_UNSPECIFIED => {
                Err(Error::invalid("strategy is required: TS_REMOVE_ALL_CACHE, TS_REMOVE_ALL_META or TS_TIMESTAMP"))
            }
        }
    }
}
