//! kvcm-core: everything kvcm's processes share — wire (JSON) types, validation, the Valkey key
//! schema, Lua script bindings, the registry, configuration and password hashing.
//!
//! Binaries (`kvcm-api`, later `kvcm-worker`) stay thin: they load a [`config::Config`], connect
//! with [`valkey::connect`], open the [`registry::Registry`] and serve.

pub mod auth;
pub mod backend;
pub mod block_key;
pub mod config;
pub mod error;
pub mod faults;
/// The arithmetic of the `adaptive` eviction policy, one crate for the optimizer's simulation
/// and the worker's live ranking (so both rank leaves alike).
pub use kvcm_hit_density as hit_density;
pub mod keys;
pub mod limits;
pub mod mask;
pub mod registry;
pub mod scripts;
pub mod shutdown;
pub mod store;
pub mod telemetry;
pub mod valkey;
pub mod wire;

pub use error::{Error, Result};
