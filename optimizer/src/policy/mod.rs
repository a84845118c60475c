//! Eviction policies behind one trait.
//!
//! [`EvictionPolicy`] is the simulator's view of a cache's bookkeeping, shaped like the worker's
//! reclaimer: blocks are accessed (inserted or refreshed), and when the cache is over its limit
//! the owner asks the policy for victims one at a time until it is back under. A policy owns the
//! resident set; it never decides *when* to evict (the replay loop does, see [`crate::replay`]),
//! except for time-based expiry ([`EvictionPolicy::expire`]).
//!
//! Every policy is sized up front for the trace's dense block ids (`0..distinct_blocks`), so the
//! hot path indexes vectors and never hashes. Priority queues use lazy deletion: an entry is
//! pushed on every change of a block's priority, stale entries are skipped when popped, and the
//! heap is rebuilt from the resident set when it grows past twice the resident count (amortised
//! O(1) extra work per access).
//!
//! | policy | victim | per access | per eviction |
//! |---|---|---|---|
//! | [`lru`] | least recently accessed | O(1) | O(1) |
//! | [`lfu`] | lowest LFU-DA priority (count + age), then least recent | O(log n) | O(log n) |
//! | [`ttl`] | everything older than the TTL at each arrival; then least recent | O(1) | O(1) |
//! | [`random_lru`] | least recent of K sampled resident blocks | O(1) | O(K) |
//! | [`leaf_lru`] | least recently accessed block with no resident child | O(log n) | O(log n) |
//! | [`s3fifo`] | small FIFO on probation, main FIFO with second chances, ghost of evictees | O(1) | O(1) amortised |
//! | [`leaf_lfu`] | lowest LFU-DA priority among blocks with no resident child | O(log n) | O(log n) |
//! | [`adaptive`] | lowest learned hit density by age among K sampled leaves | O(1) | O(K) |
//! | [`opt`] | next access furthest in the future (Belady) | O(log n) | O(log n) |

pub mod adaptive;
pub(crate) mod forest;
pub use kvcm_hit_density as hit_density;
pub mod leaf_lfu;
pub mod leaf_lru;
pub mod lfu;
pub(crate) mod list;
pub mod lru;
pub mod opt;
pub mod random_lru;
pub mod s3fifo;
pub mod ttl;

use std::fmt;
use std::str::FromStr;

use crate::trace::{BlockId, Position};

/// One block access as the replay loop reports it to a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// The block.
    pub block: BlockId,
    /// Position of this access in the flattened replay-order access sequence (also a logical
    /// clock: larger is more recent).
    pub position: Position,
    /// Arrival time of the request, in microseconds of trace time.
    pub time_us: u64,
    /// The block before this one in the same request, if any (its prefix parent).
    pub parent: Option<BlockId>,
}

/// A cache's eviction bookkeeping.
pub trait EvictionPolicy {
    /// The policy's name as used on the command line and in reports.
    fn name(&self) -> &'static str;

    /// Whether `block` is resident.
    fn contains(&self, block: BlockId) -> bool;

    /// Records an access: a resident block is refreshed, a missing one is inserted.
    fn access(&mut self, access: Access);

    /// Number of resident blocks.
    fn len(&self) -> usize;

    /// Whether no block is resident.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes the policy's next victim and returns it; `None` only when the cache is empty.
    fn evict(&mut self) -> Option<BlockId>;

    /// Removes blocks that have expired by `now_us`, before a request arriving at `now_us` is
    /// looked up. Returns how many were removed. Only time-based policies expire anything.
    fn expire(&mut self, _now_us: u64) -> u64 {
        0
    }
}

/// The policies the simulator knows, by command-line name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyKind {
    /// Least recently used.
    Lru,
    /// Least frequently used with dynamic aging (LFU-DA).
    Lfu,
    /// Expire after a time to live, then LRU.
    Ttl,
    /// Sampled LRU: the least recent of K random resident blocks.
    RandomLru,
    /// LRU over the leaves of the prefix tree.
    LeafLru,
    /// Belady's offline optimum.
    Opt,
    /// S3-FIFO: small, main and ghost FIFOs (a candidate of issue 12).
    S3Fifo,
    /// LFU-DA over the leaves of the prefix tree (a candidate of issue 12).
    LeafLfu,
    /// Leaves by learned hit density by age, in classes (kvcm-worker runs it live as
    /// `POLICY_ADAPTIVE`).
    Adaptive,
}

impl PolicyKind {
    /// Every policy, in report order.
    pub const ALL: [PolicyKind; 9] = [
        Self::Lru,
        Self::Lfu,
        Self::Ttl,
        Self::RandomLru,
        Self::LeafLru,
        Self::S3Fifo,
        Self::LeafLfu,
        Self::Adaptive,
        Self::Opt,
    ];

    /// The `reclaim_policy` that runs this policy live in kvcm (its LRU and LFU are the
    /// leaf-aware ones), or `None` for a policy that is simulated only.
    pub fn kvcm_policy(self) -> Option<&'static str> {
        match self {
            Self::LeafLru => Some("POLICY_LRU"),
            Self::LeafLfu => Some("POLICY_LFU"),
            Self::Ttl => Some("POLICY_TTL"),
            Self::Adaptive => Some("POLICY_ADAPTIVE"),
            _ => None,
        }
    }

    /// The name used on the command line and in CSV files.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lru => "lru",
            Self::Lfu => "lfu",
            Self::Ttl => "ttl",
            Self::RandomLru => "random_lru",
            Self::LeafLru => "leaf_lru",
            Self::Opt => "opt",
            Self::S3Fifo => "s3fifo",
            Self::LeafLfu => "leaf_lfu",
            Self::Adaptive => "adaptive",
        }
    }

    /// Rough relative cost per access, used to start expensive jobs first in a sweep.
    pub fn relative_cost(self) -> u32 {
        match self {
            Self::Lru | Self::Ttl | Self::S3Fifo => 1,
            Self::RandomLru | Self::Adaptive => 2,
            Self::Lfu | Self::LeafLru | Self::LeafLfu | Self::Opt => 3,
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PolicyKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let normalized = s.trim().to_ascii_lowercase().replace('-', "_");
        Self::ALL
            .into_iter()
            .find(|kind| kind.name() == normalized)
            .or(match normalized.as_str() {
                "belady" | "optimal" => Some(Self::Opt),
                "leaf" | "leaf_aware_lru" => Some(Self::LeafLru),
                "random" | "sampled_lru" => Some(Self::RandomLru),
                "lfu_da" => Some(Self::Lfu),
                _ => None,
            })
            .ok_or_else(|| {
                format!(
                    "unknown policy `{s}`; expected one of: lru, lfu, ttl, random_lru, leaf_lru, s3fifo, leaf_lfu, adaptive, opt"
                )
            })
    }
}

/// Parameters of the policies that have any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyParams {
    /// TTL: a block whose last access is more than this long before a request's arrival is
    /// expired before that request is looked up.
    pub ttl_us: u64,
    /// RandomLRU: how many resident blocks are sampled per eviction.
    pub random_samples: usize,
    /// RandomLRU: seed of the sampler (same seed, same trace → same result).
    pub seed: u64,
}

impl Default for PolicyParams {
    fn default() -> Self {
        Self { ttl_us: 300 * 1_000_000, random_samples: 5, seed: 0x6b76_636d }
    }
}

/// For each position of the flattened access sequence, the position of the next access to the
/// same block, or `u32::MAX` if there is none. Computed by one backward pass; shared by every
/// OPT replay of the same trace.
#[derive(Debug, Clone)]
pub struct NextUse(Vec<Position>);

impl NextUse {
    /// "Never accessed again".
    pub const NEVER: Position = Position::MAX;

    /// Computes next uses for `flat` over `distinct` block ids.
    pub fn compute(flat: &[BlockId], distinct: usize) -> NextUse {
        let mut upcoming = vec![Self::NEVER; distinct];
        let mut next = vec![Self::NEVER; flat.len()];
        for (position, &block) in flat.iter().enumerate().rev() {
            next[position] = upcoming[block as usize];
            upcoming[block as usize] = position as Position;
        }
        NextUse(next)
    }

    /// Next use after `position`.
    pub fn after(&self, position: Position) -> Position {
        self.0[position as usize]
    }
}

/// Whether a lazily-deleted heap holding `entries` for `resident` blocks has enough stale
/// entries to be worth rebuilding. Rebuilding at twice the resident count costs O(resident)
/// every O(resident) accesses: amortised O(1).
pub(crate) fn heap_needs_compaction(entries: usize, resident: usize) -> bool {
    entries > 2 * resident + 64
}

/// Rebuilds a lazily-deleted heap keeping only the entries for which `live` holds.
pub(crate) fn compact_heap<T: Ord>(
    heap: std::collections::BinaryHeap<T>,
    live: impl Fn(&T) -> bool,
) -> std::collections::BinaryHeap<T> {
    let mut entries = heap.into_vec();
    entries.retain(|entry| live(entry));
    std::collections::BinaryHeap::from(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_name_round_trips_and_aliases_are_accepted() {
        for kind in PolicyKind::ALL {
            assert_eq!(kind.name().parse::<PolicyKind>().unwrap(), kind);
        }
        assert_eq!("Random-LRU".parse::<PolicyKind>().unwrap(), PolicyKind::RandomLru);
        assert_eq!("belady".parse::<PolicyKind>().unwrap(), PolicyKind::Opt);
        let err = "fifo".parse::<PolicyKind>().unwrap_err();
        assert!(err.contains("random_lru, leaf_lru, s3fifo, leaf_lfu, adaptive, opt"), "{err}");
    }

    #[test]
    fn next_use_points_at_the_following_access_of_the_same_block() {
        let next = NextUse::compute(&[0, 1, 0, 2, 1], 3);
        let all: Vec<Position> = (0..5).map(|p| next.after(p)).collect();
        assert_eq!(all, vec![2, 4, NextUse::NEVER, NextUse::NEVER, NextUse::NEVER]);
    }
}
