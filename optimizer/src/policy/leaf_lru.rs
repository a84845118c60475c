//! Leaf-aware LRU over the prefix tree: suffixes go before their prefixes.
//!
//! A block's parent is the block before it in the request that inserted it (the first block of
//! a request has none). In a prefix-chained trace this is the same for every request containing
//! the block. The policy keeps, per block, the number of resident children, and only **leaves**
//! — resident blocks without resident children — are evictable. The victim is the least
//! recently accessed leaf. Evicting a leaf decrements its parent's child count; a parent whose
//! last resident child leaves becomes a leaf itself.
//!
//! How recency propagates: every access refreshes the accessed block, and a request accesses
//! its whole prefix, so a parent is always at least as recent as the request that last touched
//! any of its children. When a parent becomes a leaf it enters the leaf queue with its own last
//! access, which is therefore never older than that of the child just evicted — the child's
//! recency is passed up, as DESIGN §3 asks of the reclaimer, without extra bookkeeping. (Unlike
//! plain LRU, a leaf-aware cache never holds a suffix without its prefix, so every resident
//! block is reachable by a prefix match.)
//!
//! The resident blocks form a forest: a block's parent is resident while it has resident
//! children, and a new block's parent was accessed just before it, so no cycle can form even in
//! traces whose ids are not prefix-chained. The leaf queue is a min-heap on last access with
//! lazy deletion; an entry is live while its block is a resident leaf with that last access.

use super::forest::LeafQueue;
use super::{Access, EvictionPolicy};
use crate::trace::{BlockId, Position};

/// Least recently used leaf.
#[derive(Debug, Clone)]
pub struct LeafLru {
    queue: LeafQueue<Position>,
    last: Vec<Position>,
}

impl LeafLru {
    /// An empty cache over block ids `0..blocks`.
    pub fn new(blocks: usize) -> Self {
        Self { queue: LeafQueue::new(blocks), last: vec![0; blocks] }
    }
}

impl EvictionPolicy for LeafLru {
    fn name(&self) -> &'static str {
        "leaf_lru"
    }

    fn contains(&self, block: BlockId) -> bool {
        self.queue.forest.contains(block)
    }

    fn access(&mut self, access: Access) {
        self.queue.forest.insert(&access);
        self.last[access.block as usize] = access.position;
        let last = &self.last;
        self.queue.touched(access.block, access.position, |b| last[b as usize]);
    }

    fn len(&self) -> usize {
        self.queue.forest.len()
    }

    fn evict(&mut self) -> Option<BlockId> {
        let last = &self.last;
        self.queue.pop(|b| last[b as usize]).map(|(_, block)| block)
    }
}
