//! `kvcm-bench durability`: what `durability = "replica_ack"` costs, measured side by side in
//! one run. The same two-phase writes (startWriteCache + finishWriteCache of 32 new blocks) run
//! on the data plane as a frontend calls it, once answered when the primary ran the script
//! (`off`) and once when a replica also holds it (`replica_ack`, WAIT 1), in alternating rounds:
//! sessions/s at a concurrency, and the latency of serial sessions. Printed figures are medians
//! over rounds of each side and of the per-round ratio.

use crate::{Bench, median, percentile};
use anyhow::Result;
use kvcm_core::store::DataPlane;
use kvcm_core::store::durability::{CONNECTIONS, ReplicaAck};
use kvcm_core::valkey::Access;
use kvcm_core::wire::WireBlockMask;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One session: start 32 random new blocks, finish them all.
async fn session(
    b: &Bench,
    data: &DataPlane,
    snap: &kvcm_core::registry::Snapshot,
    inst: &kvcm_core::wire::InstanceInfo,
) -> Result<()> {
    let keys: Vec<i64> = (0..32).map(|_| fastrand::i64(..)).collect();
    let w = data.start_write_cache(snap, inst, &keys, &[], 0).await?;
    let mask = WireBlockMask { offset: Some(w.locations.len() as i32), bool_masks: None };
    data.finish_write_cache(&b.instance, &w.session_id, Some(&mask)).await?;
    Ok(())
}

pub async fn run(
    valkey: &str,
    concurrency: usize,
    seconds: u64,
    rounds: usize,
    serial: usize,
) -> Result<serde_json::Value> {
    let b = Arc::new(Bench::new(valkey, 1).await?);
    let access = Access::from_urls(&[valkey.to_string()], 5000, 2000);
    let mut conns = Vec::new();
    for _ in 0..CONNECTIONS {
        conns.push(access.cluster().await?);
    }
    let acked = b.data.clone().with_replica_ack(Some(ReplicaAck::new(conns, 1, 1000)));
    let sides = [("off", b.data.clone()), ("replica_ack", acked)];
    let snap = b.registry.snapshot();
    let inst = b.registry.instance(&b.instance).await?;
    // Per side: sessions/s per round; serial p50/p99 per round.
    let mut rate = [Vec::new(), Vec::new()];
    let mut p50 = [Vec::new(), Vec::new()];
    let mut p99 = [Vec::new(), Vec::new()];
    for round in 0..=rounds {
        for (s, (_, data)) in sides.iter().enumerate() {
            let dur = Duration::from_secs(seconds);
            let t = Instant::now();
            let tasks = (0..concurrency).map(|_| {
                let (b, data, snap, inst) = (b.clone(), data.clone(), snap.clone(), inst.clone());
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while t.elapsed() < dur {
                        session(&b, &data, &snap, &inst).await?;
                        n += 1;
                    }
                    anyhow::Ok(n)
                })
            });
            let mut total = 0;
            for h in futures::future::join_all(tasks).await {
                total += h??;
            }
            let per_s = total as f64 / t.elapsed().as_secs_f64();
            let mut lat = Vec::with_capacity(serial);
            for _ in 0..serial {
                let t = Instant::now();
                session(&b, data, &snap, &inst).await?;
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            lat.sort_by(|a, b| a.total_cmp(b));
            if round > 0 {
                // Round 0 warms up both sides.
                rate[s].push(per_s);
                p50[s].push(percentile(&lat, 0.5));
                p99[s].push(percentile(&lat, 0.99));
            }
        }
    }
    let ratio = |v: &[Vec<f64>; 2]| median(v[1].iter().zip(&v[0]).map(|(a, o)| a / o).collect());
    let (r_rate, r_p50) = (ratio(&rate), ratio(&p50));
    println!(
        "durability: two-phase writes of 32 blocks, {concurrency} concurrent, {rounds} rounds of {seconds} s: off {:.0}/s, \
         replica_ack {:.0}/s ({:.2}x); serial session p50 off {:.3} ms, replica_ack {:.3} ms ({:.2}x), p99 {:.3} / {:.3} ms",
        median(rate[0].clone()),
        median(rate[1].clone()),
        r_rate,
        median(p50[0].clone()),
        median(p50[1].clone()),
        r_p50,
        median(p99[0].clone()),
        median(p99[1].clone())
    );
    let rec = serde_json::json!({"bench": "durability", "concurrency": concurrency, "seconds": seconds, "rounds": rounds,
        "off_sessions_per_s": median(rate[0].clone()), "replica_ack_sessions_per_s": median(rate[1].clone()),
        "rate_ratio": r_rate, "off_p50_ms": median(p50[0].clone()), "replica_ack_p50_ms": median(p50[1].clone()),
        "p50_ratio": r_p50, "off_p99_ms": median(p99[0].clone()), "replica_ack_p99_ms": median(p99[1].clone())});
    b.cleanup().await?;
    Ok(rec)
}
