//! The chaos harness (tests/tests/chaos.rs, `make chaos`): a replicated Valkey cluster of a
//! test's own, a fleet of simulated engines driving steady load through several frontends, and
//! the auditor's verdict once the load stops.
//!
//! Engines behave like a connector behind a load balancer: each request goes to the next
//! frontend, a refused connection or a 503 is retried on the next one (a finish up to a few
//! seconds, as connectors do), and the blocks of a session are written as real files at the
//! URIs startWriteCache handed out before the session is finished. Every finish the engine saw
//! acknowledged, and every removal, is remembered, so a test can check afterwards that each
//! acknowledged block still serves — nothing acknowledged was lost — and that what was removed
//! does not.

use crate::{Api, code, file_path, repo_root, unique};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How much longer than the `make test` slice to run (`KVCM_CHAOS_SCALE`, default 1; `make
/// chaos` sets more): load phases last this many times longer, with this many times the engines.
pub fn scale() -> u32 {
    std::env::var("KVCM_CHAOS_SCALE").ok().and_then(|s| s.parse().ok()).filter(|s| *s >= 1).unwrap_or(1)
}

/// Chaos tests stop processes and load the machine: one at a time per test binary.
pub async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// A cluster of a test's own with 3 primaries and 2 replicas each (`infra/valkey-cluster.sh
/// --replicas 2`, node timeout 3 s), for tests that kill primaries: after a failover the new
/// primary still has a replica, so `durability = "replica_ack"` writes go on. Stopped on drop.
pub struct ReplicatedCluster {
    pub base: u16,
    pub dir: PathBuf,
    pub url: String,
}

/// Nodes of a [`ReplicatedCluster`].
const NODES: u16 = 9;

impl ReplicatedCluster {
    pub fn start() -> ReplicatedCluster {
        // Nine ports and their bus ports (+10000), away from other tests' ports and below the
        // ephemeral range.
        let base = 20_500 + (std::process::id() % 200) as u16 * NODES;
        let dir = repo_root().join(".kvcm/test-tmp").join(unique("replicated"));
        // Every node a seed: clients started after a primary died still find the cluster.
        let url = (base..base + NODES).map(|p| format!("redis://127.0.0.1:{p}")).collect::<Vec<_>>().join(",");
        let c = ReplicatedCluster { base, dir, url };
        let (ok, out) = c.script("start");
        assert!(ok, "the replicated cluster did not start: {out}");
        c
    }

    fn script(&self, cmd: &str) -> (bool, String) {
        let out = Command::new(repo_root().join("infra/valkey-cluster.sh"))
            .args([cmd, "--base-port", &self.base.to_string(), "--replicas", "2", "--dir"])
            .arg(&self.dir)
            .output()
            .expect("run infra/valkey-cluster.sh");
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    }

    /// `CLUSTER <args>` on the first node that answers.
    fn cluster<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        for port in self.base..self.base + NODES {
            if let Ok(mut c) = redis::Client::open(format!("redis://127.0.0.1:{port}")).and_then(|c| c.get_connection())
                && let Ok(v) = redis::cmd("CLUSTER").arg(args).query::<T>(&mut c)
            {
                return v;
            }
        }
        panic!("no node of the replicated cluster answers");
    }

    /// The port of the primary serving `key`'s slot, and of its replicas.
    pub fn primary_of(&self, key: &str) -> (u16, Vec<u16>) {
        let slot: u16 = self.cluster(&["KEYSLOT", key]);
        let nodes: String = self.cluster(&["NODES"]);
        let port = |f: &str| f.split('@').next().and_then(|a| a.rsplit(':').next()).and_then(|p| p.parse::<u16>().ok());
        let mut primary = None;
        for line in nodes.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            for range in &f[8..] {
                let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                if let (Ok(lo), Ok(hi)) = (lo.parse::<u16>(), hi.parse::<u16>())
                    && (lo..=hi).contains(&slot)
                {
                    primary = Some((f[0].to_string(), port(f[1]).unwrap()));
                }
            }
        }
        let (id, p) = primary.expect("a primary serves the slot");
        let replicas = nodes
            .lines()
            .filter(|l| l.split_whitespace().nth(3) == Some(id.as_str()))
            .filter_map(|l| port(l.split_whitespace().nth(1)?))
            .collect();
        (p, replicas)
    }

    /// The pid of the node on `port`.
    pub fn pid(&self, port: u16) -> u32 {
        let text = std::fs::read_to_string(self.dir.join(port.to_string()).join("valkey.pid")).expect("a pid file");
        text.trim().parse().unwrap()
    }

    /// Sends `signal` (`-9`, `-STOP`, `-CONT`) to the node on `port`.
    pub fn signal(&self, port: u16, signal: &str) {
        Command::new("kill").args([signal, &self.pid(port).to_string()]).status().unwrap();
    }
}

impl Drop for ReplicatedCluster {
    fn drop(&mut self) {
        for port in self.base..self.base + NODES {
            // A stopped node would not answer the script's SHUTDOWN.
            if let Ok(pid) = std::fs::read_to_string(self.dir.join(port.to_string()).join("valkey.pid")) {
                let _ = Command::new("kill").args(["-CONT", pid.trim()]).status();
            }
        }
        self.script("stop");
    }
}

/// One request's outcome as an engine saw it.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub at: Instant,
    pub rpc: &'static str,
    /// HTTP status (0: no answer — refused, reset or timed out).
    pub http: u16,
    pub code: String,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.http == 200 && self.code == "OK"
    }
}

/// What the fleet of engines did.
#[derive(Default)]
pub struct Ledger {
    pub outcomes: Vec<Outcome>,
    /// Blocks whose finish was acknowledged (and not removed since).
    pub acked: BTreeSet<i64>,
    /// Blocks whose removal was acknowledged (and not written since).
    pub removed: BTreeSet<i64>,
}

/// Simulated engines writing and reading multi-turn conversations through the frontends.
pub struct Load {
    pub ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Frontends by meta-plane URL, shared with the engines (a test may take one away).
pub type Frontends = Arc<Mutex<Vec<String>>>;

/// Blocks per conversation turn, turns per conversation.
const TURN: i64 = 4;
const TURNS: i64 = 6;

impl Load {
    /// Starts `engines` engines on `instance`. Every 7th turn removes its conversation instead
    /// (removals keep the deleter busy).
    pub fn start(frontends: Frontends, instance: &str, engines: usize) -> Load {
        let ledger: Arc<Mutex<Ledger>> = Default::default();
        let stop = Arc::new(AtomicBool::new(false));
        let next_conv = Arc::new(AtomicU64::new(1));
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .connect_timeout(Duration::from_secs(1))
            .build()
            .unwrap();
        let tasks = (0..engines)
            .map(|e| {
                let engine = Engine {
                    frontends: frontends.clone(),
                    instance: instance.to_string(),
                    http: http.clone(),
                    ledger: ledger.clone(),
                    next: e,
                };
                let (stop, next_conv) = (stop.clone(), next_conv.clone());
                tokio::spawn(async move {
                    let mut engine = engine;
                    while !stop.load(Ordering::Relaxed) {
                        let conv = next_conv.fetch_add(1, Ordering::Relaxed) as i64;
                        engine.conversation(conv, &stop).await;
                    }
                })
            })
            .collect();
        Load { ledger, stop, tasks }
    }

    /// Stops the engines (each finishes its current request) and returns what they did.
    pub async fn stop(self) -> Ledger {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            let _ = t.await;
        }
        std::mem::take(&mut *self.ledger.lock().unwrap())
    }

    /// Requests answered so far.
    pub fn answered(&self) -> usize {
        self.ledger.lock().unwrap().outcomes.iter().filter(|o| o.ok()).count()
    }
}

struct Engine {
    frontends: Frontends,
    instance: String,
    http: reqwest::Client,
    ledger: Arc<Mutex<Ledger>>,
    next: usize,
}

impl Engine {
    /// One request, to the next frontend: the HTTP status and body (status 0 without an answer).
    async fn call(&mut self, rpc: &'static str, body: &Value) -> (u16, Value) {
        let url = {
            let f = self.frontends.lock().unwrap();
            self.next += 1;
            format!("{}/api/{rpc}", f[self.next % f.len()])
        };
        let (http, reply) = match self.http.post(&url).json(body).send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                (status, r.json::<Value>().await.unwrap_or(Value::Null))
            }
            Err(_) => (0, Value::Null),
        };
        let outcome = Outcome { at: Instant::now(), rpc, http, code: code(&reply).to_string() };
        self.ledger.lock().unwrap().outcomes.push(outcome);
        (http, reply)
    }

    /// Like [`Engine::call`], resending on no answer or 503 until `within` has passed.
    async fn call_retrying(&mut self, rpc: &'static str, body: &Value, within: Duration) -> (u16, Value) {
        let deadline = Instant::now() + within;
        loop {
            let (http, reply) = self.call(rpc, body).await;
            if (http != 0 && http != 503) || Instant::now() >= deadline {
                return (http, reply);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn conversation(&mut self, conv: i64, stop: &AtomicBool) {
        let key = |turn: i64, j: i64| conv * 1000 + turn * TURN + j;
        for turn in 0..TURNS {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let keys: Vec<i64> = (0..=turn).flat_map(|t| (0..TURN).map(move |j| key(t, j))).collect();
            let read = json!({"instance_id": self.instance, "query_type": "QT_PREFIX_MATCH", "block_keys": keys});
            self.call("getCacheLocation", &read).await;
            if conv % 7 == 0 && turn == TURNS - 1 {
                let body = json!({"instance_id": self.instance, "block_keys": keys});
                let (http, reply) = self.call_retrying("removeCache", &body, Duration::from_secs(3)).await;
                let mut l = self.ledger.lock().unwrap();
                for k in &keys {
                    l.acked.remove(k);
                    // Only an acknowledged removal says the block must be gone.
                    if http == 200 && code(&reply) == "OK" {
                        l.removed.insert(*k);
                    } else {
                        l.removed.remove(k);
                    }
                }
                return;
            }
            self.write(&keys).await;
        }
    }

    /// startWriteCache, the files at the URIs handed out, finishWriteCache.
    async fn write(&mut self, keys: &[i64]) {
        let body = json!({"instance_id": self.instance, "block_keys": keys, "write_timeout_seconds": 5});
        let (http, s) = self.call("startWriteCache", &body).await;
        if http != 200 || code(&s) != "OK" {
            return; // the blocks stay unwritten; a later turn tries again
        }
        let locations = s["locations"].as_array().cloned().unwrap_or_default();
        let present: Vec<i64> = match &s["block_mask"] {
            m if m["offset"].is_i64() => keys[..m["offset"].as_i64().unwrap() as usize].to_vec(),
            m => keys
                .iter()
                .zip(m["bool_masks"]["values"].as_array().cloned().unwrap_or_default())
                .filter(|(_, v)| v.as_bool() == Some(true))
                .map(|(k, _)| *k)
                .collect(),
        };
        let new: Vec<i64> = keys.iter().copied().filter(|k| !present.contains(k)).collect();
        // The files, in order; a location that cannot be written (its storage's root gone, as
        // with an unmounted NFS: never created here) ends the successful prefix.
        let mut written = 0;
        'locations: for loc in &locations {
            for spec in loc["location_specs"].as_array().cloned().unwrap_or_default() {
                let p = file_path(spec["uri"].as_str().unwrap_or_default());
                // <root>/<instance>/<spec>/<file>: the two directories under the root are made
                // one level at a time, so a root that is gone is never made again here.
                let made = |d: &std::path::Path| match std::fs::create_dir(d) {
                    Ok(()) => true,
                    Err(e) => e.kind() == std::io::ErrorKind::AlreadyExists,
                };
                let spec_dir = p.parent().unwrap();
                if !made(spec_dir.parent().unwrap()) || !made(spec_dir) || std::fs::write(&p, b"kv").is_err() {
                    break 'locations;
                }
            }
            written += 1;
        }
        let finish = json!({"instance_id": self.instance, "write_session_id": s["write_session_id"],
            "success_blocks": {"offset": written}});
        let (http, f) = self.call_retrying("finishWriteCache", &finish, Duration::from_secs(3)).await;
        if http == 200 && code(&f) == "OK" {
            let mut l = self.ledger.lock().unwrap();
            for k in new.into_iter().take(written) {
                l.acked.insert(k);
                l.removed.remove(&k);
            }
        }
    }
}

/// The failed requests' window: from the first failure to the last (None: nothing failed).
pub fn error_window(outcomes: &[Outcome]) -> Option<(Duration, usize)> {
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.ok() && (o.http == 0 || o.http >= 500)).collect();
    let first = failed.iter().map(|o| o.at).min()?;
    let last = failed.iter().map(|o| o.at).max()?;
    Some((last - first, failed.len()))
}

/// Checks that every acknowledged block serves and every removed one does not, through `api`.
pub async fn verify_ledger(api: &Api, instance: &str, ledger: &Ledger) -> Result<(), String> {
    let mut problems = Vec::new();
    for (want, set) in [(true, &ledger.acked), (false, &ledger.removed)] {
        let keys: Vec<i64> = set.iter().copied().collect();
        for chunk in keys.chunks(1000) {
            let (_, r) = api
                .meta(
                    "getCacheLocation",
                    json!({"instance_id": instance, "query_type": "QT_BATCH_GET", "block_keys": chunk}),
                )
                .await;
            if code(&r) != "OK" {
                return Err(format!("the check's read failed: {r}"));
            }
            for (k, loc) in chunk.iter().zip(r["locations"].as_array().cloned().unwrap_or_default()) {
                let serves = loc["location_specs"]
                    .as_array()
                    .is_some_and(|s| !s.is_empty() && s.iter().all(|s| !s["uri"].as_str().unwrap_or("").is_empty()));
                if serves != want {
                    problems
                        .push(format!("{k}: {}", if want { "acknowledged but lost" } else { "removed but serving" }));
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{} blocks wrong: {:?}", problems.len(), &problems[..problems.len().min(20)]))
    }
}

/// A worker of `namespace` on `valkey_url` that runs nothing: what `kvcm-worker audit` starts
/// from.
pub async fn auditor(valkey_url: &str, namespace: &str) -> kvcm_worker::Worker {
    let env = vec![
        ("KVCM_VALKEY_URL".to_string(), valkey_url.to_string()),
        ("KVCM_NAMESPACE".to_string(), namespace.to_string()),
    ];
    let (config, _) = kvcm_core::config::Config::load_from(None, &env).expect("config");
    kvcm_worker::connect(config).await.expect("the auditor connects")
}

/// Runs the auditor (`kvcm-worker audit`'s code) against `namespace` on `valkey_url` until it
/// finds the system drained and clean, or `timeout` passes; returns the last audit.
pub async fn audit_until_drained(valkey_url: &str, namespace: &str, timeout: Duration) -> kvcm_worker::audit::Audit {
    let worker = auditor(valkey_url, namespace).await;
    let deadline = Instant::now() + timeout;
    loop {
        let audit = kvcm_worker::audit::run(&worker).await.expect("the audit runs");
        if (audit.drained() && audit.clean()) || Instant::now() >= deadline {
            return audit;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Requests by outcome, for a test's report: `rpc -> (answered OK, failed)`.
pub fn tally(outcomes: &[Outcome]) -> BTreeMap<&'static str, (usize, usize)> {
    let mut t: BTreeMap<&'static str, (usize, usize)> = BTreeMap::new();
    for o in outcomes {
        let e = t.entry(o.rpc).or_default();
        if o.ok() { e.0 += 1 } else { e.1 += 1 }
    }
    t
}
