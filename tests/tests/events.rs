//! Engine-reported cache tiers (issue 14, docs/events.md): reportEvent's events and
//! request-composition rules, generations and snapshots, liveness by heartbeat, a reporter's
//! state surviving the frontend that took its events, getHostCacheState across several hosts
//! (Tair's own integration case), quotas untouched, over HTTP and gRPC.

use kvcm_tests::*;
use serde_json::{Value, json};

fn add(key: i64, medium: &str, specs: &[(&str, &str)]) -> Value {
    let specs: Vec<Value> = specs.iter().map(|(n, u)| json!({"name": n, "uri": u})).collect();
    json!({"event_type": "EVENT_BLOCK_ADD", "block_add": {"block_key": key.to_string(), "medium": medium, "specs": specs}})
}

fn delete(key: i64, medium: &str, names: &[&str]) -> Value {
    json!({"event_type": "EVENT_BLOCK_DELETE", "block_delete": {"block_key": key.to_string(), "medium": medium, "spec_names": names}})
}

fn heartbeat() -> Value {
    json!({"event_type": "EVENT_HEARTBEAT", "heartbeat": {}})
}

fn register(mediums: &[&str]) -> Value {
    json!({"event_type": "EVENT_NODE_REGISTER", "node_register": {"mediums": mediums}})
}

fn snapshot(blocks: &[(i64, &str)]) -> Value {
    let blocks: Vec<Value> = blocks
        .iter()
        .map(|(k, m)| json!({"block_key": k.to_string(), "medium": m, "specs": [{"name": "tp0", "uri": format!("event_report://h/{m}/{k}")}]}))
        .collect();
    json!({"event_type": "EVENT_BLOCK_SNAPSHOT", "block_snapshot": {"blocks": blocks}})
}

async fn report(api: &Api, instance: &str, tier: &str, host: &str, events: Vec<Value>) -> Value {
    let (http, r) = api
        .meta(
            "reportEvent",
            json!({"instance_id": instance, "host_ip_port": host, "storage_type": tier, "events": events}),
        )
        .await;
    assert_eq!(http, 200, "{r}");
    r
}

/// getHostCacheState of `keys`: (host, local, p2p_1_fetch, p2p_1_total_match) per host.
async fn hosts(api: &Api, instance: &str, keys: &[i64], medium: &[&str]) -> Vec<(String, i64, i64, i64)> {
    let (_, r) = api
        .meta(
            "getHostCacheState",
            json!({"instance_id": instance, "query_type": "QT_PREFIX_MATCH", "block_cache_keys": keys, "medium": medium}),
        )
        .await;
    assert_eq!(code(&r), "OK", "{r}");
    let n = |v: &Value| v.as_str().and_then(|s| s.parse().ok()).or(v.as_i64()).unwrap_or(-1);
    r["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["host_ip_port"].as_str().unwrap().to_string(),
                n(&h["local"]),
                n(&h["p2p_1_fetch"]),
                n(&h["p2p_1_total_match"]),
            )
        })
        .collect()
}

/// A fixture (one `tp0` spec) on a frontend of its own started with `env` (liveness settings).
async fn fixture_with(env: &[(&str, &str)]) -> Fixture {
    Fixture::on(Api::start_with(&unique("events"), env), &[("tp0", 64)], 1, json!({})).await
}

fn uri(host: &str, key: i64) -> String {
    format!("event_report://{host}/gpu/{key}?size=4096")
}

/// Fields in one of the instance's engine hashes (`engine`, `engine_specs`, `reporters`).
async fn hash_len(api: &Api, inst: &str, name: &str) -> i64 {
    redis::cmd("HLEN").arg(instance_key(&api.namespace, inst, name)).query_async(&mut valkey().await).await.unwrap()
}

/// A block's presence records (13 bytes per reporter and medium holding it).
async fn presence(api: &Api, inst: &str, key: i64) -> Vec<u8> {
    redis::cmd("HGET")
        .arg(instance_key(&api.namespace, inst, "engine"))
        .arg(&key.to_be_bytes()[..])
        .query_async(&mut valkey().await)
        .await
        .unwrap()
}

/// The stored specs of block `key` under the entry a 13-byte presence `record` names (its
/// reporter index and medium id), if any.
async fn stored_specs(api: &Api, inst: &str, key: i64, record: &[u8]) -> Option<Vec<u8>> {
    let field = [&key.to_be_bytes()[..], &record[..4], &record[12..13]].concat();
    redis::cmd("HGET")
        .arg(instance_key(&api.namespace, inst, "engine_specs"))
        .arg(&field[..])
        .query_async(&mut valkey().await)
        .await
        .unwrap()
}

/// The stored specs of a block held by exactly one reporter in one medium.
async fn only_specs(api: &Api, inst: &str, key: i64) -> Vec<u8> {
    let record = presence(api, inst, key).await;
    assert_eq!(record.len(), 13, "one record: {record:?}");
    stored_specs(api, inst, key, &record).await.expect("specs stored")
}

/// Specs as stored for one spec `tp0` at `uri`: count u8 | name length u8 | name | uri length
/// u16 LE | uri.
fn tp0_specs(uri: &str) -> Vec<u8> {
    [&[1u8, 3][..], b"tp0", &(uri.len() as u16).to_le_bytes(), uri.as_bytes()].concat()
}

/// A prepared batch's specs argument: each specs value after its length (u32 LE).
fn packed_specs(specs: &[Vec<u8>]) -> Vec<u8> {
    specs.iter().flat_map(|s| [&(s.len() as u32).to_le_bytes()[..], s].concat()).collect()
}

#[tokio::test]
async fn hosts_are_matched_by_host_across_tiers_and_one_peer_fills_gaps() {
    let fx = Fixture::new(&[("tp0", 64)], 1, json!({})).await;
    let (api, inst) = (&fx.api, fx.instance.as_str());
    let keys = [10000, 10001, 10002, 10003];
    // Tair's integration case (test_report_event.py, test_18): A holds {0,1} in L1P5 and
    // {0,3} in L2; B {0,2} and {0,1,3}; C {0} in L2.
    for (host, l1, l2) in
        [("A:1", vec![0, 1], vec![0, 3]), ("B:1", vec![0, 2], vec![0, 1, 3]), ("C:1", vec![], vec![0])]
    {
        for (tier, held) in [("ST_EVENT_REPORT_L1P5", &l1), ("ST_EVENT_REPORT_L2", &l2)] {
            if held.is_empty() {
                continue;
            }
            let mut events = vec![heartbeat()];
            events.extend(held.iter().map(|&i| add(keys[i], "gpu", &[("tp0", &uri(host, keys[i]))])));
            let r = report(api, inst, tier, host, events).await;
            assert_eq!(code(&r), "OK", "{r}");
            assert_eq!(r["item_results"], json!([]), "{r}");
            assert_eq!(r["committed_snapshot_version"].as_str().unwrap().len(), 32, "{r}");
            assert_eq!(r["snapshot_required"], json!(true), "a new reporter has no generation: {r}");
        }
    }
    // By host, not by type: A has 0,1 (local 2; nobody's L2 has 2); B all four; C only 0, and
    // B's L2 adds 1 (then 2 is missing everywhere C could fetch from).
    assert_eq!(
        hosts(api, inst, &keys, &[]).await,
        vec![("A:1".into(), 2, 0, 2), ("B:1".into(), 4, 0, 4), ("C:1".into(), 1, 1, 2)]
    );
    // A medium filter; a host without the first block is not listed; no match is an empty list.
    assert!(hosts(api, inst, &keys, &["disk"]).await.is_empty());
    assert_eq!(hosts(api, inst, &keys[1..], &[]).await, vec![("A:1".into(), 1, 0, 1), ("B:1".into(), 3, 0, 3)]);
    assert!(hosts(api, inst, &[1, 2, 3], &[]).await.is_empty());
    // The same over gRPC.
    let g = api
        .grpc_meta(
            "GetHostCacheState",
            json!({"instance_id": inst, "query_type": "QT_PREFIX_MATCH", "block_cache_keys": keys}),
            None,
        )
        .await
        .unwrap();
    assert_eq!(g["hosts"].as_array().map(Vec::len), Some(3), "{g}");
    // Engine-reported blocks are the engines': no usage, no block records, nothing for the
    // reclaimer's indexes (so no quota counts them and no eviction touches them).
    let mut c = valkey().await;
    for name in ["usage", "blocks", "lru", "lfu"] {
        let key = instance_key(&api.namespace, inst, name);
        let exists: i64 = redis::cmd("EXISTS").arg(&key).query_async(&mut c).await.unwrap();
        assert_eq!(exists, 0, "{key} exists");
    }
    assert_eq!(hash_len(api, inst, "engine").await, 4, "one field per reported block");
    // removeInstance drops what engines reported with the instance.
    assert_ok(&api.admin("removeInstance", json!({"instance_id": inst})).await);
    for name in ["engine", "engine_specs", "reporters"] {
        let exists: i64 =
            redis::cmd("EXISTS").arg(instance_key(&api.namespace, inst, name)).query_async(&mut c).await.unwrap();
        assert_eq!(exists, 0, "{name} after removeInstance");
    }
}

#[tokio::test]
async fn adds_merge_by_spec_deletes_are_idempotent_and_host_down_hides_at_once() {
    let fx = Fixture::new(&[("tp0", 64), ("tp1", 64)], 1, json!({})).await;
    let (api, inst) = (&fx.api, fx.instance.as_str());
    let l1 = "ST_EVENT_REPORT_L1P5";
    let r =
        report(api, inst, l1, "h:1", vec![register(&["gpu"]), add(1, "gpu", &[("tp0", &uri("h:1", 1))]), heartbeat()])
            .await;
    assert_eq!(code(&r), "OK", "{r}");
    let version = r["committed_snapshot_version"].clone();
    // A second spec merges in; deleting one spec keeps the block; deleting a missing one is OK.
    let r = report(
        api,
        inst,
        l1,
        "h:1",
        vec![add(1, "gpu", &[("tp1", &uri("h:1", 1))]), add(2, "gpu", &[("tp0", "x://y")])],
    )
    .await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_eq!(r["committed_snapshot_version"], version, "the generation holds until a snapshot: {r}");
    assert_eq!(r["snapshot_required"], json!(false), "{r}");
    assert_eq!(hosts(api, inst, &[1, 2], &[]).await, vec![("h:1".into(), 2, 0, 2)]);
    let r = report(api, inst, l1, "h:1", vec![delete(1, "gpu", &["tp0"]), delete(9, "gpu", &["tp0"])]).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_eq!(hosts(api, inst, &[1, 2], &[]).await, vec![("h:1".into(), 2, 0, 2)], "tp1 still holds block 1");
    let r = report(api, inst, l1, "h:1", vec![delete(1, "gpu", &["tp1"])]).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert!(hosts(api, inst, &[1, 2], &[]).await.is_empty(), "block 1 has no spec left");

    // HOST_DOWN: gone at once; its events then need a NODE_REGISTER, which starts over.
    let r = report(api, inst, l1, "h:1", vec![json!({"event_type": "EVENT_HOST_DOWN", "host_down": {}})]).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert!(hosts(api, inst, &[2], &[]).await.is_empty());
    let r = report(api, inst, l1, "h:1", vec![heartbeat(), add(3, "gpu", &[("tp0", "x://y")])]).await;
    assert_eq!(code(&r), "NODE_NOT_REGISTERED", "{r}");
    assert_eq!(r["item_results"], json!(["NODE_NOT_REGISTERED", "NODE_NOT_REGISTERED"]), "{r}");
    assert!(message(&r).contains("EVENT_NODE_REGISTER"), "{r}");
    let r = report(api, inst, l1, "h:1", vec![register(&[]), heartbeat()]).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_eq!(r["committed_snapshot_version"], json!(""), "a new lifecycle has no generation: {r}");
    assert!(hosts(api, inst, &[2], &[]).await.is_empty(), "nothing from before HOST_DOWN comes back");
    // Writing block 2 again drops the record of the old lifecycle, and its specs: one 13-byte
    // presence record is left, and one specs field in the whole instance.
    let r = report(api, inst, l1, "h:1", vec![add(2, "gpu", &[("tp0", "x://z")])]).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_eq!(presence(api, inst, 2).await.len(), 13);
    assert_eq!(hash_len(api, inst, "engine_specs").await, 1);
    assert_eq!(hosts(api, inst, &[2], &[]).await, vec![("h:1".into(), 1, 0, 1)]);
}

#[tokio::test]
async fn bad_items_fail_alone_and_bad_requests_change_nothing() {
    let fx = Fixture::new(&[("tp0", 64)], 1, json!({})).await;
    let (api, inst) = (&fx.api, fx.instance.as_str());
    let l2 = "ST_EVENT_REPORT_L2";
    // Item-level faults fail that item only; the header carries the first failure.
    let mismatched = json!({"event_type": "EVENT_BLOCK_ADD", "heartbeat": {}});
    let r = report(
        api,
        inst,
        l2,
        "h:2",
        vec![
            heartbeat(),
            mismatched,
            add(5, "gpu", &[("tp0", "no scheme")]),
            add(6, "gpu", &[("tp0", "x://y?s_version=abc")]),
            add(7, "gpu", &[]),
            json!({"event_type": "EVENT_BLOCK_ADD", "block_add": {"block_key": "seven", "medium": "gpu", "specs": [{"name": "tp0", "uri": "x://y"}]}}),
            // `%seq` counts the instance's medium ids: a medium of that name would take another's id.
            add(9, "seq", &[("tp0", "x://y")]),
            add(8, "gpu", &[("tp0", "x://y")]),
        ],
    )
    .await;
    assert_eq!(code(&r), "INVALID_ARGUMENT", "{r}");
    assert!(message(&r).starts_with("event 1: event_type EVENT_BLOCK_ADD does not match the payload heartbeat"), "{r}");
    assert_eq!(
        r["item_results"],
        json!([
            "OK",
            "INVALID_ARGUMENT",
            "INVALID_ARGUMENT",
            "INVALID_ARGUMENT",
            "INVALID_ARGUMENT",
            "INVALID_ARGUMENT",
            "INVALID_ARGUMENT",
            "OK"
        ]),
        "{r}"
    );
    assert_eq!(hosts(api, inst, &[8], &[]).await, vec![("h:2".into(), 1, 0, 1)]);
    let r = report(api, inst, l2, "h:2", vec![add(9, "seq", &[("tp0", "x://y")])]).await;
    assert!(message(&r).contains("medium 'seq' is reserved"), "{r}");
    assert!(hosts(api, inst, &[8], &["seq"]).await.is_empty(), "no medium is named seq");
    // Request-level faults refuse everything before anything is written.
    for (events, why) in [
        (vec![snapshot(&[(1, "gpu")]), snapshot(&[(2, "gpu")])], "at most one"),
        (vec![snapshot(&[(1, "gpu")]), add(9, "gpu", &[("tp0", "x://y")])], "cannot share"),
        (vec![json!({"event_type": "EVENT_HOST_DOWN", "host_down": {}}), heartbeat()], "alone"),
    ] {
        let r = report(api, inst, l2, "h:2", events).await;
        assert_eq!(code(&r), "INVALID_ARGUMENT", "{r}");
        assert!(message(&r).contains(why), "{r}");
    }
    for (tier, host, why) in [("ST_NFS", "h:2", "cannot report events"), (l2, "", "host_ip_port"), (l2, "a#b", "'#'")] {
        let r = report(api, inst, tier, host, vec![heartbeat()]).await;
        assert_eq!(code(&r), "INVALID_ARGUMENT", "{r}");
        assert!(message(&r).contains(why), "{r}");
    }
    assert_eq!(hosts(api, inst, &[8, 9], &[]).await, vec![("h:2".into(), 1, 0, 1)], "block 9 was never written");
    // Unknown instances and oversized requests.
    let r = report(api, "nobody", l2, "h:2", vec![heartbeat()]).await;
    assert_eq!(code(&r), "INSTANCE_NOT_EXIST", "{r}");
    let many: Vec<Value> = (0..20_000).map(|_| heartbeat()).collect();
    let r = report(api, inst, l2, "h:2", many).await;
    assert_eq!(code(&r), "INVALID_ARGUMENT", "{r}");
    assert!(message(&r).contains("max_keys_per_request"), "{r}");
}

#[tokio::test]
async fn snapshots_replace_the_set_are_rate_limited_and_survive_the_frontend() {
    let ns = unique("events");
    let api = Api::start_with(&ns, &[("KVCM_EVENT_REPORT_SNAPSHOT_MIN_INTERVAL_MS", "1500")]);
    let fx = Fixture::on(api, &[("tp0", 64)], 1, json!({})).await;
    let instance = fx.instance.clone();
    let (api, inst) = (&fx.api, instance.as_str());
    let l1 = "ST_EVENT_REPORT_L1P5";
    let r = report(
        api,
        inst,
        l1,
        "s:1",
        vec![heartbeat(), add(1, "gpu", &[("tp0", "x://1")]), add(2, "gpu", &[("tp0", "x://2")])],
    )
    .await;
    assert_eq!(code(&r), "OK", "{r}");
    let first = r["committed_snapshot_version"].as_str().unwrap().to_string();
    // The snapshot is the whole set: block 2 is left out, block 3 comes in, and the version
    // changes (a strict fence from now on).
    let r = report(api, inst, l1, "s:1", vec![snapshot(&[(1, "gpu"), (3, "gpu")])]).await;
    assert_eq!(code(&r), "OK", "{r}");
    let second = r["committed_snapshot_version"].as_str().unwrap().to_string();
    assert!(second.len() == 32 && second != first, "{r}");
    assert_eq!(hosts(api, inst, &[1], &[]).await, vec![("s:1".into(), 1, 0, 1)]);
    assert!(hosts(api, inst, &[2], &[]).await.is_empty(), "left out of the snapshot");
    assert_eq!(hosts(api, inst, &[3], &[]).await, vec![("s:1".into(), 1, 0, 1)]);
    // Too soon: refused with how long to wait; nothing changes.
    let r = report(api, inst, l1, "s:1", vec![snapshot(&[])]).await;
    assert_eq!(code(&r), "SNAPSHOT_RATE_LIMITED", "{r}");
    let wait: i64 = r["retry_after_ms"].as_str().unwrap().parse().unwrap();
    assert!((1..=1500).contains(&wait), "{r}");
    assert_eq!(r["committed_snapshot_version"], json!(second), "{r}");
    // The frontend goes away; another (a restart, a second replica behind the load balancer)
    // sees the same reporter: same version, the same blocks, nothing stale back.
    drop(fx);
    let other = Api::start_with(&ns, &[("KVCM_EVENT_REPORT_SNAPSHOT_MIN_INTERVAL_MS", "1500")]);
    let r = report(&other, inst, l1, "s:1", vec![add(4, "gpu", &[("tp0", "x://4")])]).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_eq!(r["committed_snapshot_version"], json!(second), "{r}");
    assert_eq!(hosts(&other, inst, &[1], &[]).await, vec![("s:1".into(), 1, 0, 1)]);
    assert!(hosts(&other, inst, &[2], &[]).await.is_empty());
    assert_eq!(
        hosts(&other, inst, &[4], &[]).await,
        vec![("s:1".into(), 1, 0, 1)],
        "an add after the snapshot is current"
    );
    // After the interval, an empty snapshot clears the reporter.
    tokio::time::sleep(std::time::Duration::from_millis(wait as u64 + 50)).await;
    let r = report(&other, inst, l1, "s:1", vec![snapshot(&[])]).await;
    assert_eq!(code(&r), "OK", "{r}");
    for k in [1, 3, 4] {
        assert!(hosts(&other, inst, &[k], &[]).await.is_empty(), "block {k} after an empty snapshot");
    }
}

#[tokio::test]
async fn a_silent_reporter_is_hidden_then_unregistered() {
    // The heartbeat that recovers must come within the grace after the first one: 3 s leaves a
    // loaded CI machine room between the two (they are ~1 s apart).
    let env = [("KVCM_EVENT_REPORT_HEARTBEAT_TIMEOUT_MS", "800"), ("KVCM_EVENT_REPORT_CLEANUP_GRACE_MS", "3000")];
    let fx = fixture_with(&env).await;
    let (api, inst) = (&fx.api, fx.instance.as_str());
    let l1 = "ST_EVENT_REPORT_L1P5";
    let r = report(api, inst, l1, "q:1", vec![heartbeat(), add(1, "gpu", &[("tp0", "x://1")])]).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_eq!(hosts(api, inst, &[1], &[]).await.len(), 1);
    // Past the heartbeat timeout: hidden. A heartbeat within the grace brings it back.
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    assert!(hosts(api, inst, &[1], &[]).await.is_empty(), "no heartbeat for 1 s");
    let r = report(api, inst, l1, "q:1", vec![heartbeat()]).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_eq!(hosts(api, inst, &[1], &[]).await.len(), 1, "a heartbeat within the grace recovers");
    // Past the grace: unregistered; a heartbeat is refused until it registers again, and
    // what it held before does not come back.
    tokio::time::sleep(std::time::Duration::from_millis(3200)).await;
    let r = report(api, inst, l1, "q:1", vec![heartbeat()]).await;
    assert_eq!(code(&r), "NODE_NOT_REGISTERED", "{r}");
    let r = report(api, inst, l1, "q:1", vec![register(&["gpu"]), heartbeat()]).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert!(hosts(api, inst, &[1], &[]).await.is_empty(), "blocks from the last lifecycle stay hidden");
}

#[tokio::test]
async fn the_worker_collects_entries_that_can_never_be_visible_again() {
    let fx = Fixture::new(&[("tp0", 64)], 1, json!({})).await;
    let (api, inst) = (&fx.api, fx.instance.as_str());
    let l1 = "ST_EVENT_REPORT_L1P5";
    let keys: Vec<i64> = (1..=50).collect();
    for host in ["a:1", "b:1"] {
        let mut events = vec![heartbeat()];
        events.extend(keys.iter().map(|&k| add(k, "gpu", &[("tp0", &uri(host, k))])));
        assert_eq!(code(&report(api, inst, l1, host, events).await), "OK");
    }
    // a goes down: hidden at once, its 50 entries still stored beside b's.
    let down = json!({"event_type": "EVENT_HOST_DOWN", "host_down": {}});
    assert_eq!(code(&report(api, inst, l1, "a:1", vec![down.clone()]).await), "OK");
    assert_eq!(hosts(api, inst, &keys, &[]).await, vec![("b:1".into(), 50, 0, 50)]);
    let engine = instance_key(&api.namespace, inst, "engine");
    let c = valkey().await;
    // Bytes stored for the 50 blocks.
    let bytes = |c: &redis::cluster_async::ClusterConnection| {
        let mut c = c.clone();
        let engine = engine.clone();
        async move {
            let mut total = 0;
            for k in 1..=50i64 {
                let len: i64 =
                    redis::cmd("HSTRLEN").arg(&engine).arg(&k.to_be_bytes()[..]).query_async(&mut c).await.unwrap();
                total += len;
            }
            total
        }
    };
    let both = bytes(&c).await;
    let worker = WorkerProc::start(&api.namespace, &[]);
    let collected = eventually(std::time::Duration::from_secs(20), || {
        let fut = bytes(&c);
        async move { (fut.await * 2 == both).then_some(()) }
    })
    .await;
    assert!(collected.is_some(), "a's entries were not collected ({both} bytes for both)");
    assert_eq!(hosts(api, inst, &keys, &[]).await, vec![("b:1".into(), 50, 0, 50)], "b's entries stay");
    // b goes down too: every block empties and its field goes.
    assert_eq!(code(&report(api, inst, l1, "b:1", vec![down]).await), "OK");
    let gone = eventually(std::time::Duration::from_secs(20), || {
        let mut c = c.clone();
        let engine = engine.clone();
        async move {
            let n: i64 = redis::cmd("HLEN").arg(&engine).query_async(&mut c).await.unwrap();
            (n == 0).then_some(())
        }
    })
    .await;
    assert!(gone.is_some(), "blocks without live entries stay");
    assert_eq!(hash_len(api, inst, "engine_specs").await, 0, "specs of collected entries stay");
    assert!(worker.metric("kvcm_worker_engine_entries_dropped_total").await >= 100.0);
}

#[tokio::test]
async fn data_events_create_reporters_and_a_snapshot_stays_a_fence() {
    let fx = Fixture::new(&[("tp0", 64), ("tp1", 64)], 1, json!({})).await;
    let (api, inst) = (&fx.api, fx.instance.as_str());
    let l1 = "ST_EVENT_REPORT_L1P5";
    // A reporter never seen may start with data: the add creates it (REGISTER is optional).
    let r =
        report(api, inst, l1, "n:1", vec![add(1, "gpu", &[("tp0", "x://1")]), register(&["gpu"]), heartbeat()]).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_eq!(r["snapshot_required"], json!(true), "{r}");
    assert_eq!(hosts(api, inst, &[1], &[]).await, vec![("n:1".into(), 1, 0, 1)]);
    // A REGISTER that creates a reporter also says a snapshot is wanted.
    let r = report(api, inst, l1, "m:1", vec![register(&["gpu"])]).await;
    assert_eq!(r["snapshot_required"], json!(true), "{r}");

    // The snapshot leaves block 1 out: an add of another spec afterwards does not bring back
    // what the snapshot dropped (tp0), and deleting that spec leaves nothing.
    let r = report(api, inst, l1, "n:1", vec![snapshot(&[(2, "gpu")])]).await;
    assert_eq!(code(&r), "OK", "{r}");
    let version = r["committed_snapshot_version"].clone();
    assert!(hosts(api, inst, &[1], &[]).await.is_empty());
    let r = report(api, inst, l1, "n:1", vec![add(1, "gpu", &[("tp1", "x://1b")])]).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_eq!(hosts(api, inst, &[1], &[]).await, vec![("n:1".into(), 1, 0, 1)]);
    let r = report(api, inst, l1, "n:1", vec![delete(1, "gpu", &["tp1"])]).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert!(hosts(api, inst, &[1], &[]).await.is_empty(), "tp0 from before the snapshot came back");

    // Delete then add of the same spec in one request: last wins, stored once.
    let r = report(
        api,
        inst,
        l1,
        "n:1",
        vec![add(3, "gpu", &[("tp0", "x://3")]), delete(3, "gpu", &["tp0"]), add(3, "gpu", &[("tp0", "x://3c")])],
    )
    .await;
    assert_eq!(code(&r), "OK", "{r}");
    let specs = only_specs(api, inst, 3).await;
    assert_eq!(specs, [&[1u8, 3][..], b"tp0", &[6, 0], b"x://3c"].concat(), "one spec, the last URI");

    // Keys: uint64 text is the same 64 bits as its int64; signs and spaces are refused. Spec
    // names must be the instance's; media have no '#'; delete names are unique.
    let r = report(api, inst, l1, "n:1", vec![json!({"event_type": "EVENT_BLOCK_ADD", "block_add": {"block_key": "18446744073709551615", "medium": "gpu", "specs": [{"name": "tp0", "uri": "x://m1"}]}})]).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_eq!(hosts(api, inst, &[-1], &[]).await, vec![("n:1".into(), 1, 0, 1)], "u64::MAX is -1");
    for (event, why) in [
        (
            json!({"event_type": "EVENT_BLOCK_ADD", "block_add": {"block_key": "+5", "medium": "gpu", "specs": [{"name": "tp0", "uri": "x://5"}]}}),
            "block_key",
        ),
        (
            json!({"event_type": "EVENT_BLOCK_ADD", "block_add": {"block_key": " 5", "medium": "gpu", "specs": [{"name": "tp0", "uri": "x://5"}]}}),
            "block_key",
        ),
        (add(5, "gpu", &[("tp9", "x://5")]), "location_spec_infos"),
        (add(5, "g#pu", &[("tp0", "x://5")]), "'#'"),
        (delete(5, "gpu", &["tp0", "tp0"]), "twice"),
    ] {
        let r = report(api, inst, l1, "n:1", vec![event]).await;
        assert_eq!(code(&r), "INVALID_ARGUMENT", "{r}");
        assert!(message(&r).contains(why), "{r}");
        assert_eq!(r["committed_snapshot_version"], version, "an all-invalid request still tells the version: {r}");
    }
    // No events at all: nothing to check, every field at its default.
    let (_, r) = api.meta("reportEvent", json!({"instance_id": inst, "events": []})).await;
    assert_eq!(code(&r), "OK", "{r}");
}

#[tokio::test]
async fn a_peer_fills_only_the_gaps_and_report_event_works_over_grpc() {
    let fx = Fixture::new(&[("tp0", 64)], 1, json!({})).await;
    let (api, inst) = (&fx.api, fx.instance.as_str());
    let (l1, l2) = ("ST_EVENT_REPORT_L1P5", "ST_EVENT_REPORT_L2");
    // h holds blocks 0 and 2 itself; its peer p holds 0, 1 in L2 and q holds 0..=3 in L1P5 only
    // (a tier peers cannot fetch from). With p, h reaches block 3 fetching one block (1); block 2
    // is its own.
    for (host, tier, held) in [("h:1", l1, vec![0, 2]), ("p:1", l2, vec![0, 1]), ("q:1", l1, vec![0, 1, 2, 3])] {
        let mut events = vec![heartbeat()];
        events.extend(held.iter().map(|&k| add(k, "gpu", &[("tp0", "x://y")])));
        assert_eq!(code(&report(api, inst, tier, host, events).await), "OK");
    }
    let keys = [0, 1, 2, 3, 4];
    assert_eq!(
        hosts(api, inst, &keys, &[]).await,
        vec![("h:1".into(), 1, 1, 3), ("p:1".into(), 2, 0, 2), ("q:1".into(), 4, 0, 4)]
    );
    // A repeated key is fetched once.
    assert_eq!(hosts(api, inst, &[0, 1, 1, 2], &[]).await[0], ("h:1".into(), 1, 1, 4));

    // reportEvent over gRPC: the same per-item results, the first failure in the header.
    let r = api
        .grpc_meta(
            "ReportEvent",
            json!({"instance_id": inst, "host_ip_port": "g:1", "storage_type": l1,
                "events": [heartbeat(), add(7, "gpu", &[("nope", "x://y")]), add(8, "gpu", &[("tp0", "x://y")])]}),
            None,
        )
        .await
        .unwrap();
    assert_eq!(code(&r), "INVALID_ARGUMENT", "{r}");
    assert_eq!(r["item_results"], json!(["OK", "INVALID_ARGUMENT", "OK"]), "{r}");
    assert_eq!(hosts(api, inst, &[8], &[]).await, vec![("g:1".into(), 1, 0, 1)]);

    // Quotas are for storage types, not for engines' tiers.
    let group = json!({"instance_group": {"name": "g", "storage_candidates": ["files"], "version": 2,
        "quota": {"capacity": 0, "quota_config": [{"storage_type": "ST_EVENT_REPORT_L1P5", "capacity": 1}]}}});
    assert_err(&api.admin("updateInstanceGroup", group).await, "INVALID_ARGUMENT", "quotas apply to storage types");
}

#[tokio::test]
async fn reporters_gone_for_a_grace_are_forgotten_and_come_back_as_new_ones() {
    // "stays" heartbeats every 200 ms: a 2 s grace leaves a loaded machine room.
    let env = [("KVCM_EVENT_REPORT_HEARTBEAT_TIMEOUT_MS", "400"), ("KVCM_EVENT_REPORT_CLEANUP_GRACE_MS", "2000")];
    let fx = fixture_with(&env).await;
    let (api, inst) = (&fx.api, fx.instance.as_str());
    let l1 = "ST_EVENT_REPORT_L1P5";
    for host in ["gone:1", "stays:1"] {
        let r = report(api, inst, l1, host, vec![heartbeat(), add(1, "gpu", &[("tp0", "x://1")])]).await;
        assert_eq!(code(&r), "OK", "{r}");
    }
    let down = json!({"event_type": "EVENT_HOST_DOWN", "host_down": {}});
    assert_eq!(code(&report(api, inst, l1, "gone:1", vec![down]).await), "OK");
    let reporters = instance_key(&api.namespace, inst, "reporters");
    let c = valkey().await;
    let has = |id: &'static str| {
        let mut c = c.clone();
        let reporters = reporters.clone();
        async move { redis::cmd("HEXISTS").arg(&reporters).arg(id).query_async::<i64>(&mut c).await.unwrap() == 1 }
    };
    // Within the grace the tombstone holds: a heartbeat is refused.
    assert_eq!(code(&report(api, inst, l1, "gone:1", vec![heartbeat()]).await), "NODE_NOT_REGISTERED");
    let worker = WorkerProc::start(&fx.api.namespace, &env);
    let stays = async {
        loop {
            assert_eq!(code(&report(api, inst, l1, "stays:1", vec![heartbeat()]).await), "OK");
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    };
    let forgotten = async {
        eventually(std::time::Duration::from_secs(20), || async { (!has("L1P5|gone:1").await).then_some(()) }).await
    };
    let forgotten = tokio::select! { f = forgotten => f, _ = stays => unreachable!() };
    assert!(forgotten.is_some(), "a reporter down for over a grace was kept");
    assert!(has("L1P5|stays:1").await, "a live reporter was forgotten");
    assert!(worker.metric("kvcm_worker_engine_reporters_forgotten_total").await >= 1.0);
    // The host comes back: a new reporter (created by its heartbeat), with nothing from before.
    let r = report(api, inst, l1, "gone:1", vec![heartbeat()]).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_eq!(r["snapshot_required"], json!(true), "{r}");
    assert_eq!(hosts(api, inst, &[1], &[]).await, vec![("stays:1".into(), 1, 0, 1)]);
}

#[tokio::test]
async fn large_batches_of_new_blocks_are_stored_as_prepared_and_others_merged() {
    let fx = Fixture::new(&[("tp0", 64), ("tp1", 64)], 1, json!({})).await;
    let (api, inst) = (&fx.api, fx.instance.as_str());
    let l1 = "ST_EVENT_REPORT_L1P5";
    let batch = |host: &str, keys: std::ops::Range<i64>, spec: &str| {
        let mut events = vec![heartbeat()];
        events.extend(keys.map(|k| add(k, "gpu", &[(spec, &uri(host, k))])));
        events
    };
    // A reporter with a generation sends 100 new blocks, one of them invalid: prepared by the
    // frontend, stored as sent; the invalid one alone fails.
    assert_eq!(code(&report(api, inst, l1, "a:1", vec![heartbeat(), add(1, "gpu", &[("tp0", "x://1")])]).await), "OK");
    let mut events = batch("a:1", 1000..1100, "tp0");
    events[50] = add(1049, "gpu", &[("tp9", "x://bad")]);
    let r = report(api, inst, l1, "a:1", events).await;
    assert_eq!(code(&r), "INVALID_ARGUMENT", "{r}");
    let results = r["item_results"].as_array().unwrap();
    assert_eq!(results.len(), 101);
    assert!(results.iter().enumerate().all(|(i, c)| c == if i == 50 { "INVALID_ARGUMENT" } else { "OK" }), "{r}");
    let keys: Vec<i64> = (1000..1100).collect();
    assert_eq!(hosts(api, inst, &keys, &[]).await, vec![("a:1".into(), 49, 0, 49)], "block 1049 was refused");
    let prepared = api.metric("kvcm_engine_blocks_prepared_total").await;
    assert_eq!(prepared, 99.0, "the batch of new blocks took the prepared path");
    // Another host holds half of a batch already: those get b's record appended, the rest are
    // new; neither takes the single-add path.
    assert_eq!(code(&report(api, inst, l1, "b:1", vec![heartbeat(), add(1, "gpu", &[("tp0", "x://1")])]).await), "OK");
    assert_eq!(code(&report(api, inst, l1, "b:1", batch("b:1", 1050..1150, "tp0")).await), "OK");
    let keys: Vec<i64> = (1050..1100).collect();
    assert_eq!(hosts(api, inst, &keys, &[]).await, vec![("a:1".into(), 50, 0, 50), ("b:1".into(), 50, 0, 50)]);
    assert_eq!(
        api.metric("kvcm_engine_blocks_prepared_total").await,
        199.0,
        "the new half of the batch stored as prepared, the held half appended to"
    );
    // The same batch again (a re-add, same specs): nothing to change, every block by the
    // batch's path (the 50 a holds too included).
    let (before, shared) = (presence(api, inst, 1149).await, presence(api, inst, 1060).await);
    assert_eq!(code(&report(api, inst, l1, "b:1", batch("b:1", 1050..1150, "tp0")).await), "OK");
    assert_eq!(api.metric("kvcm_engine_blocks_prepared_total").await, 299.0, "its 100 blocks are unchanged");
    assert_eq!(presence(api, inst, 1149).await, before);
    assert_eq!(presence(api, inst, 1060).await, shared);
    // The same blocks again with another spec: merged by spec name, not replaced (a shared
    // block too).
    assert_eq!(code(&report(api, inst, l1, "b:1", batch("b:1", 1050..1150, "tp1")).await), "OK");
    let specs = only_specs(api, inst, 1149).await;
    assert_eq!(specs[0], 2, "tp0 and tp1: {specs:?}");
    let b_specs = stored_specs(api, inst, 1060, &before).await.expect("b's specs of block 1060");
    assert_eq!(b_specs[0], 2, "tp0 and tp1 on a shared block: {b_specs:?}");
    // One block in two media in a batch: two records, both kept (never one HSET field twice).
    let mut events = batch("c:1", 2000..2070, "tp0");
    events.push(add(2000, "cpu", &[("tp0", "x://c")]));
    assert_eq!(code(&report(api, inst, l1, "c:1", vec![heartbeat(), add(1, "gpu", &[("tp0", "x://1")])]).await), "OK");
    assert_eq!(code(&report(api, inst, l1, "c:1", events).await), "OK");
    assert_eq!(hosts(api, inst, &[2000], &["cpu"]).await, vec![("c:1".into(), 1, 0, 1)]);
    assert_eq!(hosts(api, inst, &[2000], &["gpu"]).await, vec![("c:1".into(), 1, 0, 1)]);
    // A batch of three chunks whose blocks alternate between two media: each block is stored
    // under its own medium (the batch carries one medium id per block).
    assert_eq!(code(&report(api, inst, l1, "d:1", vec![heartbeat(), add(1, "cpu", &[("tp0", "x://1")])]).await), "OK");
    let before = api.metric("kvcm_engine_blocks_prepared_total").await;
    let medium = |k: i64| if k % 2 == 0 { "gpu" } else { "cpu" };
    let mut events = vec![heartbeat()];
    events.extend((3000..4100).map(|k| add(k, medium(k), &[("tp0", &uri("d:1", k))])));
    assert_eq!(code(&report(api, inst, l1, "d:1", events).await), "OK");
    assert_eq!(api.metric("kvcm_engine_blocks_prepared_total").await - before, 1100.0, "stored as prepared");
    let sampled = [3000, 3001, 3498, 3499, 3500, 3501, 3999, 4000, 4099];
    for k in sampled {
        let other = if medium(k) == "gpu" { "cpu" } else { "gpu" };
        assert_eq!(hosts(api, inst, &[k], &[medium(k)]).await, vec![("d:1".into(), 1, 0, 1)], "block {k}");
        assert!(hosts(api, inst, &[k], &[other]).await.is_empty(), "block {k} is not in {other}");
        // Its specs, under the field its presence record names.
        assert_eq!(only_specs(api, inst, k).await, tp0_specs(&uri("d:1", k)), "specs of block {k}");
    }
    // The same batch again: every chunk held, by this reporter alone with the same specs —
    // nothing changes. Then with another spec: merged, chunk by chunk, medium by medium.
    let resend = |spec: &'static str| {
        let mut events = vec![heartbeat()];
        events.extend((3000..4100).map(|k| add(k, medium(k), &[(spec, &uri("d:1", k))])));
        events
    };
    let stored: Vec<Vec<u8>> = futures::future::join_all(sampled.map(|k| presence(api, inst, k))).await;
    assert_eq!(code(&report(api, inst, l1, "d:1", resend("tp0")).await), "OK");
    assert_eq!(api.metric("kvcm_engine_blocks_prepared_total").await - before, 2200.0, "a re-add changes nothing");
    assert_eq!(futures::future::join_all(sampled.map(|k| presence(api, inst, k))).await, stored);
    assert_eq!(code(&report(api, inst, l1, "d:1", resend("tp1")).await), "OK");
    for k in sampled {
        assert_eq!(only_specs(api, inst, k).await[0], 2, "block {k} holds tp0 and tp1");
    }
    // A batch adding, in gpu, a block this reporter holds in cpu: both records kept.
    let mut events = vec![heartbeat(), add(3001, "gpu", &[("tp0", "x://g")])];
    events.extend((5000..5070).map(|k| add(k, "gpu", &[("tp0", &uri("d:1", k))])));
    assert_eq!(code(&report(api, inst, l1, "d:1", events).await), "OK");
    assert_eq!(hosts(api, inst, &[3001], &["cpu"]).await, vec![("d:1".into(), 1, 0, 1)]);
    assert_eq!(hosts(api, inst, &[3001], &["gpu"]).await, vec![("d:1".into(), 1, 0, 1)]);
}

/// A prepared batch of blocks other reporters hold ends exactly as the single-add path would
/// leave it: each block keeps the records of its holders that can still be visible, in order,
/// with this reporter's appended (one per medium); the records of a host gone (HOST_DOWN) are
/// dropped with their specs, a live holder's specs stay. So does a reporter back after
/// HOST_DOWN whose old records still sit in the blocks, and a re-add over a gone holder's
/// record, which drops it.
#[tokio::test]
async fn a_batch_of_blocks_other_hosts_hold_keeps_their_live_records_and_drops_the_gone() {
    let fx = Fixture::new(&[("tp0", 64)], 1, json!({})).await;
    let (api, inst) = (&fx.api, fx.instance.as_str());
    let l1 = "ST_EVENT_REPORT_L1P5";
    let medium = |host: &str, k: i64| if host == "c:1" && k % 2 == 1 { "cpu" } else { "gpu" };
    let batch = |host: &'static str| {
        let mut events = vec![heartbeat()];
        events.extend((100..1400).map(|k| add(k, medium(host, k), &[("tp0", &uri(host, k))])));
        events
    };
    let blob = |host: &str, k: i64| tp0_specs(&uri(host, k));
    // Each reporter's own records, from blocks it alone holds: a, b in gpu (blocks 1, 2), c in
    // gpu and cpu (3, 4).
    let hello = [("a:1", vec![(1, "gpu")]), ("b:1", vec![(2, "gpu")]), ("c:1", vec![(3, "gpu"), (4, "cpu")])];
    for (host, blocks) in &hello {
        let mut events = vec![heartbeat()];
        events.extend(blocks.iter().map(|(k, m)| add(*k, m, &[("tp0", "x://1")])));
        assert_eq!(code(&report(api, inst, l1, host, events).await), "OK");
    }
    let (a, b) = (presence(api, inst, 1).await, presence(api, inst, 2).await);
    let (c_gpu, c_cpu) = (presence(api, inst, 3).await, presence(api, inst, 4).await);
    let prepared = || api.metric("kvcm_engine_blocks_prepared_total");
    // a holds 100..1400 (three chunks of a batch; new blocks: stored as prepared), then b
    // (held by a: this reporter's record appended), then b goes down.
    let before = prepared().await;
    assert_eq!(code(&report(api, inst, l1, "a:1", batch("a:1")).await), "OK");
    assert_eq!(prepared().await - before, 1300.0);
    assert_eq!(code(&report(api, inst, l1, "b:1", batch("b:1")).await), "OK");
    assert_eq!(prepared().await - before, 2600.0, "b's records appended by the batch, not one by one");
    assert_eq!(presence(api, inst, 900).await, [&a[..], &b[..]].concat());
    let down = || json!({"event_type": "EVENT_HOST_DOWN", "host_down": {}});
    assert_eq!(code(&report(api, inst, l1, "b:1", vec![down()]).await), "OK");
    // c reports the same blocks, alternating media: a's record and specs kept, b's dropped with
    // its specs, c's appended in the block's medium.
    assert_eq!(code(&report(api, inst, l1, "c:1", batch("c:1")).await), "OK");
    assert_eq!(prepared().await - before, 3900.0, "c's records appended by the batch, not one by one");
    let specs = |k: i64, record: &[u8]| {
        let record = record.to_vec();
        async move { stored_specs(api, inst, k, &record).await }
    };
    let samples = [100, 101, 598, 599, 600, 601, 1398, 1399];
    for k in samples {
        let c = if medium("c:1", k) == "cpu" { &c_cpu } else { &c_gpu };
        assert_eq!(presence(api, inst, k).await, [&a[..], &c[..]].concat(), "block {k}");
        assert_eq!(specs(k, &a).await, Some(blob("a:1", k)), "a's specs of block {k} stay");
        assert_eq!(specs(k, &b).await, None, "b's specs of block {k} are dropped");
        assert_eq!(specs(k, c).await, Some(blob("c:1", k)), "c's specs of block {k}");
    }
    let keys: Vec<i64> = (100..1400).collect();
    assert_eq!(hosts(api, inst, &keys, &[]).await, vec![("a:1".into(), 1300, 0, 1300), ("c:1".into(), 1300, 0, 1300)]);
    // c and then a hold 2000..2100: c's record first.
    for host in ["c:1", "a:1"] {
        let mut events = vec![heartbeat()];
        events.extend((2000..2100).map(|k| add(k, "gpu", &[("tp0", &uri(host, k))])));
        assert_eq!(code(&report(api, inst, l1, host, events).await), "OK");
    }
    assert_eq!(presence(api, inst, 2050).await, [&c_gpu[..], &a[..]].concat());
    // c goes down and comes back (a new lifecycle), its old records still in the blocks: the
    // batch, in gpu only, leaves a's record and c's new one — where c's old gpu record was —
    // and drops the specs of c's old cpu records.
    assert_eq!(code(&report(api, inst, l1, "c:1", vec![down()]).await), "OK");
    let r = report(api, inst, l1, "c:1", vec![register(&[]), add(3, "gpu", &[("tp0", "x://1")])]).await;
    assert_eq!(code(&r), "OK", "{r}");
    let c_gpu2 = presence(api, inst, 3).await;
    assert_ne!(c_gpu2, c_gpu, "a new lifecycle");
    let mut events = vec![heartbeat()];
    events.extend((100..1400).chain(2000..2100).map(|k| add(k, "gpu", &[("tp0", &uri("c:1", k))])));
    let before = prepared().await;
    assert_eq!(code(&report(api, inst, l1, "c:1", events).await), "OK");
    assert_eq!(prepared().await - before, 1400.0, "over its old records, by the batch");
    for k in [2000, 2050, 2099] {
        assert_eq!(presence(api, inst, k).await, [&c_gpu2[..], &a[..]].concat(), "block {k}: in place");
        assert_eq!(specs(k, &c_gpu2).await, Some(blob("c:1", k)), "c's specs of block {k}");
    }
    for k in samples {
        assert_eq!(presence(api, inst, k).await, [&a[..], &c_gpu2[..]].concat(), "block {k}");
        assert_eq!(specs(k, &c_gpu2).await, Some(blob("c:1", k)), "c's specs of block {k}");
        assert_eq!(specs(k, &a).await, Some(blob("a:1", k)), "a's specs of block {k} stay");
        if medium("c:1", k) == "cpu" {
            assert_eq!(specs(k, &c_cpu).await, None, "c's old cpu specs of block {k} are dropped");
        }
    }
    // A snapshot commits a generation without 2000..2100 (strict from then on): c's records of
    // them are of an older generation, and the same batch again puts the new ones in place.
    let r = report(api, inst, l1, "c:1", vec![snapshot(&[(3, "gpu")])]).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_eq!(hosts(api, inst, &[2000], &[]).await, vec![("a:1".into(), 1, 0, 1)], "c's old generation is hidden");
    let c_gpu3 = presence(api, inst, 3).await;
    assert_ne!(c_gpu3, c_gpu2, "a new generation");
    let mut events = vec![heartbeat()];
    events.extend((2000..2100).map(|k| add(k, "gpu", &[("tp0", &uri("c:1", k))])));
    let before = prepared().await;
    assert_eq!(code(&report(api, inst, l1, "c:1", events).await), "OK");
    assert_eq!(prepared().await - before, 100.0, "over its older generation, by the batch");
    for k in [2000, 2099] {
        assert_eq!(presence(api, inst, k).await, [&c_gpu3[..], &a[..]].concat(), "block {k}: in place");
        assert_eq!(specs(k, &c_gpu3).await, Some(blob("c:1", k)), "c's specs of block {k}");
    }
    // d, e and c hold 5000..5100; e goes down; c's re-add of the same specs keeps its record
    // and specs, keeps d's, and drops e's with its specs.
    for host in ["d:1", "e:1"] {
        assert_eq!(
            code(&report(api, inst, l1, host, vec![heartbeat(), add(7, "gpu", &[("tp0", "x://1")])]).await),
            "OK"
        );
    }
    let re_add = |host: &str| {
        let mut events = vec![heartbeat()];
        events.extend((5000..5100).map(|k| add(k, "gpu", &[("tp0", &uri(host, k))])));
        events
    };
    for host in ["d:1", "e:1", "c:1"] {
        assert_eq!(code(&report(api, inst, l1, host, re_add(host)).await), "OK");
    }
    let held = presence(api, inst, 5050).await;
    assert_eq!(held.len(), 39);
    let (d, e) = (&held[..13], &held[13..26]);
    assert_eq!(&held[26..], &c_gpu3[..]);
    assert_eq!(code(&report(api, inst, l1, "e:1", vec![down()]).await), "OK");
    let before = prepared().await;
    assert_eq!(code(&report(api, inst, l1, "c:1", re_add("c:1")).await), "OK");
    assert_eq!(prepared().await - before, 100.0, "a re-add over others, by the batch");
    for k in [5000, 5099] {
        assert_eq!(presence(api, inst, k).await, [d, &c_gpu3[..]].concat(), "block {k}");
        assert_eq!(specs(k, e).await, None, "e's specs of block {k} are dropped");
        assert_eq!(specs(k, d).await, Some(blob("d:1", k)), "d's specs of block {k} stay");
        assert_eq!(specs(k, &c_gpu3).await, Some(blob("c:1", k)), "c's specs of block {k} stay");
    }
}

/// reportEvent's body is decoded borrowing its strings where JSON allows: strings with escapes,
/// a null list, a batch large enough to be prepared, and bodies of the wrong types still
/// answer as every other RPC's do.
#[tokio::test]
async fn report_bodies_with_escapes_nulls_and_wrong_types_decode_as_any_message() {
    let fx = Fixture::new(&[("tp0", 64)], 1, json!({})).await;
    let (api, inst) = (&fx.api, fx.instance.as_str());
    let post = |body: String| async move { api.post(&api.meta, "reportEvent", body, None).await };
    // Escapes in the host, the medium, the key and the URI of a single add and of a prepared
    // batch of 70: stored as their unescaped text.
    let add = |k: i64| {
        format!(
            r#"{{"event_type": "EVENT_BLOCK_ADD", "block_add": {{"block_key": "{k}\u0030", "medium": "g\u0070u",
               "uri": "", "specs": [{{"name": "tp\u0030", "uri": "x:\/\/e\"{k}"}}]}}}}"#
        )
    };
    let body = |keys: std::ops::Range<i64>| {
        let events: Vec<String> =
            std::iter::once(r#"{"event_type": "EVENT_HEARTBEAT", "heartbeat": {"system_status": null}}"#.to_string())
                .chain(keys.map(add))
                .collect();
        format!(
            r#"{{"instance_id": "{inst}", "host_ip_port": "h\u003a1", "storage_type": "ST_EVENT_REPORT_L1P5",
               "trace_id": "t\u0031", "events": [{}]}}"#,
            events.join(",")
        )
    };
    let (http, r) = post(body(1..2)).await;
    assert_eq!((http, code(&r)), (200, "OK"), "{r}");
    let before = api.metric("kvcm_engine_blocks_prepared_total").await;
    let (http, r) = post(body(100..170)).await;
    assert_eq!((http, code(&r)), (200, "OK"), "{r}");
    assert_eq!(api.metric("kvcm_engine_blocks_prepared_total").await - before, 70.0, "the batch was prepared");
    // Null lists: no events (OK, nothing to do), an add without specs (that item fails alone).
    let (http, r) = post(format!(r#"{{"instance_id": "{inst}", "host_ip_port": "h:1", "events": null}}"#)).await;
    assert_eq!((http, code(&r)), (200, "OK"), "{r}");
    let (http, r) = post(format!(
        r#"{{"instance_id": "{inst}", "host_ip_port": "h:1", "storage_type": "ST_EVENT_REPORT_L1P5", "events": [
            {{"event_type": "EVENT_BLOCK_ADD", "block_add": {{"block_key": "9", "medium": "gpu", "specs": null}}}}]}}"#
    ))
    .await;
    assert_eq!((http, code(&r)), (200, "INVALID_ARGUMENT"), "{r}");
    assert!(message(&r).contains("specs is empty"), "{r}");
    for k in [10, 1000, 1690] {
        assert_eq!(hosts(api, inst, &[k], &["gpu"]).await, vec![("h:1".into(), 1, 0, 1)], "block {k}");
        assert_eq!(only_specs(api, inst, k).await, tp0_specs(&format!("x://e\"{}", k / 10)), "block {k}");
    }
    // Wrong types: HTTP 400 and INVALID_ARGUMENT, as WireJson answers; nothing stored.
    for bad in [
        format!(
            r#"{{"instance_id": "{inst}", "host_ip_port": "h:1", "events": [{{"event_type": 2, "block_add": {{"block_key": 5}}}}]}}"#
        ),
        format!(r#"{{"instance_id": "{inst}", "host_ip_port": "h:1", "events": {{}}}}"#),
        r#"{"instance_id": 7, "host_ip_port": "h:1"}"#.to_string(),
        format!(
            r#"{{"instance_id": "{inst}", "events": [{{"event_type": "EVENT_BLOCK_ADD", "block_add": {{"uri": 3}}}}]}}"#
        ),
        "[]".to_string(),
        format!(r#"{{"instance_id": "{inst}", "events": [{{"event_type": "EVENT_BLOCK_ADD", "block_add": "x"}}]}}"#),
        format!(
            r#"{{"instance_id": "{inst}", "events": [{{"event_type": "EVENT_BLOCK_ADD", "block_add": {{"specs": ["x"]}}}}]}}"#
        ),
        format!(r#"{{"instance_id": "{inst}", "events": [null]}}"#),
    ] {
        let (http, r) = post(bad.clone()).await;
        assert_eq!((http, code(&r)), (400, "INVALID_ARGUMENT"), "{bad}: {r}");
        assert!(message(&r).contains("not valid JSON for this RPC"), "{bad}: {r}");
        // Named as the message's own types (the OpenAPI description's), whatever decodes it.
        for internal in ["Ref", "ReportEventBody"] {
            assert!(!message(&r).contains(internal), "{bad}: {r}");
        }
    }
    assert_eq!(hash_len(api, inst, "engine").await, 71);
}

/// getCacheLocation sees engine-held blocks too (Tair's visibility): a block no storage holds
/// and a live engine does reads as that engine's location (`ST_EVENT_REPORT_*`, its specs, its
/// URIs with `s_version`), an L2 holder first; kvcm's own locations come first where both exist;
/// a host gone takes its blocks out of answers at once; getCacheLocationLen counts the same.
#[tokio::test]
async fn get_cache_location_answers_live_engine_held_blocks_by_tairs_visibility_rules() {
    let fx = Fixture::new(&[("tp0", 64)], 1, json!({})).await;
    let (api, inst) = (&fx.api, fx.instance.as_str());
    fx.write(&[1, 2]).await;
    for (tier, host, held) in [("ST_EVENT_REPORT_L1P5", "A:1", vec![2, 3, 4]), ("ST_EVENT_REPORT_L2", "B:1", vec![4])] {
        let mut events = vec![heartbeat()];
        events.extend(held.iter().map(|&k| add(k, "gpu", &[("tp0", &uri(host, k))])));
        let r = report(api, inst, tier, host, events).await;
        assert_eq!(code(&r), "OK", "{r}");
    }
    // Read through the frontend that took the reports: it knows the instance has reporters at
    // once (others look at most once a second).
    let read = |query: &'static str, keys: Vec<i64>| async move {
        let (_, r) =
            api.meta("getCacheLocation", json!({"instance_id": inst, "query_type": query, "block_keys": keys})).await;
        assert_eq!(code(&r), "OK", "{r}");
        r["locations"].as_array().unwrap().clone()
    };
    let locs = read("QT_PREFIX_MATCH", vec![1, 2, 3, 4, 5]).await;
    let types: Vec<&str> = locs.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["ST_NFS", "ST_NFS", "ST_EVENT_REPORT_L1P5", "ST_EVENT_REPORT_L2"], "{locs:?}");
    let uri3 = locs[2]["location_specs"][0]["uri"].as_str().unwrap();
    assert!(uri3.starts_with(&uri("A:1", 3)) && uri3.contains("s_version="), "{uri3}");
    assert!(locs[3]["location_specs"][0]["uri"].as_str().unwrap().starts_with(&uri("B:1", 4)), "an L2 holder first");
    let batch = read("QT_BATCH_GET", vec![5, 3]).await;
    assert_eq!(batch[0]["type"], "ST_UNSPECIFIED", "a miss is a placeholder: {batch:?}");
    assert_eq!(batch[1]["type"], "ST_EVENT_REPORT_L1P5");
    let (_, len) = api
        .meta(
            "getCacheLocationLen",
            json!({"instance_id": inst, "query_type": "QT_PREFIX_MATCH", "block_keys": [1, 2, 3, 4, 5]}),
        )
        .await;
    assert_eq!(len["cache_location_len"], "4", "{len}");

    // A host gone: its blocks leave the answers at once; the other's stay.
    let r = report(
        api,
        inst,
        "ST_EVENT_REPORT_L1P5",
        "A:1",
        vec![json!({"event_type": "EVENT_HOST_DOWN", "host_down": {}})],
    )
    .await;
    assert_eq!(code(&r), "OK", "{r}");
    let locs = read("QT_PREFIX_MATCH", vec![1, 2, 3, 4]).await;
    assert_eq!(locs.len(), 2, "the prefix stops where nobody holds block 3 any more: {locs:?}");
    let batch = read("QT_BATCH_GET", vec![3, 4]).await;
    assert_eq!(
        (batch[0]["type"].as_str(), batch[1]["type"].as_str()),
        (Some("ST_UNSPECIFIED"), Some("ST_EVENT_REPORT_L2"))
    );
}

/// GetCacheLocationsByBackend: per block, one location per backend holding it — the storage's
/// and each engine tier's, a holder picked by the selector's strategy — only the selected
/// backends when selectors are given; a prefix ends where no selected backend holds the block.
#[tokio::test]
async fn get_cache_locations_by_backend_answers_one_location_per_backend_and_picks_holders_by_strategy() {
    let fx = Fixture::new(&[("tp0", 64)], 1, json!({})).await;
    let (api, inst) = (&fx.api, fx.instance.as_str());
    fx.write(&[1]).await;
    // L2 holders: P holds 1, 2 (a run of two from block 1); Q holds 1, 3, 4 (more blocks, a
    // run of one from block 1). L1P5: A holds 1, 2.
    for (tier, host, held) in [
        ("ST_EVENT_REPORT_L2", "P:1", vec![1, 2]),
        ("ST_EVENT_REPORT_L2", "Q:1", vec![1, 3, 4]),
        ("ST_EVENT_REPORT_L1P5", "A:1", vec![1, 2]),
    ] {
        let mut events = vec![heartbeat()];
        events.extend(held.iter().map(|&k| add(k, "gpu", &[("tp0", &uri(host, k))])));
        assert_eq!(code(&report(api, inst, tier, host, events).await), "OK");
    }
    let by = |query: &'static str, keys: Vec<i64>, selectors: Value| async move {
        let body =
            json!({"instance_id": inst, "query_type": query, "block_keys": keys, "backend_selectors": selectors});
        let (_, r) = api.meta("getCacheLocationsByBackend", body).await;
        assert_eq!(code(&r), "OK", "{r}");
        r["key_locations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                v["locations"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|l| {
                        let uri = l["location_specs"][0]["uri"].as_str().unwrap_or_default();
                        let host = uri.split("//").nth(1).and_then(|r| r.split('/').next()).unwrap_or_default();
                        format!("{}@{host}", l["type"].as_str().unwrap())
                    })
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
    };
    // Every backend: block 1 from storage, A's L1P5, and the L2 holder with the longest run.
    let all = by("QT_PREFIX_MATCH", vec![1, 2, 3, 4], json!([])).await;
    assert_eq!(all[0][1..], ["ST_EVENT_REPORT_L1P5@A:1", "ST_EVENT_REPORT_L2@P:1"], "{all:?}");
    assert!(all[0][0].starts_with("ST_NFS"), "{all:?}");
    assert_eq!(all[1], ["ST_EVENT_REPORT_L1P5@A:1", "ST_EVENT_REPORT_L2@P:1"]);
    assert_eq!(all[2], ["ST_EVENT_REPORT_L2@Q:1"]);
    assert_eq!(all.len(), 4);
    // Coverage picks the holder of the most blocks; only the selected backend answers, and the
    // prefix ends where it holds nothing (Q does not hold block 2).
    let l2 = json!([{"backend_type": "ST_EVENT_REPORT_L2", "strategy": "LSS_V6D_COVERAGE"}]);
    let cov = by("QT_PREFIX_MATCH", vec![1, 2, 3, 4], l2.clone()).await;
    assert_eq!(cov[0], ["ST_EVENT_REPORT_L2@Q:1"], "{cov:?}");
    assert_eq!(cov.len(), 4, "P and Q together hold 1..4 in L2: {cov:?}");
    let nfs = by("QT_PREFIX_MATCH", vec![1, 2], json!([{"backend_type": "ST_NFS"}])).await;
    assert_eq!(nfs.len(), 1, "storage only: block 2 is nowhere: {nfs:?}");
    let batch = by("QT_BATCH_GET", vec![9, 1], l2).await;
    assert_eq!(batch[0], Vec::<String>::new(), "a miss is an empty vector: {batch:?}");
}

/// Tair's event-report storages: `event_report` storages (`ST_EVENT_REPORT_L1P5` / `_L2`) with
/// a tier's liveness settings, routed by the group's `event_report_storage_candidates`.
#[tokio::test]
async fn event_report_storages_route_a_groups_tiers_and_set_their_liveness() {
    let fx = Fixture::new(&[("tp0", 64)], 1, json!({})).await;
    let (api, inst) = (&fx.api, fx.instance.as_str());
    let storage = |name: &str, tier: Value, hb: i64| {
        json!({"storage": {"global_unique_name": name, "storage_type": tier,
               "event_report": {"heartbeat_timeout_ms": hb, "cleanup_grace_ms": 5000, "liveness_check_interval_ms": 200}}})
    };
    assert_ok(&api.admin("addStorage", storage("er_l1p5", json!("ST_EVENT_REPORT_L1P5"), 800)).await);
    assert_err(
        &api.admin("addStorage", storage("er_bad", json!("ST_NFS"), 800)).await,
        "INVALID_ARGUMENT",
        "storage_type",
    );
    assert_err(
        &api.admin("addStorage", storage("er_bad", json!("ST_EVENT_REPORT_L2"), -1)).await,
        "INVALID_ARGUMENT",
        "heartbeat_timeout_ms",
    );
    let mismatched =
        json!({"storage": {"global_unique_name": "x", "storage_type": "ST_MOONCAKE", "nfs": {"root_path": "/tmp/x"}}});
    assert_err(&api.admin("addStorage", mismatched).await, "INVALID_ARGUMENT", "does not match");
    let (_, listed) = api.admin("listStorage", json!({})).await;
    let types: Vec<(&str, &str)> = listed["storage"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["global_unique_name"].as_str().unwrap(), s["storage_type"].as_str().unwrap()))
        .collect();
    assert!(types.contains(&("er_l1p5", "ST_EVENT_REPORT_L1P5")) && types.contains(&("files", "ST_NFS")), "{types:?}");

    // The group routes L1P5 to it: its 800 ms heartbeat timeout applies (the config's is 30 s).
    let (_, g) = api.admin("getInstanceGroup", json!({"name": "g"})).await;
    let mut group = g["instance_group"].clone();
    group["event_report_storage_candidates"] = json!(["er_l1p5"]);
    group["version"] = json!(2);
    assert_ok(&api.admin("updateInstanceGroup", json!({"instance_group": group, "current_version": 1})).await);
    let r =
        report(api, inst, "ST_EVENT_REPORT_L1P5", "h:1", vec![heartbeat(), add(7, "gpu", &[("tp0", &uri("h:1", 7))])])
            .await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_eq!(hosts(api, inst, &[7], &[]).await.len(), 1);
    // Hidden once silent past the storage's 800 ms — well before the config's 30 s.
    let hidden = eventually(std::time::Duration::from_secs(10), || async {
        hosts(api, inst, &[7], &[]).await.is_empty().then_some(())
    })
    .await;
    assert!(hidden.is_some(), "a reporter silent past its storage's heartbeat timeout stayed visible");
    // Its settings are not where blocks live: changed without force_update. A storage a group
    // routes a tier to cannot be removed.
    assert_ok(&api.admin("updateStorage", storage("er_l1p5", json!("ST_EVENT_REPORT_L1P5"), 900)).await);
    let r = api.admin("removeStorage", json!({"storage_unique_name": "er_l1p5"})).await;
    assert_err(&r, "INVALID_ARGUMENT", "event_report_storage_candidates");
    let short_grace = json!({"storage": {"global_unique_name": "er_l2", "storage_type": "ST_EVENT_REPORT_L2",
                             "event_report": {"heartbeat_timeout_ms": 5000, "cleanup_grace_ms": 1000}}});
    assert_err(&api.admin("addStorage", short_grace).await, "INVALID_ARGUMENT", "cleanup_grace_ms");
    // A storage stored before kvcm answered storage_type (its JSON without it) is updated
    // without force_update when its placement is unchanged, and an identical re-add is OK.
    let storages = format!("{}:v1:{{reg}}:storages", api.namespace);
    let mut c = valkey().await;
    let raw: String = redis::cmd("HGET").arg(&storages).arg("files").query_async(&mut c).await.unwrap();
    let mut old: Value = serde_json::from_str(&raw).unwrap();
    old.as_object_mut().unwrap().remove("storage_type");
    let _: () = redis::cmd("HSET").arg(&storages).arg("files").arg(old.to_string()).query_async(&mut c).await.unwrap();
    let mut same = old.clone();
    same.as_object_mut().unwrap().remove("is_available");
    same.as_object_mut().unwrap().remove("is_healthy");
    assert_ok(&api.admin("addStorage", json!({"storage": same})).await);
    same["check_storage_available_when_open"] = json!(true);
    assert_ok(&api.admin("updateStorage", json!({"storage": same})).await);
    // A tier the group does not route is refused; so is a disabled storage's.
    let r = report(api, inst, "ST_EVENT_REPORT_L2", "h:1", vec![heartbeat()]).await;
    assert_err(&(200, r), "INVALID_ARGUMENT", "no event-report storage of type ST_EVENT_REPORT_L2");
    assert_ok(&api.admin("disableStorage", json!({"storage_unique_name": "er_l1p5"})).await);
    let r = report(api, inst, "ST_EVENT_REPORT_L1P5", "h:1", vec![heartbeat()]).await;
    assert_err(&(200, r), "INVALID_ARGUMENT", "disabled");
}

/// A prepared batch longer than one chunk of the script (500 blocks) whose chunks take
/// different paths — re-adds, new blocks, blocks another host holds, a block refused — answers
/// each event's code at its own index; and a getHostCacheState longer than one chunk of the
/// presence read (1,024 blocks, read concurrently) sees every chunk.
#[tokio::test]
async fn a_long_batch_answers_each_events_code_in_order_and_long_prompts_read_every_chunk() {
    let fx = Fixture::new(&[("tp0", 64)], 1, json!({})).await;
    let (api, inst) = (&fx.api, fx.instance.as_str());
    let (l1, l2) = ("ST_EVENT_REPORT_L1P5", "ST_EVENT_REPORT_L2");
    let adds = |host: &str, keys: std::ops::Range<i64>| -> Vec<Value> {
        let mut events = vec![heartbeat()];
        events.extend(keys.map(|k| add(k, "gpu", &[("tp0", &uri(host, k))])));
        events
    };
    // a:1 holds 1000..1010 already (re-added unchanged below); o:1 holds 1600..1650 (a:1's
    // record appended to o:1's).
    assert_eq!(code(&report(api, inst, l1, "a:1", adds("a:1", 1000..1010)).await), "OK");
    assert_eq!(code(&report(api, inst, l1, "o:1", adds("o:1", 1600..1650)).await), "OK");
    // Block 1700 already carries 256 records (of reporters long gone): one more is refused.
    let full: Vec<u8> =
        (0..256u32).flat_map(|i| [&(90_000 + i).to_le_bytes()[..], &[1, 0, 0, 0, 1, 0, 0, 0, 1]].concat()).collect();
    let _: () = redis::cmd("HSET")
        .arg(instance_key(&api.namespace, inst, "engine"))
        .arg(&1700i64.to_be_bytes()[..])
        .arg(full)
        .query_async(&mut valkey().await)
        .await
        .unwrap();
    let prepared = api.metric("kvcm_engine_blocks_prepared_total").await;
    // 1,200 adds, the one of block 2149 (event 1150) invalid: script chunks 1000..1499
    // (re-adds and new), 1500..1999 (merges, the refused block, new) and 2000..2199 (all new).
    let mut events = adds("a:1", 1000..2200);
    events[1150] = add(2149, "gpu", &[("tp9", "x://bad")]);
    let r = report(api, inst, l1, "a:1", events).await;
    let results = r["item_results"].as_array().unwrap_or_else(|| panic!("{r}"));
    assert_eq!(results.len(), 1201);
    for (i, c) in results.iter().enumerate() {
        let expected = match i {
            701 => "REACH_MAX_ENTITY_CAPACITY",
            1150 => "INVALID_ARGUMENT",
            _ => "OK",
        };
        assert_eq!(c, expected, "event {i}: {r}");
    }
    assert_eq!(code(&r), "REACH_MAX_ENTITY_CAPACITY", "the header is the first failure: {r}");
    assert_eq!(
        api.metric("kvcm_engine_blocks_prepared_total").await - prepared,
        1198.0,
        "10 re-adds, 1,138 new blocks and 50 held by o:1 by the batch; one refused"
    );
    let keys: Vec<i64> = (1000..1800).collect();
    assert_eq!(hosts(api, inst, &keys, &[]).await, vec![("a:1".into(), 700, 0, 700)]);
    let keys: Vec<i64> = (1600..1700).collect();
    assert_eq!(hosts(api, inst, &keys, &[]).await, vec![("a:1".into(), 100, 0, 100), ("o:1".into(), 50, 0, 50)]);
    let keys: Vec<i64> = (2000..2200).collect();
    assert_eq!(hosts(api, inst, &keys, &[]).await, vec![("a:1".into(), 149, 0, 149)]);

    // z:1 holds 5000..7600 but 7300 (index 2300, in the third chunk of a 2,600-block read);
    // its L2 peer y:1 holds 7300.
    for part in [5000..6300, 6300..7300, 7301..7600] {
        assert_eq!(code(&report(api, inst, l1, "z:1", adds("z:1", part)).await), "OK");
    }
    assert_eq!(code(&report(api, inst, l2, "y:1", adds("y:1", 7300..7301)).await), "OK");
    let keys: Vec<i64> = (5000..7600).collect();
    assert_eq!(hosts(api, inst, &keys, &[]).await, vec![("z:1".into(), 2300, 1, 2600)]);
    let keys: Vec<i64> = (5000..7700).collect();
    assert_eq!(hosts(api, inst, &keys, &[]).await, vec![("z:1".into(), 2300, 1, 2600)]);
}

/// A frontend reuses its copy of an instance's reporters only while it gives the same answers
/// as the hash in Valkey: each change another frontend makes — a new reporter, a new medium,
/// HOST_DOWN, a new lifecycle, a snapshot — shows at once, though the copy was in use just
/// before (checked each time); a reporter falling silent expires on time, and one heard from
/// again after falling silent (a heartbeat, which does not change the hash's version) comes
/// back at once.
#[tokio::test]
async fn a_frontends_copy_of_the_reporters_never_answers_differently_from_valkey() {
    // A copy is reused only while every live reporter in it was heard from within half the
    // timeout (2.5 s here): each step below sends a heartbeat and runs well inside that.
    let env = [("KVCM_EVENT_REPORT_HEARTBEAT_TIMEOUT_MS", "5000"), ("KVCM_EVENT_REPORT_CLEANUP_GRACE_MS", "60000")];
    let fx = fixture_with(&env).await;
    let (a, inst) = (&fx.api, fx.instance.as_str());
    let b = Api::start_with(&fx.api.namespace, &env);
    let (l1, l2) = ("ST_EVENT_REPORT_L1P5", "ST_EVENT_REPORT_L2");
    let reads = || {
        let b = &b;
        async move {
            let metric = |source: &str| format!("kvcm_engine_reporter_reads_total{{source=\"{source}\"}}");
            (b.metric(&metric("cached")).await, b.metric(&metric("read")).await)
        }
    };
    let gpu = |host: &str, keys: &[i64]| -> Vec<Value> {
        let mut events = vec![heartbeat()];
        events.extend(keys.iter().map(|&k| add(k, "gpu", &[("tp0", &uri(host, k))])));
        events
    };
    let all = [1, 2, 3, 4];
    // Two reads through b: the first leaves a copy (or uses it), the second, moments later,
    // uses it.
    let in_use = |expected: Vec<(String, i64, i64, i64)>| {
        let b = &b;
        async move {
            assert_eq!(hosts(b, inst, &all, &[]).await, expected);
            let before = reads().await;
            assert_eq!(hosts(b, inst, &all, &[]).await, expected);
            assert_eq!(reads().await, (before.0 + 1.0, before.1), "b's copy was in use");
        }
    };
    assert_eq!(code(&report(a, inst, l1, "r:1", gpu("r:1", &all)).await), "OK");
    assert_eq!(hosts(&b, inst, &all, &[]).await, vec![("r:1".into(), 4, 0, 4)]);
    in_use(vec![("r:1".into(), 4, 0, 4)]).await;

    // A new reporter.
    assert_eq!(code(&report(a, inst, l2, "s:1", gpu("s:1", &[1, 2])).await), "OK");
    assert_eq!(hosts(&b, inst, &all, &[]).await, vec![("r:1".into(), 4, 0, 4), ("s:1".into(), 2, 0, 2)]);
    in_use(vec![("r:1".into(), 4, 0, 4), ("s:1".into(), 2, 0, 2)]).await;
    // A new medium.
    let r = report(a, inst, l1, "r:1", vec![heartbeat(), add(3, "cpu", &[("tp0", "x://3")])]).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_eq!(hosts(&b, inst, &[3], &["cpu"]).await, vec![("r:1".into(), 1, 0, 1)], "a new medium");
    // HOST_DOWN.
    let beat = |host: &'static str, tier: &'static str| async move {
        assert_eq!(code(&report(a, inst, tier, host, vec![heartbeat()]).await), "OK");
    };
    beat("s:1", l2).await;
    in_use(vec![("r:1".into(), 4, 0, 4), ("s:1".into(), 2, 0, 2)]).await;
    let r = report(a, inst, l1, "r:1", vec![json!({"event_type": "EVENT_HOST_DOWN", "host_down": {}})]).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_eq!(hosts(&b, inst, &all, &[]).await, vec![("s:1".into(), 2, 0, 2)], "HOST_DOWN");
    // A new lifecycle: what it held before stays hidden.
    beat("s:1", l2).await;
    in_use(vec![("s:1".into(), 2, 0, 2)]).await;
    let mut events = vec![register(&["gpu"])];
    events.extend(gpu("r:1", &[1, 2, 3]));
    assert_eq!(code(&report(a, inst, l1, "r:1", events).await), "OK");
    assert_eq!(hosts(&b, inst, &all, &[]).await, vec![("r:1".into(), 3, 0, 3), ("s:1".into(), 2, 0, 2)]);
    // A snapshot: exactly its blocks from then on.
    beat("s:1", l2).await;
    in_use(vec![("r:1".into(), 3, 0, 3), ("s:1".into(), 2, 0, 2)]).await;
    let r = report(a, inst, l2, "s:1", vec![heartbeat(), snapshot(&[(1, "gpu")])]).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_eq!(hosts(&b, inst, &all, &[]).await, vec![("r:1".into(), 3, 0, 3), ("s:1".into(), 1, 0, 1)], "a snapshot");

    // Silence: hidden once the timeout passed, though the copy was read while they were live.
    in_use(vec![("r:1".into(), 3, 0, 3), ("s:1".into(), 1, 0, 1)]).await;
    tokio::time::sleep(std::time::Duration::from_millis(5300)).await;
    assert!(hosts(&b, inst, &all, &[]).await.is_empty(), "no heartbeat for 5.3 s");
    // Heard from again (only its heartbeat time changes): back at once.
    assert_eq!(code(&report(a, inst, l2, "s:1", vec![heartbeat()]).await), "OK");
    assert_eq!(hosts(&b, inst, &all, &[]).await, vec![("s:1".into(), 1, 0, 1)], "a heartbeat after silence");
}

/// A copy holding a reporter heard from more than half its timeout ago is not reused: read
/// 0.7 s after a heartbeat (1 s timeout) and asked again 0.4 s after the reporter's next
/// heartbeat, it would call a live reporter dead (its heartbeat time is older than the
/// timeout by then).
#[tokio::test]
async fn a_copy_with_a_heartbeat_near_its_timeout_is_read_again() {
    let env = [("KVCM_EVENT_REPORT_HEARTBEAT_TIMEOUT_MS", "1000"), ("KVCM_EVENT_REPORT_CLEANUP_GRACE_MS", "60000")];
    let fx = fixture_with(&env).await;
    let (a, inst) = (&fx.api, fx.instance.as_str());
    let l1 = "ST_EVENT_REPORT_L1P5";
    let r = report(a, inst, l1, "h:1", vec![heartbeat(), add(1, "gpu", &[("tp0", "x://1")])]).await;
    assert_eq!(code(&r), "OK", "{r}");
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    // The read that leaves the copy (whatever a slow machine makes of the timing here).
    hosts(a, inst, &[1], &[]).await;
    assert_eq!(code(&report(a, inst, l1, "h:1", vec![heartbeat()]).await), "OK");
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert_eq!(hosts(a, inst, &[1], &[]).await, vec![("h:1".into(), 1, 0, 1)], "live 0.4 s after its heartbeat");
}

/// A prepared batch names the media its records were built with: when the instance numbers a
/// medium otherwise (removed and registered again between the frontend's read and the
/// script), the adds take the single-add path under the instance's own ids, not the stale one.
#[tokio::test]
async fn a_prepared_batch_with_stale_medium_ids_stores_blocks_under_the_instances_ids() {
    let fx = Fixture::new(&[("tp0", 64)], 1, json!({})).await;
    let (api, inst) = (&fx.api, fx.instance.as_str());
    let l1 = "ST_EVENT_REPORT_L1P5";
    // gpu gets id 1, cpu id 2.
    let r = report(
        api,
        inst,
        l1,
        "m:1",
        vec![heartbeat(), add(1, "gpu", &[("tp0", "x://1")]), add(2, "cpu", &[("tp0", "x://2")])],
    )
    .await;
    assert_eq!(code(&r), "OK", "{r}");
    let key = |name: &str| instance_key(&api.namespace, inst, name);
    let record: Vec<u8> =
        redis::cmd("HGET").arg(key("reporters")).arg("L1P5|m:1").query_async(&mut valkey().await).await.unwrap();
    let header = [&record[1..9], &record[25..29]].concat();
    // A batch prepared as if gpu were id 2 and cpu id 1: block 50 in gpu, 51 in cpu.
    let (block, block2) = (50i64.to_be_bytes(), 51i64.to_be_bytes());
    let batch = [&b"B"[..], &header, b"2:", &[2, 3], b"gpu", &[1, 3], b"cpu"].concat();
    let reply: redis::Value = kvcm_core::scripts::REPORT_EVENT
        .script()
        .key(key("reporters"))
        .key(key("engine"))
        .key(key("engine_specs"))
        .arg("L1P5|m:1")
        .arg("300000")
        .arg("0")
        .arg("0123456789abcdef0123456789abcdef")
        .arg("H")
        .arg(batch)
        .arg([block, block2].concat())
        .arg(&[2u8, 1][..])
        .arg(packed_specs(&[tp0_specs("x://50"), tp0_specs("x://51")]))
        .invoke_async(&mut valkey().await)
        .await
        .unwrap();
    let redis::Value::Array(parts) = &reply else { panic!("{reply:?}") };
    assert_eq!(parts[1], redis::Value::BulkString(vec![1, 1, 1]), "every event OK: {reply:?}");
    assert_eq!(parts[5], redis::Value::Int(0), "not stored as prepared: {reply:?}");
    assert_eq!(hosts(api, inst, &[50], &["gpu"]).await, vec![("m:1".into(), 1, 0, 1)], "under gpu's id");
    assert!(hosts(api, inst, &[50], &["cpu"]).await.is_empty(), "not under the stale id");
    assert_eq!(hosts(api, inst, &[51], &["cpu"]).await, vec![("m:1".into(), 1, 0, 1)], "under cpu's id");
    assert!(hosts(api, inst, &[51], &["gpu"]).await.is_empty(), "not under the stale id");
}

/// The script as `prepare_adds` calls it: one reporter's request of `events`, with its grace.
async fn run_report_script(
    api: &Api,
    inst: &str,
    reporter: &str,
    grace_ms: &str,
    events: &[Vec<u8>],
) -> redis::RedisResult<redis::Value> {
    let key = |name: &str| instance_key(&api.namespace, inst, name);
    let script = kvcm_core::scripts::REPORT_EVENT.script();
    let mut call = script.prepare_invoke();
    call.key(key("reporters")).key(key("engine")).key(key("engine_specs"));
    call.arg(reporter).arg(grace_ms).arg("0").arg("0123456789abcdef0123456789abcdef");
    for e in events {
        call.arg(&e[..]);
    }
    call.invoke_async(&mut valkey().await).await
}

/// A prepared batch's packed arguments are unpacked whole before the script writes anything:
/// specs that do not add up to the batch's count (a frontend bug) are an error that leaves no
/// block stored, also when the fault is in the last of several chunks; and a batch of a
/// reporter gone silent past the grace is answered NODE_NOT_REGISTERED block by block.
#[tokio::test]
async fn a_prepared_batch_whose_specs_do_not_add_up_is_refused_before_anything_is_written() {
    let fx = Fixture::new(&[("tp0", 64)], 1, json!({})).await;
    let (api, inst) = (&fx.api, fx.instance.as_str());
    let r =
        report(api, inst, "ST_EVENT_REPORT_L1P5", "m:1", vec![heartbeat(), add(1, "gpu", &[("tp0", "x://1")])]).await;
    assert_eq!(code(&r), "OK", "{r}");
    let key = |name: &str| instance_key(&api.namespace, inst, name);
    let record: Vec<u8> =
        redis::cmd("HGET").arg(key("reporters")).arg("L1P5|m:1").query_async(&mut valkey().await).await.unwrap();
    let header = [&record[1..9], &record[25..29]].concat();
    let stored = || async { (hash_len(api, inst, "engine").await, hash_len(api, inst, "engine_specs").await) };
    assert_eq!(stored().await, (1, 1), "block 1 alone");
    // Two blocks (one chunk), and 1,100 (three chunks: the fault in the last).
    let mut base = 1;
    for (count, first) in [(2i64, 5000i64), (1100, 6000)] {
        let batch = [&b"B"[..], &header, count.to_string().as_bytes(), b":", &[1, 3], b"gpu"].concat();
        let keys: Vec<u8> = (0..count).flat_map(|k| (first + k).to_be_bytes()).collect();
        let specs = packed_specs(&(0..count).map(|k| tp0_specs(&format!("x://{k}"))).collect::<Vec<_>>());
        // One byte too many, and the last specs cut short (its length says more than is left).
        for bad in [[&specs[..], b"\0"].concat(), specs[..specs.len() - 1].to_vec()] {
            let events = [batch.clone(), keys.clone(), vec![1u8; count as usize], bad];
            let err = run_report_script(api, inst, "L1P5|m:1", "300000", &events)
                .await
                .expect_err("a batch that does not add up is an error");
            assert!(err.to_string().contains("do not add up"), "{count} blocks: {err}");
            assert_eq!(stored().await, (base, base), "{count} blocks: nothing stored ({err})");
        }
        // The same batch whole is stored (so the faults above are what was refused).
        let events = [batch.clone(), keys.clone(), vec![1u8; count as usize], specs.clone()];
        let reply = run_report_script(api, inst, "L1P5|m:1", "300000", &events).await.unwrap();
        let redis::Value::Array(parts) = &reply else { panic!("{reply:?}") };
        assert_eq!(parts[1], redis::Value::BulkString(vec![1; count as usize]), "{count} blocks OK");
        assert_eq!(parts[5], redis::Value::Int(count), "{count} blocks stored as prepared");
        assert_eq!(stored().await, (base + count, base + count));
        base += count;
    }
    // Silent past the grace (1 ms here): unregistered, each add of the batch answered 10.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let batch = [&b"B"[..], &header, b"2:", &[1, 3], b"gpu"].concat();
    let keys = [9000i64.to_be_bytes(), 9001i64.to_be_bytes()].concat();
    let specs = packed_specs(&[tp0_specs("x://a"), tp0_specs("x://b")]);
    let reply = run_report_script(api, inst, "L1P5|m:1", "1", &[batch, keys, vec![1, 1], specs]).await.unwrap();
    let redis::Value::Array(parts) = &reply else { panic!("{reply:?}") };
    assert_eq!(parts[1], redis::Value::BulkString(vec![10, 10]), "NODE_NOT_REGISTERED for each add: {reply:?}");
    assert_eq!(stored().await, (base, base), "nothing stored for an unregistered reporter");
}
