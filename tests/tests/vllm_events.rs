//! vLLM KV-event ingestion end to end (issue 14, docs/events.md "vLLM engines"): a publisher
//! speaking vLLM's wire format with the libraries vLLM uses (tests/vllm/publisher.py: pyzmq and
//! msgspec, real ZMQ sockets) → `kvcm-worker events` → kvcm → `getHostCacheState`, as a router
//! would ask. Covers both msgpack encodings, int and bytes hashes, removals, a lost message
//! filled from the replay socket, the subscriber killed and restarted, the engine restarted,
//! AllBlocksCleared, the engine gone (heartbeats stop), and token-chained keys.

use kvcm_tests::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The test publisher, driven through its stdin.
struct Publisher {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
    endpoint: String,
    replay: String,
}

impl Publisher {
    fn start(encoding: &str) -> Publisher {
        Self::start_on(encoding, 0, 0)
    }

    /// A publisher on given ports (0: free ones): an engine restarted where it was.
    fn start_on(encoding: &str, port: u16, replay_port: u16) -> Publisher {
        let mut child = Command::new("python3")
            .arg(repo_root().join("tests/vllm/publisher.py"))
            .args(["--encoding", encoding, "--port", &port.to_string(), "--replay-port", &replay_port.to_string()])
            .env("PYTHONPATH", repo_root().join(".kvcm/tools/python"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the test publisher");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let ports: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(ports.first(), Some(&"ready"), "the publisher did not start: {line}");
        Publisher {
            child,
            out,
            endpoint: format!("tcp://127.0.0.1:{}", ports[1]),
            replay: format!("tcp://127.0.0.1:{}", ports[2]),
        }
    }

    fn ports(&self) -> (u16, u16) {
        let port = |e: &str| e.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0);
        (port(&self.endpoint), port(&self.replay))
    }

    /// Publishes one batch (or arms a lost one); returns its seq.
    fn send(&mut self, cmd: Value) -> Option<u64> {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{cmd}").unwrap();
        stdin.flush().unwrap();
        if cmd.get("skip").is_some() {
            return None;
        }
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line.trim().strip_prefix("sent ").and_then(|s| s.parse().ok())
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const HOST: &str = "10.0.0.7:8000";

/// The engine host's matched prefix (`local`) for `keys`, or None when the host is not listed.
async fn local(api: &Api, instance: &str, keys: &[i64]) -> Option<i64> {
    let body = json!({"instance_id": instance, "query_type": "QT_PREFIX_MATCH", "block_cache_keys": keys});
    let (_, r) = api.meta("getHostCacheState", body).await;
    assert_eq!(code(&r), "OK", "{r}");
    let n = |v: &Value| v.as_str().and_then(|s| s.parse().ok()).or(v.as_i64()).unwrap_or(-1);
    r["hosts"].as_array()?.iter().find(|h| h["host_ip_port"] == HOST).map(|h| n(&h["local"]))
}

/// Waits until the host's matched prefix for `keys` is `want` (None: not listed).
async fn until_local(api: &Api, instance: &str, keys: &[i64], want: Option<i64>, what: &str) {
    let got =
        eventually(Duration::from_secs(15), || async { (local(api, instance, keys).await == want).then_some(()) })
            .await;
    assert!(got.is_some(), "{what}: wanted {want:?}, have {:?}", local(api, instance, keys).await);
}

/// Waits until the subscriber is connected to its publisher `times` times in all (a PUB socket
/// drops what it sends before a subscriber is connected, as vLLM's does).
async fn connected(sub: &WorkerProc, times: f64) {
    let ok = eventually(Duration::from_secs(15), || async {
        (sub.metric("kvcm_worker_engine_stream_total{what=\"connected\"}").await >= times).then_some(())
    })
    .await;
    assert!(ok.is_some(), "the subscriber never connected to the publisher");
}

fn events_args<'a>(p: &'a Publisher, instance: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "--endpoint",
        p.endpoint.as_str(),
        "--replay",
        p.replay.as_str(),
        "--instance",
        instance,
        "--host",
        HOST,
        "--heartbeat-ms",
        "300",
    ];
    a.extend(extra);
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vllm_engines_events_become_its_hot_tier_and_survive_losses_and_restarts() {
    let fx = Fixture::on(
        Api::start_with(&unique("ns"), &[("KVCM_EVENT_REPORT_HEARTBEAT_TIMEOUT_MS", "2000")]),
        &[("tp0", 2)],
        1,
        json!({}),
    )
    .await;
    let (api, instance) = (&fx.api, fx.instance.clone());
    let env = [("KVCM_EVENT_REPORT_HEARTBEAT_TIMEOUT_MS", "2000")];
    let mut p = Publisher::start("array");
    let sub = WorkerProc::start_events(&api.namespace, &env, &events_args(&p, &instance, &[]));
    connected(&sub, 1.0).await;
    p.send(json!({"stored": [11, 12, 13], "parent": null, "tokens": [1, 2, 3, 4, 5, 6], "block_size": 2}));
    until_local(api, &instance, &[11, 12, 13], Some(3), "three stored blocks").await;
    // Idle past kvcm's heartbeat timeout (2 s): the connected subscriber's heartbeats keep it.
    tokio::time::sleep(Duration::from_millis(2600)).await;
    assert_eq!(local(api, &instance, &[11, 12, 13]).await, Some(3), "heartbeats kept an idle engine's blocks");
    // Int hashes beyond i64 and byte hashes (sha256 digests) name the same keys as vLLM's int form.
    let big: u64 = u64::MAX - 5;
    p.send(json!({"stored": [big], "parent": 13, "tokens": [7, 8], "block_size": 2}));
    p.send(json!({"stored": [14], "parent": big, "tokens": [9, 10], "block_size": 2, "bytes": true}));
    until_local(api, &instance, &[11, 12, 13, big as i64, 14], Some(5), "int and bytes hashes").await;
    p.send(json!({"removed": [12]}));
    until_local(api, &instance, &[11, 12, 13], Some(1), "a removed block ends the prefix").await;

    // A lost message: its batch is fetched from the replay socket when the next one shows the gap.
    p.send(json!({"skip": true}));
    p.send(json!({"stored": [12], "parent": 11, "tokens": [3, 4], "block_size": 2}));
    p.send(json!({"stored": [15], "parent": 14, "tokens": [11, 12], "block_size": 2}));
    until_local(api, &instance, &[11, 12, 13, big as i64, 14, 15], Some(6), "the lost batch replayed").await;
    assert!(sub.metric("kvcm_worker_engine_stream_total{what=\"replayed\"}").await >= 1.0);

    // The subscriber dies and comes back while the engine goes on: it catches up from seq 0.
    sub.kill9();
    p.send(json!({"removed": [15]}));
    p.send(json!({"stored": [16], "parent": 15, "tokens": [13, 14], "block_size": 2}));
    let sub = WorkerProc::start_events(&api.namespace, &env, &events_args(&p, &instance, &[]));
    connected(&sub, 1.0).await;
    p.send(json!({"stored": [17], "parent": 16, "tokens": [15, 16], "block_size": 2}));
    until_local(api, &instance, &[11, 12, 13, big as i64, 14, 15], Some(5), "caught up after a restart").await;
    until_local(api, &instance, &[16, 17], Some(2), "blocks stored while it was away").await;

    // AllBlocksCleared: nothing the engine held before is reported any more.
    p.send(json!({"cleared": true}));
    until_local(api, &instance, &[16, 17], None, "cleared").await;
    p.send(json!({"stored": [21], "parent": null, "tokens": [1, 1], "block_size": 2}));
    until_local(api, &instance, &[21], Some(1), "stored after the clear").await;

    // The engine restarts where it was (same ports, seq from 0, the map encoding) while the
    // subscriber keeps running: it reconnects, and what the old engine held vanishes.
    let (port, replay_port) = p.ports();
    drop(p);
    let mut p = Publisher::start_on("map", port, replay_port);
    connected(&sub, 2.0).await;
    until_local(api, &instance, &[21], None, "a block of the old engine").await;
    p.send(json!({"stored": [31, 32], "parent": null, "tokens": [5, 5, 6, 6], "block_size": 2}));
    until_local(api, &instance, &[31, 32], Some(2), "the restarted engine's blocks, map-encoded").await;
    assert_eq!(local(api, &instance, &[21]).await, None, "a block of the old engine");

    // The engine dies: heartbeats stop, and its host leaves the answers after the timeout.
    drop(p);
    until_local(api, &instance, &[31, 32], None, "the engine gone").await;
    drop(sub);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_chained_keys_are_what_a_router_computes_from_the_prompt() {
    let fx = Fixture::new(&[("tp0", 2)], 1, json!({})).await;
    let (api, instance) = (&fx.api, fx.instance.clone());
    let mut p = Publisher::start("map");
    let sub = WorkerProc::start_events(&api.namespace, &[], &events_args(&p, &instance, &["--key-mode", "tokens"]));
    connected(&sub, 1.0).await;
    // Engine hashes are the engine's business; kvcm's keys chain from the token ids.
    p.send(json!({"stored": [900, 901], "parent": null, "tokens": [1, 2, 3, 4], "block_size": 2}));
    p.send(json!({"stored": [902], "parent": 901, "tokens": [5, 6], "block_size": 2}));
    let k1 = kvcm_worker::vllm_events::token_key(0, &[1, 2]);
    let k2 = kvcm_worker::vllm_events::token_key(k1, &[3, 4]);
    let k3 = kvcm_worker::vllm_events::token_key(k2, &[5, 6]);
    until_local(api, &instance, &[k1, k2, k3], Some(3), "keys from the tokens").await;
    // A removal names the engine hash; kvcm finds its key.
    p.send(json!({"removed": [901]}));
    until_local(api, &instance, &[k1, k2, k3], Some(1), "a removal by engine hash").await;
    drop(sub);
}
