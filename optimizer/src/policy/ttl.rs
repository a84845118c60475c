//! TTL: expire blocks by age, then fall back to LRU.
//!
//! Exactly: when a request arrives at trace time `now`, before it is looked up, every resident
//! block whose last access is older than `now - ttl` (strictly) is evicted, whatever the
//! capacity — an expired block is never a hit. If after the request the cache is over capacity,
//! the least recently accessed blocks are evicted, as in LRU. Because trace time never goes
//! backwards, the expired blocks are always the back of the recency list, so expiry pops from
//! the back until it meets a fresh block: O(1) per expired block.
//!
//! Expirations count as evictions in reports.

use super::list::RecencyList;
use super::{Access, EvictionPolicy};
use crate::trace::BlockId;

/// Time to live, then least recently used.
#[derive(Debug, Clone)]
pub struct Ttl {
    list: RecencyList,
    last_us: Vec<u64>,
    ttl_us: u64,
}

impl Ttl {
    /// An empty cache over block ids `0..blocks` whose blocks live `ttl_us` after their last
    /// access.
    pub fn new(blocks: usize, ttl_us: u64) -> Self {
        Self { list: RecencyList::new(blocks), last_us: vec![0; blocks], ttl_us }
    }
}

impl EvictionPolicy for Ttl {
    fn name(&self) -> &'static str {
        "ttl"
    }

    fn contains(&self, block: BlockId) -> bool {
        self.list.contains(block)
    }

    fn access(&mut self, access: Access) {
        self.list.touch(access.block);
        self.last_us[access.block as usize] = access.time_us;
    }

    fn len(&self) -> usize {
        self.list.len()
    }

    fn evict(&mut self) -> Option<BlockId> {
        self.list.pop_back()
    }

    fn expire(&mut self, now_us: u64) -> u64 {
        let mut expired = 0;
        while let Some(oldest) = self.list.back() {
            if now_us.saturating_sub(self.last_us[oldest as usize]) <= self.ttl_us {
                break;
            }
            self.list.pop_back();
            expired += 1;
        }
        expired
    }
}
