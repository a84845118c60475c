//! Tair's debug service (`injectFault`, `removeFault`, `clearFaults`), over HTTP and over gRPC
//! (`DebugService` beside AdminService): off unless `debug_faults = true`; on, a faulted RPC of
//! the frontend answers `INTERNAL_ERROR` — every call, or only the n-th — until removed.

use kvcm_tests::*;
use serde_json::json;

fn status(reply: &serde_json::Value) -> &str {
    reply["header"]["status"]["code"].as_str().unwrap_or("")
}

#[tokio::test]
async fn fault_injection_is_off_unless_configured() {
    let api = Api::start();
    let inject = json!({"api_name": "GetCacheLocation", "fault_trigger_strategy": "ALWAYS"});
    assert_err(&api.admin("injectFault", inject.clone()).await, "UNSUPPORTED", "debug_faults");
    let over_grpc =
        grpc_call(&api.grpc_admin, kvcm_api::grpc::DEBUG_SERVICE, "InjectFault", inject, None).await.unwrap();
    assert_eq!(status(&over_grpc), "UNSUPPORTED", "{over_grpc}");
    let read = json!({"instance_id": "nobody", "query_type": "QT_PREFIX_MATCH", "block_keys": [1]});
    assert_err(&api.meta("getCacheLocation", read).await, "INSTANCE_NOT_EXIST", "nobody");
}

#[tokio::test]
async fn injected_faults_fail_always_or_once_and_are_removed() {
    let api = Api::start_with(&unique("ns"), &[("KVCM_DEBUG_FAULTS", "true")]);
    let read = json!({"instance_id": "nobody", "query_type": "QT_PREFIX_MATCH", "block_keys": [1]});
    let inject =
        json!({"api_name": "GetCacheLocation", "fault_type": "FT_INTERNAL_ERROR", "fault_trigger_strategy": "ALWAYS"});
    assert_ok(&api.admin("injectFault", inject).await);
    for _ in 0..2 {
        assert_err(&api.meta("getCacheLocation", read.clone()).await, "INTERNAL_ERROR", "fault injected");
    }
    let over_grpc = api.grpc_meta("GetCacheLocation", read.clone(), None).await.unwrap();
    assert_eq!(status(&over_grpc), "INTERNAL_ERROR", "{over_grpc}");
    // Other RPCs are untouched.
    assert_err(&api.meta("getInstanceInfo", json!({"instance_id": "nobody"})).await, "INSTANCE_NOT_EXIST", "nobody");
    assert_ok(&api.admin("removeFault", json!({"api_name": "getCacheLocation"})).await);
    assert_err(&api.meta("getCacheLocation", read.clone()).await, "INSTANCE_NOT_EXIST", "nobody");

    // ONCE, at the second call after the injection; injected over gRPC this time.
    let once = json!({"api_name": "GetInstanceInfo", "fault_trigger_strategy": "ONCE", "trigger_at_call": 2});
    let r = grpc_call(&api.grpc_admin, kvcm_api::grpc::DEBUG_SERVICE, "InjectFault", once, None).await.unwrap();
    assert_eq!(status(&r), "OK", "{r}");
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (_, r) = api.meta("getInstanceInfo", json!({"instance_id": "nobody"})).await;
        seen.push(status(&r).to_string());
    }
    assert_eq!(seen, ["INSTANCE_NOT_EXIST", "INTERNAL_ERROR", "INSTANCE_NOT_EXIST"]);

    // clearFaults ends every fault; bad requests are refused.
    assert_ok(&api.admin("injectFault", json!({"api_name": "GetCacheLocation"})).await);
    assert_ok(&api.admin("clearFaults", json!({})).await);
    assert_err(&api.meta("getCacheLocation", read).await, "INSTANCE_NOT_EXIST", "nobody");
    assert_err(&api.admin("injectFault", json!({"api_name": "not an rpc"})).await, "INVALID_ARGUMENT", "api_name");
    let zero = json!({"api_name": "GetCacheLocation", "fault_trigger_strategy": "ONCE", "trigger_at_call": 0});
    assert_err(&api.admin("injectFault", zero).await, "INVALID_ARGUMENT", "trigger_at_call");
    let (_, metrics) = api.get_admin("/metrics").await;
    // Two faulted calls over HTTP, one over gRPC (which goes through the same router).
    assert!(
        metrics.contains(
            r#"kvcm_http_requests_total{code="INTERNAL_ERROR",plane="meta",route="/api/getCacheLocation"} 3"#
        ),
        "faulted calls are counted like any reply:\n{metrics}"
    );
}

#[tokio::test]
async fn a_hang_delays_an_rpc_and_workers_serve_the_storage_fault_points() {
    let api = Api::start_with(&unique("ns"), &[("KVCM_DEBUG_FAULTS", "true")]);
    let read = json!({"instance_id": "nobody", "query_type": "QT_PREFIX_MATCH", "block_keys": [1]});
    // kvcm extension: FT_HANG makes the call wait, then run (also over gRPC: the proto has it).
    let hang = json!({"api_name": "GetCacheLocation", "fault_type": "FT_HANG", "hang_ms": 400,
                      "fault_trigger_strategy": "ONCE", "trigger_at_call": 1});
    let over_grpc = grpc_call(&api.grpc_admin, kvcm_api::grpc::DEBUG_SERVICE, "InjectFault", hang, None).await.unwrap();
    assert_eq!(status(&over_grpc), "OK", "{over_grpc}");
    let t = std::time::Instant::now();
    assert_err(&api.meta("getCacheLocation", read.clone()).await, "INSTANCE_NOT_EXIST", "nobody");
    assert!(t.elapsed() >= std::time::Duration::from_millis(400), "{:?}", t.elapsed());
    let bad = json!({"api_name": "StorageUnlink", "fault_type": "FT_HANG", "hang_ms": 0});
    assert_err(&api.admin("injectFault", bad).await, "INVALID_ARGUMENT", "hang_ms");

    // A worker's debug service: off unless configured, and then its storage operations fail.
    let call = |url: String, body: serde_json::Value| async move {
        let r: serde_json::Value =
            reqwest::Client::new().post(url).json(&body).send().await.unwrap().json().await.unwrap();
        r
    };
    let fail_probe = json!({"api_name": "StorageProbe", "fault_trigger_strategy": "ALWAYS"});
    let off = WorkerProc::start(&api.namespace, &[]);
    let r = call(format!("{}/api/injectFault", off.metrics), fail_probe.clone()).await;
    assert_eq!(status(&r), "UNSUPPORTED", "{r}");
    let dir = repo_root().join(".kvcm/test-data").join(unique("probe"));
    std::fs::create_dir_all(&dir).unwrap();
    let storage = json!({"storage": {"global_unique_name": "probed", "nfs": {"root_path": dir.to_str().unwrap()}}});
    assert_ok(&api.admin("addStorage", storage).await);
    let on =
        WorkerProc::start(&api.namespace, &[("KVCM_DEBUG_FAULTS", "true"), ("KVCM_WORKER__HEALTH_INTERVAL_MS", "100")]);
    let healthy = "kvcm_storage_healthy{storage=\"probed\"}";
    wait_until("the storage passes its probe", 10, || async { on.metric(healthy).await == 1.0 }).await;
    let r = call(format!("{}/api/injectFault", on.metrics), fail_probe).await;
    assert_eq!(status(&r), "OK", "{r}");
    wait_until("the faulted probe fails", 10, || async { on.metric(healthy).await == 0.0 }).await;
    let r = call(format!("{}/api/clearFaults", on.metrics), json!({})).await;
    assert_eq!(status(&r), "OK", "{r}");
    wait_until("the probe passes again", 10, || async { on.metric(healthy).await == 1.0 }).await;
}
