//! Storage backends (DESIGN §5): how a location on a storage becomes URIs, and how the worker
//! deletes a block there and probes the storage's health, each under a timeout. One
//! [`StorageBackend`] per kind of storage, each in its own file (`file.rs`, `mooncake.rs`,
//! `mem_pool.rs`, `event_report.rs`):
//!
//! * `file` (NFS, local disk, EFS, Lustre): `file://<name><root_path><instance>/<spec>/<hex key>?size=n`
//! * `hf3fs` (3FS mount): the same layout under `<mountpoint><root_dir>`, scheme `hf3fs`
//! * `mooncake`: `mooncake://<name>/?key=<instance>/<spec>/<hex key>&size=n` (metadata only)
//!
//! With `key_count_per_file > 1`, consecutive new blocks of one write share a file named after
//! its first block and a hash of its members (`<hex first>_<hash>`), and the URI carries
//! `blkid=j` (byte offset `j × size`). Query parameters are sorted alphabetically. The host is
//! the storage's `global_unique_name`. URIs are a pure function of the storage config, the
//! instance and the compact record, so a read returns exactly what the write handed out.
//!
//! # Directories of file-like storages
//!
//! This module is the one place where an instance (or spec) name becomes a directory:
//! [`path_segment`] is used by URI building ([`StorageBackend::uri_prefix`]), by the worker's deleter
//! ([`StorageBackend::unlink`], relative to the open root) and auditor ([`StorageBackend::instance_dir`]) and by
//! its health probe ([`StorageBackend::health_probe_path`]).
//! Invariants, all proved by the tests below:
//!
//! * **One segment, injective.** `<instance>` and `<spec>` above are `path_segment(name)`: never
//!   empty, never `.` or `..`, never containing `/`, and distinct names give distinct segments.
//!   So every instance owns exactly `<root><segment>/` and no two instances share or nest a
//!   directory (instance ids may contain `/`: `a` and `a/b` become the siblings `a` and `a~2Fb`).
//! * **Ordinary names are unchanged.** Letters, digits and `-` `.` `_` `:` `@` are kept as they
//!   are (a leading `.` excepted); every other byte — `/`, the escape `~` itself, `+`, `=`, `!`,
//!   quotes, brackets, non-ASCII… — becomes `~` and two upper-case hex digits (`/` → `~2F`).
//!   A leading `.` is escaped too (`~2E`), so a segment is never `.`/`..` nor a hidden entry.
//! * **Why `~` and not `%`.** Connectors turn `file://` URIs into paths in different ways: Tair
//!   KVCM's C++ SDK (`StandardUri`) takes the path raw, Python clients often `unquote` it, some
//!   even `unquote_plus` it (`+` → space). `~` and every kept character are RFC 3986
//!   *unreserved* or `:`/`@` (legal unencoded in a path segment), which no decoder changes; so
//!   every client reads the same path, and it is the path the worker deletes. A `%XX` escape
//!   would name one file for raw clients and another for decoding ones.
//! * **Nothing else in a root looks like an instance.** The worker's health probe writes
//!   `<root>~kvcm-health-<worker>`: `~k` is not an escape, so no instance id encodes to it.
//! * **Mooncake keys are not escaped.** A key is a flat string in a key-value store, not a path:
//!   no directory is shared or listed, and `<instance>/<spec>/<16 hex digits>` is already
//!   injective because spec names contain no `/` and the suffix has a fixed width. (A future
//!   Mooncake deleter must delete exact keys, never the prefix `<instance>/`.)
//!
//! Segments can be longer than the name (up to 3 bytes per byte): registration refuses ids whose
//! segment would exceed a file name's 255 bytes (`registry::validate::instance_id`). Nothing here
//! fails or panics: every function is pure.
//! See docs/data-plane.md ("Paths of file-like storages").

pub mod event_report;
pub mod file;
pub mod mem_pool;
pub mod mooncake;

use crate::store::record::Location;
use crate::wire::admin::StorageConfig;
use crate::wire::{CacheLocation, InstanceInfo, LocationSpec, StorageType};
use futures::future::BoxFuture;
use std::borrow::Cow;
use std::time::Duration;

/// The escape character of [`path_segment`]: RFC 3986 unreserved, so it reads the same whether
/// or not a URI client percent-decodes.
pub const ESCAPE: char = '~';

/// Bytes [`path_segment`] keeps as they are (a leading `.` excepted): RFC 3986 unreserved
/// characters but the escape, plus `:` and `@` (allowed unencoded in a path segment, and common
/// in ids like `host:port` or `model@rev`).
fn kept(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':' | b'@')
}

/// The one path segment (directory name) standing for an instance id or spec name on a
/// file-like storage. Injective; never empty, `.`, `..`, or containing `/`; the identity on
/// ordinary names (kept bytes, not starting with `.`). See the module docs for the rule.
pub fn path_segment(name: &str) -> Cow<'_, str> {
    let escaped = |i: usize, b: u8| !kept(b) || (i == 0 && b == b'.');
    if name.is_empty() {
        // Not produced by any other name: every other `~` is followed by two hex digits.
        return Cow::Borrowed("~");
    }
    if !name.bytes().enumerate().any(|(i, b)| escaped(i, b)) {
        return Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 8);
    for (i, b) in name.bytes().enumerate() {
        if escaped(i, b) {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            out.push(ESCAPE);
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 0xf) as usize] as char);
        } else {
            out.push(b as char);
        }
    }
    Cow::Owned(out)
}

/// The name of the health probe file a worker writes in a storage root, before the worker id:
/// `~k` is not an escape, so no [`path_segment`] starts with it.
pub const HEALTH_PROBE_PREFIX: &str = "~kvcm-health-";

/// What kvcm does with one kind of storage (DESIGN §5): how a block's location there becomes
/// URIs, and — for storages kvcm can reach — how a block is deleted and the storage probed, each
/// under a timeout. One implementation per file: [`file::FileBackend`] (`file` and `hf3fs`:
/// directory trees), [`mooncake::MooncakeBackend`] (keys in a Mooncake store, metadata only),
/// [`mem_pool::MemPoolBackend`] (kept in the registry, no blocks placed). [`Backend::of`] picks
/// one for a storage config.
pub trait StorageBackend: Send + Sync + std::fmt::Debug {
    /// Whether new blocks can be placed here.
    fn writable(&self) -> bool {
        true
    }

    /// Blocks per file for new writes.
    fn key_count_per_file(&self) -> u16 {
        1
    }

    /// The directory under which a file-like storage keeps `<instance>/<spec>/<file>`; `None`
    /// for storages without files.
    fn root(&self) -> Option<&str> {
        None
    }

    /// The part of a URI shared by every block of one spec on this storage; `None` when the
    /// storage cannot express locations.
    fn uri_prefix(&self, storage: &str, instance: &str, spec: &str) -> Option<String>;

    /// Appends the block-specific rest of a URI to its prefix, as bytes without `fmt` (the read
    /// path renders thousands per request). The output is ASCII (hex digits, `_?&=`, decimal
    /// numbers): it never needs JSON escaping.
    fn push_uri_rest_bytes(&self, out: &mut Vec<u8>, size: i64, key: i64, loc: &Location);

    /// Deletes a block's file(s) in every spec directory of `instance`: `Ok(true)` once deleted
    /// or found gone, `Ok(false)` for storages that hold nothing kvcm can delete; an error says
    /// why (a missing root, a symbolic link, a timeout: [`file::TIMED_OUT`]).
    fn unlink<'a>(
        &'a self,
        _instance: &'a str,
        _key: i64,
        _loc: &'a Location,
        _timeout: Duration,
    ) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async { Ok(false) })
    }

    /// Probes the storage for the health check; storages without a client here pass.
    fn probe<'a>(&'a self, _worker_id: &'a str, _timeout: Duration) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }

    /// The storage's size and the space left on it, for operators sizing quotas (the worker
    /// publishes them next to its health verdict); `None` where kvcm cannot tell.
    fn capacity<'a>(&'a self, _timeout: Duration) -> BoxFuture<'a, Result<Option<Capacity>, String>> {
        Box::pin(async { Ok(None) })
    }

    /// The directory holding every file of `instance` on a file-like storage,
    /// `<root><path_segment(instance)>/`; no other instance's directory is inside it.
    fn instance_dir(&self, instance: &str) -> Option<String> {
        self.root().map(|root| format!("{root}{}/", path_segment(instance)))
    }

    /// The file a worker's health probe writes and removes in a file-like storage's root. Its
    /// name is outside what [`path_segment`] produces, so it never meets an instance directory.
    fn health_probe_path(&self, worker_id: &str) -> Option<String> {
        self.root().map(|root| format!("{root}{HEALTH_PROBE_PREFIX}{}", path_segment(worker_id)))
    }
}

/// What [`StorageBackend::capacity`] reports, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    pub total_bytes: u64,
    /// Available to an unprivileged writer (what the engines writing blocks are).
    pub free_bytes: u64,
}

/// The backend of one storage ([`StorageBackend`] behind a box; dereferences to it).
#[derive(Debug)]
pub struct Backend(Box<dyn StorageBackend>);

impl std::ops::Deref for Backend {
    type Target = dyn StorageBackend;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl Backend {
    pub fn of(cfg: &StorageConfig) -> Backend {
        let per = |k: i32| k.clamp(1, u16::MAX as i32 - 1) as u16;
        Backend(if let Some(n) = &cfg.nfs {
            Box::new(file::FileBackend::file(n.root_path.clone(), per(n.key_count_per_file)))
        } else if let Some(l) = &cfg.local {
            Box::new(file::FileBackend::file(l.path.clone(), 1))
        } else if let Some(t) = &cfg.threefs {
            Box::new(file::FileBackend::hf3fs(format!("{}{}", t.mountpoint, t.root_dir), per(t.key_count_per_file)))
        } else if let Some(t) = &cfg.vcnsthreefs {
            Box::new(file::FileBackend::hf3fs(format!("{}{}", t.mountpoint, t.root_dir), per(t.key_count_per_file)))
        } else if cfg.mooncake.is_some() {
            Box::new(mooncake::MooncakeBackend)
        } else if cfg.event_report.is_some() {
            Box::new(event_report::EventReportBackend)
        } else {
            Box::new(mem_pool::MemPoolBackend)
        })
    }

    /// The file (relative to the instance/spec directory) holding a block.
    pub fn file_name(key: i64, loc: &Location) -> String {
        match loc.packed {
            Some(p) => format!("{:016x}_{:08x}", p.file_first as u64, p.file_hash),
            None => format!("{:016x}", key as u64),
        }
    }
}

/// Appends the low `digits` hex digits of `v`, lower case, zero-padded (`{:0digits$x}` for
/// values that fit).
pub(crate) fn push_hex(out: &mut Vec<u8>, v: u64, digits: u32) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for i in (0..digits).rev() {
        out.push(HEX[((v >> (4 * i)) & 0xf) as usize]);
    }
}

/// Builds many locations of one instance, computing each (storage, spec group)'s URI prefixes
/// once: a read of thousands of blocks costs one allocation per URI.
pub struct LocationBuilder<'a> {
    storages: &'a dyn Fn(u16) -> Option<&'a StorageConfig>,
    instance: &'a InstanceInfo,
    filter: &'a [String],
    /// Per (storage id, spec group): a read meets one or two, so a short list searched
    /// linearly beats hashing the key for every block.
    templates: Vec<((u16, u8), Option<Template>)>,
}

struct Template {
    backend: Backend,
    storage_type: StorageType,
    specs: Vec<(String, String, i64)>, // name, URI prefix, size
    /// The pre-rendered JSON pieces, made on first use by [`LocationBuilder::write_json`].
    json: Option<JsonPieces>,
}

/// A template's location as JSON, cut into the pieces around the block-specific URI rests.
struct JsonPieces {
    /// The location's JSON up to its first spec: `{"type":…,"spec_size":n,"location_specs":[`.
    head: Vec<u8>,
    /// Per spec, its JSON up to the block-specific rest of its URI: `{"name":…,"uri":"<prefix>`.
    specs: Vec<Vec<u8>>,
}

impl JsonPieces {
    fn of(storage_type: StorageType, specs: &[(String, String, i64)]) -> JsonPieces {
        // The pieces are cut from what serde writes for the same values, so the rendered JSON
        // is byte for byte what serialising the `CacheLocation` gives. Cutting is sound because
        // JSON escapes character by character, and the block-specific rest of a URI (hex
        // digits, `_`, `?`, `&`, `=`, decimal numbers) never needs escaping.
        let head = CacheLocation { storage_type, spec_size: specs.len() as i32, location_specs: Vec::new() };
        JsonPieces {
            head: json_cut(&head, b"]}"),
            specs: specs
                .iter()
                .map(|(name, prefix, _)| json_cut(&LocationSpec { name: name.clone(), uri: prefix.clone() }, b"\"}"))
                .collect(),
        }
    }
}

/// What serde writes for `value`, without the `suffix` it ends with.
fn json_cut<T: serde::Serialize>(value: &T, suffix: &[u8]) -> Vec<u8> {
    // Plain structs with string keys: serialising cannot fail.
    let mut v = serde_json::to_vec(value).unwrap_or_default();
    debug_assert!(v.ends_with(suffix), "{} does not end with {:?}", String::from_utf8_lossy(&v), suffix);
    v.truncate(v.len().saturating_sub(suffix.len()));
    v
}

impl<'a> LocationBuilder<'a> {
    pub fn new(
        storages: &'a dyn Fn(u16) -> Option<&'a StorageConfig>,
        instance: &'a InstanceInfo,
        filter: &'a [String],
    ) -> Self {
        LocationBuilder { storages, instance, filter, templates: Default::default() }
    }

    /// The wire location of a block, or `None` when its storage is gone or cannot express it.
    pub fn build(&mut self, key: i64, loc: &Location) -> Option<CacheLocation> {
        let t = self.template(loc)?;
        let location_specs = t
            .specs
            .iter()
            .map(|(name, prefix, size)| {
                let mut uri = Vec::with_capacity(prefix.len() + 48);
                uri.extend_from_slice(prefix.as_bytes());
                t.backend.push_uri_rest_bytes(&mut uri, *size, key, loc);
                // A String's bytes and ASCII appended: UTF-8.
                LocationSpec { name: name.clone(), uri: String::from_utf8(uri).unwrap_or_default() }
            })
            .collect::<Vec<_>>();
        Some(CacheLocation { storage_type: t.storage_type, spec_size: location_specs.len() as i32, location_specs })
    }

    /// Appends the JSON of [`Self::build`]'s location to `out` — the same bytes serde writes for
    /// it — straight from pre-rendered pieces, without building the location: no allocation per
    /// block. Returns `false`, writing nothing, when `build` would return `None`.
    pub fn write_json(&mut self, out: &mut Vec<u8>, key: i64, loc: &Location) -> bool {
        let Some(t) = self.template(loc) else { return false };
        let json = t.json.get_or_insert_with(|| JsonPieces::of(t.storage_type, &t.specs));
        out.extend_from_slice(&json.head);
        for (i, ((_, _, size), piece)) in t.specs.iter().zip(&json.specs).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(piece);
            t.backend.push_uri_rest_bytes(out, *size, key, loc);
            out.extend_from_slice(b"\"}");
        }
        out.extend_from_slice(b"]}");
        true
    }

    fn template(&mut self, loc: &Location) -> Option<&mut Template> {
        let (storages, instance, filter) = (self.storages, self.instance, self.filter);
        let key = (loc.storage, loc.group);
        let at = match self.templates.iter().position(|(k, _)| *k == key) {
            Some(at) => at,
            None => {
                let make = || {
                    let cfg = storages(loc.storage)?;
                    let backend = Backend::of(cfg);
                    let mut specs = Vec::new();
                    for (name, size) in location_specs(instance, loc.group) {
                        if !filter.is_empty() && !filter.iter().any(|f| f == name) {
                            continue;
                        }
                        specs.push((
                            name.to_string(),
                            backend.uri_prefix(&cfg.global_unique_name, &instance.instance_id, name)?,
                            size,
                        ));
                    }
                    let any_spec = !location_specs(instance, loc.group).is_empty();
                    any_spec.then_some(Template { backend, storage_type: storage_type(cfg), specs, json: None })
                };
                self.templates.push((key, make()));
                self.templates.len() - 1
            }
        };
        self.templates[at].1.as_mut()
    }
}

/// The wire storage type of a storage config.
pub fn storage_type(cfg: &StorageConfig) -> StorageType {
    cfg.storage_type().unwrap_or(StorageType::ST_UNSPECIFIED)
}

/// The specs (name, bytes) a location carries: every spec for group 0, else its group's.
pub fn location_specs(instance: &InstanceInfo, group: u8) -> Vec<(&str, i64)> {
    let size = |name: &str| instance.location_spec_infos.iter().find(|s| s.name == name).map(|s| s.size).unwrap_or(0);
    if group == 0 {
        instance.location_spec_infos.iter().map(|s| (s.name.as_str(), s.size)).collect()
    } else {
        match instance.location_spec_groups.get(group as usize - 1) {
            Some(g) => g.spec_names.iter().map(|n| (n.as_str(), size(n))).collect(),
            None => Vec::new(),
        }
    }
}

/// Bytes of a location of each spec group: index 0 = every spec, k = group k-1.
pub fn group_sizes(instance: &InstanceInfo) -> Vec<i64> {
    (0..=instance.location_spec_groups.len())
        .map(|g| location_specs(instance, g as u8).iter().map(|(_, s)| s).sum())
        .collect()
}

/// The wire location of one block, filtered to `spec_filter` if non-empty. `None` when the
/// storage cannot express it (unsupported storage, unknown spec group).
pub fn cache_location(
    cfg: &StorageConfig,
    instance: &InstanceInfo,
    key: i64,
    loc: &Location,
    spec_filter: &[String],
) -> Option<CacheLocation> {
    let storages = |_: u16| Some(cfg);
    LocationBuilder::new(&storages, instance, spec_filter).build(key, loc)
}

/// A miss placeholder: the instance's specs (filtered) with empty URIs.
pub fn placeholder(instance: &InstanceInfo, spec_filter: &[String]) -> CacheLocation {
    let specs: Vec<LocationSpec> = instance
        .location_spec_infos
        .iter()
        .filter(|s| spec_filter.is_empty() || spec_filter.contains(&s.name))
        .map(|s| LocationSpec { name: s.name.clone(), uri: String::new() })
        .collect();
    CacheLocation { storage_type: StorageType::ST_UNSPECIFIED, spec_size: specs.len() as i32, location_specs: specs }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::{LocState, Packed};
    use crate::wire::admin::{MooncakeStorageSpec, NfsStorageSpec, ThreeFsStorageSpec};
    use crate::wire::{LocationSpecGroup, LocationSpecInfo};
    use proptest::prelude::*;
    use proptest::test_runner::TestCaseError;

    fn instance() -> InstanceInfo {
        InstanceInfo {
            instance_id: "inst".into(),
            location_spec_infos: vec![
                LocationSpecInfo { name: "tp0".into(), size: 4096 },
                LocationSpecInfo { name: "tp1".into(), size: 2048 },
            ],
            location_spec_groups: vec![LocationSpecGroup { name: "g".into(), spec_names: vec!["tp1".into()] }],
            ..Default::default()
        }
    }

    fn loc(packed: Option<Packed>, group: u8) -> Location {
        Location { state: LocState::Serving, storage: 1, group, seq: 1, written: 0, packed }
    }

    #[test]
    fn file_uris_follow_the_design_layout() {
        let cfg = StorageConfig {
            global_unique_name: "nfs_01".into(),
            nfs: Some(NfsStorageSpec { root_path: "/mnt/kv/".into(), key_count_per_file: 1 }),
            ..Default::default()
        };
        let l = cache_location(&cfg, &instance(), 255, &loc(None, 0), &[]).unwrap();
        assert_eq!(l.storage_type, StorageType::ST_NFS);
        assert_eq!(l.spec_size, 2);
        assert_eq!(l.location_specs[0].uri, "file://nfs_01/mnt/kv/inst/tp0/00000000000000ff?size=4096");
        assert_eq!(l.location_specs[1].uri, "file://nfs_01/mnt/kv/inst/tp1/00000000000000ff?size=2048");
        let packed = Packed { blkid: 3, file_first: -1, file_hash: 0xabc };
        let l = cache_location(&cfg, &instance(), 7, &loc(Some(packed), 0), &["tp1".into()]).unwrap();
        assert_eq!(l.spec_size, 1);
        assert_eq!(
            l.location_specs[0].uri,
            "file://nfs_01/mnt/kv/inst/tp1/ffffffffffffffff_00000abc?blkid=3&size=2048"
        );
        let grouped = cache_location(&cfg, &instance(), 7, &loc(None, 1), &[]).unwrap();
        assert_eq!(grouped.location_specs.len(), 1);
        assert_eq!(grouped.location_specs[0].name, "tp1");
        assert_eq!(group_sizes(&instance()), vec![6144, 2048]);
    }

    #[test]
    fn hf3fs_and_mooncake_uris() {
        let cfg = StorageConfig {
            global_unique_name: "3fs".into(),
            threefs: Some(ThreeFsStorageSpec {
                mountpoint: "/3fs/".into(),
                root_dir: "kv/".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let l = cache_location(&cfg, &instance(), -2, &loc(None, 0), &[]).unwrap();
        assert_eq!(l.storage_type, StorageType::ST_3FS);
        assert_eq!(l.location_specs[0].uri, "hf3fs://3fs/3fs/kv/inst/tp0/fffffffffffffffe?size=4096");
        let cfg = StorageConfig {
            global_unique_name: "mc".into(),
            mooncake: Some(MooncakeStorageSpec::default()),
            ..Default::default()
        };
        let l = cache_location(&cfg, &instance(), 16, &loc(None, 0), &[]).unwrap();
        assert_eq!(l.location_specs[1].uri, "mooncake://mc/?key=inst/tp1/0000000000000010&size=2048");
    }

    fn nfs(root: &str) -> StorageConfig {
        StorageConfig {
            global_unique_name: "nfs_01".into(),
            nfs: Some(NfsStorageSpec { root_path: root.into(), key_count_per_file: 1 }),
            ..Default::default()
        }
    }

    fn uri_of(cfg: &StorageConfig, instance_id: &str) -> String {
        let info = InstanceInfo { instance_id: instance_id.into(), ..instance() };
        cache_location(cfg, &info, 255, &loc(None, 0), &[]).unwrap().location_specs[0].uri.clone()
    }

    #[test]
    fn instance_ids_with_a_slash_get_one_sibling_directory_and_ordinary_ids_keep_their_uris() {
        let cfg = nfs("/mnt/kv/");
        let uri = |id: &str| uri_of(&cfg, id);
        assert_eq!(uri("inst"), "file://nfs_01/mnt/kv/inst/tp0/00000000000000ff?size=4096");
        assert_eq!(
            uri("host-1:8080@v1.2_tp8"),
            "file://nfs_01/mnt/kv/host-1:8080@v1.2_tp8/tp0/00000000000000ff?size=4096"
        );
        assert_eq!(uri("a/b"), "file://nfs_01/mnt/kv/a~2Fb/tp0/00000000000000ff?size=4096");
        assert_eq!(uri("Qwen/Qwen2-7B"), "file://nfs_01/mnt/kv/Qwen~2FQwen2-7B/tp0/00000000000000ff?size=4096");
        // The escape escapes itself, so "a~2Fb" cannot pass for "a/b".
        assert_eq!(uri("a~2Fb"), "file://nfs_01/mnt/kv/a~7E2Fb/tp0/00000000000000ff?size=4096");
        // Bytes a decoding client would change, or that are not legal unencoded in a URI path.
        assert_eq!(uri("a+b=c!"), "file://nfs_01/mnt/kv/a~2Bb~3Dc~21/tp0/00000000000000ff?size=4096");
        assert_eq!(
            uri("x\"[y]|^`<>"),
            "file://nfs_01/mnt/kv/x~22~5By~5D~7C~5E~60~3C~3E/tp0/00000000000000ff?size=4096"
        );
        // A leading dot: never `.`/`..`, never hidden; dots elsewhere are kept.
        assert_eq!(uri(".hidden"), "file://nfs_01/mnt/kv/~2Ehidden/tp0/00000000000000ff?size=4096");
        assert_eq!(uri("a/./b"), "file://nfs_01/mnt/kv/a~2F.~2Fb/tp0/00000000000000ff?size=4096");
        let cfg = StorageConfig {
            global_unique_name: "3fs".into(),
            threefs: Some(ThreeFsStorageSpec {
                mountpoint: "/3fs/".into(),
                root_dir: "kv/".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(uri_of(&cfg, "a/b"), "hf3fs://3fs/3fs/kv/a~2Fb/tp0/00000000000000ff?size=4096");
        // Mooncake keys are not paths: unchanged.
        let cfg = StorageConfig {
            global_unique_name: "mc".into(),
            mooncake: Some(MooncakeStorageSpec::default()),
            ..Default::default()
        };
        assert_eq!(uri_of(&cfg, "a/b"), "mooncake://mc/?key=a/b/tp0/00000000000000ff&size=4096");
    }

    #[test]
    fn spec_names_are_segments_too() {
        let b = Backend::of(&nfs("/r/"));
        assert_eq!(b.uri_prefix("s", "i", "tp0").unwrap(), "file://s/r/i/tp0/");
        assert_eq!(b.uri_prefix("s", "i", "..").unwrap(), "file://s/r/i/~2E./");
        assert_eq!(b.uri_prefix("s", "i", ".").unwrap(), "file://s/r/i/~2E/");
    }

    #[test]
    fn the_deleter_and_the_health_probe_use_the_same_directories() {
        let b = Backend::of(&nfs("/mnt/kv/"));
        assert_eq!(b.instance_dir("inst").unwrap(), "/mnt/kv/inst/");
        assert_eq!(b.instance_dir("a/b").unwrap(), "/mnt/kv/a~2Fb/");
        let prefix = b.uri_prefix("nfs_01", "a/b", "tp0").unwrap();
        assert_eq!(prefix, format!("file://nfs_01{}tp0/", b.instance_dir("a/b").unwrap()));
        assert_eq!(b.health_probe_path("w-1").unwrap(), "/mnt/kv/~kvcm-health-w-1");
        assert_eq!(b.health_probe_path("w/1").unwrap(), "/mnt/kv/~kvcm-health-w~2F1");
        let mc = Backend::of(&StorageConfig {
            global_unique_name: "mc".into(),
            mooncake: Some(MooncakeStorageSpec::default()),
            ..Default::default()
        });
        assert_eq!((mc.instance_dir("i"), mc.health_probe_path("w")), (None, None));
    }

    /// The inverse of `path_segment`, to prove it injective.
    fn decode(segment: &str) -> Option<String> {
        if segment == "~" {
            return Some(String::new());
        }
        let (b, mut out, mut i) = (segment.as_bytes(), Vec::new(), 0);
        while i < b.len() {
            if b[i] == b'~' {
                let hex = segment.get(i + 1..i + 3)?;
                if !hex.bytes().all(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(&c)) {
                    return None;
                }
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        String::from_utf8(out).ok()
    }

    /// Characters RFC 3986 allows unencoded in a path segment (`pchar` without `%`).
    fn legal_in_uri_path(c: char) -> bool {
        c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=:@".contains(c)
    }

    fn check_segment(name: &str) -> Result<String, TestCaseError> {
        let seg = path_segment(name).into_owned();
        prop_assert!(!seg.is_empty() && seg != "." && seg != "..", "{name:?} -> {seg:?}");
        prop_assert!(!seg.contains('/'), "{name:?} -> {seg:?} has a '/'");
        prop_assert!(!seg.starts_with('.'), "{name:?} -> {seg:?} is hidden");
        prop_assert!(seg.chars().all(legal_in_uri_path), "{name:?} -> {seg:?} needs URI encoding");
        prop_assert!(!seg.starts_with(HEALTH_PROBE_PREFIX), "{name:?} -> {seg:?} looks like a probe file");
        prop_assert_eq!(decode(&seg), Some(name.to_string()), "{:?} does not decode back", seg);
        Ok(seg)
    }

    proptest! {
        #[test]
        fn any_name_becomes_one_reversible_uri_safe_segment(name in any::<String>()) {
            check_segment(&name)?;
        }

        #[test]
        fn distinct_instance_ids_never_share_a_segment(
            // A small alphabet, so escapes and their look-alikes ("a/b" vs "a~2Fb") meet often.
            a in "[ab./~2EF7]{1,8}",
            b in "[ab./~2EF7]{1,8}",
        ) {
            let (sa, sb) = (check_segment(&a)?, check_segment(&b)?);
            prop_assert_eq!(a == b, sa == sb, "{:?} -> {:?}, {:?} -> {:?}", a, sa, b, sb);
        }

        #[test]
        fn printable_ids_differ_after_encoding(a in "[!-~]{1,24}", b in "[!-~]{1,24}") {
            prop_assert_eq!(a == b, path_segment(&a) == path_segment(&b));
        }

        #[test]
        fn ordinary_ids_are_unchanged(id in "[A-Za-z0-9_:@-][A-Za-z0-9._:@-]{0,199}") {
            prop_assert!(matches!(path_segment(&id), Cow::Borrowed(s) if s == id));
            check_segment(&id)?;
        }
    }

    fn any_storage() -> impl Strategy<Value = StorageConfig> {
        let name = "[a-z0-9_\"\\\\é/]{1,8}";
        (0..4u8, name, "/[a-z\"\\\\ü/]{0,6}/", 1..9i32).prop_map(|(kind, name, root, per)| {
            let mut cfg = StorageConfig { global_unique_name: name, ..Default::default() };
            match kind {
                0 => cfg.nfs = Some(NfsStorageSpec { root_path: root, key_count_per_file: per }),
                1 => {
                    cfg.threefs =
                        Some(ThreeFsStorageSpec { mountpoint: root, root_dir: "kv/".into(), ..Default::default() })
                }
                2 => cfg.mooncake = Some(MooncakeStorageSpec::default()),
                _ => {}
            }
            cfg
        })
    }

    proptest! {
        /// The read path writes locations straight to JSON; connectors compare them field by
        /// field with what serde writes for the built location.
        #[test]
        fn rendered_json_is_byte_for_byte_what_serde_writes_for_the_built_location(
            cfg in any_storage(),
            id in "[a-z\"\\\\/.~ü\u{1}]{1,10}",
            specs in proptest::collection::vec(("[a-z0-9\"\\\\.\u{7f}]{1,5}", -2i64..1 << 40), 0..4),
            filter in proptest::collection::vec("[a-z0-9]{1,2}", 0..2),
            key in any::<i64>(),
            group in 0u8..3,
            packed in proptest::option::of((any::<u16>(), any::<i64>(), any::<u32>())),
        ) {
            let info = InstanceInfo {
                instance_id: id,
                location_spec_infos: specs.iter().map(|(n, s)| LocationSpecInfo { name: n.clone(), size: *s }).collect(),
                location_spec_groups: vec![LocationSpecGroup {
                    name: "g".into(),
                    spec_names: specs.iter().take(1).map(|(n, _)| n.clone()).collect(),
                }],
                ..Default::default()
            };
            let packed = packed.map(|(blkid, file_first, file_hash)| Packed { blkid, file_first, file_hash });
            let l = loc(packed, group);
            let storages = |_: u16| Some(&cfg);
            let built = LocationBuilder::new(&storages, &info, &filter).build(key, &l);
            let mut builder = LocationBuilder::new(&storages, &info, &filter);
            let mut out = b"x".to_vec();
            let written = builder.write_json(&mut out, key, &l);
            match built {
                Some(b) => {
                    prop_assert!(written);
                    let expected = serde_json::to_vec(&b).unwrap();
                    prop_assert_eq!(String::from_utf8_lossy(&out[1..]), String::from_utf8_lossy(&expected));
                }
                None => prop_assert!(!written && out == b"x"),
            }
            // A second block through the same (now cached) template.
            let mut again = Vec::new();
            prop_assert_eq!(builder.write_json(&mut again, key, &l), written);
            prop_assert_eq!(&again[..], &out[1..]);
        }
    }

    #[test]
    fn placeholders_have_every_spec_and_no_uri() {
        let p = placeholder(&instance(), &[]);
        assert_eq!(p.spec_size, 2);
        assert!(p.location_specs.iter().all(|s| s.uri.is_empty()));
    }
}
