//! Black-box security tests (docs/security.md), each through real kvcm-api processes on the real
//! test cluster: group-scoped engine credentials, fail-closed starts, password guessing, secrets
//! kept out of output, request bounds, and no amplification of unknown names.

use kvcm_tests::*;
use serde_json::{Value, json};
use std::net::IpAddr;
use std::time::Duration;

const ADMIN: &str = "Bearer root:root-pass-1";

/// A frontend with meta auth on and a bootstrap admin `root`.
fn secured(extra: &[(&str, &str)]) -> Api {
    let mut env = vec![
        ("KVCM_META_AUTH", "true"),
        ("KVCM_BOOTSTRAP_ADMIN_USER", "root"),
        ("KVCM_BOOTSTRAP_ADMIN_PASSWORD", "root-pass-1"),
    ];
    env.extend_from_slice(extra);
    Api::start_with(&unique("ns"), &env)
}

async fn admin(api: &Api, rpc: &str, body: Value) -> Value {
    let (status, reply) = api.post(&api.admin, rpc, body.to_string(), Some(ADMIN)).await;
    assert_eq!((status, code(&reply)), (200, "OK"), "{rpc}: {reply}");
    reply
}

fn registration(group: &str, id: &str) -> Value {
    json!({"instance_group": group, "instance_id": id, "block_size": 4,
           "location_spec_infos": [{"name": "tp0", "size": 64}],
           "model_deployment": {"model_name": "m", "dtype": "bf16"}})
}

/// Storage `s`, groups `a` and `b`, instance `ia` in `a` and `ib` in `b`.
async fn two_groups(api: &Api) {
    let root = repo_root().join(".kvcm/test-data").join(unique("sec"));
    admin(api, "addStorage", json!({"storage": {"global_unique_name": "s", "nfs": {"root_path": root}}})).await;
    for g in ["a", "b"] {
        admin(api, "createInstanceGroup", json!({"instance_group": {"name": g, "storage_candidates": ["s"]}})).await;
    }
    admin(api, "registerInstance", registration("a", "ia")).await;
    admin(api, "registerInstance", registration("b", "ib")).await;
}

async fn api_key(api: &Api, groups: Value) -> String {
    let r =
        admin(api, "createApiKey", json!({"name": "engines", "role": "ROLE_USER", "instance_groups": groups})).await;
    r["token"].as_str().unwrap().to_string()
}

/// Every meta RPC, aimed at `instance` of `group`.
fn meta_calls(group: &str, instance: &str) -> Vec<(&'static str, Value)> {
    let keys = json!([11, 12]);
    vec![
        ("registerInstance", registration(group, instance)),
        ("getInstanceInfo", json!({"instance_id": instance})),
        ("getCacheLocation", json!({"instance_id": instance, "query_type": "QT_BATCH_GET", "block_keys": keys})),
        ("getCacheMeta", json!({"instance_id": instance, "block_keys": keys})),
        ("startWriteCache", json!({"instance_id": instance, "block_keys": keys})),
        (
            "finishWriteCache",
            json!({"instance_id": instance, "write_session_id": "0000000000000001", "success_blocks": {"offset": 0}}),
        ),
        ("removeCache", json!({"instance_id": instance, "block_keys": keys})),
        ("trimCache", json!({"instance_id": instance, "strategy": "TS_REMOVE_ALL_CACHE"})),
    ]
}

#[tokio::test]
async fn an_engine_key_scoped_to_group_a_is_refused_on_every_meta_rpc_of_group_b_and_works_on_a() {
    let api = secured(&[]);
    two_groups(&api).await;
    let key = format!("Bearer {}", api_key(&api, json!(["a"])).await);
    for (rpc, body) in meta_calls("b", "ib") {
        let before = dump_namespace(&api.namespace).await;
        let (status, reply) = api.post(&api.meta, rpc, body.to_string(), Some(&key)).await;
        assert_eq!(status, 403, "{rpc} on group b: {reply}");
        assert_eq!(code(&reply), "INVALID_ARGUMENT", "{reply}");
        assert!(message(&reply).contains("not scoped"), "{reply}");
        assert!(!message(&reply).contains("'b'"), "the refusal does not reveal the group: {reply}");
        assert_eq!(dump_namespace(&api.namespace).await, before, "{rpc} was refused but changed state");
    }
    // Registering a new instance into b, or re-registering b's instance under a, is refused too.
    for body in [registration("b", "new"), registration("a", "ib")] {
        let (status, reply) = api.post(&api.meta, "registerInstance", body.to_string(), Some(&key)).await;
        assert_eq!(status, 403, "{reply}");
    }
    for (rpc, body) in meta_calls("a", "ia") {
        let (status, reply) = api.post(&api.meta, rpc, body.to_string(), Some(&key)).await;
        assert_eq!(status, 200, "{rpc} on group a: {reply}");
        if rpc != "finishWriteCache" {
            assert_eq!(code(&reply), "OK", "{rpc}: {reply}");
        }
    }
    // An engine key is no admin, and an unknown key is nobody.
    let (status, _) = api.post(&api.admin, "listStorage", "{}".into(), Some(&key)).await;
    assert_eq!(status, 403);
    let forged = format!("Bearer kvcm_{}_{}", "0".repeat(16), "0".repeat(64));
    assert_eq!(
        api.post(&api.meta, "getInstanceInfo", json!({"instance_id": "ia"}).to_string(), Some(&forged)).await.0,
        401
    );
    // A key scoped to every group works on both.
    let fleet = format!("Bearer {}", api_key(&api, json!(["*"])).await);
    for id in ["ia", "ib"] {
        assert_ok(&api.post(&api.meta, "getInstanceInfo", json!({"instance_id": id}).to_string(), Some(&fleet)).await);
    }
}

#[tokio::test]
async fn accounts_carry_scopes_too_and_tair_shaped_accounts_get_none() {
    let api = secured(&[]);
    two_groups(&api).await;
    // Tair's request shape (no instance_groups) is accepted; the account may act on no group.
    admin(&api, "addAccount", json!({"user_name": "tair", "password": "tair-pass-1", "role": "ROLE_USER"})).await;
    admin(
        &api,
        "addAccount",
        json!({"user_name": "eng", "password": "eng-pass-1", "role": "ROLE_USER", "instance_groups": ["a"]}),
    )
    .await;
    let get = |id: &str| json!({"instance_id": id}).to_string();
    assert_eq!(api.post(&api.meta, "getInstanceInfo", get("ia"), Some("Bearer tair:tair-pass-1")).await.0, 403);
    assert_eq!(base64_encode("eng:eng-pass-1"), "ZW5nOmVuZy1wYXNzLTE=");
    assert_ok(&api.post(&api.meta, "getInstanceInfo", get("ia"), Some("Basic ZW5nOmVuZy1wYXNzLTE=")).await);
    assert_eq!(api.post(&api.meta, "getInstanceInfo", get("ib"), Some("Bearer eng:eng-pass-1")).await.0, 403);
    // Admins act on every group of the meta plane.
    assert_ok(&api.post(&api.meta, "getInstanceInfo", get("ib"), Some(ADMIN)).await);
    let (_, list) = api.post(&api.admin, "listAccount", "{}".into(), Some(ADMIN)).await;
    let eng = list["accounts"].as_array().unwrap().iter().find(|a| a["user_name"] == "eng").unwrap().clone();
    assert_eq!(eng["instance_groups"], json!(["a"]));
    // Scopes on an admin would be ignored, so they are refused; so are malformed scopes.
    for bad in [
        json!({"user_name": "x", "password": "long-enough", "role": "ROLE_ADMIN", "instance_groups": ["a"]}),
        json!({"user_name": "x", "password": "long-enough", "role": "ROLE_USER", "instance_groups": ["a/b"]}),
    ] {
        let before = dump_namespace(&api.namespace).await;
        assert_err(
            &api.post(&api.admin, "addAccount", bad.to_string(), Some(ADMIN)).await,
            "INVALID_ARGUMENT",
            "instance_groups",
        );
        assert_eq!(dump_namespace(&api.namespace).await, before);
    }
}

#[tokio::test]
async fn api_keys_are_shown_once_stored_as_digests_and_revocable() {
    let api = secured(&[]);
    two_groups(&api).await;
    let r =
        admin(&api, "createApiKey", json!({"name": "fleet-a", "role": "ROLE_USER", "instance_groups": ["a"]})).await;
    let token = r["token"].as_str().unwrap().to_string();
    let id = r["api_key"]["key_id"].as_str().unwrap().to_string();
    assert!(token.starts_with("kvcm_") && token.contains(&id), "{r}");
    let list = admin(&api, "listApiKeys", json!({})).await;
    assert_eq!(list["api_keys"][0]["key_id"], id.as_str());
    assert_eq!(list["api_keys"][0]["instance_groups"], json!(["a"]));
    let secret = token.rsplit('_').next().unwrap();
    assert!(!list.to_string().contains(secret), "listApiKeys shows no secret");
    let stored: String = dump_namespace(&api.namespace).await.values().cloned().collect();
    assert!(!stored.contains(secret), "the token is not stored in Valkey");

    // Clients that only speak HTTP Basic (Tair's Python connector, through ~/.netrc) send the
    // key as the password.
    let basic = format!("Basic {}", base64_encode(&format!("apikey:{token}")));
    let get_ia = json!({"instance_id": "ia"}).to_string();
    assert_ok(&api.post(&api.meta, "getInstanceInfo", get_ia.clone(), Some(&basic)).await);
    assert_eq!(
        api.post(&api.meta, "getInstanceInfo", json!({"instance_id": "ib"}).to_string(), Some(&basic)).await.0,
        403
    );
    // A second frontend knows the new key at once (it refreshes on an unknown key id).
    let other = Api::start_with(&api.namespace, &[("KVCM_META_AUTH", "true"), ("KVCM_REGISTRY_REFRESH_MS", "60000")]);
    let bearer = format!("Bearer {token}");
    let get = json!({"instance_id": "ia"}).to_string();
    assert_ok(&other.post(&other.meta, "getInstanceInfo", get.clone(), Some(&bearer)).await);
    admin(&api, "revokeApiKey", json!({"key_id": id})).await;
    assert_eq!(api.post(&api.meta, "getInstanceInfo", get.clone(), Some(&bearer)).await.0, 401);
    assert_err(
        &api.post(&api.admin, "revokeApiKey", json!({"key_id": id}).to_string(), Some(ADMIN)).await,
        "INVALID_ARGUMENT",
        "does not exist",
    );
    assert_err(
        &api.post(&api.admin, "revokeApiKey", json!({"key_id": "../x"}).to_string(), Some(ADMIN)).await,
        "INVALID_ARGUMENT",
        "16 hex digits",
    );
}

#[tokio::test]
async fn unsafe_configurations_refuse_to_start_and_say_why() {
    // Meta auth with no credential anywhere.
    let failed = Api::try_start(&unique("ns"), &[("KVCM_META_AUTH", "true")]).err().expect("must not start");
    assert!(failed.stderr.contains("meta_auth = true but no account or API key exists"), "{}", failed.stderr);
    // An admin plane beyond loopback with no admin.
    let exposed = [("KVCM_BIND", "0.0.0.0")];
    let failed = Api::try_start(&unique("ns"), &exposed).err().expect("must not start");
    assert!(
        failed.stderr.contains("not loopback") && failed.stderr.contains("allow_anonymous_admin"),
        "{}",
        failed.stderr
    );
    // A bootstrap admin user without a password.
    let failed = Api::try_start(&unique("ns"), &[("KVCM_BOOTSTRAP_ADMIN_USER", "root")]).err().expect("must not start");
    assert!(failed.stderr.contains("KVCM_BOOTSTRAP_ADMIN_PASSWORD"), "{}", failed.stderr);

    // Explicitly accepted: starts, and the admin plane is open.
    let open = Api::start_with(&unique("ns"), &[exposed[0], ("KVCM_ALLOW_ANONYMOUS_ADMIN", "true")]);
    assert_ok(&open.admin("listStorage", json!({})).await);
    // Only the meta plane exposed, the admin plane on loopback: still refused without an admin.
    let failed = Api::try_start(&unique("ns"), &[exposed[0], ("KVCM_ADMIN_BIND", "127.0.0.1")]).err().expect("refused");
    assert!(failed.stderr.contains("0.0.0.0 (not loopback)"), "{}", failed.stderr);
    // A bootstrap admin from a secret file: starts, and the admin plane requires it.
    let dir = repo_root().join(".kvcm/test-tmp").join(unique("secret"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("admin-password");
    std::fs::write(&file, "file-pass-1\n").unwrap();
    let ns = unique("ns");
    let boot = [
        exposed[0],
        ("KVCM_BOOTSTRAP_ADMIN_USER", "ops"),
        ("KVCM_BOOTSTRAP_ADMIN_PASSWORD_FILE", file.to_str().unwrap()),
    ];
    let api = Api::start_with(&ns, &boot);
    assert_eq!(api.admin("listStorage", json!({})).await.0, 401);
    assert_ok(&api.post(&api.admin, "listStorage", "{}".into(), Some("Bearer ops:file-pass-1")).await);
    // Restarting with another bootstrap password never changes the existing admin.
    std::fs::write(&file, "changed-pass-2\n").unwrap();
    let again = Api::start_with(&ns, &boot);
    assert_ok(&again.post(&again.admin, "listStorage", "{}".into(), Some("Bearer ops:file-pass-1")).await);
    // With meta auth on, a meta plane with no credential that passes refuses every request.
    let meta = secured(&[]);
    assert_eq!(meta.meta("getInstanceInfo", json!({"instance_id": "x"})).await.0, 401);
}

#[tokio::test]
async fn unknown_users_cost_what_wrong_passwords_cost() {
    let api = secured(&[]);
    let checks = "kvcm_auth_password_checks_total";
    let body = json!({"instance_id": "x"}).to_string();
    let start = api.metric(checks).await;
    let (s1, wrong) = api.post(&api.meta, "getInstanceInfo", body.clone(), Some("Bearer root:not-the-pass")).await;
    assert_eq!(api.metric(checks).await, start + 1.0, "a wrong password runs Argon2");
    let (s2, unknown) = api.post(&api.meta, "getInstanceInfo", body, Some("Bearer nobody:not-the-pass")).await;
    assert_eq!(api.metric(checks).await, start + 2.0, "an unknown user runs the same Argon2 verification");
    assert_eq!((s1, s2), (401, 401));
    assert_eq!(wrong["header"]["status"], unknown["header"]["status"], "the replies are the same");
}

#[tokio::test]
async fn guessing_backs_off_across_frontends_while_legitimate_logins_still_succeed() {
    let settings = [
        ("KVCM_AUTH_BACKOFF_AFTER", "3"),
        ("KVCM_AUTH_BACKOFF_BASE_MS", "600000"),
        ("KVCM_AUTH_BACKOFF_MAX_MS", "600000"),
    ];
    let api = secured(&settings);
    admin(&api, "addAccount", json!({"user_name": "ops", "password": "ops-pass-1", "role": "ROLE_ADMIN"})).await;
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let (legit, attacker, elsewhere) = (ip("127.0.0.1"), ip("127.0.0.2"), ip("127.0.0.3"));
    let list = || "{}".to_string();
    // root has logged in from its usual address before the attack.
    assert_eq!(api.post_from(legit, &api.admin, "listStorage", list(), Some(ADMIN)).await.0, 200);

    let checks = "kvcm_auth_password_checks_total";
    let before = api.metric(checks).await;
    let mut statuses = Vec::new();
    for i in 0..12 {
        let guess = format!("Bearer root:guess-{i:04}");
        let (status, reply, retry) = api.post_from(attacker, &api.admin, "listStorage", list(), Some(&guess)).await;
        if status == 429 {
            let wait: u64 = retry.expect("429 carries Retry-After").parse().unwrap();
            assert!(wait > 0 && wait <= 600, "{wait}");
            assert_eq!(code(&reply), "INVALID_ARGUMENT", "{reply}");
        }
        statuses.push(status);
    }
    assert_eq!(&statuses[..3], &[401, 401, 401], "{statuses:?}");
    assert!(statuses[3..].iter().all(|s| *s == 429), "{statuses:?}");
    assert_eq!(api.metric(checks).await, before + 3.0, "backed-off guesses never reach Argon2");
    // The attacker's address is blocked even with the right password.
    assert_eq!(api.post_from(attacker, &api.admin, "listStorage", list(), Some(ADMIN)).await.0, 429);

    // Another frontend (no cache) shares the counters: root from its usual address still gets
    // in, another admin gets in from anywhere, and root from a new address waits.
    let fresh = Api::start_with(&api.namespace, &[settings[0], settings[1], settings[2], ("KVCM_META_AUTH", "true")]);
    assert_eq!(fresh.post_from(legit, &fresh.admin, "listStorage", list(), Some(ADMIN)).await.0, 200);
    let ops = "Bearer ops:ops-pass-1";
    assert_eq!(fresh.post_from(elsewhere, &fresh.admin, "listStorage", list(), Some(ops)).await.0, 200);
    let (status, _, retry) = fresh.post_from(elsewhere, &fresh.admin, "listStorage", list(), Some(ADMIN)).await;
    assert_eq!((status, retry.is_some()), (429, true));
}

#[tokio::test]
async fn no_secret_appears_in_anything_the_binaries_print() {
    const SECRET: &str = "Sup3rS3cretPw";
    let unreachable = format!("redis://kvuser:{SECRET}@127.0.0.1:1");
    let wrong_auth = valkey_url().replace("redis://", &format!("redis://kvuser:{SECRET}@"));
    let malformed = format!("http://kvuser:{SECRET}@127.0.0.1:1");
    let mut printed = String::new();
    for url in [&unreachable, &wrong_auth, &malformed] {
        let env = [("KVCM_VALKEY_URL", url.as_str()), ("KVCM_VALKEY_CONNECT_TIMEOUT_MS", "500")];
        let failed = Api::try_start(&unique("ns"), &env).err().expect("must not start");
        printed += &failed.stderr;
        printed += &run_to_exit("kvcm-worker", &env);
    }
    assert!(printed.contains("kvuser:***@"), "the URL is shown, redacted:\n{printed}");
    // The Valkey password given the documented ways, from the environment and from a file, with
    // Valkey unreachable and with Valkey refusing it (the test cluster has no password set).
    let file = repo_root().join(".kvcm/test-tmp").join(unique("valkey-password"));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, format!("{SECRET}\n")).unwrap();
    let cluster = valkey_url();
    let sources: [&[(&str, &str)]; 3] = [
        &[("KVCM_VALKEY_URL", "redis://127.0.0.1:1"), ("KVCM_VALKEY_PASSWORD", SECRET)],
        &[("KVCM_VALKEY_URL", &cluster), ("KVCM_VALKEY_PASSWORD", SECRET)],
        &[
            ("KVCM_VALKEY_URL", &cluster),
            ("KVCM_VALKEY_USERNAME", "kvuser"),
            ("KVCM_VALKEY_PASSWORD_FILE", file.to_str().unwrap()),
        ],
    ];
    for source in sources {
        let mut env = source.to_vec();
        env.push(("KVCM_VALKEY_CONNECT_TIMEOUT_MS", "500"));
        let failed = Api::try_start(&unique("ns"), &env).err().expect("must not start");
        printed += &failed.stderr;
        printed += &run_to_exit("kvcm-worker", &env);
    }
    assert!(printed.contains("(password from KVCM_VALKEY_PASSWORD)"), "the source is named:\n{printed}");
    assert!(printed.contains("(password from valkey_password_file"), "the source is named:\n{printed}");
    // The bootstrap password, and passwords tried against a running server.
    let api = Api::start_with(
        &unique("ns"),
        &[
            ("KVCM_BOOTSTRAP_ADMIN_USER", "root"),
            ("KVCM_BOOTSTRAP_ADMIN_PASSWORD", SECRET),
            ("KVCM_ACCESS_LOG", "true"),
        ],
    );
    let (status, _) = api.post(&api.admin, "listStorage", "{}".into(), Some(&format!("Bearer root:{SECRET}x"))).await;
    assert_eq!(status, 401);
    assert_ok(&api.post(&api.admin, "listStorage", "{}".into(), Some(&format!("Bearer root:{SECRET}"))).await);
    let short = Api::try_start(
        &unique("ns"),
        &[("KVCM_BOOTSTRAP_ADMIN_USER", "root"), ("KVCM_BOOTSTRAP_ADMIN_PASSWORD", "Sh0rt")],
    )
    .err()
    .expect("a too short bootstrap password must not start");
    assert!(short.stderr.contains("min_password_length") && !short.stderr.contains("Sh0rt"), "{}", short.stderr);
    let log = std::fs::read_to_string(&api.log).unwrap();
    printed += &log;
    assert!(log.contains("failed login"), "{log}");
    assert!(!printed.contains(SECRET), "a secret was printed:\n{printed}");
}

/// Runs a binary of the workspace against the test cluster until it exits (it must, within 30 s);
/// returns everything it printed.
fn run_to_exit(bin: &str, env: &[(&str, &str)]) -> String {
    let mut cmd = std::process::Command::new(bin_path(bin));
    cmd.env("KVCM_NAMESPACE", unique("ns")).env("KVCM_WORKER__METRICS_PORT", "0");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run");
    assert!(!out.status.success(), "{bin} should have failed");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[tokio::test]
async fn every_bound_is_refused_with_invalid_argument_before_anything_changes() {
    let limits = [
        ("KVCM_MAX_SPECS_PER_INSTANCE", "4"),
        ("KVCM_MAX_SPEC_GROUPS_PER_INSTANCE", "2"),
        ("KVCM_MAX_NAME_BYTES", "16"),
        ("KVCM_MAX_INSTANCE_ID_BYTES", "24"),
        ("KVCM_MAX_STRING_BYTES", "100"),
        ("KVCM_MAX_LIST_ITEMS", "3"),
        ("KVCM_MAX_GROUP_BYTES", "2048"),
        ("KVCM_MAX_KEYS_PER_REQUEST", "64"),
        ("KVCM_MAX_TOKEN_IDS_PER_REQUEST", "100"),
        ("KVCM_MAX_LOCATION_SPECS_PER_RESPONSE", "40"),
    ];
    let api = Api::start_with(&unique("ns"), &limits);
    let fx = Fixture::on(api, &[("tp0", 64), ("tp1", 64)], 1, json!({})).await;
    let api = &fx.api;
    let specs = |n: usize| (0..n).map(|i| json!({"name": format!("tp{i}"), "size": 8})).collect::<Vec<_>>();
    let reg = |f: &dyn Fn(&mut Value)| {
        let mut r = json!({"instance_group": "g", "instance_id": "bounded", "block_size": 4, "location_spec_infos": specs(2),
                           "model_deployment": {"model_name": "m", "dtype": "bf16"}});
        f(&mut r);
        r
    };
    let keys = |n: usize| (0..n as i64).collect::<Vec<_>>();
    let inst = fx.instance.clone();
    let cases: Vec<(&str, bool, Value, &str)> = vec![
        ("registerInstance", false, reg(&|r| r["location_spec_infos"] = json!(specs(5))), "max_specs_per_instance"),
        (
            "registerInstance",
            false,
            reg(&|r| {
                r["location_spec_groups"] = json!([{"name": "a", "spec_names": ["tp0"]}, {"name": "b", "spec_names": ["tp0"]},
                                                   {"name": "c", "spec_names": ["tp1"]}])
            }),
            "max_spec_groups_per_instance",
        ),
        ("registerInstance", false, reg(&|r| r["location_spec_infos"][0]["name"] = json!("..")), "must not be"),
        ("registerInstance", false, reg(&|r| r["location_spec_infos"][0]["name"] = json!(".")), "must not be"),
        ("registerInstance", false, reg(&|r| r["location_spec_infos"][0]["name"] = json!("a/b")), "contains '/'"),
        (
            "registerInstance",
            false,
            reg(&|r| r["location_spec_infos"][0]["name"] = json!("n".repeat(17))),
            "max_name_bytes",
        ),
        ("registerInstance", false, reg(&|r| r["instance_id"] = json!("i".repeat(25))), "max_instance_id_bytes"),
        (
            "registerInstance",
            false,
            reg(&|r| r["model_deployment"]["extra"] = json!("x".repeat(101))),
            "max_string_bytes",
        ),
        (
            "registerInstance",
            false,
            reg(&|r| r["model_deployment"]["user_data"] = json!("x".repeat(101))),
            "max_string_bytes",
        ),
        (
            "createInstanceGroup",
            true,
            json!({"instance_group": {"name": "g2", "storage_candidates": ["files", "x", "y", "z"]}}),
            "max_list_items",
        ),
        (
            "createInstanceGroup",
            true,
            json!({"instance_group": {"name": "g2", "storage_candidates": ["files"],
                                      "cache_config": {"meta_indexer_config": {"blob": "x".repeat(3000)}}}}),
            "max_group_bytes",
        ),
        (
            "getCacheLocation",
            false,
            json!({"instance_id": inst, "query_type": "QT_BATCH_GET", "block_keys": keys(65)}),
            "limit is 64",
        ),
        (
            "getCacheLocation",
            false,
            json!({"instance_id": inst, "query_type": "QT_BATCH_GET", "token_ids": keys(101)}),
            "max_token_ids_per_request",
        ),
        // 21 keys x 2 specs = 42 location specs > 40; filtered to one spec they fit.
        (
            "getCacheLocation",
            false,
            json!({"instance_id": inst, "query_type": "QT_BATCH_GET", "block_keys": keys(21)}),
            "max_location_specs_per_response",
        ),
        (
            "getCacheMeta",
            false,
            json!({"instance_id": inst, "block_keys": keys(21)}),
            "max_location_specs_per_response",
        ),
        (
            "startWriteCache",
            false,
            json!({"instance_id": inst, "block_keys": keys(21)}),
            "max_location_specs_per_response",
        ),
        (
            "getCacheLocation",
            false,
            json!({"instance_id": inst, "query_type": "QT_BATCH_GET", "block_keys": [1], "location_spec_names": ["a", "b", "c", "d", "e"]}),
            "max_specs_per_instance",
        ),
        (
            "finishWriteCache",
            false,
            json!({"instance_id": inst, "write_session_id": "0000000000000001", "success_blocks": {"bool_masks": {"values": vec![true; 65]}}}),
            "max_keys_per_request",
        ),
        (
            "addAccount",
            true,
            json!({"user_name": "u", "password": "x".repeat(1025), "role": "ROLE_ADMIN"}),
            "at most 1024",
        ),
        (
            "addAccount",
            true,
            json!({"user_name": "u", "password": "seven77", "role": "ROLE_ADMIN"}),
            "min_password_length",
        ),
        (
            "createApiKey",
            true,
            json!({"name": "k", "role": "ROLE_USER", "instance_groups": ["a", "b", "c", "d"]}),
            "max_list_items",
        ),
    ];
    for (rpc, on_admin, body, needle) in cases {
        let before = dump_namespace(&api.namespace).await;
        let reply = if on_admin { api.admin(rpc, body).await } else { api.meta(rpc, body).await };
        assert_err(&reply, "INVALID_ARGUMENT", needle);
        assert_eq!(dump_namespace(&api.namespace).await, before, "{rpc} ({needle}) was refused but changed state");
    }
    // Just inside the bounds works.
    let r = fx.get("QT_BATCH_GET", &keys(20), json!({})).await;
    assert_eq!(code(&r), "OK", "{r}");
    let r = fx.get("QT_BATCH_GET", &keys(40), json!({"location_spec_names": ["tp0"]})).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_ok(&api.meta("registerInstance", reg(&|r| r["location_spec_infos"] = json!(specs(4)))).await);
}

#[tokio::test]
async fn floods_of_unknown_names_cost_the_registry_nothing_after_the_first() {
    // The refresh timer is a minute, so every registry read below is one a request caused.
    let api =
        Api::start_with(&unique("ns"), &[("KVCM_REGISTRY_REFRESH_MS", "60000"), ("KVCM_NEGATIVE_CACHE_MS", "60000")]);
    let (checks, reloads) = ("kvcm_registry_checks_total", "kvcm_registry_reloads_total");
    let (c0, r0) = (api.metric(checks).await, api.metric(reloads).await);
    let ghost = json!({"instance_id": "ghost", "query_type": "QT_PREFIX_MATCH", "block_keys": [1]});
    let replies = futures::future::join_all((0..200).map(|_| api.meta("getCacheLocation", ghost.clone()))).await;
    assert!(replies.iter().all(|(s, r)| *s == 200 && code(r) == "INSTANCE_NOT_EXIST"));
    // One after another (nothing to coalesce): only the negative cache keeps these off Valkey.
    for _ in 0..30 {
        let (_, r) = api.meta("getCacheLocation", ghost.clone()).await;
        assert_eq!(code(&r), "INSTANCE_NOT_EXIST");
        let r = api.meta("registerInstance", registration("no-such-group", "i")).await;
        assert_err(&r, "INVALID_ARGUMENT", "does not exist");
    }
    let c1 = api.metric(checks).await;
    assert!(c1 - c0 <= 4.0, "260 misses of one instance and one group cost {} version checks", c1 - c0);
    assert_eq!(api.metric(reloads).await, r0, "no full reload: nothing changed");
    // A name registered through another frontend shows up at once all the same (the version moved).
    let other = Api::start_with(&api.namespace, &[]);
    let root = repo_root().join(".kvcm/test-data").join(unique("amp"));
    assert_ok(
        &other.admin("addStorage", json!({"storage": {"global_unique_name": "s", "nfs": {"root_path": root}}})).await,
    );
    assert_ok(
        &other
            .admin(
                "createInstanceGroup",
                json!({"instance_group": {"name": "no-such-group", "storage_candidates": ["s"]}}),
            )
            .await,
    );
    assert_ok(&other.meta("registerInstance", registration("no-such-group", "late")).await);
    assert_ok(&api.meta("getInstanceInfo", json!({"instance_id": "late"})).await);
}

#[tokio::test]
async fn metric_series_of_a_removed_instance_are_dropped() {
    let fx = Fixture::new(&[("tp0", 64)], 1, json!({})).await;
    fx.get("QT_PREFIX_MATCH", &[1, 2], json!({})).await;
    let series = format!("kvcm_blocks_requested_total{{instance=\"{}\"}}", fx.instance);
    assert_eq!(fx.api.metric(&series).await, 2.0);
    assert_ok(&fx.api.admin("removeInstance", json!({"instance_id": fx.instance})).await);
    let gone = eventually(Duration::from_secs(10), || async {
        let (_, text) = fx.api.get_admin("/metrics").await;
        (!text.contains(&fx.instance)).then_some(())
    })
    .await;
    assert!(gone.is_some(), "the removed instance's series are still exported");
}

/// Standard base64 (RFC 4648, with padding), enough for HTTP Basic in tests.
fn base64_encode(s: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in s.as_bytes().chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[tokio::test]
async fn admin_api_keys_close_the_admin_plane_and_the_last_admin_credential_stays() {
    let api = Api::start();
    let (_, r) = api.admin("createApiKey", json!({"name": "terraform", "role": "ROLE_ADMIN"})).await;
    assert_eq!(code(&r), "OK", "{r}");
    let key = format!("Bearer {}", r["token"].as_str().unwrap());
    let id = r["api_key"]["key_id"].as_str().unwrap().to_string();
    assert_eq!(api.admin("listStorage", json!({})).await.0, 401, "an admin key closes the open admin plane");
    assert_ok(&api.post(&api.admin, "listStorage", "{}".into(), Some(&key)).await);
    // The only admin credential cannot be revoked …
    let before = dump_namespace(&api.namespace).await;
    let r = api.post(&api.admin, "revokeApiKey", json!({"key_id": id}).to_string(), Some(&key)).await;
    assert_err(&r, "INVALID_ARGUMENT", "last ROLE_ADMIN credential");
    assert_eq!(dump_namespace(&api.namespace).await, before);
    // … until another admin (an account here) replaces it; then neither is "the last" alone.
    let add = json!({"user_name": "root", "password": "root-pass-1", "role": "ROLE_ADMIN"}).to_string();
    assert_ok(&api.post(&api.admin, "addAccount", add, Some(&key)).await);
    assert_ok(&api.post(&api.admin, "revokeApiKey", json!({"key_id": id}).to_string(), Some(ADMIN)).await);
    assert_eq!(api.post(&api.admin, "listStorage", "{}".into(), Some(&key)).await.0, 401);
    let r = api.post(&api.admin, "deleteAccount", json!({"user_name": "root"}).to_string(), Some(ADMIN)).await;
    assert_err(&r, "INVALID_ARGUMENT", "last ROLE_ADMIN credential");
}

#[tokio::test]
async fn a_name_found_missing_is_found_once_registered_elsewhere() {
    // B's refresh timer is off: only its miss handling can discover what A registers.
    let ns = unique("ns");
    let (a, b) = (Api::start_with(&ns, &[]), Api::start_with(&ns, &[("KVCM_REGISTRY_REFRESH_MS", "60000")]));
    let root = repo_root().join(".kvcm/test-data").join(unique("neg"));
    assert_ok(
        &a.admin("addStorage", json!({"storage": {"global_unique_name": "s", "nfs": {"root_path": root}}})).await,
    );
    assert_ok(
        &a.admin("createInstanceGroup", json!({"instance_group": {"name": "g", "storage_candidates": ["s"]}})).await,
    );
    let get = json!({"instance_id": "x"});
    assert_eq!(code(&b.meta("getInstanceInfo", get.clone()).await.1), "INSTANCE_NOT_EXIST");
    assert_ok(&a.meta("registerInstance", registration("g", "x")).await);
    let found = eventually(Duration::from_secs(5), || async {
        (code(&b.meta("getInstanceInfo", get.clone()).await.1) == "OK").then_some(())
    })
    .await;
    assert!(found.is_some(), "B never saw the instance A registered after B found it missing");
}

#[tokio::test]
async fn a_burst_of_guesses_runs_argon2_only_until_the_back_off_starts() {
    let api = secured(&[("KVCM_AUTH_BACKOFF_AFTER", "3"), ("KVCM_AUTH_BACKOFF_BASE_MS", "600000")]);
    let checks = "kvcm_auth_password_checks_total";
    let before = api.metric(checks).await;
    // 24 guesses at once: all pass the first back-off check before any has failed, then queue
    // for Argon2; once three have failed, the rest are refused at their turn without running it.
    let guesses = (0..24).map(|i| {
        api.post(
            &api.admin,
            "listStorage",
            "{}".into(),
            Some(Box::leak(format!("Bearer root:guess-{i}").into_boxed_str())),
        )
    });
    let statuses: Vec<u16> = futures::future::join_all(guesses).await.into_iter().map(|(s, _)| s).collect();
    assert_eq!(statuses.iter().filter(|s| **s == 401).count(), 3, "{statuses:?}");
    assert!(statuses.iter().all(|s| *s == 401 || *s == 429), "{statuses:?}");
    assert_eq!(api.metric(checks).await - before, 3.0, "Argon2 ran only for the guesses before the back-off");
}

#[tokio::test]
async fn guesses_cut_short_by_the_request_deadline_are_still_counted() {
    // A deadline far shorter than Argon2: every guess is answered 408 while its check runs on.
    let api = secured(&[
        ("KVCM_AUTH_BACKOFF_AFTER", "3"),
        ("KVCM_AUTH_BACKOFF_BASE_MS", "600000"),
        ("KVCM_REQUEST_TIMEOUT_MS", "3"),
    ]);
    let backed_off = eventually(Duration::from_secs(20), || async {
        let (status, _) = api.post(&api.admin, "listStorage", "{}".into(), Some("Bearer root:a-guess")).await;
        (status == 429).then_some(())
    })
    .await;
    assert!(backed_off.is_some(), "guesses whose requests were dropped were never counted");
}

#[tokio::test]
async fn request_bodies_in_flight_are_bounded_per_frontend() {
    // Room for one 1 MiB body at a time (plus change), not two.
    let api = Api::start_with(
        &unique("ns"),
        &[("KVCM_MAX_BODY_BYTES", "1048576"), ("KVCM_MAX_INFLIGHT_BODY_BYTES", "1572864")],
    );
    // A client announces a 1 MiB body and sends only part of it: its share stays taken.
    let mut slow = RawConn::connect(&api.meta).await;
    let head = "POST /api/getInstanceInfo HTTP/1.1\r\nhost: kvcm\r\ncontent-type: application/json\r\ncontent-length: 1048576\r\n\r\n";
    slow.send(head.as_bytes()).await.unwrap();
    slow.send(b"{\"instance_id\": \"").await.unwrap();
    // Another 1 MiB request does not fit beside it: 503 with Retry-After, in the Tair shape.
    let big = json!({"instance_id": "x", "trace_id": "t".repeat(1_000_000)}).to_string();
    let text_len = big.len();
    let eventually_refused = eventually(Duration::from_secs(10), || async {
        let mut c = RawConn::connect(&api.meta).await;
        let req = format!(
            "POST /api/getInstanceInfo HTTP/1.1\r\nhost: kvcm\r\ncontent-type: application/json\r\ncontent-length: {text_len}\r\n\r\n{big}"
        );
        c.send(req.as_bytes()).await.ok()?;
        let r = c.read_response(Duration::from_secs(5)).await?;
        (r.status == 503).then_some(r)
    })
    .await
    .expect("a second large body was admitted beside the first");
    assert_eq!(eventually_refused.header("retry-after"), Some("1"));
    let reply: Value = serde_json::from_str(&eventually_refused.body).unwrap();
    assert_eq!(code(&reply), "SERVICE_NOT_READY", "{reply}");
    // Small requests still fit, and once the slow client leaves, large ones do again.
    assert_eq!(code(&api.meta("getInstanceInfo", json!({"instance_id": "x"})).await.1), "INSTANCE_NOT_EXIST");
    drop(slow);
    let admitted = eventually(Duration::from_secs(10), || async {
        let (status, _) = api.post(&api.meta, "getInstanceInfo", big.clone(), None).await;
        (status == 200).then_some(())
    })
    .await;
    assert!(admitted.is_some(), "the share of a closed connection was never given back");
}

/// An admin-plane call as the given credential.
async fn call_as(api: &Api, auth: &str, rpc: &str, body: Value) -> (u16, Value) {
    api.post(&api.admin, rpc, body.to_string(), Some(auth)).await
}

#[tokio::test]
async fn lowering_a_name_bound_never_strands_what_exists() {
    let ns = unique("ns");
    let admin_name = "platform-operations-admin";
    let boot = [("KVCM_BOOTSTRAP_ADMIN_USER", admin_name), ("KVCM_BOOTSTRAP_ADMIN_PASSWORD", "ops-pass-1234")];
    let auth = "Bearer platform-operations-admin:ops-pass-1234";
    let before = Api::start_with(&ns, &boot);
    let root = repo_root().join(".kvcm/test-data").join(unique("low"));
    assert_ok(
        &call_as(
            &before,
            auth,
            "addStorage",
            json!({"storage": {"global_unique_name": "storage-with-a-long-name", "nfs": {"root_path": root}}}),
        )
        .await,
    );
    assert_ok(&call_as(&before, auth, "createInstanceGroup", json!({"instance_group": {"name": "group-with-a-long-name", "storage_candidates": ["storage-with-a-long-name"]}})).await);
    let long_id = "an-instance-id-well-past-sixteen-bytes";
    assert_ok(&call_as(&before, auth, "registerInstance", registration("group-with-a-long-name", long_id)).await);
    drop(before);

    let lowered = [boot[0], boot[1], ("KVCM_MAX_NAME_BYTES", "16"), ("KVCM_MAX_INSTANCE_ID_BYTES", "16")];
    let after = Api::start_with(&ns, &lowered);
    // The admin still logs in, the engine still re-registers (idempotently) and reads…
    assert_ok(&call_as(&after, auth, "listStorage", json!({})).await);
    assert_ok(&after.meta("registerInstance", registration("group-with-a-long-name", long_id)).await);
    assert_ok(&after.meta("getInstanceInfo", json!({"instance_id": long_id})).await);
    let r = after
        .meta("getCacheLocation", json!({"instance_id": long_id, "query_type": "QT_PREFIX_MATCH", "block_keys": [1]}))
        .await;
    assert_ok(&r);
    // … but nothing new is created past the lowered bounds…
    assert_err(
        &after.meta("registerInstance", registration("group-with-a-long-name", "another-long-instance-id")).await,
        "INVALID_ARGUMENT",
        "max_instance_id_bytes",
    );
    let r = call_as(
        &after,
        auth,
        "createInstanceGroup",
        json!({"instance_group": {"name": "another-long-group", "storage_candidates": ["storage-with-a-long-name"]}}),
    )
    .await;
    assert_err(&r, "INVALID_ARGUMENT", "max_name_bytes");
    // … and what exists can still be removed.
    assert_ok(&call_as(&after, auth, "removeInstance", json!({"instance_id": long_id})).await);
    assert_ok(&call_as(&after, auth, "removeInstanceGroup", json!({"name": "group-with-a-long-name"})).await);
}
