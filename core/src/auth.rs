//! Credential primitives (DESIGN §6, docs/security.md):
//!
//! * **Account passwords**: Argon2id with the crate's default (OWASP) parameters and a salt
//!   from the operating system's CSPRNG, stored as PHC strings. Verification is slow on purpose;
//!   the API caches successful checks and runs the same verification for unknown users (against
//!   [`dummy_hash`]) so that a wrong user name costs what a wrong password costs.
//! * **API keys**: `kvcm_<key id: 16 hex>_<secret: 64 hex>`, 256 bits of CSPRNG entropy. Only
//!   the SHA-256 of the whole token is stored: a fast hash is enough for a secret that cannot be
//!   guessed, and it keeps Argon2 off the request path. Digests are compared in constant time.

use crate::error::{Error, Result};
use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use sha2::{Digest, Sha256};
use std::sync::OnceLock;
use subtle::ConstantTimeEq;

/// The prefix of every API key (lets secret scanners recognise leaked kvcm keys).
pub const API_KEY_PREFIX: &str = "kvcm_";

/// `N` bytes from the operating system's CSPRNG.
pub fn random_bytes<const N: usize>() -> Result<[u8; N]> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| Error::internal(format!("the system random source failed: {e}")))?;
    Ok(b)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hashes a password with a fresh random salt.
pub fn hash_password(password: &str) -> Result<String> {
    let salt = SaltString::encode_b64(&random_bytes::<16>()?).map_err(|e| Error::internal(e.to_string()))?;
    Ok(Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map_err(|e| Error::internal(format!("password hashing failed: {e}")))?
        .to_string())
}

/// True when `password` matches the stored PHC string.
pub fn verify_password(password: &str, phc: &str) -> bool {
    match PasswordHash::new(phc) {
        Ok(h) => Argon2::default().verify_password(password.as_bytes(), &h).is_ok(),
        Err(_) => false,
    }
}

static DUMMY: OnceLock<String> = OnceLock::new();

/// Computes [`dummy_hash`] (once; later calls do nothing). Servers call it at start, so that a
/// failure of the random source stops the start instead of weakening a login.
pub fn init_dummy_hash() -> Result<()> {
    if DUMMY.get().is_none() {
        let hash = hash_password(&hex(&random_bytes::<16>()?))?;
        let _ = DUMMY.set(hash);
    }
    Ok(())
}

/// A hash of a random password nobody knows, with the same parameters as real hashes: what an
/// unknown user's password is checked against, so that the check costs the same. Computed on
/// first use if [`init_dummy_hash`] was not called; should that fail, a fixed PHC string with
/// the same parameters and a known-unguessable input is used.
pub fn dummy_hash() -> &'static str {
    if DUMMY.get().is_none() {
        let _ = init_dummy_hash();
    }
    DUMMY.get().map(String::as_str).unwrap_or(FALLBACK_DUMMY)
}

/// Argon2id (default parameters) of 32 random bytes nobody kept.
const FALLBACK_DUMMY: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$hrwxGvPqDDv3l3oWMpMmYw$VyA4UXPOdSRBT1brVPp8kkgMOQnqmvFuXpp8rrK/lHM";

/// A new API key: `(key id, token)`. The token is shown to its creator once and never stored.
pub fn new_api_key() -> Result<(String, String)> {
    let id = hex(&random_bytes::<8>()?);
    let secret = hex(&random_bytes::<32>()?);
    let token = format!("{API_KEY_PREFIX}{id}_{secret}");
    Ok((id, token))
}

/// The key id of a well-formed API key token, or `None`.
pub fn api_key_id(token: &str) -> Option<&str> {
    let rest = token.strip_prefix(API_KEY_PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    let hex_of = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex_of(id, 16) && hex_of(secret, 64)).then_some(id)
}

/// The stored form of an API key: the hex SHA-256 of the whole token.
pub fn api_key_digest(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

/// Whether `token` is the key whose stored digest is `digest`, compared in constant time.
pub fn api_key_matches(token: &str, digest: &str) -> bool {
    api_key_digest(token).as_bytes().ct_eq(digest.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hashed_password_verifies_and_others_do_not() {
        let h = hash_password("correct horse").unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(!h.contains("correct horse"));
        assert!(verify_password("correct horse", &h));
        assert!(!verify_password("wrong horse", &h));
        assert_ne!(hash_password("correct horse").unwrap(), h, "salts differ");
    }

    #[test]
    fn the_dummy_hash_has_the_parameters_of_real_hashes_and_matches_nothing_guessable() {
        let real = hash_password("x").unwrap();
        let params = |h: &str| h.split('$').take(4).collect::<Vec<_>>().join("$");
        assert_eq!(params(dummy_hash()), params(&real));
        assert!(!verify_password("", dummy_hash()));
        assert!(!verify_password("password", dummy_hash()));
        // The fallback parses, so it costs a full verification too.
        assert!(PasswordHash::new(FALLBACK_DUMMY).is_ok());
        assert_eq!(params(FALLBACK_DUMMY), params(&real));
        assert!(!verify_password("", FALLBACK_DUMMY));
    }

    #[test]
    fn api_keys_are_random_well_formed_and_verified_by_digest() {
        let (id, token) = new_api_key().unwrap();
        let (id2, token2) = new_api_key().unwrap();
        assert_ne!(id, id2);
        assert_ne!(token, token2);
        assert_eq!(api_key_id(&token), Some(id.as_str()));
        assert_eq!(token.len(), API_KEY_PREFIX.len() + 16 + 1 + 64);
        let digest = api_key_digest(&token);
        assert!(api_key_matches(&token, &digest));
        assert!(!api_key_matches(&token2, &digest));
        assert!(!digest.contains(&token[API_KEY_PREFIX.len() + 17..]), "the secret is not stored");
        for bad in ["", "kvcm_", "kvcm_abc_def", &token[..token.len() - 1], &token.replace("kvcm_", "kvcx_")] {
            assert_eq!(api_key_id(bad), None, "{bad:?}");
        }
    }
}
