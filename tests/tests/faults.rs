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
