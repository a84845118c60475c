//! The registry: storages, instance groups, instances, accounts and API keys, kept in Valkey
//! under the `{reg}` hash tag (DESIGN §3) and cached by every frontend.
//!
//! * **Writes** go through one Lua script per operation (`lua/registry_*.lua`), so checks and
//!   changes are atomic across frontends: removing a storage a group uses, or registering past
//!   `max_instance_count`, cannot race. (A group may name storages not added yet, as in Tair.)
//! * **Reads** on the request path use a [`Snapshot`] cached in process. Every change bumps a
//!   version counter; [`Registry::refresh`] compares it (one GET) and reloads the whole snapshot
//!   atomically (`registry_snapshot.lua`) when it moved. Frontends refresh on a short timer and
//!   at once when a request names an instance they do not know, so an instance registered on
//!   one frontend is usable on every other immediately. Admin-plane reads refresh first too.
//! * **No amplification**: checks and reloads are single-flight — at most one is in flight per
//!   frontend, and a caller that waited for one issued after it asked uses that one's result
//!   instead of issuing its own. A name found missing is remembered for `negative_cache`
//!   (default 50 ms, and only while the snapshot's version is unchanged), so a flood of requests
//!   naming one unknown instance, group or API key costs at most one version check per window.
//!   The price: a name asked for and found missing within that window before it was registered
//!   elsewhere is still answered missing until the window ends; a name not asked for before is
//!   checked at once.
//!
//! Failure: if Valkey is unreachable, writes fail with SERVICE_NOT_READY and the cached
//! snapshot keeps serving reads of known instances.
//!
//! This file holds the snapshot, its refresh and the startup file; the operations on each kind
//! of entry are in `storages`, `groups`, `instances` and `accounts`.

mod accounts;
pub mod config_snapshot;
mod groups;
mod instances;
mod storages;
pub mod tair_format;
pub mod validate;

pub use accounts::{MAX_PASSWORD_BYTES, StoredAccount, StoredApiKey};

use crate::error::{Error, Result};
use crate::keys::RegistryKeys;
use crate::limits::Limits;
use crate::scripts::{self, status_reply};
use crate::wire::admin::{AccountRole, InstanceGroup, StorageConfig};
use crate::wire::{InstanceInfo, StatusCode};
use redis::cluster_async::ClusterConnection;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// One consistent copy of the whole registry.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub version: u64,
    pub storages: BTreeMap<String, StorageConfig>,
    pub groups: BTreeMap<String, InstanceGroup>,
    pub instances: HashMap<String, Arc<InstanceInfo>>,
    pub accounts: BTreeMap<String, StoredAccount>,
    /// API key id → key (role, scopes, token digest).
    pub api_keys: HashMap<String, StoredApiKey>,
    /// Storage name → numeric id stored in block records, and back.
    pub storage_ids: HashMap<String, u16>,
    pub storage_names: HashMap<u16, String>,
}

impl Snapshot {
    /// The group's candidate storages that exist, in candidate order.
    pub fn group_storages(&self, group: &str) -> Vec<&StorageConfig> {
        self.groups
            .get(group)
            .map(|g| g.storage_candidates.iter().filter_map(|n| self.storages.get(n)).collect())
            .unwrap_or_default()
    }

    /// The group's candidate storages that do not exist (yet), in candidate order.
    pub fn missing_candidates(&self, group: &InstanceGroup) -> Vec<String> {
        group.storage_candidates.iter().filter(|n| !self.storages.contains_key(*n)).cloned().collect()
    }

    /// Whether an admin credential (account or API key with ROLE_ADMIN) exists: then the admin
    /// plane requires one.
    pub fn has_admin(&self) -> bool {
        self.accounts.values().any(|a| a.role == AccountRole::ROLE_ADMIN)
            || self.api_keys.values().any(|k| k.role == AccountRole::ROLE_ADMIN)
    }

    /// Whether any credential exists that could call the meta plane.
    pub fn has_credentials(&self) -> bool {
        !self.accounts.is_empty() || !self.api_keys.is_empty()
    }
}

type SnapshotReply = (
    i64,
    String,
    Vec<String>,
    Vec<String>,
    Vec<String>,
    Vec<String>,
    Vec<String>,
    Vec<String>,
    Vec<String>,
    Vec<String>,
);

fn decode_pairs<T: serde::de::DeserializeOwned>(what: &str, flat: Vec<String>) -> Vec<(String, T)> {
    let mut out = Vec::with_capacity(flat.len() / 2);
    let mut it = flat.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        match serde_json::from_str(&v) {
            Ok(t) => out.push((k, t)),
            // A record we cannot read must not take the whole registry down; it is logged and
            // skipped (it can still be removed through the admin plane).
            // Only where and what kind of error: serde's message can quote a value (a hash).
            Err(e) => tracing::error!(%what, name = %k, line = e.line(), column = e.column(), kind = ?e.classify(),
                "skipping unreadable registry record"),
        }
    }
    out
}

/// What a registry client needs besides its connection and namespace.
#[derive(Debug, Clone)]
pub struct RegistryOptions {
    pub limits: Limits,
    /// How long a name found missing is remembered (while the version is unchanged).
    pub negative_cache: Duration,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        RegistryOptions { limits: Limits::default(), negative_cache: Duration::from_millis(50) }
    }
}

impl From<&crate::config::Config> for RegistryOptions {
    fn from(c: &crate::config::Config) -> Self {
        RegistryOptions { limits: c.limits(), negative_cache: Duration::from_millis(c.negative_cache_ms) }
    }
}

/// The kinds of names remembered as missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Instance,
    Group,
    ApiKey,
}

/// Most names remembered as missing; the memory is cleared when it fills up.
const ABSENT_LIMIT: usize = 4096;

/// The registry client: cached snapshot plus admin operations.
pub struct Registry {
    conn: ClusterConnection,
    keys: RegistryKeys,
    limits: Limits,
    /// `limits` with names and ids at their hard caps, for looking up what exists: lowering a
    /// bound must not strand an account or instance created under a higher one.
    lookup_limits: Limits,
    cache: RwLock<Arc<Snapshot>>,
    /// Held while a version check or reload is in flight (single flight).
    reload_lock: tokio::sync::Mutex<()>,
    /// When the last completed check or reload was issued: the snapshot was current then.
    fresh_as_of: Mutex<Option<Instant>>,
    /// Names found missing: (kind, name) → when. Cleared by every reload.
    absent: Mutex<HashMap<(Kind, String), Instant>>,
    negative_cache: Duration,
    /// Version checks (GETs) and full reloads sent to Valkey, for metrics.
    checks: AtomicU64,
    reloads: AtomicU64,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("version", &self.snapshot().version).finish()
    }
}

impl Registry {
    /// Connects the registry to Valkey and loads the first snapshot.
    pub async fn open(conn: ClusterConnection, namespace: &str, options: RegistryOptions) -> Result<Arc<Registry>> {
        let reg = Arc::new(Registry {
            conn,
            keys: RegistryKeys::new(namespace),
            lookup_limits: options.limits.for_lookups(),
            limits: options.limits,
            cache: RwLock::new(Arc::new(Snapshot::default())),
            reload_lock: tokio::sync::Mutex::new(()),
            fresh_as_of: Mutex::new(None),
            absent: Mutex::new(HashMap::new()),
            negative_cache: options.negative_cache,
            checks: AtomicU64::new(0),
            reloads: AtomicU64::new(0),
        });
        reg.reload().await?;
        Ok(reg)
    }

    /// The cached snapshot (cheap: an `Arc` clone).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.cache.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Version checks and full reloads this client has sent to Valkey so far.
    pub fn stats(&self) -> (u64, u64) {
        (self.checks.load(Ordering::Relaxed), self.reloads.load(Ordering::Relaxed))
    }

    /// The request bounds this registry validates new things against.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The bounds for names of things that may already exist (see [`Limits::for_lookups`]).
    pub fn lookup_limits(&self) -> &Limits {
        &self.lookup_limits
    }

    fn conn(&self) -> ClusterConnection {
        self.conn.clone()
    }

    /// How long ago the snapshot was last confirmed current (a check or reload completed), or
    /// `None` before the first.
    pub fn confirmed_ago(&self) -> Option<Duration> {
        (*self.fresh_as_of.lock().unwrap_or_else(|p| p.into_inner())).map(|t| t.elapsed())
    }

    /// Whether a check or reload issued at or after `asked` has completed.
    fn fresh_since(&self, asked: Instant) -> bool {
        self.fresh_as_of.lock().unwrap_or_else(|p| p.into_inner()).is_some_and(|t| t >= asked)
    }

    fn mark_fresh(&self, issued: Instant) {
        *self.fresh_as_of.lock().unwrap_or_else(|p| p.into_inner()) = Some(issued);
    }

    /// Makes the snapshot at least as new as the stored registry was when this call began:
    /// one GET of the version, and a reload only if it moved. Single flight: concurrent callers
    /// wait for the one in flight, and reuse any check issued after they asked. Returns whether
    /// this call reloaded.
    pub async fn refresh(&self) -> Result<bool> {
        let asked = Instant::now();
        let _single_flight = self.reload_lock.lock().await;
        if self.fresh_since(asked) {
            return Ok(false);
        }
        let issued = Instant::now();
        self.checks.fetch_add(1, Ordering::Relaxed);
        let stored: Option<u64> = redis::cmd("GET").arg(&self.keys.version).query_async(&mut self.conn()).await?;
        // Re-checked under the lock: a reload that finished while we waited made this current.
        if stored.unwrap_or(0) == self.snapshot().version {
            self.mark_fresh(issued);
            return Ok(false);
        }
        self.reload_locked(issued).await?;
        Ok(true)
    }

    /// Reads the whole registry atomically and replaces the cached snapshot (unless a reload
    /// issued after this call began has completed meanwhile: then its snapshot is returned).
    pub async fn reload(&self) -> Result<Arc<Snapshot>> {
        let asked = Instant::now();
        let _single_flight = self.reload_lock.lock().await;
        if self.fresh_since(asked) {
            return Ok(self.snapshot());
        }
        self.reload_locked(Instant::now()).await
    }

    async fn reload_locked(&self, issued: Instant) -> Result<Arc<Snapshot>> {
        self.reloads.fetch_add(1, Ordering::Relaxed);
        let mut inv = scripts::REGISTRY_SNAPSHOT.script().prepare_invoke();
        for k in self.keys.all() {
            inv.key(k);
        }
        let (_, version, storages, disabled, groups, instances, accounts, ids, unhealthy, api_keys): SnapshotReply =
            inv.invoke_async(&mut self.conn()).await?;
        let mut snap = Snapshot {
            version: version.parse().unwrap_or(0),
            storages: decode_pairs("storage", storages).into_iter().collect(),
            groups: decode_pairs("group", groups).into_iter().collect(),
            instances: decode_pairs::<InstanceInfo>("instance", instances)
                .into_iter()
                .map(|(k, v)| (k, Arc::new(v)))
                .collect(),
            accounts: decode_pairs("account", accounts).into_iter().collect(),
            api_keys: decode_pairs("api key", api_keys).into_iter().collect(),
            ..Default::default()
        };
        for (name, s) in snap.storages.iter_mut() {
            s.is_available = !disabled.contains(name);
            s.is_healthy = !unhealthy.contains(name);
            // Stored before kvcm answered `storage_type`: the spec's.
            if s.declared_type == crate::wire::StorageType::ST_UNSPECIFIED
                && let Some(t) = s.storage_type()
            {
                s.declared_type = t;
            }
        }
        let mut it = ids.into_iter();
        while let (Some(name), Some(id)) = (it.next(), it.next()) {
            if let Ok(id) = id.parse::<u16>() {
                snap.storage_ids.insert(name.clone(), id);
                snap.storage_names.insert(id, name);
            }
        }
        let snap = Arc::new(snap);
        let current = {
            let mut w = self.cache.write().unwrap_or_else(|p| p.into_inner());
            // Reloads are serialised, so a lower version means the store itself went back (a
            // failover that lost the last changes, a restore, a flush): serve what it holds now.
            if snap.version < w.version {
                tracing::warn!(
                    from = w.version,
                    to = snap.version,
                    "the registry version went back in Valkey (failover, restore or flush); serving what it holds now"
                );
            }
            *w = snap.clone();
            w.clone()
        };
        self.absent.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.mark_fresh(issued);
        Ok(current)
    }

    /// Whether `name` was found missing recently (every reload forgets what was missing).
    fn known_absent(&self, kind: Kind, name: &str) -> bool {
        let absent = self.absent.lock().unwrap_or_else(|p| p.into_inner());
        absent.get(&(kind, name.to_string())).is_some_and(|at| at.elapsed() < self.negative_cache)
    }

    fn remember_absent(&self, kind: Kind, name: &str) {
        let mut absent = self.absent.lock().unwrap_or_else(|p| p.into_inner());
        if absent.len() >= ABSENT_LIMIT {
            absent.clear();
        }
        absent.insert((kind, name.to_string()), Instant::now());
    }

    /// Looks a name up in the snapshot; when missing (and not known missing), refreshes once
    /// and looks again. `None` means it does not exist.
    pub(crate) async fn lookup<T>(
        &self,
        kind: Kind,
        name: &str,
        get: impl Fn(&Snapshot) -> Option<T>,
    ) -> Result<Option<T>> {
        if let Some(v) = get(&self.snapshot()) {
            return Ok(Some(v));
        }
        if self.known_absent(kind, name) {
            return Ok(None);
        }
        self.refresh().await?;
        let found = get(&self.snapshot());
        if found.is_none() {
            self.remember_absent(kind, name);
        }
        Ok(found)
    }

    /// The registered instance, refreshing once if this frontend does not know it yet.
    pub async fn instance(&self, id: &str) -> Result<Arc<InstanceInfo>> {
        self.lookup(Kind::Instance, id, |s| s.instances.get(id).cloned()).await?.ok_or_else(|| {
            Error::status(
                StatusCode::INSTANCE_NOT_EXIST,
                format!("instance '{id}' is not registered; call registerInstance first"),
            )
        })
    }

    async fn run(&self, script: &scripts::LuaScript, keys: &[&str], args: &[&str]) -> Result<String> {
        status_reply(self.run_reply(script, keys, args).await?)
    }

    /// A script's `{code, payload}` as it answered, for bindings that handle codes of their own
    /// ([`scripts::CHANGED_MEANWHILE`], [`scripts::NO_SUCH_STORAGE`]).
    async fn run_reply(&self, script: &scripts::LuaScript, keys: &[&str], args: &[&str]) -> Result<(i64, String)> {
        let mut inv = script.script().prepare_invoke();
        for k in keys {
            inv.key(*k);
        }
        for a in args {
            inv.arg(*a);
        }
        Ok(inv.invoke_async(&mut self.conn()).await?)
    }

    /// A storage write ([`retry_on_conflict`]): `Ok(false)` when the storages changed since they
    /// were read (nothing written), else the script's outcome, and a reload after a write.
    async fn storage_write(&self, script: &scripts::LuaScript, keys: &[&str], args: &[&str]) -> Result<bool> {
        let reply = self.run_reply(script, keys, args).await?;
        if reply.0 == scripts::CHANGED_MEANWHILE {
            return Ok(false);
        }
        status_reply(reply)?;
        if let Err(e) = self.reload().await {
            tracing::warn!(error = %e, "registry reload after a write failed; the timer will retry");
        }
        Ok(true)
    }

    /// Runs a registry write and refreshes this frontend's snapshot so its next read sees it.
    async fn write(&self, script: &scripts::LuaScript, keys: &[&str], args: &[&str]) -> Result<String> {
        let out = self.run(script, keys, args).await?;
        if let Err(e) = self.reload().await {
            tracing::warn!(error = %e, "registry reload after a write failed; the timer will retry");
        }
        Ok(out)
    }

    /// The snapshot, refreshed first (what admin-plane reads answer from).
    pub async fn current(&self) -> Result<Arc<Snapshot>> {
        self.refresh().await?;
        Ok(self.snapshot())
    }

    // ---- startup ----

    /// Applies a startup file idempotently: storages and groups that do not exist are created;
    /// existing ones are left as they are (and a differing config is logged).
    pub async fn apply_startup(&self, startup: tair_format::Startup) -> Result<()> {
        for cfg in startup.storages {
            let name = cfg.global_unique_name.clone();
            match self.add_storage(cfg).await {
                Ok(()) => {
                    tracing::info!(storage = %name, "startup config: storage present (added, or already as configured)")
                }
                Err(Error::Status { code: StatusCode::DUPLICATE_ENTITY, .. }) => {
                    tracing::info!(storage = %name, "startup config: storage exists with another configuration; left unchanged")
                }
                Err(e) => return Err(prefix(e, &format!("startup config storage '{name}'"))),
            }
        }
        for g in startup.groups {
            let name = g.name.clone();
            match self.create_group(g).await {
                Ok(()) => {
                    tracing::info!(group = %name, "startup config: instance group present (created, or already as configured)")
                }
                Err(Error::Status { code: StatusCode::DUPLICATE_ENTITY, .. }) => {
                    tracing::info!(group = %name, "startup config: instance group exists with another configuration; left unchanged")
                }
                Err(e) => return Err(prefix(e, &format!("startup config instance group '{name}'"))),
            }
        }
        Ok(())
    }
}

/// Stored storage configs for the roots check; an unreadable record is skipped, as the snapshot
/// skips it (no block can be placed on it).
fn parse_storages(stored: &BTreeMap<String, String>) -> Vec<StorageConfig> {
    stored.values().filter_map(|json| serde_json::from_str(json).ok()).collect()
}

/// Runs a storage write again (re-reading the storages) while its script answers that they
/// changed under it (`Ok(false)`: another admin's storage write raced this one), 5 times at most.
async fn retry_on_conflict<F, Fut>(mut attempt: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    for _ in 0..5 {
        if attempt().await? {
            return Ok(());
        }
    }
    Err(Error::status(
        StatusCode::SERVICE_NOT_READY,
        "the storages kept changing while this storage was being checked against them (other admins' writes); retry",
    ))
}

fn prefix(e: Error, what: &str) -> Error {
    match e {
        Error::Status { code, message } => Error::Status { code, message: format!("{what}: {message}") },
        other => other,
    }
}
