//! Validation of admin-plane input, run before any script: names, storage specs, instance
//! groups, instance registrations and accounts. Every error says which field is wrong and how.
//!
//! Validation also normalises where the protocol is lenient (a `root_path` without its trailing
//! `/` gains one; `key_count_per_file` 0 means 1), so what is stored is canonical. Sizes and
//! counts are checked against the configured [`Limits`].

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::limits::Limits;
use crate::wire::admin::{AccountRole, InstanceGroup, StorageConfig};
use crate::wire::{InstanceInfo, RegisterInstanceRequest, StorageType};
use std::collections::HashSet;

/// Largest `block_size` (tokens per block) an instance may register.
pub const MAX_BLOCK_SIZE: i32 = 1 << 20;
/// Longest file name most file systems accept (an instance's directory).
const MAX_SEGMENT_BYTES: usize = 255;
/// Largest `tp_size`, `dp_size` and `pp_size`.
pub const MAX_PARALLELISM: i32 = 1 << 16;

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary, for
/// quoting an oversized value in a message without echoing all of it.
fn clip(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A storage, group, spec, account or API key name: 1–`max_name_bytes` of `[A-Za-z0-9._:-]`,
/// and not `.` or `..` (names may become path segments).
pub fn name(limits: &Limits, field: &str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(format!("{field} is required")));
    }
    if value.len() > limits.max_name_bytes {
        return Err(Error::invalid(format!(
            "{field} \"{}…\" is longer than {} bytes (max_name_bytes)",
            clip(value, 32),
            limits.max_name_bytes
        )));
    }
    if let Some(c) = value.chars().find(|c| !(c.is_ascii_alphanumeric() || "._:-".contains(*c))) {
        return Err(Error::invalid(format!(
            "{field} \"{}\" contains {c:?}; use letters, digits, '.', '_', ':' and '-'",
            clip(value, 64)
        )));
    }
    if value == "." || value == ".." {
        return Err(Error::invalid(format!("{field} must not be \".\" or \"..\" (names become path segments)")));
    }
    Ok(())
}

/// An instance id: 1–`max_instance_id_bytes` printable ASCII characters without whitespace,
/// braces (they would break the Valkey hash tag), backslashes or `..` path segments.
pub fn instance_id(limits: &Limits, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid("instance_id is required"));
    }
    if value.len() > limits.max_instance_id_bytes {
        return Err(Error::invalid(format!(
            "instance_id \"{}…\" is longer than {} bytes (max_instance_id_bytes)",
            clip(value, 32),
            limits.max_instance_id_bytes
        )));
    }
    if let Some(c) = value.chars().find(|c| !c.is_ascii_graphic() || "{}\\?#%&".contains(*c)) {
        return Err(Error::invalid(format!(
            "instance_id \"{}\" contains {c:?}; whitespace, control characters and {{}}\\?#%& are not allowed",
            clip(value, 64).escape_debug()
        )));
    }
    // File-like storages keep an instance's blocks in one directory named by an escaped form
    // of its id (up to three bytes per escaped byte); it must fit a file name.
    let segment = crate::backend::path_segment(value);
    if segment.len() > MAX_SEGMENT_BYTES {
        return Err(Error::invalid(format!(
            "instance_id \"{}…\" needs {} bytes as a directory name (characters other than letters, \
             digits and -._:@ take three); at most {MAX_SEGMENT_BYTES} fit",
            clip(value, 32),
            segment.len()
        )));
    }
    if value.starts_with('/') || value.split('/').any(|seg| seg.is_empty() || seg == "." || seg == "..") {
        return Err(Error::invalid(format!(
            "instance_id \"{value}\" must not start with '/' or contain empty, '.' or '..' path segments"
        )));
    }
    Ok(())
}

/// The scope that grants every instance group.
pub const ALL_GROUPS: &str = "*";

/// The instance groups a credential may act on: group names (existing or not yet: provisioning
/// tools create things in any order) or `*`, deduplicated and sorted. Admins act on every group,
/// so scopes on an admin credential are refused rather than silently ignored.
pub fn scopes(limits: &Limits, role: AccountRole, groups: &[String]) -> Result<Vec<String>> {
    if role == AccountRole::ROLE_ADMIN && !groups.is_empty() {
        return Err(Error::invalid(
            "instance_groups applies to ROLE_USER credentials; a ROLE_ADMIN credential acts on every group",
        ));
    }
    limits.count("instance_groups", groups.len(), limits.max_list_items, "max_list_items")?;
    // Scopes name groups that may exist already (under a higher max_name_bytes than today's).
    let lookup = limits.for_lookups();
    let mut out = Vec::with_capacity(groups.len());
    for g in groups {
        if g != ALL_GROUPS {
            name(&lookup, "instance_groups[]", g)?;
        }
        out.push(g.clone());
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Validates and normalises a storage config.
pub fn storage(limits: &Limits, cfg: &mut StorageConfig) -> Result<()> {
    name(limits, "storage.global_unique_name", &cfg.global_unique_name)?;
    for (field, v) in storage_strings(cfg) {
        limits.string(&format!("storage.{field}"), v)?;
    }
    let Some(derived) = cfg.storage_type() else {
        return Err(Error::invalid(
            "storage must set exactly one of nfs, threefs, mooncake, tair_mem_pool, vcnsthreefs, local, event_report",
        ));
    };
    if let Some(er) = &cfg.event_report {
        if !matches!(cfg.declared_type, StorageType::ST_EVENT_REPORT_L1P5 | StorageType::ST_EVENT_REPORT_L2) {
            return Err(Error::invalid(
                "storage.storage_type must be ST_EVENT_REPORT_L1P5 or ST_EVENT_REPORT_L2 for an event_report storage",
            ));
        }
        const DAY_MS: i64 = 86_400_000;
        for (field, v) in [
            ("heartbeat_timeout_ms", er.heartbeat_timeout_ms),
            ("cleanup_grace_ms", er.cleanup_grace_ms),
            ("liveness_check_interval_ms", er.liveness_check_interval_ms),
            ("snapshot_min_interval_ms", er.snapshot_min_interval_ms),
            ("snapshot_delta_drain_timeout_ms", er.snapshot_delta_drain_timeout_ms),
        ] {
            if !(0..=DAY_MS).contains(&v) {
                return Err(Error::invalid(format!(
                    "storage.event_report.{field} must be within 0..={DAY_MS} ms (0: kvcm's default), got {v}"
                )));
            }
        }
        if er.heartbeat_timeout_ms > 0 && er.cleanup_grace_ms > 0 && er.cleanup_grace_ms < er.heartbeat_timeout_ms {
            return Err(Error::invalid(
                "storage.event_report.cleanup_grace_ms must not be shorter than heartbeat_timeout_ms (a reporter is \
                 hidden at its heartbeat timeout, unregistered at its grace)",
            ));
        }
    } else if cfg.declared_type != StorageType::ST_UNSPECIFIED && cfg.declared_type != derived {
        return Err(Error::invalid(format!(
            "storage.storage_type {} does not match the storage spec ({derived})",
            cfg.declared_type
        )));
    } else {
        cfg.declared_type = derived;
    }
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

/// Every free-text field of a storage config, named.
fn storage_strings(cfg: &StorageConfig) -> Vec<(&'static str, &str)> {
    let mut out = Vec::new();
    if let Some(n) = &cfg.nfs {
        out.push(("nfs.root_path", n.root_path.as_str()));
    }
    if let Some(l) = &cfg.local {
        out.push(("local.path", l.path.as_str()));
    }
    if let Some(t) = &cfg.threefs {
        out.extend([
            ("threefs.cluster_name", t.cluster_name.as_str()),
            ("threefs.mountpoint", &t.mountpoint),
            ("threefs.root_dir", &t.root_dir),
        ]);
    }
    if let Some(v) = &cfg.vcnsthreefs {
        out.extend([
            ("vcnsthreefs.cluster_name", v.cluster_name.as_str()),
            ("vcnsthreefs.mountpoint", &v.mountpoint),
            ("vcnsthreefs.root_dir", &v.root_dir),
            ("vcnsthreefs.remote_host", &v.remote_host),
            ("vcnsthreefs.meta_storage_uri", &v.meta_storage_uri),
        ]);
    }
    if let Some(m) = &cfg.mooncake {
        out.extend([
            ("mooncake.local_hostname", m.local_hostname.as_str()),
            ("mooncake.metadata_connstring", &m.metadata_connstring),
            ("mooncake.protocol", &m.protocol),
            ("mooncake.rdma_device", &m.rdma_device),
            ("mooncake.master_service_entry", &m.master_service_entry),
        ]);
    }
    if let Some(p) = &cfg.tair_mem_pool {
        out.extend([
            ("tair_mem_pool.domain", p.domain.as_str()),
            ("tair_mem_pool.service_discovery_url", &p.service_discovery_url),
        ]);
    }
    out
}

/// The part of a storage config that decides where existing blocks live. Changing it would
/// orphan those blocks, so `updateStorage` requires `force_update` for it.
pub fn storage_placement(cfg: &StorageConfig) -> String {
    let mut c = normalized(cfg);
    c.check_storage_available_when_open = false;
    c.is_available = true;
    c.is_healthy = true;
    // An event-report storage holds no blocks: its settings are not where blocks live.
    if let Some(er) = c.event_report.as_mut() {
        *er = Default::default();
    }
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

/// `cfg` with its `storage_type` as its spec says (a config stored before kvcm answered the
/// field has none): what comparisons of stored and new configs must use.
pub fn normalized(cfg: &StorageConfig) -> StorageConfig {
    let mut c = cfg.clone();
    if c.event_report.is_none()
        && let Some(t) = c.storage_type()
    {
        c.declared_type = t;
    }
    c
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
    let others = existing.into_iter().filter(|o| o.global_unique_name != new.global_unique_name);
    match root_overlap(new, others) {
        None => Ok(()),
        Some((other, relation)) => Err(Error::invalid(format!(
            "storage '{}' root {} {relation} the root {} of storage '{}'; \
             the roots of file-like storages must not nest or coincide (an instance of one storage \
             would own the other's files): choose a separate directory",
            new.global_unique_name,
            Backend::of(new).root().unwrap_or_default(),
            Backend::of(other).root().unwrap_or_default(),
            other.global_unique_name
        ))),
    }
}

/// The first of `others` (whatever its name) whose root nests in, contains or is `cfg`'s root,
/// and how (`"is the same directory as"`, `"lies inside"`, `"contains"`), compared as
/// [`roots_disjoint`] does; `None` when `cfg` has no root or overlaps none.
pub fn root_overlap<'a>(
    cfg: &StorageConfig,
    others: impl IntoIterator<Item = &'a StorageConfig>,
) -> Option<(&'a StorageConfig, &'static str)> {
    fn segments(root: &str) -> Vec<&str> {
        root.split('/').filter(|s| !s.is_empty() && *s != ".").collect()
    }
    let backend = Backend::of(cfg);
    let own = segments(backend.root()?);
    others.into_iter().find_map(|other| {
        let other_backend = Backend::of(other);
        let theirs = segments(other_backend.root()?);
        let common = own.len().min(theirs.len());
        (own[..common] == theirs[..common]).then_some(())?;
        let relation = match own.len().cmp(&theirs.len()) {
            std::cmp::Ordering::Equal => "is the same directory as",
            std::cmp::Ordering::Greater => "lies inside",
            std::cmp::Ordering::Less => "contains",
        };
        Some((other, relation))
    })
}

/// Validates an instance group (create and update), and returns its JSON as stored.
pub fn group(limits: &Limits, g: &InstanceGroup) -> Result<String> {
    name(limits, "instance_group.name", &g.name)?;
    if g.storage_candidates.is_empty() {
        return Err(Error::invalid("instance_group.storage_candidates must name at least one storage"));
    }
    limits.count(
        "instance_group.storage_candidates",
        g.storage_candidates.len(),
        limits.max_list_items,
        "max_list_items",
    )?;
    limits.string("instance_group.user_data", &g.user_data)?;
    if !g.global_quota_group_name.is_empty() {
        name(limits, "instance_group.global_quota_group_name", &g.global_quota_group_name)?;
    }
    let mut seen = HashSet::new();
    for c in &g.storage_candidates {
        name(limits, "instance_group.storage_candidates[]", c)?;
        if !seen.insert(c) {
            return Err(Error::invalid(format!("instance_group.storage_candidates lists \"{c}\" twice")));
        }
    }
    limits.count(
        "instance_group.event_report_storage_candidates",
        g.event_report_storage_candidates.len(),
        limits.max_list_items,
        "max_list_items",
    )?;
    let mut seen = HashSet::new();
    for c in &g.event_report_storage_candidates {
        name(limits, "instance_group.event_report_storage_candidates[]", c)?;
        if !seen.insert(c) {
            return Err(Error::invalid(format!("instance_group.event_report_storage_candidates lists \"{c}\" twice")));
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
        // Engine-reported tiers are the engines' memory: no quota applies to them (nor to
        // ST_DUMMY, which stores nothing).
        if matches!(
            q.storage_type,
            StorageType::ST_DUMMY | StorageType::ST_EVENT_REPORT_L1P5 | StorageType::ST_EVENT_REPORT_L2
        ) {
            return Err(Error::invalid(format!(
                "instance_group.quota.quota_config: {} holds no kvcm-managed bytes; quotas apply to storage types",
                q.storage_type
            )));
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
            clip(&r.storage_unique_name, 64)
        )));
    }
    let indexer = serde_json::Value::Object(g.cache_config.meta_indexer_config.clone());
    serde_path_to_error::deserialize::<_, MetaIndexerShape>(indexer).map_err(|e| {
        Error::invalid(format!("instance_group.cache_config.meta_indexer_config.{}: {}", e.path(), e.inner()))
    })?;
    let json = serde_json::to_string(g).map_err(|e| Error::internal(e.to_string()))?;
    if json.len() > limits.max_group_bytes {
        return Err(Error::invalid(format!(
            "instance_group takes {} bytes as stored (user_data, meta_indexer_config …); at most {} are \
             accepted (max_group_bytes)",
            json.len(),
            limits.max_group_bytes
        )));
    }
    Ok(json)
}

/// The shape Tair gives `meta_indexer_config`. kvcm keeps its metadata in Valkey and only stores
/// and echoes this object, but what it echoes must read back as Tair's message (gRPC replies are
/// built from it), so the fields Tair defines must have Tair's types (`null` reads as the
/// default, as in protobuf JSON); other fields pass.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
#[allow(dead_code, reason = "read only to check the types")]
struct MetaIndexerShape {
    #[serde(deserialize_with = "crate::wire::codec::int64::deserialize")]
    max_key_count: i64,
    #[serde(deserialize_with = "crate::wire::codec::int64::deserialize")]
    mutex_shard_num: i64,
    #[serde(deserialize_with = "crate::wire::codec::int64::deserialize")]
    batch_key_size: i64,
    meta_storage_backend_config: Option<MetaStorageBackendShape>,
    meta_cache_policy_config: Option<MetaCachePolicyShape>,
    /// A `google.protobuf.Int64Value`: its JSON is the number (or null).
    #[serde(deserialize_with = "crate::wire::codec::int64::deserialize")]
    persist_metadata_interval_time_ms: i64,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
#[allow(dead_code, reason = "read only to check the types")]
struct MetaStorageBackendShape {
    storage_type: Option<String>,
    storage_uri: Option<String>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
#[allow(dead_code, reason = "read only to check the types")]
struct MetaCachePolicyShape {
    #[serde(deserialize_with = "crate::wire::codec::int64::deserialize")]
    capacity: i64,
    r#type: Option<String>,
    cache_shard_bits: Option<i32>,
    high_pri_pool_ratio: Option<f64>,
}

/// Validates a registration and builds the instance record it asks for.
pub fn registration(limits: &Limits, req: &RegisterInstanceRequest) -> Result<InstanceInfo> {
    // The group must exist already (it may predate a lowered max_name_bytes).
    name(&limits.for_lookups(), "instance_group", &req.instance_group)?;
    instance_id(limits, &req.instance_id)?;
    if req.block_size <= 0 || req.block_size > MAX_BLOCK_SIZE {
        return Err(Error::invalid(format!(
            "block_size must be within 1..={MAX_BLOCK_SIZE} tokens, got {}",
            req.block_size
        )));
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
    for (field, v) in [
        ("model_deployment.model_name", &md.model_name),
        ("model_deployment.dtype", &md.dtype),
        ("model_deployment.lora_name", &md.lora_name),
        ("model_deployment.extra", &md.extra),
        ("model_deployment.user_data", &md.user_data),
    ] {
        limits.string(field, v)?;
    }
    let parallelism = 0..=MAX_PARALLELISM;
    if !(parallelism.contains(&md.tp_size) && parallelism.contains(&md.dp_size) && parallelism.contains(&md.pp_size)) {
        return Err(Error::invalid(format!(
            "model_deployment tp_size, dp_size and pp_size must be within 0..={MAX_PARALLELISM}"
        )));
    }
    if req.location_spec_infos.is_empty() {
        return Err(Error::invalid(
            "location_spec_infos must list at least one spec (e.g. {\"name\":\"tp0\",\"size\":4096})",
        ));
    }
    limits.count(
        "location_spec_infos",
        req.location_spec_infos.len(),
        limits.max_specs_per_instance,
        "max_specs_per_instance",
    )?;
    limits.count(
        "location_spec_groups",
        req.location_spec_groups.len(),
        limits.max_spec_groups_per_instance,
        "max_spec_groups_per_instance",
    )?;
    let mut specs = HashSet::new();
    for s in &req.location_spec_infos {
        name(limits, "location_spec_infos[].name", &s.name)?;
        if !specs.insert(s.name.as_str()) {
            return Err(Error::invalid(format!("location_spec_infos lists \"{}\" twice", s.name)));
        }
        if s.size <= 0 {
            return Err(Error::invalid(format!("location_spec_infos \"{}\" size must be > 0 bytes", s.name)));
        }
    }
    // Saturating: sizes are i64 from the wire, and two huge ones must not overflow the sum.
    let total: i64 = req.location_spec_infos.iter().fold(0i64, |acc, s| acc.saturating_add(s.size));
    if total > u32::MAX as i64 {
        return Err(Error::invalid(format!(
            "location_spec_infos sum to {total} bytes per block; at most 4 GiB are supported"
        )));
    }
    let mut groups = HashSet::new();
    for g in &req.location_spec_groups {
        name(limits, "location_spec_groups[].name", &g.name)?;
        if !groups.insert(g.name.as_str()) {
            return Err(Error::invalid(format!("location_spec_groups lists \"{}\" twice", g.name)));
        }
        if g.spec_names.is_empty() {
            return Err(Error::invalid(format!("location_spec_groups \"{}\" has no spec_names", g.name)));
        }
        let mut members = HashSet::new();
        for s in &g.spec_names {
            if !specs.contains(s.as_str()) {
                return Err(Error::invalid(format!(
                    "location_spec_groups \"{}\" names spec \"{}\", which is not in location_spec_infos",
                    g.name,
                    clip(s, 64).escape_debug()
                )));
            }
            if !members.insert(s.as_str()) {
                return Err(Error::invalid(format!("location_spec_groups \"{}\" lists spec \"{s}\" twice", g.name)));
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
        let l = Limits::default();
        let long = "x".repeat(l.max_instance_id_bytes + 1);
        for bad in ["", "a{b", "a}b", "a b", "../x", "a/../b", "/abs", "a//b", "x\u{7}", "a?b", &long] {
            assert!(instance_id(&l, bad).is_err(), "{bad:?} accepted");
        }
        for good in ["inst-1", "Qwen/Qwen2-7B", "model:v1.2_tp8", "a@b+c=d"] {
            instance_id(&l, good).unwrap();
        }
        // 199 bytes, 99 of them slashes escaped to 3 bytes each: 397 bytes, over a file name's 255.
        let wide = "a/".repeat(99) + "a";
        assert!(instance_id(&l, &wide).unwrap_err().to_string().contains("directory name"), "{wide}");
    }

    #[test]
    fn names_are_bounded_and_never_dot_segments() {
        let l = Limits::default();
        for bad in [".", "..", "a/b", "", "a b", &"n".repeat(l.max_name_bytes + 1)] {
            assert!(name(&l, "f", bad).is_err(), "{bad:?} accepted");
        }
        for good in ["...", ".hidden", "tp0", "a.b:c-d_e", &"n".repeat(l.max_name_bytes)] {
            name(&l, "f", good).unwrap();
        }
    }

    #[test]
    fn registrations_are_bounded_in_specs_groups_and_strings() {
        let l = Limits { max_specs_per_instance: 2, max_spec_groups_per_instance: 1, ..Limits::default() };
        let spec = |n: &str| crate::wire::LocationSpecInfo { name: n.into(), size: 1 };
        let ok = RegisterInstanceRequest {
            instance_group: "g".into(),
            instance_id: "i".into(),
            block_size: 16,
            location_spec_infos: vec![spec("a"), spec("b")],
            model_deployment: Some(crate::wire::ModelDeployment {
                model_name: "m".into(),
                dtype: "d".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        registration(&l, &ok).unwrap();
        let mut r = ok.clone();
        r.location_spec_infos.push(spec("c"));
        assert!(registration(&l, &r).unwrap_err().to_string().contains("max_specs_per_instance"));
        let mut r = ok.clone();
        let group = |n: &str, specs: &[&str]| crate::wire::LocationSpecGroup {
            name: n.into(),
            spec_names: specs.iter().map(|s| s.to_string()).collect(),
        };
        r.location_spec_groups = vec![group("g1", &["a"]), group("g2", &["b"])];
        assert!(registration(&l, &r).unwrap_err().to_string().contains("max_spec_groups_per_instance"));
        r.location_spec_groups = vec![group("g1", &["a", "a"])];
        assert!(registration(&l, &r).unwrap_err().to_string().contains("twice"));
        let mut r = ok.clone();
        r.location_spec_infos[0].name = "..".into();
        assert!(registration(&l, &r).is_err());
        let mut r = ok.clone();
        r.model_deployment.as_mut().unwrap().extra = "x".repeat(l.max_string_bytes + 1);
        assert!(registration(&l, &r).unwrap_err().to_string().contains("model_deployment.extra"));
        let mut r = ok.clone();
        r.location_spec_infos = vec![
            crate::wire::LocationSpecInfo { name: "a".into(), size: i64::MAX },
            crate::wire::LocationSpecInfo { name: "b".into(), size: i64::MAX },
        ];
        assert!(registration(&l, &r).unwrap_err().to_string().contains("at most 4 GiB"));
        let mut r = ok;
        r.block_size = MAX_BLOCK_SIZE + 1;
        assert!(registration(&l, &r).unwrap_err().to_string().contains("block_size"));
    }

    #[test]
    fn nfs_root_path_is_normalised_and_must_be_absolute() {
        let mut c = StorageConfig {
            global_unique_name: "nfs_01".into(),
            nfs: Some(NfsStorageSpec { root_path: "/tmp/kv".into(), key_count_per_file: 0 }),
            ..Default::default()
        };
        let l = Limits::default();
        storage(&l, &mut c).unwrap();
        assert_eq!(c.nfs.as_ref().unwrap().root_path, "/tmp/kv/");
        assert_eq!(c.nfs.as_ref().unwrap().key_count_per_file, 1);
        c.nfs.as_mut().unwrap().root_path = "relative/".into();
        assert!(storage(&l, &mut c).unwrap_err().to_string().contains("absolute"));
        c.nfs.as_mut().unwrap().root_path = format!("/{}", "d".repeat(l.max_string_bytes));
        assert!(storage(&l, &mut c).unwrap_err().to_string().contains("max_string_bytes"));
    }

    fn file_storage(name: &str, root: &str) -> StorageConfig {
        let mut c = StorageConfig {
            global_unique_name: name.into(),
            nfs: Some(NfsStorageSpec { root_path: root.into(), key_count_per_file: 1 }),
            ..Default::default()
        };
        storage(&Limits::default(), &mut c).unwrap();
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
        storage(&Limits::default(), &mut c).unwrap();
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
        assert!(storage(&Limits::default(), &mut c).unwrap_err().to_string().contains("exactly one"));
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
