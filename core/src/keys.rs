//! The key schema: the only place Valkey key names are built (DESIGN §3).
//!
//! * Registry keys share the hash tag `{reg}` so registry scripts touch one slot:
//!   `<ns>:v1:{reg}:<name>`.
//! * Per-instance keys share the hash tag `{i:<instance_id>}`: `<ns>:v1:{i:<id>}:<name>`.
//!
//! `<ns>` is the configured namespace (default `kvcm`), so several deployments (or test runs)
//! can share one cluster. Instance ids never contain `{` or `}` (validated at the edge), so the
//! tag is always the intended one.

/// Keys of the registry (storages, groups, instances, accounts), all in one slot.
#[derive(Debug, Clone)]
pub struct RegistryKeys {
    /// String counter, bumped by every registry change.
    pub version: String,
    /// Hash: storage name → `StorageConfig` JSON.
    pub storages: String,
    /// Set: names of disabled storages.
    pub storages_disabled: String,
    /// Hash: group name → `InstanceGroup` JSON.
    pub groups: String,
    /// Hash: group name → number of registered instances.
    pub group_instances: String,
    /// Hash: instance id → `InstanceInfo` JSON.
    pub instances: String,
    /// Hash: instance id → registration fingerprint (what makes re-registration idempotent).
    pub instance_fp: String,
    /// Hash: user name → account JSON (role, password hash).
    pub accounts: String,
    /// Hash: storage name → numeric id (what compact block records store).
    pub storage_ids: String,
    /// String counter handing out storage ids (never reused).
    pub storage_id_seq: String,
}

impl RegistryKeys {
    pub fn new(namespace: &str) -> Self {
        let k = |name: &str| format!("{namespace}:v1:{{reg}}:{name}");
        RegistryKeys {
            version: k("version"),
            storages: k("storages"),
            storages_disabled: k("storages_disabled"),
            groups: k("groups"),
            group_instances: k("group_instances"),
            instances: k("instances"),
            instance_fp: k("instance_fp"),
            accounts: k("accounts"),
            storage_ids: k("storage_ids"),
            storage_id_seq: k("storage_id_seq"),
        }
    }

    /// Every registry key, in a fixed order (for scripts that read the whole registry).
    pub fn all(&self) -> [&str; 10] {
        [
            &self.version,
            &self.storages,
            &self.storages_disabled,
            &self.groups,
            &self.group_instances,
            &self.instances,
            &self.instance_fp,
            &self.accounts,
            &self.storage_ids,
            &self.storage_id_seq,
        ]
    }
}

/// The hash tag shared by every key of one instance.
pub fn instance_tag(instance_id: &str) -> String {
    format!("{{i:{instance_id}}}")
}

/// Prefix of every key of one instance: `<ns>:v1:{i:<id>}:`.
pub fn instance_prefix(namespace: &str, instance_id: &str) -> String {
    format!("{namespace}:v1:{}:", instance_tag(instance_id))
}

/// The cluster slot of a key (CRC16 of its hash tag, or of the whole key without one).
pub fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = match bytes.iter().position(|&b| b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    crc16_xmodem(hashed) % 16384
}

fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_matches_the_cluster_spec_examples() {
        // From the Redis cluster specification: CRC16("123456789") = 0x31C3.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("foo{}{bar}"), slot("foo{}{bar}"));
        assert_ne!(slot("foo{}{bar}"), slot("bar"));
    }

    #[test]
    fn every_registry_key_lands_in_one_slot() {
        let keys = RegistryKeys::new("kvcm");
        let first = slot(keys.all()[0]);
        assert!(keys.all().iter().all(|k| slot(k) == first));
        assert_eq!(first, slot("{reg}"));
    }

    #[test]
    fn instance_keys_hash_by_instance_id() {
        let a = format!("{}blocks", instance_prefix("kvcm", "inst-1"));
        let b = format!("{}sessions", instance_prefix("other", "inst-1"));
        assert_eq!(slot(&a), slot(&b));
        assert_eq!(slot(&a), slot("{i:inst-1}"));
    }
}
