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
