//! Leaf-aware LFU-DA: only leaves of the prefix tree are evictable (as in [`super::leaf_lru`]),
//! and the victim is the leaf with the lowest LFU-DA priority (as in [`super::lfu`]): each
//! resident block's priority is `L + c` — its accesses since it was inserted plus the cache age
//! `L` at its last access — and `L` rises to each victim's priority, so old popularity fades.
//! Ties go to the least recently accessed leaf. A candidate of issue 12: frequency keeps popular
//! prefixes (system prompts, shared documents) at small capacities where recency alone churns
//! them, and leaf-awareness keeps eviction from cutting a prefix out from under its suffixes.
//! A parent is accessed by every request that accesses its children, so its priority is never
//! below theirs when it becomes a leaf. O(log n) per access and eviction (lazy-deletion heap).

use super::forest::LeafQueue;
use super::{Access, EvictionPolicy};
use crate::trace::{BlockId, Position};

/// Leaf-aware LFU with dynamic aging.
#[derive(Debug, Clone)]
pub struct LeafLfu {
    queue: LeafQueue<(u64, Position)>,
    count: Vec<u32>,
    priority: Vec<u64>,
    last: Vec<Position>,
    age: u64,
}

impl LeafLfu {
    /// An empty cache over block ids `0..blocks`.
    pub fn new(blocks: usize) -> Self {
        Self {
            queue: LeafQueue::new(blocks),
            count: vec![0; blocks],
            priority: vec![0; blocks],
            last: vec![0; blocks],
            age: 0,
        }
    }
}

impl EvictionPolicy for LeafLfu {
    fn name(&self) -> &'static str {
        "leaf_lfu"
    }

    fn contains(&self, block: BlockId) -> bool {
        self.queue.forest.contains(block)
    }

    fn access(&mut self, access: Access) {
        let b = access.block as usize;
        if self.queue.forest.insert(&access) {
            self.count[b] = 0;
        }
        self.count[b] = self.count[b].saturating_add(1);
        self.priority[b] = self.age + u64::from(self.count[b]);
        self.last[b] = access.position;
        let (priority, last) = (&self.priority, &self.last);
        self.queue.touched(access.block, (priority[b], access.position), |x| (priority[x as usize], last[x as usize]));
    }

    fn len(&self) -> usize {
        self.queue.forest.len()
    }

    fn evict(&mut self) -> Option<BlockId> {
        let (priority, last) = (&self.priority, &self.last);
        let ((key, _), block) = self.queue.pop(|x| (priority[x as usize], last[x as usize]))?;
        self.age = self.age.max(key);
        Some(block)
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
