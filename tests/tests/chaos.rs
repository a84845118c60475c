//! The chaos suite (issue 11, docs/reliability.md): steady load from simulated engines through
//! several frontends, with workers running, while a part fails — a Valkey primary killed and
//! replaced by its replica, a frontend and a worker `kill -9`ed, connections between kvcm and
//! Valkey reset, a storage root vanishing and coming back, a storage operation hanging (the
//! health probe on a FIFO, and an unlink through the worker's `StorageUnlink` fault point). After
//! each, the load stops, and the auditor (`kvcm-worker audit`) must find the system drained and
//! clean: every serving block's files exist, every file belongs to a block, usage counters
//! equal the serving blocks, nothing stuck being deleted, no session left open. Every block
//! whose finish an engine saw acknowledged must still serve, every acknowledged removal must
//! not.
//!
//! `make test` runs this slice (a few seconds of load per scenario); `make chaos` runs it with
//! `KVCM_CHAOS_SCALE` (longer load, more engines). Each scenario prints its figures.

use kvcm_tests::chaos::*;
use kvcm_tests::*;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Frontends and workers around one file storage, one group and one instance.
struct Stack {
    fx: Fixture,
    apis: Vec<Api>,
    workers: Vec<WorkerProc>,
    frontends: Frontends,
    valkey: String,
}

impl Stack {
    async fn start(valkey: &str, apis: usize, workers: usize, env: &[(&str, &str)]) -> Stack {
        let ns = unique("chaos");
        let mut env: Vec<(&str, &str)> = env.to_vec();
        env.push(("KVCM_VALKEY_URL", valkey));
        let fx = Fixture::on(Api::start_with(&ns, &env), &[("tp0", 2), ("tp1", 2)], 1, json!({})).await;
        let apis: Vec<Api> = (1..apis).map(|_| Api::start_with(&ns, &env)).collect();
        let mut worker_env = env.clone();
        worker_env.extend([
            ("KVCM_WORKER__CLAIM_IDLE_MS", "1000"),
            ("KVCM_WORKER__HEALTH_INTERVAL_MS", "300"),
            ("KVCM_WORKER__FILE_OP_TIMEOUT_MS", "1000"),
        ]);
        let workers = (0..workers).map(|_| WorkerProc::start(&ns, &worker_env)).collect();
        let mut urls = vec![fx.api.meta.clone()];
        urls.extend(apis.iter().map(|a| a.meta.clone()));
        Stack { fx, apis, workers, frontends: Arc::new(Mutex::new(urls)), valkey: valkey.to_string() }
    }

    fn namespace(&self) -> &str {
        &self.fx.api.namespace
    }

    /// Stops the load, checks every acknowledged write and removal, and audits until drained.
    async fn settle(&self, load: Load, scenario: &str) -> kvcm_worker::audit::Audit {
        let ledger = load.stop().await;
        let window = error_window(&ledger.outcomes);
        println!(
            "{scenario}: requests {:?}; error window {:?}; acknowledged blocks {}, removed {}",
            tally(&ledger.outcomes),
            window,
            ledger.acked.len(),
            ledger.removed.len()
        );
        assert!(ledger.acked.len() > 20, "{scenario}: too little was written to tell: {}", ledger.acked.len());
        // Sessions cut short expire (5 s write timeout), deletions drain.
        let audit = audit_until_drained(&self.valkey, self.namespace(), Duration::from_secs(60)).await;
        println!("{scenario}: audit {}", serde_json::to_string(&audit).unwrap());
        assert!(audit.clean(), "{scenario}: the auditor found problems: {audit:#?}");
        assert_eq!(audit.dead_letters, 0, "{scenario}: deletions were given up on: {audit:#?}");
        assert!(audit.drained(), "{scenario}: work still in flight after 60 s: {audit:#?}");
        assert_eq!(audit.orphan_bytes, 0, "{scenario}");
        if let Err(e) = verify_ledger(&self.fx.api, &self.fx.instance, &ledger).await {
            panic!("{scenario}: {e}");
        }
        audit
    }
}

/// Load for `seconds` × the chaos scale.
async fn run_for(seconds: u64) {
    tokio::time::sleep(Duration::from_secs(seconds * scale() as u64)).await;
}

fn engines() -> usize {
    4 * scale() as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_under_load_fails_over_and_no_acknowledged_write_is_lost() {
    let _one = one_at_a_time().await;
    let cluster = ReplicatedCluster::start();
    let s = Stack::start(
        &cluster.url,
        2,
        2,
        &[
            ("KVCM_DURABILITY", "replica_ack"),
            ("KVCM_REPLICA_ACK_TIMEOUT_MS", "500"),
            ("KVCM_VALKEY_TIMEOUT_MS", "1000"),
            ("KVCM_VALKEY_CONNECT_TIMEOUT_MS", "500"),
        ],
    )
    .await;
    let load = Load::start(s.frontends.clone(), &s.fx.instance, engines());
    run_for(2).await;
    assert!(load.answered() > 0, "no request succeeded before the failure");
    let blocks = instance_key(s.namespace(), &s.fx.instance, "blocks");
    let (primary, replicas) = cluster.primary_of(&blocks);
    assert!(!replicas.is_empty(), "the instance's primary has no replica");
    let killed = Instant::now();
    cluster.signal(primary, "-9");
    // Until a replica has taken over and writes succeed again for a while.
    let recovered = eventually(Duration::from_secs(60), || {
        let ledger = load.ledger.clone();
        async move {
            let l = ledger.lock().unwrap();
            let last_failure = l.outcomes.iter().filter(|o| !o.ok() && o.at > killed).map(|o| o.at).max()?;
            l.outcomes
                .iter()
                .any(|o| o.ok() && o.rpc == "finishWriteCache" && o.at > last_failure + Duration::from_secs(2))
                .then_some(last_failure)
        }
    })
    .await;
    if recovered.is_none() {
        let l = load.ledger.lock().unwrap();
        let after: Vec<_> =
            l.outcomes.iter().filter(|o| o.at > killed).map(|o| (o.rpc, o.http, o.code.clone())).collect();
        panic!(
            "writes did not recover within 60 s of the kill; the last requests: {:?}",
            &after[after.len().saturating_sub(10)..]
        );
    }
    let (now_primary, _) = cluster.primary_of(&blocks);
    assert!(replicas.contains(&now_primary), "a replica ({replicas:?}) serves the slot now, not {now_primary}");
    run_for(1).await;
    let audit = s.settle(load, "primary killed").await;
    println!(
        "primary killed: failover from the kill to the last failed request {:?}",
        recovered.unwrap().duration_since(killed)
    );
    assert!(audit.serving_locations > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frontend_and_a_worker_killed_mid_load_lose_nothing() {
    let _one = one_at_a_time().await;
    let mut s = Stack::start(&valkey_url(), 2, 2, &[]).await;
    let load = Load::start(s.frontends.clone(), &s.fx.instance, engines());
    run_for(2).await;
    // Sessions started through the killed frontend finish through the other; the killed
    // worker's pending deletions are claimed by the other after claim_idle_ms.
    let gone = s.apis.remove(0);
    let url = gone.meta.clone();
    gone.kill();
    s.workers.remove(0).kill9();
    // A load balancer notices the dead frontend after a health check or two.
    tokio::time::sleep(Duration::from_millis(500)).await;
    s.frontends.lock().unwrap().retain(|u| *u != url);
    run_for(2).await;
    s.settle(load, "frontend and worker killed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_reset_between_kvcm_and_valkey_lose_nothing() {
    let _one = one_at_a_time().await;
    // Every connection of the frontends and workers goes through a proxy that resets them all
    // every 300 ms, requests and replies in flight included.
    let valkey = SoloValkey::start();
    let (proxy, url) = ReplyDropper::in_front_of(&valkey).await;
    let s = Stack::start(&url, 2, 1, &[]).await;
    let load = Load::start(s.frontends.clone(), &s.fx.instance, engines());
    let end = Instant::now() + Duration::from_secs(4 * scale() as u64);
    let mut resets = 0;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(300)).await;
        proxy.reset_all();
        resets += 1;
    }
    println!("connection resets: {resets} rounds, {} connections reset", proxy.resets());
    assert!(proxy.resets() >= resets, "the proxy reset {} connections in {resets} rounds", proxy.resets());
    s.settle(load, "connections reset").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_root_that_vanishes_and_a_hung_probe_lose_nothing() {
    let _one = one_at_a_time().await;
    let mut s = Stack::start(&valkey_url(), 1, 1, &[]).await;
    let load = Load::start(s.frontends.clone(), &s.fx.instance, engines());
    run_for(2).await;
    // The mount goes away (renamed: the directory is no longer where the storage says) and
    // comes back: engines' writes fail meanwhile, deletions fail and are retried, nothing is
    // released while its files cannot be deleted.
    let away = s.fx.root.with_extension("unmounted");
    std::fs::rename(&s.fx.root, &away).unwrap();
    run_for(2).await;
    std::fs::rename(&away, &s.fx.root).unwrap();
    run_for(1).await;
    // A hung file operation: the worker's health probe file becomes a FIFO, whose open for
    // writing blocks. The probe times out (1 s here), the storage reads unhealthy on that
    // worker, its other jobs go on, and it still shuts down promptly.
    let probe = s.fx.root.join(format!("~kvcm-health-{}", kvcm_core::backend::path_segment(&s.workers[0].id)));
    assert!(std::process::Command::new("mkfifo").arg(&probe).status().unwrap().success());
    let unhealthy = eventually(Duration::from_secs(10), || async {
        (s.workers[0].metric("kvcm_storage_healthy{storage=\"files\"}").await == 0.0).then_some(())
    })
    .await;
    assert!(unhealthy.is_some(), "the hung probe never made the storage unhealthy on the worker");
    // The mount recovers: the blocked open returns (a reader comes), and the root takes
    // operations again (until then the worker runs none on it: see core/src/backend/file.rs).
    unblock(&probe);
    s.settle(load, "storage root vanished, probe hung").await;
    // Hang it again and stop the worker: it exits although a probe thread is blocked.
    assert!(std::process::Command::new("mkfifo").arg(&probe).status().unwrap().success());
    tokio::time::sleep(Duration::from_millis(700)).await;
    let took = s.workers[0].terminate_within(Duration::from_secs(10));
    unblock(&probe);
    assert!(took.is_some_and(|t| t < Duration::from_secs(5)), "the worker took {took:?} to stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_unlink_holds_its_keys_and_loses_nothing() {
    let _one = one_at_a_time().await;
    let s = Stack::start(&valkey_url(), 1, 1, &[("KVCM_DEBUG_FAULTS", "true")]).await;
    let load = Load::start(s.frontends.clone(), &s.fx.instance, engines());
    run_for(2).await;
    // The mount's unlink blocks (the fault point of the worker's storage backend, injected
    // through the worker's debug service): each deletion times out after 1 s; the root counts
    // as hung while the thread is blocked, so further deletions on it fail at once; the keys
    // of timed-out deletions stay held (the unlink may still land); writes and reads go on.
    let worker = &s.workers[0];
    let debug = |rpc: &'static str, body: serde_json::Value| {
        let url = format!("{}/api/{rpc}", worker.metrics);
        async move {
            let r: serde_json::Value =
                reqwest::Client::new().post(url).json(&body).send().await.unwrap().json().await.unwrap();
            assert_eq!(r["header"]["status"]["code"], "OK", "{rpc}: {r}");
        }
    };
    let hang = json!({"api_name": "StorageUnlink", "fault_type": "FT_HANG", "hang_ms": 600_000});
    debug("injectFault", hang).await;
    let timeouts = "kvcm_worker_deletion_failures_total{kind=\"timeout\"}";
    let timed_out =
        eventually(Duration::from_secs(15), || async { (worker.metric(timeouts).await >= 2.0).then_some(()) }).await;
    assert!(timed_out.is_some(), "no deletion timed out on the hung unlink");
    // A timed-out deletion is remembered as such: its key stays held (the unlink may still land).
    let fail = instance_key(s.namespace(), &s.fx.instance, "del_fail");
    let mut c = valkey().await;
    let fields: Vec<String> = redis::cmd("HKEYS").arg(&fail).query_async(&mut c).await.unwrap();
    assert!(fields.iter().any(|f| f.ends_with(":hung")), "no deletion marked as hung: {fields:?}");
    run_for(2).await;
    // The mount recovers: the blocked unlink returns (and deletes), the root takes operations
    // again, the retried deletions complete.
    debug("clearFaults", json!({})).await;
    {
        // While an unlink is blocked the root counts as hung, so the health probe fails too: the
        // storage turns unhealthy and starts are refused (no storage can take new blocks) with a
        // domain error — never a 5xx or anything else.
        let ledger = load.ledger.lock().unwrap();
        let other: Vec<_> = ledger
            .outcomes
            .iter()
            .filter(|o| !(o.ok() || o.rpc == "startWriteCache" && o.code == "REACH_MAX_ENTITY_CAPACITY"))
            .collect();
        assert!(other.is_empty(), "requests failed otherwise: {:?}", &other[..other.len().min(5)]);
    }
    let audit = s.settle(load, "unlink hung").await;
    println!("unlink hung: {} deletion attempts timed out", worker.metric(timeouts).await);
    assert_eq!(audit.dead_letters, 0);
}

/// Opens the FIFO `path` for reading, releasing a writer blocked on it, then removes it. The open
/// runs on a thread of its own: with no writer waiting it would block.
fn unblock(path: &std::path::Path) {
    let p = path.to_path_buf();
    std::thread::spawn(move || drop(std::fs::File::open(&p)));
    std::thread::sleep(Duration::from_millis(100));
    let _ = std::fs::remove_file(path);
}
