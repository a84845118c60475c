//! An intrusive doubly linked recency list over a vector arena.
//!
//! Nodes are the dense block ids themselves: `prev[b]` / `next[b]` link block `b`, so moving a
//! block to the front, unlinking it and popping the back are O(1) with no allocation. The front
//! is the most recently used end. `NIL` ends the list. Invariant: `member[b]` iff `b` is linked,
//! and `len` counts the linked blocks.

use crate::trace::BlockId;

const NIL: u32 = u32::MAX;

#[derive(Debug, Clone)]
pub(crate) struct RecencyList {
    prev: Vec<u32>,
    next: Vec<u32>,
    member: Vec<bool>,
    front: u32,
    back: u32,
    len: usize,
}

impl RecencyList {
    /// An empty list over block ids `0..blocks`.
    pub(crate) fn new(blocks: usize) -> Self {
        Self {
            prev: vec![NIL; blocks],
            next: vec![NIL; blocks],
            member: vec![false; blocks],
            front: NIL,
            back: NIL,
            len: 0,
        }
    }

    pub(crate) fn contains(&self, block: BlockId) -> bool {
        self.member[block as usize]
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The least recently used block.
    pub(crate) fn back(&self) -> Option<BlockId> {
        (self.back != NIL).then_some(self.back)
    }

    /// Links `block` at the front, unlinking it first if it is already linked.
    pub(crate) fn touch(&mut self, block: BlockId) {
        if self.member[block as usize] {
            if self.front == block {
                return;
            }
            self.unlink(block);
        }
        let b = block as usize;
        self.prev[b] = NIL;
        self.next[b] = self.front;
        if self.front != NIL {
            self.prev[self.front as usize] = block;
        } else {
            self.back = block;
        }
        self.front = block;
        self.member[b] = true;
        self.len += 1;
    }

    /// Unlinks and returns the least recently used block.
    pub(crate) fn pop_back(&mut self) -> Option<BlockId> {
        let block = self.back()?;
        self.unlink(block);
        Some(block)
    }

    /// Unlinks `block`, which must be linked.
    pub(crate) fn unlink(&mut self, block: BlockId) {
        let b = block as usize;
        debug_assert!(self.member[b], "unlinking block {block} that is not in the list");
        let (prev, next) = (self.prev[b], self.next[b]);
        if prev != NIL {
            self.next[prev as usize] = next;
        } else {
            self.front = next;
        }
        if next != NIL {
            self.prev[next as usize] = prev;
        } else {
            self.back = prev;
        }
        self.prev[b] = NIL;
        self.next[b] = NIL;
        self.member[b] = false;
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(list: &mut RecencyList) -> Vec<BlockId> {
        std::iter::from_fn(|| list.pop_back()).collect()
    }

    #[test]
    fn touching_moves_a_block_to_the_front_and_pop_takes_the_back() {
        let mut list = RecencyList::new(5);
        for b in [0, 1, 2, 3] {
            list.touch(b);
        }
        list.touch(1);
        list.touch(3);
        list.unlink(2);
        assert_eq!(list.len(), 3);
        assert!(!list.contains(2));
        assert_eq!(drain(&mut list), vec![0, 1, 3]);
        assert_eq!(list.len(), 0);
        assert_eq!(list.back(), None);
    }
}
