//! Storage backends (DESIGN §5): how a location on a storage becomes URIs, and (with the worker)
//! how it is health-checked and deleted. One variant per storage layout:
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

use crate::store::record::Location;
use crate::wire::admin::StorageConfig;
use crate::wire::{CacheLocation, InstanceInfo, LocationSpec, StorageType};

/// The layout of one storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// A POSIX directory tree; `root` ends with `/`.
    File { root: String, per_file: u16 },
    /// A 3FS mount; `root` = mountpoint + root_dir, ends with `/`.
    Hf3fs { root: String, per_file: u16 },
    /// A Mooncake store: keys only.
    Mooncake,
    /// A storage kvcm keeps in the registry but cannot place blocks on (tair_mem_pool).
    Unsupported,
}

impl Backend {
    pub fn of(cfg: &StorageConfig) -> Backend {
        let per = |k: i32| k.clamp(1, u16::MAX as i32 - 1) as u16;
        if let Some(n) = &cfg.nfs {
            Backend::File { root: n.root_path.clone(), per_file: per(n.key_count_per_file) }
        } else if let Some(l) = &cfg.local {
            Backend::File { root: l.path.clone(), per_file: 1 }
        } else if let Some(t) = &cfg.threefs {
            Backend::Hf3fs { root: format!("{}{}", t.mountpoint, t.root_dir), per_file: per(t.key_count_per_file) }
        } else if let Some(t) = &cfg.vcnsthreefs {
            Backend::Hf3fs { root: format!("{}{}", t.mountpoint, t.root_dir), per_file: per(t.key_count_per_file) }
        } else if cfg.mooncake.is_some() {
            Backend::Mooncake
        } else {
            Backend::Unsupported
        }
    }

    /// Blocks per file for new writes.
    pub fn key_count_per_file(&self) -> u16 {
        match self {
            Backend::File { per_file, .. } | Backend::Hf3fs { per_file, .. } => *per_file,
            _ => 1,
        }
    }

    /// Whether new blocks can be placed here.
    pub fn writable(&self) -> bool {
        !matches!(self, Backend::Unsupported)
    }

    /// The file (relative to the instance/spec directory) holding a block.
    pub fn file_name(key: i64, loc: &Location) -> String {
        match loc.packed {
            Some(p) => format!("{:016x}_{:08x}", p.file_first as u64, p.file_hash),
            None => format!("{:016x}", key as u64),
        }
    }

    /// The directory under which a file-like storage keeps `<instance>/<spec>/<file>`; `None`
    /// for storages without files (mooncake, tair_mem_pool).
    pub fn root(&self) -> Option<&str> {
        match self {
            Backend::File { root, .. } | Backend::Hf3fs { root, .. } => Some(root),
            Backend::Mooncake | Backend::Unsupported => None,
        }
    }

    /// The part of a URI shared by every block of one spec on this storage.
    pub fn uri_prefix(&self, storage: &str, instance: &str, spec: &str) -> Option<String> {
        match self {
            Backend::File { root, .. } => Some(format!("file://{storage}{root}{instance}/{spec}/")),
            Backend::Hf3fs { root, .. } => Some(format!("hf3fs://{storage}{root}{instance}/{spec}/")),
            Backend::Mooncake => Some(format!("mooncake://{storage}/?key={instance}/{spec}/")),
            Backend::Unsupported => None,
        }
    }

    /// Appends the block-specific rest of a URI to its prefix.
    pub fn push_uri_rest(&self, uri: &mut String, size: i64, key: i64, loc: &Location) {
        use std::fmt::Write;
        match (self, loc.packed) {
            (Backend::Mooncake, _) => {
                let _ = write!(uri, "{:016x}&size={size}", key as u64);
            }
            (_, Some(p)) => {
                let _ = write!(uri, "{:016x}_{:08x}?blkid={}&size={size}", p.file_first as u64, p.file_hash, p.blkid);
            }
            (_, None) => {
                let _ = write!(uri, "{:016x}?size={size}", key as u64);
            }
        }
    }
}

/// Builds many locations of one instance, computing each (storage, spec group)'s URI prefixes
/// once: a read of thousands of blocks costs one allocation per URI.
pub struct LocationBuilder<'a> {
    storages: &'a dyn Fn(u16) -> Option<&'a StorageConfig>,
    instance: &'a InstanceInfo,
    filter: &'a [String],
    templates: std::collections::HashMap<(u16, u8), Option<Template>>,
}

struct Template {
    backend: Backend,
    storage_type: StorageType,
    specs: Vec<(String, String, i64)>, // name, URI prefix, size
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
        let (storages, instance, filter) = (self.storages, self.instance, self.filter);
        let t = self
            .templates
            .entry((loc.storage, loc.group))
            .or_insert_with(|| {
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
                any_spec.then_some(Template { backend, storage_type: storage_type(cfg), specs })
            })
            .as_ref()?;
        let location_specs = t
            .specs
            .iter()
            .map(|(name, prefix, size)| {
                let mut uri = String::with_capacity(prefix.len() + 48);
                uri.push_str(prefix);
                t.backend.push_uri_rest(&mut uri, *size, key, loc);
                LocationSpec { name: name.clone(), uri }
            })
            .collect::<Vec<_>>();
        Some(CacheLocation { storage_type: t.storage_type, spec_size: location_specs.len() as i32, location_specs })
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

    #[test]
    fn placeholders_have_every_spec_and_no_uri() {
        let p = placeholder(&instance(), &[]);
        assert_eq!(p.spec_size, 2);
        assert!(p.location_specs.iter().all(|s| s.uri.is_empty()));
    }
}
