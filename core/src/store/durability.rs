//! `durability = "replica_ack"` (DESIGN §5, docs/reliability.md): every data-plane write script
//! is sent with a `WAIT` right behind it, in one pipeline on the same connection, and the request
//! is answered only once enough replicas of the instance's shard hold the write.
//!
//! `WAIT` counts the replication offset of *its own connection's* last write, so the script and
//! the `WAIT` must travel together: sent apart, a reconnection between them would make the
//! `WAIT` vacuous (a fresh connection has written nothing). A blocked `WAIT` also holds up every
//! later command on its connection, so these pipelines use connections of their own (a few,
//! taken in turn), never the connection reads share.
//!
//! A resent write that finds its first run applied writes nothing itself, so each pipeline also
//! bumps a counter of the instance (`…:{i:<id>}:ack`) after the script: its replication follows
//! the first run's, and WAIT then covers both.
//!
//! When fewer replicas acknowledge within the timeout, the write has happened on the primary
//! but is not known to survive its loss: the caller gets `SERVICE_NOT_READY` (HTTP 503) and
//! resends; the write scripts answer a resend like the first run (start and finish by their
//! session, removals by being idempotent), and the resend waits again.

use super::LuaScript;
use crate::error::{Error, Result};
use redis::cluster_async::ClusterConnection;
use redis::{ErrorKind, ServerErrorKind, Value};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Connections a frontend opens for acknowledged writes (each to every primary). A blocked WAIT
/// holds up its connection: 4 kept 0.62x of the unacknowledged write rate at 32 concurrent
/// sessions, 16 kept 0.83x, 32 no more (docs/benchmarks.md).
pub const CONNECTIONS: usize = 16;

/// Writes that wait for replicas: the connections and what to wait for.
pub struct ReplicaAck {
    conns: Vec<ClusterConnection>,
    next: AtomicUsize,
    /// Replicas that must hold a write before it is answered.
    pub replicas: u32,
    /// How long to wait for them, in milliseconds (> 0: `WAIT … 0` would wait for ever).
    pub timeout_ms: u64,
}

impl std::fmt::Debug for ReplicaAck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaAck").field("replicas", &self.replicas).field("timeout_ms", &self.timeout_ms).finish()
    }
}

/// A pipeline's error as the first of its commands' own errors: the combined error carries no
/// code for the codes the client does not know (`OOM`, `NOREPLICAS`, `BUSY`), so it would read
/// as an internal error where the command's own says "unavailable".
fn first_failure(e: redis::RedisError) -> redis::RedisError {
    match e.clone().into_server_errors() {
        Some(errors) if !errors.is_empty() => errors[0].1.clone().into(),
        _ => e,
    }
}

impl ReplicaAck {
    /// `conns` must be distinct cluster connections (each from its own client), not clones.
    pub fn new(conns: Vec<ClusterConnection>, replicas: u32, timeout_ms: u64) -> ReplicaAck {
        assert!(
            !conns.is_empty() && replicas > 0 && timeout_ms > 0,
            "replica_ack needs connections, replicas, a timeout"
        );
        ReplicaAck { conns, next: AtomicUsize::new(0), replicas, timeout_ms }
    }

    fn conn(&self) -> ClusterConnection {
        self.conns[self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len()].clone()
    }

    /// Runs `script` and then `WAIT`, as one pipeline to the keys' primary; the script's reply
    /// once `replicas` replicas acknowledged, else [`Error::Unavailable`].
    pub(crate) async fn run(&self, script: &LuaScript, keys: &[&str], args: &[&[u8]]) -> Result<Vec<Value>> {
        let mut conn = self.conn();
        let mut pipe = redis::pipe();
        {
            let eval = pipe.cmd("EVALSHA").arg(script.script().get_hash()).arg(keys.len());
            for k in keys {
                eval.arg(*k);
            }
            for a in args {
                eval.arg(*a);
            }
        }
        // A resent write finds its first run applied and writes nothing: WAIT alone would then
        // measure this connection's older writes (or none) and could pass with no replica
        // holding the first run. A write of its own after the script, replicated after it,
        // makes WAIT cover everything the script's slot had before.
        pipe.cmd("INCR").arg(crate::keys::ack_key(keys.first().copied().unwrap_or_default())).ignore();
        pipe.cmd("WAIT").arg(self.replicas).arg(self.timeout_ms);
        let (reply, acked): (Vec<Value>, i64) = match pipe.query_async(&mut conn).await.map_err(first_failure) {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                // A node restarted or was promoted without the script: load it and send again
                // (NOSCRIPT means the script did not run).
                let _: String = redis::cmd("SCRIPT").arg("LOAD").arg(script.source()).query_async(&mut conn).await?;
                pipe.query_async(&mut conn).await.map_err(first_failure)?
            }
            // A primary demoted between the script and WAIT: a failover, not a bug.
            Err(e) if e.to_string().contains("WAIT cannot be used with replica") => {
                return Err(Error::Unavailable(
                    "the shard's primary was demoted while the write was applied; resend the request".into(),
                ));
            }
            other => other?,
        };
        if acked < self.replicas as i64 {
            return Err(Error::Unavailable(format!(
                "the write was applied but only {acked} of {} replica(s) acknowledged it within {} ms \
                 (durability = \"replica_ack\"); resend the request",
                self.replicas, self.timeout_ms
            )));
        }
        Ok(reply)
    }
}
