//! What engines see while the metadata store is unavailable: a node down or a cluster failing
//! over is HTTP 503 with `Retry-After` and `SERVICE_NOT_READY` (so connectors retry), never an
//! `INTERNAL_ERROR`, and requests succeed again once the cluster is back.

use kvcm_tests::*;
use serde_json::{Value, json};
use std::time::Duration;

/// A getCacheLocation through a raw connection, to see the status and headers as sent.
async fn raw_read(api: &Api, instance: &str, keys: &[i64]) -> Option<RawResponse> {
    let body = json!({"instance_id": instance, "query_type": "QT_PREFIX_MATCH", "block_keys": keys}).to_string();
    let req = format!(
        "POST /api/getCacheLocation HTTP/1.1\r\nhost: kvcm\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut c = RawConn::connect(&api.meta).await;
    c.send(req.as_bytes()).await.ok()?;
    c.read_response(Duration::from_secs(10)).await
}

fn assert_retry_later(r: &RawResponse, what: &str) {
    assert_eq!(r.status, 503, "{what}: {} {}", r.status, r.body);
    assert_eq!(r.header("retry-after"), Some("1"), "{what}");
    let reply: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(code(&reply), "SERVICE_NOT_READY", "{what}: {reply}");
    assert!(message(&reply).contains("retry"), "{what}: {reply}");
}

async fn solo_valkey(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap()
}

#[tokio::test]
async fn a_cluster_failing_over_or_a_node_down_is_503_with_retry_after_and_requests_recover() {
    let mut valkey = SoloValkey::start();
    let api = Api::start_with(
        &unique("ns"),
        &[
            ("KVCM_VALKEY_URL", valkey.url.as_str()),
            ("KVCM_VALKEY_TIMEOUT_MS", "500"),
            ("KVCM_VALKEY_CONNECT_TIMEOUT_MS", "500"),
        ],
    );
    let fx = Fixture::on(api, &[("tp0", 4096)], 1, json!({})).await;
    let keys = [11, 12, 13];
    fx.write(&keys).await;
    let ok = raw_read(&fx.api, &fx.instance, &keys).await.expect("a reply");
    assert_eq!(ok.status, 200, "{}", ok.body);

    // The instance's slot stops being served, as while a failover moves it: CLUSTERDOWN.
    let mut node = solo_valkey(&valkey.url).await;
    let blocks = instance_key(&fx.api.namespace, &fx.instance, "blocks");
    let slot: i64 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(&blocks).query_async(&mut node).await.unwrap();
    let _: () = redis::cmd("CLUSTER").arg("DELSLOTS").arg(slot).query_async(&mut node).await.unwrap();
    let down = eventually(Duration::from_secs(20), || async {
        raw_read(&fx.api, &fx.instance, &keys).await.filter(|r| r.status != 200)
    })
    .await
    .expect("reads kept succeeding with the slot unserved");
    assert_retry_later(&down, "slot not served");
    // Writes too (here the script never ran: the slot had no node).
    let (status, start) =
        fx.api.meta("startWriteCache", json!({"instance_id": fx.instance, "block_keys": [21, 22]})).await;
    assert_eq!((status, code(&start)), (503, "SERVICE_NOT_READY"), "{start}");

    // Served again: reads and writes recover without restarting anything.
    let _: () = redis::cmd("CLUSTER").arg("ADDSLOTS").arg(slot).query_async(&mut node).await.unwrap();
    eventually(Duration::from_secs(20), || async {
        raw_read(&fx.api, &fx.instance, &keys).await.filter(|r| r.status == 200)
    })
    .await
    .expect("reads did not recover once the slot was served again");
    // A node that lost its scripts (restarted, or a replica promoted: Valkey does not replicate
    // its script cache) answers NOSCRIPT: the frontend loads the script and sends it again.
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut node).await.unwrap();
    // The read above shows one serving thread's Valkey connection recovered. Each thread has its
    // own (api/src/serving.rs); one still reconnecting (the failed reads above set it off)
    // answers 503 + Retry-After until it is done, so the write is retried as a connector would.
    let start = eventually(Duration::from_secs(10), || async {
        let (status, start) =
            fx.api.meta("startWriteCache", json!({"instance_id": fx.instance, "block_keys": [21, 22]})).await;
        match status {
            200 => Some(start),
            _ => {
                assert_eq!((status, code(&start)), (503, "SERVICE_NOT_READY"), "{start}");
                None
            }
        }
    })
    .await
    .expect("writes did not recover once the slot was served again");
    assert_eq!(code(&start), "OK", "{start}");
    assert_ok(&(200, fx.finish(&start, json!({"offset": 2})).await));
    let loaded: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(kvcm_core::scripts::START_WRITE_CACHE.script().get_hash())
        .query_async(&mut node)
        .await
        .unwrap();
    assert_eq!(loaded, vec![true], "the write went through without loading its script again");

    // The node itself down: connection refused, the same answer.
    valkey.kill();
    let down = eventually(Duration::from_secs(20), || async {
        raw_read(&fx.api, &fx.instance, &keys).await.filter(|r| r.status != 200)
    })
    .await
    .expect("reads kept succeeding with Valkey down");
    assert_retry_later(&down, "node down");
    // Back, without its data (the test node keeps none): requests are answered again — HTTP 200
    // with whatever the store now says — instead of 503.
    valkey.restart();
    let back = eventually(Duration::from_secs(30), || async {
        raw_read(&fx.api, &fx.instance, &keys).await.filter(|r| r.status == 200)
    })
    .await
    .expect("requests were not answered again once Valkey was back");
    let reply: Value = serde_json::from_str(&back.body).unwrap();
    assert_ne!(code(&reply), "SERVICE_NOT_READY", "{reply}");
}

// Multi-threaded: the proxy's tasks must run while Api::start blocks this thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_resent_after_its_reply_was_lost_answers_what_the_first_run_did() {
    // kvcm-api reaches the node only through a proxy that can lose a reply with its
    // connection; the redis client then resends the script call, which already ran.
    let valkey = SoloValkey::start();
    let (proxy, url) = ReplyDropper::in_front_of(&valkey).await;
    let api = Api::start_with(&unique("ns"), &[("KVCM_VALKEY_URL", url.as_str())]);
    let fx = Fixture::on(api, &[("tp0", 4096)], 1, json!({})).await;
    fx.write(&[1, 2]).await;

    // startWriteCache: only its script names the instance's session counter (`…}:seq`).
    proxy.lose_reply_to(b"}:seq");
    let s = fx.start(&[1, 2, 3, 4]).await;
    assert_eq!(proxy.lost(), 1, "the start's reply was not lost");
    assert_eq!(code(&s), "OK", "a resent start must answer like the first run: {s}");
    assert_eq!(s["block_mask"], json!({"offset": 2}), "blocks 1 and 2 were present: {s}");
    let uris: Vec<&str> =
        s["locations"].as_array().unwrap().iter().map(|l| l["location_specs"][0]["uri"].as_str().unwrap()).collect();
    assert_eq!(uris.len(), 2, "{s}");

    // finishWriteCache: only its script (and no read here) names the interior-touch index.
    proxy.lose_reply_to(b"}:itouch");
    let f = fx.finish(&s, json!({"offset": 2})).await;
    assert_eq!(proxy.lost(), 2, "the finish's reply was not lost");
    assert_eq!(code(&f), "OK", "a resent finish must answer like the first run: {f}");
    // Finishing it again with the same mask is the same answer; with another, refused.
    assert_eq!(code(&fx.finish(&s, json!({"offset": 2})).await), "OK");
    assert_err(&(200, fx.finish(&s, json!({"offset": 1})).await), "INVALID_ARGUMENT", "already finished");

    // Every block serves once, counted once.
    let mut node = solo_valkey(&valkey.url).await;
    let r = fx.get("QT_PREFIX_MATCH", &[1, 2, 3, 4], json!({})).await;
    assert_eq!(r["locations"].as_array().unwrap().len(), 4, "{r}");
    let usage: std::collections::HashMap<String, i64> = redis::cmd("HGETALL")
        .arg(instance_key(&fx.api.namespace, &fx.instance, "usage"))
        .query_async(&mut node)
        .await
        .unwrap();
    let blocks: i64 = usage.iter().filter(|(k, _)| k.starts_with('n')).map(|(_, v)| v).sum();
    assert_eq!(blocks, 4, "{usage:?}");
    let open: i64 = redis::cmd("ZCARD")
        .arg(instance_key(&fx.api.namespace, &fx.instance, "sessions"))
        .query_async(&mut node)
        .await
        .unwrap();
    assert_eq!(open, 0, "no session left open");
}

#[tokio::test]
async fn a_full_valkey_refuses_writes_with_503_and_reads_go_on() {
    let valkey = SoloValkey::start();
    let api = Api::start_with(&unique("ns"), &[("KVCM_VALKEY_URL", valkey.url.as_str())]);
    let fx = Fixture::on(api, &[("tp0", 4096)], 1, json!({})).await;
    fx.write(&[1, 2]).await;
    let mut node = solo_valkey(&valkey.url).await;
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(1).query_async(&mut node).await.unwrap();
    let (http, reply) = fx.api.meta("startWriteCache", json!({"instance_id": fx.instance, "block_keys": [3]})).await;
    assert_eq!((http, code(&reply)), (503, "SERVICE_NOT_READY"), "{reply}");
    assert!(message(&reply).contains("out of memory"), "{reply}");
    assert_eq!(Fixture::real(&fx.get("QT_PREFIX_MATCH", &[1, 2], json!({})).await), vec![true, true]);
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(0).query_async(&mut node).await.unwrap();
    fx.write(&[3]).await;
}

// Multi-threaded: the proxy's tasks must run while Api::start blocks this thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_creates_resent_after_their_reply_was_lost_answer_ok() {
    let valkey = SoloValkey::start();
    let (proxy, url) = ReplyDropper::in_front_of(&valkey).await;
    let api = Api::start_with(&unique("ns"), &[("KVCM_VALKEY_URL", url.as_str())]);
    let root = repo_root().join(".kvcm/test-data").join(unique("resend"));
    std::fs::create_dir_all(&root).unwrap();
    // Each create's script runs, its reply is lost with the connection, the client resends it:
    // the engine or admin must see the create succeed, not "already exists".
    let creates = [
        (
            "addStorage",
            json!({"storage": {"global_unique_name": "resent_storage", "nfs": {"root_path": root.to_str().unwrap()}}}),
            &b"resent_storage"[..],
        ),
        (
            "createInstanceGroup",
            json!({"instance_group": {"name": "resent_group", "storage_candidates": ["resent_storage"], "version": 1}}),
            b"resent_group",
        ),
        (
            "addAccount",
            json!({"user_name": "resent_admin", "password": "a-long-password", "role": "ROLE_ADMIN"}),
            b"resent_admin",
        ),
    ];
    for (i, (rpc, body, needle)) in creates.into_iter().enumerate() {
        proxy.lose_reply_to(needle);
        let reply = api.post(&api.admin, rpc, body.to_string(), None).await;
        assert_eq!(proxy.lost(), i + 1, "{rpc}: the reply was not lost");
        assert_ok(&reply);
    }
    let (_, storages) =
        api.post(&api.admin, "listStorage", "{}".into(), Some("Bearer resent_admin:a-long-password")).await;
    assert_eq!(storages["storage"].as_array().map(Vec::len), Some(1), "{storages}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_removals_and_updates_resent_after_their_reply_was_lost_answer_ok() {
    let valkey = SoloValkey::start();
    let (proxy, url) = ReplyDropper::in_front_of(&valkey).await;
    let api = Api::start_with(&unique("ns"), &[("KVCM_VALKEY_URL", url.as_str())]);
    let root = repo_root().join(".kvcm/test-data").join(unique("resend"));
    std::fs::create_dir_all(&root).unwrap();
    let admin = Some("Bearer first_admin:a-long-password");
    let call = |rpc: &'static str, body: Value| {
        let api = &api;
        async move { api.post(&api.admin, rpc, body.to_string(), admin).await }
    };
    for user in ["first_admin", "second_admin"] {
        let body = json!({"user_name": user, "password": "a-long-password", "role": "ROLE_ADMIN"});
        assert_ok(&call("addAccount", body).await);
    }
    let storage = json!({"storage": {"global_unique_name": "st", "nfs": {"root_path": root.to_str().unwrap()}}});
    assert_ok(&call("addStorage", storage).await);
    let group = |version: i64, quota: i64| {
        json!({"instance_group": {"name": "gr", "storage_candidates": ["st"], "version": version,
               "quota": {"capacity": quota}}, "current_version": version - 1})
    };
    assert_ok(&call("createInstanceGroup", group(1, 1 << 30)).await);
    let registration = json!({"instance_group": "gr", "instance_id": "inst", "block_size": 16,
        "location_spec_infos": [{"name": "tp0", "size": 1024}],
        "model_deployment": {"model_name": "m", "dtype": "fp16", "tp_size": 1}});
    assert_ok(&call("registerInstance", registration).await);
    let (_, key) = call("createApiKey", json!({"name": "engines", "role": "ROLE_USER"})).await;
    let key_id = key["api_key"]["key_id"].as_str().unwrap().to_string();

    // Each call's script runs, its reply is lost with the connection, the client resends the
    // same call: the admin must see the change succeed, not "does not exist" or "version changed".
    proxy.lose_reply_to(b"2147483648");
    assert_ok(&call("updateInstanceGroup", group(2, 1 << 31)).await);
    assert_eq!(proxy.lost(), 1, "updateInstanceGroup: the reply was not lost");
    let (_, g) = call("getInstanceGroup", json!({"name": "gr"})).await;
    let version = &g["instance_group"]["version"];
    assert!(*version == json!(2) || *version == json!("2"), "{g}");
    let checked = json!({"storage": {"global_unique_name": "st", "check_storage_available_when_open": true,
        "nfs": {"root_path": root.to_str().unwrap()}}});
    proxy.lose_reply_to(b"\"check_storage_available_when_open\":true");
    assert_ok(&call("updateStorage", checked).await);
    assert_eq!(proxy.lost(), 2, "updateStorage: the reply was not lost");
    let (_, listed) = call("listStorage", json!({})).await;
    assert_eq!(listed["storage"][0]["check_storage_available_when_open"], true, "{listed}");
    let mut lost = 2;
    let calls = [
        ("removeInstance", json!({"instance_id": "inst"}), &b"removed:instance:inst"[..]),
        ("removeInstanceGroup", json!({"name": "gr"}), b"removed:group:gr"),
        ("removeStorage", json!({"storage_unique_name": "st"}), b"removed:storage:st"),
        ("revokeApiKey", json!({"key_id": key_id}), b"removed:api_key:"),
        ("deleteAccount", json!({"user_name": "second_admin"}), b"removed:account:second_admin"),
    ];
    for (rpc, body, needle) in calls.iter() {
        proxy.lose_reply_to(needle);
        let reply = call(rpc, body.clone()).await;
        lost += 1;
        assert_eq!(proxy.lost(), lost, "{rpc}: the reply was not lost");
        assert_ok(&reply);
    }
    // The changes were made once, and another call of the same removal is still refused: only
    // the resend of the call that went through answers OK.
    for (rpc, body, _) in calls.iter() {
        let reply = call(rpc, body.clone()).await;
        let expected = if *rpc == "removeInstance" { "INSTANCE_NOT_EXIST" } else { "INVALID_ARGUMENT" };
        assert_err(&reply, expected, if *rpc == "removeInstance" { "not registered" } else { "does not exist" });
    }
    let (_, accounts) = call("listAccount", json!({})).await;
    assert_eq!(accounts["accounts"].as_array().map(Vec::len), Some(1), "{accounts}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_resent_after_its_reply_was_lost_evicts_once() {
    let valkey = SoloValkey::start();
    let (proxy, url) = ReplyDropper::in_front_of(&valkey).await;
    let api = Api::start_with(&unique("ns"), &[("KVCM_VALKEY_URL", url.as_str())]);
    let fx = Fixture::on(api, &[("tp0", 4096)], 1, json!({})).await;
    for k in [1, 2, 3] {
        fx.write(&[k]).await; // three chains of one block: three leaves
    }
    let access = kvcm_core::valkey::Access::from_urls(&[url], 2000, 2000);
    let data = kvcm_core::store::DataPlane::new(access.connect().await.unwrap(), &fx.api.namespace, Default::default());
    let lease = data.lease_acquire(&fx.instance, "w-resend", 60_000).await.unwrap().expect("the lease");
    // The evict script runs, its reply is lost with the connection, the client resends it.
    proxy.lose_reply_to(lease.as_bytes());
    let lru = kvcm_core::store::maintenance::EvictIndex::Lru;
    let evicted = data.evict(&fx.instance, &[4096, 4096], lru, 1, None, None, &lease, 0, 0).await.unwrap();
    assert_eq!(proxy.lost(), 1, "the evict's reply was not lost");
    assert_eq!(evicted.map(|e| e.blocks), Some(1), "{evicted:?}");
    let served = Fixture::real(&fx.get("QT_BATCH_GET", &[1, 2, 3], json!({})).await);
    assert_eq!(served.iter().filter(|s| **s).count(), 2, "one block evicted, not two: {served:?}");
}
