//! Authentication (DESIGN §6). Accounts live in the registry with Argon2id password hashes.
//! Once any account exists the admin plane requires an admin account; the meta plane requires
//! any account only when `meta_auth` is on (Tair KVCM's meta port is open, and connectors send
//! no credentials).
//!
//! Credentials come as `Authorization: Basic base64(user:password)` or
//! `Authorization: Bearer user:password`. Missing or wrong credentials get HTTP 401 with a
//! `WWW-Authenticate` challenge; a user account on the admin plane gets 403.
//!
//! The admin plane refreshes the registry (one GET of its version) before every check, so
//! accounts changed through another frontend apply at once.
//!
//! Argon2 is slow on purpose, so successful checks are cached by the SHA-256 of the header
//! value, and a cached entry stays valid only while the account's stored hash is unchanged
//! (deleting or re-creating the account invalidates it).

use crate::reply::error_response;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode as Http, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use kvcm_core::wire::StatusCode;
use kvcm_core::wire::admin::AccountRole;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;

/// Verified credentials: digest of the header value → (user, stored hash it was checked against).
/// Argon2 checks run one at a time, so guessing passwords can occupy at most one core.
#[derive(Debug)]
pub struct AuthCache {
    verified: Mutex<HashMap<[u8; 32], (String, String)>>,
    argon2: tokio::sync::Semaphore,
}

impl Default for AuthCache {
    fn default() -> Self {
        AuthCache { verified: Mutex::default(), argon2: tokio::sync::Semaphore::new(1) }
    }
}

const CACHE_LIMIT: usize = 4096;

fn credentials(value: &str) -> Option<(String, String)> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    let raw = if scheme.eq_ignore_ascii_case("basic") {
        String::from_utf8(base64::engine::general_purpose::STANDARD.decode(rest.trim()).ok()?).ok()?
    } else if scheme.eq_ignore_ascii_case("bearer") {
        rest.trim().to_string()
    } else {
        return None;
    };
    let (user, password) = raw.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

fn unauthorized(msg: &str) -> Response {
    let mut r = error_response(Http::UNAUTHORIZED, StatusCode::INVALID_ARGUMENT, msg.to_string());
    r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"kvcm\""));
    r
}

/// Checks the request's credentials against the registry; returns the account's role.
async fn authenticate(state: &AppState, header_value: Option<String>) -> Result<AccountRole, Response> {
    let Some(value) = header_value.as_deref() else {
        return Err(unauthorized("authentication required: send Authorization: Basic or Bearer user:password"));
    };
    let Some((user, password)) = credentials(value) else {
        return Err(unauthorized(
            "malformed Authorization header: use Basic base64(user:password) or Bearer user:password",
        ));
    };
    let snap = state.registry.snapshot();
    let Some(acct) = snap.accounts.get(&user) else {
        return Err(unauthorized("unknown user or wrong password"));
    };
    let digest: [u8; 32] = Sha256::digest(value.as_bytes()).into();
    let cached = state.auth.verified.lock().unwrap_or_else(|p| p.into_inner()).get(&digest).cloned();
    if cached.as_ref().is_some_and(|(u, h)| *u == user && *h == acct.password_hash) {
        return Ok(acct.role);
    }
    let (hash, role) = (acct.password_hash.clone(), acct.role);
    let _one_at_a_time = state.auth.argon2.acquire().await;
    let ok =
        tokio::task::spawn_blocking(move || kvcm_core::auth::verify_password(&password, &hash)).await.unwrap_or(false);
    if !ok {
        return Err(unauthorized("unknown user or wrong password"));
    }
    let mut cache = state.auth.verified.lock().unwrap_or_else(|p| p.into_inner());
    if cache.len() >= CACHE_LIMIT {
        cache.clear();
    }
    cache.insert(digest, (user, acct.password_hash.clone()));
    Ok(role)
}

fn authorization(req: &Request) -> Option<String> {
    req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_string)
}

/// Admin plane: once accounts exist, only admins pass.
pub async fn admin_guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    // One GET of the registry version first: an account added or deleted through another
    // frontend must count here at once, not after the next refresh tick.
    if let Err(e) = state.registry.refresh().await {
        tracing::warn!(error = %e, "registry refresh before authentication failed; using the cached accounts");
    }
    if state.registry.snapshot().accounts.is_empty() {
        return next.run(req).await;
    }
    match authenticate(&state, authorization(&req)).await {
        Ok(AccountRole::ROLE_ADMIN) => next.run(req).await,
        Ok(_) => error_response(
            Http::FORBIDDEN,
            StatusCode::INVALID_ARGUMENT,
            "this account has ROLE_USER; the admin plane needs ROLE_ADMIN".into(),
        )
        .into_response(),
        Err(r) => r,
    }
}

/// Meta plane: with `meta_auth` on and accounts present, any account passes.
pub async fn meta_guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if !state.config.meta_auth || state.registry.snapshot().accounts.is_empty() {
        return next.run(req).await;
    }
    match authenticate(&state, authorization(&req)).await {
        Ok(_) => next.run(req).await,
        Err(r) => r,
    }
}

#[cfg(test)]
mod tests {
    use super::credentials;

    #[test]
    fn basic_and_bearer_credentials_are_read() {
        assert_eq!(credentials("Basic dXNlcjpwYTpzcw=="), Some(("user".into(), "pa:ss".into())));
        assert_eq!(credentials("bearer u:p"), Some(("u".into(), "p".into())));
        assert_eq!(credentials("Bearer nocolon"), None);
        assert_eq!(credentials("Digest x"), None);
    }
}
