//! The data plane over Valkey (DESIGN §2.2–2.3, §3): one module per RPC, each a thin typed
//! wrapper around one Lua script (reads: one HMGET), plus the compact record codec.
//!
//! Every function takes validated domain input (instance info from the registry snapshot,
//! parsed keys and masks); errors are [`crate::Error`]s with messages for the caller. All keys
//! of one call share the instance's hash tag, so each call is one slot and atomic.
//!
//! **Reads** are a plain HMGET of the requested blocks, atomic by itself: Valkey does little
//! more than look the fields up, which is what keeps the hottest path cheap. The recency and
//! frequency bookkeeping that eviction needs is one follow-up write for the deepest block hit,
//! whatever the number of blocks (`ZADD … XX`, so it can never resurrect an evicted block).

pub mod dead_letters;
pub mod discovery;
pub mod durability;
pub mod finish_write_cache;
pub mod get_cache_location;
pub mod get_cache_meta;
pub mod maintenance;
pub mod record;
pub mod remove_cache;
pub mod report_event;
pub mod start_write_cache;
pub mod trim_cache;
pub mod usage;

use crate::error::{Error, Result};
use crate::keys::{InstanceKeys, block_field};
use crate::registry::Snapshot;
use crate::scripts::LuaScript;
use crate::wire::admin::StorageConfig;
use redis::cluster_async::ClusterConnection;
use std::sync::Arc;

/// Fields per HMGET when a read names many blocks.
pub const HMGET_CHUNK: usize = 1024;

pub use crate::limits::Limits;

/// The data plane client (cheap to clone).
#[derive(Clone)]
pub struct DataPlane {
    conn: ClusterConnection,
    namespace: Arc<str>,
    pub limits: Limits,
    usage: Arc<usage::UsageCache>,
    /// Key names per instance, built once rather than formatted again on every call.
    keys: Arc<std::sync::RwLock<std::collections::HashMap<String, Arc<InstanceKeys>>>>,
    /// Set with `durability = "replica_ack"`: write scripts wait for replicas.
    replica_ack: Option<Arc<durability::ReplicaAck>>,
    /// Liveness settings of engine reporters (what reads of engine-reported locations apply).
    report_settings: report_event::ReportSettings,
    /// Per instance: whether it had engine reporters when last looked (and when), so reads of
    /// instances without any skip the engine lookup ([`DataPlane::may_have_reporters`]).
    reporters_seen: Arc<std::sync::Mutex<std::collections::HashMap<String, (std::time::Instant, bool)>>>,
    /// Per instance: its `reporters` hash as last read, reused while its version field is
    /// unchanged and no live reporter's heartbeat in it is older than half its timeout
    /// ([`report_event::CachedReporters`]).
    reporters_cache: Arc<std::sync::Mutex<std::collections::HashMap<String, Arc<report_event::CachedReporters>>>>,
    /// How presence reads got their reporters: from that cache, or read from Valkey.
    pub reporter_reads: Arc<report_event::ReporterReads>,
    /// Hits of `adaptive` groups' reads not yet added to their instances' histograms
    /// ([`get_cache_location::PendingHits`]), shared by the serving threads.
    pending_hits: Arc<get_cache_location::PendingHits>,
    /// How the read hints sent after answering fared (counters the frontend's metrics read).
    pub read_hints: Arc<get_cache_location::ReadHints>,
    /// Read hints being written by tasks of this data plane's runtime
    /// ([`DataPlane::hints_settled`]): one counter per connection, i.e. per serving thread.
    hints_in_flight: Arc<std::sync::atomic::AtomicUsize>,
}

/// Instances whose key names [`DataPlane::keys`] keeps (and whose reporters and reporter copies
/// the data plane keeps); past this a cache starts over (a frontend serves far fewer
/// instances; what is kept is cheap to read again).
const KEYS_CACHED: usize = 4096;

impl std::fmt::Debug for DataPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataPlane").field("namespace", &self.namespace).finish()
    }
}

impl DataPlane {
    pub fn new(conn: ClusterConnection, namespace: &str, limits: Limits) -> DataPlane {
        let usage = Arc::new(usage::UsageCache::new(limits.usage_cache_ms));
        DataPlane {
            conn,
            namespace: namespace.into(),
            limits,
            usage,
            keys: Default::default(),
            replica_ack: None,
            report_settings: report_event::ReportSettings::default(),
            reporters_seen: Default::default(),
            reporters_cache: Default::default(),
            reporter_reads: Default::default(),
            pending_hits: Default::default(),
            read_hints: Default::default(),
            hints_in_flight: Default::default(),
        }
    }

    /// This data plane with the engine reporters' liveness settings (config `event_report_*`).
    pub fn with_report_settings(self, report_settings: report_event::ReportSettings) -> DataPlane {
        DataPlane { report_settings, ..self }
    }

    /// Records that the instance has engine reporters (this frontend just took their events).
    pub(crate) fn saw_reporters(&self, instance_id: &str) {
        let mut cache = self.reporters_seen.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= KEYS_CACHED {
            cache.clear();
        }
        cache.insert(instance_id.to_string(), (std::time::Instant::now(), true));
    }

    /// Whether the instance may have engine reporters: looked up (`EXISTS`) at most once a
    /// second per instance; a reporter's first blocks show in reads within that second (at
    /// once through the frontend that took its events).
    pub(crate) async fn may_have_reporters(&self, instance_id: &str) -> Result<bool> {
        const FRESH: std::time::Duration = std::time::Duration::from_secs(1);
        if let Some((at, seen)) = self.reporters_seen.lock().unwrap_or_else(|e| e.into_inner()).get(instance_id)
            && at.elapsed() < FRESH
        {
            return Ok(*seen);
        }
        let asked = std::time::Instant::now();
        let seen: bool =
            redis::cmd("EXISTS").arg(&self.keys(instance_id).reporters).query_async(&mut self.conn()).await?;
        let mut cache = self.reporters_seen.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= KEYS_CACHED {
            cache.clear();
        }
        // A `saw_reporters` that landed while EXISTS was in flight is newer: keep it.
        match cache.get(instance_id) {
            Some((at, true)) if *at > asked => Ok(true),
            _ => {
                cache.insert(instance_id.to_string(), (asked, seen));
                Ok(seen)
            }
        }
    }

    /// This data plane on another connection to the same cluster, sharing everything else
    /// (caches, settings, counters) but the count of its read hints under way: a serving
    /// thread's own connection, whose tasks run on that thread (`kvcm_api::serving`).
    pub fn with_connection(&self, conn: ClusterConnection) -> DataPlane {
        DataPlane { conn, hints_in_flight: Default::default(), ..self.clone() }
    }

    /// This data plane with its write scripts waiting for replicas ([`durability::ReplicaAck`]).
    pub fn with_replica_ack(self, ack: Option<durability::ReplicaAck>) -> DataPlane {
        DataPlane { replica_ack: ack.map(Arc::new), ..self }
    }

    pub fn keys(&self, instance_id: &str) -> Arc<InstanceKeys> {
        if let Some(k) = self.keys.read().unwrap_or_else(|e| e.into_inner()).get(instance_id) {
            return k.clone();
        }
        let k = Arc::new(InstanceKeys::new(&self.namespace, instance_id));
        let mut cache = self.keys.write().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= KEYS_CACHED {
            cache.clear();
        }
        cache.insert(instance_id.to_string(), k.clone());
        k
    }

    fn conn(&self) -> ClusterConnection {
        self.conn.clone()
    }

    /// HMGET of the given blocks' records. Long lists go as concurrent HMGETs of
    /// [`HMGET_CHUNK`] fields, pipelined on the one connection, so the client decodes early
    /// chunks while Valkey answers later ones (each HMGET is atomic; the read as a whole need
    /// not be, as with any prefix read racing writes).
    async fn records(&self, keys: &InstanceKeys, blocks: &[i64]) -> Result<Records> {
        self.field_values(&keys.blocks, blocks).await
    }

    /// The values of `blocks`' fields in the hash `hash`, read as [`Self::records`] reads them.
    async fn field_values(&self, hash: &str, blocks: &[i64]) -> Result<Records> {
        let hmget = |chunk: &[i64]| {
            let mut cmd = redis::cmd("HMGET");
            cmd.arg(hash);
            for b in chunk {
                cmd.arg(&block_field(*b)[..]);
            }
            let mut conn = self.conn();
            async move { cmd.query_async::<redis::Value>(&mut conn).await }
        };
        let parts = if blocks.len() <= 2 * HMGET_CHUNK {
            vec![hmget(blocks).await?]
        } else {
            futures::future::try_join_all(blocks.chunks(HMGET_CHUNK).map(hmget)).await?
        };
        Records::from_replies(parts, blocks.len())
    }

    /// Runs a data-plane script whose reply starts with a status code; returns the rest. With
    /// `replica_ack`, the reply comes once replicas acknowledged the script's writes.
    async fn run(&self, script: &LuaScript, keys: &[&str], args: &[&[u8]]) -> Result<Vec<redis::Value>> {
        match self.run_outcome(script, keys, args).await? {
            Ok(reply) => Ok(reply),
            Err(other) => Err(crate::scripts::reply_error(other)),
        }
    }

    /// [`Self::run`] for bindings that handle a code of their own (below 0, `scripts`):
    /// `Ok(Err((code, message)))` for any reply but OK.
    async fn run_outcome(
        &self,
        script: &LuaScript,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<std::result::Result<Vec<redis::Value>, (i64, String)>> {
        let mut reply: Vec<redis::Value> = match &self.replica_ack {
            Some(ack) => ack.run(script, keys, args).await?,
            None => {
                // EVALSHA built in place (a `ScriptInvocation` copies every argument first:
                // tens of thousands for a bulk reportEvent); NOSCRIPT — a node restarted or
                // promoted without the script, which therefore did not run — loads it and
                // sends again.
                let mut eval = redis::cmd("EVALSHA");
                eval.arg(script.script().get_hash()).arg(keys.len());
                for k in keys {
                    eval.arg(*k);
                }
                for a in args {
                    eval.arg(*a);
                }
                let mut conn = self.conn();
                match eval.query_async(&mut conn).await {
                    Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                        let _: String =
                            redis::cmd("SCRIPT").arg("LOAD").arg(script.source()).query_async(&mut conn).await?;
                        eval.query_async(&mut conn).await?
                    }
                    other => other?,
                }
            }
        };
        if reply.is_empty() {
            return Err(Error::internal(format!("{}: empty reply", script.file)));
        }
        let code: i64 = redis::from_redis_value(reply.remove(0))?;
        if code == 1 {
            return Ok(Ok(reply));
        }
        let message: String = reply.into_iter().next().map(redis::from_redis_value).transpose()?.unwrap_or_default();
        Ok(Err((code, message)))
    }
}

/// A reply value for a log line, cut short (an unexpected reply may be megabytes).
fn shown(v: &redis::Value) -> String {
    let text = format!("{v:?}");
    text.chars().take(200).collect()
}

/// The records an HMGET answered, one per requested block (a bulk string or nil each), read
/// where the reply put them.
pub(crate) struct Records(Vec<redis::Value>);

impl Records {
    /// The records of HMGET replies (in request order) for `fields` fields in all, checked:
    /// an array each, a bulk string or nil per field.
    pub(crate) fn from_replies(parts: Vec<redis::Value>, fields: usize) -> Result<Self> {
        let mut values = Vec::with_capacity(fields);
        for part in parts {
            match part {
                redis::Value::Array(v) => values.extend(v),
                other => return Err(Error::internal(format!("HMGET answered {}, not an array", shown(&other)))),
            }
        }
        if values.len() != fields {
            return Err(Error::internal(format!("HMGET answered {} values for {fields} fields", values.len())));
        }
        if let Some(odd) = values.iter().find(|v| !matches!(v, redis::Value::BulkString(_) | redis::Value::Nil)) {
            return Err(Error::internal(format!("HMGET answered {} for a field", shown(odd))));
        }
        Ok(Records(values))
    }

    /// Each block's record, or `None` where the block has none.
    pub(crate) fn iter(&self) -> impl Iterator<Item = Option<&[u8]>> {
        self.0.iter().map(|v| match v {
            redis::Value::BulkString(b) => Some(b.as_slice()),
            _ => None,
        })
    }
}

/// A stream entry's fields with byte-string values (what kvcm's streams hold), by name.
pub fn entry_fields(entry: redis::streams::StreamId) -> std::collections::HashMap<String, Vec<u8>> {
    entry
        .map
        .into_iter()
        .filter_map(|(k, v)| match v {
            redis::Value::BulkString(b) => Some((k, b)),
            _ => None,
        })
        .collect()
}

/// The first value of a script reply (after the status), or the default when absent.
pub(crate) fn first<T: redis::FromRedisValue + Default>(reply: Vec<redis::Value>) -> Result<T> {
    Ok(reply.into_iter().next().map(redis::from_redis_value).transpose()?.unwrap_or_default())
}

/// The policy the instance's group reclaims by (`POLICY_UNSPECIFIED` for an unknown group).
pub(crate) fn reclaim_policy(snap: &Snapshot, inst: &crate::wire::InstanceInfo) -> crate::wire::admin::ReclaimPolicy {
    snap.groups
        .get(&inst.instance_group_name)
        .map(|g| g.cache_config.reclaim_strategy.reclaim_policy)
        .unwrap_or_default()
}

/// The storage a record's storage id names, if it still exists.
pub fn storage_of(snap: &Snapshot, id: u16) -> Option<&StorageConfig> {
    snap.storage_names.get(&id).and_then(|n| snap.storages.get(n))
}

/// Current time in milliseconds since the epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
