//! Validation of admin-plane input, run before any script: names, storage specs, instance
//! groups, instance registrations and accounts. Every error says which field is wrong and how.
//!
//! Validation also normalises where the protocol is lenient (a `root_path` without its trailing
//! `/` gains one; `key_count_per_file` 0 means 1), so what is stored is canonical.

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::wire::admin::{InstanceGroup, StorageConfig};
use crate::wire::{InstanceInfo, RegisterInstanceRequest, StorageType};
use std::collections::HashSet;

const MAX_NAME: usize = 128;
const MAX_INSTANCE_ID: usize = 200;

/// A storage, group or account name: 1–128 of `[A-Za-z0-9._:-]`.
pub fn name(field: &str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(format!("{field} is required")));
    }
    if value.len() > MAX_NAME {
        return Err(Error::invalid(format!("{field} is longer than {MAX_NAME} characters")));
    }
    if let Some(c) = value.chars().find(|c| !(c.is_ascii_alphanumeric() || "._:-".contains(*c))) {
        return Err(Error::invalid(format!(
            "{field} \"{value}\" contains {c:?}; use letters, digits, '.', '_', ':' and '-'"
        )));
    }
    Ok(())
}

/// An instance id: 1–200 printable ASCII characters without whitespace, braces (they would
/// break the Valkey hash tag), backslashes or `..` path segments (it becomes part of file paths).
pub fn instance_id(value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid("instance_id is required"));
    }
    if value.len() > MAX_INSTANCE_ID {
        return Err(Error::invalid(format!("instance_id is longer than {MAX_INSTANCE_ID} characters")));
    }
    if let Some(c) = value.chars().find(|c| !c.is_ascii_graphic() || "{}\\?#%&".contains(*c)) {
        return Err(Error::invalid(format!(
            "instance_id \"{value}\" contains {c:?}; whitespace, control characters and {{}}\\?#%& are not allowed"
        )));
    }
    if value.starts_with('/') || value.split('/').any(|seg| seg.is_empty() || seg == "." || seg == "..") {
        return Err(Error::invalid(format!(
            "instance_id \"{value}\" must not start with '/' or contain empty, '.' or '..' path segments"
        )));
    }
    Ok(())
}

/// Validates and normalises a storage config.
pub fn storage(cfg: &mut StorageConfig) -> Result<()> {
    name("storage.global_unique_name", &cfg.global_unique_name)?;
    let Some(_) = cfg.storage_type() else {
        return Err(Error::invalid(
            "storage must set exactly one of nfs, threefs, mooncake, tair_mem_pool, vcnsthreefs, local",
        ));
    };
    cfg.is_available = true;
    cfg.is_healthy = true;
    let abs_dir = |field: &str, v: &mut String| -> Result<()> {
        if !v.starts_with('/') {
            return Err(Error::invalid(format!("{field} must be an absolute path, got \"{v}\"")));
        }
        if v.split('/').any(|s| s == "..") {
            return Err(Error::invalid(format!("{field} must not contain '..'")));
        }
        if !v.ends_with('/') {
            v.push('/');
        }
        Ok(())
    };
    let per_file = |field: &str, v: &mut i32| -> Result<()> {
        if *v < 0 || *v > 4096 {
            return Err(Error::invalid(format!("{field} must be between 0 and 4096 (0 means 1), got {v}")));
        }
        if *v == 0 {
            *v = 1;
        }
        Ok(())
    };
    let required = |field: &str, v: &str| -> Result<()> {
        if v.trim().is_empty() { Err(Error::invalid(format!("{field} is required"))) } else { Ok(()) }
    };
    if let Some(nfs) = cfg.nfs.as_mut() {
        abs_dir("storage.nfs.root_path", &mut nfs.root_path)?;
        per_file("storage.nfs.key_count_per_file", &mut nfs.key_count_per_file)?;
    }
    if let Some(local) = cfg.local.as_mut() {
        abs_dir("storage.local.path", &mut local.path)?;
    }
    if let Some(t) = cfg.threefs.as_mut() {
        abs_dir("storage.threefs.mountpoint", &mut t.mountpoint)?;
        required("storage.threefs.root_dir", &t.root_dir)?;
        if t.root_dir.split('/').any(|s| s == "..") {
            return Err(Error::invalid("storage.threefs.root_dir must not contain '..'"));
        }
        let trimmed = t.root_dir.trim_matches('/').to_string();
        t.root_dir = format!("{trimmed}/");
        per_file("storage.threefs.key_count_per_file", &mut t.key_count_per_file)?;
    }
    if let Some(v) = cfg.vcnsthreefs.as_mut() {
        abs_dir("storage.vcnsthreefs.mountpoint", &mut v.mountpoint)?;
        required("storage.vcnsthreefs.root_dir", &v.root_dir)?;
        required("storage.vcnsthreefs.remote_host", &v.remote_host)?;
        required("storage.vcnsthreefs.meta_storage_uri", &v.meta_storage_uri)?;
        if v.remote_port <= 0 || v.remote_port > 65535 {
            return Err(Error::invalid("storage.vcnsthreefs.remote_port must be 1..65535"));
        }
        per_file("storage.vcnsthreefs.key_count_per_file", &mut v.key_count_per_file)?;
    }
    if let Some(m) = cfg.mooncake.as_ref() {
        required("storage.mooncake.local_hostname", &m.local_hostname)?;
        required("storage.mooncake.metadata_connstring", &m.metadata_connstring)?;
        required("storage.mooncake.master_service_entry", &m.master_service_entry)?;
        match m.protocol.as_str() {
            "tcp" => {}
            "rdma" => required("storage.mooncake.rdma_device (protocol rdma)", &m.rdma_device)?,
            other => {
                return Err(Error::invalid(format!(
                    "storage.mooncake.protocol must be \"tcp\" or \"rdma\", got \"{other}\""
                )));
            }
        }
    }
    if let Some(p) = cfg.tair_mem_pool.as_ref() {
        required("storage.tair_mem_pool.domain", &p.domain)?;
    }
    Ok(())
}

/// The part of a storage config that decides where existing blocks live. Changing it would
/// orphan those blocks, so `updateStorage` requires `force_update` for it.
pub fn storage_placement(cfg: &StorageConfig) -> String {
    let mut c = cfg.clone();
    c.check_storage_available_when_open = false;
    c.is_available = true;
    c.is_healthy = true;
    if let Some(m) = c.mooncake.as_mut() {
        // Connection details may move; the key space stays.
        m.local_hostname.clear();
        m.rdma_device.clear();
        m.protocol.clear();
    }
    if let Some(p) = c.tair_mem_pool.as_mut() {
        p.timeout = 0;
    }
    serde_json::to_string(&c).unwrap_or_default()
}

/// Refuses a file-like storage (`nfs`, `local`, `threefs`, `vcnsthreefs`) whose root equals,
/// contains or lies inside the root of another file-like storage in `existing` (a storage of the
/// same name, i.e. the one being updated, is skipped). With roots `/a/` and `/a/b/`, instance `b`
/// of the first would own the second's whole tree. Types are compared with each other too: the
/// worker deletes through the same local paths whatever the type.
///
/// Roots are compared by path segment after dropping empty and `.` segments (`/a//./b/` is
/// `/a/b/`; `/a/` and `/ab/` are disjoint). Pure string comparison: two different strings that
/// reach one directory through a symbolic link or a bind mount are not detected.
pub fn roots_disjoint<'a>(new: &StorageConfig, existing: impl IntoIterator<Item = &'a StorageConfig>) -> Result<()> {
    fn segments(root: &str) -> Vec<&str> {
        root.split('/').filter(|s| !s.is_empty() && *s != ".").collect()
    }
    let new_backend = Backend::of(new);
    let Some(new_root) = new_backend.root() else { return Ok(()) };
    let new_segments = segments(new_root);
    for other in existing {
        if other.global_unique_name == new.global_unique_name {
            continue;
        }
        let other_backend = Backend::of(other);
        let Some(other_root) = other_backend.root() else { continue };
        let other_segments = segments(other_root);
        let common = new_segments.len().min(other_segments.len());
        if new_segments[..common] != other_segments[..common] {
            continue;
        }
        let relation = match new_segments.len().cmp(&other_segments.len()) {
            std::cmp::Ordering::Equal => "is the same directory as",
            std::cmp::Ordering::Greater => "lies inside",
            std::cmp::Ordering::Less => "contains",
        };
        return Err(Error::invalid(format!(
            "storage '{}' root {new_root} {relation} the root {other_root} of storage '{}'; \
             the roots of file-like storages must not nest or coincide (an instance of one storage \
             would own the other's files): choose a separate directory",
            new.global_unique_name, other.global_unique_name
        )));
    }
    Ok(())
}

/// Validates an instance group (create and update).
pub fn group(g: &InstanceGroup) -> Result<()> {
    name("instance_group.name", &g.name)?;
    if g.storage_candidates.is_empty() {
        return Err(Error::invalid("instance_group.storage_candidates must name at least one storage"));
    }
    let mut seen = HashSet::new();
    for c in &g.storage_candidates {
        name("instance_group.storage_candidates[]", c)?;
        if !seen.insert(c) {
            return Err(Error::invalid(format!("instance_group.storage_candidates lists \"{c}\" twice")));
        }
    }
    if g.max_instance_count < 0 {
        return Err(Error::invalid("instance_group.max_instance_count must be >= 0 (0 = unlimited)"));
    }
    if g.version < 0 {
        return Err(Error::invalid("instance_group.version must be >= 0"));
    }
    if g.quota.capacity < 0 {
        return Err(Error::invalid("instance_group.quota.capacity must be >= 0 bytes (0 = unlimited)"));
    }
    let mut types = HashSet::new();
    for q in &g.quota.quota_config {
        if q.storage_type == StorageType::ST_UNSPECIFIED {
            return Err(Error::invalid("instance_group.quota.quota_config[].storage_type is required"));
        }
        if !types.insert(q.storage_type) {
            return Err(Error::invalid(format!("instance_group.quota.quota_config lists {} twice", q.storage_type)));
        }
        if q.capacity < 0 {
            return Err(Error::invalid(format!(
                "instance_group.quota.quota_config capacity for {} must be >= 0",
                q.storage_type
            )));
        }
    }
    let r = &g.cache_config.reclaim_strategy;
    let pct = r.trigger_strategy.used_percentage;
    if !(0.0..=1.0).contains(&pct) || pct.is_nan() {
        return Err(Error::invalid(format!(
            "instance_group.cache_config.reclaim_strategy.trigger_strategy.used_percentage must be within 0..1, got {pct}"
        )));
    }
    if r.trigger_strategy.used_size < 0 {
        return Err(Error::invalid("reclaim_strategy.trigger_strategy.used_size must be >= 0"));
    }
    for (field, v) in [
        ("trigger_period_seconds", r.trigger_period_seconds),
        ("reclaim_step_size", r.reclaim_step_size),
        ("delay_before_delete_ms", r.delay_before_delete_ms),
    ] {
        if v < 0 {
            return Err(Error::invalid(format!("instance_group.cache_config.reclaim_strategy.{field} must be >= 0")));
        }
    }
    if !(0..=100).contains(&r.reclaim_step_percentage) {
        return Err(Error::invalid("reclaim_strategy.reclaim_step_percentage must be within 0..100"));
    }
    if !r.storage_unique_name.is_empty() && !g.storage_candidates.contains(&r.storage_unique_name) {
        return Err(Error::invalid(format!(
            "reclaim_strategy.storage_unique_name \"{}\" is not one of the group's storage_candidates",
            r.storage_unique_name
        )));
    }
    Ok(())
}

/// Validates a registration and builds the instance record it asks for.
pub fn registration(req: &RegisterInstanceRequest) -> Result<InstanceInfo> {
    name("instance_group", &req.instance_group)?;
    instance_id(&req.instance_id)?;
    if req.block_size <= 0 {
        return Err(Error::invalid(format!("block_size must be > 0 tokens, got {}", req.block_size)));
    }
    let Some(md) = req.model_deployment.as_ref() else {
        return Err(Error::invalid("model_deployment is required (with model_name and dtype)"));
    };
    if md.model_name.is_empty() {
        return Err(Error::invalid("model_deployment.model_name is required"));
    }
    if md.dtype.is_empty() {
        return Err(Error::invalid("model_deployment.dtype is required"));
    }
    if md.tp_size < 0 || md.dp_size < 0 || md.pp_size < 0 {
        return Err(Error::invalid("model_deployment tp_size, dp_size and pp_size must be >= 0"));
    }
    if req.location_spec_infos.is_empty() {
        return Err(Error::invalid(
            "location_spec_infos must list at least one spec (e.g. {\"name\":\"tp0\",\"size\":4096})",
        ));
    }
    let mut specs = HashSet::new();
    for s in &req.location_spec_infos {
        name("location_spec_infos[].name", &s.name)?;
        if !specs.insert(s.name.as_str()) {
            return Err(Error::invalid(format!("location_spec_infos lists \"{}\" twice", s.name)));
        }
        if s.size <= 0 {
            return Err(Error::invalid(format!("location_spec_infos \"{}\" size must be > 0 bytes", s.name)));
        }
    }
    let total: i64 = req.location_spec_infos.iter().map(|s| s.size).sum();
    if total > u32::MAX as i64 {
        return Err(Error::invalid(format!(
            "location_spec_infos sum to {total} bytes per block; at most 4 GiB are supported"
        )));
    }
    let mut groups = HashSet::new();
    for g in &req.location_spec_groups {
        name("location_spec_groups[].name", &g.name)?;
        if !groups.insert(g.name.as_str()) {
            return Err(Error::invalid(format!("location_spec_groups lists \"{}\" twice", g.name)));
        }
        if g.spec_names.is_empty() {
            return Err(Error::invalid(format!("location_spec_groups \"{}\" has no spec_names", g.name)));
        }
        for s in &g.spec_names {
            if !specs.contains(s.as_str()) {
                return Err(Error::invalid(format!(
                    "location_spec_groups \"{}\" names spec \"{s}\", which is not in location_spec_infos",
                    g.name
                )));
            }
        }
    }
    Ok(InstanceInfo {
        quota_group_name: String::new(),
        instance_group_name: req.instance_group.clone(),
        instance_id: req.instance_id.clone(),
        block_size: req.block_size,
        location_spec_infos: req.location_spec_infos.clone(),
        model_deployment: md.clone(),
        location_spec_groups: req.location_spec_groups.clone(),
    })
}

/// What must match for a re-registration to be idempotent: everything but `user_data` and the
/// derived quota group name.
pub fn fingerprint(info: &InstanceInfo) -> String {
    let mut c = info.clone();
    c.model_deployment.user_data.clear();
    c.quota_group_name.clear();
    let json = serde_json::to_string(&c).unwrap_or_default();
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(json.as_bytes()))
}

/// Names the fields in which two registrations differ (for DUPLICATE_ENTITY messages).
pub fn registration_diff(stored: &InstanceInfo, new: &InstanceInfo) -> Vec<String> {
    let mut d = Vec::new();
    if stored.instance_group_name != new.instance_group_name {
        d.push(format!("instance_group ({} vs {})", stored.instance_group_name, new.instance_group_name));
    }
    if stored.block_size != new.block_size {
        d.push(format!("block_size ({} vs {})", stored.block_size, new.block_size));
    }
    if stored.location_spec_infos != new.location_spec_infos {
        d.push("location_spec_infos".into());
    }
    let (mut a, mut b) = (stored.model_deployment.clone(), new.model_deployment.clone());
    a.user_data.clear();
    b.user_data.clear();
    if a != b {
        d.push("model_deployment".into());
    }
    if stored.location_spec_groups != new.location_spec_groups {
        d.push("location_spec_groups".into());
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::admin::{MooncakeStorageSpec, NfsStorageSpec, ThreeFsStorageSpec};

    #[test]
    fn instance_ids_that_would_break_keys_or_paths_are_refused() {
        for bad in ["", "a{b", "a}b", "a b", "../x", "a/../b", "/abs", "a//b", "x\u{7}", "a?b"] {
            assert!(instance_id(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["inst-1", "Qwen/Qwen2-7B", "model:v1.2_tp8", "a@b+c=d"] {
            instance_id(good).unwrap();
        }
    }

    #[test]
    fn nfs_root_path_is_normalised_and_must_be_absolute() {
        let mut c = StorageConfig {
            global_unique_name: "nfs_01".into(),
            nfs: Some(NfsStorageSpec { root_path: "/tmp/kv".into(), key_count_per_file: 0 }),
            ..Default::default()
        };
        storage(&mut c).unwrap();
        assert_eq!(c.nfs.as_ref().unwrap().root_path, "/tmp/kv/");
        assert_eq!(c.nfs.as_ref().unwrap().key_count_per_file, 1);
        c.nfs.as_mut().unwrap().root_path = "relative/".into();
        assert!(storage(&mut c).unwrap_err().to_string().contains("absolute"));
    }

    fn file_storage(name: &str, root: &str) -> StorageConfig {
        let mut c = StorageConfig {
            global_unique_name: name.into(),
            nfs: Some(NfsStorageSpec { root_path: root.into(), key_count_per_file: 1 }),
            ..Default::default()
        };
        storage(&mut c).unwrap();
        c
    }

    fn threefs_storage(name: &str, mountpoint: &str, root_dir: &str) -> StorageConfig {
        let mut c = StorageConfig {
            global_unique_name: name.into(),
            threefs: Some(ThreeFsStorageSpec {
                mountpoint: mountpoint.into(),
                root_dir: root_dir.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        storage(&mut c).unwrap();
        c
    }

    #[test]
    fn file_like_storages_whose_roots_nest_or_coincide_are_refused_naming_both() {
        let existing = [
            file_storage("a", "/data/a"),
            threefs_storage("t", "/3fs/", "kv"),
            StorageConfig {
                global_unique_name: "mc".into(),
                mooncake: Some(MooncakeStorageSpec::default()),
                ..Default::default()
            },
        ];
        for (new, relation, other) in [
            (file_storage("b", "/data/a/b"), "lies inside", "'a'"),
            (file_storage("b", "/data"), "contains", "'a'"),
            (file_storage("b", "/"), "contains", "'a'"),
            (file_storage("b", "/data/a/"), "is the same directory as", "'a'"),
            (file_storage("b", "/data//./a"), "is the same directory as", "'a'"),
            (threefs_storage("b", "/data/", "a/x"), "lies inside", "'a'"),
            (file_storage("b", "/3fs/kv/i"), "lies inside", "'t'"),
        ] {
            let e = roots_disjoint(&new, &existing).unwrap_err();
            assert_eq!(e.code(), crate::wire::StatusCode::INVALID_ARGUMENT);
            let m = e.to_string();
            assert!(m.contains("storage 'b'") && m.contains(relation) && m.contains(other), "{m}");
        }
        for ok in [
            file_storage("b", "/data/ab"),
            file_storage("b", "/dat"),
            file_storage("b", "/3fs/kv2"),
            threefs_storage("b", "/3fs/", "other"),
            // An update of a storage keeps its own root.
            file_storage("a", "/data/a"),
            StorageConfig {
                global_unique_name: "mc2".into(),
                mooncake: Some(MooncakeStorageSpec::default()),
                ..Default::default()
            },
        ] {
            roots_disjoint(&ok, &existing).unwrap();
        }
    }

    #[test]
    fn a_storage_needs_exactly_one_spec() {
        let mut c = StorageConfig { global_unique_name: "s".into(), ..Default::default() };
        assert!(storage(&mut c).unwrap_err().to_string().contains("exactly one"));
    }

    #[test]
    fn fingerprint_ignores_user_data_only() {
        let mut a = InstanceInfo { instance_id: "i".into(), block_size: 16, ..Default::default() };
        let fa = fingerprint(&a);
        a.model_deployment.user_data = "anything".into();
        assert_eq!(fingerprint(&a), fa);
        a.model_deployment.extra = "x".into();
        assert_ne!(fingerprint(&a), fa);
    }
}
