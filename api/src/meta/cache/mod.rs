//! Cache RPCs of the meta plane, one file each: getCacheLocation, getCacheLocationLen,
//! getCacheLocationsByBackend, getCacheMeta, startWriteCache, finishWriteCache, removeCache,
//! trimCache. Each handler resolves the instance and checks that the caller may act on its group
//! ([`instance`]), validates every field against the configured bounds (keys, tokens, masks, the
//! size of the response it would build) before anything touches Valkey, calls one data-plane
//! function, and records metrics and the event log.

use crate::auth::Caller;
use crate::event_log::{Event, EventKind};
use crate::reply::{Rendered, Reply, WireJson};
use crate::state::AppState;
use axum::extract::State;
use kvcm_core::block_key::request_keys;
use kvcm_core::error::Result;
use kvcm_core::mask::BlockMask;
use kvcm_core::registry::Snapshot;
use kvcm_core::registry::validate;
use kvcm_core::wire::meta::*;
use kvcm_core::wire::{Empty, InstanceInfo, StorageType};
use std::sync::Arc;
use std::time::Instant;

mod finish_write_cache;
mod get_cache_location;
mod get_cache_location_len;
mod get_cache_locations_by_backend;
mod get_cache_meta;
mod remove_cache;
mod start_write_cache;
mod trim_cache;

pub use finish_write_cache::finish_write_cache;
pub use get_cache_location::get_cache_location;
pub use get_cache_location_len::get_cache_location_len;
pub use get_cache_locations_by_backend::get_cache_locations_by_backend;
pub use get_cache_meta::get_cache_meta;
pub use remove_cache::remove_cache;
pub use start_write_cache::start_write_cache;
pub use trim_cache::trim_cache;

/// The instance a request names, with the snapshot it was found in, once the caller is known to
/// be allowed to act on its group.
pub async fn instance(s: &AppState, caller: &Caller, id: &str) -> Result<(Arc<Snapshot>, Arc<InstanceInfo>)> {
    validate::instance_id(s.registry.lookup_limits(), id)?;
    let inst = s.registry.instance(id).await?;
    caller.authorize(&inst.instance_group_name, id)?;
    Ok((s.registry.snapshot(), inst))
}

/// The request's block keys, within `max_token_ids_per_request` and `max_keys_per_request`.
fn keys(s: &AppState, inst: &InstanceInfo, block_keys: &[i64], token_ids: &[i64]) -> Result<Vec<i64>> {
    s.registry.limits().token_ids(token_ids.len())?;
    request_keys(block_keys, token_ids, inst.block_size, s.config.max_keys_per_request)
}

/// How many specs each returned location carries at most, after `location_spec_names`.
fn specs_per_location(s: &AppState, inst: &InstanceInfo, filter: &[String]) -> Result<usize> {
    let limits = s.registry.limits();
    limits.count("location_spec_names", filter.len(), limits.max_specs_per_instance, "max_specs_per_instance")?;
    let specs = &inst.location_spec_infos;
    Ok(if filter.is_empty() { specs.len() } else { specs.iter().filter(|x| filter.contains(&x.name)).count() })
}
