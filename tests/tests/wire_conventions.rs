//! The wire conventions of DESIGN §2 through a real server: HTTP 400 for bad JSON, 413 for
//! oversized bodies, enum numbers and int64 strings accepted, unknown fields ignored, unknown
//! routes answered in JSON.

use kvcm_tests::*;
use serde_json::json;

#[tokio::test]
async fn unparsable_or_mistyped_json_is_http_400_with_a_reason() {
    let api = Api::start();
    for (rpc, body) in [
        ("addStorage", "{"),
        ("addStorage", ""),
        ("addStorage", "[1,2]"),
        ("addStorage", r#"{"storage": {"nfs": 5}}"#),
        ("removeStorage", r#"{"storage_unique_name": 7}"#),
    ] {
        let (status, reply) = api.post(&api.admin, rpc, body.into(), None).await;
        assert_eq!(status, 400, "body {body:?}: {reply}");
        assert_eq!(code(&reply), "INVALID_ARGUMENT");
        assert!(message(&reply).contains("not valid JSON"), "{reply}");
    }
    let (status, _) = api.post(&api.meta, "registerInstance", r#"{"block_size": "x"}"#.into(), None).await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn oversized_bodies_are_http_413_and_change_nothing() {
    let api = Api::start_with(&unique("ns"), &[("KVCM_MAX_BODY_BYTES", "2048")]);
    let big = json!({"storage": {"global_unique_name": "s", "nfs": {"root_path": format!("/{}", "a".repeat(4096))}}});
    let before = dump_namespace(&api.namespace).await;
    let (status, reply) = api.admin("addStorage", big).await;
    assert_eq!(status, 413, "{reply}");
    assert!(message(&reply).contains("max_body_bytes"));
    assert_eq!(dump_namespace(&api.namespace).await, before);
}

#[tokio::test]
async fn enums_as_numbers_int64_as_strings_and_unknown_fields_are_accepted() {
    let api = Api::start();
    let r = api
        .admin(
            "addStorage",
            json!({"unknown_top": 1, "storage": {"global_unique_name": "s", "future_field": {"a": 1},
                   "nfs": {"root_path": "/tmp/x", "key_count_per_file": 2}}}),
        )
        .await;
    assert_ok(&r);
    let g = json!({"instance_group": {"name": "g", "storage_candidates": ["s"], "max_instance_count": "3",
        "quota": {"capacity": "123", "quota_config": [{"storage_type": 4, "capacity": "7"}]},
        "cache_config": {"reclaim_strategy": {"reclaim_policy": 2}}, "version": "1"}});
    assert_ok(&api.admin("createInstanceGroup", g).await);
    let (_, got) = api.admin("getInstanceGroup", json!({"name": "g"})).await;
    assert_eq!(got["instance_group"]["quota"]["quota_config"][0], json!({"storage_type": "ST_NFS", "capacity": "7"}));
    assert_eq!(got["instance_group"]["cache_config"]["reclaim_strategy"]["reclaim_policy"], "POLICY_LFU");
    assert_eq!(got["instance_group"]["max_instance_count"], "3");
    let (status, bad_enum) =
        api.admin("addAccount", json!({"user_name": "u", "password": "12345678", "role": 9})).await;
    assert_eq!(status, 400, "{bad_enum}");
    assert!(message(&bad_enum).contains("AccountRole"));
}

#[tokio::test]
async fn a_request_past_its_deadline_gets_a_json_408() {
    // A deadline far shorter than an Argon2 password check (tens of milliseconds).
    let env = [
        ("KVCM_REQUEST_TIMEOUT_MS", "2"),
        ("KVCM_BOOTSTRAP_ADMIN_USER", "root"),
        ("KVCM_BOOTSTRAP_ADMIN_PASSWORD", "root-pass-1"),
    ];
    let api = Api::start_with(&unique("ns"), &env);
    let (status, reply) = api.post(&api.admin, "checkHealth", "{}".into(), Some("Bearer root:root-pass-1")).await;
    assert_eq!(status, 408, "{reply}");
    assert_eq!(code(&reply), "SERVICE_NOT_READY", "{reply}");
    assert!(message(&reply).contains("request_timeout_ms"));
}

#[tokio::test]
async fn every_reply_has_a_header_with_a_request_id() {
    let api = Api::start();
    let (_, a) = api.admin("listStorage", json!({})).await;
    let (_, b) = api.admin("listStorage", json!({})).await;
    let (ida, idb) = (a["header"]["request_id"].as_str().unwrap(), b["header"]["request_id"].as_str().unwrap());
    assert!(!ida.is_empty() && ida != idb);
    assert_eq!(a["header"]["status"]["code"], "OK");
}

#[tokio::test]
async fn unknown_routes_get_a_json_404_and_wrong_methods_405() {
    let api = Api::start();
    let (status, reply) = api.admin("noSuchRpc", json!({})).await;
    assert_eq!(status, 404);
    assert_eq!(code(&reply), "UNSUPPORTED");
    let (status, text) = api.get_admin("/api/addStorage").await;
    assert_eq!(status, 405);
    let reply: serde_json::Value = serde_json::from_str(&text).expect("a 405 is JSON with a header");
    assert_eq!(code(&reply), "UNSUPPORTED", "{reply}");
    assert!(!reply["header"]["request_id"].as_str().unwrap().is_empty());
    // The data plane RPCs are not on the admin listener and admin RPCs are not on the meta one.
    let (status, _) = api.meta("addStorage", json!({})).await;
    assert_eq!(status, 404);
}
