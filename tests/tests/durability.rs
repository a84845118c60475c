//! `durability`: what an acknowledged write promises when a primary is lost (docs/reliability.md).
//! With `"off"` a write is answered once the primary ran it, and a primary lost before its
//! replicas caught up takes it along; with `"replica_ack"` it is answered only once a replica
//! holds it, and otherwise the engine gets 503 and resends.

use kvcm_tests::chaos::ReplicatedCluster;
use kvcm_tests::*;
use serde_json::json;
use std::time::Duration;

async fn fixture(cluster: &ReplicatedCluster, durability: &str) -> Fixture {
    let api = Api::start_with(
        &unique("ns"),
        &[
            ("KVCM_VALKEY_URL", cluster.url.as_str()),
            ("KVCM_DURABILITY", durability),
            ("KVCM_REPLICA_ACK_TIMEOUT_MS", "300"),
            ("KVCM_VALKEY_TIMEOUT_MS", "1000"),
        ],
    );
    Fixture::on(api, &[("tp0", 64)], 1, json!({})).await
}

async fn serving(fx: &Fixture, keys: &[i64]) -> Option<Vec<bool>> {
    let r = fx.get("QT_BATCH_GET", keys, json!({})).await;
    (code(&r) == "OK").then(|| Fixture::real(&r))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replica_ack_a_write_no_replica_holds_is_503_and_its_resend_succeeds_once_one_does() {
    let _one = kvcm_tests::chaos::one_at_a_time().await;
    let cluster = ReplicatedCluster::start();
    let fx = fixture(&cluster, "replica_ack").await;
    fx.write(&[1, 2]).await;
    let (_, replicas) = cluster.primary_of(&instance_key(&fx.api.namespace, &fx.instance, "blocks"));
    let session = fx.start(&[1, 2, 3, 4]).await;
    assert_eq!(code(&session), "OK", "{session}");

    // The replicas stop (as if partitioned away): the finish runs on the primary, no replica
    // acknowledges it within 300 ms.
    for r in &replicas {
        cluster.signal(*r, "-STOP");
    }
    let finish = json!({"instance_id": fx.instance, "write_session_id": session["write_session_id"],
        "success_blocks": {"offset": 2}});
    let (http, reply) = fx.api.meta("finishWriteCache", finish.clone()).await;
    assert_eq!(http, 503, "{reply}");
    assert_eq!(code(&reply), "SERVICE_NOT_READY", "{reply}");
    assert!(message(&reply).contains("0 of 1 replica") && message(&reply).contains("resend"), "{reply}");
    // Resent while the replicas are still away: the first run is applied, the resend writes
    // nothing of its own — it must not be acknowledged (WAIT would measure an older offset).
    // Several resends, so that they go out on different connections.
    for _ in 0..4 {
        let (http, reply) = fx.api.meta("finishWriteCache", finish.clone()).await;
        assert_eq!((http, code(&reply)), (503, "SERVICE_NOT_READY"), "a resend acknowledged: {reply}");
    }
    // A new session cannot be acknowledged either.
    let (http, reply) = fx.api.meta("startWriteCache", json!({"instance_id": fx.instance, "block_keys": [9]})).await;
    assert_eq!((http, code(&reply)), (503, "SERVICE_NOT_READY"), "{reply}");
    for r in &replicas {
        cluster.signal(*r, "-CONT");
    }
    // The engine resends the finish: it answers like the first run, now acknowledged.
    let resent = eventually(Duration::from_secs(10), || async {
        let (http, reply) = fx.api.meta("finishWriteCache", finish.clone()).await;
        (http == 200).then_some(reply)
    })
    .await
    .expect("the resent finish never succeeded");
    assert_eq!(code(&resent), "OK", "{resent}");
    assert_eq!(serving(&fx, &[1, 2, 3, 4]).await, Some(vec![true; 4]));

    // Valkey full: a write in the replica_ack pipeline is refused with OOM — 503 saying so, as
    // without replica_ack (the pipeline's combined error used to read as an internal error).
    let (primary, _) = cluster.primary_of(&instance_key(&fx.api.namespace, &fx.instance, "blocks"));
    let mut node = redis::Client::open(format!("redis://127.0.0.1:{primary}")).unwrap().get_connection().unwrap();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(1).query(&mut node).unwrap();
    let (http, reply) = fx.api.meta("startWriteCache", json!({"instance_id": fx.instance, "block_keys": [9]})).await;
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(0).query(&mut node).unwrap();
    assert_eq!((http, code(&reply)), (503, "SERVICE_NOT_READY"), "{reply}");
    assert!(message(&reply).contains("out of memory"), "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_durability_off_an_acknowledged_finish_can_be_lost_with_its_primary() {
    // What "off" risks, shown rather than claimed: the replicas stop, a finish is acknowledged
    // by the primary alone, the primary dies, a replica that never saw the finish takes over.
    let _one = kvcm_tests::chaos::one_at_a_time().await;
    let cluster = ReplicatedCluster::start();
    let fx = fixture(&cluster, "off").await;
    fx.write(&[1, 2]).await;
    let (primary, replicas) = cluster.primary_of(&instance_key(&fx.api.namespace, &fx.instance, "blocks"));
    // Both replicas hold blocks 1 and 2 before they stop; then the primary drops its links to
    // them (the stopped replicas cannot come back for the finish: a partition).
    let blocks = instance_key(&fx.api.namespace, &fx.instance, "blocks");
    for r in &replicas {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{r}")).unwrap().get_connection().unwrap();
        let _: () = redis::cmd("READONLY").query(&mut c).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !redis::cmd("HEXISTS").arg(&blocks).arg(2i64.to_be_bytes().to_vec()).query::<bool>(&mut c).unwrap() {
            assert!(std::time::Instant::now() < deadline, "replica {r} never received blocks 1 and 2");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    for r in &replicas {
        cluster.signal(*r, "-STOP");
    }
    let mut node = redis::Client::open(format!("redis://127.0.0.1:{primary}")).unwrap().get_connection().unwrap();
    let _: i64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica").query(&mut node).unwrap();
    fx.write(&[1, 2, 3, 4]).await;
    assert_eq!(serving(&fx, &[1, 2, 3, 4]).await, Some(vec![true; 4]), "acknowledged by the primary");
    cluster.signal(primary, "-9");
    for r in &replicas {
        cluster.signal(*r, "-CONT");
    }
    let after = eventually(Duration::from_secs(60), || serving(&fx, &[1, 2, 3, 4])).await.expect("no failover");
    assert_eq!(after, vec![true, true, false, false], "the acknowledged finish of 3 and 4 was lost with the primary");
}
