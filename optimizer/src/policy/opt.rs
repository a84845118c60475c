//! Belady's optimal policy (OPT): evict the block whose next access is furthest in the future.
//!
//! Offline only — it reads the future from a [`NextUse`] table computed by one backward pass
//! over the flattened replay-order access sequence. A resident block's priority is the next use
//! after its latest access; since eviction happens after a whole request is accessed, that is
//! the first access at or after the next request's first position. Counting in positions (not
//! requests) means that within one future request a prefix block is needed before its suffix,
//! so between two blocks of the same future request the suffix is evicted first.
//!
//! Ties are possible only among blocks never used again (`NextUse::NEVER`); they are broken by
//! evicting the most recently accessed first (within the last request that touched them, the
//! deeper block first). The choice changes no hit count: those blocks are never asked for
//! again.
//!
//! Why this is the bound every report compares against: a prefix hit is also a hit of each of
//! its blocks, so a policy's prefix hits are at most its per-block hits; Belady maximises
//! per-block hits over all policies that keep at most `capacity` blocks between requests; and in
//! a prefix-chained trace a block's prefix is always needed strictly before the block itself
//! (positions, not requests), so whenever OPT keeps a block that will be needed again it keeps
//! that block's prefix too: at every arrival the request's resident blocks form a prefix of it,
//! and OPT's per-block hits *are* prefix hits. (For traces that are not prefix-chained OPT is
//! the per-block optimum, which may not be the prefix-hit optimum.)
//!
//! Max-heap on `(next use, last access)` with lazy deletion; an entry is live while its block is
//! resident and its last access matches.

use std::collections::BinaryHeap;

use super::{Access, EvictionPolicy, NextUse, compact_heap, heap_needs_compaction};
use crate::trace::{BlockId, Position};

/// Belady's furthest-next-use policy.
#[derive(Debug, Clone)]
pub struct Opt<'a> {
    next_use: &'a NextUse,
    resident: Vec<bool>,
    last: Vec<Position>,
    heap: BinaryHeap<(Position, Position, BlockId)>,
    len: usize,
}

impl<'a> Opt<'a> {
    /// An empty cache over block ids `0..blocks` that knows the future from `next_use`, which
    /// must have been computed from the trace being replayed.
    pub fn new(blocks: usize, next_use: &'a NextUse) -> Self {
        Self { next_use, resident: vec![false; blocks], last: vec![0; blocks], heap: BinaryHeap::new(), len: 0 }
    }

    fn is_live(&self, &(_, last, block): &(Position, Position, BlockId)) -> bool {
        self.resident[block as usize] && self.last[block as usize] == last
    }
}

impl EvictionPolicy for Opt<'_> {
    fn name(&self) -> &'static str {
        "opt"
    }

    fn contains(&self, block: BlockId) -> bool {
        self.resident[block as usize]
    }

    fn access(&mut self, access: Access) {
        let b = access.block as usize;
        if !self.resident[b] {
            self.resident[b] = true;
            self.len += 1;
        }
        self.last[b] = access.position;
        self.heap.push((self.next_use.after(access.position), access.position, access.block));
        if heap_needs_compaction(self.heap.len(), self.len) {
            let heap = std::mem::take(&mut self.heap);
            self.heap = compact_heap(heap, |entry| self.is_live(entry));
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn evict(&mut self) -> Option<BlockId> {
        while let Some(entry) = self.heap.pop() {
            if !self.is_live(&entry) {
                continue;
            }
            let block = entry.2;
            self.resident[block as usize] = false;
            self.len -= 1;
            return Some(block);
        }
        None
    }
}
