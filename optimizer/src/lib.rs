//! `kvcm-optimizer`: offline trace replay for capacity planning.
//!
//! An operator about to buy cache capacity wants to know how much hit rate each block of capacity
//! buys, and which eviction policy to run. This crate answers by replaying a recorded access
//! trace against simulated caches:
//!
//! * [`trace`] reads Mooncake, Qwen-Bailian and kvcm event-log traces line by line and interns
//!   every block into a dense `u32` id, producing a compact [`Trace`] in replay order.
//! * [`policy`] holds the eviction policies (LRU, LFU-DA, TTL, sampled random LRU, leaf-aware LRU
//!   over the prefix tree, and Belady's offline optimum) behind one [`EvictionPolicy`] trait.
//! * [`replay`] defines the replay semantics (see `docs/optimizer.md`) and runs one policy at one
//!   capacity.
//! * [`sweep`] runs many capacities × policies in parallel; [`report`] turns the results into
//!   CSV, a recommendation and the tokens / GPU seconds saved; [`plot`] draws hit-rate curves.
//! * [`cli`] is the command line (`sweep`, `replay`, `stats`, `bench`); the binary only calls it.
//!
//! Everything here is deterministic: the same trace, capacities and seed give the same numbers.

pub mod cli;
pub mod plot;
pub mod policy;
pub mod replay;
pub mod report;
pub mod sweep;
pub mod trace;
pub mod workload;

pub use policy::{EvictionPolicy, PolicyKind, PolicyParams};
pub use replay::{ReplayStats, replay, simulate};
pub use trace::{BlockId, Trace, TraceError, TraceFormat};
