//! `kvcm-bench read-cpu` and `hmget-baseline`: Valkey's CPU per 128-block prefix read (from `INFO
//! commandstats`), and what a plain HMGET of the same shape costs with no kvcm involved.

use crate::{Bench, Result, command_stat};
use kvcm_core::mask::BlockMask;
use kvcm_core::store::get_cache_location::QueryType;
use kvcm_core::wire::admin::{CacheConfig, ReclaimPolicy};
use std::time::Instant;

/// `read-cpu` (flags documented in `Cmd::ReadCpu`).
pub async fn read_cpu(valkey: &str, blocks: usize, reads: usize, lfu: bool, adaptive: bool) -> Result<()> {
    let mut cache_config = CacheConfig::default();
    if lfu {
        cache_config.reclaim_strategy.reclaim_policy = ReclaimPolicy::POLICY_LFU;
    }
    if adaptive {
        cache_config.reclaim_strategy.reclaim_policy = ReclaimPolicy::POLICY_ADAPTIVE;
    }
    let b = Bench::with_group(valkey, 1, cache_config).await?;
    let prompts = b.fill(blocks.div_ceil(128), 128, 1024).await?;
    let snap = b.registry.snapshot();
    let inst = b.registry.instance(&b.instance).await?;
    let mut node = b.node().await?;
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut node).await?;
    let t = Instant::now();
    for i in 0..reads {
        let keys = &prompts[i % prompts.len()];
        let (locs, _) = b
            .data
            .get_cache_location(&snap, &inst, QueryType::QT_PREFIX_MATCH, keys, &BlockMask::Offset(0), 0, &[])
            .await?;
        anyhow::ensure!(locs.len() == 128, "prefix read matched {} blocks", locs.len());
    }
    let elapsed = t.elapsed();
    // Let the spawned recency updates land before reading the stats.
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    while command_stat(&mut node, "zadd").await?.0 < reads as f64 && Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (hc, hu) = command_stat(&mut node, "hmget").await?;
    let (zc, zu) = command_stat(&mut node, "zadd").await?;
    // Read counts: kept only where the group reclaims by LFU (--lfu).
    // Hits: where the group reclaims by `adaptive` (--adaptive), a read that ends at a
    // leaf reads its last access (ZSCORE); the frontend counts the hits of each 100 ms in
    // one pipeline (an HINCRBY per cell hit and one for the events), every read here a hit.
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    let adaptive_key = b.data.keys(&b.instance).adaptive.clone();
    while adaptive && Instant::now() < deadline {
        let events: Option<u64> = redis::cmd("HGET").arg(&adaptive_key).arg("events").query_async(&mut node).await?;
        if events.unwrap_or(0) >= reads as u64 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (ic, iu) = command_stat(&mut node, "hincrby").await?;
    let (sc, su) = command_stat(&mut node, "zscore").await?;
    // Side by side on the same hash: the same HMGETs sent raw (no kvcm, no bookkeeping).
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut node).await?;
    let blocks_key = b.data.keys(&b.instance).blocks.clone();
    for i in 0..reads {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&blocks_key);
        for k in &prompts[i % prompts.len()] {
            cmd.arg(&k.to_be_bytes()[..]);
        }
        let _: Vec<Option<Vec<u8>>> = cmd.query_async(&mut node).await?;
    }
    let (rc, ru) = command_stat(&mut node, "hmget").await?;
    println!("read-cpu: the same {reads} HMGETs sent raw: {:.2} us/call", ru / rc.max(1.0));
    println!(
        "read-cpu: {reads} prefix reads of 128 blocks: HMGET {:.2} us/call ({hc} calls), ZADD {:.2} us/call ({zc} calls), \
         HINCRBY {:.2} us/call ({ic} calls), ZSCORE {:.2} us/call ({sc} calls); Valkey CPU per read {:.2} us; \
         client-side {:.0} reads/s serial",
        hu / hc.max(1.0),
        zu / zc.max(1.0),
        iu / ic.max(1.0),
        su / sc.max(1.0),
        (hu + zu + iu + su) / reads as f64,
        reads as f64 / elapsed.as_secs_f64()
    );
    b.cleanup().await?;
    Ok(())
}

/// `hmget-baseline` (flags documented in `Cmd::HmgetBaseline`).
pub async fn hmget_baseline(valkey: &str, fields: usize, value_bytes: usize, reads: usize) -> Result<()> {
    let b = Bench::new(valkey, 1).await?;
    let key = format!("{}:baseline:{{i:{}}}", b.ns, b.instance);
    let mut node = b.node().await?;
    let names: Vec<[u8; 8]> = (0..fields).map(|_| fastrand::i64(..).to_be_bytes()).collect();
    let value = vec![b'x'; value_bytes];
    for chunk in names.chunks(1000) {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(&key);
        for n in chunk {
            cmd.arg(&n[..]).arg(&value);
        }
        let _: () = cmd.query_async(&mut node).await?;
    }
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut node).await?;
    for i in 0..reads {
        let start = (i * 128) % (fields - 128);
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&key);
        for n in &names[start..start + 128] {
            cmd.arg(&n[..]);
        }
        let _: Vec<Option<Vec<u8>>> = cmd.query_async(&mut node).await?;
    }
    let (hc, hu) = command_stat(&mut node, "hmget").await?;
    println!(
        "hmget-baseline: {fields} fields of {value_bytes}-byte values: HMGET of 128 fields {:.2} us/call ({hc} calls)",
        hu / hc.max(1.0)
    );
    let _: () = redis::cmd("UNLINK").arg(&key).query_async(&mut node).await?;
    b.cleanup().await?;
    Ok(())
}
