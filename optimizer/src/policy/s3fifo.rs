//! S3-FIFO (Yang et al., "FIFO queues are all you need for cache eviction", SOSP '23): a small
//! FIFO that new blocks enter (a tenth of the capacity), a main FIFO for blocks accessed again
//! while in the small one, and a ghost FIFO of block ids recently evicted from the small one (as
//! many as the main queue holds). A block that misses but is in the ghost goes straight to the
//! main queue. Hits only bump a 2-bit counter; eviction from the main queue gives a block with a
//! non-zero counter another round (decrementing it). One-hit wonders — most blocks of most
//! traces — leave through the small queue quickly without displacing the main one: a cheap
//! admission filter. Candidate of issue 12; O(1) amortised per access and eviction.

use std::collections::VecDeque;

use super::{Access, EvictionPolicy};
use crate::trace::BlockId;

const NONE: u8 = 0;
const SMALL: u8 = 1;
const MAIN: u8 = 2;

/// S3-FIFO over dense block ids.
#[derive(Debug, Clone)]
pub struct S3Fifo {
    small: VecDeque<BlockId>,
    main: VecDeque<BlockId>,
    ghost: VecDeque<BlockId>,
    /// Which queue a block is in (NONE, SMALL, MAIN).
    queue: Vec<u8>,
    /// Times a block is in the ghost queue (entries are never removed early).
    ghosts: Vec<u8>,
    freq: Vec<u8>,
    small_target: usize,
    ghost_cap: usize,
    len: usize,
}

impl S3Fifo {
    /// An empty cache over block ids `0..blocks` that the replay keeps at `capacity` blocks.
    pub fn new(blocks: usize, capacity: usize) -> Self {
        let small_target = (capacity / 10).max(1);
        Self {
            small: VecDeque::new(),
            main: VecDeque::new(),
            ghost: VecDeque::new(),
            queue: vec![NONE; blocks],
            ghosts: vec![0; blocks],
            freq: vec![0; blocks],
            small_target,
            ghost_cap: capacity.saturating_sub(small_target).max(1),
            len: 0,
        }
    }

    fn remember(&mut self, block: BlockId) {
        self.ghost.push_front(block);
        self.ghosts[block as usize] = self.ghosts[block as usize].saturating_add(1);
        if self.ghost.len() > self.ghost_cap
            && let Some(old) = self.ghost.pop_back()
        {
            self.ghosts[old as usize] -= 1;
        }
    }
}

impl EvictionPolicy for S3Fifo {
    fn name(&self) -> &'static str {
        "s3fifo"
    }

    fn contains(&self, block: BlockId) -> bool {
        self.queue[block as usize] != NONE
    }

    fn access(&mut self, access: Access) {
        let b = access.block as usize;
        if self.queue[b] != NONE {
            self.freq[b] = (self.freq[b] + 1).min(3);
            return;
        }
        self.freq[b] = 0;
        self.len += 1;
        if self.ghosts[b] > 0 {
            self.queue[b] = MAIN;
            self.main.push_front(access.block);
        } else {
            self.queue[b] = SMALL;
            self.small.push_front(access.block);
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn evict(&mut self) -> Option<BlockId> {
        loop {
            if self.small.len() > self.small_target || self.main.is_empty() {
                let b = self.small.pop_back()?;
                if self.freq[b as usize] > 0 {
                    // Read again while on probation: promoted.
                    self.freq[b as usize] = 0;
                    self.queue[b as usize] = MAIN;
                    self.main.push_front(b);
                    continue;
                }
                self.queue[b as usize] = NONE;
                self.len -= 1;
                self.remember(b);
                return Some(b);
            }
            let b = self.main.pop_back()?;
            if self.freq[b as usize] > 0 {
                self.freq[b as usize] -= 1;
                self.main.push_front(b);
                continue;
            }
            self.queue[b as usize] = NONE;
            self.len -= 1;
            return Some(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(p: &mut S3Fifo, block: BlockId) {
        p.access(Access { block, position: 0, time_us: 0, parent: None });
    }

    #[test]
    fn one_hit_wonders_leave_through_the_small_queue_and_reused_blocks_stay() {
        let mut p = S3Fifo::new(100, 10);
        for b in 0..3 {
            access(&mut p, b);
            access(&mut p, b); // read again: promoted on its way out of the small queue
        }
        for b in 10..40 {
            access(&mut p, b); // a scan of one-off blocks
            while p.len() > 10 {
                p.evict();
            }
        }
        assert!((0..3).all(|b| p.contains(b)), "the reused blocks survived the scan");
        assert_eq!(p.len(), 10);
    }

    #[test]
    fn a_block_evicted_from_the_small_queue_returns_to_the_main_one() {
        let mut p = S3Fifo::new(100, 10);
        access(&mut p, 1);
        for b in 2..20 {
            access(&mut p, b);
            while p.len() > 10 {
                p.evict();
            }
        }
        assert!(!p.contains(1));
        access(&mut p, 1); // in the ghost: straight to the main queue
        assert_eq!(p.queue[1], MAIN);
    }
}
