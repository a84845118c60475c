//! The OpenAPI descriptions through a real server: each listener serves its checked-in
//! description without credentials, every described route answers as described, the requests
//! and replies of a realistic session conform to their schemas, and the checked-in files are
//! valid OpenAPI 3.1. The last two use an independent validator (Python's
//! `openapi-spec-validator` and its `openapi-schema-validator`, installed by
//! `infra/install-python-tools.sh`, which `infra/deps.sh` runs).

use kvcm_tests::*;
use serde_json::{Value, json};
use std::process::Command;

fn checked_in(plane: &str) -> String {
    let path = repo_root().join("docs/openapi").join(format!("{plane}.json"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

async fn get(url: String, auth: Option<&str>) -> (u16, Option<String>, String) {
    let mut req = reqwest::Client::new().get(url);
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    let resp = req.send().await.expect("HTTP request");
    let content_type = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_string());
    (resp.status().as_u16(), content_type, resp.text().await.unwrap())
}

#[tokio::test]
async fn each_listener_serves_its_checked_in_description_without_credentials() {
    let api = Api::start();
    for (base, plane) in [(&api.meta, "meta"), (&api.admin, "admin")] {
        let (status, content_type, body) = get(format!("{base}/openapi.json"), None).await;
        assert_eq!(status, 200, "{plane}: {body}");
        assert_eq!(content_type.as_deref(), Some("application/json"));
        assert!(
            body == checked_in(plane),
            "{plane} plane serves a description that differs from docs/openapi/{plane}.json"
        );
    }
    // Once an admin exists the RPCs need credentials; the description still does not.
    assert_ok(
        &api.admin("addAccount", json!({"user_name": "root", "password": "s3cret-pass", "role": "ROLE_ADMIN"})).await,
    );
    let (status, _) = api.admin("listStorage", json!({})).await;
    assert_eq!(status, 401);
    let (status, _, body) = get(format!("{}/openapi.json", api.admin), None).await;
    assert_eq!(status, 200);
    assert!(body == checked_in("admin"));
}

/// The schema a `$ref` points to.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(r) => doc.pointer(r.trim_start_matches('#')).unwrap_or_else(|| panic!("dangling $ref {r}")),
        None => schema,
    }
}

#[tokio::test]
async fn every_described_route_answers_with_a_described_status_and_the_required_fields() {
    let api = Api::start();
    for (base, plane) in [(&api.meta, "meta"), (&api.admin, "admin")] {
        let doc: Value = serde_json::from_str(&checked_in(plane)).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        assert!(paths.contains_key("/api/healthy") && paths.contains_key("/openapi.json"));
        for (path, item) in paths {
            for (method, op) in item.as_object().unwrap() {
                let (status, body) = match method.as_str() {
                    "get" => {
                        let (status, _, body) = get(format!("{base}{path}"), None).await;
                        (status, body)
                    }
                    "post" => {
                        let (status, reply) = api.post(base, path.trim_start_matches("/api/"), "{}".into(), None).await;
                        (status, reply.to_string())
                    }
                    other => panic!("{plane} {path}: unexpected method {other}"),
                };
                let described = &op["responses"][status.to_string()];
                assert!(
                    !described.is_null(),
                    "{plane} {method} {path} answered {status}, which is not described: {body}"
                );
                let response = resolve(&doc, described);
                let Some(schema) = response.pointer("/content/application~1json/schema") else { continue };
                let schema = resolve(&doc, schema);
                let reply: Value = serde_json::from_str(&body).unwrap();
                for field in schema["required"].as_array().into_iter().flatten() {
                    let field = field.as_str().unwrap();
                    assert!(reply.get(field).is_some(), "{plane} {path}: reply lacks required `{field}`: {reply}");
                }
            }
        }
    }
}

/// `python3` with the validator (installed by `infra/install-python-tools.sh`) on its path.
fn python_with_validator() -> Command {
    let tools = repo_root().join(".kvcm/tools/python");
    assert!(
        tools.join("openapi_spec_validator").is_dir(),
        "openapi-spec-validator is missing from {}: run infra/deps.sh (make test does)",
        tools.display()
    );
    let mut cmd = Command::new("python3");
    cmd.env("PYTHONPATH", &tools);
    cmd
}

#[track_caller]
fn assert_success(what: &str, out: std::process::Output) {
    assert!(
        out.status.success(),
        "{what}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn checked_in_descriptions_are_valid_openapi_3_1() {
    let docs = repo_root().join("docs/openapi");
    let out = python_with_validator()
        .args(["-m", "openapi_spec_validator", "--schema", "3.1"])
        .arg(docs.join("meta.json"))
        .arg(docs.join("admin.json"))
        .output()
        .expect("run python3");
    assert_success("openapi-spec-validator rejects docs/openapi", out);
}

/// Validates each exchange's request body (unless `null`: wrong on purpose) against its
/// operation's request schema and its reply against the schema described for its HTTP status.
/// Prints every mismatch; exits 1 if any.
const VALIDATE_EXCHANGES: &str = r##"
import json, sys
from openapi_schema_validator import OAS31Validator
docs = {p: json.load(open(f"{sys.argv[1]}/{p}.json")) for p in ("meta", "admin")}
def resolve(doc, node):
    while isinstance(node, dict) and set(node) == {"$ref"}:
        target = doc
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        node = target
    return node
failures = []
for x in json.load(open(sys.argv[2])):
    doc = docs[x["plane"]]
    op = doc["paths"][x["path"]]["post"]
    checks = []
    if x["request"] is not None:
        checks.append(("request", op["requestBody"]["content"]["application/json"]["schema"], x["request"]))
    response = resolve(doc, op["responses"].get(str(x["status"]), {}))
    if not response:
        failures.append(f'{x["plane"]} {x["path"]}: HTTP {x["status"]} is not described')
        continue
    checks.append((f'HTTP {x["status"]} reply', response["content"]["application/json"]["schema"], x["reply"]))
    for what, schema, instance in checks:
        validator = OAS31Validator(dict(schema, components=doc["components"]))
        for e in validator.iter_errors(instance):
            failures.append(f'{x["plane"]} {x["path"]} {what} at {list(e.absolute_path)}: {e.message}')
print("\n".join(failures))
sys.exit(1 if failures else 0)
"##;

#[tokio::test]
async fn a_realistic_session_conforms_to_the_descriptions() {
    let api = Api::start();
    let root = repo_root().join(".kvcm/test-data").join(unique("openapi"));
    std::fs::create_dir_all(&root).unwrap();
    let (meta, admin) = (api.meta.clone(), api.admin.clone());
    let mut exchanges = Vec::new();
    let mut call = async |base: &str, rpc: &str, request: Value, auth: Option<&str>| {
        let (status, reply) = api.post(base, rpc, request.to_string(), auth).await;
        let plane = if base == meta { "meta" } else { "admin" };
        exchanges.push(json!({"plane": plane, "path": format!("/api/{rpc}"), "request": request,
                              "status": status, "reply": reply}));
        reply
    };
    let storage = json!({"global_unique_name": "files", "check_storage_available_when_open": true,
                         "nfs": {"root_path": format!("{}/", root.display()), "key_count_per_file": 2}});
    assert_eq!(code(&call(&admin, "addStorage", json!({"trace_id": "t", "storage": storage}), None).await), "OK");
    call(&admin, "listStorage", json!({}), None).await;
    let group = json!({"name": "g", "storage_candidates": ["files"], "max_instance_count": "10",
        "quota": {"capacity": 1_000_000_000i64, "quota_config": [{"storage_type": "ST_NFS", "capacity": "900000000"}]},
        "cache_config": {"reclaim_strategy": {"reclaim_policy": 1, "trigger_strategy": {"used_percentage": 0.8},
                                              "delay_before_delete_ms": 10},
                         "data_storage_strategy": "CPS_PREFER_3FS", "meta_indexer_config": {"max_key_count": 5}},
        "user_data": "{}", "version": 1});
    assert_eq!(code(&call(&admin, "createInstanceGroup", json!({"instance_group": group}), None).await), "OK");
    call(&admin, "getInstanceGroup", json!({"name": "g"}), None).await;
    call(&admin, "listInstanceGroup", json!({}), None).await;
    let instance = unique("inst");
    let register = json!({"instance_group": "g", "instance_id": instance, "block_size": 4,
        "location_spec_infos": [{"name": "tp0", "size": 1024}, {"name": "tp1", "size": "1024"}],
        "model_deployment": {"model_name": "m", "dtype": "bf16", "tp_size": 2, "use_mla": false},
        "location_spec_groups": [{"name": "first", "spec_names": ["tp0"]}]});
    assert_eq!(code(&call(&meta, "registerInstance", register.clone(), None).await), "OK");
    call(&admin, "registerInstance", register, None).await;
    call(&meta, "getInstanceInfo", json!({"instance_id": instance}), None).await;
    call(&admin, "getInstanceInfo", json!({"instance_id": instance}), None).await;
    call(&admin, "listInstanceInfo", json!({"instance_group_name": "g"}), None).await;
    let keys = json!([1, "2", "-9223372036854775808", 9223372036854775807i64]);
    let start = call(&meta, "startWriteCache", json!({"instance_id": instance, "block_keys": keys}), None).await;
    assert_eq!(start["locations"].as_array().map(Vec::len), Some(4), "{start}");
    let session = start["write_session_id"].clone();
    let finish = json!({"instance_id": instance, "write_session_id": session, "success_blocks": {"bool_masks": {"values": [true, true, true, false]}}});
    assert_eq!(code(&call(&meta, "finishWriteCache", finish, None).await), "OK");
    call(&meta, "startWriteCache", json!({"instance_id": instance, "token_ids": (0..12).collect::<Vec<i64>>()}), None)
        .await;
    for query in ["QT_PREFIX_MATCH", "QT_BATCH_GET"] {
        let got = call(
            &meta,
            "getCacheLocation",
            json!({"instance_id": instance, "query_type": query, "block_keys": keys}),
            None,
        )
        .await;
        assert_eq!(code(&got), "OK", "{got}");
    }
    call(&meta, "getCacheLocation", json!({"instance_id": instance, "query_type": 3, "block_keys": keys, "sw_size": 2, "block_mask": {"offset": 1}}), None).await;
    call(&meta, "getCacheMeta", json!({"instance_id": instance, "block_keys": keys, "detail_level": 1}), None).await;
    call(&admin, "getCacheMeta", json!({"instance_id": instance, "block_keys": keys}), None).await;
    call(&admin, "getMetrics", json!({}), None).await;
    call(&admin, "checkHealth", json!({}), None).await;
    call(&admin, "getManagerClusterInfo", json!({}), None).await;
    call(&admin, "getLeaderElectorConfig", json!({}), None).await;
    call(&meta, "removeCache", json!({"instance_id": instance, "block_keys": [1]}), None).await;
    call(
        &meta,
        "trimCache",
        json!({"instance_id": instance, "strategy": "TS_TIMESTAMP", "begin_timestamp": 0, "end_timestamp": 1}),
        None,
    )
    .await;
    call(&meta, "getCacheLocation", json!({"instance_id": "no-such-instance"}), None).await;
    call(&admin, "addAccount", json!({"user_name": "root", "password": "s3cret-pass", "role": "ROLE_ADMIN"}), None)
        .await;
    call(
        &admin,
        "addAccount",
        json!({"user_name": "eng", "password": "s3cret-pass", "role": 0}),
        Some("Basic cm9vdDpzM2NyZXQtcGFzcw=="),
    )
    .await;
    call(&admin, "listAccount", json!({}), Some("Bearer root:s3cret-pass")).await;
    call(&admin, "listAccount", json!({}), None).await;
    call(&admin, "listAccount", json!({}), Some("Bearer eng:s3cret-pass")).await;
    call(&admin, "removeInstance", json!({"instance_id": instance}), Some("Bearer root:s3cret-pass")).await;
    // Not JSON of the request's shape: HTTP 400 (the request is not validated, it is wrong on purpose).
    let (status, reply) = api.post(&meta, "getCacheLocation", r#"{"sw_size": "x"}"#.into(), None).await;
    exchanges.push(
        json!({"plane": "meta", "path": "/api/getCacheLocation", "request": null, "status": status, "reply": reply}),
    );
    let statuses: Vec<u64> = exchanges.iter().map(|x| x["status"].as_u64().unwrap()).collect();
    for status in [200, 400, 401, 403] {
        assert!(statuses.contains(&status), "the session should include an HTTP {status} reply: {statuses:?}");
    }
    let file = root.join("exchanges.json");
    std::fs::write(&file, serde_json::to_vec(&exchanges).unwrap()).unwrap();
    let out = python_with_validator()
        .args(["-c", VALIDATE_EXCHANGES])
        .arg(repo_root().join("docs/openapi"))
        .arg(&file)
        .output()
        .expect("run python3");
    assert_success("requests or replies that do not conform to docs/openapi", out);
}
