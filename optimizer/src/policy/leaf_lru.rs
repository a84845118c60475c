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

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::forest::Forest;
use super::{Access, EvictionPolicy, compact_heap, heap_needs_compaction};
use crate::trace::{BlockId, Position};

/// Least recently used leaf.
#[derive(Debug, Clone)]
pub struct LeafLru {
    forest: Forest,
    last: Vec<Position>,
    leaves: BinaryHeap<Reverse<(Position, BlockId)>>,
}

impl LeafLru {
    /// An empty cache over block ids `0..blocks`.
    pub fn new(blocks: usize) -> Self {
        Self { forest: Forest::new(blocks), last: vec![0; blocks], leaves: BinaryHeap::new() }
    }

    fn is_live(&self, &(last, block): &(Position, BlockId)) -> bool {
        self.forest.is_leaf(block) && self.last[block as usize] == last
    }
}

impl EvictionPolicy for LeafLru {
    fn name(&self) -> &'static str {
        "leaf_lru"
    }

    fn contains(&self, block: BlockId) -> bool {
        self.forest.contains(block)
    }

    fn access(&mut self, access: Access) {
        self.forest.insert(&access);
        self.last[access.block as usize] = access.position;
        if self.forest.is_leaf(access.block) {
            self.leaves.push(Reverse((access.position, access.block)));
        }
        if heap_needs_compaction(self.leaves.len(), self.forest.len()) {
            let leaves = std::mem::take(&mut self.leaves);
            self.leaves = compact_heap(leaves, |Reverse(entry)| self.is_live(entry));
        }
    }

    fn len(&self) -> usize {
        self.forest.len()
    }

    fn evict(&mut self) -> Option<BlockId> {
        while let Some(Reverse(entry)) = self.leaves.pop() {
            if !self.is_live(&entry) {
                continue;
            }
            let block = entry.1;
            if let Some(parent) = self.forest.remove_leaf(block) {
                self.leaves.push(Reverse((self.last[parent as usize], parent)));
            }
            return Some(block);
        }
        debug_assert_eq!(self.forest.len(), 0, "resident blocks but no live leaf");
        None
    }
}
