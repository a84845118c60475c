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
    /// Set: names of storages no worker found healthy in its last check (derived from
    /// `storage_health`).
    pub storages_unhealthy: String,
    /// Hash: `<storage>\n<worker id>` → `<1|0>:<unix ms>`, each worker's last health verdict on
    /// each storage (`registry_set_storage_health.lua`).
    pub storage_health: String,
    /// Hash: group name → `InstanceGroup` JSON.
    pub groups: String,
    /// Hash: group name → number of registered instances.
    pub group_instances: String,
    /// Hash: instance id → `InstanceInfo` JSON.
    pub instances: String,
    /// Hash: instance id → registration fingerprint (what makes re-registration idempotent).
    pub instance_fp: String,
    /// Hash: user name → account JSON (role, password hash, scopes).
    pub accounts: String,
    /// Hash: API key id → key JSON (role, scopes, SHA-256 of the token; never the token).
    pub api_keys: String,
    /// Hash: storage name → numeric id (what compact block records store).
    pub storage_ids: String,
    /// String counter handing out storage ids (never reused).
    pub storage_id_seq: String,
    /// Hash: id → `StorageConfig` JSON of each removed storage, kept so that a straggler's
    /// files (a write session a frontend started from a registry copy a moment old, a dead
    /// letter re-driven later) can still be deleted. Not part of the snapshot: read by id, by
    /// the deleter only. Bounded by the id space (ids are never reused).
    pub removed_storages: String,
}

impl RegistryKeys {
    pub fn new(namespace: &str) -> Self {
        let k = |name: &str| format!("{namespace}:v1:{{reg}}:{name}");
        RegistryKeys {
            version: k("version"),
            storages: k("storages"),
            storages_disabled: k("storages_disabled"),
            storages_unhealthy: k("storages_unhealthy"),
            storage_health: k("storage_health"),
            groups: k("groups"),
            group_instances: k("group_instances"),
            instances: k("instances"),
            instance_fp: k("instance_fp"),
            accounts: k("accounts"),
            api_keys: k("api_keys"),
            storage_ids: k("storage_ids"),
            storage_id_seq: k("storage_id_seq"),
            removed_storages: k("removed_storages"),
        }
    }

    /// String `<call id>\n<reply>`, for 60 s after a removal of `name` went through (`kind`:
    /// `storage`, `group`, `instance`, `account`, `api_key`): a resend of that call (same call
    /// id, [`call_id`]) answers the first run's reply instead of "does not exist".
    pub fn removed(&self, kind: &str, name: &str) -> String {
        let prefix = self.version.strip_suffix("version").unwrap_or(&self.version);
        format!("{prefix}removed:{kind}:{name}")
    }

    /// Every registry key, in a fixed order (for scripts that read the whole registry).
    pub fn all(&self) -> [&str; 13] {
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
            &self.storages_unhealthy,
            &self.api_keys,
            &self.storage_health,
        ]
    }
}

/// A fresh id for one call of a script that must tell its own resend (the redis client sending
/// the same command again after a lost connection) from another call: 128 random bits.
pub fn call_id() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

/// Keys counting failed password checks (shared by every frontend), under the tag `{auth}`:
/// `<ns>:v1:{auth}:fu:<user>`, `…:fa:<client address>` and `…:fp:<user>:<address>` (hashes
/// `n` = failures, `until` = back-off end in ms), and `…:ok:<user>:<address>` (an address that
/// logged in as the user recently). User names are validated names and addresses are IP
/// literals or /64 prefixes, so neither can contain a brace.
#[derive(Debug, Clone)]
pub struct AuthKeys {
    prefix: String,
}

impl AuthKeys {
    pub fn new(namespace: &str) -> Self {
        AuthKeys { prefix: format!("{namespace}:v1:{{auth}}:") }
    }
    pub fn user_failures(&self, user: &str) -> String {
        format!("{}fu:{user}", self.prefix)
    }
    pub fn address_failures(&self, address: &str) -> String {
        format!("{}fa:{address}", self.prefix)
    }
    pub fn pair_failures(&self, user: &str, address: &str) -> String {
        format!("{}fp:{user}:{address}", self.prefix)
    }
    pub fn trusted_address(&self, user: &str, address: &str) -> String {
        format!("{}ok:{user}:{address}", self.prefix)
    }
}

/// Keys of one instance, all under its hash tag (see `lua/lib/record.lua` for the layouts).
#[derive(Debug, Clone)]
pub struct InstanceKeys {
    prefix: String,
    /// Hash: block key (8 bytes big-endian) → block record.
    pub blocks: String,
    /// Hash: `b<storage id>` / `n<storage id>` → serving bytes / blocks.
    pub usage: String,
    /// Zset: leaf block → last access (ms).
    pub lru: String,
    /// Zset: leaf block → access count.
    pub lfu: String,
    /// Zset: interior block → last access (ms) as the deepest block of a read.
    pub itouch: String,
    /// Hash: block key → its read count for LFU (reads that ended at it plus its evicted
    /// children's counts; kept in groups that reclaim by LFU, `lua/lib/record.lua`).
    pub icount: String,
    /// Hash, in groups that reclaim by `adaptive` (`lua/evict.lua`): `h<cell>` / `e<cell>` →
    /// hits / evictions counted at that class and age bucket (`hit_density::cell`; integers in
    /// thousandths of an event, decayed); `events` → events since the last decay; `gseq` → evicted shared blocks so far; `peak` →
    /// the most serving blocks seen; `table` → the density table (for people); `ranks` → its
    /// cells' ranks by density, what the evictions compare (`hit_density::ranks_field`).
    pub adaptive: String,
    /// Zset, in groups that reclaim by `adaptive`: evicted shared block → its eviction's number
    /// in `gseq`; the latest tenth of the peak serving count (`lua/evict.lua`).
    pub ighost: String,
    /// Stream: locations queued for physical deletion.
    pub del: String,
    /// Zset: open write session id → deadline (unix s).
    pub sessions: String,
    /// String counter of session numbers.
    pub seq: String,
    /// Hash: packed file id → number of blocks written into it.
    pub files: String,
    /// Stream: deletions that failed too often, with the reason.
    pub del_dead: String,
    /// Hash: deletion entry id → failed attempts, `<id>:t` → when it may be retried (ms),
    /// `<id>:hung` → 1 once an attempt timed out (until it succeeds or is dead-lettered).
    pub del_fail: String,
    /// String: the reclaim lease (`<token>:<worker>`), set NX PX.
    pub lease: String,
    /// String counter handing out lease fencing tokens.
    pub lease_seq: String,
    /// String: the last evict call's id and reply, for a minute (`lua/evict.lua`).
    pub evict_last: String,
    /// Hash: engine reporter id (`<storage type>|<host_ip_port>`) → reporter record; `#<idx>` →
    /// reporter id; `#seq` → last index handed out; `%<medium>` → medium id, `%seq` the last
    /// handed out; `#ver` → a token replaced on every change but heartbeat times (`#vseq` its
    /// counter) (`lua/report_event.lua`).
    pub reporters: String,
    /// Hash: block key (8 bytes big-endian) → which engine reporters hold it (13-byte records:
    /// reporter index, lifecycle epoch, generation, medium id).
    pub engine: String,
    /// Hash: block key, reporter index, medium id → that engine entry's specs and URIs.
    pub engine_specs: String,
}

impl InstanceKeys {
    pub fn new(namespace: &str, instance_id: &str) -> Self {
        let prefix = instance_prefix(namespace, instance_id);
        let k = |name: &str| format!("{prefix}{name}");
        InstanceKeys {
            blocks: k("blocks"),
            usage: k("usage"),
            lru: k("lru"),
            lfu: k("lfu"),
            itouch: k("itouch"),
            icount: k("icount"),
            adaptive: k("adaptive"),
            ighost: k("ighost"),
            del: k("del"),
            sessions: k("sessions"),
            seq: k("seq"),
            files: k("files"),
            del_dead: k("del_dead"),
            del_fail: k("del_fail"),
            lease: k("lease"),
            lease_seq: k("lease_seq"),
            evict_last: k("evict_last"),
            reporters: k("reporters"),
            engine: k("engine"),
            engine_specs: k("engine_specs"),
            prefix,
        }
    }

    /// The record of one write session.
    pub fn session(&self, session_id: &str) -> String {
        format!("{}s:{session_id}", self.prefix)
    }

    /// KEYS of `finish_write_cache.lua` (finish and expiry) for one session's record key.
    pub fn finish_keys<'a>(&'a self, session_key: &'a str) -> [&'a str; 8] {
        [&self.blocks, session_key, &self.sessions, &self.usage, &self.lru, &self.lfu, &self.itouch, &self.del]
    }

    /// A trash hash receiving every block of a trim.
    pub fn trash(&self, id: &str) -> String {
        format!("{}trash:{id}", self.prefix)
    }

    /// Every fixed key (for slot checks).
    pub fn all(&self) -> Vec<&str> {
        vec![
            &self.blocks,
            &self.usage,
            &self.lru,
            &self.lfu,
            &self.itouch,
            &self.icount,
            &self.adaptive,
            &self.ighost,
            &self.del,
            &self.sessions,
            &self.seq,
            &self.files,
            &self.reporters,
            &self.engine,
            &self.engine_specs,
        ]
    }
}

/// The counter `durability = "replica_ack"` bumps after every write script of an instance (see
/// `store::durability`), named from any key of the instance: `<ns>:v1:{i:<id>}:ack`.
pub fn ack_key(instance_key: &str) -> String {
    match instance_key.find("}:") {
        Some(end) => format!("{}ack", &instance_key[..end + 2]),
        None => format!("{instance_key}:ack"),
    }
}

/// The instance id a per-instance key belongs to, if it is one of `namespace`'s.
pub fn instance_of_key<'a>(namespace: &str, key: &'a str) -> Option<&'a str> {
    let rest = key.strip_prefix(namespace)?.strip_prefix(":v1:{i:")?;
    let end = rest.find("}:")?;
    Some(&rest[..end])
}

/// Keys of one instance group's reclaim coordination, under the tag `{g:<group>}`.
#[derive(Debug, Clone)]
pub struct GroupKeys {
    /// String: the group's reclaim lease (`<token>:<worker>`), so one worker reclaims a group
    /// at a time and the excess is not evicted twice.
    pub lease: String,
    pub lease_seq: String,
}

impl GroupKeys {
    pub fn new(namespace: &str, group: &str) -> Self {
        let prefix = format!("{namespace}:v1:{{g:{group}}}:");
        GroupKeys { lease: format!("{prefix}lease"), lease_seq: format!("{prefix}lease_seq") }
    }
}

/// A block key as stored in Valkey: 8 bytes, big-endian.
pub fn block_field(key: i64) -> [u8; 8] {
    key.to_be_bytes()
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
    fn the_ack_counter_is_in_the_instance_slot() {
        let k = InstanceKeys::new("kvcm", "a:b");
        assert_eq!(ack_key(&k.blocks), "kvcm:v1:{i:a:b}:ack");
        assert_eq!(slot(&ack_key(&k.blocks)), slot(&k.blocks));
    }

    #[test]
    fn slot_matches_the_cluster_spec_examples() {
        // From the Redis cluster specification: CRC16("123456789") = 0x31C3.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        // An empty first tag means the whole key is hashed.
        assert_eq!(slot("foo{}{bar}"), crc16_xmodem(b"foo{}{bar}") % 16384);
        assert_ne!(slot("foo{}{bar}"), slot("bar"));
        assert_eq!(slot("foo{bar}{zap}"), slot("bar"));
    }

    #[test]
    fn every_registry_key_lands_in_one_slot() {
        let keys = RegistryKeys::new("kvcm");
        let first = slot(keys.all()[0]);
        assert!(keys.all().iter().all(|k| slot(k) == first));
        for k in [keys.removed_storages.clone(), keys.removed("storage", "a{b}"), keys.removed("instance", "x/y")] {
            assert_eq!(slot(&k), first, "{k}");
        }
        assert_eq!(first, slot("{reg}"));
    }

    #[test]
    fn every_auth_key_lands_in_one_slot() {
        let k = AuthKeys::new("kvcm");
        let s = slot(&k.user_failures("root"));
        assert_eq!(s, slot(&k.address_failures("10.0.0.1")));
        assert_eq!(s, slot(&k.trusted_address("root", "::1")));
        assert_eq!(s, slot(&k.pair_failures("root", "10.0.0.1")));
        assert_eq!(s, slot("{auth}"));
    }

    #[test]
    fn every_key_of_an_instance_shares_its_slot() {
        for id in ["inst-1", "Qwen/Qwen2-7B", "a:b@c"] {
            let k = InstanceKeys::new("kvcm", id);
            let slot0 = slot(&k.blocks);
            for key in k.all().into_iter().chain([k.session("123").as_str(), k.trash("9").as_str()]) {
                assert_eq!(slot(key), slot0, "{key}");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn any_valid_instance_id_keeps_its_keys_in_one_slot_and_is_recovered_from_them(
            id in "[A-Za-z0-9_:@+=!$*,;~-][A-Za-z0-9._:@+=!$*,;~-]{0,20}(/[A-Za-z0-9_:@+=~-][A-Za-z0-9._:@+=~-]{0,10}){0,3}",
        ) {
            // Ids the validator accepts: printable ASCII without braces and the like, in
            // segments that are never "." or "..".
            proptest::prop_assume!(crate::registry::validate::instance_id(&crate::limits::Limits::default(), &id).is_ok());
            let k = InstanceKeys::new("ns", &id);
            let s = slot(&k.blocks);
            for key in k.all().into_iter().chain([k.session("1").as_str(), k.trash("t").as_str(), k.del_dead.as_str()]) {
                proptest::prop_assert_eq!(slot(key), s);
                proptest::prop_assert_eq!(instance_of_key("ns", key), Some(id.as_str()));
            }
            proptest::prop_assert_eq!(instance_of_key("other", &k.blocks), None);
        }
    }

    #[test]
    fn instance_keys_hash_by_instance_id() {
        let a = format!("{}blocks", instance_prefix("kvcm", "inst-1"));
        let b = format!("{}sessions", instance_prefix("other", "inst-1"));
        assert_eq!(slot(&a), slot(&b));
        assert_eq!(slot(&a), slot("{i:inst-1}"));
    }
}
