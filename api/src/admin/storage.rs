//! Storage RPCs: addStorage, updateStorage, enableStorage, disableStorage, removeStorage,
//! listStorage.

use crate::reply::{Reply, WireJson};
use crate::state::AppState;
use axum::extract::State;
use kvcm_core::Error;
use kvcm_core::wire::Empty;
use kvcm_core::wire::admin::*;
use kvcm_core::wire::common::TraceOnly;

fn required(storage: Option<StorageConfig>) -> Result<StorageConfig, Error> {
    storage.ok_or_else(|| Error::invalid("storage is required (a StorageConfig with global_unique_name and one spec)"))
}

pub async fn add(State(s): State<AppState>, WireJson(req): WireJson<AddStorageRequest>) -> Reply<Empty> {
    Reply(async { s.registry.add_storage(required(req.storage)?).await.map(|_| Empty {}) }.await)
}

pub async fn update(State(s): State<AppState>, WireJson(req): WireJson<UpdateStorageRequest>) -> Reply<Empty> {
    Reply(async { s.registry.update_storage(required(req.storage)?, req.force_update).await.map(|_| Empty {}) }.await)
}

pub async fn enable(State(s): State<AppState>, WireJson(req): WireJson<StorageNameRequest>) -> Reply<Empty> {
    Reply(s.registry.set_storage_available(&req.storage_unique_name, true).await.map(|_| Empty {}))
}

pub async fn disable(State(s): State<AppState>, WireJson(req): WireJson<StorageNameRequest>) -> Reply<Empty> {
    Reply(s.registry.set_storage_available(&req.storage_unique_name, false).await.map(|_| Empty {}))
}

pub async fn remove(State(s): State<AppState>, WireJson(req): WireJson<StorageNameRequest>) -> Reply<Empty> {
    Reply(s.registry.remove_storage(&req.storage_unique_name).await.map(|_| Empty {}))
}

pub async fn list(State(s): State<AppState>, WireJson(_): WireJson<TraceOnly>) -> Reply<ListStorageResponse> {
    Reply(s.registry.list_storages().await.map(|storage| ListStorageResponse { storage }))
}
