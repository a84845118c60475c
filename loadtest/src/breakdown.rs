//! `kvcm-bench breakdown`: where a serial prefix read's time goes, layer by layer, in one run.
//!
//! For each size, serial reads of the same N-block chain (all hits), through four layers that
//! each add one thing to the one before:
//!
//! 1. `hmget-node`: a plain HMGET of the N fields on a direct connection to the primary that
//!    holds the instance's slot (the Valkey round trip and nothing else);
//! 2. `hmget-cluster`: the same HMGET through the cluster client kvcm uses (routing, its task
//!    hops);
//! 3. `data-plane`: `DataPlane::get_cache_location_json`, what a frontend runs per request (the
//!    HMGET, record decoding, rendering the locations to JSON, recency bookkeeping);
//! 4. `http`: `getCacheLocation` through an in-process kvcm-api over one kept-alive loopback
//!    connection (request parsing, auth, limits, metrics, the reply, a lean HTTP/1.1 client:
//!    `h1`).
//!
//! Rounds alternate the layers so machine noise hits all of them; the printed figures are
//! medians over rounds of each layer's p50 and p99.

use crate::{Bench, percentile, prefix_read, record, serial_requests, serve};
use anyhow::Result;
use kvcm_core::keys::block_field;
use kvcm_core::mask::BlockMask;
use kvcm_core::store::get_cache_location::QueryType;
use std::time::Instant;

const LAYERS: [&str; 4] = ["hmget-node", "hmget-cluster", "data-plane", "http"];

/// Runs the breakdown; prints one line per size and layer.
pub async fn run(
    valkey: &str,
    sizes: &[usize],
    layers: &[String],
    rounds: usize,
    requests: usize,
    rec: &Option<std::path::PathBuf>,
) -> Result<()> {
    anyhow::ensure!(rounds >= 1, "--rounds must be at least 1 (a warm-up round comes first)");
    for l in layers {
        anyhow::ensure!(LAYERS.contains(&l.as_str()), "unknown layer {l:?} (layers: {})", LAYERS.join(", "));
    }
    let wanted = |layer: usize| layers.is_empty() || layers.iter().any(|l| l == LAYERS[layer]);
    let longest = sizes.iter().copied().max().unwrap_or(0);
    let b = Bench::new(valkey, 1).await?;
    let keys = b.write_chain(longest).await?;
    let (addr, stop_tx, serving) = serve(valkey, &b.ns, longest, |_| {}).await?;
    let mut http = crate::h1::H1::connect(addr).await?;
    let mut node = b.node().await?;
    let mut cluster = b.conn.clone();
    let snap = b.registry.snapshot();
    let inst = b.registry.instance(&b.instance).await?;
    let blocks_key = b.data.keys(&b.instance).blocks.clone();

    for &n in sizes {
        let hmget = {
            let mut cmd = redis::cmd("HMGET");
            cmd.arg(&blocks_key);
            for k in &keys[..n] {
                cmd.arg(&block_field(*k)[..]);
            }
            cmd
        };
        let body = prefix_read(&b.instance, &keys[..n]);
        let count = serial_requests(n, requests);
        // per layer: p50s and p99s over rounds
        let mut p50s: [Vec<f64>; 4] = Default::default();
        let mut p99s: [Vec<f64>; 4] = Default::default();
        let mut out = Vec::new();
        for round in 0..=rounds {
            for step in 0..LAYERS.len() {
                // Rotate which layer goes first.
                let layer = (step + round) % LAYERS.len();
                if !wanted(layer) {
                    continue;
                }
                let mut lat = Vec::with_capacity(count);
                for _ in 0..count {
                    let t = Instant::now();
                    match layer {
                        0 => {
                            let v: Vec<Option<Vec<u8>>> = hmget.query_async(&mut node).await?;
                            anyhow::ensure!(v.len() == n && v.iter().all(Option::is_some), "HMGET missed");
                        }
                        1 => {
                            let v: Vec<Option<Vec<u8>>> = hmget.query_async(&mut cluster).await?;
                            anyhow::ensure!(v.len() == n && v.iter().all(Option::is_some), "HMGET missed");
                        }
                        2 => {
                            out.clear();
                            let stats = b
                                .data
                                .get_cache_location_json(
                                    &snap,
                                    &inst,
                                    QueryType::QT_PREFIX_MATCH,
                                    &keys[..n],
                                    &BlockMask::Offset(0),
                                    0,
                                    &[],
                                    &mut out,
                                )
                                .await?;
                            anyhow::ensure!(stats.matched == n, "data plane matched {} of {n}", stats.matched);
                        }
                        _ => {
                            let reply = http.post("/api/getCacheLocation", body.clone()).await?;
                            let ms = t.elapsed().as_secs_f64() * 1000.0;
                            anyhow::ensure!(crate::rate::reply_ok(&reply), "{}", String::from_utf8_lossy(&reply));
                            if lat.is_empty() {
                                // Once per round, outside the timing: every block matched.
                                let v: serde_json::Value = serde_json::from_slice(&reply)?;
                                let matched = v["locations"].as_array().map(Vec::len);
                                anyhow::ensure!(matched == Some(n), "kvcm matched {matched:?} of {n} blocks");
                            }
                            lat.push(ms);
                            continue;
                        }
                    }
                    lat.push(t.elapsed().as_secs_f64() * 1000.0);
                }
                if round == 0 {
                    continue; // warm-up
                }
                lat.sort_by(|a, b| a.total_cmp(b));
                p50s[layer].push(percentile(&lat, 0.5));
                p99s[layer].push(percentile(&lat, 0.99));
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            percentile(v, 0.5)
        };
        let mut prev = 0.0;
        for (i, layer) in LAYERS.iter().enumerate() {
            if !wanted(i) {
                continue;
            }
            let (p50, p99) = (median(&mut p50s[i]), median(&mut p99s[i]));
            println!(
                "breakdown: {n} blocks, {layer:<13} p50 {p50:.3} ms (+{:.3}), p99 {p99:.3} ms  [{rounds} rounds of {count}]",
                p50 - prev
            );
            prev = p50;
            record(
                rec,
                serde_json::json!({"bench": "breakdown", "blocks": n, "layer": layer, "rounds": rounds,
                    "requests": count, "p50_ms": p50, "p99_ms": p99}),
            )?;
        }
    }
    let _ = stop_tx.send(());
    serving.await??;
    b.cleanup().await?;
    Ok(())
}
