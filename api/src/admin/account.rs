//! Credential RPCs: addAccount, deleteAccount, listAccount (Tair's), and the kvcm extensions
//! createApiKey, listApiKeys, revokeApiKey. Passwords are hashed before they reach Valkey and
//! are never returned; an API key's token is returned once, by createApiKey, and only its
//! SHA-256 is stored.

use crate::reply::{Reply, WireJson};
use crate::state::AppState;
use axum::extract::State;
use kvcm_core::wire::Empty;
use kvcm_core::wire::admin::*;
use kvcm_core::wire::common::TraceOnly;

pub async fn add(State(s): State<AppState>, WireJson(req): WireJson<AddAccountRequest>) -> Reply<Empty> {
    Reply(
        s.registry
            .add_account(&req.user_name, &req.password, req.role, &req.instance_groups, s.config.min_password_length)
            .await
            .map(|_| Empty {}),
    )
}

pub async fn delete(State(s): State<AppState>, WireJson(req): WireJson<DeleteAccountRequest>) -> Reply<Empty> {
    Reply(s.registry.delete_account(&req.user_name).await.map(|_| Empty {}))
}

pub async fn list(State(s): State<AppState>, WireJson(_): WireJson<TraceOnly>) -> Reply<ListAccountResponse> {
    Reply(s.registry.list_accounts().await.map(|accounts| ListAccountResponse { accounts }))
}

pub async fn create_api_key(
    State(s): State<AppState>,
    WireJson(req): WireJson<CreateApiKeyRequest>,
) -> Reply<CreateApiKeyResponse> {
    Reply(
        s.registry
            .create_api_key(&req.name, req.role, &req.instance_groups)
            .await
            .map(|(api_key, token)| CreateApiKeyResponse { token, api_key }),
    )
}

pub async fn list_api_keys(State(s): State<AppState>, WireJson(_): WireJson<TraceOnly>) -> Reply<ListApiKeysResponse> {
    Reply(s.registry.list_api_keys().await.map(|api_keys| ListApiKeysResponse { api_keys }))
}

pub async fn revoke_api_key(State(s): State<AppState>, WireJson(req): WireJson<RevokeApiKeyRequest>) -> Reply<Empty> {
    Reply(s.registry.revoke_api_key(&req.key_id).await.map(|_| Empty {}))
}
