//! The data plane over Valkey (DESIGN §2.2–2.3, §3): one module per RPC, each a thin typed
//! wrapper around one Lua script (or, for reads, one HMGET), plus the compact record codec.
//!
//! Every function takes validated domain input (instance info from the registry, parsed keys
//! and masks); errors are [`crate::Error`]s with messages for the caller.

pub mod record;
