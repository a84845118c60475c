//! LRU: evict the least recently accessed block.
//!
//! Recency is per access: every block of a request is refreshed in request order, so after a
//! request its last block is the most recent and its first block the least recent of the
//! request. One [`RecencyList`]; everything is O(1).

use super::list::RecencyList;
use super::{Access, EvictionPolicy};
use crate::trace::BlockId;

/// Least recently used.
#[derive(Debug, Clone)]
pub struct Lru {
    list: RecencyList,
}

impl Lru {
    /// An empty cache over block ids `0..blocks`.
    pub fn new(blocks: usize) -> Self {
        Self { list: RecencyList::new(blocks) }
    }
}

impl EvictionPolicy for Lru {
    fn name(&self) -> &'static str {
        "lru"
    }

    fn contains(&self, block: BlockId) -> bool {
        self.list.contains(block)
    }

    fn access(&mut self, access: Access) {
        self.list.touch(access.block);
    }

    fn len(&self) -> usize {
        self.list.len()
    }

    fn evict(&mut self) -> Option<BlockId> {
        self.list.pop_back()
    }
}
