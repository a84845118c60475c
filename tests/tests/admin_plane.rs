//! Black-box tests of the admin plane: every RPC's happy path and errors, through a real
//! kvcm-api process on a real Valkey cluster. Every failed request is checked to leave the
//! namespace's keys exactly as they were.

use kvcm_tests::*;
use serde_json::{Value, json};

fn nfs(name: &str, root: &str) -> Value {
    json!({"storage": {"global_unique_name": name, "nfs": {"root_path": root, "key_count_per_file": 1}}})
}

fn group(name: &str, candidates: &[&str], version: i64) -> Value {
    json!({"name": name, "storage_candidates": candidates, "global_quota_group_name": "q",
           "max_instance_count": 2, "quota": {"capacity": "1000000", "quota_config": [{"storage_type": "ST_NFS", "capacity": 500000}]},
           "cache_config": {"reclaim_strategy": {"reclaim_policy": "POLICY_LRU", "trigger_strategy": {"used_percentage": 0.8}},
                            "data_storage_strategy": "CPS_PREFER_3FS",
                            "meta_indexer_config": {"max_key_count": 1000}},
           "user_data": "ud", "version": version})
}

fn registration(group: &str, id: &str) -> Value {
    json!({"trace_id": "t", "instance_group": group, "instance_id": id, "block_size": 16,
           "location_spec_infos": [{"name": "tp0", "size": 1024}, {"name": "tp1", "size": "1024"}],
           "model_deployment": {"model_name": "m", "dtype": "fp16", "tp_size": 2, "user_data": "u1"},
           "location_spec_groups": [{"name": "all", "spec_names": ["tp0", "tp1"]}]})
}

/// Runs a request that must fail with `code`, and proves it changed nothing.
async fn refused(api: &Api, rpc: &str, body: Value, code: &str, needle: &str) {
    let before = dump_namespace(&api.namespace).await;
    let reply = api.admin(rpc, body).await;
    assert_err(&reply, code, needle);
    assert_eq!(dump_namespace(&api.namespace).await, before, "{rpc} failed but changed state");
}

#[tokio::test]
async fn storages_can_be_added_listed_disabled_enabled_updated_and_removed() {
    let api = Api::start();
    assert_ok(&api.admin("addStorage", nfs("nfs_01", "/tmp/kvcm-a")).await);
    refused(&api, "addStorage", nfs("nfs_01", "/tmp/other"), "DUPLICATE_ENTITY", "already exists").await;
    // The same storage again is done already (a resend after a lost reply looks just like it).
    let before = dump_namespace(&api.namespace).await;
    assert_ok(&api.admin("addStorage", nfs("nfs_01", "/tmp/kvcm-a")).await);
    assert_eq!(dump_namespace(&api.namespace).await, before, "an identical addStorage changed state");

    let (_, list) = api.admin("listStorage", json!({})).await;
    assert_eq!(list["storage"][0]["global_unique_name"], "nfs_01");
    assert_eq!(list["storage"][0]["nfs"]["root_path"], "/tmp/kvcm-a/", "root_path is normalised");
    assert_eq!(list["storage"][0]["is_available"], true);

    assert_ok(&api.admin("disableStorage", json!({"storage_unique_name": "nfs_01"})).await);
    let (_, list) = api.admin("listStorage", json!({})).await;
    assert_eq!(list["storage"][0]["is_available"], false);
    assert_ok(&api.admin("enableStorage", json!({"storage_unique_name": "nfs_01"})).await);
    let (_, list) = api.admin("listStorage", json!({})).await;
    assert_eq!(list["storage"][0]["is_available"], true);
    refused(&api, "enableStorage", json!({"storage_unique_name": "nope"}), "INVALID_ARGUMENT", "'nope' does not exist")
        .await;

    // A change that keeps the blocks where they are is fine; moving them needs force_update.
    let mut upd = nfs("nfs_01", "/tmp/kvcm-a/");
    upd["storage"]["check_storage_available_when_open"] = json!(true);
    assert_ok(&api.admin("updateStorage", upd).await);
    refused(&api, "updateStorage", nfs("nfs_01", "/tmp/kvcm-b"), "INVALID_ARGUMENT", "force_update").await;
    let mut forced = nfs("nfs_01", "/tmp/kvcm-b");
    forced["force_update"] = json!(true);
    assert_ok(&api.admin("updateStorage", forced).await);
    let (_, list) = api.admin("listStorage", json!({})).await;
    assert_eq!(list["storage"][0]["nfs"]["root_path"], "/tmp/kvcm-b/");
    refused(&api, "updateStorage", nfs("ghost", "/tmp/x"), "INVALID_ARGUMENT", "'ghost' does not exist").await;

    refused(&api, "removeStorage", json!({"storage_unique_name": "ghost"}), "INVALID_ARGUMENT", "does not exist").await;
    assert_ok(&api.admin("removeStorage", json!({"storage_unique_name": "nfs_01"})).await);
    let (_, list) = api.admin("listStorage", json!({})).await;
    assert_eq!(list["storage"], json!([]));
}

#[tokio::test]
async fn invalid_storages_are_refused_with_the_field_named() {
    let api = Api::start();
    let cases = [
        (json!({}), "storage is required"),
        (json!({"storage": {"global_unique_name": "s"}}), "exactly one of"),
        (json!({"storage": {"global_unique_name": "s", "nfs": {"root_path": "/a"}, "threefs": {}}}), "exactly one of"),
        (json!({"storage": {"nfs": {"root_path": "/a"}}}), "storage.global_unique_name is required"),
        (json!({"storage": {"global_unique_name": "bad name", "nfs": {"root_path": "/a"}}}), "contains ' '"),
        (
            json!({"storage": {"global_unique_name": "s", "nfs": {"root_path": "rel/"}}}),
            "root_path must be an absolute",
        ),
        (json!({"storage": {"global_unique_name": "s", "nfs": {"root_path": "/a/../b"}}}), "'..'"),
        (
            json!({"storage": {"global_unique_name": "s", "nfs": {"root_path": "/a", "key_count_per_file": -1}}}),
            "key_count_per_file",
        ),
        (
            json!({"storage": {"global_unique_name": "s", "threefs": {"mountpoint": "/3fs"}}}),
            "threefs.root_dir is required",
        ),
        (json!({"storage": {"global_unique_name": "s", "mooncake": {"protocol": "tcp"}}}), "mooncake.local_hostname"),
        (
            json!({"storage": {"global_unique_name": "s", "mooncake": {"local_hostname": "h:1", "metadata_connstring": "x",
            "master_service_entry": "m:1", "protocol": "udp"}}}),
            "protocol must be",
        ),
        (json!({"storage": {"global_unique_name": "s", "tair_mem_pool": {}}}), "tair_mem_pool.domain is required"),
    ];
    for (body, needle) in cases {
        refused(&api, "addStorage", body, "INVALID_ARGUMENT", needle).await;
    }
    refused(&api, "removeStorage", json!({}), "INVALID_ARGUMENT", "storage_unique_name is required").await;
}

#[tokio::test]
async fn a_storage_used_by_a_group_cannot_be_removed_and_the_group_is_named() {
    let api = Api::start();
    assert_ok(&api.admin("addStorage", nfs("nfs_01", "/tmp/kvcm")).await);
    assert_ok(&api.admin("createInstanceGroup", json!({"instance_group": group("g_uses", &["nfs_01"], 1)})).await);
    refused(
        &api,
        "removeStorage",
        json!({"storage_unique_name": "nfs_01"}),
        "INVALID_ARGUMENT",
        "instance group 'g_uses'",
    )
    .await;
}

#[tokio::test]
async fn a_group_may_name_storages_added_later_and_writes_use_them_once_added() {
    // Tair accepts a group whose candidates do not exist yet (provisioning tools create
    // resources in any order); kvcm skips them for writes, says so, and uses them once added.
    let api = Api::start();
    let later = unique("later");
    let root = repo_root().join(".kvcm/test-data").join(&later);
    assert_ok(&api.admin("createInstanceGroup", json!({"instance_group": group("g", &[&later], 1)})).await);
    let (_, got) = api.admin("getInstanceGroup", json!({"name": "g"})).await;
    assert_eq!(got["instance_group"]["storage_candidates"], json!([later]));
    assert_eq!(got["missing_storage_candidates"], json!([later]), "{got}");
    // An update may name one more that does not exist either.
    let mut v2 = group("g", &[&later, "also_later"], 2);
    v2["user_data"] = json!("v2");
    assert_ok(&api.admin("updateInstanceGroup", json!({"instance_group": v2, "current_version": 1})).await);

    // An engine learns its group's storages when it registers: none yet.
    let registered = api.meta("registerInstance", registration("g", "inst-later")).await;
    assert_ok(&registered);
    assert!(!registered.1["storage_configs"].as_str().unwrap().contains(&later), "{}", registered.1);
    let write = json!({"instance_id": "inst-later", "block_keys": [1, 2]});
    let (status, reply) = api.meta("startWriteCache", write.clone()).await;
    assert_err(&(status, reply.clone()), "REACH_MAX_ENTITY_CAPACITY", &format!("{later} (not added yet: addStorage)"));

    assert_ok(&api.admin("addStorage", nfs(&later, root.to_str().unwrap())).await);
    let (_, got) = api.admin("getInstanceGroup", json!({"name": "g"})).await;
    assert_eq!(got["missing_storage_candidates"], json!(["also_later"]), "{got}");
    let started = api.meta("startWriteCache", write).await;
    assert_ok(&started);
    let uri = started.1["locations"][0]["location_specs"][0]["uri"].as_str().unwrap().to_string();
    assert!(uri.starts_with(&format!("file://{later}/")), "the storage added later takes the write: {uri}");
    // Registering again (idempotent) hands the engine the storage's configuration.
    let again = api.meta("registerInstance", registration("g", "inst-later")).await;
    assert_ok(&again);
    assert!(again.1["storage_configs"].as_str().unwrap().contains(&later), "{}", again.1);
}

#[tokio::test]
async fn instance_groups_are_created_read_updated_optimistically_and_removed() {
    let api = Api::start();
    assert_ok(&api.admin("addStorage", nfs("s1", "/tmp/kvcm1")).await);
    assert_ok(&api.admin("addStorage", nfs("s2", "/tmp/kvcm2")).await);
    let mut bad_indexer = group("g", &["s1"], 1);
    bad_indexer["cache_config"]["meta_indexer_config"] = json!({"max_key_count": "many"});
    refused(&api, "createInstanceGroup", json!({"instance_group": bad_indexer}), "INVALID_ARGUMENT", "max_key_count")
        .await;
    assert_ok(&api.admin("createInstanceGroup", json!({"instance_group": group("g", &["s1"], 1)})).await);
    // Exactly the same group again (a resend, or a provisioning tool run twice): nothing to do.
    let before = dump_namespace(&api.namespace).await;
    assert_ok(&api.admin("createInstanceGroup", json!({"instance_group": group("g", &["s1"], 1)})).await);
    assert_eq!(dump_namespace(&api.namespace).await, before, "an identical create changed state");
    let mut other = group("g", &["s1"], 1);
    other["user_data"] = json!("another configuration");
    refused(&api, "createInstanceGroup", json!({"instance_group": other}), "DUPLICATE_ENTITY", "'g' already exists")
        .await;

    let (_, got) = api.admin("getInstanceGroup", json!({"name": "g"})).await;
    let g = &got["instance_group"];
    assert_eq!(g["version"], "1", "int64 fields are strings");
    assert_eq!(g["quota"]["capacity"], "1000000");
    assert_eq!(g["quota"]["quota_config"][0]["storage_type"], "ST_NFS");
    assert_eq!(g["cache_config"]["reclaim_strategy"]["reclaim_policy"], "POLICY_LRU");
    assert_eq!(g["cache_config"]["meta_indexer_config"]["max_key_count"], 1000, "unused fields are echoed");
    assert_eq!(g["user_data"], "ud");

    // Optimistic concurrency: stale current_version, non-increasing version, unknown storage.
    let body = |cands: &[&str], version: i64, current: Value| json!({"instance_group": group("g", cands, version), "current_version": current});
    refused(
        &api,
        "updateInstanceGroup",
        body(&["s2"], 3, json!(2)),
        "INVALID_ARGUMENT",
        "has version 1, not current_version 2",
    )
    .await;
    refused(
        &api,
        "updateInstanceGroup",
        body(&["s2"], 1, json!(1)),
        "INVALID_ARGUMENT",
        "must be larger than current_version",
    )
    .await;
    refused(
        &api,
        "updateInstanceGroup",
        json!({"current_version": 1}),
        "INVALID_ARGUMENT",
        "instance_group is required",
    )
    .await;
    let mut ghost = body(&["s2"], 2, json!("1"));
    ghost["instance_group"]["name"] = json!("ghost");
    refused(&api, "updateInstanceGroup", ghost, "INVALID_ARGUMENT", "'ghost' does not exist").await;
    assert_ok(&api.admin("updateInstanceGroup", body(&["s2", "s1"], 2, json!("1"))).await);
    let (_, got) = api.admin("getInstanceGroup", json!({"name": "g"})).await;
    assert_eq!(got["instance_group"]["storage_candidates"], json!(["s2", "s1"]));
    assert_eq!(got["instance_group"]["version"], "2");

    assert_ok(&api.admin("createInstanceGroup", json!({"instance_group": group("h", &["s1"], 0)})).await);
    let (_, list) = api.admin("listInstanceGroup", json!({})).await;
    let names: Vec<&str> =
        list["instance_group"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["g", "h"]);

    // A group with instances cannot be removed.
    assert_ok(&api.admin("registerInstance", registration("g", "inst-a")).await);
    refused(&api, "removeInstanceGroup", json!({"name": "g"}), "INVALID_ARGUMENT", "still has 1 instance").await;
    assert_ok(&api.admin("removeInstance", json!({"instance_id": "inst-a"})).await);
    assert_ok(&api.admin("removeInstanceGroup", json!({"name": "g"})).await);
    refused(&api, "removeInstanceGroup", json!({"name": "g"}), "INVALID_ARGUMENT", "does not exist").await;
    let (_, got) = api.admin("getInstanceGroup", json!({"name": "g"})).await;
    assert_eq!(code(&got), "INVALID_ARGUMENT");
    assert_eq!(got["instance_group"]["name"], "", "error replies still carry every field");
}

#[tokio::test]
async fn invalid_instance_groups_are_refused_with_the_field_named() {
    let api = Api::start();
    assert_ok(&api.admin("addStorage", nfs("s1", "/tmp/kvcm1")).await);
    let with = |f: &dyn Fn(&mut Value)| {
        let mut g = group("g", &["s1"], 1);
        f(&mut g);
        json!({"instance_group": g})
    };
    let cases: Vec<(Value, &str)> = vec![
        (json!({}), "instance_group is required"),
        (with(&|g| g["name"] = json!("")), "instance_group.name is required"),
        (with(&|g| g["storage_candidates"] = json!([])), "at least one storage"),
        (with(&|g| g["storage_candidates"] = json!(["s1", "s1"])), "twice"),
        (with(&|g| g["quota"]["capacity"] = json!(-1)), "quota.capacity"),
        (
            with(&|g| g["quota"]["quota_config"][0]["storage_type"] = json!("ST_UNSPECIFIED")),
            "storage_type is required",
        ),
        (
            with(&|g| g["cache_config"]["reclaim_strategy"]["trigger_strategy"]["used_percentage"] = json!(1.5)),
            "used_percentage",
        ),
        (
            with(&|g| g["cache_config"]["reclaim_strategy"]["storage_unique_name"] = json!("other")),
            "not one of the group's",
        ),
        (with(&|g| g["max_instance_count"] = json!(-3)), "max_instance_count"),
    ];
    for (body, needle) in cases {
        refused(&api, "createInstanceGroup", body, "INVALID_ARGUMENT", needle).await;
    }
}

#[tokio::test]
async fn instances_register_idempotently_and_any_difference_is_a_duplicate() {
    let api = Api::start();
    assert_ok(&api.admin("addStorage", nfs("s1", "/tmp/kvcm1")).await);
    assert_ok(&api.admin("createInstanceGroup", json!({"instance_group": group("g", &["s1"], 1)})).await);

    let (_, reg) = api.meta("registerInstance", registration("g", "i1")).await;
    assert_eq!(code(&reg), "OK", "{reg}");
    let configs: Value = serde_json::from_str(reg["storage_configs"].as_str().unwrap()).unwrap();
    assert_eq!(configs[0]["global_unique_name"], "s1");
    assert_eq!(configs[0]["type"], "file");
    assert_eq!(configs[0]["storage_spec"]["root_path"], "/tmp/kvcm1/");

    // Same registration (user_data may differ) on either plane: OK, nothing changes.
    let before = dump_namespace(&api.namespace).await;
    let mut again = registration("g", "i1");
    again["model_deployment"]["user_data"] = json!("different user data");
    assert_ok(&api.meta("registerInstance", again.clone()).await);
    assert_ok(&api.admin("registerInstance", again).await);
    assert_eq!(dump_namespace(&api.namespace).await, before);

    for (field, value, named) in [
        ("block_size", json!(32), "block_size (16 vs 32)"),
        (
            "location_spec_infos",
            json!([{"name": "tp0", "size": 1024}, {"name": "tp1", "size": 2048}]),
            "location_spec_infos",
        ),
        ("location_spec_groups", json!([]), "location_spec_groups"),
    ] {
        let mut body = registration("g", "i1");
        body[field] = value;
        let before = dump_namespace(&api.namespace).await;
        let (_, r) = api.meta("registerInstance", body).await;
        assert_eq!(code(&r), "DUPLICATE_ENTITY", "{r}");
        assert!(message(&r).contains(named), "{r}");
        assert_eq!(r["storage_configs"], "", "error replies carry every field");
        assert_eq!(dump_namespace(&api.namespace).await, before);
    }
    let mut body = registration("g", "i1");
    body["model_deployment"]["extra"] = json!("changed");
    refused(&api, "registerInstance", body, "DUPLICATE_ENTITY", "model_deployment").await;

    // getInstanceInfo on both planes, in their own shapes.
    let (_, meta) = api.meta("getInstanceInfo", json!({"instance_id": "i1"})).await;
    assert_eq!(meta["instance_group"], "g");
    assert_eq!(meta["instance_info"]["block_size"], 16);
    assert_eq!(meta["instance_info"]["quota_group_name"], "q");
    assert_eq!(meta["instance_info"]["location_spec_infos"][1]["size"], "1024");
    let (_, admin) = api.admin("getInstanceInfo", json!({"instance_id": "i1"})).await;
    assert_eq!(admin["instance_info"], meta["instance_info"]);
    assert!(admin.get("instance_group").is_none());
    let (_, unknown) = api.meta("getInstanceInfo", json!({"instance_id": "nobody"})).await;
    assert_eq!(code(&unknown), "INSTANCE_NOT_EXIST");
    assert_eq!(unknown["instance_info"]["instance_id"], "");
}

#[tokio::test]
async fn invalid_registrations_are_refused_with_the_field_named() {
    let api = Api::start();
    assert_ok(&api.admin("addStorage", nfs("s1", "/tmp/kvcm1")).await);
    assert_ok(&api.admin("createInstanceGroup", json!({"instance_group": group("g", &["s1"], 1)})).await);
    let with = |f: &dyn Fn(&mut Value)| {
        let mut r = registration("g", "i1");
        f(&mut r);
        r
    };
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            with(&|r| r["instance_group"] = json!("nogroup")),
            "INVALID_ARGUMENT",
            "instance group 'nogroup' does not exist",
        ),
        (with(&|r| r["instance_group"] = json!("")), "INVALID_ARGUMENT", "instance_group is required"),
        (with(&|r| r["instance_id"] = json!("")), "INVALID_ARGUMENT", "instance_id is required"),
        (with(&|r| r["instance_id"] = json!("a{b}")), "INVALID_ARGUMENT", "not allowed"),
        (with(&|r| r["instance_id"] = json!("../etc")), "INVALID_ARGUMENT", "'..'"),
        (with(&|r| r["block_size"] = json!(0)), "INVALID_ARGUMENT", "block_size must be within 1..="),
        (
            with(&|r| r.as_object_mut().unwrap().remove("model_deployment").map(drop).unwrap_or(())),
            "INVALID_ARGUMENT",
            "model_deployment is required",
        ),
        (with(&|r| r["model_deployment"]["model_name"] = json!("")), "INVALID_ARGUMENT", "model_name is required"),
        (with(&|r| r["model_deployment"]["dtype"] = json!("")), "INVALID_ARGUMENT", "dtype is required"),
        (with(&|r| r["location_spec_infos"] = json!([])), "INVALID_ARGUMENT", "at least one spec"),
        (with(&|r| r["location_spec_infos"][1]["name"] = json!("tp0")), "INVALID_ARGUMENT", "lists \"tp0\" twice"),
        (with(&|r| r["location_spec_infos"][0]["size"] = json!(0)), "INVALID_ARGUMENT", "size must be > 0"),
        (
            with(&|r| r["location_spec_groups"][0]["spec_names"] = json!(["tp9"])),
            "INVALID_ARGUMENT",
            "\"tp9\", which is not in",
        ),
    ];
    for (body, code, needle) in cases {
        let before = dump_namespace(&api.namespace).await;
        assert_err(&api.meta("registerInstance", body.clone()).await, code, needle);
        assert_err(&api.admin("registerInstance", body).await, code, needle);
        assert_eq!(dump_namespace(&api.namespace).await, before);
    }
}

#[tokio::test]
async fn a_group_refuses_instances_beyond_max_instance_count() {
    let api = Api::start();
    assert_ok(&api.admin("addStorage", nfs("s1", "/tmp/kvcm1")).await);
    assert_ok(&api.admin("createInstanceGroup", json!({"instance_group": group("g", &["s1"], 1)})).await);
    assert_ok(&api.meta("registerInstance", registration("g", "i1")).await);
    assert_ok(&api.meta("registerInstance", registration("g", "i2")).await);
    refused(&api, "registerInstance", registration("g", "i3"), "REACH_MAX_ENTITY_CAPACITY", "max_instance_count").await;
    // Removing one frees a slot; removing with the wrong group or twice is refused.
    refused(
        &api,
        "removeInstance",
        json!({"instance_id": "i1", "instance_group": "other"}),
        "INVALID_ARGUMENT",
        "belongs to",
    )
    .await;
    assert_ok(&api.admin("removeInstance", json!({"instance_id": "i1", "instance_group": "g"})).await);
    refused(&api, "removeInstance", json!({"instance_id": "i1"}), "INSTANCE_NOT_EXIST", "'i1' is not registered").await;
    assert_ok(&api.meta("registerInstance", registration("g", "i3")).await);
}

#[tokio::test]
async fn instances_are_listed_per_group_and_in_all() {
    let api = Api::start();
    assert_ok(&api.admin("addStorage", nfs("s1", "/tmp/kvcm1")).await);
    assert_ok(&api.admin("createInstanceGroup", json!({"instance_group": group("a", &["s1"], 1)})).await);
    assert_ok(&api.admin("createInstanceGroup", json!({"instance_group": group("b", &["s1"], 1)})).await);
    assert_ok(&api.meta("registerInstance", registration("a", "x2")).await);
    assert_ok(&api.meta("registerInstance", registration("a", "x1")).await);
    assert_ok(&api.meta("registerInstance", registration("b", "y1")).await);
    let ids = |v: &Value| -> Vec<String> {
        v["instance_info"].as_array().unwrap().iter().map(|i| i["instance_id"].as_str().unwrap().to_string()).collect()
    };
    let (_, a) = api.admin("listInstanceInfo", json!({"instance_group_name": "a"})).await;
    assert_eq!(ids(&a), vec!["x1", "x2"]);
    let (_, all) = api.admin("listInstanceInfo", json!({})).await;
    assert_eq!(ids(&all), vec!["x1", "x2", "y1"]);
    refused(&api, "listInstanceInfo", json!({"instance_group_name": "zz"}), "INVALID_ARGUMENT", "'zz' does not exist")
        .await;
}

#[tokio::test]
async fn accounts_turn_on_admin_authentication_and_passwords_are_never_stored_or_returned() {
    let api = Api::start();
    let (_, empty) = api.admin("listAccount", json!({})).await;
    assert_eq!(empty["accounts"], json!([]));
    refused(
        &api,
        "addAccount",
        json!({"user_name": "eng", "password": "engine-pass", "role": "ROLE_USER"}),
        "INVALID_ARGUMENT",
        "first account must have role ROLE_ADMIN",
    )
    .await;
    refused(
        &api,
        "addAccount",
        json!({"user_name": "root", "password": "short", "role": 1}),
        "INVALID_ARGUMENT",
        "at least 8",
    )
    .await;
    refused(
        &api,
        "addAccount",
        json!({"password": "long-enough", "role": 1}),
        "INVALID_ARGUMENT",
        "user_name is required",
    )
    .await;
    assert_ok(&api.admin("addAccount", json!({"user_name": "root", "password": "admin-pass-1", "role": 1})).await);

    // Now the admin plane wants credentials.
    let (status, body) = api.admin("listAccount", json!({})).await;
    assert_eq!(status, 401, "{body}");
    let admin = Some("Bearer root:admin-pass-1");
    let basic = Some("Basic cm9vdDphZG1pbi1wYXNzLTE="); // root:admin-pass-1
    let (status, _) = api.post(&api.admin, "listAccount", "{}".into(), Some("Bearer root:wrong-pass")).await;
    assert_eq!(status, 401);
    let (status, _) = api.post(&api.admin, "listAccount", "{}".into(), basic).await;
    assert_eq!(status, 200);
    let add_user = json!({"user_name": "eng", "password": "engine-pass", "role": "ROLE_USER"}).to_string();
    let r = api.post(&api.admin, "addAccount", add_user.clone(), admin).await;
    assert_ok(&r);
    let r = api.post(&api.admin, "addAccount", add_user, admin).await;
    assert_err(&r, "DUPLICATE_ENTITY", "already exists");
    let (status, _) = api.post(&api.admin, "listAccount", "{}".into(), Some("Bearer eng:engine-pass")).await;
    assert_eq!(status, 403, "a ROLE_USER account cannot use the admin plane");
    // The meta plane stays open (meta_auth is off by default), like Tair KVCM's.
    let (status, _) = api.meta("getInstanceInfo", json!({"instance_id": "x"})).await;
    assert_eq!(status, 200);

    let (_, list) = api.post(&api.admin, "listAccount", "{}".into(), admin).await;
    assert_eq!(
        list["accounts"],
        json!([{"user_name": "eng", "role": "ROLE_USER", "instance_groups": []},
               {"user_name": "root", "role": "ROLE_ADMIN", "instance_groups": []}])
    );
    assert!(!list.to_string().contains("pass"), "no password or hash in listAccount");
    let dump = dump_namespace(&api.namespace).await;
    let stored: String = dump.values().cloned().collect();
    assert!(!stored.contains("admin-pass-1") && !stored.contains("engine-pass"), "plain passwords in Valkey");
    assert!(stored.contains("$argon2id$"));

    let r = api.post(&api.admin, "deleteAccount", json!({"user_name": "root"}).to_string(), admin).await;
    assert_err(&r, "INVALID_ARGUMENT", "last ROLE_ADMIN");
    let r = api.post(&api.admin, "deleteAccount", json!({"user_name": "nobody"}).to_string(), admin).await;
    assert_err(&r, "INVALID_ARGUMENT", "does not exist");
    assert_ok(&api.post(&api.admin, "deleteAccount", json!({"user_name": "eng"}).to_string(), admin).await);
    // Even as the only account left, the last admin can never be deleted: the admin plane must
    // not fall open again.
    let before = dump_namespace(&api.namespace).await;
    let r = api.post(&api.admin, "deleteAccount", json!({"user_name": "root"}).to_string(), admin).await;
    assert_err(&r, "INVALID_ARGUMENT", "can never be deleted");
    assert_eq!(dump_namespace(&api.namespace).await, before);
    let (status, _) = api.admin("listAccount", json!({})).await;
    assert_eq!(status, 401, "the admin plane stays closed");
    // A second admin can replace the first.
    let add = json!({"user_name": "root2", "password": "admin-pass-2", "role": "ROLE_ADMIN"}).to_string();
    assert_ok(&api.post(&api.admin, "addAccount", add, admin).await);
    assert_ok(&api.post(&api.admin, "deleteAccount", json!({"user_name": "root"}).to_string(), admin).await);
    let (status, _) = api.post(&api.admin, "listAccount", "{}".into(), Some("Bearer root2:admin-pass-2")).await;
    assert_eq!(status, 200);
}

/// One `MetricsData` of `getMetrics` by name and tags; its value as a number.
fn tair_metric(m: &Value, name: &str, tags: &[(&str, &str)]) -> Option<f64> {
    m["metrics"].as_array().unwrap().iter().find_map(|d| {
        let all = tags.iter().all(|(k, v)| {
            d["metric_tags"].as_array().unwrap().iter().any(|t| t["tag_key"] == *k && t["tag_value"] == *v)
        });
        (d["metric_name"] == name && all).then(|| {
            let v = &d["metric_value"];
            v["int_value"].as_str().map(|s| s.parse().unwrap()).or_else(|| v["float_value"].as_f64()).unwrap()
        })
    })
}

#[tokio::test]
async fn get_metrics_also_answers_tairs_metric_names_for_what_kvcm_measures() {
    let api = Api::start();
    let root = repo_root().join(".kvcm/test-data").join(unique("tair-metrics"));
    assert_ok(&api.admin("addStorage", nfs("tm_nfs", root.to_str().unwrap())).await);
    assert_ok(&api.admin("createInstanceGroup", json!({"instance_group": group("tm", &["tm_nfs"], 1)})).await);
    assert_ok(&api.meta("registerInstance", registration("tm", "tm-inst")).await);
    // Two blocks written (1024 + 1024 bytes per block: two specs), three reads, one refused.
    let started = api.meta("startWriteCache", json!({"instance_id": "tm-inst", "block_keys": [1, 2]})).await;
    assert_ok(&started);
    let finish = json!({"instance_id": "tm-inst", "write_session_id": started.1["write_session_id"], "success_blocks": {"offset": 2}});
    assert_ok(&api.meta("finishWriteCache", finish).await);
    let read = json!({"instance_id": "tm-inst", "query_type": "QT_PREFIX_MATCH", "block_keys": [1, 2, 3]});
    for _ in 0..3 {
        assert_ok(&api.meta("getCacheLocation", read.clone()).await);
    }
    let bad = json!({"instance_id": "tm-inst", "query_type": "QT_PREFIX_MATCH", "block_keys": []});
    assert_eq!(code(&api.meta("getCacheLocation", bad).await.1), "INVALID_ARGUMENT");

    let (_, m) = api.admin("getMetrics", json!({})).await;
    let get = [("api_name", "GetCacheLocation")];
    assert_eq!(tair_metric(&m, "service.query_counter", &get), Some(4.0), "{m}");
    assert!(tair_metric(&m, "service.query_rt_us", &get).unwrap() > 0.0);
    assert!(tair_metric(&m, "service.qps", &get).unwrap() > 0.0);
    assert!(tair_metric(&m, "service.error_qps", &get).unwrap() > 0.0, "one of the four was refused");
    assert_eq!(tair_metric(&m, "service.query_counter", &[("api_name", "AddStorage")]), Some(1.0));
    let inst = [("instance_id", "tm-inst")];
    assert_eq!(tair_metric(&m, "manager.request_key_count", &inst), Some(9.0), "3 reads of 3 keys");
    assert_eq!(tair_metric(&m, "manager.prefix_match_len", &inst), Some(2.0));
    assert_eq!(tair_metric(&m, "cache_manager_instance.key_count", &inst), Some(2.0));
    assert_eq!(tair_metric(&m, "meta_indexer.total_key_count", &inst), Some(2.0));
    assert_eq!(tair_metric(&m, "cache_manager_instance.byte_size", &inst), Some(4096.0));
    assert_eq!(tair_metric(&m, "data_storage.healthy_status", &[("storage_unique_name", "tm_nfs")]), Some(1.0));
    assert_ok(&api.admin("disableStorage", json!({"storage_unique_name": "tm_nfs"})).await);
    // Within a second of the previous call, the rates are that window's again.
    let (_, m) = api.admin("getMetrics", json!({})).await;
    assert_eq!(tair_metric(&m, "data_storage.healthy_status", &[("storage_unique_name", "tm_nfs")]), Some(0.0));
    assert!(tair_metric(&m, "service.qps", &get).unwrap() > 0.0, "{m}");
    // A second later, the window closes: no reads since.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (_, m) = api.admin("getMetrics", json!({})).await;
    assert_eq!(tair_metric(&m, "service.qps", &get), Some(0.0), "{m}");
    assert_eq!(tair_metric(&m, "service.error_qps", &get), Some(0.0), "{m}");
    // kvcm's own names are still there.
    assert!(m.to_string().contains("kvcm_http_requests_total"));
    // The group ratio comes from the usage cache quota checks share (usage_cache_ms, 1 s by
    // default): the write's own quota check cached the usage before it; a later call sees it.
    let group = [("instance_group", "tm")];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (_, m) = api.admin("getMetrics", json!({})).await;
        let ratio = tair_metric(&m, "cache_manager_group.usage_ratio", &group).unwrap();
        if (ratio - 4096.0 / 1_000_000.0).abs() < 1e-12 {
            break;
        }
        assert!(ratio == 0.0 && std::time::Instant::now() < deadline, "{ratio}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn health_cluster_info_metrics_and_leader_rpcs_answer() {
    let api = Api::start();
    let (_, h) = api.admin("checkHealth", json!({"trace_id": "t"})).await;
    assert_eq!((code(&h), &h["is_health"]), ("OK", &json!(true)));
    let (_, info) = api.admin("getManagerClusterInfo", json!({})).await;
    assert!(info["self_node_id"].as_str().unwrap().ends_with(&api.admin.rsplit(':').next().unwrap().to_string()));
    assert_eq!(info["leader_node_id"], info["self_node_id"]);
    assert_eq!(
        info["leader_endpoint"]["meta_http_port"].as_i64().unwrap().to_string(),
        api.meta.rsplit(':').next().unwrap()
    );
    for rpc in ["leaderDemote", "getLeaderElectorConfig", "updateLeaderElectorConfig"] {
        assert_err(&api.admin(rpc, json!({"campaign_delay_time_ms": 5})).await, "UNSUPPORTED", "no leader");
    }
    let (_, m) = api.admin("getMetrics", json!({})).await;
    let has = m["metrics"].as_array().unwrap().iter().any(|d| {
        d["metric_name"] == "kvcm_http_requests_total"
            && d["metric_tags"].as_array().unwrap().iter().any(|t| t["tag_value"] == "/api/checkHealth")
    });
    assert!(has, "{m}");
    let (status, text) = api.get_admin("/metrics").await;
    assert_eq!(status, 200);
    assert!(!text.contains("service_query_counter"), "GET /metrics stays kvcm's Prometheus names");
    assert!(
        text.contains(r#"kvcm_http_requests_total{code="UNSUPPORTED",plane="admin",route="/api/leaderDemote"} 1"#),
        "{text}"
    );
    assert!(text.contains(r#"kvcm_http_request_duration_seconds_count{plane="admin",route="/api/checkHealth"} 1"#));
    let (status, text) = api.get_admin("/api/healthy").await;
    assert_eq!((status, text.as_str()), (200, r#"{"status":"OK"}"#));
}

/// Tair's UpdateLogger: a frontend's log level changes at runtime (its own: no leader), for the
/// whole process or one module; bad levels and module names are refused.
#[tokio::test]
async fn update_logger_changes_this_frontends_log_level_at_runtime() {
    let api = Api::start();
    let debug_lines = || std::fs::read_to_string(&api.log).unwrap_or_default().matches("debug logging is on").count();
    assert_ok(&api.admin("updateLogger", json!({"log_level": "INFO"})).await);
    assert_eq!(debug_lines(), 0, "at INFO the debug line is filtered out");
    assert_ok(&api.admin("updateLogger", json!({"module_name": "kvcm_api", "log_level": "debug"})).await);
    let logged = eventually(std::time::Duration::from_secs(5), || async { (debug_lines() == 1).then_some(()) }).await;
    assert!(logged.is_some(), "DEBUG for kvcm_api did not take effect");
    refused(&api, "updateLogger", json!({"log_level": "VERBOSE"}), "INVALID_ARGUMENT", "DEBUG, INFO, WARN, ERROR")
        .await;
    refused(
        &api,
        "updateLogger",
        json!({"module_name": "a b", "log_level": "INFO"}),
        "INVALID_ARGUMENT",
        "module_name",
    )
    .await;
}

/// GenConfigSnapshot / LoadConfigSnapshot: the registry's configuration (no credentials) out of
/// one namespace and into another; loading is idempotent, and refused whole — nothing written —
/// when anything differs from what exists or is invalid.
#[tokio::test]
async fn a_config_snapshot_recreates_the_registry_elsewhere_and_loads_are_all_or_nothing() {
    let api = Api::start();
    let root = |n: &str| {
        let d = repo_root().join(".kvcm/test-data").join(unique(n));
        std::fs::create_dir_all(&d).unwrap();
        d.to_str().unwrap().to_string()
    };
    let (r1, r2) = (root("snap-a"), root("snap-b"));
    assert_ok(
        &api.admin("addStorage", json!({"storage": {"global_unique_name": "s1", "nfs": {"root_path": r1}}})).await,
    );
    assert_ok(
        &api.admin("addStorage", json!({"storage": {"global_unique_name": "s2", "nfs": {"root_path": r2}}})).await,
    );
    assert_ok(&api.admin("disableStorage", json!({"storage_unique_name": "s2"})).await);
    let group = json!({"instance_group": {"name": "g", "storage_candidates": ["s1", "s2"], "version": 3,
                       "quota": {"capacity": 1000000}}});
    assert_ok(&api.admin("createInstanceGroup", group).await);
    assert_ok(&api.admin("registerInstance", registration("g", "i1")).await);

    let (_, snap) = api.admin("genConfigSnapshot", json!({})).await;
    assert_eq!(code(&snap), "OK", "{snap}");
    let doc = snap["config_snapshot"].as_str().unwrap().to_string();
    let parsed: Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(parsed["kvcm_config_snapshot"], 1);
    assert_eq!(parsed["storages"].as_array().map(Vec::len), Some(2), "{doc}");
    assert_eq!(parsed["instances"][0]["instance_id"], "i1", "{doc}");
    assert!(parsed.get("accounts").is_none() && parsed.get("api_keys").is_none(), "credentials are not configuration");

    // Into an empty namespace: the same storages (s2 still disabled), group and instance.
    let other = Api::start();
    assert_ok(&other.admin("loadConfigSnapshot", json!({"config_snapshot": doc})).await);
    for rpc in ["listStorage", "listInstanceGroup"] {
        let (_, a) = api.admin(rpc, json!({})).await;
        let (_, b) = other.admin(rpc, json!({})).await;
        let strip = |mut v: Value| {
            v["header"] = Value::Null;
            v
        };
        assert_eq!(strip(a), strip(b), "{rpc}");
    }
    let (_, info) = other.admin("getInstanceInfo", json!({"instance_id": "i1"})).await;
    assert_eq!(info["instance_info"]["instance_group_name"], "g", "{info}");
    // Again: nothing to create, nothing changes.
    let before = dump_namespace(&other.namespace).await;
    assert_ok(&other.admin("loadConfigSnapshot", json!({"config_snapshot": doc})).await);
    assert_eq!(dump_namespace(&other.namespace).await, before, "an identical load changed the registry");

    // Anything that differs refuses the whole load, naming it, with nothing written.
    let mut changed = parsed.clone();
    changed["storages"][0]["nfs"]["root_path"] = json!(root("snap-c"));
    changed["instance_groups"][0]["name"] = json!("g2");
    changed["instances"][0]["instance_group_name"] = json!("g2");
    changed["instances"][0]["instance_id"] = json!("i2");
    let r = other.admin("loadConfigSnapshot", json!({"config_snapshot": changed.to_string()})).await;
    assert_err(&r, "INVALID_ARGUMENT", "exists with another configuration");
    assert_eq!(dump_namespace(&other.namespace).await, before, "a refused load wrote something");
    for bad in
        [json!("{"), json!({"kvcm_config_snapshot": 2}).to_string().into(), json!({"storages": 1}).to_string().into()]
    {
        let r = other.admin("loadConfigSnapshot", json!({"config_snapshot": bad})).await;
        assert_err(&r, "INVALID_ARGUMENT", "config_snapshot");
    }
    assert_eq!(dump_namespace(&other.namespace).await, before);
}
