//! Black-box tests of the meta plane's cache RPCs through real kvcm-api processes on a real
//! Valkey cluster: the engine cycle, every query type, masks, spec filters, two-phase writes
//! and their errors, removal and trims. Failed requests are checked to change nothing.

use kvcm_tests::*;
use serde_json::{Value, json};
use std::time::Duration;

async fn unchanged<F: std::future::Future<Output = Value>>(ns: &str, f: F, code_: &str, needle: &str) {
    let before = dump_namespace(ns).await;
    let r = f.await;
    assert_err(&(200, r), code_, needle);
    assert_eq!(dump_namespace(ns).await, before, "a failed request changed state");
}

#[tokio::test]
async fn an_engine_writes_its_blocks_to_the_returned_paths_and_reads_them_back() {
    let fx = Fixture::new(&[("tp0", 64), ("tp1", 64)], 1, json!({})).await;
    let tokens: Vec<i64> = (1..=18).collect(); // 4 full blocks of 4 tokens; 2 dropped
    let (_, s) = fx
        .api
        .meta("startWriteCache", json!({"instance_id": fx.instance, "token_ids": tokens, "write_timeout_seconds": 30}))
        .await;
    assert_eq!(code(&s), "OK", "{s}");
    assert_eq!(s["block_mask"], json!({"offset": 0}));
    let locs = s["locations"].as_array().unwrap();
    assert_eq!(locs.len(), 4);
    for (i, loc) in locs.iter().enumerate() {
        assert_eq!(loc["type"], "ST_NFS");
        assert_eq!(loc["spec_size"], 2);
        for spec in loc["location_specs"].as_array().unwrap() {
            let path = file_path(spec["uri"].as_str().unwrap());
            assert!(path.starts_with(&fx.root), "{path:?}");
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, vec![i as u8; 64]).unwrap();
        }
    }
    // Not visible before the finish.
    let (_, early) = fx
        .api
        .meta(
            "getCacheLocation",
            json!({"instance_id": fx.instance, "query_type": "QT_PREFIX_MATCH", "token_ids": tokens}),
        )
        .await;
    assert_eq!(early["locations"], json!([]));
    assert_ok(&(200, fx.finish(&s, json!({"bool_masks": {"values": [true, true, true, true]}})).await));
    let (_, read) = fx
        .api
        .meta(
            "getCacheLocation",
            json!({"instance_id": fx.instance, "query_type": "QT_PREFIX_MATCH", "token_ids": tokens}),
        )
        .await;
    assert_eq!(read["locations"], s["locations"], "a read returns exactly what the write handed out");
    for (i, loc) in read["locations"].as_array().unwrap().iter().enumerate() {
        for spec in loc["location_specs"].as_array().unwrap() {
            assert_eq!(std::fs::read(file_path(spec["uri"].as_str().unwrap())).unwrap(), vec![i as u8; 64]);
        }
    }
    // A longer prompt with the same prefix matches the stored prefix only.
    let longer: Vec<i64> = (1..=24).collect();
    let (_, r) = fx
        .api
        .meta(
            "getCacheLocation",
            json!({"instance_id": fx.instance, "query_type": "QT_PREFIX_MATCH", "token_ids": longer}),
        )
        .await;
    assert_eq!(r["locations"].as_array().unwrap().len(), 4);
}

#[tokio::test]
async fn query_types_follow_the_design_examples() {
    let fx = Fixture::new(&[("tp0", 8)], 1, json!({})).await;
    fx.write(&[1, 2, 3, 4, 5]).await;
    let sw = fx.get("QT_REVERSE_ROLL_SW_MATCH", &[1, 2, 3, 4, 5, 6, 7], json!({"sw_size": 2})).await;
    assert_eq!(Fixture::real(&sw), vec![false, false, false, true, true, false, false], "{sw}");
    let sw = fx.get("QT_REVERSE_ROLL_SW_MATCH", &[1, 2, 3, 10, 5, 6, 7], json!({"sw_size": 2})).await;
    assert_eq!(Fixture::real(&sw), vec![false, true, true, false, false, false, false]);
    let batch = fx.get("QT_BATCH_GET", &[9, 1, 10, 5], json!({"block_mask": {"offset": 4}})).await;
    assert_eq!(Fixture::real(&batch), vec![false, true, false, true], "batch ignores the mask");
    assert_eq!(
        batch["locations"][0]["location_specs"],
        json!([{"name": "tp0", "uri": ""}]),
        "placeholders keep spec names"
    );
    let prefix = fx.get("QT_PREFIX_MATCH", &[1, 2, 9, 4], json!({})).await;
    assert_eq!(prefix["locations"].as_array().unwrap().len(), 2);
    // Numbers given as enum numbers and keys as strings work too.
    let (_, p) = fx
        .api
        .meta("getCacheLocation", json!({"instance_id": fx.instance, "query_type": 2, "block_keys": ["1", "2"]}))
        .await;
    assert_eq!(p["locations"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn prefix_masks_in_both_forms_skip_blocks_the_engine_has() {
    let fx = Fixture::new(&[("tp0", 8)], 1, json!({})).await;
    fx.write(&[3, 4]).await;
    let r = fx.get("QT_PREFIX_MATCH", &[1, 2, 3, 4, 5], json!({"block_mask": {"offset": 2}})).await;
    assert_eq!(r["locations"].as_array().unwrap().len(), 2, "{r}");
    let r = fx
        .get(
            "QT_PREFIX_MATCH",
            &[1, 3, 2, 4],
            json!({"block_mask": {"bool_masks": {"values": [true, false, true, false]}}}),
        )
        .await;
    assert_eq!(r["locations"].as_array().unwrap().len(), 2, "{r}");
    let r = fx.get("QT_PREFIX_MATCH", &[1, 3, 4], json!({})).await;
    assert_eq!(r["locations"], json!([]), "without the mask block 1 is a miss and stops the match");
}

#[tokio::test]
async fn spec_filters_and_spec_groups_shape_the_locations() {
    let fx = Fixture::new(&[("tp0", 16), ("tp1", 32)], 1, json!({})).await;
    fx.write(&[1]).await;
    let r = fx.get("QT_BATCH_GET", &[1, 2], json!({"location_spec_names": ["tp1"]})).await;
    assert_eq!(r["locations"][0]["spec_size"], 1);
    assert_eq!(r["locations"][0]["location_specs"][0]["name"], "tp1");
    assert!(r["locations"][0]["location_specs"][0]["uri"].as_str().unwrap().ends_with("?size=32"));
    assert_eq!(r["locations"][1]["location_specs"], json!([{"name": "tp1", "uri": ""}]));
    // A block written with only the "first" spec group carries only tp0.
    let (_, s) = fx
        .api
        .meta(
            "startWriteCache",
            json!({"instance_id": fx.instance, "block_keys": [7, 8], "location_spec_group_names": ["first", "first"]}),
        )
        .await;
    assert_eq!(code(&s), "OK", "{s}");
    assert_eq!(s["locations"][0]["spec_size"], 1);
    assert_eq!(s["locations"][0]["location_specs"][0]["name"], "tp0");
    let ns = fx.api.namespace.clone();
    unchanged(
        &ns,
        async {
            fx.api
                .meta(
                    "startWriteCache",
                    json!({"instance_id": fx.instance, "block_keys": [9], "location_spec_group_names": ["nope"]}),
                )
                .await
                .1
        },
        "INVALID_ARGUMENT",
        "\"nope\"",
    )
    .await;
    unchanged(
        &ns,
        async {
            fx.api
                .meta(
                    "startWriteCache",
                    json!({"instance_id": fx.instance, "block_keys": [9, 10], "location_spec_group_names": ["first"]}),
                )
                .await
                .1
        },
        "INVALID_ARGUMENT",
        "1 entries for 2 blocks",
    )
    .await;
}

#[tokio::test]
async fn start_write_masks_present_blocks_as_an_offset_or_bools() {
    let fx = Fixture::new(&[("tp0", 8)], 1, json!({})).await;
    fx.write(&[1, 2]).await;
    let s = fx.start(&[1, 2, 3, 4]).await;
    assert_eq!(s["block_mask"], json!({"offset": 2}));
    assert_eq!(s["locations"].as_array().unwrap().len(), 2);
    let s2 = fx.start(&[5, 1, 6, 3]).await; // 3 is writing (present), 1 serving
    assert_eq!(s2["block_mask"], json!({"bool_masks": {"values": [false, true, false, true]}}));
    assert_eq!(s2["locations"].as_array().unwrap().len(), 2);
    let none = fx.start(&[1, 2]).await;
    assert_eq!(code(&none), "OK");
    assert_eq!(none["block_mask"], json!({"offset": 2}));
    assert_eq!(none["locations"], json!([]));
    assert!(!none["write_session_id"].as_str().unwrap().is_empty());
    assert_ok(&(200, fx.finish(&none, json!({"offset": 0})).await));
    let dup = fx.start(&[8, 8]).await;
    assert_eq!(
        dup["block_mask"],
        json!({"bool_masks": {"values": [false, true]}}),
        "a key twice in one request is written once"
    );
}

#[tokio::test]
async fn finish_makes_successes_serving_and_queues_failures_for_deletion() {
    let fx = Fixture::new(&[("tp0", 8)], 1, json!({})).await;
    let s = fx.start(&[1, 2, 3]).await;
    assert_ok(&(200, fx.finish(&s, json!({"bool_masks": {"values": [true, false, true]}})).await));
    let r = fx.get("QT_BATCH_GET", &[1, 2, 3], json!({})).await;
    assert_eq!(Fixture::real(&r), vec![true, false, true]);
    let mut conn = valkey().await;
    let del = format!("{}:v1:{{i:{}}}:del", fx.api.namespace, fx.instance);
    let queued: i64 = redis::cmd("XLEN").arg(&del).query_async(&mut conn).await.unwrap();
    assert_eq!(queued, 1, "the failed block's location is queued for physical deletion");
    // The failed key can be written again.
    assert_eq!(fx.start(&[2]).await["locations"].as_array().unwrap().len(), 1);
    // Finishing again with other success_blocks is refused; with the same ones (what a client's
    // retry sends) it answers like the first finish and changes nothing.
    assert_err(&(200, fx.finish(&s, json!({"offset": 3})).await), "INVALID_ARGUMENT", "already finished");
    assert_ok(&(200, fx.finish(&s, json!({"bool_masks": {"values": [true, false, true]}})).await));
    assert_eq!(Fixture::real(&fx.get("QT_BATCH_GET", &[1, 2, 3], json!({})).await), vec![true, false, true]);
}

#[tokio::test]
async fn finish_errors_change_nothing() {
    let fx = Fixture::new(&[("tp0", 8)], 1, json!({})).await;
    let s = fx.start(&[1, 2]).await;
    let ns = fx.api.namespace.clone();
    unchanged(
        &ns,
        fx.finish(&s, json!({"bool_masks": {"values": [true]}})),
        "INVALID_ARGUMENT",
        "has 1 values; the session has 2",
    )
    .await;
    unchanged(&ns, fx.finish(&s, json!({"offset": 3})), "INVALID_ARGUMENT", "outside 0..=2").await;
    unchanged(
        &ns,
        fx.finish(&json!({"write_session_id": "0123456789abcdef"}), json!({"offset": 0})),
        "INVALID_ARGUMENT",
        "unknown",
    )
    .await;
    unchanged(
        &ns,
        fx.finish(&json!({"write_session_id": "not-a-session"}), json!({"offset": 0})),
        "INVALID_ARGUMENT",
        "not a session id",
    )
    .await;
    let other = fx
        .api
        .meta("finishWriteCache", json!({"instance_id": "nobody", "write_session_id": s["write_session_id"]}))
        .await;
    assert_err(&other, "INSTANCE_NOT_EXIST", "'nobody'");
    assert_ok(&(200, fx.finish(&s, json!({"offset": 2})).await));
}

#[tokio::test]
async fn a_session_finished_after_its_deadline_is_refused_and_stores_nothing() {
    let fx = Fixture::new(&[("tp0", 8)], 1, json!({})).await;
    let (_, s) = fx
        .api
        .meta("startWriteCache", json!({"instance_id": fx.instance, "block_keys": [1, 2], "write_timeout_seconds": 1}))
        .await;
    assert_eq!(code(&s), "OK");
    // Wait for the deadline itself (time passing is the condition, not background work).
    let deadline = std::time::Instant::now() + Duration::from_millis(2100);
    while std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_err(&(200, fx.finish(&s, json!({"offset": 2})).await), "INVALID_ARGUMENT", "expired");
    let r = fx.get("QT_BATCH_GET", &[1, 2], json!({})).await;
    assert_eq!(Fixture::real(&r), vec![false, false], "expired locations never become serving");
    let bad = fx
        .api
        .meta(
            "startWriteCache",
            json!({"instance_id": fx.instance, "block_keys": [3], "write_timeout_seconds": 100000}),
        )
        .await;
    assert_err(&bad, "INVALID_ARGUMENT", "write_timeout_seconds must be within");
}

#[tokio::test]
async fn a_session_started_on_one_frontend_finishes_on_another() {
    let ns = unique("ns");
    let fx = Fixture::on(Api::start_with(&ns, &[]), &[("tp0", 8)], 1, json!({})).await;
    let other = Api::start_with(&ns, &[]);
    let s = fx.start(&[1, 2]).await;
    let (_, f) = other.meta("finishWriteCache", json!({"instance_id": fx.instance, "write_session_id": s["write_session_id"], "success_blocks": {"offset": 2}})).await;
    assert_eq!(code(&f), "OK", "{f}");
    let (_, r) = other
        .meta(
            "getCacheLocation",
            json!({"instance_id": fx.instance, "query_type": "QT_PREFIX_MATCH", "block_keys": [1, 2]}),
        )
        .await;
    assert_eq!(r["locations"], s["locations"]);
}

#[tokio::test]
async fn bad_reads_are_refused_with_a_reason_and_change_nothing() {
    let fx = Fixture::new(&[("tp0", 8)], 1, json!({})).await;
    fx.write(&[1, 2]).await;
    let ns = fx.api.namespace.clone();
    let get = |body: Value| async { fx.api.meta("getCacheLocation", body).await.1 };
    let i = fx.instance.clone();
    unchanged(
        &ns,
        get(json!({"instance_id": "ghost", "query_type": "QT_PREFIX_MATCH", "block_keys": [1]})),
        "INSTANCE_NOT_EXIST",
        "'ghost'",
    )
    .await;
    unchanged(&ns, get(json!({"instance_id": i, "query_type": "QT_PREFIX_MATCH"})), "INVALID_ARGUMENT", "both empty")
        .await;
    unchanged(
        &ns,
        get(json!({"instance_id": i, "query_type": "QT_PREFIX_MATCH", "token_ids": [1, 2]})),
        "INVALID_ARGUMENT",
        "fewer than one block",
    )
    .await;
    unchanged(&ns, get(json!({"instance_id": i, "block_keys": [1]})), "INVALID_ARGUMENT", "query_type is required")
        .await;
    for sw in [0, 3, -1] {
        unchanged(&ns, get(json!({"instance_id": i, "query_type": "QT_REVERSE_ROLL_SW_MATCH", "block_keys": [1, 2], "sw_size": sw})), "INVALID_ARGUMENT", "sw_size must be within 1..=2").await;
    }
    unchanged(&ns, get(json!({"instance_id": i, "query_type": "QT_PREFIX_MATCH", "block_keys": [1, 2], "block_mask": {"offset": 3}})), "INVALID_ARGUMENT", "outside 0..=2").await;
    unchanged(&ns, get(json!({"instance_id": i, "query_type": "QT_PREFIX_MATCH", "block_keys": [1, 2], "block_mask": {"bool_masks": {"values": [true]}}})), "INVALID_ARGUMENT", "1 values for 2 blocks").await;
    unchanged(&ns, get(json!({"instance_id": i, "query_type": "QT_PREFIX_MATCH", "block_keys": [1], "block_mask": {"offset": 0, "bool_masks": {"values": [true]}}})), "INVALID_ARGUMENT", "both").await;
    let (status, _) =
        fx.api.meta("getCacheLocation", json!({"instance_id": i, "query_type": "QT_NOPE", "block_keys": [1]})).await;
    assert_eq!(status, 400);
    let start = |body: Value| async { fx.api.meta("startWriteCache", body).await.1 };
    unchanged(&ns, start(json!({"instance_id": i})), "INVALID_ARGUMENT", "both empty").await;
    unchanged(&ns, start(json!({"instance_id": "ghost", "block_keys": [5]})), "INSTANCE_NOT_EXIST", "registerInstance")
        .await;
}

#[tokio::test]
async fn remove_cache_honours_the_mask_and_queues_deletions() {
    let fx = Fixture::new(&[("tp0", 8)], 1, json!({})).await;
    fx.write(&[1, 2, 3, 4]).await;
    let (_, r) = fx
        .api
        .meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [1, 2, 3], "block_mask": {"offset": 1}}))
        .await;
    assert_eq!(code(&r), "OK", "{r}");
    let got = fx.get("QT_BATCH_GET", &[1, 2, 3, 4], json!({})).await;
    assert_eq!(Fixture::real(&got), vec![true, false, false, true]);
    let mut conn = valkey().await;
    let del = format!("{}:v1:{{i:{}}}:del", fx.api.namespace, fx.instance);
    let queued: i64 = redis::cmd("XLEN").arg(&del).query_async(&mut conn).await.unwrap();
    assert_eq!(queued, 2);
    let (_, meta) = fx.api.meta("getCacheMeta", json!({"instance_id": fx.instance, "block_keys": [1, 2, 9]})).await;
    let status: Vec<String> = meta["metas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| serde_json::from_str::<Value>(m.as_str().unwrap()).unwrap()["status"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(status, vec!["CLS_SERVING", "CLS_DELETING", "CLS_NOT_FOUND"]);
    // The admin plane has removeCache and getCacheMeta too.
    assert_ok(&fx.api.admin("removeCache", json!({"instance_id": fx.instance, "block_keys": [4]})).await);
    let (_, m) = fx.api.admin("getCacheMeta", json!({"instance_id": fx.instance, "block_keys": [4]})).await;
    assert!(m["metas"][0].as_str().unwrap().contains("CLS_DELETING"));
}

#[tokio::test]
async fn trim_cache_removes_everything_by_time_or_only_metadata() {
    let fx = Fixture::new(&[("tp0", 8)], 1, json!({})).await;
    fx.write(&[1, 2, 3]).await;
    let trim = |strategy: &str, b: i64, e: i64| {
        fx.api.meta(
            "trimCache",
            json!({"instance_id": fx.instance, "strategy": strategy, "begin_timestamp": b, "end_timestamp": e}),
        )
    };
    assert_err(&trim("TS_TIMESTAMP", 10, 5).await, "INVALID_ARGUMENT", "begin_timestamp < end_timestamp");
    assert_err(&trim("TS_UNSPECIFIED", 0, 0).await, "INVALID_ARGUMENT", "strategy is required");
    // Long ago: nothing matches.
    assert_ok(&trim("TS_TIMESTAMP", 0, 1_000_000).await);
    assert_eq!(Fixture::real(&fx.get("QT_BATCH_GET", &[1, 2, 3], json!({})).await), vec![true; 3]);
    assert_ok(&trim("TS_TIMESTAMP", 1_000_000, i32::MAX as i64).await);
    assert_eq!(Fixture::real(&fx.get("QT_BATCH_GET", &[1, 2, 3], json!({})).await), vec![false; 3]);
    fx.write(&[4, 5]).await;
    assert_ok(&trim("TS_REMOVE_ALL_CACHE", 0, 0).await);
    assert_eq!(Fixture::real(&fx.get("QT_BATCH_GET", &[4, 5], json!({})).await), vec![false; 2]);
    let mut conn = valkey().await;
    let del = format!("{}:v1:{{i:{}}}:del", fx.api.namespace, fx.instance);
    let entries: Vec<redis::Value> =
        redis::cmd("XRANGE").arg(&del).arg("-").arg("+").query_async(&mut conn).await.unwrap();
    assert_eq!(entries.len(), 3 + 1, "three timestamp removals and one trash entry");
    fx.write(&[6]).await;
    assert_ok(&trim("TS_REMOVE_ALL_META", 0, 0).await);
    assert_eq!(Fixture::real(&fx.get("QT_BATCH_GET", &[6], json!({})).await), vec![false]);
    let after: i64 = redis::cmd("XLEN").arg(&del).query_async(&mut conn).await.unwrap();
    assert_eq!(after, 4, "TS_REMOVE_ALL_META queues no deletion");
}

#[tokio::test]
async fn packed_files_share_one_file_per_run_of_blocks() {
    let fx = Fixture::new(&[("tp0", 100)], 3, json!({})).await;
    let s = fx.start(&[10, 11, 12, 13]).await;
    let uris = Fixture::first_uris(&s);
    assert!(uris[0].ends_with("?blkid=0&size=100") && uris[2].ends_with("?blkid=2&size=100"), "{uris:?}");
    assert_eq!(file_path(&uris[0]), file_path(&uris[2]));
    assert_ne!(file_path(&uris[2]), file_path(&uris[3]));
    assert!(uris[3].ends_with("?blkid=0&size=100"));
    assert!(file_path(&uris[0]).file_name().unwrap().to_str().unwrap().starts_with("000000000000000a_"));
    assert_ok(&(200, fx.finish(&s, json!({"offset": 4})).await));
    let r = fx.get("QT_PREFIX_MATCH", &[10, 11, 12, 13], json!({})).await;
    assert_eq!(r["locations"], s["locations"]);
}

#[tokio::test]
async fn quotas_and_disabled_storages_steer_or_refuse_writes() {
    // Group total quota of 20 bytes; each block is 8.
    let fx = Fixture::new(&[("tp0", 8)], 1, json!({"quota": {"capacity": 20}})).await;
    fx.write(&[1, 2]).await;
    let ns = fx.api.namespace.clone();
    // The usage cache is 1 s; poll (with fresh keys each time) until the frontend sees the
    // 16 bytes in use.
    let next = std::sync::atomic::AtomicI64::new(100);
    let refused = eventually(Duration::from_secs(5), || async {
        let k = next.fetch_add(2, std::sync::atomic::Ordering::Relaxed);
        let r = fx.start(&[k, k + 1]).await;
        (code(&r) == "REACH_MAX_ENTITY_CAPACITY").then_some(r)
    })
    .await
    .expect("the quota is enforced");
    assert!(message(&refused).contains("quota is used up"), "{refused}");
    unchanged(&ns, fx.start(&[3, 4]), "REACH_MAX_ENTITY_CAPACITY", "quota.capacity").await;
    assert_eq!(code(&fx.start(&[1]).await), "OK", "a write with nothing new needs no quota");

    // Per-type quota: file storages are full, so the write goes to the next candidate (hf3fs).
    let api = Api::start();
    let dir = repo_root().join(".kvcm/test-data").join(unique("q"));
    assert_ok(
        &api.admin(
            "addStorage",
            json!({"storage": {"global_unique_name": "f", "nfs": {"root_path": dir.join("nfs").to_str().unwrap()}}}),
        )
        .await,
    );
    assert_ok(&api.admin("addStorage", json!({"storage": {"global_unique_name": "t", "threefs": {"mountpoint": dir.to_str().unwrap(), "root_dir": "3fs"}}})).await);
    assert_ok(
        &api.admin(
            "createInstanceGroup",
            json!({"instance_group": {"name": "g", "storage_candidates": ["f", "t"],
        "quota": {"capacity": 0, "quota_config": [{"storage_type": "ST_NFS", "capacity": 10}]}}}),
        )
        .await,
    );
    assert_ok(
        &api.meta(
            "registerInstance",
            json!({"instance_group": "g", "instance_id": "i", "block_size": 4,
        "location_spec_infos": [{"name": "tp0", "size": 8}], "model_deployment": {"model_name": "m", "dtype": "bf16"}}),
        )
        .await,
    );
    let start = |keys: Vec<i64>| api.meta("startWriteCache", json!({"instance_id": "i", "block_keys": keys}));
    let (_, s) = start(vec![1]).await;
    assert_eq!(s["locations"][0]["type"], "ST_NFS", "{s}");
    assert_ok(
        &api.meta(
            "finishWriteCache",
            json!({"instance_id": "i", "write_session_id": s["write_session_id"], "success_blocks": {"offset": 1}}),
        )
        .await,
    );
    let moved = eventually(Duration::from_secs(5), || async {
        let (_, s) = start(vec![next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)]).await;
        (s["locations"][0]["type"] == "ST_3FS").then_some(s)
    })
    .await;
    assert!(moved.is_some(), "with the file quota used up, writes go to 3FS");
    // Disabling the 3FS storage leaves nothing: a clear refusal naming why.
    assert_ok(&api.admin("disableStorage", json!({"storage_unique_name": "t"})).await);
    let (_, r) = start(vec![3]).await;
    assert_eq!(code(&r), "REACH_MAX_ENTITY_CAPACITY", "{r}");
    assert!(message(&r).contains("t (disabled)") && message(&r).contains("f (ST_NFS quota used up)"), "{r}");
}

#[tokio::test]
async fn remove_instance_trims_its_cache_first() {
    let fx = Fixture::new(&[("tp0", 8)], 1, json!({})).await;
    fx.write(&[1, 2]).await;
    assert_ok(&fx.api.admin("removeInstance", json!({"instance_id": fx.instance})).await);
    let mut conn = valkey().await;
    let prefix = format!("{}:v1:{{i:{}}}:", fx.api.namespace, fx.instance);
    let blocks: i64 = redis::cmd("HLEN").arg(format!("{prefix}blocks")).query_async(&mut conn).await.unwrap();
    assert_eq!(blocks, 0);
    let del: i64 = redis::cmd("XLEN").arg(format!("{prefix}del")).query_async(&mut conn).await.unwrap();
    assert_eq!(del, 1, "the trash of the trim is queued for the deleter");
    assert_err(
        &fx.api.meta("getCacheLocation", json!({"instance_id": fx.instance, "query_type": 2, "block_keys": [1]})).await,
        "INSTANCE_NOT_EXIST",
        "not registered",
    );
}

#[tokio::test]
async fn the_event_log_records_reads_and_writes_as_json_lines() {
    let dir = repo_root().join(".kvcm/test-data").join(unique("events"));
    let path = dir.join("events.jsonl");
    let api = Api::start_with(&unique("ns"), &[("KVCM_EVENT_LOG_PATH", path.to_str().unwrap())]);
    let fx = Fixture::on(api, &[("tp0", 8)], 1, json!({})).await;
    fx.write(&[1, 2]).await;
    fx.get("QT_PREFIX_MATCH", &[1, 2, 3], json!({})).await;
    let lines = eventually(Duration::from_secs(5), || async {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        (lines.len() >= 3).then_some(lines)
    })
    .await
    .expect("three events");
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(types, vec!["startWriteCache", "finishWriteCache", "getCacheLocation"]);
    assert_eq!(lines[2]["keys"], json!([1, 2, 3]));
    assert_eq!(lines[2]["source"], json!(fx.instance));
    assert_eq!(lines[2]["query_type"], "QT_PREFIX_MATCH");
    assert_eq!(lines[0]["write_session_id"], lines[1]["write_session_id"]);
    assert!(lines[2]["trigger_time_us"].as_u64().unwrap() > 1_700_000_000_000_000);
    // kvcm-optimizer replays it: one lookup of three blocks.
    let out = std::process::Command::new(bin_path("kvcm-optimizer"))
        .args(["stats", "--format", "kvcm", "--trace", path.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("requests:          1") && text.contains("block accesses:    3"), "{text}");
}

#[tokio::test]
async fn a_storage_that_still_holds_blocks_cannot_be_removed() {
    let fx = Fixture::new(&[("tp0", 8)], 1, json!({})).await;
    fx.write(&[1, 2]).await;
    // Drop it from the group's candidates, so only the blocks keep it in use.
    let dir = repo_root().join(".kvcm/test-data").join(unique("other"));
    assert_ok(
        &fx.api
            .admin(
                "addStorage",
                json!({"storage": {"global_unique_name": "other", "nfs": {"root_path": dir.to_str().unwrap()}}}),
            )
            .await,
    );
    assert_ok(&fx.api.admin("updateInstanceGroup", json!({"instance_group": {"name": "g", "storage_candidates": ["other"], "version": 2}, "current_version": 1})).await);
    let ns = fx.api.namespace.clone();
    unchanged(
        &ns,
        async { fx.api.admin("removeStorage", json!({"storage_unique_name": "files"})).await.1 },
        "INVALID_ARGUMENT",
        "still holds 2 block(s)",
    )
    .await;
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [1, 2]})).await);
    // Their deletions wait for a worker, which needs the storage to delete the files.
    let (_, refused) = fx.api.admin("removeStorage", json!({"storage_unique_name": "files"})).await;
    assert_err(&(200, refused), "INVALID_ARGUMENT", "2 deletion(s) queued");
    let _w = WorkerProc::start(&fx.api.namespace, &[]);
    let removed = eventually(std::time::Duration::from_secs(15), || async {
        let (_, r) = fx.api.admin("removeStorage", json!({"storage_unique_name": "files"})).await;
        (code(&r) == "OK").then_some(())
    })
    .await;
    assert!(removed.is_some(), "removeStorage still refused once the worker had deleted the files");
}

#[tokio::test]
async fn long_prefixes_read_in_chunks_match_exactly() {
    let fx = Fixture::new(&[("tp0", 8)], 1, json!({})).await;
    let keys: Vec<i64> = (1..=3000).collect();
    fx.write(&keys).await;
    let all = fx.get("QT_PREFIX_MATCH", &keys, json!({})).await;
    assert_eq!(all["locations"].as_array().unwrap().len(), 3000);
    let last = all["locations"][2999]["location_specs"][0]["uri"].as_str().unwrap();
    assert!(last.contains(&format!("{:016x}", 3000u64)), "chunks are joined in order: {last}");
    let mut gap = keys.clone();
    gap[2500] = 999_999; // a miss in the third chunk
    assert_eq!(fx.get("QT_PREFIX_MATCH", &gap, json!({})).await["locations"].as_array().unwrap().len(), 2500);
    let batch = Fixture::real(&fx.get("QT_BATCH_GET", &gap, json!({})).await);
    assert_eq!(batch.iter().filter(|h| !**h).count(), 1);
    assert!(!batch[2500]);
}

/// `getCacheLocationLen` answers how many blocks `getCacheLocation` would return as real
/// locations, for each query type, without the locations and without refreshing recency (a
/// scheduler probing many instances must not keep their blocks alive).
#[tokio::test]
async fn get_cache_location_len_counts_what_a_read_would_return_and_touches_nothing() {
    let fx = Fixture::new(&[("tp0", 64)], 1, json!({})).await;
    fx.write(&[1, 2, 3]).await;
    fx.write(&[1, 2, 3, 5]).await;
    let fx = &fx;
    let len = |query: &str, keys: Vec<i64>, sw: i32| {
        let body = json!({"instance_id": fx.instance, "query_type": query, "block_keys": keys, "sw_size": sw});
        async move { fx.api.meta("getCacheLocationLen", body).await.1 }
    };
    for (query, keys, sw) in [
        ("QT_PREFIX_MATCH", vec![1, 2, 3, 4, 5], 0),
        ("QT_PREFIX_MATCH", vec![9, 1, 2], 0),
        ("QT_BATCH_GET", vec![1, 9, 3, 5], 0),
        ("QT_REVERSE_ROLL_SW_MATCH", vec![1, 2, 3, 5], 2),
    ] {
        let extra = if sw > 0 { json!({"sw_size": sw}) } else { json!({}) };
        let full = fx.get(query, &keys, extra).await;
        let real = Fixture::real(&full).iter().filter(|r| **r).count();
        let r = len(query, keys.clone(), sw).await;
        assert_eq!(code(&r), "OK", "{r}");
        assert_eq!(r["cache_location_len"], real.to_string(), "{query} {keys:?}: {r} vs {full}");
    }
    assert_eq!(len("QT_PREFIX_MATCH", vec![1, 2, 3, 4, 5], 0).await["cache_location_len"], "3");
    assert_eq!(len("QT_BATCH_GET", vec![1, 9, 3, 5], 0).await["cache_location_len"], "3");

    // No recency refresh: the namespace is byte for byte the same after a Len probe, while the
    // same getCacheLocation moves its deepest block's recency (off the request path: polled).
    // First the earlier reads' own recency updates must have landed: wait for the namespace to
    // hold still (two equal dumps in a row), not for a guessed time.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut before = dump_namespace(&fx.api.namespace).await;
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = dump_namespace(&fx.api.namespace).await;
        if now == before {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the namespace never settled");
        before = now;
    }
    assert_eq!(len("QT_PREFIX_MATCH", vec![1, 2, 3, 5], 0).await["cache_location_len"], "4");
    // An absence cannot be polled for: give a touch (were there one) the time the control below
    // needs to show one, then check nothing moved.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(dump_namespace(&fx.api.namespace).await, before, "getCacheLocationLen changed state");
    fx.get("QT_PREFIX_MATCH", &[1, 2, 3, 5], json!({})).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while dump_namespace(&fx.api.namespace).await == before {
        assert!(std::time::Instant::now() < deadline, "a getCacheLocation never refreshed recency");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let bad = json!({"instance_id": fx.instance, "query_type": "QT_UNSPECIFIED", "block_keys": [1]});
    assert_err(&fx.api.meta("getCacheLocationLen", bad).await, "INVALID_ARGUMENT", "query_type");
    let unknown = json!({"instance_id": "nobody", "query_type": "QT_PREFIX_MATCH", "block_keys": [1]});
    assert_err(&fx.api.meta("getCacheLocationLen", unknown).await, "INSTANCE_NOT_EXIST", "nobody");
}

/// `getClusterInfo`: every frontend names itself (there is no leader to find) and says so.
#[tokio::test]
async fn get_cluster_info_names_the_frontend_that_answers() {
    let api = Api::start();
    let (_, r) = api.meta("getClusterInfo", json!({"trace_id": "t", "instance_id": "any"})).await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_eq!(r["leader_node_id"], r["self_node_id"]);
    assert_eq!(r["leader_endpoint"]["node_id"], r["self_node_id"]);
    assert_eq!(r["leader_endpoint"]["meta_http_port"].to_string(), api.meta.rsplit(':').next().unwrap());
    assert!(r["leader_endpoint"]["custom_info"].as_str().unwrap().contains("leaderless"), "{r}");
    let long = "x".repeat(100_000);
    assert_err(&api.meta("getClusterInfo", json!({"instance_id": long})).await, "INVALID_ARGUMENT", "instance_id");
}
