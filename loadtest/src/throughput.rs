//! `kvcm-bench throughput`: 128-block prefix reads at saturation, straight on the data plane and
//! through HTTP side by side, an open-loop phase at a fraction of the HTTP rate, and two-phase
//! writes of 32 new blocks per session through HTTP.

use crate::{Bench, Result, h1, info_fields, prefix_read, rate, record, register, serve};
use anyhow::Context;
use kvcm_core::mask::BlockMask;
use kvcm_core::store::get_cache_location::QueryType;
use std::sync::Arc;
use std::time::Instant;

/// The subcommand's flags.
#[derive(clap::Args)]
pub struct Params {
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Prompts of 128 blocks written first (8,192 = 1M blocks).
    #[arg(long, default_value_t = 8192)]
    pub prompts: usize,
    /// Then an open-loop run of HTTP reads at this fraction of the HTTP rate just measured
    /// (e.g. 0.5: latency at half of saturation); 0 = none.
    #[arg(long, default_value_t = 0.0)]
    pub open_loop_fraction: f64,
    /// Instances the write sessions are spread over (1: one instance, i.e. one Valkey
    /// shard's script thread; more: a fleet's instances, on different slots).
    #[arg(long, default_value_t = 1)]
    pub write_instances: usize,
    /// Each write session sends this many stored keys before its 32 new ones, as connectors
    /// send a request (every key, the cached prefix first); 0 = the new keys alone. Each task
    /// writes its prefix once first.
    #[arg(long, default_value_t = 0)]
    pub write_prefix: usize,
    /// The in-process kvcm-api's `serving_threads` (0: its default, one per CPU).
    #[arg(long, default_value_t = 0)]
    pub serving_threads: usize,
}

pub async fn run(valkey: &str, record_to: &Option<std::path::PathBuf>, p: Params) -> Result<()> {
    let Params { concurrency, seconds, prompts, open_loop_fraction, write_instances, write_prefix, serving_threads } =
        p;
    let b = Arc::new(Bench::new(valkey, 1).await?);
    let written = prompts * 128;
    let prompts = Arc::new(b.fill(prompts, 128, 1024).await?); // 1,024 kept for reads
    let (server, stop_tx, serving) = serve(valkey, &b.ns, 1 << 16, |c| c.serving_threads = serving_threads).await?;
    let dur = std::time::Duration::from_secs(seconds);
    // Valkey's CPU per read in each phase: where Valkey's one thread bounds both (a host with cores
    // of its own for the client and the frontend), each rate is about 1 / (its CPU per read), if
    // the per-read cost measured here held at saturation.
    let mut node = b.node().await?;
    let cpu_before = main_thread_cpu(&mut node).await?;
    // Direct: the data plane's read, as a frontend calls it (locations rendered to JSON).
    let direct = {
        let snap = b.registry.snapshot();
        let inst = b.registry.instance(&b.instance).await?;
        let until = Instant::now() + dur;
        closed_loop(concurrency, |i| {
            let (b, prompts, snap, inst) = (b.clone(), prompts.clone(), snap.clone(), inst.clone());
            async move {
                let mut n = 0u64;
                let mut out = Vec::new();
                while Instant::now() < until {
                    let keys = &prompts[(i + n as usize * concurrency) % prompts.len()];
                    out.clear();
                    b.data
                        .get_cache_location_json(
                            &snap,
                            &inst,
                            QueryType::QT_PREFIX_MATCH,
                            keys,
                            &BlockMask::Offset(0),
                            0,
                            &[],
                            &mut out,
                        )
                        .await?;
                    n += 1;
                }
                Ok(n)
            }
        })
        .await?
    };
    let cpu_direct = main_thread_cpu(&mut node).await?;
    // HTTP: the same reads through the real router and server. Like the direct side,
    // whose keys are ready, the requests are serialised once up front: the load generator
    // shares the 2 cores, and what is measured is the server.
    let bodies: Arc<Vec<bytes::Bytes>> = Arc::new(prompts.iter().map(|keys| prefix_read(&b.instance, keys)).collect());
    let http = {
        let until = Instant::now() + dur;
        closed_loop(concurrency, |i| {
            let bodies = bodies.clone();
            async move {
                let mut conn = h1::H1::connect(server).await?;
                let mut n = 0u64;
                while Instant::now() < until {
                    let body = bodies[(i + n as usize * concurrency) % bodies.len()].clone();
                    let reply = conn.post("/api/getCacheLocation", body).await?;
                    anyhow::ensure!(rate::reply_ok(&reply), "a read failed: {}", String::from_utf8_lossy(&reply));
                    n += 1;
                }
                Ok(n)
            }
        })
        .await?
    };
    let cpu_http = main_thread_cpu(&mut node).await?;
    // None for a phase that completed no read.
    let valkey_us = |cpu: f64, done: &Done| (done.ops > 0).then(|| cpu * 1e6 / done.ops as f64);
    let (direct_us, http_us) = (valkey_us(cpu_direct - cpu_before, &direct), valkey_us(cpu_http - cpu_direct, &http));
    let (direct, http) = (direct.rate(), http.rate());
    println!(
        "throughput: 128-block prefix reads, {concurrency} concurrent, {seconds} s each: direct {direct:.0}/s, HTTP {http:.0}/s ({:.0}% of direct)",
        100.0 * http / direct
    );
    if let (Some(d), Some(h)) = (direct_us, http_us) {
        println!(
            "throughput: Valkey main-thread CPU per read: direct {d:.1} us, HTTP {h:.1} us (if Valkey's thread bounded both at these costs, HTTP would run at ~{:.0}% of direct)",
            100.0 * d / h
        );
    }
    let mut rec = serde_json::json!({"bench": "throughput", "concurrency": concurrency, "seconds": seconds,
        "blocks": written, "direct_reads_per_s": direct, "http_reads_per_s": http,
        "valkey_us_per_direct_read": direct_us, "valkey_us_per_http_read": http_us});
    if open_loop_fraction > 0.0 {
        // Half of saturation (or any fraction): arrivals at a fixed rate, latency from the
        // scheduled start.
        let r = rate::open_loop(server, "/api/getCacheLocation", bodies.clone(), open_loop_fraction * http, dur).await;
        println!(
            "throughput: open loop at {:.0}% of the HTTP rate ({:.0}/s offered, {seconds} s): {:.0}/s completed, p50 {:.3} ms, p99 {:.3} ms ({} errors, {} dropped)",
            100.0 * open_loop_fraction,
            r.offered_per_s,
            r.completed_per_s,
            r.p50_ms,
            r.p99_ms,
            r.errors,
            r.dropped
        );
        rec["open_loop"] = serde_json::json!({"fraction": open_loop_fraction, "offered_per_s": r.offered_per_s,
            "completed_per_s": r.completed_per_s, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms, "errors": r.errors, "dropped": r.dropped});
    }
    // Two-phase writes of 32 new blocks per session through HTTP, over one or more
    // instances (task i writes to instance i mod N).
    let mut instances = vec![b.instance.clone()];
    for i in 1..write_instances.max(1) {
        let id = format!("bench-instance-{i}");
        register(&b.registry, &id, 1).await?;
        instances.push(id);
    }
    let instances = Arc::new(instances);
    let sessions = closed_loop(concurrency, |i| {
        let instances = instances.clone();
        async move {
            let inst = &instances[i % instances.len()];
            let mut conn = h1::H1::connect(server).await?;
            // The task's stored prefix: a chain from a root, written once.
            let prefix: Vec<i64> = (0..write_prefix).map(|_| fastrand::i64(..)).collect();
            if !prefix.is_empty() {
                write_session(&mut conn, inst, &prefix, prefix.len()).await?;
            }
            let until = Instant::now() + dur;
            let mut n = 0u64;
            while Instant::now() < until {
                let keys: Vec<i64> = prefix.iter().copied().chain((0..32).map(|_| fastrand::i64(..))).collect();
                // The stored prefix is found; the 32 new keys are written (an offset of 32).
                write_session(&mut conn, inst, &keys, 32).await?;
                n += 1;
            }
            Ok(n)
        }
    })
    .await?
    .rate();
    println!(
        "throughput: two-phase writes of 32 blocks through HTTP (after {write_prefix} stored keys), {concurrency} concurrent, {} instance(s): {sessions:.0} sessions/s",
        instances.len()
    );
    for extra in &instances[1..] {
        let mut c = b.conn.clone();
        for k in b.data.keys(extra).all() {
            let _: () = redis::cmd("UNLINK").arg(k).query_async(&mut c).await?;
        }
    }
    rec["write_instances"] = serde_json::json!(instances.len());
    rec["write_prefix"] = serde_json::json!(write_prefix);
    rec["write_sessions_per_s"] = serde_json::json!(sessions);
    record(record_to, rec)?;
    let _ = stop_tx.send(());
    serving.await??;
    b.cleanup().await?;
    Ok(())
}

/// Runs `concurrency` tasks at once, task `i` being `task(i)`, each answering how many operations
/// it did: their total and the seconds from the first spawn to the last task's end.
async fn closed_loop<F, Fut>(concurrency: usize, task: F) -> Result<Done>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<u64>> + Send + 'static,
{
    let t = Instant::now();
    let tasks: Vec<_> = (0..concurrency).map(|i| tokio::spawn(task(i))).collect();
    let mut ops = 0;
    for h in futures::future::join_all(tasks).await {
        ops += h??;
    }
    Ok(Done { ops, secs: t.elapsed().as_secs_f64() })
}

/// What a [`closed_loop`] did.
struct Done {
    ops: u64,
    secs: f64,
}

impl Done {
    fn rate(&self) -> f64 {
        self.ops as f64 / self.secs
    }
}

/// Seconds of CPU the node's main thread has used, the thread every command of an instance runs
/// on (`INFO cpu`, one snapshot: `used_cpu_user_main_thread` + `used_cpu_sys_main_thread`, which
/// Valkey reports on Linux; an error where it does not).
async fn main_thread_cpu(node: &mut redis::aio::MultiplexedConnection) -> Result<f64> {
    let cpu = info_fields(node, "cpu", &["used_cpu_user_main_thread", "used_cpu_sys_main_thread"])
        .await
        .context("the node does not report its main thread's CPU")?;
    Ok(cpu.iter().sum())
}

/// One two-phase write session through HTTP: startWriteCache of `keys`, then finishWriteCache
/// with the offset `written` (the new keys the start answered, all written).
async fn write_session(conn: &mut h1::H1, inst: &str, keys: &[i64], written: usize) -> Result<()> {
    let start = serde_json::json!({"instance_id": inst, "block_keys": keys}).to_string();
    let reply = conn.post("/api/startWriteCache", start.into()).await?;
    anyhow::ensure!(rate::reply_ok(&reply), "a start failed: {}", String::from_utf8_lossy(&reply));
    let s: serde_json::Value = serde_json::from_slice(&reply)?;
    let finish = serde_json::json!({"instance_id": inst, "write_session_id": s["write_session_id"],
        "success_blocks": {"offset": written}});
    let reply = conn.post("/api/finishWriteCache", finish.to_string().into()).await?;
    anyhow::ensure!(rate::reply_ok(&reply), "a finish failed: {}", String::from_utf8_lossy(&reply));
    Ok(())
}
