//! The resident prefix forest shared by the leaf-aware policies ([`super::leaf_lru`],
//! [`super::leaf_lfu`]): a block's parent is the block before it in the request that inserted it
//! (if that one was resident), each block counts its resident children, and only leaves —
//! resident blocks without resident children — may be evicted. Evicting a leaf decrements its
//! parent's count; a parent whose last resident child leaves becomes a leaf itself. A new
//! block's parent was accessed just before it, so no cycle can form even in traces whose ids
//! are not prefix-chained.

use super::Access;
use crate::trace::BlockId;

const NO_PARENT: u32 = u32::MAX;

#[derive(Debug, Clone)]
pub(crate) struct Forest {
    resident: Vec<bool>,
    parent: Vec<BlockId>,
    children: Vec<u32>,
    len: usize,
}

impl Forest {
    /// An empty forest over block ids `0..blocks`.
    pub(crate) fn new(blocks: usize) -> Self {
        Self { resident: vec![false; blocks], parent: vec![NO_PARENT; blocks], children: vec![0; blocks], len: 0 }
    }

    pub(crate) fn contains(&self, block: BlockId) -> bool {
        self.resident[block as usize]
    }

    /// Whether `block` is a resident leaf.
    pub(crate) fn is_leaf(&self, block: BlockId) -> bool {
        self.resident[block as usize] && self.children[block as usize] == 0
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Makes the accessed block resident (linked under its parent when that is resident);
    /// returns whether it was inserted now.
    pub(crate) fn insert(&mut self, access: &Access) -> bool {
        let b = access.block as usize;
        if self.resident[b] {
            return false;
        }
        self.resident[b] = true;
        self.len += 1;
        match access.parent {
            Some(parent) if parent != access.block && self.resident[parent as usize] => {
                self.parent[b] = parent;
                self.children[parent as usize] += 1;
            }
            _ => self.parent[b] = NO_PARENT,
        }
        true
    }

    /// Removes the resident leaf `block`; returns its parent when that has just become a leaf.
    pub(crate) fn remove_leaf(&mut self, block: BlockId) -> Option<BlockId> {
        let b = block as usize;
        debug_assert!(self.is_leaf(block), "only leaves are evicted");
        self.resident[b] = false;
        self.len -= 1;
        let parent = std::mem::replace(&mut self.parent[b], NO_PARENT);
        if parent == NO_PARENT {
            return None;
        }
        self.children[parent as usize] -= 1;
        (self.children[parent as usize] == 0).then_some(parent)
    }
}

/// The resident forest with a queue of its leaves by a key (smallest first), shared by the
/// heap-based leaf-aware policies ([`super::leaf_lru`]: last access; [`super::leaf_lfu`]:
/// LFU-DA priority, then last access). The queue is a min-heap with lazy deletion: an entry is
/// live while its block is a resident leaf whose current key (`key_of`) is the entry's.
#[derive(Debug, Clone)]
pub(crate) struct LeafQueue<K> {
    pub(crate) forest: Forest,
    heap: std::collections::BinaryHeap<std::cmp::Reverse<(K, BlockId)>>,
}

impl<K: Ord + Copy> LeafQueue<K> {
    pub(crate) fn new(blocks: usize) -> Self {
        Self { forest: Forest::new(blocks), heap: std::collections::BinaryHeap::new() }
    }

    /// Queues `block` under its new `key` if it is a leaf (after [`Forest::insert`] and the
    /// caller's key update); rebuilds the heap when stale entries dominate.
    pub(crate) fn touched(&mut self, block: BlockId, key: K, key_of: impl Fn(BlockId) -> K) {
        if self.forest.is_leaf(block) {
            self.heap.push(std::cmp::Reverse((key, block)));
        }
        if super::heap_needs_compaction(self.heap.len(), self.forest.len()) {
            let forest = &self.forest;
            let heap = std::mem::take(&mut self.heap);
            self.heap = super::compact_heap(heap, |std::cmp::Reverse((k, b))| forest.is_leaf(*b) && key_of(*b) == *k);
        }
    }

    /// Removes the live leaf with the smallest key and returns it with that key; a parent left
    /// without resident children is queued under its own key.
    pub(crate) fn pop(&mut self, key_of: impl Fn(BlockId) -> K) -> Option<(K, BlockId)> {
        while let Some(std::cmp::Reverse((key, block))) = self.heap.pop() {
            if !self.forest.is_leaf(block) || key_of(block) != key {
                continue;
            }
            if let Some(parent) = self.forest.remove_leaf(block) {
                self.heap.push(std::cmp::Reverse((key_of(parent), parent)));
            }
            return Some((key, block));
        }
        debug_assert_eq!(self.forest.len(), 0, "resident blocks but no live leaf");
        None
    }
}
