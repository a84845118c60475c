//! kvcm-worker through real processes: deletions really free files, abandoned writes are
//! cleaned up, reclamation brings usage back under the watermark by policy, and a killed worker's
//! work is finished by another. Every wait polls with a deadline.

use kvcm_tests::*;
use serde_json::{Value, json};
use std::time::Duration;

async fn int(cmd: &str, key: &str) -> i64 {
    let mut c = valkey().await;
    redis::cmd(cmd).arg(key).query_async(&mut c).await.unwrap()
}

#[tokio::test]
async fn removed_blocks_lose_their_files_and_their_metadata() {
    let fx = Fixture::new(&[("tp0", 2), ("tp1", 2)], 1, json!({})).await;
    let _w = WorkerProc::start(&fx.api.namespace, &[]);
    let paths = fx.write_files(&[1, 2, 3]).await;
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [2, 3]})).await);
    let blocks = instance_key(&fx.api.namespace, &fx.instance, "blocks");
    let del = instance_key(&fx.api.namespace, &fx.instance, "del");
    wait_until("the deletion stream is drained", 10, || async { int("XLEN", &del).await == 0 }).await;
    assert!(paths[0].exists() && paths[1].exists(), "block 1 (both specs) is kept");
    assert!(paths[2..].iter().all(|p| !p.exists()), "blocks 2 and 3 are gone from disk");
    assert_eq!(int("HLEN", &blocks).await, 1, "their metadata is gone too");
}

#[tokio::test]
async fn deletions_wait_for_an_unmounted_storage_root_instead_of_leaking_its_files() {
    let fx = Fixture::new(&[("tp0", 2)], 1, json!({})).await;
    let paths = fx.write_files(&[1, 2]).await;
    // The storage's mount goes away (the root directory is no longer there).
    let away = fx.root.with_extension("unmounted");
    std::fs::rename(&fx.root, &away).unwrap();
    let _w = WorkerProc::start(&fx.api.namespace, &[]);
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [2]})).await);
    let blocks = instance_key(&fx.api.namespace, &fx.instance, "blocks");
    let del = instance_key(&fx.api.namespace, &fx.instance, "del");
    let fail = instance_key(&fx.api.namespace, &fx.instance, "del_fail");
    // The deletion fails and waits (it used to count as done: metadata released, file leaked).
    wait_until("the deletion fails for the missing root", 10, || async { int("HLEN", &fail).await > 0 }).await;
    assert_eq!(int("XLEN", &del).await, 1, "the entry stays queued");
    assert_eq!(int("HLEN", &blocks).await, 2, "block 2's record is kept until its file is gone");
    // The mount returns: the retry deletes the file and then the metadata.
    std::fs::rename(&away, &fx.root).unwrap();
    wait_until("the deletion completes once the root is back", 15, || async { int("XLEN", &del).await == 0 }).await;
    assert!(paths[0].exists() && !paths[1].exists(), "block 2's file is deleted, block 1's kept");
    assert_eq!(int("HLEN", &blocks).await, 1);
}

#[tokio::test]
async fn remove_storage_waits_for_sessions_open_and_deletions_queued_on_it() {
    let fx = Fixture::new(&[("tp0", 2)], 1, json!({})).await;
    let other = fx.root.with_extension("other");
    std::fs::create_dir_all(&other).unwrap();
    let add = json!({"storage": {"global_unique_name": "other", "nfs": {"root_path": other.to_str().unwrap()}}});
    assert_ok(&fx.api.admin("addStorage", add).await);
    // A write is open on "files" when the group moves to "other".
    let s = fx.start(&[1, 2]).await;
    assert_eq!(code(&s), "OK", "{s}");
    let (_, g) = fx.api.admin("getInstanceGroup", json!({"name": "g"})).await;
    let mut group = g["instance_group"].clone();
    group["storage_candidates"] = json!(["other"]);
    group["version"] = json!(2);
    assert_ok(&fx.api.admin("updateInstanceGroup", json!({"instance_group": group, "current_version": 1})).await);
    let remove = || fx.api.admin("removeStorage", json!({"storage_unique_name": "files"}));
    assert_err(&remove().await, "INVALID_ARGUMENT", "1 write session(s) open and 0 deletion(s) queued");
    // The engine fails the write: its two locations wait for the deleter.
    assert_ok(&(200, fx.finish(&s, json!({"offset": 0})).await));
    assert_err(&remove().await, "INVALID_ARGUMENT", "0 write session(s) open and 2 deletion(s) queued");
    // Writes on the other storage do not hold it up.
    fx.write(&[7]).await;
    // Once a worker has deleted them, the storage can go.
    let _w = WorkerProc::start(&fx.api.namespace, &[]);
    wait_until("removeStorage succeeds", 15, || async { code(&remove().await.1) == "OK" }).await;
}

#[tokio::test]
async fn remove_storage_waits_for_deletions_of_a_removed_instance_still_draining() {
    let fx = Fixture::new(&[("tp0", 2)], 1, json!({})).await;
    fx.write_files(&[1, 2]).await;
    fx.write_files(&[7]).await;
    // Two blocks removed (two deletions queued on "files"), then the instance itself, which
    // trims block 7 into a trash no worker has expanded yet (one more entry, naming no storage):
    // the instance is gone from the registry, its deletion stream is not.
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [1, 2]})).await);
    assert_ok(&fx.api.admin("removeInstance", json!({"instance_id": fx.instance})).await);
    assert_ok(&fx.api.admin("removeInstanceGroup", json!({"name": "g"})).await);
    let remove = || fx.api.admin("removeStorage", json!({"storage_unique_name": "files"}));
    assert_err(&remove().await, "INVALID_ARGUMENT", "3 deletion(s) queued for instance");
    assert_err(&remove().await, "INVALID_ARGUMENT", "(removed, still draining)");
    let _w = WorkerProc::start(&fx.api.namespace, &[]);
    wait_until("removeStorage succeeds", 15, || async { code(&remove().await.1) == "OK" }).await;
    assert!(
        std::fs::read_dir(&fx.root).unwrap().flatten().all(|e| std::fs::read_dir(e.path()).map_or(true, |mut d| {
            d.all(|spec| spec.map_or(true, |s| std::fs::read_dir(s.path()).map_or(true, |mut f| f.next().is_none())))
        })),
        "every file of the removed instance was deleted before its storage went"
    );
}

#[tokio::test]
async fn an_abandoned_write_is_cleaned_up_within_its_timeout_plus_one_sweep() {
    let fx = Fixture::new(&[("tp0", 2)], 1, json!({})).await;
    let _w = WorkerProc::start(&fx.api.namespace, &[]);
    let (_, s) = fx
        .api
        .meta("startWriteCache", json!({"instance_id": fx.instance, "block_keys": [7, 8], "write_timeout_seconds": 1}))
        .await;
    let p = file_path(s["locations"][0]["location_specs"][0]["uri"].as_str().unwrap());
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, b"half-written").unwrap();
    let blocks = instance_key(&fx.api.namespace, &fx.instance, "blocks");
    let sessions = instance_key(&fx.api.namespace, &fx.instance, "sessions");
    let del = instance_key(&fx.api.namespace, &fx.instance, "del");
    // Timeout 1 s (+ up to 1 s of whole-second rounding) + one 100 ms sweep + slack. Both
    // deletions must be done: the expiry drops the records at once, and a deletion still queued
    // holds its key again while it unlinks (claim_delete), so "no record" alone is not the end.
    wait_until("the session is expired and its blocks deleted", 4, || async {
        int("ZCARD", &sessions).await == 0
            && int("XLEN", &del).await == 0
            && int("HLEN", &blocks).await == 0
            && !p.exists()
    })
    .await;
    // The keys can be written again.
    assert_eq!(fx.start(&[7, 8]).await["locations"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn trimming_everything_deletes_every_file_through_the_trash() {
    let fx = Fixture::new(&[("tp0", 2)], 1, json!({})).await;
    let _w = WorkerProc::start(&fx.api.namespace, &[]);
    let mut paths = fx.write_files(&[1, 2, 3, 4]).await;
    paths.extend(fx.write_files(&[10, 11]).await);
    assert_ok(&fx.api.meta("trimCache", json!({"instance_id": fx.instance, "strategy": "TS_REMOVE_ALL_CACHE"})).await);
    let del = instance_key(&fx.api.namespace, &fx.instance, "del");
    wait_until("every file is deleted", 10, || async { paths.iter().all(|p| !p.exists()) }).await;
    wait_until("the stream is drained", 10, || async { int("XLEN", &del).await == 0 }).await;
}

#[tokio::test]
async fn a_packed_file_is_unlinked_only_with_its_last_block() {
    let fx = Fixture::new(&[("tp0", 2)], 4, json!({})).await;
    let _w = WorkerProc::start(&fx.api.namespace, &[]);
    let paths = fx.write_files(&[1, 2, 3, 4]).await;
    let file = paths[0].clone();
    assert!(paths.iter().all(|p| *p == file), "one packed file");
    let del = instance_key(&fx.api.namespace, &fx.instance, "del");
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [2, 3, 4]})).await);
    wait_until("three releases are processed", 10, || async { int("XLEN", &del).await == 0 }).await;
    assert!(file.exists(), "block 1 still lives in the file");
    assert_eq!(Fixture::real(&fx.get("QT_BATCH_GET", &[1], json!({})).await), vec![true]);
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [1]})).await);
    wait_until("the file goes with its last block", 10, || async { !file.exists() }).await;
}

fn quota_group(capacity: i64, policy: &str) -> Value {
    json!({"quota": {"capacity": capacity},
           "cache_config": {"reclaim_strategy": {"reclaim_policy": policy, "trigger_strategy": {"used_percentage": 0.5}}}})
}

async fn usage_bytes(fx: &Fixture) -> i64 {
    let mut c = valkey().await;
    let u: std::collections::HashMap<String, i64> = redis::cmd("HGETALL")
        .arg(instance_key(&fx.api.namespace, &fx.instance, "usage"))
        .query_async(&mut c)
        .await
        .unwrap();
    u.iter().filter(|(k, _)| k.starts_with('b')).map(|(_, v)| v).sum()
}

#[tokio::test]
async fn reclamation_brings_usage_under_the_watermark_and_frees_the_evicted_files() {
    // 16 blocks of 10 bytes = 160 bytes; quota 200, watermark 50% = 100 bytes.
    let fx = Fixture::new(&[("tp0", 10)], 1, quota_group(200, "POLICY_LRU")).await;
    let old = fx.write_files(&(1..=8).collect::<Vec<_>>()).await;
    let new = fx.write_files(&(101..=108).collect::<Vec<_>>()).await;
    fx.get("QT_PREFIX_MATCH", &(101..=108).collect::<Vec<_>>(), json!({})).await; // the newer prompt is hot
    let w = WorkerProc::start(&fx.api.namespace, &[]);
    wait_until("usage is under the watermark", 10, || async { usage_bytes(&fx).await <= 100 }).await;
    let del = instance_key(&fx.api.namespace, &fx.instance, "del");
    wait_until("evicted blocks are deleted", 10, || async { int("XLEN", &del).await == 0 }).await;
    let kept = Fixture::real(&fx.get("QT_BATCH_GET", &(1..=8).chain(101..=108).collect::<Vec<_>>(), json!({})).await);
    let (old_kept, new_kept) = (&kept[..8], &kept[8..]);
    assert_eq!(new_kept, vec![true; 8], "LRU keeps the recently read prompt");
    assert!(old_kept.iter().filter(|k| **k).count() <= 2, "{old_kept:?}");
    // Leaf-aware: what is kept of the old prompt is a prefix of it.
    let first_gap = old_kept.iter().position(|k| !k).unwrap_or(8);
    assert!(old_kept[first_gap..].iter().all(|k| !k), "suffixes go before their prefixes: {old_kept:?}");
    for (i, p) in old.iter().enumerate() {
        assert_eq!(p.exists(), old_kept[i], "file of old block {i} matches its metadata");
    }
    assert!(new.iter().all(|p| p.exists()), "kept files are intact");
    assert!(w.metric("kvcm_worker_evictions_total{group=\"g\",policy=\"POLICY_LRU\"}").await >= 6.0);
}

#[tokio::test]
async fn lfu_keeps_the_frequently_read_prompt() {
    let fx = Fixture::new(&[("tp0", 10)], 1, quota_group(200, "POLICY_LFU")).await;
    fx.write_files(&(1..=8).collect::<Vec<_>>()).await;
    fx.write_files(&(101..=108).collect::<Vec<_>>()).await;
    for _ in 0..5 {
        fx.get("QT_PREFIX_MATCH", &(1..=8).collect::<Vec<_>>(), json!({})).await; // old but popular
    }
    let lfu = instance_key(&fx.api.namespace, &fx.instance, "lfu");
    wait_until("the reads are counted", 5, || async {
        let mut c = valkey().await;
        let s: Option<f64> =
            redis::cmd("ZSCORE").arg(&lfu).arg(&8i64.to_be_bytes()[..]).query_async(&mut c).await.unwrap();
        s == Some(6.0)
    })
    .await;
    fx.get("QT_PREFIX_MATCH", &(101..=108).collect::<Vec<_>>(), json!({})).await; // newer, read once
    let _w = WorkerProc::start(&fx.api.namespace, &[]);
    wait_until("usage is under the watermark", 10, || async { usage_bytes(&fx).await <= 100 }).await;
    let kept = Fixture::real(&fx.get("QT_BATCH_GET", &(1..=8).chain(101..=108).collect::<Vec<_>>(), json!({})).await);
    assert_eq!(&kept[..8], vec![true; 8], "LFU keeps the frequently read prompt: {kept:?}");
}

#[tokio::test]
async fn ttl_drops_blocks_not_read_within_the_ttl_first() {
    let fx = Fixture::new(&[("tp0", 10)], 1, quota_group(200, "POLICY_TTL")).await;
    fx.write_files(&(101..=108).collect::<Vec<_>>()).await; // stale: older than the 1 s TTL
    let stale_until = std::time::Instant::now() + Duration::from_millis(1200);
    while std::time::Instant::now() < stale_until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    fx.write_files(&(1..=8).collect::<Vec<_>>()).await;
    let _w = WorkerProc::start(&fx.api.namespace, &[("KVCM_WORKER__TTL_S", "1")]);
    wait_until("usage is under the watermark", 10, || async { usage_bytes(&fx).await <= 100 }).await;
    let kept = Fixture::real(&fx.get("QT_BATCH_GET", &(1..=8).chain(101..=108).collect::<Vec<_>>(), json!({})).await);
    assert_eq!(&kept[..8], vec![true; 8], "fresh blocks are kept while stale ones remain: {kept:?}");
    assert_eq!(
        kept[8..].iter().filter(|k| !**k).count(),
        6,
        "exactly the 60 bytes over the watermark go, all stale: {kept:?}"
    );
}

#[tokio::test]
async fn a_killed_workers_deletions_are_finished_by_another() {
    // Deletions wait 1.5 s; worker A takes them (pending, not yet due) and is killed -9.
    let fx =
        Fixture::new(&[("tp0", 2)], 1, json!({"cache_config": {"reclaim_strategy": {"delay_before_delete_ms": 1500}}}))
            .await;
    let paths = fx.write_files(&[1, 2, 3]).await;
    let a = WorkerProc::start(&fx.api.namespace, &[("KVCM_WORKER__ID", "worker-a")]);
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [1, 2, 3]})).await);
    let del = instance_key(&fx.api.namespace, &fx.instance, "del");
    wait_until("worker A holds the entries", 5, || async {
        let mut c = valkey().await;
        let p: redis::Value = redis::cmd("XPENDING")
            .arg(&del)
            .arg("kvcm-deleters")
            .query_async(&mut c)
            .await
            .unwrap_or(redis::Value::Nil);
        matches!(p, redis::Value::Array(ref v) if matches!(v.first(), Some(redis::Value::Int(3))))
    })
    .await;
    a.kill9();
    assert!(paths.iter().all(|p| p.exists()), "nothing was deleted before the delay");
    let _b =
        WorkerProc::start(&fx.api.namespace, &[("KVCM_WORKER__ID", "worker-b"), ("KVCM_WORKER__CLAIM_IDLE_MS", "300")]);
    wait_until("worker B finished A's deletions", 10, || async {
        int("XLEN", &del).await == 0 && paths.iter().all(|p| !p.exists())
    })
    .await;
    assert_eq!(int("HLEN", &instance_key(&fx.api.namespace, &fx.instance, "blocks")).await, 0, "no metadata leaked");
    let dead = instance_key(&fx.api.namespace, &fx.instance, "del_dead");
    assert_eq!(int("XLEN", &dead).await, 0, "no deletion failed");
}

#[tokio::test]
async fn a_deletion_that_keeps_failing_moves_to_the_dead_letter_stream() {
    let fx = Fixture::new(&[("tp0", 2)], 1, json!({})).await;
    let paths = fx.write_files(&[1]).await;
    // Make the file undeletable: replace it with a non-empty directory.
    std::fs::remove_file(&paths[0]).unwrap();
    std::fs::create_dir_all(paths[0].join("x")).unwrap();
    let w = WorkerProc::start(&fx.api.namespace, &[("KVCM_WORKER__MAX_DELETE_ATTEMPTS", "3")]);
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [1]})).await);
    let dead = instance_key(&fx.api.namespace, &fx.instance, "del_dead");
    wait_until("the entry is dead-lettered", 10, || async { int("XLEN", &dead).await == 1 }).await;
    // Operators see it per instance.
    let gauge = format!("kvcm_worker_dead_letter_entries{{instance=\"{}\"}}", fx.instance);
    wait_until("the worker reports the dead letter", 10, || async { w.metric(&gauge).await == 1.0 }).await;
    let mut c = valkey().await;
    let entries: Vec<redis::Value> =
        redis::cmd("XRANGE").arg(&dead).arg("-").arg("+").query_async(&mut c).await.unwrap();
    let text = format!("{entries:?}");
    assert!(text.contains("cannot delete"), "{text}");
    assert_eq!(int("XLEN", &instance_key(&fx.api.namespace, &fx.instance, "del")).await, 0);
    // The key is not held by the deletion it gave up on: it can be written and read again
    // (it used to stay in state X for good: reported present to writers, a miss to readers).
    let blocks = instance_key(&fx.api.namespace, &fx.instance, "blocks");
    let rec: Option<Vec<u8>> =
        redis::cmd("HGET").arg(&blocks).arg(1i64.to_be_bytes().to_vec()).query_async(&mut c).await.unwrap();
    assert_eq!(rec, None, "the dead-lettered location is still in the record");
    let again = fx.start(&[1]).await;
    assert_eq!(again["locations"].as_array().map(Vec::len), Some(1), "{again}");
    assert_ok(&(200, fx.finish(&again, json!({"offset": 1})).await));
    assert_eq!(Fixture::real(&fx.get("QT_PREFIX_MATCH", &[1], json!({})).await), vec![true]);
}

#[tokio::test]
async fn dead_letters_are_bounded_listed_and_re_driven_once_their_cause_is_fixed() {
    let fx = Fixture::new(&[("tp0", 2)], 1, json!({})).await;
    let paths = fx.write_files(&[1, 2]).await;
    // Both files undeletable: each replaced with a non-empty directory.
    for p in &paths {
        std::fs::remove_file(p).unwrap();
        std::fs::create_dir_all(p.join("x")).unwrap();
    }
    // One dead letter at most: the second deletion that gives up stays queued instead.
    let w = WorkerProc::start(
        &fx.api.namespace,
        &[("KVCM_WORKER__MAX_DELETE_ATTEMPTS", "2"), ("KVCM_WORKER__MAX_DEAD_LETTERS", "1")],
    );
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [1, 2]})).await);
    let dead = instance_key(&fx.api.namespace, &fx.instance, "del_dead");
    let del = instance_key(&fx.api.namespace, &fx.instance, "del");
    wait_until("one dead letter, one refused", 15, || async {
        w.metric("kvcm_worker_dead_letters_refused_total").await >= 1.0
    })
    .await;
    assert_eq!(int("XLEN", &dead).await, 1, "the dead-letter stream holds at most 1");
    assert_eq!(int("XLEN", &del).await, 1, "the refused deletion stays queued");

    // Listed, with what an operator needs.
    let (_, listed) = fx.api.admin("listDeadLetters", json!({"instance_id": fx.instance})).await;
    assert_eq!(code(&listed), "OK", "{listed}");
    assert_eq!(listed["total"], "1", "{listed}");
    let letter = &listed["dead_letters"][0];
    assert!(["1", "2"].contains(&letter["block_key"].as_str().unwrap()), "{listed}");
    assert_eq!(letter["storage"], "files", "{listed}");
    assert_eq!(letter["reason"], "removed", "{listed}");
    assert_eq!(letter["attempts"], "2", "{listed}");
    assert!(letter["error"].as_str().unwrap().contains("cannot delete"), "{listed}");
    assert_eq!(listed["next_start_after"], "", "{listed}");
    // Bad input is refused before anything runs.
    let (_, bad) = fx.api.admin("listDeadLetters", json!({"instance_id": fx.instance, "start_after": "x"})).await;
    assert_eq!(code(&bad), "INVALID_ARGUMENT", "{bad}");
    let (_, bad) = fx.api.admin("redriveDeadLetters", json!({"instance_id": fx.instance, "limit": 5000})).await;
    assert_eq!(code(&bad), "INVALID_ARGUMENT", "{bad}");
    let last = format!("{0}-{0}", u64::MAX);
    let (_, after) = fx.api.admin("listDeadLetters", json!({"instance_id": fx.instance, "start_after": last})).await;
    assert_eq!((code(&after), after["dead_letters"].as_array().map(Vec::len)), ("OK", Some(0)), "{after}");

    // The cause fixed, the dead letter re-driven: both deletions complete, nothing is left.
    for p in &paths {
        std::fs::remove_dir_all(p).unwrap();
    }
    let id = letter["id"].as_str().unwrap();
    let (_, r) = fx.api.admin("redriveDeadLetters", json!({"instance_id": fx.instance, "ids": [id, "1-0"]})).await;
    assert_eq!((code(&r), &r["redriven"], &r["not_found"]), ("OK", &json!("1"), &json!("1")), "{r}");
    assert_eq!(int("XLEN", &dead).await, 0);
    // The refused deletion is retried at the longest backoff (5 minutes): made due now.
    let fail = instance_key(&fx.api.namespace, &fx.instance, "del_fail");
    let mut c = valkey().await;
    let _: () = redis::cmd("DEL").arg(&fail).query_async(&mut c).await.unwrap();
    wait_until("both deletions complete", 15, || async { int("XLEN", &del).await == 0 }).await;
    let audit =
        kvcm_worker::audit::run(&kvcm_tests::chaos::auditor(&valkey_url(), &fx.api.namespace).await).await.unwrap();
    assert!(audit.clean() && audit.drained() && audit.serving_locations == 0, "{audit:#?}");
}

#[tokio::test]
async fn a_reclaim_lease_excludes_other_workers_and_fences_a_worker_that_lost_it() {
    let fx = Fixture::new(&[("tp0", 10)], 1, json!({})).await;
    fx.write_files(&[1, 2, 3]).await;
    let conn = {
        let c = redis::cluster::ClusterClient::new(vec![valkey_url()]).unwrap();
        c.get_async_connection().await.unwrap()
    };
    let limits = kvcm_core::store::Limits {
        max_keys_per_request: 100,
        write_timeout_default_s: 30,
        write_timeout_max_s: 60,
        usage_cache_ms: 1000,
        ..Default::default()
    };
    let data = kvcm_core::store::DataPlane::new(conn, &fx.api.namespace, limits);
    let a = data.lease_acquire(&fx.instance, "a", 300).await.unwrap().expect("a takes the lease");
    assert_eq!(data.lease_acquire(&fx.instance, "b", 300).await.unwrap(), None, "b is excluded while a holds it");
    assert_eq!(data.lease_acquire(&fx.instance, "a", 300).await.unwrap().as_deref(), Some(a.as_str()), "a renews");
    // a pauses past its lease; b takes over with a newer token; a's next evict is refused.
    wait_until("a's lease expires", 5, || async {
        data.lease_acquire(&fx.instance, "b", 5000).await.unwrap().is_some()
    })
    .await;
    let sizes = [10, 10];
    let refused = data
        .evict(&fx.instance, &sizes, kvcm_core::store::maintenance::EvictIndex::Lru, 10, None, None, &a, 0, 0)
        .await;
    assert!(matches!(refused, Ok(None)), "a lost lease is its own outcome: {refused:?}");
    assert_eq!(
        Fixture::real(&fx.get("QT_BATCH_GET", &[1, 2, 3], json!({})).await),
        vec![true; 3],
        "nothing was evicted by a"
    );
    let b = data.lease_acquire(&fx.instance, "b", 5000).await.unwrap().unwrap();
    assert_ne!(a, b);
    // A bad argument is an error naming the script (a bug), never a lost lease or a status.
    let bad =
        data.evict(&fx.instance, &sizes, kvcm_core::store::maintenance::EvictIndex::Lru, 0, None, None, &b, 0, 0).await;
    assert!(
        matches!(&bad, Err(e @ kvcm_core::Error::Valkey(_)) if e.to_string().contains("N must be within")),
        "{bad:?}"
    );
    let r = data
        .evict(&fx.instance, &sizes, kvcm_core::store::maintenance::EvictIndex::Lru, 10, None, None, &b, 15, 0)
        .await
        .unwrap()
        .expect("b holds the lease");
    assert_eq!((r.blocks, r.bytes), (2, 20), "b evicts under its lease, stopping past the 15-byte budget");
    assert_eq!(
        Fixture::real(&fx.get("QT_BATCH_GET", &[1, 2, 3], json!({})).await),
        vec![true, false, false],
        "suffix first"
    );
}

#[tokio::test]
async fn two_workers_share_the_deletions() {
    let ns = unique("ns");
    let fx = Fixture::on(Api::start_with(&ns, &[]), &[("tp0", 2)], 1, json!({})).await;
    let mut paths = Vec::new();
    for p in 0..10i64 {
        paths.extend(fx.write_files(&(p * 100..p * 100 + 20).collect::<Vec<_>>()).await);
    }
    let small = [("KVCM_WORKER__DELETE_BATCH", "2")];
    let (w1, w2) = (WorkerProc::start(&ns, &small), WorkerProc::start(&ns, &small));
    let all: Vec<i64> = (0..10i64).flat_map(|p| p * 100..p * 100 + 20).collect();
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": all})).await);
    wait_until("every file is deleted", 20, || async { paths.iter().all(|p| !p.exists()) }).await;
    let series = "kvcm_worker_deletions_total{reason=\"removed\",storage=\"files\"}";
    let (a, b) = (w1.metric(series).await, w2.metric(series).await);
    assert_eq!(a + b, 200.0, "each deletion done once: {a} + {b}");
    assert!(a > 0.0 && b > 0.0, "both workers took a share: {a} / {b}");
}

/// kvcm's LFU ranks a prefix by every read that went through it, though a read counts only at
/// its deepest block: the counts of a shared prompt's evicted suffixes pass up to it. It used
/// to inherit only its last child's priority, so a prompt that six conversations had read went
/// before one-off chains each read as often as one conversation (live, on a generated chat
/// workload, LFU then kept fewer hits than LRU: docs/optimizer.md, "LFU live").
#[tokio::test]
async fn lfu_ranks_a_shared_prompt_by_every_read_below_it() {
    let fx = Fixture::new(&[("tp0", 10)], 1, lfu_group()).await;
    let conn = redis::cluster::ClusterClient::new(vec![valkey_url()]).unwrap().get_async_connection().await.unwrap();
    let limits = kvcm_core::store::Limits { max_keys_per_request: 100, ..Default::default() };
    let data = kvcm_core::store::DataPlane::new(conn, &fx.api.namespace, limits);
    let prompt = [1i64, 2, 3, 4];
    let chain = |c: i64| (c * 100..c * 100 + 4).collect::<Vec<_>>();
    let conversation = |c: i64| prompt.iter().copied().chain(chain(c)).collect::<Vec<_>>();
    for c in 1..=6 {
        fx.write(&conversation(c)).await;
    }
    for c in 11..=16 {
        fx.write(&chain(c)).await;
    }
    // Every leaf read twice: the conversations through the prompt, the one-offs alone.
    for _ in 0..2 {
        for c in 1..=6 {
            assert_eq!(Fixture::real(&fx.get("QT_PREFIX_MATCH", &conversation(c), json!({})).await).len(), 8);
        }
        for c in 11..=16 {
            assert_eq!(Fixture::real(&fx.get("QT_PREFIX_MATCH", &chain(c), json!({})).await).len(), 4);
        }
    }
    let lfu = instance_key(&fx.api.namespace, &fx.instance, "lfu");
    wait_until("every read is counted", 5, || async {
        let mut c = valkey().await;
        let leaves: Vec<(Vec<u8>, f64)> =
            redis::cmd("ZRANGE").arg(&lfu).arg(0).arg(-1).arg("WITHSCORES").query_async(&mut c).await.unwrap();
        let n = read_counts(&fx.api.namespace, &fx.instance).await;
        leaves.len() == 12 && leaves.iter().all(|(_, s)| *s == 3.0) && n.len() == 12 && n.values().all(|v| *v == 2)
    })
    .await;
    // 28 of the 52 blocks go. All twelve leaves tie, the conversations' keys sort first: their
    // suffixes go (24 blocks), and then the prompt, a leaf now, holds the twelve reads of
    // them and outranks the one-offs, of which one chain goes.
    let lease = data.lease_acquire(&fx.instance, "t", 60_000).await.unwrap().unwrap();
    let evicted = data
        .evict(&fx.instance, &[10, 10], kvcm_core::store::maintenance::EvictIndex::Lfu, 28, None, None, &lease, 0, 0)
        .await
        .unwrap()
        .expect("the lease is held");
    assert_eq!(evicted.blocks, 28);
    let all: Vec<i64> = prompt.iter().copied().chain((11..=16).flat_map(chain)).collect();
    let kept = Fixture::real(&fx.get("QT_BATCH_GET", &all, json!({})).await);
    assert_eq!(&kept[..4], [true; 4], "the shared prompt is kept: {kept:?}");
    assert_eq!(kept[4..].iter().filter(|k| **k).count(), 20, "one one-off chain went: {kept:?}");
    // The counts went up with the evictions: the prompt's last block holds the twelve reads
    // through it, the evicted one-off chain's count went with its blocks, five remain.
    let n = read_counts(&fx.api.namespace, &fx.instance).await;
    assert_eq!(n.get(4i64.to_be_bytes().as_slice()), Some(&12), "{n:?}");
    assert_eq!(n.len(), 6, "{n:?}");
}

#[tokio::test]
async fn lfu_popularity_fades_as_the_aging_clock_rises() {
    let fx = Fixture::new(&[("tp0", 10)], 1, json!({})).await;
    let conn = redis::cluster::ClusterClient::new(vec![valkey_url()]).unwrap().get_async_connection().await.unwrap();
    let limits = kvcm_core::store::Limits {
        max_keys_per_request: 100,
        write_timeout_default_s: 30,
        write_timeout_max_s: 60,
        usage_cache_ms: 1000,
        ..Default::default()
    };
    let data = kvcm_core::store::DataPlane::new(conn, &fx.api.namespace, limits);
    let lfu = instance_key(&fx.api.namespace, &fx.instance, "lfu");
    fx.write(&[1]).await;
    for _ in 0..3 {
        fx.get("QT_PREFIX_MATCH", &[1], json!({})).await;
    }
    wait_until("block 1 counts 4 accesses", 5, || async {
        let mut c = valkey().await;
        let s: Option<f64> =
            redis::cmd("ZSCORE").arg(&lfu).arg(&1i64.to_be_bytes()[..]).query_async(&mut c).await.unwrap();
        s == Some(4.0)
    })
    .await;
    let lease = data.lease_acquire(&fx.instance, "t", 60_000).await.unwrap().unwrap();
    let mut evicted_in_round = None;
    for round in 0..8i64 {
        // Two newcomers, each read once, then two evictions by frequency.
        let (a, b) = (100 + round * 2, 101 + round * 2);
        fx.write(&[a]).await;
        fx.write(&[b]).await;
        data.evict(
            &fx.instance,
            &[10, 10],
            kvcm_core::store::maintenance::EvictIndex::Lfu,
            2,
            None,
            None,
            &lease,
            0,
            0,
        )
        .await
        .unwrap()
        .expect("the lease is held");
        // getCacheMeta, not a read: a read would count as an access.
        let (_, meta) = fx.api.meta("getCacheMeta", json!({"instance_id": fx.instance, "block_keys": [1]})).await;
        if !meta["metas"][0].as_str().unwrap().contains("CLS_SERVING") {
            evicted_in_round = Some(round);
            break;
        }
    }
    let round = evicted_in_round.expect("the once-popular block is evicted eventually");
    assert!(round >= 2, "popularity protected block 1 at first (evicted in round {round})");
}

#[tokio::test]
async fn an_unhealthy_storage_is_skipped_for_writes_until_it_recovers() {
    let api = Api::start();
    let dir = repo_root().join(".kvcm/test-data").join(unique("health"));
    std::fs::create_dir_all(&dir).unwrap();
    let blocked = dir.join("blocked");
    std::fs::write(&blocked, b"a file where the storage root should be").unwrap();
    let ok = dir.join("ok");
    std::fs::create_dir_all(&ok).unwrap();
    assert_ok(&api.admin("addStorage", json!({"storage": {"global_unique_name": "a", "nfs": {"root_path": blocked.join("root").to_str().unwrap()}}})).await);
    assert_ok(
        &api.admin(
            "addStorage",
            json!({"storage": {"global_unique_name": "b", "nfs": {"root_path": ok.to_str().unwrap()}}}),
        )
        .await,
    );
    assert_ok(
        &api.admin("createInstanceGroup", json!({"instance_group": {"name": "g", "storage_candidates": ["a", "b"]}}))
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
    let w = WorkerProc::start(&api.namespace, &[("KVCM_WORKER__HEALTH_INTERVAL_MS", "100")]);
    let health = |name: &'static str| {
        let api = &api;
        async move {
            let (_, l) = api.admin("listStorage", json!({})).await;
            l["storage"].as_array().unwrap().iter().find(|s| s["global_unique_name"] == name).unwrap()["is_healthy"]
                .as_bool()
                .unwrap()
        }
    };
    wait_until("storage a is marked unhealthy", 10, || async { !health("a").await }).await;
    assert!(health("b").await);
    // The healthy one's filesystem is published for sizing; the failing one's is not.
    let st = rustix::fs::statvfs(&ok).unwrap();
    let total = w.metric("kvcm_storage_filesystem_bytes{kind=\"total\",storage=\"b\"}").await;
    assert_eq!(total, (st.f_blocks * st.f_frsize) as f64);
    assert!(w.metric("kvcm_storage_filesystem_bytes{kind=\"free\",storage=\"b\"}").await > 0.0);
    assert_eq!(w.metric("kvcm_storage_filesystem_bytes{kind=\"total\",storage=\"a\"}").await, 0.0, "absent");
    let (_, s) = api.meta("startWriteCache", json!({"instance_id": "i", "block_keys": [1]})).await;
    assert!(s["locations"][0]["location_specs"][0]["uri"].as_str().unwrap().starts_with("file://b/"), "{s}");
    // The operator fixes it: the root exists again (as a mount would make it).
    std::fs::remove_file(&blocked).unwrap();
    std::fs::create_dir_all(blocked.join("root")).unwrap();
    wait_until("storage a recovers", 10, || async { health("a").await }).await;
    let (_, s) = api.meta("startWriteCache", json!({"instance_id": "i", "block_keys": [2]})).await;
    assert!(s["locations"][0]["location_specs"][0]["uri"].as_str().unwrap().starts_with("file://a/"), "{s}");
}

#[tokio::test]
async fn one_worker_without_the_mount_does_not_mark_a_storage_unhealthy_for_everyone() {
    let fx = Fixture::new(&[("tp0", 8)], 1, json!({})).await;
    let interval = "100";
    let w = WorkerProc::start(&fx.api.namespace, &[("KVCM_WORKER__HEALTH_INTERVAL_MS", interval)]);
    // A second "worker" on a host where the storage is not mounted, reporting every 100 ms.
    let conn = redis::cluster::ClusterClient::new(vec![valkey_url()]).unwrap().get_async_connection().await.unwrap();
    let registry = kvcm_core::registry::Registry::open(conn, &fx.api.namespace, Default::default()).await.unwrap();
    let healthy = || async {
        let (_, l) = fx.api.admin("listStorage", json!({})).await;
        l["storage"][0]["is_healthy"].as_bool().unwrap()
    };
    // A storage removed since the worker read the registry is its own outcome (skipped), not an
    // error and not a verdict.
    assert_eq!(registry.set_storage_health("removed-meanwhile", false, "w", 300).await.unwrap(), None);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reporter = {
        let (registry, stop) = (registry.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                registry.set_storage_health("files", false, "host-without-mount", 300).await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    // For 2 s both report; the worker that sees the mount keeps the storage healthy throughout.
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(healthy().await, "one worker's failed check marked the storage unhealthy for all");
        let s = fx.start(&[1]).await;
        assert_eq!(code(&s), "OK", "{s}");
    }
    // Once no worker that sees it healthy reports any more, the failing verdicts decide.
    drop(w);
    wait_until("the storage is unhealthy with only failing verdicts left", 10, || async { !healthy().await }).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    reporter.await.unwrap();
}

#[tokio::test]
async fn a_lowered_quota_takes_effect_without_restarting_the_worker() {
    let fx = Fixture::new(&[("tp0", 10)], 1, quota_group(10_000, "POLICY_LRU")).await;
    fx.write_files(&(1..=10).collect::<Vec<_>>()).await;
    let w = WorkerProc::start(&fx.api.namespace, &[]);
    // Under the watermark: a few reclaim rounds pass without evicting anything.
    wait_until("the worker publishes the group's usage", 10, || async {
        w.metric("kvcm_group_usage_bytes{group=\"g\",storage_type=\"all\"}").await == 100.0
    })
    .await;
    assert_eq!(usage_bytes(&fx).await, 100);
    let (_, g) = fx.api.admin("getInstanceGroup", json!({"name": "g"})).await;
    let mut group = g["instance_group"].clone();
    group["quota"]["capacity"] = json!(100); // watermark 50 bytes
    group["version"] = json!(2);
    assert_ok(&fx.api.admin("updateInstanceGroup", json!({"instance_group": group, "current_version": 1})).await);
    wait_until("usage falls under the new watermark", 10, || async { usage_bytes(&fx).await <= 50 }).await;
}

#[tokio::test]
async fn only_the_over_quota_storage_type_is_reclaimed() {
    let api = Api::start();
    let dir = repo_root().join(".kvcm/test-data").join(unique("types"));
    std::fs::create_dir_all(dir.join("f")).unwrap();
    std::fs::create_dir_all(dir.join("t")).unwrap();
    assert_ok(
        &api.admin(
            "addStorage",
            json!({"storage": {"global_unique_name": "f", "nfs": {"root_path": dir.join("f").to_str().unwrap()}}}),
        )
        .await,
    );
    assert_ok(&api.admin("addStorage", json!({"storage": {"global_unique_name": "t", "threefs": {"mountpoint": dir.to_str().unwrap(), "root_dir": "t"}}})).await);
    assert_ok(
        &api.admin(
            "createInstanceGroup",
            json!({"instance_group": {"name": "g", "storage_candidates": ["f", "t"],
        "quota": {"capacity": 0, "quota_config": [{"storage_type": "ST_NFS", "capacity": 60}]},
        "cache_config": {"reclaim_strategy": {"trigger_strategy": {"used_percentage": 0.5}}}}}),
        )
        .await,
    );
    assert_ok(&api.meta("registerInstance", json!({"instance_group": "g", "instance_id": "i", "block_size": 4,
        "location_spec_infos": [{"name": "tp0", "size": 10}], "model_deployment": {"model_name": "m", "dtype": "bf16"}})).await);
    let write = |keys: Vec<i64>| {
        let api = &api;
        async move {
            let (_, s) = api.meta("startWriteCache", json!({"instance_id": "i", "block_keys": keys})).await;
            let n = s["locations"].as_array().unwrap().len();
            assert_ok(&api.meta("finishWriteCache", json!({"instance_id": "i", "write_session_id": s["write_session_id"], "success_blocks": {"offset": n}})).await);
            s
        }
    };
    let s = write((1..=5).collect()).await; // 50 bytes on f (fits the 60-byte NFS quota)
    assert_eq!(s["locations"][0]["type"], "ST_NFS");
    // The NFS quota is now considered used (usage cache permitting): later writes go to 3FS.
    let next = std::sync::atomic::AtomicI64::new(100);
    wait_until("writes move to 3FS", 10, || async {
        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        write(vec![k]).await["locations"][0]["type"] == "ST_3FS"
    })
    .await;
    for k in 200..205 {
        write(vec![k]).await;
    }
    let _w = WorkerProc::start(&api.namespace, &[]);
    let usage = || async {
        let mut c = valkey().await;
        let u: std::collections::HashMap<String, i64> =
            redis::cmd("HGETALL").arg(instance_key(&api.namespace, "i", "usage")).query_async(&mut c).await.unwrap();
        u
    };
    // Storage ids in a fresh namespace: f = 1, t = 2. NFS goes under its 30-byte watermark;
    // 3FS keeps every block.
    let t_before = usage().await.get("b2").copied().unwrap_or(0);
    assert!(t_before >= 60, "3FS holds the later writes: {t_before}");
    wait_until("NFS usage is under its watermark", 10, || async {
        usage().await.get("b1").copied().unwrap_or(0) <= 30
    })
    .await;
    assert_eq!(usage().await.get("b2").copied().unwrap_or(0), t_before, "3FS blocks were kept");
}

fn data_plane(ns: &str, conn: redis::cluster_async::ClusterConnection) -> kvcm_core::store::DataPlane {
    let limits = kvcm_core::store::Limits {
        max_keys_per_request: 10_000,
        write_timeout_default_s: 30,
        write_timeout_max_s: 60,
        usage_cache_ms: 1000,
        ..Default::default()
    };
    kvcm_core::store::DataPlane::new(conn, ns, limits)
}

#[tokio::test]
async fn releasing_the_same_deletion_twice_does_not_free_a_shared_file_early() {
    let fx = Fixture::new(&[("tp0", 2)], 2, json!({})).await;
    fx.write_files(&[1, 2]).await; // one packed file holding both
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [1]})).await);
    let ns = &fx.api.namespace;
    let del = instance_key(ns, &fx.instance, "del");
    let mut c = valkey().await;
    let _: () =
        redis::cmd("XGROUP").arg("CREATE").arg(&del).arg("kvcm-deleters").arg("0").query_async(&mut c).await.unwrap();
    let reply: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("kvcm-deleters")
        .arg("t")
        .arg("COUNT")
        .arg(1)
        .arg("STREAMS")
        .arg(&del)
        .arg(">")
        .query_async(&mut c)
        .await
        .unwrap();
    let entry = &reply.keys[0].ids[0];
    let field = |f: &str| match &entry.map[f] {
        redis::Value::BulkString(b) => b.clone(),
        v => panic!("{v:?}"),
    };
    let data = data_plane(ns, c.clone());
    let keys = data.keys(&fx.instance);
    for _ in 0..3 {
        // A redelivery (claimed by another worker, or a retried call) must be a no-op.
        data.release_block(&keys, "kvcm-deleters", &entry.id, &field("k"), &field("l")).await.unwrap();
    }
    let files: std::collections::HashMap<Vec<u8>, i64> =
        redis::cmd("HGETALL").arg(instance_key(ns, &fx.instance, "files")).query_async(&mut c).await.unwrap();
    assert_eq!(files.values().copied().collect::<Vec<_>>(), vec![1], "block 2 still holds the file");
    assert_eq!(int("XLEN", &del).await, 0, "no file_released entry was queued");
    assert_eq!(Fixture::real(&fx.get("QT_BATCH_GET", &[2], json!({})).await), vec![true]);
}

#[tokio::test]
async fn a_block_written_again_before_its_old_copy_is_deleted_keeps_its_file() {
    let fx =
        Fixture::new(&[("tp0", 2)], 1, json!({"cache_config": {"reclaim_strategy": {"delay_before_delete_ms": 500}}}))
            .await;
    let first = fx.write_files(&[5]).await;
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [5]})).await);
    // The engine misses and writes the block again, to the same path, before the delete runs.
    let again = fx.write_files(&[5]).await;
    assert_eq!(first, again, "the path is a function of the key");
    let _w = WorkerProc::start(&fx.api.namespace, &[]);
    let del = instance_key(&fx.api.namespace, &fx.instance, "del");
    wait_until("the old copy's deletion is processed", 10, || async { int("XLEN", &del).await == 0 }).await;
    assert!(again[0].exists(), "the new write's file survives the old deletion");
    assert_eq!(Fixture::real(&fx.get("QT_BATCH_GET", &[5], json!({})).await), vec![true]);
}

#[tokio::test]
async fn a_block_trimmed_while_being_written_has_its_file_deleted_after_the_finish() {
    let fx = Fixture::new(&[("tp0", 2)], 1, json!({})).await;
    let _w = WorkerProc::start(&fx.api.namespace, &[]);
    let s = fx.start(&[7, 8]).await;
    assert_ok(&fx.api.meta("trimCache", json!({"instance_id": fx.instance, "strategy": "TS_REMOVE_ALL_CACHE"})).await);
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [8]})).await);
    // The engine, unaware, writes both files and reports success.
    let mut paths = Vec::new();
    for loc in s["locations"].as_array().unwrap() {
        let p = file_path(loc["location_specs"][0]["uri"].as_str().unwrap());
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"late").unwrap();
        paths.push(p);
    }
    assert_ok(&(200, fx.finish(&s, json!({"offset": 2})).await));
    assert_eq!(Fixture::real(&fx.get("QT_BATCH_GET", &[7, 8], json!({})).await), vec![false, false]);
    wait_until("the late files are deleted, not leaked", 10, || async { paths.iter().all(|p| !p.exists()) }).await;
    let blocks = instance_key(&fx.api.namespace, &fx.instance, "blocks");
    wait_until("no metadata is left", 10, || async { int("HLEN", &blocks).await == 0 }).await;
}

#[tokio::test]
async fn a_large_trim_is_expanded_to_the_end() {
    let fx = Fixture::new(&[("tp0", 2)], 1, json!({})).await;
    for p in 0..12i64 {
        fx.write(&(p * 1000..p * 1000 + 250).collect::<Vec<_>>()).await; // 3,000 blocks, no files
    }
    assert_ok(&fx.api.meta("trimCache", json!({"instance_id": fx.instance, "strategy": "TS_REMOVE_ALL_CACHE"})).await);
    let _w = WorkerProc::start(&fx.api.namespace, &[("KVCM_WORKER__DELETE_BATCH", "1000")]);
    let del = instance_key(&fx.api.namespace, &fx.instance, "del");
    wait_until("every trashed block is processed", 60, || async { int("XLEN", &del).await == 0 }).await;
    let mut c = valkey().await;
    let trash: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:v1:{{i:{}}}:trash:*", fx.api.namespace, fx.instance))
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(trash.is_empty(), "the trash hash is gone: {trash:?}");
}

#[tokio::test]
async fn blocks_left_by_a_write_racing_remove_instance_are_deleted() {
    let fx = Fixture::new(&[("tp0", 2)], 1, json!({})).await;
    let paths = fx.write_files(&[1, 2]).await;
    // Simulate the race: the instance is unregistered while blocks remain (as if a write landed
    // between removeInstance's trim and its unregistration).
    let mut c = valkey().await;
    let _: () = redis::cmd("HDEL")
        .arg(format!("{}:v1:{{reg}}:instances", fx.api.namespace))
        .arg(&fx.instance)
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () =
        redis::cmd("INCR").arg(format!("{}:v1:{{reg}}:version", fx.api.namespace)).query_async(&mut c).await.unwrap();
    let _w = WorkerProc::start(&fx.api.namespace, &[]);
    wait_until("the orphaned files are deleted", 10, || async { paths.iter().all(|p| !p.exists()) }).await;
    let blocks = instance_key(&fx.api.namespace, &fx.instance, "blocks");
    wait_until("no metadata is left", 10, || async { int("HLEN", &blocks).await == 0 }).await;
}

/// `removeStorage`'s checks and the removal are not one atomic step (the sessions live in the
/// instances' slots, the registry in its own): a frontend whose registry copy is a moment old can
/// still start a session on a storage being removed. Its files must not be left without an
/// owner: the removal keeps the storage's configuration by id, and the deleter deletes with it.
#[tokio::test]
async fn a_stragglers_files_on_a_removed_storage_are_still_deleted() {
    let fx = Fixture::new(&[("tp0", 2)], 1, json!({})).await;
    let paths = fx.write_files(&[1, 2]).await;
    assert!(paths.iter().all(|p| p.exists()));
    // The group moves to another storage, and the first is removed as a racing frontend would
    // leave it: with blocks on it (the registry's own removal, without the frontend's checks).
    let other = repo_root().join(".kvcm/test-data").join(unique("other"));
    std::fs::create_dir_all(&other).unwrap();
    let storage = json!({"storage": {"global_unique_name": "other", "nfs": {"root_path": other.to_str().unwrap()}}});
    assert_ok(&fx.api.admin("addStorage", storage).await);
    let group =
        json!({"instance_group": {"name": "g", "storage_candidates": ["other"], "version": 2}, "current_version": 1});
    assert_ok(&fx.api.admin("updateInstanceGroup", group).await);
    let conn = redis::cluster::ClusterClient::new(vec![valkey_url()]).unwrap().get_async_connection().await.unwrap();
    let registry = kvcm_core::registry::Registry::open(conn, &fx.api.namespace, Default::default()).await.unwrap();
    registry.remove_storage("files").await.unwrap();
    let removed = registry.removed_storage(1).await.unwrap().expect("the removed storage is kept by id");
    assert_eq!(removed.global_unique_name, "files");
    assert_eq!(registry.removed_storage(2).await.unwrap(), None, "'other' was never removed");

    // A straggler's block is removed: the worker deletes its file on the removed storage.
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [1]})).await);
    let w = WorkerProc::start(&fx.api.namespace, &[]);
    let del = instance_key(&fx.api.namespace, &fx.instance, "del");
    wait_until("the deletion completes", 15, || async { int("XLEN", &del).await == 0 }).await;
    assert!(!paths[0].exists(), "a file on the removed storage was left behind");
    assert_eq!(int("XLEN", &instance_key(&fx.api.namespace, &fx.instance, "del_dead")).await, 0, "no dead letter");

    // The directory is taken again by a new storage: what is there now is its files, and a late
    // deletion of the removed storage must not unlink them.
    let root = removed.nfs.as_ref().unwrap().root_path.clone();
    let again = json!({"storage": {"global_unique_name": "again", "nfs": {"root_path": root}}});
    assert_ok(&fx.api.admin("addStorage", again).await);
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [2]})).await);
    wait_until("the deletion is refused", 15, || async {
        w.metric("kvcm_worker_deletion_failures_total{kind=\"error\"}").await >= 1.0
    })
    .await;
    assert!(paths[1].exists(), "a late deletion unlinked a file under a live storage's root");
}

/// A read's touch lands after its read, so it can re-create an interior touch (`itouch`) or a
/// read count (`icount`) for a block that was evicted, trimmed or removed meanwhile; nothing but
/// the worker's collection removes those (worker/src/touch_gc.rs). It drops them, including an
/// instance removed from the registry with only such keys left (or only a late batch of
/// `adaptive` hits), and keeps every serving block's entries.
#[tokio::test]
async fn read_bookkeeping_left_behind_by_late_touches_is_collected() {
    let fx = Fixture::new(&[("tp0", 10)], 1, lfu_group()).await;
    let ns = fx.api.namespace.clone();
    fx.write(&[1, 2, 3, 4]).await;
    // Reads ending at 4 (a leaf) and at 2 (interior): counts for both, an interior touch for 2.
    assert_eq!(Fixture::real(&fx.get("QT_PREFIX_MATCH", &[1, 2, 3, 4], json!({})).await).len(), 4);
    assert_eq!(Fixture::real(&fx.get("QT_PREFIX_MATCH", &[1, 2, 9], json!({})).await).len(), 2);
    let (itouch, icount) = (instance_key(&ns, &fx.instance, "itouch"), instance_key(&ns, &fx.instance, "icount"));
    wait_until("the reads are counted", 5, || async {
        let n = read_counts(&ns, &fx.instance).await;
        n.len() == 2 && n.values().all(|v| *v == 1)
    })
    .await;
    // 88 is being written (a record, but not serving); 77 has no record at all.
    let s = fx.start(&[1, 2, 3, 4, 88]).await;
    assert_eq!(code(&s), "OK", "{s}");
    let mut c = valkey().await;
    let stale = |k: i64| k.to_be_bytes().to_vec();
    for k in [77, 88] {
        let _: () = redis::cmd("ZADD").arg(&itouch).arg(5).arg(stale(k)).query_async(&mut c).await.unwrap();
        let _: () = redis::cmd("HINCRBY").arg(&icount).arg(stale(k)).arg(3).query_async(&mut c).await.unwrap();
    }
    // An instance that was removed: only late touches' keys of it are left.
    let gone = format!("gone-{}", fx.instance);
    let (gone_touch, gone_count) = (instance_key(&ns, &gone, "itouch"), instance_key(&ns, &gone, "icount"));
    let _: () = redis::cmd("ZADD").arg(&gone_touch).arg(5).arg(stale(4)).query_async(&mut c).await.unwrap();
    let _: () = redis::cmd("HINCRBY").arg(&gone_count).arg(stale(4)).arg(2).query_async(&mut c).await.unwrap();
    // And another, of whose `adaptive` policy a late batch of hits is all that is left beside
    // the emptied deletion stream every removal leaves (so discovery still lists it).
    let gone_adaptive_id = format!("gone-adaptive-{}", fx.instance);
    let gone_adaptive = instance_key(&ns, &gone_adaptive_id, "adaptive");
    let _: () = redis::cmd("HINCRBY").arg(&gone_adaptive).arg("h3").arg(1000).query_async(&mut c).await.unwrap();
    let gone_del = instance_key(&ns, &gone_adaptive_id, "del");
    let id: String = redis::cmd("XADD").arg(&gone_del).arg("*").arg("k").arg("v").query_async(&mut c).await.unwrap();
    let _: () = redis::cmd("XDEL").arg(&gone_del).arg(&id).query_async(&mut c).await.unwrap();
    // Registered instances keep theirs: one with blocks, and one with none (all removed).
    let live_adaptive = instance_key(&ns, &fx.instance, "adaptive");
    let _: () = redis::cmd("HINCRBY").arg(&live_adaptive).arg("h3").arg(1000).query_async(&mut c).await.unwrap();
    let empty = format!("empty-{}", fx.instance);
    let reg = json!({"instance_group": "g", "instance_id": empty, "block_size": 4,
        "location_spec_infos": [{"name": "tp0", "size": 10}], "model_deployment": {"model_name": "m", "dtype": "bf16"}});
    assert_ok(&fx.api.meta("registerInstance", reg).await);
    let empty_adaptive = instance_key(&ns, &empty, "adaptive");
    let _: () = redis::cmd("HINCRBY").arg(&empty_adaptive).arg("h3").arg(1000).query_async(&mut c).await.unwrap();

    let w = WorkerProc::start(&ns, &[]);
    wait_until("the stale entries are collected", 10, || async {
        let mut c = valkey().await;
        let touched: Vec<Vec<u8>> = redis::cmd("ZRANGE").arg(&itouch).arg(0).arg(-1).query_async(&mut c).await.unwrap();
        let counted = read_counts(&ns, &fx.instance).await;
        let orphans: i64 = redis::cmd("EXISTS")
            .arg(&gone_touch)
            .arg(&gone_count)
            .arg(&gone_adaptive)
            .query_async(&mut c)
            .await
            .unwrap();
        touched.len() == 1 && counted.len() == 2 && orphans == 0
    })
    .await;
    let kept: i64 = redis::cmd("EXISTS").arg(&live_adaptive).arg(&empty_adaptive).query_async(&mut c).await.unwrap();
    assert_eq!(kept, 2, "a registered instance's adaptive state was dropped");
    let touched: Vec<Vec<u8>> = redis::cmd("ZRANGE").arg(&itouch).arg(0).arg(-1).query_async(&mut c).await.unwrap();
    assert_eq!(touched, [stale(2)], "the serving interior block keeps its touch");
    let counted = read_counts(&ns, &fx.instance).await;
    assert_eq!(counted.get(&stale(2)), Some(&1));
    assert_eq!(counted.get(&stale(4)), Some(&1), "the serving leaf keeps its count");
    assert!(w.metric("kvcm_worker_touch_entries_dropped_total{index=\"icount\"}").await >= 3.0);
    assert!(w.metric("kvcm_worker_touch_entries_dropped_total{index=\"itouch\"}").await >= 3.0);
    // The write in flight finishes, and 88 serves with nothing inherited from before.
    let n = s["locations"].as_array().unwrap().len();
    assert_ok(&(200, fx.finish(&s, json!({"offset": n})).await));
    assert!(!read_counts(&ns, &fx.instance).await.contains_key(&stale(88)));
}

/// A group that reclaims by kvcm's `adaptive` policy.
fn adaptive_group() -> Value {
    json!({"cache_config": {"reclaim_strategy": {"reclaim_policy": "POLICY_ADAPTIVE"}}})
}

/// The flags byte of a block's record (lua/lib/record.lua: bit 1 shared, bit 2 long write).
async fn flags(fx: &Fixture, key: i64) -> u8 {
    let mut c = valkey().await;
    let rec: Vec<u8> = redis::cmd("HGET")
        .arg(instance_key(&fx.api.namespace, &fx.instance, "blocks"))
        .arg(&key.to_be_bytes()[..])
        .query_async(&mut c)
        .await
        .unwrap();
    rec[0]
}

/// One call of the evict script by `adaptive` (every storage), under a lease taken for it.
async fn evict_adaptive(
    data: &kvcm_core::store::DataPlane,
    instance: &str,
    n: usize,
) -> kvcm_core::store::maintenance::Evicted {
    let lease = data.lease_acquire(instance, "t", 60_000).await.unwrap().unwrap();
    let index = kvcm_core::store::maintenance::EvictIndex::Adaptive;
    data.evict(instance, &[10, 10], index, n, None, None, &lease, 0, 0).await.unwrap().expect("the lease is held")
}

/// A frontend counts `adaptive` hits in batches (one pipeline per instance per 100 ms,
/// `HIT_FLUSH`), which `kvcm_adaptive_hits_total` counts; the counts of answered reads still
/// waiting when it is told to stop go to Valkey before it exits. (Without the last flush the
/// second batch is lost: SIGTERM lands well inside its 100 ms.)
#[tokio::test]
async fn adaptive_hit_counts_still_pending_at_sigterm_reach_valkey_before_exit() {
    let fx = Fixture::new(&[("tp0", 10)], 1, adaptive_group()).await;
    let hist = instance_key(&fx.api.namespace, &fx.instance, "adaptive");
    let events = || async {
        let mut c = valkey().await;
        let n: Option<i64> = redis::cmd("HGET").arg(&hist).arg("events").query_async(&mut c).await.unwrap();
        n.unwrap_or(0)
    };
    let chain = |c: i64| (c * 100..c * 100 + 4).collect::<Vec<_>>();
    for k in 1..=12 {
        fx.write(&chain(k)).await;
    }
    // Each read ends at a leaf: a hit. The first four are counted by the usual batch.
    for k in 1..=4 {
        fx.get("QT_PREFIX_MATCH", &chain(k), json!({})).await;
    }
    let counted = "kvcm_adaptive_hits_total{outcome=\"counted\"}";
    wait_until("the first batch is counted", 5, || async {
        events().await == 4 && fx.api.metric(counted).await == 4.0
    })
    .await;
    // Eight more, and SIGTERM at once: inside the batch's 100 ms.
    for k in 5..=12 {
        fx.get("QT_PREFIX_MATCH", &chain(k), json!({})).await;
    }
    let Fixture { api, .. } = fx;
    assert_eq!(api.terminate(), Some(0));
    assert_eq!(events().await, 12, "every answered read's hit counted");
}

/// `adaptive` ranks leaves in three classes (docs/optimizer.md, "Classes the store can keep"),
/// which the store keeps in a record's flags: a block written 16 or more keys into its
/// session's run of new keys is a long write; a block with two serving children at once is
/// shared; and an evicted shared block, remembered by the instance's ghost, is shared again as
/// soon as it is written back (before any second child), its ghost entry then dropped.
#[tokio::test]
async fn adaptive_classes_blocks_by_their_writes_their_children_and_the_ghost() {
    use kvcm_core::hit_density::{LONG_BIT, SHARED_BIT};
    let fx = Fixture::new(&[("tp0", 10)], 1, adaptive_group()).await;
    let data = data_plane(&fx.api.namespace, valkey().await);
    let document: Vec<i64> = (1..=20).collect();
    fx.write(&document).await;
    for k in 1..=15 {
        assert_eq!(flags(&fx, k).await & LONG_BIT, 0, "block {k} is not a long write");
    }
    for k in 16..=20 {
        assert_eq!(flags(&fx, k).await & LONG_BIT, LONG_BIT, "block {k} is a long write");
    }
    // A stored prefix, then new keys: the run starts again at the first new key.
    fx.write(&[1, 2, 3, 100]).await;
    assert_eq!(flags(&fx, 3).await & SHARED_BIT, SHARED_BIT, "block 3 has two serving children");
    assert_eq!(flags(&fx, 100).await, 1, "a short suffix: its parent bit only");
    assert_eq!(flags(&fx, 2).await & SHARED_BIT, 0, "one child");
    // Everything evicted: the shared block is remembered, the others are not.
    let evicted = evict_adaptive(&data, &fx.instance, 100).await;
    assert_eq!(evicted.blocks, 21);
    let ghost = instance_key(&fx.api.namespace, &fx.instance, "ighost");
    let mut c = valkey().await;
    let remembered: Vec<Vec<u8>> = redis::cmd("ZRANGE").arg(&ghost).arg(0).arg(-1).query_async(&mut c).await.unwrap();
    assert_eq!(remembered, vec![3i64.to_be_bytes().to_vec()]);
    // Written back while their evicted locations still wait for the deleter (none runs here).
    fx.write(&[1, 2, 3]).await;
    assert_eq!(flags(&fx, 3).await & SHARED_BIT, SHARED_BIT, "written back from the ghost: shared at once");
    assert_eq!(flags(&fx, 2).await & SHARED_BIT, 0);
    let remembered: Vec<Vec<u8>> = redis::cmd("ZRANGE").arg(&ghost).arg(0).arg(-1).query_async(&mut c).await.unwrap();
    assert!(remembered.is_empty(), "the ghost's entry is dropped when its block is written");
}

/// `adaptive` live: a read that ends at a leaf counts a hit at the leaf's age and class; once
/// enough hits and evictions are counted, the worker's learning step turns them into the table
/// evictions rank by, and decays them. With a table learned from a history where shared
/// prefixes were read back and one-off blocks never were, a prompt that is the oldest leaf in
/// the cache survives eviction of every one-off chain written after it — where LRU would take
/// it first.
#[tokio::test]
async fn adaptive_keeps_a_hot_shared_prefix_and_evicts_one_off_suffixes_first() {
    keeps_a_hot_shared_prefix(true).await;
}

/// The same, for an instance whose table an older kvcm learned (a `table`, no `ranks`): the evict
/// script ranks by parsing the table until the next learning step writes the ranks.
#[tokio::test]
async fn adaptive_ranks_by_a_table_without_ranks_as_an_older_kvcm_left_it() {
    keeps_a_hot_shared_prefix(false).await;
}

async fn keeps_a_hot_shared_prefix(with_ranks: bool) {
    use kvcm_core::hit_density::{BUCKETS, DECAY_EVENTS, UNIT, bucket};
    let fx = Fixture::new(&[("tp0", 10)], 1, adaptive_group()).await;
    let data = data_plane(&fx.api.namespace, valkey().await);
    let hist = instance_key(&fx.api.namespace, &fx.instance, "adaptive");
    let mut c = valkey().await;
    // A prompt (1..=4) two conversations branch from (5, 6), then three one-off chains.
    // Reads: one ending at the interior prompt (no hit), one ending at a leaf (a hit, class 0).
    fx.write(&[1, 2, 3, 4, 5]).await;
    fx.write(&[1, 2, 3, 4, 6]).await;
    fx.get("QT_PREFIX_MATCH", &[1, 2, 3, 4], json!({})).await;
    let chain = |c: i64| (c * 100..c * 100 + 6).collect::<Vec<_>>();
    for k in 1..=3 {
        fx.write(&chain(k)).await;
    }
    fx.get("QT_PREFIX_MATCH", &chain(1), json!({})).await;
    wait_until("the leaf's hit is counted", 5, || async {
        let mut c = valkey().await;
        let all: std::collections::HashMap<String, String> =
            redis::cmd("HGETALL").arg(&hist).query_async(&mut c).await.unwrap();
        all.get("events").map(String::as_str) == Some("1")
            && all.keys().filter(|k| k.starts_with('h')).count() == 1
            && all
                .keys()
                .any(|k| k.strip_prefix('h').and_then(|c| c.parse::<usize>().ok()).is_some_and(|c| c < BUCKETS))
    })
    .await;
    let _: () = redis::cmd("DEL").arg(&hist).query_async(&mut c).await.unwrap();
    // A learned history: shared leaves read back at ~10 min, or evicted at a day; leaves of the
    // rest evicted at every age, read back once, at once (a class never hit would be ranked by
    // every class pooled, kvcm_core::hit_density::MIN_CLASS_HITS). Every age this test reaches
    // is far under 10 min, so a slow machine does not change the ranking.
    // (Cells count thousandths of an event, kvcm_core::hit_density::UNIT.)
    let mut cells: Vec<(String, i64)> = vec![
        (format!("h{}", BUCKETS + bucket(600_000)), 100 * UNIT),
        (format!("e{}", BUCKETS + bucket(86_400_000)), 10 * UNIT),
        (format!("h{}", bucket(0)), UNIT),
    ];
    cells.extend((0..BUCKETS).map(|b| (format!("e{b}"), 20 * UNIT)));
    let mut args: Vec<(String, i64)> = cells.clone();
    args.push(("events".into(), DECAY_EVENTS as i64 + 500));
    let _: () = redis::cmd("HSET").arg(&hist).arg(&args).query_async(&mut c).await.unwrap();
    assert_eq!(data.adaptive_learn(&fx.instance).await.unwrap(), 1, "one decay due");
    let learned: std::collections::HashMap<String, String> =
        redis::cmd("HGETALL").arg(&hist).query_async(&mut c).await.unwrap();
    let table: Vec<f64> = learned["table"].split(',').map(|v| v.parse().unwrap()).collect();
    assert_eq!(table.len(), 3 * BUCKETS);
    assert!(table[bucket(10)..BUCKETS].iter().all(|d| *d == 0.0), "the rest class is not read back after age 0");
    assert!(table[BUCKETS + bucket(10)] > 0.0, "a young shared leaf is worth keeping");
    assert_eq!(learned["ranks"], kvcm_core::hit_density::ranks_field(&table), "what evict.lua ranks by");
    assert_eq!(learned["events"].parse::<f64>().unwrap(), 500.0);
    assert_eq!(learned[&cells[0].0], (90 * UNIT).to_string(), "decayed by 0.9");
    assert_eq!(data.adaptive_learn(&fx.instance).await.unwrap(), 0, "not due again");
    if !with_ranks {
        let _: () = redis::cmd("HDEL").arg(&hist).arg("ranks").query_async(&mut c).await.unwrap();
    }
    // 20 blocks go: the conversations' suffixes (5, 6) and the three one-off chains. The
    // prompt, a shared leaf once 5 and 6 went, is the least recently used leaf throughout.
    let evicted = evict_adaptive(&data, &fx.instance, 20).await;
    assert_eq!(evicted.blocks, 20);
    // (Checked before the read below, whose touch of the prompt's leaf is a hit.)
    let counted: std::collections::HashMap<String, String> =
        redis::cmd("HGETALL").arg(&hist).query_async(&mut c).await.unwrap();
    assert_eq!(counted["events"].parse::<f64>().unwrap(), 520.0, "each eviction counted");
    let all: Vec<i64> = [1, 2, 3, 4, 5, 6].into_iter().chain((1..=3).flat_map(chain)).collect();
    let kept = Fixture::real(&fx.get("QT_BATCH_GET", &all, json!({})).await);
    assert_eq!(&kept[..4], [true; 4], "the shared prompt is kept: {kept:?}");
    assert!(kept[4..].iter().all(|k| !k), "the suffixes and one-off chains went: {kept:?}");
}

/// `adaptive` reclaiming one storage type samples every leaf of the instance; when the storage
/// being reclaimed holds few of them, its samples can miss them all, and the call then walks
/// `lru` as LRU would — a full storage is never left full because sampling missed it.
#[tokio::test]
async fn adaptive_reclaiming_one_storage_finds_its_few_leaves() {
    let ns = unique("adaptive-storage");
    let instance = "i";
    let data = data_plane(&ns, valkey().await);
    let mut c = valkey().await;
    let (blocks, lru) = (instance_key(&ns, instance, "blocks"), instance_key(&ns, instance, "lru"));
    // 3,000 one-block leaves on storage 1, one on storage 2 (record layout: lua/lib/record.lua).
    let record = |storage: u16| {
        let mut r = vec![0u8; 11];
        r.push(b'S');
        r.extend_from_slice(&storage.to_le_bytes());
        r.push(0);
        r.extend_from_slice(&[0; 8]);
        r.extend_from_slice(&u16::MAX.to_le_bytes());
        r
    };
    for chunk in (1..=3000i64).collect::<Vec<_>>().chunks(500) {
        let mut hset = redis::cmd("HSET");
        let mut zadd = redis::cmd("ZADD");
        hset.arg(&blocks);
        zadd.arg(&lru);
        for k in chunk {
            hset.arg(&k.to_be_bytes()[..]).arg(record(1));
            zadd.arg(*k).arg(&k.to_be_bytes()[..]);
        }
        let _: () = hset.query_async(&mut c).await.unwrap();
        let _: () = zadd.query_async(&mut c).await.unwrap();
    }
    let lone = 9_999i64.to_be_bytes();
    let _: () = redis::cmd("HSET").arg(&blocks).arg(&lone[..]).arg(record(2)).query_async(&mut c).await.unwrap();
    let _: () = redis::cmd("ZADD").arg(&lru).arg(5_000).arg(&lone[..]).query_async(&mut c).await.unwrap();
    // The reclaimer's loop (worker/src/reclaimer.rs): calls go on from the offset each returns,
    // until one frees the bytes wanted or finds nothing more.
    let lease = data.lease_acquire(instance, "t", 60_000).await.unwrap().unwrap();
    let (mut offset, mut calls, mut freed) = (0, 0, 0);
    while freed == 0 && calls < 1_000 {
        let r = data
            .evict(
                instance,
                &[10],
                kvcm_core::store::maintenance::EvictIndex::Adaptive,
                4,
                None,
                Some(2),
                &lease,
                10,
                offset,
            )
            .await
            .unwrap()
            .expect("the lease is held");
        calls += 1;
        freed += r.bytes;
        if r.blocks == 0 && r.exhausted {
            break;
        }
        offset = r.next_offset;
    }
    assert_eq!(freed, 10, "the one leaf on storage 2 was evicted ({calls} calls)");
    let rec: Vec<u8> = redis::cmd("HGET").arg(&blocks).arg(&lone[..]).query_async(&mut c).await.unwrap();
    assert_eq!(rec[11], b'D', "marked deleting");
    let served: i64 = redis::cmd("ZCARD").arg(&lru).query_async(&mut c).await.unwrap();
    assert_eq!(served, 3000, "the other storage's leaves stay");
}
