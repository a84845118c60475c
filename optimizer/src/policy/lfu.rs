//! LFU with dynamic aging (LFU-DA, Arlitt et al. 2000).
//!
//! Plain LFU never forgets: a block that was hot an hour ago outlives every newer block. LFU-DA
//! ages by a cache-wide clock `L` instead of by decaying counters:
//!
//! * each resident block has a count `c` of accesses since it was (re)inserted, and a priority
//!   `K = L + c`, recomputed on every access with the current `L`;
//! * the victim is the block with the smallest `K`; equal `K` → the least recently accessed;
//! * on eviction, `L` becomes the victim's `K`, so a newly inserted block starts level with the
//!   weakest survivor, and a block must keep being accessed to stay ahead of new ones.
//!
//! An evicted block's count is forgotten. The priority queue is a binary min-heap with lazy
//! deletion: entry `(K, last access, block)` is live while the block is resident and both
//! numbers still match.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::{Access, EvictionPolicy, compact_heap, heap_needs_compaction};
use crate::trace::{BlockId, Position};

/// LFU-DA.
#[derive(Debug, Clone)]
pub struct Lfu {
    resident: Vec<bool>,
    count: Vec<u32>,
    priority: Vec<u64>,
    last: Vec<Position>,
    heap: BinaryHeap<Reverse<(u64, Position, BlockId)>>,
    age: u64,
    len: usize,
}

impl Lfu {
    /// An empty cache over block ids `0..blocks`.
    pub fn new(blocks: usize) -> Self {
        Self {
            resident: vec![false; blocks],
            count: vec![0; blocks],
            priority: vec![0; blocks],
            last: vec![0; blocks],
            heap: BinaryHeap::new(),
            age: 0,
            len: 0,
        }
    }

    fn is_live(&self, &(priority, last, block): &(u64, Position, BlockId)) -> bool {
        let b = block as usize;
        self.resident[b] && self.priority[b] == priority && self.last[b] == last
    }
}

impl EvictionPolicy for Lfu {
    fn name(&self) -> &'static str {
        "lfu"
    }

    fn contains(&self, block: BlockId) -> bool {
        self.resident[block as usize]
    }

    fn access(&mut self, access: Access) {
        let b = access.block as usize;
        if self.resident[b] {
            self.count[b] += 1;
        } else {
            self.resident[b] = true;
            self.count[b] = 1;
            self.len += 1;
        }
        self.priority[b] = self.age + u64::from(self.count[b]);
        self.last[b] = access.position;
        self.heap.push(Reverse((self.priority[b], access.position, access.block)));
        if heap_needs_compaction(self.heap.len(), self.len) {
            let heap = std::mem::take(&mut self.heap);
            self.heap = compact_heap(heap, |Reverse(entry)| self.is_live(entry));
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn evict(&mut self) -> Option<BlockId> {
        while let Some(Reverse(entry)) = self.heap.pop() {
            if !self.is_live(&entry) {
                continue;
            }
            let (priority, _, block) = entry;
            self.resident[block as usize] = false;
            self.len -= 1;
            self.age = priority;
            return Some(block);
        }
        None
    }
}
