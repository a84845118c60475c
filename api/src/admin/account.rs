//! Account RPCs: addAccount, deleteAccount, listAccount. Passwords are hashed before they reach
//! Valkey and are never returned.

use crate::reply::{Reply, WireJson};
use crate::state::AppState;
use axum::extract::State;
use kvcm_core::wire::Empty;
use kvcm_core::wire::admin::*;
use kvcm_core::wire::common::TraceOnly;

pub async fn add(State(s): State<AppState>, WireJson(req): WireJson<AddAccountRequest>) -> Reply<Empty> {
    Reply(s.registry.add_account(&req.user_name, &req.password, req.role).await.map(|_| Empty {}))
}

pub async fn delete(State(s): State<AppState>, WireJson(req): WireJson<DeleteAccountRequest>) -> Reply<Empty> {
    Reply(s.registry.delete_account(&req.user_name).await.map(|_| Empty {}))
}

pub async fn list(State(s): State<AppState>, WireJson(_): WireJson<TraceOnly>) -> Reply<ListAccountResponse> {
    Reply(s.registry.list_accounts().await.map(|accounts| ListAccountResponse { accounts }))
}
