//! The bounds every request is held to (DESIGN §6, docs/security.md): one struct, filled from
//! the configuration, and the checks that apply it. Every check runs at the edge, before any
//! script, so a refused request changes nothing; every refusal is `INVALID_ARGUMENT` with a
//! message that names the field, the limit and the configuration key that sets it.
//!
//! What the bounds protect: memory and CPU of a frontend (a response is built in memory, so the
//! number of location specs it may hold — keys × specs — is capped), the registry (every
//! frontend holds all of it, so per-entity sizes are capped) and Valkey (keys per request).
//! The request body itself is capped by `max_body_bytes` before it is parsed, which bounds what
//! parsing can allocate.

use crate::error::{Error, Result};

/// Request bounds. `Default` is the embedded configuration's values.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most blocks one request may name (`block_keys`, or `token_ids` / `block_size`).
    pub max_keys_per_request: usize,
    /// Longest accepted `token_ids`.
    pub max_token_ids_per_request: usize,
    /// Most location specs (keys × specs per location) one response may carry.
    pub max_location_specs_per_response: usize,
    /// Most `location_spec_infos` of one instance.
    pub max_specs_per_instance: usize,
    /// Most `location_spec_groups` of one instance.
    pub max_spec_groups_per_instance: usize,
    /// Longest storage, group, spec, account and API key name.
    pub max_name_bytes: usize,
    /// Longest instance id.
    pub max_instance_id_bytes: usize,
    /// Longest free-text field (model deployment strings, user data, storage paths…).
    pub max_string_bytes: usize,
    /// Most entries of a list of names (storage candidates, credential scopes).
    pub max_list_items: usize,
    /// Largest stored instance group (its JSON, including `meta_indexer_config`).
    pub max_group_bytes: usize,
    pub write_timeout_default_s: u32,
    pub write_timeout_max_s: u32,
    pub usage_cache_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        crate::config::Config::load_from(None, &[]).expect("the embedded defaults load").0.limits()
    }
}

/// The hard caps of name and id lengths (what the configuration may raise them to).
pub const HARD_NAME_CAP: usize = 1024;

impl Limits {
    /// These limits with names and instance ids at their hard caps: for names of things that may
    /// exist already (created before an operator lowered `max_name_bytes`), which must stay
    /// reachable — to log in, to read, to remove.
    pub fn for_lookups(&self) -> Limits {
        Limits { max_name_bytes: HARD_NAME_CAP, max_instance_id_bytes: HARD_NAME_CAP, ..self.clone() }
    }

    /// A string field of at most `max_string_bytes`.
    pub fn string(&self, field: &str, value: &str) -> Result<()> {
        if value.len() > self.max_string_bytes {
            return Err(Error::invalid(format!(
                "{field} has {} bytes; at most {} are accepted (max_string_bytes)",
                value.len(),
                self.max_string_bytes
            )));
        }
        Ok(())
    }

    /// A list of at most `max` entries named `field` (`key` is the configuration key).
    pub fn count(&self, field: &str, n: usize, max: usize, key: &str) -> Result<()> {
        if n > max {
            return Err(Error::invalid(format!("{field} has {n} entries; at most {max} are accepted ({key})")));
        }
        Ok(())
    }

    /// `token_ids` of at most `max_token_ids_per_request`.
    pub fn token_ids(&self, n: usize) -> Result<()> {
        if n > self.max_token_ids_per_request {
            return Err(Error::invalid(format!(
                "token_ids has {n} tokens; at most {} are accepted in one request \
                 (max_token_ids_per_request); split the request",
                self.max_token_ids_per_request
            )));
        }
        Ok(())
    }

    /// A response of `keys` locations of `specs` specs each.
    pub fn response(&self, keys: usize, specs: usize) -> Result<()> {
        let total = keys.saturating_mul(specs.max(1));
        if total > self.max_location_specs_per_response {
            return Err(Error::invalid(format!(
                "this request would return {keys} locations of {specs} specs ({total} location specs); \
                 at most {} fit one response (max_location_specs_per_response): send fewer keys or \
                 filter with location_spec_names",
                self.max_location_specs_per_response
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_names_the_field_and_the_configuration_key() {
        let l = Limits::default();
        let e = l.string("model_deployment.extra", &"x".repeat(l.max_string_bytes + 1)).unwrap_err().to_string();
        assert!(e.contains("model_deployment.extra") && e.contains("max_string_bytes"), "{e}");
        l.string("f", &"x".repeat(l.max_string_bytes)).unwrap();
        let e = l.token_ids(l.max_token_ids_per_request + 1).unwrap_err().to_string();
        assert!(e.contains("max_token_ids_per_request"), "{e}");
        let e = l.response(l.max_location_specs_per_response, 2).unwrap_err().to_string();
        assert!(e.contains("max_location_specs_per_response"), "{e}");
        l.response(l.max_location_specs_per_response, 1).unwrap();
        let e = l.count("storage_candidates", 3, 2, "max_list_items").unwrap_err().to_string();
        assert!(e.contains("3 entries") && e.contains("max_list_items"), "{e}");
    }

    #[test]
    fn a_response_size_cannot_overflow() {
        assert!(Limits::default().response(usize::MAX, usize::MAX).is_err());
    }
}
