//! Process-level behaviour: several frontends sharing one cluster, restarts, the startup
//! config, configuration errors and graceful shutdown.

use kvcm_tests::*;
use serde_json::{Value, json};
use std::time::Duration;

fn nfs(name: &str) -> Value {
    json!({"storage": {"global_unique_name": name, "nfs": {"root_path": format!("/tmp/kvcm-proc/{name}")}}})
}

fn registration(group: &str, id: &str) -> Value {
    json!({"instance_group": group, "instance_id": id, "block_size": 8,
           "location_spec_infos": [{"name": "tp0", "size": 64}], "model_deployment": {"model_name": "m", "dtype": "bf16"}})
}

#[tokio::test]
async fn two_frontends_share_one_registry_at_once() {
    let ns = unique("ns");
    let (a, b) = (Api::start_with(&ns, &[]), Api::start_with(&ns, &[("KVCM_REGISTRY_REFRESH_MS", "60000")]));
    assert_ok(&a.admin("addStorage", nfs("s1")).await);
    assert_ok(&a.admin("addStorage", nfs("s2")).await);
    assert_ok(
        &a.admin(
            "createInstanceGroup",
            json!({"instance_group": {"name": "g", "storage_candidates": ["s1"], "version": 1}}),
        )
        .await,
    );
    // Registered through A, visible through B immediately (B's timer is a minute: it refreshes on the miss).
    assert_ok(&a.meta("registerInstance", registration("g", "i1")).await);
    let (_, info) = b.meta("getInstanceInfo", json!({"instance_id": "i1"})).await;
    assert_eq!(code(&info), "OK", "{info}");
    assert_eq!(info["instance_group"], "g");
    // A group updated through A is what B uses for its next registration.
    let upd = json!({"instance_group": {"name": "g", "storage_candidates": ["s2"], "max_instance_count": 2, "version": 2}, "current_version": 1});
    assert_ok(&a.admin("updateInstanceGroup", upd).await);
    let (_, reg) = b.meta("registerInstance", registration("g", "i2")).await;
    assert_eq!(code(&reg), "OK", "{reg}");
    assert!(reg["storage_configs"].as_str().unwrap().contains("\"s2\""), "{reg}");
    assert_err(
        &b.meta("registerInstance", registration("g", "i3")).await,
        "REACH_MAX_ENTITY_CAPACITY",
        "max_instance_count",
    );
    // And B's admin reads are fresh too.
    let (_, g) = b.admin("getInstanceGroup", json!({"name": "g"})).await;
    assert_eq!(g["instance_group"]["version"], "2");
}

#[tokio::test]
async fn the_registry_survives_restarting_every_frontend() {
    let ns = unique("ns");
    let a = Api::start_with(&ns, &[]);
    assert_ok(&a.admin("addStorage", nfs("s1")).await);
    assert_ok(
        &a.admin("createInstanceGroup", json!({"instance_group": {"name": "g", "storage_candidates": ["s1"]}})).await,
    );
    assert_ok(&a.meta("registerInstance", registration("g", "i1")).await);
    assert_ok(
        &a.admin("addAccount", json!({"user_name": "root", "password": "admin-pass-1", "role": "ROLE_ADMIN"})).await,
    );
    a.kill();
    let b = Api::start_with(&ns, &[]);
    assert_ok(&b.meta("getInstanceInfo", json!({"instance_id": "i1"})).await);
    let auth = Some("Bearer root:admin-pass-1");
    let (_, list) = b.post(&b.admin, "listStorage", "{}".into(), auth).await;
    assert_eq!(list["storage"][0]["global_unique_name"], "s1");
    assert_eq!(b.admin("listStorage", json!({})).await.0, 401, "accounts survived too");
}

#[tokio::test]
async fn the_startup_config_creates_storages_and_groups_idempotently() {
    let dir = repo_root().join(".kvcm/test-tmp").join(unique("startup"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("startup.json");
    std::fs::write(
        &file,
        r#"{ "storage_config": { "type": "file", "global_unique_name": "nfs_01",
                        "storage_spec": { "root_path": "/mnt/nfs/kvcache/", "key_count_per_file": 8 } },
             "instance_group": { "name": "default", "storage_candidates": ["nfs_01"],
                        "quota": { "capacity": 30000000000,
                                   "quota_config": [ { "storage_type": "file", "capacity": 10000000000 } ] },
                        "cache_config": { "reclaim_strategy": { "reclaim_policy": 1,
                                            "trigger_strategy": { "used_percentage": 0.8 },
                                            "delay_before_delete_ms": 1000 } } } }"#,
    )
    .unwrap();
    let ns = unique("ns");
    let path = file.to_str().unwrap();
    let a = Api::start_with(&ns, &[("KVCM_STARTUP_CONFIG", path)]);
    let (_, g) = a.admin("getInstanceGroup", json!({"name": "default"})).await;
    assert_eq!(g["instance_group"]["quota"]["quota_config"][0]["storage_type"], "ST_NFS", "{g}");
    assert_eq!(g["instance_group"]["cache_config"]["reclaim_strategy"]["reclaim_policy"], "POLICY_LRU");
    let before = dump_namespace(&ns).await;
    // A second frontend with the same file starts fine and changes nothing.
    let b = Api::start_with(&ns, &[("KVCM_STARTUP_CONFIG", path)]);
    assert_eq!(dump_namespace(&ns).await, before);
    assert_ok(&b.meta("registerInstance", registration("default", "i1")).await);

    std::fs::write(&file, r#"{"storage_config": {"type": "s3", "global_unique_name": "x"}}"#).unwrap();
    let failed = Api::try_start(&unique("ns"), &[("KVCM_STARTUP_CONFIG", path)]).err().expect("must not start");
    assert_ne!(failed.code, Some(0));
    assert!(failed.stderr.contains("\"s3\""), "{}", failed.stderr);
}

#[tokio::test]
async fn bad_configuration_stops_the_process_with_the_key_named() {
    for (env, needle) in [
        (("KVCM_META_PORT", "abc"), "KVCM_META_PORT"),
        (("KVCM_LOG_FORMAT", "xml"), "log_format"),
        (("KVCM_VALKEY_URL", "http://x"), "valkey_url"),
        (("KVCM_STARTUP_CONFIG", "/nonexistent/startup.json"), "startup_config"),
    ] {
        let failed = Api::try_start(&unique("ns"), &[env]).err().expect("must not start");
        assert_ne!(failed.code, Some(0));
        assert!(failed.stderr.contains(needle), "{env:?}: {}", failed.stderr);
    }
    let failed = Api::try_start(
        &unique("ns"),
        &[("KVCM_VALKEY_URL", "redis://127.0.0.1:1"), ("KVCM_VALKEY_CONNECT_TIMEOUT_MS", "300")],
    )
    .err()
    .expect("must not start without Valkey");
    assert!(failed.stderr.contains("cannot connect to the Valkey cluster"), "{}", failed.stderr);
}

#[tokio::test]
async fn sigterm_stops_the_server_cleanly() {
    let api = Api::start();
    assert_ok(&api.admin("listStorage", json!({})).await);
    let admin = api.admin.clone();
    assert_eq!(api.terminate(), Some(0));
    let refused = reqwest::Client::new()
        .post(format!("{admin}/api/listStorage"))
        .timeout(Duration::from_secs(2))
        .body("{}")
        .send()
        .await;
    assert!(refused.is_err(), "still serving after SIGTERM");
}
