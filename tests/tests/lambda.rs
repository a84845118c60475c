//! `kvcm-api` as AWS Lambda functions, for real: the `kvcm-api` binary in the Lambda runtime,
//! polling `cargo lambda watch`'s runtime emulator, which turns HTTP requests into API Gateway
//! HTTP API (v2) events ([`LambdaFunction`]). One function per plane, both on the test cluster:
//! the meta and admin smoke with meta auth on, the login back-off per source IP of the request
//! context, the registry and health kept fresh without timers, and the fail-closed starts.

use kvcm_tests::*;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const ADMIN: &str = "Bearer root:root-pass-1";

/// Meta auth on, bootstrap admin `root`, plus `extra`.
fn secured(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let mut env = vec![
        ("KVCM_META_AUTH", "true"),
        ("KVCM_BOOTSTRAP_ADMIN_USER", "root"),
        ("KVCM_BOOTSTRAP_ADMIN_PASSWORD", "root-pass-1"),
    ];
    env.extend_from_slice(extra);
    env
}

/// The admin and meta functions of one fresh namespace.
fn both_planes(extra: &[(&'static str, &'static str)]) -> (LambdaFunction, LambdaFunction) {
    let namespace = unique("ns");
    let admin = LambdaFunction::start(&namespace, "admin", &secured(extra));
    let meta = LambdaFunction::start(&namespace, "meta", &secured(extra));
    (admin, meta)
}

#[track_caller]
fn assert_reply_ok(what: &str, reply: &(u16, Value)) {
    assert_eq!((reply.0, code(&reply.1)), (200, "OK"), "{what}: {}", reply.1);
}

/// Storage `files`, group `g` on it, and a ROLE_USER API key scoped to `g` (its Authorization).
async fn provision(admin: &LambdaFunction) -> String {
    let root = repo_root().join(".kvcm/test-data").join(unique("lambda"));
    std::fs::create_dir_all(&root).unwrap();
    let storage =
        json!({"storage": {"global_unique_name": "files", "nfs": {"root_path": root, "key_count_per_file": 1}}});
    assert_reply_ok("addStorage", &admin.post("addStorage", storage, Some(ADMIN)).await);
    let group = json!({"instance_group": {"name": "g", "storage_candidates": ["files"]}});
    assert_reply_ok("createInstanceGroup", &admin.post("createInstanceGroup", group, Some(ADMIN)).await);
    let key = json!({"name": "engines", "role": "ROLE_USER", "instance_groups": ["g"]});
    let reply = admin.post("createApiKey", key, Some(ADMIN)).await;
    assert_reply_ok("createApiKey", &reply);
    format!("Bearer {}", reply.1["token"].as_str().expect("a token"))
}

/// Registers a fresh instance of group `g` through the meta function; returns its id.
async fn register(meta: &LambdaFunction, key: &str) -> String {
    let instance = unique("inst");
    let registration = json!({"instance_group": "g", "instance_id": instance, "block_size": 4,
        "location_spec_infos": [{"name": "tp0", "size": 64}], "model_deployment": {"model_name": "m", "dtype": "bf16"}});
    assert_reply_ok("registerInstance", &meta.post("registerInstance", registration, Some(key)).await);
    instance
}

#[tokio::test]
async fn the_meta_and_admin_planes_serve_the_smoke_as_two_lambda_functions() {
    let (admin, meta) = both_planes(&[]);
    // The admin plane needs an admin; the meta plane (meta_auth on) a credential.
    assert_eq!(admin.post("listStorage", json!({}), None).await.0, 401);
    let key = provision(&admin).await;
    let storages = admin.post("listStorage", json!({}), Some(ADMIN)).await;
    assert_reply_ok("listStorage", &storages);
    assert!(storages.1.to_string().contains("\"files\""), "{}", storages.1);

    assert_eq!(meta.post("registerInstance", json!({"instance_group": "g"}), None).await.0, 401);
    let instance = register(&meta, &key).await;
    // The admin function sees what the meta function registered (one namespace in Valkey).
    let listed = admin.post("listInstanceInfo", json!({"instance_group": "g"}), Some(ADMIN)).await;
    assert_reply_ok("listInstanceInfo", &listed);
    assert!(listed.1.to_string().contains(&instance), "{}", listed.1);

    let keys = json!([101, 102, 103]);
    let started = meta.post("startWriteCache", json!({"instance_id": instance, "block_keys": keys}), Some(&key)).await;
    assert_reply_ok("startWriteCache", &started);
    let finish = json!({"instance_id": instance, "write_session_id": started.1["write_session_id"], "success_blocks": {"offset": 3}});
    assert_reply_ok("finishWriteCache", &meta.post("finishWriteCache", finish, Some(&key)).await);
    let read = json!({"instance_id": instance, "query_type": "QT_PREFIX_MATCH", "block_keys": [101, 102, 103, 104]});
    let found = meta.post("getCacheLocation", read, Some(&key)).await;
    assert_reply_ok("getCacheLocation", &found);
    let locations = found.1["locations"].as_array().expect("locations");
    assert_eq!(locations.len(), 3, "the three written blocks match, the fourth does not: {}", found.1);
    for location in locations {
        let uri = location["location_specs"][0]["uri"].as_str().unwrap();
        assert!(uri.starts_with("file://files/"), "{uri}");
    }

    for function in [&admin, &meta] {
        assert_eq!(function.get("/api/healthy").await, (200, r#"{"status":"OK"}"#.to_string()));
    }
    let (status, metrics) = admin.get("/metrics").await;
    assert_eq!(status, 200, "GET /metrics through the emulator: {metrics}");
    assert!(metrics.contains("plane=\"admin\""), "the admin function's own requests are counted:\n{metrics}");
}

#[tokio::test]
async fn every_invocation_shares_the_valkey_connections_of_the_cold_start() {
    let (admin, meta) = both_planes(&[]);
    let key = provision(&admin).await;
    let instance = register(&meta, &key).await;
    let read = json!({"instance_id": instance, "query_type": "QT_PREFIX_MATCH", "block_keys": [1, 2]});
    assert_reply_ok("getCacheLocation", &meta.post("getCacheLocation", read.clone(), Some(&key)).await);
    let at_first = meta.valkey_connections();
    assert!(!at_first.is_empty(), "the meta function holds no Valkey connection after an invocation");
    // Reads, writes and registry refreshes (the pauses let registry_refresh_ms, 200 ms, pass, so
    // some invocations refresh the registry first).
    for round in 0..6 {
        let write = json!({"instance_id": instance, "block_keys": [100 + round]});
        assert_reply_ok("startWriteCache", &meta.post("startWriteCache", write, Some(&key)).await);
        assert_reply_ok("getCacheLocation", &meta.post("getCacheLocation", read.clone(), Some(&key)).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(meta.valkey_connections(), at_first, "an invocation opened or closed a Valkey connection");
}

#[tokio::test]
async fn the_login_backoff_counts_each_source_ip_of_the_request_context_separately() {
    let namespace = unique("ns");
    let settings = [
        ("KVCM_AUTH_BACKOFF_AFTER", "3"),
        ("KVCM_AUTH_BACKOFF_BASE_MS", "600000"),
        ("KVCM_AUTH_BACKOFF_MAX_MS", "600000"),
        // As the Terraform sets it for the servers behind an ALB: in Lambda it must be ignored,
        // or a client-written x-forwarded-for would choose the bucket (the end of this test).
        ("KVCM_CLIENT_IP_HEADER", "x-forwarded-for"),
    ];
    let meta = LambdaFunction::start(&namespace, "meta", &secured(&settings));
    let (attacker, other) = ("203.0.113.10", "203.0.113.11");
    let body = || json!({"instance_id": "no-such-instance", "block_keys": [1]});
    let wrong = [("authorization", "Bearer mallory:guess-0000")];
    let right = [("authorization", ADMIN)];

    // Guesses of a user that does not exist, so only the attacker's address (and that name) back off.
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(meta.invoke_from(attacker, "getCacheLocation", body(), &wrong).await.0);
    }
    assert_eq!(statuses, [401, 401, 401, 429], "three failures, then the back-off");
    // The attacker's address is backing off, even with the right password...
    let (status, _, retry) = meta.invoke_from(attacker, "getCacheLocation", body(), &right).await;
    assert_eq!((status, retry.is_some()), (429, true));
    // ...but another source IP is a bucket of its own: root gets in from there.
    let (status, reply, _) = meta.invoke_from(other, "getCacheLocation", body(), &right).await;
    assert_eq!((status, code(&reply)), (200, "INSTANCE_NOT_EXIST"), "{reply}");

    // A client-written x-forwarded-for does not move a request into another bucket: the
    // emulator's function URL events carry sourceIp 127.0.0.1, and that is what counts.
    let mut req = reqwest::Client::new()
        .post(format!("{}/api/getCacheLocation", meta.url))
        .header("content-type", "application/json")
        .header("x-forwarded-for", attacker)
        .header("authorization", ADMIN)
        .body(body().to_string());
    req = req.timeout(Duration::from_secs(60));
    assert_eq!(req.send().await.unwrap().status().as_u16(), 200);
}

#[tokio::test]
async fn a_revoked_api_key_is_refused_on_a_later_invocation_without_any_timer() {
    let (admin, meta) = both_planes(&[]);
    let key = provision(&admin).await;
    // A registered instance: asking for an unknown one would refresh the registry by itself.
    let instance = register(&meta, &key).await;
    let body = json!({"instance_id": instance, "block_keys": [1]});
    assert_eq!(meta.post("getCacheLocation", body.clone(), Some(&key)).await.0, 200);
    let listed = admin.post("listApiKeys", json!({}), Some(ADMIN)).await;
    let key_id = listed.1["api_keys"][0]["key_id"].as_str().expect("a key id").to_string();
    assert_reply_ok("revokeApiKey", &admin.post("revokeApiKey", json!({"key_id": key_id}), Some(ADMIN)).await);

    // No background task runs in Lambda mode: only the refresh at the start of an invocation
    // (once the copy is older than registry_refresh_ms) can show the meta function the
    // revocation. Without it the key would keep passing, then get 503 once the copy is too old.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    let refused = loop {
        let status = meta.post("getCacheLocation", body.clone(), Some(&key)).await.0;
        seen.push(status);
        if status == 401 || Instant::now() > deadline {
            break status == 401;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(refused, "the revoked key was never refused: {seen:?}");
    assert!(seen.iter().all(|s| *s == 200 || *s == 401), "{seen:?}");
}

#[tokio::test]
async fn healthy_reports_an_outage_and_the_recovery_instead_of_a_stale_verdict() {
    let mut solo = SoloValkey::start();
    let env = [
        ("KVCM_VALKEY_URL", solo.url.as_str()),
        ("KVCM_ALLOW_ANONYMOUS_ADMIN", "true"),
        ("KVCM_HEALTH_CHECK_INTERVAL_MS", "100"),
        ("KVCM_VALKEY_TIMEOUT_MS", "500"),
    ];
    let meta = LambdaFunction::start(&unique("ns"), "meta", &env);
    // No check has run before the first probe: the probe itself runs one.
    assert_eq!(meta.get("/api/healthy").await.0, 200);
    solo.kill();
    let answers = |want: u16| {
        let meta = &meta;
        async move {
            eventually(Duration::from_secs(20), || async move {
                let (status, body) = meta.get("/api/healthy").await;
                (status == want).then_some(body)
            })
            .await
        }
    };
    let down = answers(503).await.expect("/api/healthy kept answering 200 with Valkey down");
    assert!(down.contains("UNHEALTHY"), "{down}");
    solo.restart();
    assert!(answers(200).await.is_some(), "/api/healthy did not recover");
}

#[tokio::test]
async fn the_admin_plane_of_a_lambda_function_stays_closed_when_the_registry_is_lost() {
    let namespace = unique("ns");
    let admin = LambdaFunction::start(&namespace, "admin", &secured(&[]));
    assert_reply_ok("listStorage", &admin.post("listStorage", json!({}), Some(ADMIN)).await);
    // The registry is gone from Valkey (a flush, a restore): a loopback server would open its
    // admin plane as on a fresh install; a Lambda function is never on loopback.
    let mut conn = valkey().await;
    for key in dump_namespace(&namespace).await.into_keys() {
        let _: () = redis::cmd("DEL").arg(&key).query_async(&mut conn).await.unwrap();
    }
    let (status, reply) = admin.post("listStorage", json!({}), None).await;
    assert_eq!(status, 401, "{reply}");
    assert!(message(&reply).contains("no admin account exists"), "{reply}");
}

#[tokio::test]
async fn a_lambda_function_refuses_to_start_without_a_plane_an_admin_or_a_credential() {
    let no_plane = lambda_start_failure(&unique("ns"), &[]);
    assert_ne!(no_plane.code, Some(0));
    assert!(no_plane.stderr.contains("lambda_plane is empty"), "{}", no_plane.stderr);

    // bind is loopback (the default), but a function is reachable from wherever its trigger is.
    let no_admin = lambda_start_failure(&unique("ns"), &[("KVCM_LAMBDA_PLANE", "admin")]);
    assert_ne!(no_admin.code, Some(0));
    assert!(
        no_admin.stderr.contains("serve the admin plane as an AWS Lambda function")
            && no_admin.stderr.contains("allow_anonymous_admin"),
        "{}",
        no_admin.stderr
    );

    let no_credential = lambda_start_failure(
        &unique("ns"),
        &[("KVCM_LAMBDA_PLANE", "meta"), ("KVCM_META_AUTH", "true"), ("KVCM_ALLOW_ANONYMOUS_ADMIN", "true")],
    );
    assert!(
        no_credential.stderr.contains("meta_auth = true but no account or API key exists"),
        "{}",
        no_credential.stderr
    );

    // And the other way round: lambda_plane outside the Lambda runtime is a mistake.
    let server = Api::try_start(&unique("ns"), &[("KVCM_LAMBDA_PLANE", "meta")]).err().expect("must not start");
    assert!(server.stderr.contains("not running in AWS Lambda"), "{}", server.stderr);
}

/// Warm invocations timed after each cold one (their median is one sample).
const WARM_INVOCATIONS: usize = 50;

/// Not part of `make test` (timing belongs in docs/benchmarks.md, not in tests): cold starts of
/// the release binary behind the emulator. Each run queues the first request at a fresh
/// emulator, then spawns a fresh function process: the client-observed time from spawn to the
/// response is what a cold invocation costs (init + first invocation), and the binary's own log
/// splits it; then [`WARM_INVOCATIONS`] more of the same request measure a warm invocation, client
/// observed through the same emulator. The meta function's first request is a getCacheLocation with an API key (a prefix
/// hit); the admin function's a listStorage with an account (one Argon2 verification). Run with
/// `cargo build --release -p kvcm-api && KVCM_TEST_VALKEY_URL=… cargo nextest run -p kvcm-tests --test lambda
/// --run-ignored ignored-only --no-capture cold_start`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: run it on purpose (see docs/benchmarks.md)"]
async fn cold_start_benchmark() {
    let release = repo_root().join("target/release/kvcm-api");
    assert!(release.exists(), "build it first: cargo build --release -p kvcm-api");
    let runs: usize = std::env::var("KVCM_COLD_START_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(9);
    let env = secured(&[("KVCM_LOG_FORMAT", "json")]);
    // One namespace with a storage, a group, an engine key and an instance holding 16 blocks.
    let namespace = unique("ns");
    let admin = LambdaFunction::start(&namespace, "admin", &env);
    let key = provision(&admin).await;
    let meta = LambdaFunction::start(&namespace, "meta", &env);
    let instance = register(&meta, &key).await;
    let blocks: Vec<i64> = (1..=16).collect();
    let started =
        meta.post("startWriteCache", json!({"instance_id": instance, "block_keys": blocks}), Some(&key)).await;
    let finish = json!({"instance_id": instance, "write_session_id": started.1["write_session_id"], "success_blocks": {"offset": 16}});
    assert_reply_ok("finishWriteCache", &meta.post("finishWriteCache", finish, Some(&key)).await);
    drop((admin, meta));

    let fields = [
        "valkey_connect_ms",
        "registry_load_ms",
        "router_build_ms",
        "first_invocation_ms",
        "process_start_to_first_response_ms",
    ];
    for plane in ["meta", "admin"] {
        let (rpc, body, auth) = match plane {
            "meta" => (
                "getCacheLocation",
                json!({"instance_id": instance, "query_type": "QT_PREFIX_MATCH", "block_keys": blocks}),
                key.clone(),
            ),
            _ => ("listStorage", json!({}), ADMIN.to_string()),
        };
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); fields.len() + 2];
        for _ in 0..runs {
            let emulator = LambdaEmulator::start(&namespace);
            let url = format!("{}/api/{rpc}", emulator.function_url());
            let request = reqwest::Client::new()
                .post(url)
                .header("content-type", "application/json")
                .header("authorization", &auth);
            let pending = tokio::spawn(request.body(body.to_string()).timeout(Duration::from_secs(60)).send());
            let spawned = Instant::now();
            let function =
                LambdaFunction::start_on(emulator, &release, &namespace, plane, &env).expect("the function starts");
            let response = pending.await.unwrap().expect("the first response");
            let observed = spawned.elapsed();
            let reply: Value = response.json().await.unwrap();
            assert_eq!(code(&reply), "OK", "{reply}");
            // Warm invocations of the same environment: same request, serially, through the
            // same emulator (so both figures include its HTTP hop and event conversion).
            let mut warm = Vec::with_capacity(WARM_INVOCATIONS);
            for _ in 0..WARM_INVOCATIONS {
                let began = Instant::now();
                let reply = function.post(rpc, body.clone(), Some(&auth)).await;
                warm.push(began.elapsed().as_secs_f64() * 1e3);
                assert_reply_ok(rpc, &reply);
            }
            warm.sort_by(|a, b| a.total_cmp(b));
            samples[fields.len() + 1].push(warm[warm.len() / 2]);
            let line = eventually_line(&function.log, "cold start").await;
            let logged: Value = serde_json::from_str(&line).expect("a JSON log line");
            for (i, f) in fields.iter().enumerate() {
                samples[i].push(logged[f].as_f64().unwrap_or(f64::NAN));
            }
            samples[fields.len()].push(observed.as_secs_f64() * 1e3);
        }
        let mut report = format!("{plane}: runs={runs}");
        for (i, name) in
            fields.iter().chain(["client_observed_spawn_to_response_ms", "warm_invocation_p50_ms"].iter()).enumerate()
        {
            let mut v = samples[i].clone();
            v.sort_by(|a, b| a.total_cmp(b));
            report += &format!(" {name}={:.1} (min {:.1}, max {:.1})", v[v.len() / 2], v[0], v[v.len() - 1]);
        }
        println!("{report}");
    }
}

/// The first line of a log file containing `needle`, polling until it is written.
async fn eventually_line(log: &std::path::Path, needle: &str) -> String {
    eventually(Duration::from_secs(10), || async {
        std::fs::read_to_string(log).ok()?.lines().find(|l| l.contains(needle)).map(String::from)
    })
    .await
    .unwrap_or_else(|| panic!("no line with {needle:?} in {}", log.display()))
}
