//! `kvcm-bench peer`: kvcm beside Mooncake's store master, in one run on one machine.
//!
//! The question: how does kvcm's serial "how much of this prefix is cached" compare with the
//! closest call of a peer metadata service? Mooncake side: `batch_is_exist` of N keys through
//! Mooncake's Python client to a running `mooncake_master` (loadtest/peer/mooncake_peer.py,
//! driven over stdin/stdout; it times each call itself). kvcm side: `getCacheLocation`
//! `QT_PREFIX_MATCH` of N blocks (all hits) through an in-process kvcm-api — the real router and
//! HTTP server on a loopback port, as in `latency` — over one kept-alive HTTP connection
//! (a lean hyper client, `h1`), JSON both ways, a Valkey hop (HMGET of N fields + recency bookkeeping)
//! behind it, and a location with a URI per block in the reply.
//!
//! Rounds alternate the two sides (and which goes first) so that machine noise hits both; each
//! round yields p50 and p99 per side and size, and the printed figures are medians over rounds of
//! those percentiles and of their per-round ratios (kvcm / Mooncake).

use crate::{Bench, median, percentile, prefix_read, serve};
use anyhow::{Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

/// Where the Mooncake side runs.
pub struct PeerArgs {
    pub sizes: Vec<usize>,
    pub rounds: usize,
    pub requests: usize,
    /// `host:port` of a running mooncake_master's RPC.
    pub mooncake_master: String,
    /// The Python interpreter (with Mooncake's folder on PYTHONPATH / LD_LIBRARY_PATH).
    pub python: String,
    pub script: String,
}

/// The Python client process.
struct Mooncake {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Mooncake {
    fn start(a: &PeerArgs, keys: usize) -> Result<Mooncake> {
        let mut child = Command::new(&a.python)
            .args([&a.script, "--master", &a.mooncake_master, "--keys", &keys.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // Errors show on our stderr; glog's info lines of the Mooncake client do not.
            .env("GLOG_minloglevel", "2")
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {} {}", a.python, a.script))?;
        let stdin = child.stdin.take().expect("piped");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        anyhow::ensure!(
            line.trim() == "ready",
            "the Mooncake client did not start (run it by hand to see why): {line:?}"
        );
        Ok(Mooncake { child, stdin, stdout })
    }

    /// `count` serial batch_is_exist of `n` keys; their latencies in ms.
    fn run(&mut self, n: usize, count: usize) -> Result<Vec<f64>> {
        writeln!(self.stdin, "{n} {count}")?;
        self.stdin.flush()?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        let lat: Vec<f64> = line.split_whitespace().map(str::parse).collect::<Result<_, _>>()?;
        anyhow::ensure!(lat.len() == count, "the Mooncake client answered {} latencies, not {count}", lat.len());
        Ok(lat)
    }
}

impl Drop for Mooncake {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }
}

/// p50 and p99 of samples.
fn p50_p99(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (percentile(&v, 0.5), percentile(&v, 0.99))
}

/// Runs the comparison; one JSON object per size for the record.
pub async fn run(valkey: &str, a: &PeerArgs) -> Result<Vec<serde_json::Value>> {
    let longest = *a.sizes.iter().max().context("--sizes is empty")?;
    let b = Bench::new(valkey, 1).await?;
    let keys = b.write_chain(longest).await?;
    let (addr, stop_tx, serving) = serve(valkey, &b.ns, longest, |_| {}).await?;
    // One kept-alive connection, as an engine's connector holds one.
    let http = tokio::sync::Mutex::new(crate::h1::H1::connect(addr).await?);
    let mut mc = Mooncake::start(a, longest)?;

    let mut out = Vec::new();
    // per size: (kvcm p50s, kvcm p99s, mooncake p50s, mooncake p99s, ratio p50s, ratio p99s)
    let mut per_size: Vec<[Vec<f64>; 6]> = a.sizes.iter().map(|_| Default::default()).collect();
    for round in 0..a.rounds + 1 {
        for (si, &n) in a.sizes.iter().enumerate() {
            let body = prefix_read(&b.instance, &keys[..n]);
            let kvcm_side = async || -> Result<Vec<f64>> {
                let mut lat = Vec::with_capacity(a.requests);
                for i in 0..a.requests {
                    let t = Instant::now();
                    let resp = http.lock().await.post("/api/getCacheLocation", body.clone()).await?;
                    lat.push(t.elapsed().as_secs_f64() * 1000.0);
                    if i == 0 {
                        let v: serde_json::Value = serde_json::from_slice(&resp)?;
                        let matched = v["locations"].as_array().map(Vec::len);
                        anyhow::ensure!(matched == Some(n), "kvcm matched {matched:?} of {n} blocks");
                    }
                }
                Ok(lat)
            };
            let (k, m) = if round % 2 == 0 {
                let k = kvcm_side().await?;
                (k, mc.run(n, a.requests)?)
            } else {
                let m = mc.run(n, a.requests)?;
                (kvcm_side().await?, m)
            };
            if round == 0 {
                continue; // warm-up: connections, caches, the Python client's first calls
            }
            let ((k50, k99), (m50, m99)) = (p50_p99(k), p50_p99(m));
            let s = &mut per_size[si];
            for (v, x) in s.iter_mut().zip([k50, k99, m50, m99, k50 / m50, k99 / m99]) {
                v.push(x);
            }
        }
    }
    for (si, &n) in a.sizes.iter().enumerate() {
        let [k50, k99, m50, m99, r50, r99] = per_size[si].clone().map(median);
        println!(
            "peer: {n} keys, {} rounds of {} serial calls each, medians: kvcm getCacheLocation p50 {k50:.3} ms p99 {k99:.3} ms; \
             Mooncake batch_is_exist p50 {m50:.3} ms p99 {m99:.3} ms; kvcm/Mooncake p50 {r50:.2}×, p99 {r99:.2}×",
            a.rounds, a.requests
        );
        out.push(serde_json::json!({
            "bench": "peer", "keys": n, "rounds": a.rounds, "requests": a.requests,
            "kvcm_p50_ms": k50, "kvcm_p99_ms": k99, "mooncake_p50_ms": m50, "mooncake_p99_ms": m99,
            "ratio_p50": r50, "ratio_p99": r99,
        }));
    }
    drop(mc);
    let _ = stop_tx.send(());
    serving.await??;
    b.cleanup().await?;
    Ok(out)
}
