//! RandomLRU: approximate LRU by sampling, as Redis and Valkey do.
//!
//! Each eviction draws `samples` resident blocks uniformly at random (with replacement) and
//! evicts the least recently accessed of them. The sampler is a seeded `fastrand` generator, so
//! a replay is deterministic given the seed. The resident set is a dense vector with a position
//! index (swap-remove on eviction), which makes sampling O(1) per draw.

use super::{Access, EvictionPolicy};
use crate::trace::{BlockId, Position};

const ABSENT: u32 = u32::MAX;

/// Least recent of a random sample.
#[derive(Debug, Clone)]
pub struct RandomLru {
    resident: Vec<BlockId>,
    slot: Vec<u32>,
    last: Vec<Position>,
    samples: usize,
    rng: fastrand::Rng,
}

impl RandomLru {
    /// An empty cache over block ids `0..blocks`, sampling `samples` (at least 1) blocks per
    /// eviction with a generator seeded by `seed`.
    pub fn new(blocks: usize, samples: usize, seed: u64) -> Self {
        Self {
            resident: Vec::new(),
            slot: vec![ABSENT; blocks],
            last: vec![0; blocks],
            samples: samples.max(1),
            rng: fastrand::Rng::with_seed(seed),
        }
    }
}

impl EvictionPolicy for RandomLru {
    fn name(&self) -> &'static str {
        "random_lru"
    }

    fn contains(&self, block: BlockId) -> bool {
        self.slot[block as usize] != ABSENT
    }

    fn access(&mut self, access: Access) {
        let b = access.block as usize;
        self.last[b] = access.position;
        if self.slot[b] == ABSENT {
            self.slot[b] = self.resident.len() as u32;
            self.resident.push(access.block);
        }
    }

    fn len(&self) -> usize {
        self.resident.len()
    }

    fn evict(&mut self) -> Option<BlockId> {
        if self.resident.is_empty() {
            return None;
        }
        let mut victim_slot = self.rng.usize(..self.resident.len());
        for _ in 1..self.samples {
            let candidate = self.rng.usize(..self.resident.len());
            if self.last[self.resident[candidate] as usize] < self.last[self.resident[victim_slot] as usize] {
                victim_slot = candidate;
            }
        }
        let victim = self.resident.swap_remove(victim_slot);
        if let Some(&moved) = self.resident.get(victim_slot) {
            self.slot[moved as usize] = victim_slot as u32;
        }
        self.slot[victim as usize] = ABSENT;
        Some(victim)
    }
}
