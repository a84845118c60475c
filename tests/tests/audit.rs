//! The auditor (`kvcm-worker audit`) finds each kind of difference between Valkey and the
//! storage directories it is meant to find — so that its "clean" in the chaos suite means
//! something.

use kvcm_tests::chaos::auditor;
use kvcm_tests::*;
use serde_json::json;

#[tokio::test]
async fn the_auditor_finds_missing_and_orphan_files_wrong_usage_and_stuck_deletions() {
    let fx = Fixture::new(&[("tp0", 64)], 1, json!({})).await;
    let paths = fx.write_files(&[1, 2, 3]).await;
    assert_eq!(paths.len(), 3);
    let w = auditor(&valkey_url(), &fx.api.namespace).await;
    let a = kvcm_worker::audit::run(&w).await.unwrap();
    assert!(a.clean() && a.drained(), "{a:#?}");
    assert_eq!((a.serving_locations, a.files_seen), (3, 3), "{a:#?}");

    // A serving block's file gone; a file no block accounts for.
    std::fs::remove_file(&paths[0]).unwrap();
    let stray = paths[1].with_file_name("00000000000000ff");
    std::fs::write(&stray, b"leaked!").unwrap();
    // Usage counted twice for some bytes.
    let mut c = valkey().await;
    let usage = instance_key(&fx.api.namespace, &fx.instance, "usage");
    let fields: Vec<String> = redis::cmd("HKEYS").arg(&usage).query_async(&mut c).await.unwrap();
    let bytes_field = fields.iter().find(|f| f.starts_with('b')).unwrap().clone();
    let _: i64 = redis::cmd("HINCRBY").arg(&usage).arg(&bytes_field).arg(5).query_async(&mut c).await.unwrap();
    // A location marked deleting that no deletion entry names.
    let blocks = instance_key(&fx.api.namespace, &fx.instance, "blocks");
    let field3 = 3i64.to_be_bytes().to_vec();
    let mut rec: Vec<u8> = redis::cmd("HGET").arg(&blocks).arg(&field3).query_async(&mut c).await.unwrap();
    assert_eq!(rec[11], b'S');
    rec[11] = b'D';
    let _: () = redis::cmd("HSET").arg(&blocks).arg(&field3).arg(&rec).query_async(&mut c).await.unwrap();

    let a = kvcm_worker::audit::run(&w).await.unwrap();
    assert!(!a.clean(), "{a:#?}");
    assert_eq!(a.missing_files.count, 1, "{a:#?}");
    assert!(a.missing_files.shown[0].contains("0000000000000001"), "{a:#?}");
    assert_eq!((a.orphan_files.count, a.orphan_bytes), (1, 7), "{a:#?}");
    assert!(a.orphan_files.shown[0].contains("00000000000000ff"), "{a:#?}");
    assert_eq!(a.stuck_deletions.count, 1, "{a:#?}");
    assert!(a.stuck_deletions.shown[0].contains("0000000000000003"), "{a:#?}");
    // Two blocks serve now; usage still counts three and five bytes more.
    assert_eq!(a.usage_mismatches.count, 1, "{a:#?}");
    assert!(a.usage_mismatches.shown[0].contains("197 bytes in 3 blocks"), "{a:#?}");

    // Two records naming each other as parent; a write whose session is no longer open.
    let header = |parent: i64| [&[1u8][..], &parent.to_be_bytes(), &[0, 0]].concat();
    let _: () = redis::cmd("HSET")
        .arg(&blocks)
        .arg(10i64.to_be_bytes().to_vec())
        .arg(header(11))
        .arg(11i64.to_be_bytes().to_vec())
        .arg(header(10))
        .query_async(&mut c)
        .await
        .unwrap();
    let s = fx.start(&[20]).await;
    let sessions = instance_key(&fx.api.namespace, &fx.instance, "sessions");
    let _: () = redis::cmd("ZREM")
        .arg(&sessions)
        .arg(s["write_session_id"].as_str().unwrap())
        .query_async(&mut c)
        .await
        .unwrap();
    let a = kvcm_worker::audit::run(&w).await.unwrap();
    assert_eq!(a.parent_cycles.count, 2, "{a:#?}");
    assert_eq!((a.stuck_writes.count, a.writing_locations), (1, 1), "{a:#?}");
    assert!(a.stuck_writes.shown[0].contains("0000000000000014"), "{a:#?}");

    // The command line: the same report as JSON, exit status 1.
    let out = std::process::Command::new(bin_path("kvcm-worker"))
        .arg("audit")
        .env("KVCM_VALKEY_URL", valkey_url())
        .env("KVCM_NAMESPACE", &fx.api.namespace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["missing_files"]["count"], 1, "{report}");
    assert_eq!(report["orphan_bytes"], 7, "{report}");
}

#[tokio::test]
async fn packed_files_are_accounted_for_until_their_last_block_goes() {
    // Four blocks to a file, two specs: each file in both spec directories.
    let fx = Fixture::new(&[("tp0", 64), ("tp1", 64)], 4, json!({})).await;
    let paths = fx.write_files(&[1, 2, 3, 4, 5, 6]).await;
    let w = auditor(&valkey_url(), &fx.api.namespace).await;
    let a = kvcm_worker::audit::run(&w).await.unwrap();
    assert!(a.clean(), "{a:#?}");
    let distinct: std::collections::BTreeSet<_> = paths.iter().collect();
    assert_eq!((a.serving_locations, a.files_seen), (6, distinct.len() as u64), "{a:#?}");
    // One member of a file removed (queued, its file stays for the others): still clean.
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [2]})).await);
    let a = kvcm_worker::audit::run(&w).await.unwrap();
    assert!(a.clean(), "{a:#?}");
    assert_eq!(a.queued_deletions, 1, "{a:#?}");
}
