//! A reclaim round longer than the group lease keeps the lease: no second worker can start
//! evicting the same excess while the first is still at it (it used to be taken once per round
//! and never renewed).

use kvcm_tests::*;
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaim_round_longer_than_its_lease_keeps_the_group_lease() {
    let api = Api::start();
    let root = repo_root().join(".kvcm/test-data").join(unique("lease"));
    std::fs::create_dir_all(&root).unwrap();
    let storage = json!({"storage": {"global_unique_name": "files",
        "nfs": {"root_path": root.to_str().unwrap(), "key_count_per_file": 1}}});
    assert_ok(&api.admin("addStorage", storage).await);
    let group = json!({"instance_group": {"name": "g", "storage_candidates": ["files"], "quota": {"capacity": 1_000_000},
        "cache_config": {"reclaim_strategy": {"reclaim_policy": "POLICY_LRU", "trigger_strategy": {"used_percentage": 0.5}}},
        "version": 1}});
    assert_ok(&api.admin("createInstanceGroup", group).await);
    // 300 instances of 4 blocks of 100 bytes: 120,000 bytes over a 500-byte watermark, so the
    // round goes through every instance (several times its lease here, ~2 ms per instance).
    for i in 0..300 {
        let id = format!("i{i}");
        let reg = json!({"instance_group": "g", "instance_id": id, "block_size": 4,
            "location_spec_infos": [{"name": "tp0", "size": 100}], "model_deployment": {"model_name": "m", "dtype": "bf16"}});
        assert_ok(&api.meta("registerInstance", reg).await);
        let (_, s) = api.meta("startWriteCache", json!({"instance_id": id, "block_keys": [1, 2, 3, 4]})).await;
        let finish =
            json!({"instance_id": id, "write_session_id": s["write_session_id"], "success_blocks": {"offset": 4}});
        assert_ok(&api.meta("finishWriteCache", finish).await);
    }
    // Then the quota drops under what is stored (a write against it would be refused).
    let (_, g) = api.admin("getInstanceGroup", json!({"name": "g"})).await;
    let mut group = g["instance_group"].clone();
    group["quota"]["capacity"] = json!(1000);
    group["version"] = json!(2);
    assert_ok(&api.admin("updateInstanceGroup", json!({"instance_group": group, "current_version": 1})).await);
    let env = [("KVCM_VALKEY_URL".to_string(), valkey_url())];
    let mut config = kvcm_core::config::Config::load_from(None, &env).unwrap().0;
    config.namespace = api.namespace.clone();
    config.worker.metrics_port = 0;
    // Far shorter than the round (the config's floor).
    config.worker.lease_ms = 100;
    let w = std::sync::Arc::new(kvcm_worker::build(config).await.unwrap().worker);
    let snap = w.registry.snapshot();
    assert!(snap.groups.contains_key("g"));

    let started = Instant::now();
    let round = {
        let w = w.clone();
        tokio::spawn(async move {
            let snap = w.registry.snapshot();
            let freed = kvcm_worker::reclaimer::reclaim_group(&w, &snap, &snap.groups["g"]).await.unwrap();
            (freed, Instant::now())
        })
    };
    // Once the round holds the group's lease, another worker keeps trying to take it.
    let lease_key = kvcm_core::keys::GroupKeys::new(&api.namespace, "g").lease;
    let c = valkey().await;
    let holder = format!(":{}", w.id);
    let held = eventually(Duration::from_secs(10), || {
        let (mut c, key, holder) = (c.clone(), lease_key.clone(), holder.clone());
        async move {
            let v: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut c).await.unwrap();
            v.filter(|v| v.ends_with(&holder))
        }
    })
    .await;
    assert!(held.is_some(), "the round never took the group lease");
    let mut intruded: Option<Instant> = None;
    while !round.is_finished() {
        if let Some(token) = w.data.group_lease_acquire("g", "intruder", 5000).await.unwrap() {
            intruded = Some(Instant::now());
            w.data.group_lease_release("g", &token).await.unwrap();
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (freed, done) = round.await.unwrap();
    let took = done - started;
    assert!(
        took > Duration::from_millis(200),
        "the round ({took:?}) must outlast its 100 ms lease for this test to mean anything"
    );
    // Taking the lease as the round gives it back (a moment before the round returns) is fine;
    // taking it while the round still had instances to go is not.
    if let Some(at) = intruded {
        let early = done.saturating_duration_since(at);
        assert!(
            early < Duration::from_millis(15),
            "another worker took the group lease {early:?} before the round ended"
        );
    }
    assert_eq!(freed, 119_500, "the round evicted down to the 500-byte watermark");
}

#[tokio::test]
async fn a_lease_held_by_another_worker_and_a_bad_argument_are_different_outcomes() {
    let access = kvcm_core::valkey::Access::from_urls(&[valkey_url()], 2000, 2000);
    let data = kvcm_core::store::DataPlane::new(access.connect().await.unwrap(), &unique("ns"), Default::default());
    let lease = data.group_lease_acquire("g", "w1", 5000).await.unwrap().expect("w1 takes the free lease");
    assert!(lease.ends_with(":w1"), "{lease}");
    assert_eq!(data.group_lease_acquire("g", "w1", 5000).await.unwrap(), Some(lease.clone()), "renewed");
    assert_eq!(data.group_lease_acquire("g", "w2", 5000).await.unwrap(), None, "held by w1");
    // A bug of the caller (a lease time of 0) used to read as "held by another worker", and
    // the reclaimer skipped the group silently.
    let e = data.group_lease_acquire("g", "w2", 0).await.unwrap_err();
    assert!(e.to_string().contains("lease time must be positive"), "{e}");
    data.group_lease_release("g", &lease).await.unwrap();
}
