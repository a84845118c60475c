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
    let fx = Fixture::new(&[("tp0", 100), ("tp1", 28)], 1, json!({})).await;
    let p = format!("{}:v1:{{i:{}}}:", fx.api.namespace, fx.instance);
    fx.write(&[1, 2, 3]).await;
    let mut c = valkey().await;
    let usage: HashMap<String, i64> = redis::cmd("HGETALL").arg(format!("{p}usage")).query_async(&mut c).await.unwrap();
    assert_eq!(usage.values().copied().collect::<std::collections::BTreeSet<_>>(), [3, 384].into(), "{usage:?}");
    // Only the deepest block of the chain 1 <- 2 <- 3 is a leaf.
    let lru = zset(&format!("{p}lru")).await;
    assert_eq!(lru.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(), vec![field(3)]);
    assert_eq!(zset(&format!("{p}lfu")).await, vec![(field(3), 1.0)]);
    // A read whose deepest hit is the leaf bumps its recency and frequency, once.
    fx.get("QT_PREFIX_MATCH", &[1, 2, 3], json!({})).await;
    let bumped = eventually(std::time::Duration::from_secs(5), || async {
        let lfu = zset(&format!("{p}lfu")).await;
        (lfu == vec![(field(3), 2.0)]).then_some(())
    })
    .await;
    assert!(bumped.is_some(), "lfu count of the leaf reaches 2");
    // A read that ends inside the chain remembers the interior touch instead.
    fx.get("QT_PREFIX_MATCH", &[1, 2], json!({})).await;
    let touched = eventually(std::time::Duration::from_secs(5), || async {
        let it = zset(&format!("{p}itouch")).await;
        (it.len() == 1 && it[0].0 == field(2)).then_some(it[0].1)
    })
    .await
    .expect("interior touch of block 2");
    // Removing the leaf makes its parent the leaf, with the newer of the two recencies.
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [3]})).await);
    let lru = zset(&format!("{p}lru")).await;
    assert_eq!(lru.len(), 1);
    assert_eq!(lru[0].0, field(2));
    assert!(lru[0].1 >= touched);
    assert!(zset(&format!("{p}itouch")).await.is_empty());
    let usage: HashMap<String, i64> = redis::cmd("HGETALL").arg(format!("{p}usage")).query_async(&mut c).await.unwrap();
    assert_eq!(usage.values().copied().collect::<std::collections::BTreeSet<_>>(), [2, 256].into(), "{usage:?}");
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
    let exists: i64 = redis::cmd("EXISTS").arg(format!("{p}s:{sid}")).query_async(&mut c).await.unwrap();
    assert_eq!(exists, 0);
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
    let creates: Vec<_> = (0..8)
        .map(|_| {
            let a = api.clone();
            tokio::spawn(async move {
                a.admin("createInstanceGroup", json!({"instance_group": {"name": "race", "storage_candidates": ["s"]}}))
                    .await
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
