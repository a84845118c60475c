//! Password hashing for accounts: Argon2id with the crate's default (OWASP) parameters,
//! stored as PHC strings. Verification is slow on purpose; the API caches successful checks.

use crate::error::{Error, Result};
use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};

/// Hashes a password with a fresh random salt.
pub fn hash_password(password: &str) -> Result<String> {
    let mut salt_bytes = [0u8; 16];
    for b in salt_bytes.iter_mut() {
        *b = fastrand::u8(..);
    }
    let salt = SaltString::encode_b64(&salt_bytes).map_err(|e| Error::internal(e.to_string()))?;
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
}
