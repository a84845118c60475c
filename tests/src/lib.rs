//! Test harness for kvcm's end-to-end tests: a real local Valkey cluster and real `kvcm-api`
//! processes talking real HTTP.
//!
//! * [`valkey_url`] returns the shared test cluster: `KVCM_TEST_VALKEY_URL` if set (as
//!   `make test` does), else a 3-primary cluster that the harness starts once with
//!   `infra/valkey-cluster.sh` on ports 7301–7303 and leaves running for later test binaries.
//! * [`Api::start`] spawns the `kvcm-api` binary (built by `cargo build --bins`, which `make
//!   test` runs first) on free ports in a fresh namespace, so tests never see each other's
//!   registry and never flush the shared cluster.
//! * [`LambdaFunction::start`] runs `kvcm-api` as an AWS Lambda function of one plane behind
//!   `cargo lambda watch`'s runtime emulator (no sockets of its own: requests arrive as events).
//! * [`dump_namespace`] snapshots every key of a namespace, to prove a failed request left no
//!   partial change.
//! * [`TlsCluster`] starts (once per test binary, stopped when the last binary using it exits)
//!   local clusters reachable only over TLS through stunnel, with AUTH, one of them requiring
//!   client certificates, for tests/tests/tls.rs.

pub mod chaos;

use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// The shared test cluster's seed URL, starting the cluster if needed.
pub fn valkey_url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        if let Ok(url) = std::env::var("KVCM_TEST_VALKEY_URL") {
            return url;
        }
        let script = repo_root().join("infra/valkey-cluster.sh");
        // An exclusive file lock serialises test binaries that start at the same time (`start`
        // is idempotent). Rust opens files close-on-exec, so the daemonised valkey-servers do
        // not inherit the lock.
        let lock_path = repo_root().join(".kvcm/test-cluster.lock");
        std::fs::create_dir_all(lock_path.parent().unwrap()).unwrap();
        let lock = std::fs::File::create(&lock_path).expect("create lock file");
        lock.lock().expect("lock the test cluster");
        let out = Command::new(&script)
            .args(["start", "--base-port", "7301"])
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .expect("run infra/valkey-cluster.sh");
        drop(lock);
        assert!(out.status.success(), "could not start the test Valkey cluster");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    })
    .clone()
}

/// A unique name for this test's entities (namespaces, instance ids, storages…).
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}-{:08x}", std::process::id(), fastrand::u32(..))
}

/// Path of a workspace binary next to the running test executable (`target/<profile>/`).
pub fn bin_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target/<profile>/deps");
    let path = dir.join(name);
    assert!(path.exists(), "{} is missing: run `cargo build --bins` first (make test does)", path.display());
    path
}

/// Spawns a kvcm binary in `namespace` on the test cluster with `defaults` then `env`, its
/// stderr in a log file; returns the child, its first stdout line (the address line every kvcm
/// binary prints once serving; empty if it exits first) and the log path.
fn spawn_kvcm(bin: &str, namespace: &str, defaults: &[(&str, &str)], env: &[(&str, &str)]) -> (Child, String, PathBuf) {
    spawn_kvcm_at(&bin_path(bin), namespace, defaults, env, &[])
}

/// [`spawn_kvcm`] of the binary at `path` (e.g. a release build).
fn spawn_kvcm_at(
    path: &std::path::Path,
    namespace: &str,
    defaults: &[(&str, &str)],
    env: &[(&str, &str)],
    args: &[&str],
) -> (Child, String, PathBuf) {
    let bin = path.file_name().expect("a binary").to_string_lossy();
    let logs = repo_root().join(".kvcm/test-logs");
    std::fs::create_dir_all(&logs).unwrap();
    let log = logs.join(format!("{namespace}-{bin}-{:04x}.log", fastrand::u16(..)));
    let mut cmd = Command::new(path);
    cmd.args(args);
    cmd.env("KVCM_VALKEY_URL", valkey_url())
        .env("KVCM_NAMESPACE", namespace)
        .env("KVCM_LOG_LEVEL", "info,kvcm=debug")
        // Tair's gRPC ports are fixed by default; processes of concurrent tests pick free ones.
        .env("KVCM_GRPC_META_PORT", "0")
        .env("KVCM_GRPC_ADMIN_PORT", "0")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap());
    for (k, v) in defaults.iter().chain(env) {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {bin}: {e}"));
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
    (child, line, log)
}

/// The value of `name=` in an address line.
fn field(line: &str, name: &str) -> Option<String> {
    line.split_whitespace().find_map(|w| w.strip_prefix(&format!("{name}="))).map(str::to_string)
}

/// A running `kvcm-api` process. Killed on drop.
pub struct Api {
    child: Child,
    pub meta: String,
    pub admin: String,
    /// Tair's gRPC services: `http://host:port` of MetaService and AdminService.
    pub grpc_meta: String,
    pub grpc_admin: String,
    pub namespace: String,
    pub log: PathBuf,
    http: reqwest::Client,
}

/// One unary gRPC call of `service`/`method` at `url`, with the request message read from
/// `body` (protobuf JSON) and the response written as protobuf JSON (proto field names, every
/// field, 64-bit integers as strings): a client that shares only the protos with the server.
pub async fn grpc_call(
    url: &str,
    service: &str,
    method: &str,
    body: Value,
    auth: Option<&str>,
) -> Result<Value, tonic::Status> {
    use prost::Message;
    let pool = kvcm_api::grpc::descriptors();
    let desc = pool
        .get_service_by_name(service)
        .and_then(|s| s.methods().find(|m| m.name() == method))
        .unwrap_or_else(|| panic!("{service} has no method {method} in api/proto/tair"));
    let request = kvcm_api::grpc::from_json(desc.input(), body.to_string().as_bytes()).expect("a request message");
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())
        .expect("a gRPC URL")
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut client = tonic::client::Grpc::new(channel);
    client.ready().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut req = tonic::Request::new(bytes::Bytes::from(request.encode_to_vec()));
    if let Some(a) = auth {
        req.metadata_mut().insert("authorization", a.parse().expect("ASCII credentials"));
    }
    let path = format!("/{service}/{method}").parse().expect("a gRPC path");
    let reply = client.unary(req, path, kvcm_api::grpc::BytesCodec).await?;
    let message = prost_reflect::DynamicMessage::decode(desc.output(), reply.into_inner())
        .map_err(|e| tonic::Status::internal(format!("the reply does not decode: {e}")))?;
    Ok(serde_json::from_slice(&kvcm_api::grpc::to_json(&message).unwrap()).unwrap())
}

/// The outcome of starting a process that is expected to fail.
#[derive(Debug)]
pub struct Failed {
    pub code: Option<i32>,
    pub stderr: String,
}

impl Api {
    /// Starts kvcm-api in a new namespace on free ports.
    pub fn start() -> Api {
        Self::start_with(&unique("ns"), &[])
    }

    /// Starts kvcm-api in `namespace` with extra `KVCM_*` environment variables.
    pub fn start_with(namespace: &str, env: &[(&str, &str)]) -> Api {
        match Self::try_start(namespace, env) {
            Ok(api) => api,
            Err(f) => panic!("kvcm-api did not start ({:?}):\n{}", f.code, f.stderr),
        }
    }

    /// Starts kvcm-api; returns its exit code and stderr if it exits instead of serving.
    pub fn try_start(namespace: &str, env: &[(&str, &str)]) -> Result<Api, Failed> {
        let (mut child, line, log) =
            spawn_kvcm("kvcm-api", namespace, &[("KVCM_META_PORT", "0"), ("KVCM_ADMIN_PORT", "0")], env);
        match (field(&line, "meta"), field(&line, "admin")) {
            (Some(meta), Some(admin)) => Ok(Api {
                child,
                meta,
                admin,
                grpc_meta: field(&line, "meta_grpc").unwrap_or_default(),
                grpc_admin: field(&line, "admin_grpc").unwrap_or_default(),
                namespace: namespace.to_string(),
                log,
                http: reqwest::Client::new(),
            }),
            _ => {
                let _ = child.kill();
                let status = child.wait().ok();
                Err(Failed {
                    code: status.and_then(|s| s.code()),
                    stderr: std::fs::read_to_string(&log).unwrap_or_default(),
                })
            }
        }
    }

    /// Calls `method` of MetaService over gRPC with the request given as kvcm's JSON; returns
    /// the response as protobuf JSON, or the gRPC status.
    pub async fn grpc_meta(&self, method: &str, body: Value, auth: Option<&str>) -> Result<Value, tonic::Status> {
        grpc_call(&self.grpc_meta, kvcm_api::grpc::META_SERVICE, method, body, auth).await
    }

    /// Calls `method` of AdminService over gRPC (see [`Api::grpc_meta`]).
    pub async fn grpc_admin(&self, method: &str, body: Value, auth: Option<&str>) -> Result<Value, tonic::Status> {
        grpc_call(&self.grpc_admin, kvcm_api::grpc::ADMIN_SERVICE, method, body, auth).await
    }

    /// POSTs a JSON body to the admin plane; returns HTTP status and parsed body.
    pub async fn admin(&self, rpc: &str, body: Value) -> (u16, Value) {
        self.post(&self.admin, rpc, body.to_string(), None).await
    }

    /// POSTs a JSON body to the meta plane.
    pub async fn meta(&self, rpc: &str, body: Value) -> (u16, Value) {
        self.post(&self.meta, rpc, body.to_string(), None).await
    }

    /// POSTs raw text to a base URL with an optional Authorization header.
    pub async fn post(&self, base: &str, rpc: &str, body: String, auth: Option<&str>) -> (u16, Value) {
        let mut req = self.http.post(format!("{base}/api/{rpc}")).body(body);
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let resp = req.send().await.expect("HTTP request");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// POSTs from a chosen local address (any 127.0.0.0/8 address reaches the server on
    /// loopback: tests use several to stand for several clients). Returns HTTP status, parsed
    /// body and the `Retry-After` header.
    pub async fn post_from(
        &self,
        local: std::net::IpAddr,
        base: &str,
        rpc: &str,
        body: String,
        auth: Option<&str>,
    ) -> (u16, Value, Option<String>) {
        let client = reqwest::Client::builder().local_address(local).build().expect("client");
        let mut req = client.post(format!("{base}/api/{rpc}")).body(body);
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let resp = req.send().await.expect("HTTP request");
        let status = resp.status().as_u16();
        let retry_after = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(String::from);
        let text = resp.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)), retry_after)
    }

    /// The value of one series of the admin plane's `/metrics` (name with labels, as printed), or 0.
    pub async fn metric(&self, series: &str) -> f64 {
        let (_, text) = self.get_admin("/metrics").await;
        text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
    }

    /// GETs a path on the admin plane as text.
    pub async fn get_admin(&self, path: &str) -> (u16, String) {
        let resp = self.http.get(format!("{}{path}", self.admin)).send().await.expect("HTTP request");
        (resp.status().as_u16(), resp.text().await.unwrap_or_default())
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the process (SIGKILL) and waits for it.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits for a clean exit; returns the exit code.
    pub fn terminate(mut self) -> Option<i32> {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `kvcm-worker` process. Killed on drop.
pub struct WorkerProc {
    child: Child,
    pub metrics: String,
    /// The worker's id (its consumer name and health-verdict key).
    pub id: String,
    pub log: PathBuf,
}

impl WorkerProc {
    /// Starts kvcm-worker in `namespace` with fast test intervals and extra `KVCM_*` variables.
    pub fn start(namespace: &str, env: &[(&str, &str)]) -> WorkerProc {
        match Self::try_start(namespace, env) {
            Ok(w) => w,
            Err(f) => panic!("kvcm-worker did not start ({:?}):\n{}", f.code, f.stderr),
        }
    }

    /// Starts `kvcm-worker events <args>` (one engine event subscription) in `namespace`.
    pub fn start_events(namespace: &str, env: &[(&str, &str)], args: &[&str]) -> WorkerProc {
        let mut all = vec!["events"];
        all.extend(args);
        let (mut child, line, log) =
            spawn_kvcm_at(&bin_path("kvcm-worker"), namespace, &[("KVCM_WORKER__METRICS_PORT", "0")], env, &all);
        match field(&line, "metrics") {
            Some(metrics) => WorkerProc { child, metrics, id: String::new(), log },
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("kvcm-worker events did not start:\n{}", std::fs::read_to_string(&log).unwrap_or_default())
            }
        }
    }

    /// Starts kvcm-worker; returns its exit code and stderr if it exits instead of serving.
    pub fn try_start(namespace: &str, env: &[(&str, &str)]) -> Result<WorkerProc, Failed> {
        let defaults = [
            ("KVCM_WORKER__METRICS_PORT", "0"),
            ("KVCM_WORKER__DISCOVER_INTERVAL_MS", "200"),
            ("KVCM_WORKER__POLL_INTERVAL_MS", "100"),
            ("KVCM_WORKER__RECLAIM_INTERVAL_MS", "200"),
        ];
        let (mut child, line, log) = spawn_kvcm("kvcm-worker", namespace, &defaults, env);
        match field(&line, "metrics") {
            Some(metrics) => {
                let id = line.split_whitespace().nth(1).unwrap_or_default().to_string();
                Ok(WorkerProc { child, metrics, id, log })
            }
            None => {
                let _ = child.kill();
                let status = child.wait().ok();
                Err(Failed {
                    code: status.and_then(|s| s.code()),
                    stderr: std::fs::read_to_string(&log).unwrap_or_default(),
                })
            }
        }
    }

    /// The value of one metric line (name with labels, as printed), or 0.
    pub async fn metric(&self, series: &str) -> f64 {
        let text = reqwest::get(format!("{}/metrics", self.metrics)).await.unwrap().text().await.unwrap();
        text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
    }

    /// SIGKILL, no cleanup: what a crash looks like.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then how long the process took to exit (None: still running at `timeout`).
    pub fn terminate_within(&mut self, timeout: Duration) -> Option<Duration> {
        let t = Instant::now();
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        while t.elapsed() < timeout {
            if self.child.try_wait().ok().flatten().is_some() {
                return Some(t.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for WorkerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Per-instance key name `<ns>:v1:{i:<id>}:<name>`.
pub fn instance_key(namespace: &str, instance: &str, name: &str) -> String {
    format!("{namespace}:v1:{{i:{instance}}}:{name}")
}

/// An instance group's extra fields (for [`Fixture::new`]) that make it reclaim by LFU, so that
/// its reads keep LFU's per-block read counts.
pub fn lfu_group() -> Value {
    serde_json::json!({"cache_config": {"reclaim_strategy": {"reclaim_policy": "POLICY_LFU"}}})
}

/// LFU's read counts of an instance (its `icount` hash), block key (8 bytes) → count.
pub async fn read_counts(namespace: &str, instance: &str) -> std::collections::HashMap<Vec<u8>, i64> {
    let mut c = valkey().await;
    redis::cmd("HGETALL").arg(instance_key(namespace, instance, "icount")).query_async(&mut c).await.unwrap()
}

/// The status code name of a reply.
pub fn code(reply: &Value) -> &str {
    reply["header"]["status"]["code"].as_str().unwrap_or("<no code>")
}

/// The status message of a reply.
pub fn message(reply: &Value) -> &str {
    reply["header"]["status"]["message"].as_str().unwrap_or("")
}

/// Asserts an OK reply, showing the reply otherwise.
#[track_caller]
pub fn assert_ok(reply: &(u16, Value)) {
    assert_eq!(reply.0, 200, "HTTP status of {}", reply.1);
    assert_eq!(code(&reply.1), "OK", "reply {}", reply.1);
}

/// Asserts an HTTP 200 reply with the given non-OK code and a message containing `needle`.
#[track_caller]
pub fn assert_err(reply: &(u16, Value), expected: &str, needle: &str) {
    assert_eq!(reply.0, 200, "HTTP status of {}", reply.1);
    assert_eq!(code(&reply.1), expected, "reply {}", reply.1);
    assert!(message(&reply.1).contains(needle), "message {:?} lacks {needle:?}", message(&reply.1));
}

/// How the harness reaches the shared test cluster directly: its URL's scheme and credentials
/// (a `rediss://` test cluster is verified against the system's trusted roots).
fn test_cluster() -> kvcm_core::valkey::Access {
    kvcm_core::valkey::Access::from_urls(&[valkey_url()], 5000, 2000)
}

/// A direct connection to the test cluster, for inspecting state.
pub async fn valkey() -> redis::cluster_async::ClusterConnection {
    test_cluster().cluster().await.unwrap()
}

/// Every key of a namespace with its full contents, for before/after comparisons. Scans every
/// primary (SCAN reaches one node at a time).
pub async fn dump_namespace(namespace: &str) -> BTreeMap<String, String> {
    let mut conn = valkey().await;
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut conn).await.unwrap();
    let mut out = BTreeMap::new();
    for line in nodes.lines().filter(|l| l.contains("master")) {
        let addr = line.split_whitespace().nth(1).unwrap().split('@').next().unwrap();
        let mut node = test_cluster().node(addr).await.unwrap();
        let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{namespace}:*")).query_async(&mut node).await.unwrap();
        for key in keys {
            let ty: String = redis::cmd("TYPE").arg(&key).query_async(&mut node).await.unwrap();
            let content = match ty.as_str() {
                "hash" => {
                    let mut m: Vec<(Vec<u8>, Vec<u8>)> =
                        redis::cmd("HGETALL").arg(&key).query_async(&mut node).await.unwrap();
                    m.sort();
                    let m: Vec<(String, String)> = m.iter().map(|(k, v)| (text(k), text(v))).collect();
                    format!("{m:?}")
                }
                "set" => {
                    let mut v: Vec<Vec<u8>> = redis::cmd("SMEMBERS").arg(&key).query_async(&mut node).await.unwrap();
                    v.sort();
                    let v: Vec<String> = v.iter().map(|b| text(b)).collect();
                    format!("{v:?}")
                }
                "zset" => {
                    let v: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
                        .arg(&key)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES")
                        .query_async(&mut node)
                        .await
                        .unwrap();
                    format!("{v:?}")
                }
                "stream" => {
                    let v: redis::Value =
                        redis::cmd("XRANGE").arg(&key).arg("-").arg("+").query_async(&mut node).await.unwrap();
                    format!("{v:?}")
                }
                _ => {
                    let v: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query_async(&mut node).await.unwrap();
                    format!("{:?}", v.as_deref().map(text))
                }
            };
            out.insert(key, content);
        }
    }
    out
}

/// Bytes as text when they are UTF-8, else as hex (binary block keys and records).
fn text(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_string(),
        Err(_) => b.iter().map(|x| format!("{x:02x}")).collect(),
    }
}

/// Polls `f` until it answers true, failing the test after `secs` seconds naming `what`.
pub async fn wait_until<F, Fut>(what: &str, secs: u64, f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut f = f;
    let ok = eventually(Duration::from_secs(secs), || {
        let fut = f();
        async move { fut.await.then_some(()) }
    })
    .await;
    assert!(ok.is_some(), "timed out waiting until {what}");
}

/// Polls `f` until it returns Some or the deadline passes.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A frontend with one `file` storage under a fresh directory, one group and one registered
/// instance — the usual starting point of data-plane tests.
pub struct Fixture {
    pub api: Api,
    pub root: PathBuf,
    pub instance: String,
}

impl Fixture {
    /// `specs`: (name, bytes); `per_file`: key_count_per_file; `group_extra` merges into the group.
    pub async fn new(specs: &[(&str, i64)], per_file: i32, group_extra: Value) -> Fixture {
        Self::on(Api::start(), specs, per_file, group_extra).await
    }

    pub async fn on(api: Api, specs: &[(&str, i64)], per_file: i32, group_extra: Value) -> Fixture {
        let root = repo_root().join(".kvcm/test-data").join(unique("store"));
        std::fs::create_dir_all(&root).unwrap();
        let r = api
            .admin(
                "addStorage",
                serde_json::json!({"storage": {"global_unique_name": "files", "nfs": {"root_path": root.to_str().unwrap(), "key_count_per_file": per_file}}}),
            )
            .await;
        assert_ok(&r);
        let mut group = serde_json::json!({"name": "g", "storage_candidates": ["files"], "version": 1});
        if let (Some(g), Some(extra)) = (group.as_object_mut(), group_extra.as_object()) {
            for (k, v) in extra {
                g.insert(k.clone(), v.clone());
            }
        }
        assert_ok(&api.admin("createInstanceGroup", serde_json::json!({"instance_group": group})).await);
        let specs: Vec<Value> = specs.iter().map(|(n, s)| serde_json::json!({"name": n, "size": s})).collect();
        let instance = unique("inst");
        let reg = serde_json::json!({"instance_group": "g", "instance_id": instance, "block_size": 4,
            "location_spec_infos": specs, "model_deployment": {"model_name": "m", "dtype": "bf16"},
            "location_spec_groups": [{"name": "first", "spec_names": [specs[0]["name"].clone()]}]});
        assert_ok(&api.meta("registerInstance", reg).await);
        Fixture { api, root, instance }
    }

    /// startWriteCache of `keys`; returns the reply.
    /// The first spec's URI of each location a reply (startWriteCache, getCacheLocation) holds.
    pub fn first_uris(reply: &Value) -> Vec<String> {
        reply["locations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["location_specs"][0]["uri"].as_str().unwrap().to_string())
            .collect()
    }

    pub async fn start(&self, keys: &[i64]) -> Value {
        let (_, r) = self
            .api
            .meta("startWriteCache", serde_json::json!({"instance_id": self.instance, "block_keys": keys}))
            .await;
        r
    }

    /// finishWriteCache with a success mask.
    pub async fn finish(&self, session: &Value, success: Value) -> Value {
        let (_, r) = self
            .api
            .meta("finishWriteCache", serde_json::json!({"instance_id": self.instance, "write_session_id": session["write_session_id"], "success_blocks": success}))
            .await;
        r
    }

    /// Writes and finishes `keys` (all successful).
    pub async fn write(&self, keys: &[i64]) {
        let s = self.start(keys).await;
        assert_eq!(code(&s), "OK", "{s}");
        let n = s["locations"].as_array().unwrap().len();
        assert_ok(&(200, self.finish(&s, serde_json::json!({"offset": n})).await));
    }

    /// Writes and finishes `keys` as one prompt, creating the files an engine would; returns
    /// the file paths.
    pub async fn write_files(&self, keys: &[i64]) -> Vec<PathBuf> {
        let s = self.start(keys).await;
        assert_eq!(code(&s), "OK", "{s}");
        let mut paths = Vec::new();
        for loc in s["locations"].as_array().unwrap() {
            for spec in loc["location_specs"].as_array().unwrap() {
                let p = file_path(spec["uri"].as_str().unwrap());
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(&p, b"kv").unwrap();
                paths.push(p);
            }
        }
        let n = s["locations"].as_array().unwrap().len();
        assert_ok(&(200, self.finish(&s, serde_json::json!({"offset": n})).await));
        paths
    }

    /// getCacheLocation with a query type and extra fields.
    pub async fn get(&self, query: &str, keys: &[i64], extra: Value) -> Value {
        let mut body = serde_json::json!({"instance_id": self.instance, "query_type": query, "block_keys": keys});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        let (_, r) = self.api.meta("getCacheLocation", body).await;
        r
    }

    /// Which of the returned locations are real (have URIs).
    pub fn real(reply: &Value) -> Vec<bool> {
        reply["locations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["location_specs"].as_array().unwrap().iter().all(|s| !s["uri"].as_str().unwrap().is_empty()))
            .collect()
    }
}

/// The filesystem path behind a `file://<storage>/path?query` URI.
pub fn file_path(uri: &str) -> PathBuf {
    let rest = uri.strip_prefix("file://").expect("file URI");
    let path = &rest[rest.find('/').expect("path")..];
    PathBuf::from(path.split('?').next().unwrap())
}

impl Api {
    /// Sends SIGTERM and returns at once (see [`Api::exit_code_within`]).
    pub fn sigterm(&self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
    }

    /// Polls until the process exits; its exit code, or None if it is still running at the
    /// deadline (or was killed by a signal).
    pub async fn exit_code_within(&mut self, timeout: Duration) -> Option<i32> {
        eventually(timeout, || {
            let status = self.child.try_wait().ok().flatten();
            async move { status }
        })
        .await
        .and_then(|s| s.code())
    }
}

/// A raw HTTP/1.1 client connection, for what reqwest hides: partial request heads, trickled
/// bytes, one kept-alive socket used on purpose, a server closing the socket.
pub struct RawConn {
    stream: tokio::net::TcpStream,
    buf: Vec<u8>,
}

/// A response read by [`RawConn`].
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

impl RawConn {
    /// Connects to a base URL such as `http://127.0.0.1:6382`.
    pub async fn connect(base: &str) -> RawConn {
        let addr = base.strip_prefix("http://").expect("an http:// base URL");
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        RawConn { stream, buf: Vec::new() }
    }

    /// Writes raw bytes.
    pub async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        use tokio::io::AsyncWriteExt;
        self.stream.write_all(bytes).await
    }

    /// Sends `GET path` on this connection (kept alive) and reads the reply; panics if none
    /// comes within 10 s.
    pub async fn get(&mut self, path: &str) -> RawResponse {
        self.send(format!("GET {path} HTTP/1.1\r\nhost: kvcm\r\n\r\n").as_bytes()).await.expect("send a request");
        self.read_response(Duration::from_secs(10)).await.unwrap_or_else(|| panic!("no reply to GET {path}"))
    }

    /// Reads one response (head and `content-length` body; an interim `100 Continue` counts as
    /// one); None if none is complete within `timeout` or the server closes the connection first.
    pub async fn read_response(&mut self, timeout: Duration) -> Option<RawResponse> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(resp) = self.parse_response() {
                return Some(resp);
            }
            match tokio::time::timeout_at(deadline, self.read_some()).await {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Reads until the server closes the connection (EOF or reset); the time it did, or None if
    /// it is still open at the deadline. Bytes read stay in [`RawConn::unread`].
    pub async fn closed_within(&mut self, timeout: Duration) -> Option<Instant> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.read_some()).await {
                Ok(Some(_)) => {}
                Ok(None) => return Some(Instant::now()),
                Err(_) => return None,
            }
        }
    }

    /// Bytes read so far and not yet parsed as a response.
    pub fn unread(&self) -> &[u8] {
        &self.buf
    }

    /// One read into the buffer: Some(n > 0), or None at EOF or on an error (a reset).
    async fn read_some(&mut self) -> Option<usize> {
        use tokio::io::AsyncReadExt;
        let mut chunk = [0u8; 4096];
        match self.stream.read(&mut chunk).await {
            Ok(0) | Err(_) => None,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Some(n)
            }
        }
    }

    fn parse_response(&mut self) -> Option<RawResponse> {
        let end = self.buf.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&self.buf[..end]).to_string();
        let mut lines = head.split("\r\n");
        let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        // No content-length: an interim (1xx) response, or an empty body.
        let len: usize =
            headers.iter().find(|(k, _)| k == "content-length").map_or(0, |(_, v)| v.parse().expect("a length"));
        if self.buf.len() < end + 4 + len {
            return None;
        }
        let body = String::from_utf8_lossy(&self.buf[end + 4..end + 4 + len]).to_string();
        self.buf.drain(..end + 4 + len);
        Some(RawResponse { status, headers, body })
    }
}

/// `INFO commandstats` calls of `command` (lower case, e.g. "ping") on every node of the test
/// cluster, by node address.
pub async fn command_calls(command: &str) -> BTreeMap<String, u64> {
    let mut conn = valkey().await;
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut conn).await.unwrap();
    let mut out = BTreeMap::new();
    for line in nodes.lines().filter(|l| !l.trim().is_empty()) {
        let addr = line.split_whitespace().nth(1).unwrap().split('@').next().unwrap().to_string();
        let mut node = test_cluster().node(&addr).await.unwrap();
        let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut node).await.unwrap();
        let calls = info
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:")))
            .and_then(|rest| rest.split(',').find_map(|kv| kv.strip_prefix("calls=")))
            .map_or(0, |n| n.parse().unwrap());
        out.insert(addr, calls);
    }
    out
}

/// A one-node Valkey cluster (all slots on one node) of this test's own, for tests that stop
/// Valkey, which the shared cluster must never be. Killed on drop.
pub struct SoloValkey {
    child: Option<Child>,
    args: Vec<String>,
    pub url: String,
}

impl SoloValkey {
    /// Starts the node on free ports and waits for `cluster_state:ok`.
    pub fn start() -> SoloValkey {
        let out = Command::new(repo_root().join("infra/install-valkey.sh"))
            .stderr(Stdio::inherit())
            .output()
            .expect("run infra/install-valkey.sh");
        assert!(out.status.success(), "could not install Valkey");
        let bin = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()).join("valkey-server");
        let dir = repo_root().join(".kvcm/test-tmp").join(unique("solo-valkey"));
        std::fs::create_dir_all(&dir).unwrap();
        let [port, bus] = free_ports();
        let args: Vec<String> = [
            bin.to_str().unwrap(),
            "--port",
            &port.to_string(),
            "--cluster-port",
            &bus.to_string(),
            "--bind",
            "127.0.0.1",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            dir.join("nodes.conf").to_str().unwrap(),
            "--dir",
            dir.to_str().unwrap(),
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            dir.join("valkey.log").to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut solo = SoloValkey { child: None, args, url: format!("redis://127.0.0.1:{port}") };
        solo.restart();
        let client = redis::Client::open(solo.url.as_str()).unwrap();
        let mut conn = client.get_connection().unwrap();
        let _: () = redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(0).arg(16383).query(&mut conn).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut conn).unwrap();
            if info.contains("cluster_state:ok") {
                return solo;
            }
            assert!(Instant::now() < deadline, "the one-node cluster did not reach cluster_state:ok: {info}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the node (SIGKILL): what a crashed or unreachable node looks like.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the node again on the same ports and config (its slots are in nodes.conf) and
    /// waits until it answers PING.
    pub fn restart(&mut self) {
        self.kill();
        let child = Command::new(&self.args[0])
            .args(&self.args[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn valkey-server");
        self.child = Some(child);
        let client = redis::Client::open(self.url.as_str()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while client.get_connection().and_then(|mut c| redis::cmd("PING").query::<String>(&mut c)).is_err() {
            assert!(Instant::now() < deadline, "valkey-server on {} does not answer PING", self.url);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for SoloValkey {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Distinct loopback ports that were free a moment ago.
fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<std::net::TcpListener> =
        (0..N).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    std::array::from_fn(|i| held[i].local_addr().unwrap().port())
}

/// A local cluster that clients reach only over TLS, with AUTH: `infra/valkey-cluster.sh start
/// --tls --auth [--mtls]` puts stunnel in front of each node and makes every node announce its
/// TLS port, so CLUSTER SLOTS and redirects lead the client to TLS ports only. Certificates (a
/// throwaway CA, a server certificate for 127.0.0.1, a client certificate, an unrelated CA) and
/// the passwords are made by the script under the cluster's directory.
///
/// Ports: `KVCM_TEST_TLS_BASE_PORT` (default 7711): the TLS cluster on base.. (TLS) and base+3..
/// (the nodes' own plain ports), the mutual-TLS cluster on base+10.. and base+13...
///
/// Lifetime: the first test of a binary that asks starts the cluster (or reuses a healthy one)
/// under an exclusive lock, then holds a shared "users" lock for the rest of the process. A small
/// watchdog process reads a pipe from this process; when the process exits, however it exits,
/// the pipe closes and the watchdog stops the cluster (stunnel included) — unless another test
/// binary still holds the users lock, in which case that binary's watchdog stops it later.
pub struct TlsCluster {
    /// `rediss://127.0.0.1:<first TLS port>`.
    pub url: String,
    /// `redis://127.0.0.1:<first node's own port>`: the same cluster without TLS.
    pub plain_url: String,
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub other_ca: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// The default user's password (an AUTH token, as ElastiCache's).
    pub token: String,
    /// An ACL user and the file holding its password.
    pub user: &'static str,
    pub user_password_file: PathBuf,
    /// Whether the TLS ports require a client certificate.
    pub mtls: bool,
}

impl TlsCluster {
    /// The cluster whose TLS ports need no client certificate.
    pub fn tls() -> &'static TlsCluster {
        static C: OnceLock<TlsCluster> = OnceLock::new();
        C.get_or_init(|| Self::start(tls_base_port(), false))
    }

    /// The cluster whose TLS ports require a client certificate signed by its CA.
    pub fn mtls() -> &'static TlsCluster {
        static C: OnceLock<TlsCluster> = OnceLock::new();
        C.get_or_init(|| Self::start(tls_base_port() + 10, true))
    }

    fn start(base: u16, mtls: bool) -> TlsCluster {
        let kvcm = repo_root().join(".kvcm");
        let dir = kvcm.join(format!("test-valkey-tls-{base}"));
        std::fs::create_dir_all(&dir).unwrap();
        let start_lock_path = kvcm.join(format!("test-tls-{base}.lock"));
        let users_lock_path = kvcm.join(format!("test-tls-{base}.users"));
        let start_lock = std::fs::File::create(&start_lock_path).expect("create lock file");
        start_lock.lock().expect("lock the TLS test cluster");
        let users = std::fs::File::create(&users_lock_path).expect("create lock file");
        users.lock_shared().expect("share the TLS test cluster");
        let script = repo_root().join("infra/valkey-cluster.sh");
        let mut args = vec!["start", "--tls", "--auth"];
        if mtls {
            args.push("--mtls");
        }
        let out = Command::new(&script)
            .args(&args)
            .args(["--base-port", &base.to_string(), "--dir", dir.to_str().unwrap()])
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .expect("run infra/valkey-cluster.sh");
        assert!(out.status.success(), "could not start the TLS test cluster on {base}");
        let url = String::from_utf8(out.stdout).unwrap().trim().to_string();
        assert_eq!(url, format!("rediss://127.0.0.1:{base}"));
        // The watchdog: stops the cluster once this process is gone and no other user is left.
        let logs = kvcm.join("test-logs");
        std::fs::create_dir_all(&logs).unwrap();
        let log = std::fs::File::create(logs.join(format!("tls-cluster-{base}-watchdog.log"))).unwrap();
        let stop = format!(
            "cat >/dev/null; exec flock '{start}' flock -n '{users}' '{script}' stop --base-port {base} --dir '{dir}'",
            start = start_lock_path.display(),
            users = users_lock_path.display(),
            script = script.display(),
            dir = dir.display(),
        );
        let mut watchdog = Command::new("bash")
            .args(["-c", &stop])
            .stdin(Stdio::piped())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn the TLS cluster watchdog");
        // Both stay open until the process exits: the pipe's write end keeps the watchdog
        // waiting, the file keeps the shared lock.
        std::mem::forget(watchdog.stdin.take());
        std::mem::forget(watchdog);
        std::mem::forget(users);
        drop(start_lock);
        let tls = dir.join("tls");
        let secret = |name: &str| std::fs::read_to_string(dir.join("secrets").join(name)).unwrap().trim().to_string();
        TlsCluster {
            url,
            plain_url: format!("redis://127.0.0.1:{}", base + 3),
            ca: tls.join("ca.pem"),
            other_ca: tls.join("other-ca.pem"),
            client_cert: tls.join("client.pem"),
            client_key: tls.join("client.key"),
            token: secret("token"),
            user: "kvcm",
            user_password_file: dir.join("secrets/kvcm.password"),
            dir,
            mtls,
        }
    }

    /// `KVCM_*` variables for a kvcm process that reaches this cluster as a deployment would:
    /// the URL, the CA file, the AUTH token in `KVCM_VALKEY_PASSWORD` and, on the mutual-TLS
    /// cluster, the client certificate and key.
    pub fn env(&self) -> Vec<(String, String)> {
        let path = |p: &PathBuf| p.to_str().unwrap().to_string();
        let mut env = vec![
            ("KVCM_VALKEY_URL".to_string(), self.url.clone()),
            ("KVCM_VALKEY_TLS_CA_FILE".to_string(), path(&self.ca)),
            ("KVCM_VALKEY_PASSWORD".to_string(), self.token.clone()),
        ];
        if self.mtls {
            env.push(("KVCM_VALKEY_TLS_CLIENT_CERT_FILE".into(), path(&self.client_cert)));
            env.push(("KVCM_VALKEY_TLS_CLIENT_KEY_FILE".into(), path(&self.client_key)));
        }
        env
    }

    /// How the tests reach this cluster directly: [`TlsCluster::env`] read as kvcm reads it.
    pub fn access(&self) -> kvcm_core::valkey::Access {
        let (config, _) = kvcm_core::config::Config::load_from(None, &self.env()).expect("the TLS test config");
        kvcm_core::valkey::Access::from_config(&config).expect("the TLS test access")
    }

    /// How many keys of `namespace` each primary holds, by announced (TLS) address: every node
    /// is reached on its own TLS connection, as the worker's discovery does.
    pub async fn keys_per_node(&self, namespace: &str) -> BTreeMap<String, usize> {
        let access = self.access();
        let mut conn = access.cluster().await.expect("a TLS cluster connection");
        let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut conn).await.unwrap();
        let mut out = BTreeMap::new();
        for line in nodes.lines().filter(|l| l.contains("master")) {
            let addr = line.split_whitespace().nth(1).unwrap().split('@').next().unwrap().to_string();
            let mut node = access.node(&addr).await.unwrap_or_else(|e| panic!("a TLS connection to {addr}: {e}"));
            let keys: Vec<String> =
                redis::cmd("KEYS").arg(format!("{namespace}:*")).query_async(&mut node).await.unwrap();
            out.insert(addr, keys.len());
        }
        out
    }
}

/// First port of the TLS test clusters (see [`TlsCluster`]).
fn tls_base_port() -> u16 {
    std::env::var("KVCM_TEST_TLS_BASE_PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(7711)
}

/// `(String, String)` pairs as the `(&str, &str)` pairs [`Api::start_with`] takes.
pub fn pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// The `cargo-lambda` binary (its wheel, pinned in `infra/requirements-test.txt`, is installed
/// by `infra/install-python-tools.sh`, which `infra/deps.sh` and so `make test` run).
pub fn cargo_lambda() -> PathBuf {
    let path = repo_root().join(".kvcm/tools/python/bin/cargo-lambda");
    assert!(path.exists(), "{} is missing: run infra/deps.sh (make test does)", path.display());
    path
}

/// cargo-lambda's emulator of the Lambda runtime API and of function URLs (`cargo lambda watch
/// --only-lambda-apis`) on a free port of its own, for one function named `kvcm-api`. It starts
/// no function itself: [`LambdaFunction`] runs the binary against it. Killed on drop.
pub struct LambdaEmulator {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    pub log: PathBuf,
}

impl LambdaEmulator {
    /// Starts the emulator and waits until it listens. `--offline`: it runs `cargo metadata` (to
    /// learn the workspace's binaries) and must not reach the network; no build happens.
    pub fn start(label: &str) -> LambdaEmulator {
        let [port] = free_ports();
        let logs = repo_root().join(".kvcm/test-logs");
        std::fs::create_dir_all(&logs).unwrap();
        let log = logs.join(format!("{label}-lambda-emulator-{port}.log"));
        let log_file = std::fs::File::create(&log).unwrap();
        let mut child = Command::new(cargo_lambda())
            .args(["lambda", "watch", "--only-lambda-apis", "--offline", "--disable-cors", "-A", "127.0.0.1"])
            .args(["-P", &port.to_string(), "--manifest-path"])
            .arg(repo_root().join("api/Cargo.toml"))
            .current_dir(repo_root())
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("spawn cargo-lambda");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            let exited = child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "cargo lambda watch did not listen on port {port} ({exited:?}):\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        LambdaEmulator { child, base: format!("http://127.0.0.1:{port}"), log }
    }

    /// The function URL: RPCs are `<url>/api/<rpc>`.
    pub fn function_url(&self) -> String {
        format!("{}/lambda-url/kvcm-api", self.base)
    }

    /// The invoke API (a raw event in, the raw response out).
    pub fn invoke_url(&self) -> String {
        format!("{}/2015-03-31/functions/kvcm-api/invocations", self.base)
    }

    /// What `AWS_LAMBDA_RUNTIME_API` must say for the function to poll this emulator.
    pub fn runtime_api(&self) -> String {
        format!("{}/.rt/kvcm-api", self.base)
    }
}

impl Drop for LambdaEmulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a reply is the emulator's own failure rather than the function's: cargo-lambda 1.9's
/// emulator answers the function's `POST …/invocation/<id>/response` before reading its body and
/// hands the unread body to the waiting function-URL request; when hyper closes that connection
/// first (a reply too large for one read, ~8 KB, such as `/metrics`), reading it fails and the
/// caller gets a bare problem document of type `https://httpstatuses.com/500`. kvcm never
/// answers with that type. Seen about once in 20 runs of the Lambda smoke test.
pub fn emulator_fault(status: u16, body: &str) -> bool {
    status == 500 && body.contains("https://httpstatuses.com/500")
}

/// `kvcm-api` as an AWS Lambda function serving one plane, behind its own [`LambdaEmulator`]:
/// the emulator turns each HTTP request to the function URL into an API Gateway HTTP API (v2)
/// event and hands it to the `kvcm-api` binary built by `cargo build --bins`, which polls the
/// emulator's runtime API as it would poll AWS's — no build by cargo-lambda, no network. Both
/// processes are killed on drop.
///
/// The emulator writes `sourceIp = 127.0.0.1` into every function-URL event; to act as other
/// clients, [`LambdaFunction::invoke_from`] sends a hand-made v2 event through the emulator's
/// invoke API instead.
pub struct LambdaFunction {
    function: Child,
    emulator: LambdaEmulator,
    /// The function URL: RPCs are `<url>/api/<rpc>`.
    pub url: String,
    pub namespace: String,
    pub log: PathBuf,
    http: reqwest::Client,
}

impl LambdaFunction {
    /// Starts an emulator and the function serving `plane` ("meta" or "admin") in `namespace`,
    /// with extra `KVCM_*` variables.
    pub fn start(namespace: &str, plane: &str, env: &[(&str, &str)]) -> LambdaFunction {
        let emulator = LambdaEmulator::start(namespace);
        match Self::start_on(emulator, &bin_path("kvcm-api"), namespace, plane, env) {
            Ok(f) => f,
            Err(failed) => panic!("the {plane} Lambda function did not start ({:?}):\n{}", failed.code, failed.stderr),
        }
    }

    /// Runs the `kvcm-api` binary at `binary` as the function of `emulator`; returns once it
    /// serves (its exit code and log if it exits instead).
    pub fn start_on(
        emulator: LambdaEmulator,
        binary: &std::path::Path,
        namespace: &str,
        plane: &str,
        env: &[(&str, &str)],
    ) -> Result<LambdaFunction, Failed> {
        let runtime_api = emulator.runtime_api();
        let lambda_env = [
            ("AWS_LAMBDA_RUNTIME_API", runtime_api.as_str()),
            ("AWS_LAMBDA_FUNCTION_NAME", "kvcm-api"),
            ("AWS_LAMBDA_FUNCTION_VERSION", "1"),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024"),
            ("KVCM_LAMBDA_PLANE", plane),
        ];
        let (mut function, line, log) = spawn_kvcm_at(binary, namespace, &lambda_env, env, &[]);
        if field(&line, "lambda_plane").as_deref() != Some(plane) {
            let _ = function.kill();
            let status = function.wait().ok();
            return Err(Failed {
                code: status.and_then(|s| s.code()),
                stderr: std::fs::read_to_string(&log).unwrap_or_default(),
            });
        }
        Ok(LambdaFunction {
            function,
            url: emulator.function_url(),
            emulator,
            namespace: namespace.to_string(),
            log,
            // Bounded: a function that died mid-test would leave the emulator waiting for it.
            http: reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap(),
        })
    }

    /// POSTs a JSON body to `/api/<rpc>` through the function URL, with an optional
    /// Authorization header; returns HTTP status and parsed body.
    pub async fn post(&self, rpc: &str, body: Value, auth: Option<&str>) -> (u16, Value) {
        let mut req = self
            .http
            .post(format!("{}/api/{rpc}", self.url))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let resp = req.send().await.expect("HTTP request through the Lambda emulator");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        assert!(
            !emulator_fault(status, &text),
            "POST /api/{rpc}: the emulator failed to carry the function's reply (see emulator_fault): {text}"
        );
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// GETs a path through the function URL as text. A GET changes nothing, so one the emulator
    /// drops (see [`emulator_fault`]) is sent again, up to three times.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let resp =
                self.http.get(format!("{}{path}", self.url)).send().await.expect("HTTP request through the emulator");
            let reply = (resp.status().as_u16(), resp.text().await.unwrap_or_default());
            if !emulator_fault(reply.0, &reply.1) || attempts == 3 {
                return reply;
            }
        }
    }

    /// POSTs to `/api/<rpc>` as a client at `source_ip`: an API Gateway HTTP API (payload 2.0)
    /// event with that `requestContext.http.sourceIp`, sent through the emulator's invoke API.
    /// `headers` are added to the event's. Returns the status, parsed body and `Retry-After`.
    pub async fn invoke_from(
        &self,
        source_ip: &str,
        rpc: &str,
        body: Value,
        headers: &[(&str, &str)],
    ) -> (u16, Value, Option<String>) {
        let path = format!("/api/{rpc}");
        let mut event_headers = serde_json::json!({"content-type": "application/json", "host": "kvcm.example.com"});
        for (k, v) in headers {
            event_headers[*k] = Value::String(v.to_string());
        }
        let event = serde_json::json!({
            "version": "2.0", "routeKey": "$default", "rawPath": path, "rawQueryString": "",
            "headers": event_headers,
            "requestContext": {
                "accountId": "123456789012", "apiId": "kvcm", "domainName": "kvcm.example.com",
                "domainPrefix": "kvcm", "requestId": unique("req"), "routeKey": "$default", "stage": "$default",
                "time": "30/Nov/2026:00:00:00 +0000", "timeEpoch": 1_796_000_000_000_i64,
                "http": {"method": "POST", "path": path, "protocol": "HTTP/1.1", "sourceIp": source_ip,
                         "userAgent": "kvcm-tests"}
            },
            "body": body.to_string(), "isBase64Encoded": false
        });
        let resp = self
            .http
            .post(self.emulator.invoke_url())
            .body(event.to_string())
            .send()
            .await
            .expect("invoke through the emulator");
        assert_eq!(resp.status().as_u16(), 200, "the invoke API itself failed");
        let reply: Value = resp.json().await.expect("a JSON API Gateway response");
        let status = reply["statusCode"].as_u64().unwrap_or_else(|| panic!("no statusCode in {reply}")) as u16;
        let retry_after = reply["headers"]["retry-after"].as_str().map(String::from);
        let text = reply["body"].as_str().unwrap_or_default();
        (status, serde_json::from_str(text).unwrap_or(Value::String(text.to_string())), retry_after)
    }
}

impl LambdaFunction {
    /// The function process's established TCP connections other than those to its emulator, as
    /// (local port, remote port) pairs, read from `/proc` (Linux): its Valkey connections.
    pub fn valkey_connections(&self) -> std::collections::BTreeSet<(u16, u16)> {
        let emulator_port: u16 = self.emulator.base.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap();
        let pid = self.function.id();
        // The process's sockets, by inode.
        let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .expect("the function process runs")
            .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter_map(|target| {
                let t = target.to_string_lossy();
                Some(t.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
            })
            .collect();
        let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next()?, 16).ok();
        let mut found = std::collections::BTreeSet::new();
        for table in ["tcp", "tcp6"] {
            let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
            for line in text.lines().skip(1) {
                // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
                let cols: Vec<&str> = line.split_whitespace().collect();
                if cols.len() < 10 || cols[3] != "01" || !inodes.contains(cols[9]) {
                    continue;
                }
                if let (Some(local), Some(remote)) = (port(cols[1]), port(cols[2]))
                    && remote != emulator_port
                {
                    found.insert((local, remote));
                }
            }
        }
        found
    }
}

impl Drop for LambdaFunction {
    fn drop(&mut self) {
        let _ = self.function.kill();
        let _ = self.function.wait();
    }
}

/// Starts `kvcm-api` in the Lambda runtime (a runtime API address that nothing serves, so it must
/// fail before it polls) and returns its exit code and log: for the start-up refusals.
pub fn lambda_start_failure(namespace: &str, env: &[(&str, &str)]) -> Failed {
    let lambda_env = [
        ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9"),
        ("AWS_LAMBDA_FUNCTION_NAME", "kvcm-api"),
        ("AWS_LAMBDA_FUNCTION_VERSION", "1"),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024"),
    ];
    let (mut child, line, log) = spawn_kvcm("kvcm-api", namespace, &lambda_env, env);
    if !line.is_empty() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("kvcm-api started in Lambda mode although it should refuse: {line}");
    }
    let status = child.wait().ok();
    Failed { code: status.and_then(|s| s.code()), stderr: std::fs::read_to_string(&log).unwrap_or_default() }
}

/// A TCP proxy in front of one Valkey node that can lose a reply the way a dropped connection
/// does: the request reaches Valkey and runs, and the connection is closed before its reply gets
/// back — what makes a client resend a request that already took effect. Point the node's
/// `cluster-announce-port` at [`ReplyDropper::port`] so cluster clients stay behind it.
pub struct ReplyDropper {
    pub port: u16,
    armed: std::sync::Arc<std::sync::Mutex<Option<Vec<u8>>>>,
    dropped: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Bumped by [`ReplyDropper::reset_all`]: every connection older than it is cut.
    epoch: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    cut: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    accept: tokio::task::JoinHandle<()>,
}

impl ReplyDropper {
    pub async fn start(upstream: u16) -> ReplyDropper {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed: std::sync::Arc<std::sync::Mutex<Option<Vec<u8>>>> = Default::default();
        let dropped: std::sync::Arc<std::sync::atomic::AtomicUsize> = Default::default();
        let epoch: std::sync::Arc<std::sync::atomic::AtomicUsize> = Default::default();
        let cut_count: std::sync::Arc<std::sync::atomic::AtomicUsize> = Default::default();
        let (armed2, dropped2, epoch2, cut2_count) = (armed.clone(), dropped.clone(), epoch.clone(), cut_count.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await else { continue };
                // Reset (RST, not FIN) when cut: what a dropped NAT entry or a peer's crash looks like.
                let _ = socket2::SockRef::from(&client).set_linger(Some(Duration::ZERO));
                let (born, epoch, cut_count) = (epoch2.load(Ordering::SeqCst), epoch2.clone(), cut2_count.clone());
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let (armed, dropped) = (armed2.clone(), dropped2.clone());
                // Set once a request matching the armed needle went to Valkey: its reply is lost.
                let lose_reply = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                let lose = lose_reply.clone();
                let cut = {
                    let epoch = epoch.clone();
                    move || epoch.load(Ordering::SeqCst) != born
                };
                let cut2 = cut.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 << 10];
                    loop {
                        let n = tokio::select! {
                            r = cr.read(&mut buf) => match r { Ok(n) => n, Err(_) => break },
                            _ = until(cut2.clone()) => break,
                        };
                        if n == 0 {
                            break;
                        }
                        {
                            let mut a = armed.lock().unwrap();
                            if a.as_ref().is_some_and(|needle| buf[..n].windows(needle.len()).any(|w| w == &needle[..]))
                            {
                                *a = None;
                                lose.store(true, Ordering::SeqCst);
                            }
                        }
                        if sw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 << 10];
                    loop {
                        let n = tokio::select! {
                            r = sr.read(&mut buf) => match r { Ok(n) => n, Err(_) => break },
                            _ = until(cut.clone()) => {
                                // Dropping the client's socket with linger 0 sends RST.
                                cut_count.fetch_add(1, Ordering::SeqCst);
                                return;
                            }
                        };
                        if n == 0 {
                            break;
                        }
                        if lose_reply.load(Ordering::SeqCst) {
                            // Close the client's connection (FIN) instead of answering: to the
                            // client, a connection lost with a request in flight.
                            dropped.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                        if cw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = cw.shutdown().await;
                });
            }
        });
        ReplyDropper { port, armed, dropped, epoch, cut: cut_count, accept }
    }

    /// A proxy in front of the one-node cluster `valkey`, which announces the proxy's port (so
    /// CLUSTER SLOTS and redirects send clients through it too); returns the proxy and the URL
    /// clients use.
    pub async fn in_front_of(valkey: &SoloValkey) -> (ReplyDropper, String) {
        let port: u16 = valkey.url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port");
        let proxy = ReplyDropper::start(port).await;
        let client = redis::Client::open(valkey.url.as_str()).unwrap();
        let mut node = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-announce-port")
            .arg(proxy.port)
            .query_async(&mut node)
            .await
            .unwrap();
        let url = format!("redis://127.0.0.1:{}", proxy.port);
        (proxy, url)
    }

    /// Resets every connection open now (new ones are let through).
    pub fn reset_all(&self) {
        self.epoch.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Connections reset so far by [`ReplyDropper::reset_all`].
    pub fn resets(&self) -> usize {
        self.cut.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The next request whose bytes contain `needle` runs in Valkey, and its reply is lost with
    /// the connection.
    pub fn lose_reply_to(&self, needle: &[u8]) {
        *self.armed.lock().unwrap() = Some(needle.to_vec());
    }

    /// Replies lost so far.
    pub fn lost(&self) -> usize {
        self.dropped.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Resolves once `cut` says so (polled: the proxy's connections are few).
async fn until(cut: impl Fn() -> bool) {
    while !cut() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Drop for ReplyDropper {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
