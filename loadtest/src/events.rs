//! `kvcm-bench events`: engine-reported cache tiers through an in-process kvcm-api over HTTP,
//! the figures Tair KVCM publishes for the same RPCs (docs/design/report_event_performance.md in
//! alibaba/tair-kvcache): one ReportEvent carrying N BLOCK_ADDs (Tair: 20k in 171.5 ms create,
//! 202.3 ms update) and serial GetHostCacheState of N blocks (Tair p50 0.67 / 1.78 / 6.71 /
//! 25.5 ms at 100 / 1k / 5k / 20k in its §5.3 run, 0.51 / 1.12 / 3.10 / 10.28 ms in its latest).
//! Also Valkey memory per reported block (one spec, a Tair-style URI), and one ReportEvent of N
//! adds of blocks the other hosts hold (an engine reporting a shared prefix).

use crate::{Bench, median, percentile, record, serve};
use anyhow::Result;
use serde_json::{Value, json};
use std::time::Instant;

fn add_events(keys: &[i64], host: &str) -> Vec<Value> {
    let mut events = vec![json!({"event_type": "EVENT_HEARTBEAT", "heartbeat": {}})];
    events.extend(keys.iter().map(|k| {
        json!({"event_type": "EVENT_BLOCK_ADD", "block_add": {"block_key": k.to_string(), "medium": "gpu",
            "specs": [{"name": "tp0", "uri": format!("event_report://{host}/gpu/{k}?size=4096")}]}})
    }));
    events
}

fn report(instance: &str, host: &str, tier: &str, events: Vec<Value>) -> bytes::Bytes {
    json!({"instance_id": instance, "host_ip_port": host, "storage_type": tier, "events": events}).to_string().into()
}

fn ok(resp: &[u8]) -> Result<Value> {
    let v: Value = serde_json::from_slice(resp)?;
    anyhow::ensure!(
        v["header"]["status"]["code"] == "OK",
        "reply {}",
        String::from_utf8_lossy(&resp[..resp.len().min(400)])
    );
    Ok(v)
}

/// One fresh host's reportEvent of adds of `keys`, timed twice (the first time, then the same
/// request again), after an untimed first report — the engine has registered and reported
/// before (its reporter and generation exist), as an engine adding blocks in batches has — and
/// before the host goes down.
async fn add_twice(http: &mut crate::h1::H1, instance: &str, host: &str, keys: &[i64]) -> Result<(f64, f64)> {
    let hello = report(instance, host, "ST_EVENT_REPORT_L1P5", add_events(&[1], host));
    ok(&http.post("/api/reportEvent", hello).await?)?;
    let body = report(instance, host, "ST_EVENT_REPORT_L1P5", add_events(keys, host));
    let mut times = [0.0; 2];
    for time in &mut times {
        let t = Instant::now();
        let resp = http.post("/api/reportEvent", body.clone()).await?;
        *time = t.elapsed().as_secs_f64() * 1000.0;
        ok(&resp)?;
    }
    let down =
        report(instance, host, "ST_EVENT_REPORT_L1P5", vec![json!({"event_type": "EVENT_HOST_DOWN", "host_down": {}})]);
    ok(&http.post("/api/reportEvent", down).await?)?;
    Ok((times[0], times[1]))
}

pub async fn run(
    valkey: &str,
    out: &Option<std::path::PathBuf>,
    sizes: &[usize],
    rounds: usize,
    requests: usize,
    hosts: usize,
) -> Result<()> {
    let b = Bench::new(valkey, 1).await?;
    let longest = *sizes.iter().max().unwrap_or(&0);
    let (addr, stop_tx, serving) = serve(valkey, &b.ns, longest + 1, |_| {}).await?;
    let mut http = crate::h1::H1::connect(addr).await?;
    let chain: Vec<i64> = (0..longest as i64).map(|i| 1_000_000 + i).collect();

    // Memory: one host reporting the whole chain (one spec each).
    let mut node = b.node().await?;
    let before = crate::info_field(&mut node, "memory", "used_memory").await?;
    let host = "mem:9600";
    for part in chain.chunks(2000) {
        ok(&http
            .post("/api/reportEvent", report(&b.instance, host, "ST_EVENT_REPORT_L1P5", add_events(part, host)))
            .await?)?;
    }
    let after = crate::info_field(&mut node, "memory", "used_memory").await?;
    let per_block = (after - before) / longest as f64;
    println!(
        "events: Valkey memory per reported block (one host, one spec, a {}-byte URI): {per_block:.1} bytes",
        format!("event_report://{host}/gpu/{}?size=4096", chain[0]).len()
    );
    record(out, json!({"bench": "events_memory", "blocks": longest, "bytes_per_block": per_block}))?;

    // One request of N adds: new blocks (a fresh host each round), then the same again.
    for &n in sizes {
        let (mut create, mut update) = (Vec::new(), Vec::new());
        for round in 0..rounds + 1 {
            // Blocks nobody reported yet, for a true create.
            let keys: Vec<i64> =
                (0..n as i64).map(|i| 100_000_000 * (1 + round as i64) + 1_000_000 * n as i64 + i).collect();
            let host = format!("add-{n}-{round}:9600");
            let (c, u) = add_twice(&mut http, &b.instance, &host, &keys).await?;
            if round > 0 {
                // round 0 warms up
                create.push(c);
                update.push(u);
            }
        }
        let (c, u) = (median(create), median(update));
        println!("events: one reportEvent of {n} BLOCK_ADDs: create {c:.2} ms, update {u:.2} ms (medians of {rounds})");
        record(out, json!({"bench": "events_add", "blocks": n, "rounds": rounds, "create_ms": c, "update_ms": u}))?;
    }

    // getHostCacheState: `hosts` reporters (half L1P5, half L2) each holding the whole chain.
    for h in 0..hosts {
        let host = format!("host-{h}:9600");
        let tier = if h % 2 == 0 { "ST_EVENT_REPORT_L1P5" } else { "ST_EVENT_REPORT_L2" };
        for part in chain.chunks(2000) {
            ok(&http.post("/api/reportEvent", report(&b.instance, &host, tier, add_events(part, &host))).await?)?;
        }
    }
    for &n in sizes {
        let body: bytes::Bytes =
            json!({"instance_id": b.instance, "query_type": "QT_PREFIX_MATCH", "block_cache_keys": chain[..n]})
                .to_string()
                .into();
        let count = crate::serial_requests(n, requests);
        let mut lat = Vec::with_capacity(count);
        for i in 0..count + 20 {
            let t = Instant::now();
            let resp = http.post("/api/getHostCacheState", body.clone()).await?;
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            if i == 0 {
                let v = ok(&resp)?;
                let listed = v["hosts"].as_array().map_or(0, Vec::len);
                anyhow::ensure!(listed == hosts + 1, "{listed} hosts listed, expected {}", hosts + 1);
                anyhow::ensure!(
                    v["hosts"][0]["local"].as_str() == Some(n.to_string().as_str()),
                    "local {}",
                    v["hosts"][0]["local"]
                );
            }
            if i >= 20 {
                lat.push(ms);
            }
        }
        lat.sort_by(|a, b| a.total_cmp(b));
        let (p50, p99) = (percentile(&lat, 0.5), percentile(&lat, 0.99));
        println!(
            "events: getHostCacheState of {n} blocks, {} hosts, {count} serial requests: p50 {p50:.3} ms, p99 {p99:.3} ms",
            hosts + 1
        );
        record(
            out,
            json!({"bench": "events_host_state", "blocks": n, "hosts": hosts + 1, "requests": count, "p50_ms": p50, "p99_ms": p99}),
        )?;
    }
    // One request of N adds of blocks the other hosts hold already (an engine reporting a shared
    // prefix), then the same again (a re-add): a fresh host each round, gone again after it.
    for &n in sizes {
        let (mut shared, mut shared_again) = (Vec::new(), Vec::new());
        for round in 0..rounds + 1 {
            let host = format!("shared-{n}-{round}:9600");
            let (m, again) = add_twice(&mut http, &b.instance, &host, &chain[..n]).await?;
            if round > 0 {
                shared.push(m);
                shared_again.push(again);
            }
        }
        let (m, again) = (median(shared), median(shared_again));
        println!(
            "events: one reportEvent of {n} BLOCK_ADDs of blocks {} other hosts hold: {m:.2} ms, the same again {again:.2} ms (medians of {rounds})",
            hosts + 1
        );
        record(
            out,
            json!({"bench": "events_add_shared", "blocks": n, "holders": hosts + 1, "rounds": rounds, "ms": m, "again_ms": again}),
        )?;
    }
    let _ = stop_tx.send(());
    serving.await??;
    b.data.drop_engine_reports(&b.instance).await?;
    b.cleanup().await?;
    Ok(())
}
