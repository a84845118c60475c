//! Leaf-aware LFU-DA: only leaves of the prefix tree are evictable (as in [`super::leaf_lru`]),
//! and the victim is the leaf with the lowest LFU-DA priority (as in [`super::lfu`]): each
//! resident block's priority is `L + c` — its accesses since it was inserted plus the cache age
//! `L` at its last access — and `L` rises to each victim's priority, so old popularity fades.
//! Ties go to the least recently accessed leaf. A candidate of issue 12: frequency keeps popular
//! prefixes (system prompts, shared documents) at small capacities where recency alone churns
//! them, and leaf-awareness keeps eviction from cutting a prefix out from under its suffixes.
//! A parent is accessed by every request that accesses its children, so its priority is never
//! below theirs when it becomes a leaf. O(log n) per access and eviction (lazy-deletion heap).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::forest::Forest;
use super::{Access, EvictionPolicy, compact_heap, heap_needs_compaction};
use crate::trace::{BlockId, Position};

/// Leaf-aware LFU with dynamic aging.
#[derive(Debug, Clone)]
pub struct LeafLfu {
    forest: Forest,
    count: Vec<u32>,
    priority: Vec<u64>,
    last: Vec<Position>,
    leaves: BinaryHeap<Reverse<(u64, Position, BlockId)>>,
    age: u64,
}

impl LeafLfu {
    /// An empty cache over block ids `0..blocks`.
    pub fn new(blocks: usize) -> Self {
        Self {
            forest: Forest::new(blocks),
            count: vec![0; blocks],
            priority: vec![0; blocks],
            last: vec![0; blocks],
            leaves: BinaryHeap::new(),
            age: 0,
        }
    }

    fn is_live(&self, &(priority, last, block): &(u64, Position, BlockId)) -> bool {
        let b = block as usize;
        self.forest.is_leaf(block) && self.priority[b] == priority && self.last[b] == last
    }
}

impl EvictionPolicy for LeafLfu {
    fn name(&self) -> &'static str {
        "leaf_lfu"
    }

    fn contains(&self, block: BlockId) -> bool {
        self.forest.contains(block)
    }

    fn access(&mut self, access: Access) {
        let b = access.block as usize;
        if self.forest.insert(&access) {
            self.count[b] = 0;
        }
        self.count[b] = self.count[b].saturating_add(1);
        self.priority[b] = self.age + u64::from(self.count[b]);
        self.last[b] = access.position;
        if self.forest.is_leaf(access.block) {
            self.leaves.push(Reverse((self.priority[b], access.position, access.block)));
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
            let (priority, _, block) = entry;
            self.age = self.age.max(priority);
            if let Some(parent) = self.forest.remove_leaf(block) {
                let p = parent as usize;
                self.leaves.push(Reverse((self.priority[p], self.last[p], parent)));
            }
            return Some(block);
        }
        debug_assert_eq!(self.forest.len(), 0, "resident blocks but no live leaf");
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(p: &mut LeafLfu, block: BlockId, position: Position, parent: Option<BlockId>) {
        p.access(Access { block, position, time_us: 0, parent });
    }

    #[test]
    fn a_popular_prefix_outlives_one_off_suffixes_and_suffixes_go_first() {
        let mut p = LeafLfu::new(10);
        // Prefix 0 -> 1 read three times with different suffixes.
        let mut pos = 0;
        for suffix in [2, 3, 4] {
            access(&mut p, 0, pos, None);
            access(&mut p, 1, pos + 1, Some(0));
            access(&mut p, suffix, pos + 2, Some(1));
            pos += 3;
        }
        // Evicting three blocks takes the one-off suffixes, never the prefix under them.
        let mut gone = vec![p.evict().unwrap(), p.evict().unwrap(), p.evict().unwrap()];
        gone.sort();
        assert_eq!(gone, vec![2, 3, 4]);
        assert!(p.contains(0) && p.contains(1));
        // Then the leaf 1 before its parent 0.
        assert_eq!(p.evict(), Some(1));
        assert_eq!(p.evict(), Some(0));
        assert_eq!(p.evict(), None);
    }
}
