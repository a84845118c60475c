//! Credentials in the registry: accounts (Argon2id password hashes) and API keys (SHA-256 of the
//! token), each with a role and, for ROLE_USER, the instance groups it may act on.
//!
//! Invariants, kept by the Lua scripts so that no pair of frontends can break them: the first
//! account is an admin unless an admin API key exists, and the last admin credential (account or
//! API key) can never be deleted or revoked (once an admin exists the admin plane requires one —
//! removing it would lock operators out, or open the plane if it fell back to anonymous). Passwords and tokens never reach Valkey; a token is returned once, at creation.

use super::{Kind, Registry, validate};
use crate::error::{Error, Result};
use crate::scripts;
use crate::wire::StatusCode;
use crate::wire::admin::{Account, AccountRole, ApiKey};
use serde::{Deserialize, Serialize};

/// Longest accepted password (Argon2 hashes any length; this bounds the work per attempt).
pub const MAX_PASSWORD_BYTES: usize = 1024;

/// An account as stored: the password only as an Argon2id PHC string. (`Debug` omits the hash.)
#[derive(Clone, Serialize, Deserialize)]
pub struct StoredAccount {
    pub user_name: String,
    pub role: AccountRole,
    pub password_hash: String,
    /// Instance groups a ROLE_USER account may act on (`*` = all); accounts stored before
    /// scopes existed have none.
    #[serde(default)]
    pub instance_groups: Vec<String>,
}

/// An API key as stored: the SHA-256 of its token, never the token. (`Debug` omits the digest.)
#[derive(Clone, Serialize, Deserialize)]
pub struct StoredApiKey {
    pub key_id: String,
    pub name: String,
    pub role: AccountRole,
    #[serde(default)]
    pub instance_groups: Vec<String>,
    pub token_sha256: String,
    pub create_time_ms: i64,
}

impl std::fmt::Debug for StoredAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredAccount")
            .field("user_name", &self.user_name)
            .field("role", &self.role)
            .field("instance_groups", &self.instance_groups)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for StoredApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredApiKey")
            .field("key_id", &self.key_id)
            .field("name", &self.name)
            .field("role", &self.role)
            .field("instance_groups", &self.instance_groups)
            .finish_non_exhaustive()
    }
}

impl StoredApiKey {
    fn listed(&self) -> ApiKey {
        ApiKey {
            key_id: self.key_id.clone(),
            name: self.name.clone(),
            role: self.role,
            instance_groups: self.instance_groups.clone(),
            create_time_ms: self.create_time_ms,
        }
    }
}

/// Checks a new password against the configured minimum length and the fixed maximum.
pub fn check_password(password: &str, min_len: usize) -> Result<()> {
    if password.chars().count() < min_len {
        return Err(Error::invalid(format!("password must have at least {min_len} characters (min_password_length)")));
    }
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(Error::invalid(format!("password must have at most {MAX_PASSWORD_BYTES} bytes")));
    }
    Ok(())
}

impl Registry {
    /// Adds an account. `instance_groups` scopes a ROLE_USER account (see [`validate::scopes`]).
    pub async fn add_account(
        &self,
        user: &str,
        password: &str,
        role: AccountRole,
        instance_groups: &[String],
        min_password_len: usize,
    ) -> Result<()> {
        validate::name(&self.limits, "user_name", user)?;
        check_password(password, min_password_len)?;
        let instance_groups = validate::scopes(&self.limits, role, instance_groups)?;
        // Argon2 off the async threads (it takes tens of milliseconds).
        let pw = password.to_string();
        let password_hash = tokio::task::spawn_blocking(move || crate::auth::hash_password(&pw))
            .await
            .map_err(|e| Error::internal(format!("password hashing stopped: {e}")))??;
        let acct = StoredAccount { user_name: user.into(), role, password_hash, instance_groups };
        let json = serde_json::to_string(&acct).map_err(|e| Error::internal(e.to_string()))?;
        let k = &self.keys;
        self.write(&scripts::REGISTRY_ADD_ACCOUNT, &[&k.version, &k.accounts, &k.api_keys], &[user, &json, role.name()])
            .await
            .map(drop)
    }

    pub async fn delete_account(&self, user: &str) -> Result<()> {
        validate::name(&self.lookup_limits, "user_name", user)?;
        let k = &self.keys;
        let removed = k.removed("account", user);
        self.write(
            &scripts::REGISTRY_DELETE_ACCOUNT,
            &[&k.version, &k.accounts, &k.api_keys, &removed],
            &[user, &crate::keys::call_id()],
        )
        .await
        .map(drop)
    }

    pub async fn list_accounts(&self) -> Result<Vec<Account>> {
        Ok(self
            .current()
            .await?
            .accounts
            .values()
            .map(|a| Account {
                user_name: a.user_name.clone(),
                role: a.role,
                instance_groups: a.instance_groups.clone(),
            })
            .collect())
    }

    /// Creates the bootstrap admin if no account of that name exists; an existing account is
    /// never changed (its password may have been rotated since). Returns whether it was created.
    pub async fn ensure_admin(&self, user: &str, password: &str, min_password_len: usize) -> Result<bool> {
        let snap = self.current().await?;
        if let Some(existing) = snap.accounts.get(user) {
            if existing.role != AccountRole::ROLE_ADMIN {
                return Err(Error::invalid(format!(
                    "account '{user}' exists with ROLE_USER, so it cannot be the bootstrap admin; choose another \
                     bootstrap_admin_user"
                )));
            }
            return Ok(false);
        }
        match self.add_account(user, password, AccountRole::ROLE_ADMIN, &[], min_password_len).await {
            Ok(()) => Ok(true),
            // Another frontend starting at the same time created it first.
            Err(Error::Status { code: StatusCode::DUPLICATE_ENTITY, .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    // ---- API keys ----

    /// Creates an API key and returns it with its token (shown once; only its digest is kept).
    pub async fn create_api_key(
        &self,
        name: &str,
        role: AccountRole,
        instance_groups: &[String],
    ) -> Result<(ApiKey, String)> {
        validate::name(&self.limits, "name", name)?;
        let instance_groups = validate::scopes(&self.limits, role, instance_groups)?;
        // Ids are 64 random bits: a collision is all but impossible, and answered by drawing again.
        let mut attempts = 3;
        loop {
            let (key_id, token) = crate::auth::new_api_key()?;
            let key = StoredApiKey {
                key_id: key_id.clone(),
                name: name.into(),
                role,
                instance_groups: instance_groups.clone(),
                token_sha256: crate::auth::api_key_digest(&token),
                create_time_ms: crate::store::now_ms() as i64,
            };
            let json = serde_json::to_string(&key).map_err(|e| Error::internal(e.to_string()))?;
            let k = &self.keys;
            match self.write(&scripts::REGISTRY_ADD_API_KEY, &[&k.version, &k.api_keys], &[&key_id, &json]).await {
                Ok(_) => return Ok((key.listed(), token)),
                Err(Error::Status { code: StatusCode::DUPLICATE_ENTITY, .. }) if attempts > 1 => attempts -= 1,
                Err(e) => return Err(e),
            }
        }
    }

    pub async fn list_api_keys(&self) -> Result<Vec<ApiKey>> {
        let snap = self.current().await?;
        let mut keys: Vec<ApiKey> = snap.api_keys.values().map(StoredApiKey::listed).collect();
        keys.sort_by(|a, b| (a.create_time_ms, &a.key_id).cmp(&(b.create_time_ms, &b.key_id)));
        Ok(keys)
    }

    pub async fn revoke_api_key(&self, key_id: &str) -> Result<()> {
        if key_id.len() != 16 || !key_id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::invalid("key_id must be the 16 hex digits listApiKeys shows"));
        }
        let k = &self.keys;
        let removed = k.removed("api_key", key_id);
        self.write(
            &scripts::REGISTRY_REVOKE_API_KEY,
            &[&k.version, &k.api_keys, &k.accounts, &removed],
            &[key_id, &crate::keys::call_id()],
        )
        .await
        .map(drop)
    }

    /// The stored API key with this id, refreshing once if it is not known here (a key created
    /// through another frontend works at once); unknown ids are remembered briefly.
    pub async fn api_key(&self, key_id: &str) -> Result<Option<StoredApiKey>> {
        self.lookup(Kind::ApiKey, key_id, |s| s.api_keys.get(key_id).cloned()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_length_is_counted_in_characters_and_bounded_in_bytes() {
        check_password("12345678", 8).unwrap();
        assert!(check_password("1234567", 8).unwrap_err().to_string().contains("min_password_length"));
        check_password("ééééé", 5).unwrap();
        assert!(check_password(&"x".repeat(MAX_PASSWORD_BYTES + 1), 8).is_err());
    }

    #[test]
    fn accounts_stored_before_scopes_existed_still_load() {
        let a: StoredAccount =
            serde_json::from_str(r#"{"user_name":"u","role":"ROLE_USER","password_hash":"$argon2id$x"}"#).unwrap();
        assert!(a.instance_groups.is_empty());
    }
}
