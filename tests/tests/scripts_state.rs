//! The Lua scripts' resulting state in Valkey, beyond what the RPC replies show: usage
//! counters, the leaf index that eviction will use, packed-file counts, sessions, and the
//! registry scripts under many concurrent callers.

use kvcm_tests::*;
use serde_json::json;
use std::collections::HashMap;

fn field(k: i64) -> Vec<u8> {
    k.to_be_bytes().to_vec()
}

async fn zset(key: &str) -> Vec<(Vec<u8>, f64)> {
    let mut c = valkey().await;
    redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).arg("WITHSCORES").query_async(&mut c).await.unwrap()
}

#[tokio::test]
async fn usage_and_the_leaf_index_follow_writes_and_removals() {
    let fx = Fixture::new(&[("tp0", 100), ("tp1", 28)], 1, lfu_group()).await;
    let p = format!("{}:v1:{{i:{}}}:", fx.api.namespace, fx.instance);
    fx.write(&[1, 2, 3]).await;
    let mut c = valkey().await;
    let usage: HashMap<String, i64> = redis::cmd("HGETALL").arg(format!("{p}usage")).query_async(&mut c).await.unwrap();
    assert_eq!(usage.values().copied().collect::<std::collections::BTreeSet<_>>(), [3, 384].into(), "{usage:?}");
    // Only the deepest block of the chain 1 <- 2 <- 3 is a leaf.
    let lru = zset(&format!("{p}lru")).await;
    assert_eq!(lru.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(), vec![field(3)]);
    assert_eq!(zset(&format!("{p}lfu")).await, vec![(field(3), 1.0)]);
    // A read whose deepest hit is the leaf bumps its recency and frequency, once, and its
    // count of reads (icount) by one.
    fx.get("QT_PREFIX_MATCH", &[1, 2, 3], json!({})).await;
    let bumped = eventually(std::time::Duration::from_secs(5), || async {
        let lfu = zset(&format!("{p}lfu")).await;
        (lfu == vec![(field(3), 2.0)] && read_counts(&fx.api.namespace, &fx.instance).await == [(field(3), 1)].into())
            .then_some(())
    })
    .await;
    assert!(bumped.is_some(), "lfu priority of the leaf reaches 2, its count 1");
    // A read that ends inside the chain remembers the interior touch instead, and counts too.
    fx.get("QT_PREFIX_MATCH", &[1, 2], json!({})).await;
    let touched = eventually(std::time::Duration::from_secs(5), || async {
        let it: HashMap<Vec<u8>, f64> = zset(&format!("{p}itouch")).await.into_iter().collect();
        let n = read_counts(&fx.api.namespace, &fx.instance).await;
        (it.len() == 1 && n == [(field(3), 1), (field(2), 1)].into()).then(|| it[&field(2)])
    })
    .await
    .expect("interior touch of block 2");
    // Removing the leaf makes its parent the leaf, with the newer of the two recencies, its
    // child's priority plus its own count, and the child's count added to its own (the read of
    // 3 went through 2).
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [3]})).await);
    let lru = zset(&format!("{p}lru")).await;
    assert_eq!(lru.len(), 1);
    assert_eq!(lru[0].0, field(2));
    assert!(lru[0].1 >= touched);
    assert_eq!(zset(&format!("{p}lfu")).await, vec![(field(2), 3.0)]);
    assert_eq!(zset(&format!("{p}itouch")).await, vec![]);
    assert_eq!(read_counts(&fx.api.namespace, &fx.instance).await, [(field(2), 2)].into());
    let usage: HashMap<String, i64> = redis::cmd("HGETALL").arg(format!("{p}usage")).query_async(&mut c).await.unwrap();
    assert_eq!(usage.values().copied().collect::<std::collections::BTreeSet<_>>(), [2, 256].into(), "{usage:?}");

    // A read's touch that lands after its block was unlinked (the pipeline races the removal)
    // leaves a count behind: the deleter drops it when it releases the block, and keeps the
    // counts of blocks that still serve. (touch-gc, which would collect it too, is off here.)
    let _: i64 =
        redis::cmd("HINCRBY").arg(format!("{p}icount")).arg(field(3)).arg(1).query_async(&mut c).await.unwrap();
    let _worker = WorkerProc::start(&fx.api.namespace, &[("KVCM_WORKER__TOUCH_GC_PAUSE_MS", "0")]);
    let blocks = format!("{p}blocks");
    let released = eventually(std::time::Duration::from_secs(20), || async {
        let n = read_counts(&fx.api.namespace, &fx.instance).await;
        let mut c = valkey().await;
        let record: Option<Vec<u8>> = redis::cmd("HGET").arg(&blocks).arg(field(3)).query_async(&mut c).await.unwrap();
        (n == [(field(2), 2)].into() && record.is_none()).then_some(())
    })
    .await;
    assert!(
        released.is_some(),
        "block 3 not released, or its late count outlived it: {:?}",
        read_counts(&fx.api.namespace, &fx.instance).await
    );
}

/// A trim drops the read counts with everything else, and a count a read's touch adds after the
/// trim goes when the deleter releases the trashed block (whose claim put its record back in
/// `blocks`, deleting). touch-gc, which would collect it too, is off here.
#[tokio::test]
async fn a_trim_drops_the_read_counts_and_a_late_one_goes_with_the_release() {
    let fx = Fixture::new(&[("tp0", 100)], 1, lfu_group()).await;
    let p = format!("{}:v1:{{i:{}}}:", fx.api.namespace, fx.instance);
    fx.write(&[1, 2, 3]).await;
    fx.get("QT_PREFIX_MATCH", &[1, 2, 3], json!({})).await;
    let counted = eventually(std::time::Duration::from_secs(5), || async {
        (read_counts(&fx.api.namespace, &fx.instance).await == [(field(3), 1)].into()).then_some(())
    })
    .await;
    assert!(counted.is_some(), "the read counted at block 3");
    assert_ok(&fx.api.meta("trimCache", json!({"instance_id": fx.instance, "strategy": "TS_REMOVE_ALL_CACHE"})).await);
    assert_eq!(read_counts(&fx.api.namespace, &fx.instance).await, HashMap::new(), "the trim dropped the counts");
    let mut c = valkey().await;
    let _: i64 =
        redis::cmd("HINCRBY").arg(format!("{p}icount")).arg(field(3)).arg(1).query_async(&mut c).await.unwrap();
    let _worker = WorkerProc::start(&fx.api.namespace, &[("KVCM_WORKER__TOUCH_GC_PAUSE_MS", "0")]);
    let released = eventually(std::time::Duration::from_secs(20), || async {
        read_counts(&fx.api.namespace, &fx.instance).await.is_empty().then_some(())
    })
    .await;
    assert!(
        released.is_some(),
        "the late count outlived the release: {:?}",
        read_counts(&fx.api.namespace, &fx.instance).await
    );
}

/// Reads of a group that does not reclaim by LFU keep no read counts (the one `HINCRBY` of the
/// touch is LFU's alone), but still the recency and priority of the leaf and interior touches.
#[tokio::test]
async fn an_lru_groups_reads_keep_no_read_counts() {
    let fx = Fixture::new(&[("tp0", 100)], 1, json!({})).await;
    let p = format!("{}:v1:{{i:{}}}:", fx.api.namespace, fx.instance);
    fx.write(&[1, 2, 3]).await;
    fx.get("QT_PREFIX_MATCH", &[1, 2, 3], json!({})).await;
    fx.get("QT_PREFIX_MATCH", &[1, 2], json!({})).await;
    let touched = eventually(std::time::Duration::from_secs(5), || async {
        let lfu = zset(&format!("{p}lfu")).await;
        let it = zset(&format!("{p}itouch")).await;
        (lfu == vec![(field(3), 2.0)] && it.iter().any(|(k, _)| *k == field(2))).then_some(())
    })
    .await;
    assert!(touched.is_some(), "the leaf's priority bumped and the interior touch of block 2 remembered");
    assert_eq!(read_counts(&fx.api.namespace, &fx.instance).await, HashMap::new(), "no read counts");
    // And a removal there passes no count up either.
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [3]})).await);
    assert_eq!(zset(&format!("{p}itouch")).await, vec![]);
    assert_eq!(read_counts(&fx.api.namespace, &fx.instance).await, HashMap::new());
}

#[tokio::test]
async fn sessions_are_tracked_until_finished_and_packed_files_are_counted() {
    let fx = Fixture::new(&[("tp0", 8)], 4, json!({})).await;
    let p = format!("{}:v1:{{i:{}}}:", fx.api.namespace, fx.instance);
    let s = fx.start(&[1, 2, 3, 4, 5, 6]).await;
    let sid = s["write_session_id"].as_str().unwrap();
    let mut c = valkey().await;
    let deadline: Option<f64> =
        redis::cmd("ZSCORE").arg(format!("{p}sessions")).arg(sid).query_async(&mut c).await.unwrap();
    assert!(deadline.is_some(), "open session is registered for the expirer");
    let files: HashMap<Vec<u8>, i64> =
        redis::cmd("HGETALL").arg(format!("{p}files")).query_async(&mut c).await.unwrap();
    let mut counts: Vec<i64> = files.values().copied().collect();
    counts.sort();
    assert_eq!(counts, vec![2, 4], "six blocks in files of four: 4 + 2");
    assert_ok(&(200, fx.finish(&s, json!({"offset": 6})).await));
    let deadline: Option<f64> =
        redis::cmd("ZSCORE").arg(format!("{p}sessions")).arg(sid).query_async(&mut c).await.unwrap();
    assert!(deadline.is_none());
    // What stays is the finished marker (a resent finish answers from it), expiring within 60 s.
    let marker: Vec<u8> = redis::cmd("GET").arg(format!("{p}s:{sid}")).query_async(&mut c).await.unwrap();
    assert_eq!((marker.len(), marker[0]), (11, b'F'), "{marker:?}");
    let ttl: i64 = redis::cmd("PTTL").arg(format!("{p}s:{sid}")).query_async(&mut c).await.unwrap();
    assert!(ttl > 0 && ttl <= 60_000, "{ttl}");
}

#[tokio::test]
async fn concurrent_registrations_respect_idempotency_and_max_instance_count() {
    let api = std::sync::Arc::new(Api::start());
    assert_ok(
        &api.admin("addStorage", json!({"storage": {"global_unique_name": "s", "nfs": {"root_path": "/tmp/kvcm-c"}}}))
            .await,
    );
    assert_ok(
        &api.admin(
            "createInstanceGroup",
            json!({"instance_group": {"name": "g", "storage_candidates": ["s"], "max_instance_count": 5}}),
        )
        .await,
    );
    let reg = |id: String| {
        json!({"instance_group": "g", "instance_id": id, "block_size": 4,
        "location_spec_infos": [{"name": "tp0", "size": 8}], "model_deployment": {"model_name": "m", "dtype": "bf16"}})
    };
    let same: Vec<_> = (0..16)
        .map(|_| {
            let a = api.clone();
            let b = reg("same".into());
            tokio::spawn(async move { a.meta("registerInstance", b).await })
        })
        .collect();
    for h in same {
        assert_ok(&h.await.unwrap());
    }
    let many: Vec<_> = (0..16)
        .map(|i| {
            let a = api.clone();
            let b = reg(format!("i{i}"));
            tokio::spawn(async move { a.meta("registerInstance", b).await })
        })
        .collect();
    let mut ok = 0;
    for h in many {
        let r = h.await.unwrap();
        match code(&r.1) {
            "OK" => ok += 1,
            "REACH_MAX_ENTITY_CAPACITY" => {}
            other => panic!("unexpected {other}: {}", r.1),
        }
    }
    assert_eq!(ok, 4, "one slot was taken by 'same'; exactly four of sixteen racers get the rest");
    let (_, list) = api.admin("listInstanceInfo", json!({"instance_group_name": "g"})).await;
    assert_eq!(list["instance_info"].as_array().unwrap().len(), 5);
    // Eight different groups of one name (an identical create would be idempotent).
    let creates: Vec<_> = (0..8)
        .map(|i| {
            let a = api.clone();
            tokio::spawn(async move {
                let group = json!({"name": "race", "storage_candidates": ["s"], "user_data": format!("creator {i}")});
                a.admin("createInstanceGroup", json!({"instance_group": group})).await
            })
        })
        .collect();
    let mut created = 0;
    for h in creates {
        if code(&h.await.unwrap().1) == "OK" {
            created += 1;
        }
    }
    assert_eq!(created, 1, "exactly one concurrent create wins");
}

/// Runs `lua/auth_failure.lua` once (as kvcm-api does after a wrong password) at `now` ms.
async fn auth_failure(keys: &[String; 3], now: u64) -> u64 {
    auth_failure_call(keys, now, &format!("{:016x}", fastrand::u64(..))).await
}

/// One call of `lua/auth_failure.lua` with the call id `call`.
async fn auth_failure_call(keys: &[String; 3], now: u64, call: &str) -> u64 {
    let mut c = valkey().await;
    let mut inv = kvcm_core::scripts::AUTH_FAILURE.script().prepare_invoke();
    inv.key(&keys[0]).key(&keys[1]).key(&keys[2]);
    // Back-off after 3 failures, 1 s doubling up to 8 s, counters kept for 60 s.
    inv.arg(now).arg(3).arg(1000).arg(8000).arg(60_000).arg(call);
    let (code, until): (i64, String) = inv.invoke_async(&mut c).await.unwrap();
    assert_eq!(code, 1);
    until.parse().unwrap()
}

#[tokio::test]
async fn failed_logins_start_a_doubling_capped_back_off_on_all_three_counters() {
    let ns = unique("ns");
    let k = kvcm_core::keys::AuthKeys::new(&ns);
    let keys = [k.pair_failures("root", "10.0.0.1"), k.user_failures("root"), k.address_failures("10.0.0.1")];
    let now = 1_000_000u64;
    // Two failures: counted, no back-off yet.
    assert_eq!(auth_failure(&keys, now).await, 0);
    assert_eq!(auth_failure(&keys, now).await, 0);
    // The third starts the back-off; the same call resent (its reply lost) counts nothing more.
    assert_eq!(auth_failure_call(&keys, now, "resent-call").await, now + 1000);
    assert_eq!(auth_failure_call(&keys, now, "resent-call").await, now + 1000, "its resend is not a fourth");
    // Then 2 s, 4 s, 8 s, and capped at 8 s.
    for wait in [2000, 4000, 8000, 8000, 8000] {
        assert_eq!(auth_failure(&keys, now).await, now + wait);
    }
    let mut c = valkey().await;
    for key in &keys {
        let (n, until): (u64, u64) =
            redis::cmd("HMGET").arg(key).arg("n").arg("until").query_async(&mut c).await.unwrap();
        assert_eq!((n, until), (8, now + 8000), "{key}");
        let ttl: i64 = redis::cmd("PTTL").arg(key).query_async(&mut c).await.unwrap();
        assert!(ttl > 50_000 && ttl <= 60_000, "the counters expire with the window: {ttl}");
    }
    // A user's counter is shared by every address; another address's pair and address start afresh.
    let other = [k.pair_failures("root", "10.0.0.2"), k.user_failures("root"), k.address_failures("10.0.0.2")];
    assert_eq!(auth_failure(&other, now).await, now + 8000, "root's own counter is past the threshold");
    let n: u64 = redis::cmd("HGET").arg(&other[0]).arg("n").query_async(&mut c).await.unwrap();
    assert_eq!(n, 1);
}

#[tokio::test]
async fn two_admins_deleting_each_other_at_once_leave_exactly_one() {
    for _ in 0..5 {
        let api = Api::start();
        for (user, pw) in [("a1", "admin-pass-1"), ("a2", "admin-pass-2")] {
            let body = json!({"user_name": user, "password": pw, "role": "ROLE_ADMIN"}).to_string();
            let auth = (user == "a2").then_some("Bearer a1:admin-pass-1");
            assert_ok(&api.post(&api.admin, "addAccount", body, auth).await);
        }
        let (r1, r2) = tokio::join!(
            api.post(
                &api.admin,
                "deleteAccount",
                json!({"user_name": "a2"}).to_string(),
                Some("Bearer a1:admin-pass-1")
            ),
            api.post(
                &api.admin,
                "deleteAccount",
                json!({"user_name": "a1"}).to_string(),
                Some("Bearer a2:admin-pass-2")
            ),
        );
        let ok = [&r1, &r2].iter().filter(|r| code(&r.1) == "OK").count();
        assert_eq!(ok, 1, "{r1:?} {r2:?}");
        let dump = dump_namespace(&api.namespace).await;
        let accounts = dump.iter().find(|(k, _)| k.ends_with(":accounts")).map(|(_, v)| v.clone()).unwrap_or_default();
        assert_eq!(accounts.matches("ROLE_ADMIN").count(), 1, "{accounts}");
    }
}

#[tokio::test]
async fn key_orders_cannot_make_blocks_each_others_parent() {
    // A cycle of n blocks: write [A1]; [A1, A2]; [A2, A3] … [An-1, An]; fail the first session
    // (A1's record is dropped while A2, naming it, is being written); write [An, A1]: A1's new
    // record would name An, and An -> … -> A2 -> A1. No block of a cycle is ever a leaf.
    for n in [2usize, 3, 7] {
        let fx = Fixture::new(&[("tp0", 8)], 1, json!({})).await;
        let p = format!("{}:v1:{{i:{}}}:", fx.api.namespace, fx.instance);
        let a: Vec<i64> = (0..n as i64).map(|i| 101 + i).collect();
        let first = fx.start(&a[..1]).await;
        let mut rest = Vec::new();
        for w in a.windows(2) {
            let s = fx.start(w).await;
            assert_eq!(s["locations"].as_array().unwrap().len(), 1, "n={n}: {s}");
            rest.push(s);
        }
        assert_ok(&(200, fx.finish(&first, json!({"offset": 0})).await));
        let closing = fx.start(&[a[n - 1], a[0]]).await;
        assert_eq!(closing["locations"].as_array().unwrap().len(), 1, "n={n}: {closing}");
        for s in rest.iter().chain([&closing]) {
            assert_ok(&(200, fx.finish(s, json!({"offset": 1})).await));
        }
        // All serve, and one of them is a leaf that eviction can take.
        assert_eq!(Fixture::real(&fx.get("QT_BATCH_GET", &a, json!({})).await), vec![true; n], "n={n}");
        let leaves: Vec<Vec<u8>> = zset(&format!("{p}lru")).await.into_iter().map(|(k, _)| k).collect();
        assert_eq!(leaves.len(), 1, "n={n}: no leaf means a cycle; more than one, a link lost: {leaves:?}");
        assert!(a.iter().any(|k| leaves[0] == field(*k)), "n={n}: {leaves:?}");
    }
}

#[tokio::test]
async fn a_chain_that_leaves_the_request_keeps_its_links_when_it_makes_no_cycle() {
    // [1, 2], then [3, 2, 4] and [2, 5]: 4's and 5's parent is 2, whose own parent (1) is not the
    // key before it in the request; the walk goes up from 2, finds no cycle, and keeps the links:
    // 2 stops being a leaf, 3 (a root of its own), 4 and 5 are the leaves.
    let fx = Fixture::new(&[("tp0", 8)], 1, json!({})).await;
    let p = format!("{}:v1:{{i:{}}}:", fx.api.namespace, fx.instance);
    fx.write(&[1, 2]).await;
    fx.write(&[3, 2, 4]).await;
    fx.write(&[2, 5]).await;
    let leaves: Vec<Vec<u8>> = zset(&format!("{p}lru")).await.into_iter().map(|(k, _)| k).collect();
    let mut want = vec![field(3), field(4), field(5)];
    want.sort();
    let mut got = leaves.clone();
    got.sort();
    assert_eq!(got, want, "{leaves:?}");
    // A request that starts 400 blocks deep in a stored chain: the walk up from 1410 goes 410
    // records to the chain's root (within the request's budget of 2,048) and finds no cycle, so
    // 9999 names 1410, which stops being a leaf (a budget of 256 dropped this link).
    let chain: Vec<i64> = (1000..1600).collect();
    fx.write(&chain).await;
    fx.write(&[1400, 1410, 9999]).await;
    let leaves: Vec<Vec<u8>> = zset(&format!("{p}lru")).await.into_iter().map(|(k, _)| k).collect();
    assert!(leaves.contains(&field(9999)) && leaves.contains(&field(1599)), "{leaves:?}");
    assert!(!leaves.contains(&field(1410)), "9999 was not linked to 1410: {leaves:?}");
}

#[tokio::test]
async fn a_block_whose_parent_comes_later_in_its_session_is_counted_in_that_parent() {
    // [A, B] with A failed: B serves under a header-only A. Removing B leaves its record (a
    // location being deleted) naming A. [B, A] then writes both again: B keeps its parent A, the
    // key after it, and A becomes a root of its own (naming B would close a cycle). Finishing
    // that session links B to A, a block of the same session that is not the key before it.
    let fx = Fixture::new(&[("tp0", 8)], 1, json!({})).await;
    let p = format!("{}:v1:{{i:{}}}:", fx.api.namespace, fx.instance);
    let (a, b) = (7001, 7002);
    let first = fx.start(&[a, b]).await;
    assert_ok(&(200, fx.finish(&first, json!({"bool_masks": {"values": [false, true]}})).await));
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [b]})).await);
    let again = fx.start(&[b, a]).await;
    assert_eq!(again["locations"].as_array().unwrap().len(), 2, "{again}");
    assert_ok(&(200, fx.finish(&again, json!({"offset": 2})).await));
    assert_eq!(Fixture::real(&fx.get("QT_BATCH_GET", &[a, b], json!({})).await), vec![true, true]);
    let leaves: Vec<Vec<u8>> = zset(&format!("{p}lru")).await.into_iter().map(|(k, _)| k).collect();
    assert_eq!(leaves, vec![field(b)], "B is the one leaf; A has B as its child");
    let mut c = valkey().await;
    let rec: Vec<u8> = redis::cmd("HGET").arg(format!("{p}blocks")).arg(field(a)).query_async(&mut c).await.unwrap();
    assert_eq!(u16::from_le_bytes([rec[9], rec[10]]), 1, "A counts one serving child: {rec:?}");
    assert_eq!(rec[11], b'S', "A's one location serves: {rec:?}");
}

#[tokio::test]
async fn a_session_of_new_blocks_gets_one_location_per_block_from_a_reply_that_carries_it_once() {
    // Every new location of an unpacked session with no spec groups is the same bytes: the
    // script sends them once and the frontend builds each block's own URIs from them.
    let fx = Fixture::new(&[("tp0", 8)], 1, json!({})).await;
    let keys: Vec<i64> = (1..=5).collect();
    let s = fx.start(&keys).await;
    let uris = Fixture::first_uris(&s);
    assert_eq!(uris.len(), 5, "{s}");
    for (k, uri) in keys.iter().zip(&uris) {
        assert!(uri.contains(&format!("{k:016x}")), "block {k}'s own URI: {uri}");
    }
    assert_ok(&(200, fx.finish(&s, json!({"offset": 5})).await));
    assert_eq!(Fixture::real(&fx.get("QT_BATCH_GET", &keys, json!({})).await), vec![true; 5]);
    // Packed blocks' locations differ (each its place in its file): one per block, as before.
    let packed = Fixture::new(&[("tp0", 8)], 4, json!({})).await;
    let s = packed.start(&(1..=6).collect::<Vec<i64>>()).await;
    let uris: std::collections::BTreeSet<String> = Fixture::first_uris(&s).into_iter().collect();
    assert_eq!(uris.len(), 6, "six packed blocks, six places: {s}");
}

/// A request as connectors send it, every key with the stored prefix first: the script's common
/// path (no per-key bookkeeping, one location in its reply) must mask exactly that prefix, link
/// the first new block under the prefix's last and give every new block its own URI. Near
/// misses of that shape (a stored key out of request order, a first key with a parent, a prefix
/// key only being deleted) take the general path and must come out linked as it links them.
#[tokio::test]
async fn a_stored_prefix_then_new_keys_is_masked_linked_and_answered_per_block() {
    let fx = Fixture::new(&[("tp0", 8)], 1, json!({})).await;
    let p = format!("{}:v1:{{i:{}}}:", fx.api.namespace, fx.instance);
    let leaves = || async {
        let mut l: Vec<Vec<u8>> = zset(&format!("{p}lru")).await.into_iter().map(|(k, _)| k).collect();
        l.sort();
        l
    };
    let parent = |k: i64| {
        let blocks = format!("{p}blocks");
        async move {
            let mut c = valkey().await;
            let rec: Vec<u8> = redis::cmd("HGET").arg(blocks).arg(field(k)).query_async(&mut c).await.unwrap();
            (rec[0] & 1 == 1).then(|| i64::from_be_bytes(rec[1..9].try_into().unwrap()))
        }
    };
    fx.write(&[1, 2, 3]).await;
    let s = fx.start(&[1, 2, 3, 4, 5, 6]).await;
    assert_eq!(s["block_mask"], json!({"offset": 3}), "{s}");
    let uris = Fixture::first_uris(&s);
    assert_eq!(uris.len(), 3, "{s}");
    for (k, uri) in [4, 5, 6].iter().zip(&uris) {
        assert!(uri.contains(&format!("{k:016x}")), "block {k}'s own URI: {uri}");
    }
    assert_ok(&(200, fx.finish(&s, json!({"offset": 3})).await));
    assert_eq!(parent(4).await, Some(3), "the first new block links under the prefix's last");
    assert_eq!(leaves().await, vec![field(6)], "3 stopped being a leaf");
    assert_eq!(Fixture::real(&fx.get("QT_PREFIX_MATCH", &[1, 2, 3, 4, 5, 6], json!({})).await).len(), 6);

    // Near misses. 20 is stored with no parent and sent after 1: out of request order.
    fx.write(&[20]).await;
    let s = fx.start(&[1, 20, 21]).await;
    assert_eq!(s["block_mask"], json!({"offset": 2}), "{s}");
    assert_ok(&(200, fx.finish(&s, json!({"offset": 1})).await));
    assert_eq!(parent(21).await, Some(20));
    // A first key that has a parent (5, under 4): its chain leaves the request.
    let s = fx.start(&[5, 6, 7]).await;
    assert_eq!(s["block_mask"], json!({"offset": 2}), "{s}");
    assert_ok(&(200, fx.finish(&s, json!({"offset": 1})).await));
    assert_eq!(parent(7).await, Some(6));
    // A prefix key whose only location is being deleted is written again, under its parent.
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [7]})).await);
    let s = fx.start(&[1, 2, 3, 4, 5, 6, 7, 8]).await;
    assert_eq!(s["block_mask"], json!({"offset": 6}), "{s}");
    assert_eq!(Fixture::first_uris(&s).len(), 2, "{s}");
    assert_ok(&(200, fx.finish(&s, json!({"offset": 2})).await));
    assert_eq!((parent(7).await, parent(8).await), (Some(6), Some(7)));
    let want: Vec<Vec<u8>> = [8, 21].iter().map(|k| field(*k)).collect();
    assert_eq!(leaves().await, want);
    // Every key stored: all masked, no location, a session with nothing to finish.
    let s = fx.start(&[1, 2, 3, 4, 5, 6]).await;
    assert_eq!((s["block_mask"].clone(), Fixture::first_uris(&s).len()), (json!({"offset": 6}), 0), "{s}");
    assert_ok(&(200, fx.finish(&s, json!({"offset": 0})).await));

    // Packed files: the new blocks after a stored prefix get a place each in their files.
    let packed = Fixture::new(&[("tp0", 8)], 4, json!({})).await;
    packed.write(&[1, 2, 3]).await;
    let s = packed.start(&(1..=8).collect::<Vec<i64>>()).await;
    assert_eq!(s["block_mask"], json!({"offset": 3}), "{s}");
    let uris: std::collections::BTreeSet<String> = Fixture::first_uris(&s).into_iter().collect();
    assert_eq!(uris.len(), 5, "five packed blocks, five places: {s}");
    assert_ok(&(200, packed.finish(&s, json!({"offset": 5})).await));
    assert_eq!(Fixture::real(&packed.get("QT_PREFIX_MATCH", &(1..=8).collect::<Vec<i64>>(), json!({})).await).len(), 8);
}

#[tokio::test]
async fn the_expirer_does_not_count_a_session_finished_just_before_it() {
    let fx = Fixture::new(&[("tp0", 8)], 1, json!({})).await;
    let p = format!("{}:v1:{{i:{}}}:", fx.api.namespace, fx.instance);
    let s = fx.start(&[1, 2]).await;
    assert_ok(&(200, fx.finish(&s, json!({"offset": 2})).await));
    // The expirer read the session as due just before the finish removed it.
    let mut c = valkey().await;
    let sid = s["write_session_id"].as_str().unwrap();
    let _: () = redis::cmd("ZADD").arg(format!("{p}sessions")).arg(0).arg(sid).query_async(&mut c).await.unwrap();
    let data = kvcm_core::store::DataPlane::new(c.clone(), &fx.api.namespace, Default::default());
    assert_eq!(data.expire_sessions(&fx.instance, 10).await.unwrap(), 0, "a finished session counted as expired");
    let left: i64 = redis::cmd("ZCARD").arg(format!("{p}sessions")).query_async(&mut c).await.unwrap();
    assert_eq!(left, 0);
    assert_eq!(Fixture::real(&fx.get("QT_BATCH_GET", &[1, 2], json!({})).await), vec![true, true], "still serving");
}

/// Arguments kvcm itself got wrong are a Lua error reply naming the script (a bug: the caller
/// logs it as INTERNAL_ERROR), never a `{status, message}` a binding could read as an outcome —
/// "bad argument" once shared a code with "lease held by another worker".
#[tokio::test]
async fn arguments_kvcm_got_wrong_are_error_replies_never_a_status() {
    use kvcm_core::scripts::{self, LuaScript};
    let key = 7i64.to_be_bytes().to_vec();
    let loc14 = vec![0u8; 14];
    let t = unique("bad");
    let keys = |n: usize| (0..n).map(|i| format!("{{{t}}}:k{i}")).collect::<Vec<_>>();
    let densities = vec!["0"; 384].join(",").into_bytes();
    let ranks = kvcm_core::hit_density::ranks_field(&[0.0; 384]).into_bytes();
    let cases: Vec<(&LuaScript, usize, Vec<Vec<u8>>, &str)> = vec![
        (&scripts::LEASE_ACQUIRE, 2, vec![b"w".to_vec(), b"0".to_vec()], "lease time must be positive"),
        (
            &scripts::START_WRITE_CACHE,
            5,
            vec![b"s".to_vec(), b"60".to_vec(), b"0".to_vec(), b"1".to_vec(), vec![], b"8".to_vec(), key.clone()],
            "bad storage id",
        ),
        (
            &scripts::START_WRITE_CACHE,
            5,
            vec![b"s".to_vec(), b"60".to_vec(), b"1".to_vec(), b"1".to_vec(), vec![], b"8".to_vec(), b"short".to_vec()],
            "not 8 bytes",
        ),
        (&scripts::REMOVE_CACHE, 7, vec![b"8".to_vec(), b"x".to_vec(), b"1".to_vec()], "begin and end"),
        (&scripts::EXPAND_TRASH, 2, vec![b"g".to_vec(), b"1-0".to_vec(), b"0".to_vec()], "N must be within"),
        (&scripts::CLAIM_DELETE, 2, vec![b"1-0".to_vec(), b"k".to_vec(), loc14], "bad key or location"),
        (
            &scripts::EVICT,
            11,
            ["8", "mru", "1", "inf", "0", "1:w", "0", "0", "c"].iter().map(|a| a.as_bytes().to_vec()).collect(),
            "index must be lru, lfu or adaptive",
        ),
        (
            &scripts::ADAPTIVE_DECAY,
            1,
            vec![b"0".to_vec(), b"0".to_vec(), b"0.9".to_vec(), ranks.clone()],
            "bad DECAY_EVENTS",
        ),
        (&scripts::ADAPTIVE_DECAY, 1, vec![b"0,1".to_vec(), b"2048".to_vec(), b"0.9".to_vec(), ranks], "384 densities"),
        (&scripts::DROP_ORPHAN_ADAPTIVE, 3, vec![b"x".to_vec()], "expected 3 keys"),
        (
            &scripts::ADAPTIVE_DECAY,
            1,
            vec![densities.clone(), b"2048".to_vec(), b"0.9".to_vec(), b"001".to_vec()],
            "ranks must be",
        ),
        (
            &scripts::ADAPTIVE_DECAY,
            1,
            vec![densities, b"2048".to_vec(), b"0.9".to_vec(), vec![b'x'; 384 * 3]],
            "ranks must be",
        ),
    ];
    let mut c = valkey().await;
    for (script, nkeys, args, needle) in cases {
        let mut inv = script.script().prepare_invoke();
        for k in keys(nkeys) {
            inv.key(k);
        }
        for a in &args {
            inv.arg(a.as_slice());
        }
        let reply: redis::RedisResult<redis::Value> = inv.invoke_async(&mut c).await;
        let e = reply.expect_err(&format!("{}: a bad argument answered as an outcome", script.file));
        let name = script.file.trim_end_matches(".lua");
        let text = e.to_string();
        assert!(text.contains(&format!("{name}:")) && text.contains(needle), "{}: {text}", script.file);
    }
}

/// Outcomes that are the frontend's business, not the client's: a start whose session id is
/// another request's answers its own code (the frontend draws another id), and a trim resent
/// after it went through (its trash key, random per call, exists) answers OK without trimming
/// the blocks written since.
#[tokio::test]
async fn a_taken_session_id_and_a_resent_trim_are_outcomes_of_their_own() {
    use kvcm_core::scripts;
    let t = unique("own");
    let k = |name: &str| format!("{{{t}}}:{name}");
    let mut c = valkey().await;
    let start = |session: &'static str, key: i64| {
        let mut inv = scripts::START_WRITE_CACHE.script().prepare_invoke();
        for name in ["blocks", session, "sessions", "seq", "files"] {
            inv.key(k(name));
        }
        inv.arg(session).arg("60").arg("1").arg("1").arg(&b""[..]).arg("8").arg(&key.to_be_bytes()[..]);
        inv
    };
    let first: Vec<redis::Value> = start("s1", 7).invoke_async(&mut c).await.unwrap();
    assert_eq!(first[0], redis::Value::Int(1));
    let again: Vec<redis::Value> = start("s1", 8).invoke_async(&mut c).await.unwrap();
    assert_eq!(again[0], redis::Value::Int(scripts::SESSION_ID_TAKEN), "another request's session id");

    let trim = || {
        let mut inv = scripts::TRIM_ALL_CACHE.script().prepare_invoke();
        for name in ["tblocks", "trash-1", "usage", "lru", "lfu", "itouch", "del", "icount", "adaptive", "ighost"] {
            inv.key(k(name));
        }
        inv
    };
    let _: () =
        redis::cmd("HSET").arg(k("tblocks")).arg("a").arg("x").arg("b").arg("y").query_async(&mut c).await.unwrap();
    let (code, n): (i64, i64) = trim().invoke_async(&mut c).await.unwrap();
    assert_eq!((code, n), (1, 2));
    let _: () = redis::cmd("HSET").arg(k("tblocks")).arg("c").arg("z").query_async(&mut c).await.unwrap();
    let (code, n): (i64, i64) = trim().invoke_async(&mut c).await.unwrap();
    assert_eq!((code, n), (1, 2), "the resend answers the first run");
    let left: i64 = redis::cmd("HLEN").arg(k("tblocks")).query_async(&mut c).await.unwrap();
    assert_eq!(left, 1, "the block written since is not trimmed by the resend");
}

/// touch-gc's step (`DataPlane::prune_touches`, lua/prune_touch.lua) on indexes too large to come
/// back in one scan page: it resumes from its cursors step by step until both are done, drops
/// every entry whose block does not serve, keeps every serving block's, and leaves alone a
/// field that is not a block key.
#[tokio::test]
async fn stale_read_bookkeeping_is_collected_step_by_step_and_serving_blocks_keep_theirs() {
    use kvcm_core::store::maintenance::TouchCursor;
    let fx = Fixture::new(&[("tp0", 8)], 1, lfu_group()).await;
    let p = format!("{}:v1:{{i:{}}}:", fx.api.namespace, fx.instance);
    let serving: Vec<i64> = (1..=40).collect();
    fx.write(&serving).await;
    let mut c = valkey().await;
    let (itouch, icount) = (format!("{p}itouch"), format!("{p}icount"));
    // 600 stale keys in each index, beside the 40 serving blocks' entries and a foreign field.
    for k in serving.iter().copied().chain(10_000..10_600) {
        let _: () = redis::cmd("ZADD").arg(&itouch).arg(k).arg(field(k)).query_async(&mut c).await.unwrap();
        let _: () = redis::cmd("HSET").arg(&icount).arg(field(k)).arg(1).query_async(&mut c).await.unwrap();
    }
    let _: () = redis::cmd("HSET").arg(&icount).arg("not-a-block").arg(1).query_async(&mut c).await.unwrap();
    let conn = redis::cluster::ClusterClient::new(vec![valkey_url()]).unwrap().get_async_connection().await.unwrap();
    let data = kvcm_core::store::DataPlane::new(conn, &fx.api.namespace, Default::default());
    let (mut cursor, mut steps, mut dropped) = (TouchCursor::START, 0, (0, 0));
    while !cursor.done() {
        let step = data.prune_touches(&fx.instance, cursor, 50).await.unwrap();
        (cursor, steps) = (step.cursor, steps + 1);
        dropped = (dropped.0 + step.itouch_dropped, dropped.1 + step.icount_dropped);
        assert!(steps < 200, "the cursors do not advance: {cursor:?}");
    }
    assert!(steps > 3, "one scan page held everything ({steps} steps): the resume is not exercised");
    assert_eq!(dropped, (600, 600));
    let left: Vec<Vec<u8>> = redis::cmd("ZRANGE").arg(&itouch).arg(0).arg(-1).query_async(&mut c).await.unwrap();
    let mut want: Vec<Vec<u8>> = serving.iter().map(|k| field(*k)).collect();
    let mut got = left.clone();
    want.sort();
    got.sort();
    assert_eq!(got, want, "the serving blocks keep their touches, and only they");
    let counts: HashMap<Vec<u8>, i64> = redis::cmd("HGETALL").arg(&icount).query_async(&mut c).await.unwrap();
    assert_eq!(counts.len(), 41, "40 serving blocks' counts and the foreign field");
    assert!(counts.contains_key(b"not-a-block".as_slice()));
}

/// `finish_write_cache.lua` decides the common finish — every location written (an offset
/// mask), fresh records chained in session order — in one pass of its own. The same writes
/// finished through the general path (a mask of all `true`s) leave exactly the same state:
/// records (but for the seconds each location was written at), usage, the leaf indexes, the
/// sessions. The offset-finished sessions cover a first chain, an extension under a stored leaf,
/// a second branch under the same block (which makes it shared), a one-block session, and a
/// block whose parent's record is gone by the finish (another session wrote the parent and
/// failed); a session with a failed block goes through the general path on both (a control).
/// Unpacked and packed (4 keys per file) locations. (That the offset finishes take the new
/// path is not visible in the state, by design: it was checked by breaking that path, which
/// this test then fails.)
#[tokio::test]
async fn the_fast_finish_leaves_the_state_the_general_finish_leaves() {
    for per_file in [1, 4] {
        fast_and_general_finish_agree(per_file).await;
    }
}

async fn fast_and_general_finish_agree(per_file: i32) {
    let fx = Fixture::new(&[("tp0", 100)], per_file, json!({})).await;
    let general = unique("inst");
    let reg = json!({"instance_group": "g", "instance_id": general, "block_size": 4,
        "location_spec_infos": [{"name": "tp0", "size": 100}], "model_deployment": {"model_name": "m", "dtype": "bf16"},
        "location_spec_groups": [{"name": "first", "spec_names": ["tp0"]}]});
    assert_ok(&fx.api.meta("registerInstance", reg).await);
    let api = &fx.api;
    let start = |instance: String, keys: Vec<i64>| async move {
        let (_, s) = api.meta("startWriteCache", json!({"instance_id": instance, "block_keys": keys})).await;
        assert_eq!(code(&s), "OK", "{s}");
        s
    };
    // Finishes every location written by offset (`fast`), or by a mask: all true but `failed`.
    let finish = |instance: String, s: serde_json::Value, fast: bool, failed: Option<usize>| async move {
        let n = s["locations"].as_array().unwrap().len();
        let success = if fast && failed.is_none() {
            json!({"offset": n})
        } else {
            json!({"bool_masks": {"values": (0..n).map(|i| Some(i) != failed).collect::<Vec<_>>()}})
        };
        let (_, f) = api
            .meta(
                "finishWriteCache",
                json!({"instance_id": instance, "write_session_id": s["write_session_id"], "success_blocks": success}),
            )
            .await;
        assert_eq!(code(&f), "OK", "{f}");
    };
    let write = |instance: String, keys: Vec<i64>, fast: bool, failed: Option<usize>| async move {
        let s = start(instance.clone(), keys).await;
        finish(instance, s, fast, failed).await;
    };
    let sessions: [(Vec<i64>, Option<usize>); 5] = [
        (vec![1, 2, 3], None),
        (vec![1, 2, 3, 4, 5], None),
        (vec![1, 2, 3, 6], None),
        (vec![1, 2, 3, 4, 5, 7], None),
        (vec![1, 2, 3, 6, 8, 9], Some(1)),
    ];
    for (keys, failed) in sessions {
        let fast = failed.is_none();
        write(fx.instance.clone(), keys.clone(), fast, failed).await;
        write(general.clone(), keys, false, failed).await;
    }
    // 20 is written by one session and 21 under it by another; the first fails (20's record
    // goes), then the second finishes: 21's parent gets a header-only record.
    for (instance, fast) in [(fx.instance.clone(), true), (general.clone(), false)] {
        let first = start(instance.clone(), vec![20]).await;
        let second = start(instance.clone(), vec![20, 21]).await;
        assert_eq!(second["locations"].as_array().unwrap().len(), 1);
        finish(instance.clone(), first, false, Some(0)).await;
        finish(instance, second, fast, None).await;
    }
    let ns = &fx.api.namespace;
    let c = valkey().await;
    // A record with each location's written-at seconds (bytes 8..12 of a location) zeroed.
    let records = |instance: String| {
        let mut c = c.clone();
        async move {
            let all: HashMap<Vec<u8>, Vec<u8>> =
                redis::cmd("HGETALL").arg(instance_key(ns, &instance, "blocks")).query_async(&mut c).await.unwrap();
            let mut out: Vec<(Vec<u8>, Vec<u8>)> = all
                .into_iter()
                .map(|(k, mut rec)| {
                    let mut p = 11;
                    while p + 14 <= rec.len() {
                        rec[p + 8..p + 12].fill(0);
                        p += if rec[p + 12] == 255 && rec[p + 13] == 255 { 14 } else { 26 };
                    }
                    (k, rec)
                })
                .collect();
            out.sort();
            out
        }
    };
    let (fast_records, general_records) = (records(fx.instance.clone()).await, records(general.clone()).await);
    assert_eq!(fast_records.len(), 10, "blocks 1-8 (the last session's 9 failed), 20 and 21: {fast_records:?}");
    assert_eq!(fast_records, general_records, "key_count_per_file {per_file}");
    // Block 3 has two serving children (4 and 6): shared (flags bit 1). 20 is a header that
    // counts its one serving child.
    let three = fast_records.iter().find(|(k, _)| *k == field(3)).unwrap();
    assert_eq!((three.1[0] & 2, three.1[9], three.1[10]), (2, 2, 0));
    let twenty = fast_records.iter().find(|(k, _)| *k == field(20)).unwrap();
    assert_eq!(twenty.1, vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
    let hash = |instance: String, name: &'static str| {
        let mut c = c.clone();
        async move {
            let u: HashMap<String, i64> =
                redis::cmd("HGETALL").arg(instance_key(ns, &instance, name)).query_async(&mut c).await.unwrap();
            u
        }
    };
    assert_eq!(hash(fx.instance.clone(), "usage").await, hash(general.clone(), "usage").await);
    for index in ["lru", "lfu", "itouch", "sessions"] {
        let members = |instance: String| async move {
            let z = zset(&instance_key(ns, &instance, index)).await;
            let mut m: Vec<Vec<u8>> = z.into_iter().map(|(k, _)| k).collect();
            m.sort();
            m
        };
        assert_eq!(members(fx.instance.clone()).await, members(general.clone()).await, "{index}");
    }
    assert_eq!(zset(&instance_key(ns, &fx.instance, "sessions")).await, vec![], "every session finished");
    assert_eq!(zset(&instance_key(ns, &fx.instance, "lfu")).await, zset(&instance_key(ns, &general, "lfu")).await);
    // The leaves: 7 (under 5), 8 (under 6; its sibling 9 failed) and 21.
    let mut leaves: Vec<Vec<u8>> =
        zset(&instance_key(ns, &fx.instance, "lru")).await.into_iter().map(|(k, _)| k).collect();
    leaves.sort();
    assert_eq!(leaves, vec![field(7), field(8), field(21)]);
}
