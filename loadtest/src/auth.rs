//! `kvcm-bench auth`: what authentication costs on the request path (DESIGN §7: auth on costs at
//! most 5% of throughput). Two frontends over the same warm instance in one process — one with
//! `meta_auth` off, one with it on — and 128-block prefix reads through HTTP in alternating
//! rounds: anonymous (auth off), an engine API key, and an engine account (`Bearer user:password`,
//! Argon2-verified once, then cached). Rounds alternate so that machine noise lands on every
//! mode alike; the ratios reported are medians over the rounds.

use crate::{Bench, median, serve};
use anyhow::Result;
use kvcm_core::wire::admin::AccountRole;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Reads/s of `concurrency` loops of 128-block prefix reads against `base` for `dur`.
async fn http_reads(
    base: &str,
    instance: &str,
    prompts: &Arc<Vec<Vec<i64>>>,
    concurrency: usize,
    dur: Duration,
    auth: Option<&str>,
) -> Result<f64> {
    let client = reqwest::Client::new();
    let t = Instant::now();
    let tasks = (0..concurrency).map(|i| {
        let (client, prompts, url) = (client.clone(), prompts.clone(), format!("{base}/api/getCacheLocation"));
        let (instance, auth) = (instance.to_string(), auth.map(String::from));
        tokio::spawn(async move {
            let mut n = 0u64;
            while t.elapsed() < dur {
                let keys = &prompts[(i + n as usize * concurrency) % prompts.len()];
                let mut req = client.post(&url).body(crate::prefix_read(&instance, keys));
                if let Some(a) = &auth {
                    req = req.header("authorization", a);
                }
                let resp = req.send().await?;
                anyhow::ensure!(resp.status().is_success(), "HTTP {}", resp.status());
                resp.bytes().await?;
                n += 1;
            }
            anyhow::Ok(n)
        })
    });
    let mut total = 0;
    for h in futures::future::join_all(tasks).await {
        total += h??;
    }
    Ok(total as f64 / t.elapsed().as_secs_f64())
}

pub async fn run(valkey: &str, concurrency: usize, seconds: u64, rounds: usize) -> Result<()> {
    let b = Bench::new(valkey, 1).await?;
    let prompts = Arc::new(b.fill(1024, 128, 1024).await?);
    let groups = vec!["g".to_string()];
    let (_, token) = b.registry.create_api_key("bench", AccountRole::ROLE_USER, &groups).await?;
    b.registry.add_account("bench-admin", "bench-admin-pass", AccountRole::ROLE_ADMIN, &[], 8).await?;
    b.registry.add_account("bench-engine", "bench-engine-pass", AccountRole::ROLE_USER, &groups, 8).await?;
    let (off, stop_off, serving_off) = serve(valkey, &b.ns, 1 << 16, |_| {}).await?;
    let (on, stop_on, serving_on) = serve(valkey, &b.ns, 1 << 16, |c| c.meta_auth = true).await?;
    let dur = Duration::from_secs(seconds);
    let key = format!("Bearer {token}");
    let modes: [(&str, String, Option<&str>); 3] = [
        ("auth off", format!("http://{off}"), None),
        ("API key", format!("http://{on}"), Some(&key)),
        ("account", format!("http://{on}"), Some("Bearer bench-engine:bench-engine-pass")),
    ];
    // Warm both servers' connections and the account's verification cache.
    for (_, base, auth) in &modes {
        http_reads(base, &b.instance, &prompts, 4, Duration::from_millis(300), *auth).await?;
    }
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    for round in 0..rounds {
        // Rotate the order each round, so no mode always runs first.
        for k in 0..modes.len() {
            let m = (round + k) % modes.len();
            let (_, base, auth) = &modes[m];
            rates[m].push(http_reads(base, &b.instance, &prompts, concurrency, dur, *auth).await?);
        }
        println!(
            "auth round {}: off {:.0}/s, API key {:.0}/s, account {:.0}/s",
            round + 1,
            rates[0][round],
            rates[1][round],
            rates[2][round]
        );
    }
    let ratio = |m: usize| median((0..rounds).map(|r| rates[m][r] / rates[0][r]).collect());
    println!(
        "auth: 128-block prefix reads, {concurrency} concurrent, {rounds} rounds of {seconds} s: median off {:.0}/s, \
         API key {:.0}/s ({:.1}% of off), account {:.0}/s ({:.1}% of off)",
        median(rates[0].clone()),
        median(rates[1].clone()),
        100.0 * ratio(1),
        median(rates[2].clone()),
        100.0 * ratio(2)
    );
    let _ = (stop_off.send(()), stop_on.send(()));
    serving_off.await??;
    serving_on.await??;
    b.cleanup().await
}
