//! Tair's gRPC services (`api/proto/tair/`) against a real kvcm-api, with a client that shares only
//! the protos with the server: every meta RPC over gRPC, and the conformance of the two
//! transports — the same request gives the same answer over HTTP and over gRPC, and the JSON of
//! an HTTP reply equals the protobuf JSON of the gRPC message (kvcm's extension fields aside,
//! which the protos do not have).

use kvcm_tests::*;
use serde_json::{Value, json};

/// An HTTP reply as the proto sees it: read into the RPC's response message and written back
/// as protobuf JSON (drops kvcm's extension fields, fills nothing else in: every kvcm reply
/// already carries every field). `request_id` differs per request and is blanked in both.
fn as_proto(service: &str, method: &str, reply: Value) -> Value {
    let desc = kvcm_api::grpc::descriptors()
        .get_service_by_name(service)
        .and_then(|s| s.methods().find(|m| m.name() == method))
        .unwrap();
    let reply = blank_request_id(reply);
    // Every field kvcm writes must be one the proto has, but for kvcm's documented extensions:
    // a field written under a name the proto lacks would otherwise vanish from both sides.
    let mut strict = reply.clone();
    strip_extensions(&mut strict);
    let strict = strict.to_string();
    let mut de = serde_json::Deserializer::from_str(&strict);
    let options = prost_reflect::DeserializeOptions::new().deny_unknown_fields(true);
    if let Err(e) = prost_reflect::DynamicMessage::deserialize_with_options(desc.output(), &mut de, &options) {
        panic!("{method}: kvcm's HTTP reply has a field {} lacks: {e}\n{reply}", desc.output().full_name());
    }
    let message = kvcm_api::grpc::from_json(desc.output(), reply.to_string().as_bytes()).unwrap();
    serde_json::from_slice(&kvcm_api::grpc::to_json(&message).unwrap()).unwrap()
}

/// kvcm's extension fields (README, "Protocol notes"), removed wherever they appear.
const EXTENSIONS: &[&str] = &["is_available", "is_healthy", "missing_storage_candidates", "instance_groups"];

fn strip_extensions(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for key in EXTENSIONS {
                map.remove(*key);
            }
            map.values_mut().for_each(strip_extensions);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_extensions),
        _ => {}
    }
}

/// Blanks what differs between two requests by nature: the request id, and the clock in
/// `CheckHealth`.
fn blank_request_id(mut reply: Value) -> Value {
    reply["header"]["request_id"] = json!("");
    if let Some(t) = reply.get_mut("elector_last_loop_time_ms") {
        *t = json!("0");
    }
    reply
}

/// Sends the same read-only request over both transports and asserts the same answer.
async fn same_over_both(api: &Api, service: &str, method: &str, body: Value) -> Value {
    let (base, url) = if service == kvcm_api::grpc::META_SERVICE {
        (api.meta.clone(), api.grpc_meta.clone())
    } else {
        (api.admin.clone(), api.grpc_admin.clone())
    };
    let grpc = grpc_call(&url, service, method, body.clone(), None).await;
    let grpc = blank_request_id(grpc.unwrap_or_else(|s| panic!("{method} over gRPC: {s}")));
    let (_, http) = api.post(&base, &kvcm_api::http_rpc_name(method), body.to_string(), None).await;
    assert_eq!(grpc, as_proto(service, method, http.clone()), "{method}: gRPC and HTTP differ (HTTP said {http})");
    grpc
}

fn code(reply: &Value) -> &str {
    reply["header"]["status"]["code"].as_str().unwrap_or("")
}

#[tokio::test]
async fn every_meta_rpc_works_over_grpc_and_agrees_with_http() {
    let api = Api::start();
    assert!(api.grpc_meta.starts_with("http://"), "kvcm-api printed no gRPC address");
    let root = repo_root().join(".kvcm/test-data").join(unique("grpc"));
    std::fs::create_dir_all(&root).unwrap();
    let storage =
        json!({"storage": {"global_unique_name": "files", "nfs": {"root_path": root, "key_count_per_file": 1}}});
    // Admin RPCs over gRPC too.
    let added = api.grpc_admin("AddStorage", storage, None).await.unwrap();
    assert_eq!(code(&added), "OK", "{added}");
    let group = json!({"instance_group": {"name": "g", "storage_candidates": ["files"], "version": "1",
        "quota": {"capacity": "1000000"}}});
    assert_eq!(code(&api.grpc_admin("CreateInstanceGroup", group, None).await.unwrap()), "OK");

    let meta = kvcm_api::grpc::META_SERVICE;
    let registration = json!({"instance_group": "g", "instance_id": "gi", "block_size": 4,
        "location_spec_infos": [{"name": "tp0", "size": "64"}], "model_deployment": {"model_name": "m", "dtype": "bf16"}});
    let r = api.grpc_meta("RegisterInstance", registration, None).await.unwrap();
    assert_eq!(code(&r), "OK", "{r}");
    assert!(r["storage_configs"].as_str().unwrap().contains("files"), "{r}");
    let info = same_over_both(&api, meta, "GetInstanceInfo", json!({"instance_id": "gi"})).await;
    assert_eq!(info["instance_info"]["block_size"], 4);

    let started = api
        .grpc_meta("StartWriteCache", json!({"instance_id": "gi", "block_keys": ["1", "2", "3"]}), None)
        .await
        .unwrap();
    assert_eq!(code(&started), "OK", "{started}");
    assert_eq!(started["locations"].as_array().unwrap().len(), 3);
    let finish =
        json!({"instance_id": "gi", "write_session_id": started["write_session_id"], "success_blocks": {"offset": 3}});
    assert_eq!(code(&api.grpc_meta("FinishWriteCache", finish, None).await.unwrap()), "OK");

    let read = json!({"instance_id": "gi", "query_type": "QT_PREFIX_MATCH", "block_keys": ["1", "2", "3", "4"]});
    let found = same_over_both(&api, meta, "GetCacheLocation", read.clone()).await;
    let uris: Vec<&str> = found["locations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["location_specs"][0]["uri"].as_str().unwrap())
        .collect();
    let written: Vec<&str> = started["locations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["location_specs"][0]["uri"].as_str().unwrap())
        .collect();
    assert_eq!(uris, written, "the read finds the blocks at the URIs the write was given");
    let batch = json!({"instance_id": "gi", "query_type": "QT_BATCH_GET", "block_keys": ["1", "9"]});
    same_over_both(&api, meta, "GetCacheLocation", batch).await;
    let len = same_over_both(&api, meta, "GetCacheLocationLen", read).await;
    assert_eq!(len["cache_location_len"], "3");
    let metas =
        same_over_both(&api, meta, "GetCacheMeta", json!({"instance_id": "gi", "block_keys": ["1", "2"]})).await;
    assert_eq!(metas["metas"].as_array().unwrap().len(), 2);
    let cluster = same_over_both(&api, meta, "GetClusterInfo", json!({"instance_id": "gi"})).await;
    assert_eq!(cluster["leader_endpoint"]["meta_rpc_port"].to_string(), api.grpc_meta.rsplit(':').next().unwrap());
    // Errors travel in the header, as Tair's clients read them; the same over both transports.
    let unknown = same_over_both(
        &api,
        meta,
        "GetCacheLocation",
        json!({"instance_id": "nobody", "query_type": "QT_PREFIX_MATCH", "block_keys": ["1"]}),
    )
    .await;
    assert_eq!(code(&unknown), "INSTANCE_NOT_EXIST", "{unknown}");
    let bad = same_over_both(&api, meta, "GetCacheLocation", json!({"instance_id": "gi", "block_keys": ["1"]})).await;
    assert_eq!(code(&bad), "INVALID_ARGUMENT", "{bad}");

    let removed = api.grpc_meta("RemoveCache", json!({"instance_id": "gi", "block_keys": ["3"]}), None).await.unwrap();
    assert_eq!(code(&removed), "OK", "{removed}");
    let after = api
        .grpc_meta(
            "GetCacheLocationLen",
            json!({"instance_id": "gi", "query_type": "QT_PREFIX_MATCH", "block_keys": ["1", "2", "3"]}),
            None,
        )
        .await
        .unwrap();
    assert_eq!(after["cache_location_len"], "2", "{after}");
    let trimmed = api
        .grpc_meta("TrimCache", json!({"instance_id": "gi", "strategy": "TS_REMOVE_ALL_CACHE"}), None)
        .await
        .unwrap();
    assert_eq!(code(&trimmed), "OK", "{trimmed}");

    // An empty request is refused in the header, as over HTTP.
    let err = kvcm_tests::grpc_call(
        &api.grpc_meta,
        "kv_cache_manager.proto.meta.MetaService",
        "GetCacheLocation",
        json!({}),
        None,
    )
    .await
    .unwrap();
    assert_eq!(code(&err), "INVALID_ARGUMENT", "an empty request is refused in the header: {err}");
}

#[tokio::test]
async fn admin_reads_agree_over_both_transports() {
    let api = Api::start();
    let admin = kvcm_api::grpc::ADMIN_SERVICE;
    let root = repo_root().join(".kvcm/test-data").join(unique("grpc-admin"));
    std::fs::create_dir_all(&root).unwrap();
    let storage = json!({"storage": {"global_unique_name": "s1", "nfs": {"root_path": root, "key_count_per_file": 1}}});
    assert_eq!(code(&api.grpc_admin("AddStorage", storage, None).await.unwrap()), "OK");
    let group = json!({"instance_group": {"name": "g", "storage_candidates": ["s1"], "version": "1",
        "cache_config": {"reclaim_strategy": {"reclaim_policy": "POLICY_LFU", "trigger_strategy": {"used_percentage": 0.8}}}}});
    assert_eq!(code(&api.grpc_admin("CreateInstanceGroup", group, None).await.unwrap()), "OK");
    let listed = same_over_both(&api, admin, "ListStorage", json!({})).await;
    assert_eq!(listed["storage"][0]["nfs"]["key_count_per_file"], 1, "{listed}");
    let g = same_over_both(&api, admin, "GetInstanceGroup", json!({"name": "g"})).await;
    assert_eq!(g["instance_group"]["cache_config"]["reclaim_strategy"]["reclaim_policy"], "POLICY_LFU");
    // kvcm's own policy value (100, not in Tair's enum) goes through gRPC both ways.
    let adaptive = json!({"instance_group": {"name": "ga", "storage_candidates": ["s1"], "version": "1",
        "cache_config": {"reclaim_strategy": {"reclaim_policy": "POLICY_ADAPTIVE"}}}});
    assert_eq!(code(&api.grpc_admin("CreateInstanceGroup", adaptive, None).await.unwrap()), "OK");
    let g = same_over_both(&api, admin, "GetInstanceGroup", json!({"name": "ga"})).await;
    assert_eq!(g["instance_group"]["cache_config"]["reclaim_strategy"]["reclaim_policy"], "POLICY_ADAPTIVE");
    same_over_both(&api, admin, "ListInstanceGroup", json!({})).await;
    same_over_both(&api, admin, "ListInstanceInfo", json!({"instance_group_name": "g"})).await;
    same_over_both(&api, admin, "CheckHealth", json!({})).await;
    same_over_both(&api, admin, "GetManagerClusterInfo", json!({})).await;
    let demote = same_over_both(&api, admin, "LeaderDemote", json!({})).await;
    assert_eq!(code(&demote), "UNSUPPORTED");
    let metrics = api.grpc_admin("GetMetrics", json!({}), None).await.unwrap();
    assert!(metrics["metrics"].as_array().unwrap().iter().any(|m| m["metric_name"] == "service.query_counter"));
}

#[tokio::test]
async fn grpc_calls_pass_the_same_authentication_as_http() {
    let api = Api::start_with(
        &unique("ns"),
        &[
            ("KVCM_META_AUTH", "true"),
            ("KVCM_BOOTSTRAP_ADMIN_USER", "root"),
            ("KVCM_BOOTSTRAP_ADMIN_PASSWORD", "root-pass-1"),
        ],
    );
    let body = json!({"instance_id": "nobody"});
    let denied = api.grpc_meta("GetInstanceInfo", body.clone(), None).await.unwrap_err();
    assert_eq!(denied.code(), tonic::Code::Unauthenticated, "{denied:?}");
    let wrong = api.grpc_meta("GetInstanceInfo", body.clone(), Some("Basic cm9vdDp3cm9uZy1wYXNz")).await.unwrap_err();
    assert_eq!(wrong.code(), tonic::Code::Unauthenticated, "{wrong:?}");
    // root:root-pass-1
    let ok = api.grpc_meta("GetInstanceInfo", body, Some("Basic cm9vdDpyb290LXBhc3MtMQ==")).await.unwrap();
    assert_eq!(code(&ok), "INSTANCE_NOT_EXIST", "authenticated, then the usual answer: {ok}");
}

/// gRPC connections count against `max_connections` as HTTP ones do: past the cap, a new
/// connection waits (its handshake is not answered) until one closes.
#[tokio::test]
async fn grpc_connections_are_capped_like_http_ones() {
    let api = Api::start_with(&unique("ns"), &[("KVCM_MAX_CONNECTIONS", "2")]);
    let connect = || async {
        let channel = tonic::transport::Endpoint::from_shared(api.grpc_meta.clone())
            .unwrap()
            .connect_timeout(std::time::Duration::from_secs(1))
            .timeout(std::time::Duration::from_secs(1))
            .connect()
            .await?;
        let mut client = tonic::client::Grpc::new(channel.clone());
        // One call, so that the connection is really up (HTTP/2 handshake and a reply).
        let request = tonic::Request::new(bytes::Bytes::new());
        let path = format!("/{}/GetClusterInfo", kvcm_api::grpc::META_SERVICE).parse().unwrap();
        client.ready().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        client
            .unary(request, path, kvcm_api::grpc::BytesCodec)
            .await
            .map_err(|s| Box::new(s) as Box<dyn std::error::Error + Send + Sync>)?;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(channel)
    };
    let first = connect().await.expect("first connection");
    let _second = connect().await.expect("second connection");
    assert!(connect().await.is_err(), "a third connection was served past max_connections = 2");
    drop(first);
    // The freed permit lets the next connection through (the server notices the close quickly).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if connect().await.is_ok() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "a closed connection never freed its permit");
    }
}

/// Every method of the three services reaches its handler (none is lost between the proto and
/// the router: an empty request gets a reply with a header, not UNIMPLEMENTED or INTERNAL) and
/// gets the same answer over HTTP (GetMetrics aside: its counters move); a method
/// Tair has and kvcm does not serve answers UNIMPLEMENTED; a message larger than
/// `max_body_bytes / 4` is refused before it is converted.
#[tokio::test]
async fn every_method_is_routed_unserved_ones_are_unimplemented_and_messages_are_bounded() {
    let api = Api::start_with(&unique("ns"), &[("KVCM_MAX_BODY_BYTES", "262144")]);
    for (service, url) in [
        (kvcm_api::grpc::META_SERVICE, &api.grpc_meta),
        (kvcm_api::grpc::ADMIN_SERVICE, &api.grpc_admin),
        (kvcm_api::grpc::DEBUG_SERVICE, &api.grpc_admin),
    ] {
        let methods: Vec<String> = kvcm_api::grpc::descriptors()
            .get_service_by_name(service)
            .unwrap()
            .methods()
            .map(|m| m.name().to_string())
            .collect();
        for method in methods {
            let reply = grpc_call(url, service, &method, json!({}), None)
                .await
                .unwrap_or_else(|s| panic!("{method} with an empty request: {s:?}"));
            assert!(!code(&reply).is_empty(), "{method}: no header in {reply}");
            // And the same answer over HTTP (GetMetrics' counters move with every call).
            if method != "GetMetrics" {
                same_over_both(&api, service, &method, json!({})).await;
            }
        }
    }
    let channel = tonic::transport::Endpoint::from_shared(api.grpc_meta.clone()).unwrap().connect().await.unwrap();
    let mut client = tonic::client::Grpc::new(channel);
    client.ready().await.unwrap();
    let path = format!("/{}/NoSuchMethod", kvcm_api::grpc::META_SERVICE).parse().unwrap();
    let unserved = client.unary(tonic::Request::new(bytes::Bytes::new()), path, kvcm_api::grpc::BytesCodec).await;
    assert_eq!(unserved.unwrap_err().code(), tonic::Code::Unimplemented);

    // 262144 / 4 = 64 KiB of message: 40,000 keys of 3 bytes each are over it.
    let keys: Vec<String> = (0..40_000).map(|k| (100_000 + k).to_string()).collect();
    let big = json!({"instance_id": "x", "query_type": "QT_PREFIX_MATCH", "block_keys": keys});
    let refused = api.grpc_meta("GetCacheLocation", big, None).await.unwrap_err();
    assert!(
        matches!(refused.code(), tonic::Code::OutOfRange | tonic::Code::ResourceExhausted),
        "an oversized message: {refused:?}"
    );
}

/// A connection that sends nothing (no HTTP/2 preface) is closed after
/// `header_read_timeout_ms`, so idle sockets cannot hold the connection cap.
#[tokio::test]
async fn silent_grpc_connections_are_closed_and_free_the_cap() {
    use tokio::io::AsyncReadExt;
    let api = Api::start_with(&unique("ns"), &[("KVCM_MAX_CONNECTIONS", "2"), ("KVCM_HEADER_READ_TIMEOUT_MS", "500")]);
    let addr = api.grpc_meta.trim_start_matches("http://").to_string();
    let mut silent = Vec::new();
    for _ in 0..2 {
        silent.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    let started = std::time::Instant::now();
    for s in &mut silent {
        // The server speaks first (its SETTINGS frame); then, hearing nothing, it closes.
        let mut buf = [0u8; 256];
        let closed = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "a silent connection was not closed within 5 s");
    }
    assert!(started.elapsed() >= std::time::Duration::from_millis(400), "closed before the deadline");
    // Both permits are free again: a real client gets through.
    let reply = api.grpc_meta("GetClusterInfo", json!({}), None).await.expect("a call after the silent ones left");
    assert_eq!(code(&reply), "OK");
}
