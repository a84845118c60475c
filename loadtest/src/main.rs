//! `kvcm-bench`: measures kvcm against a real Valkey cluster. Each subcommand answers one
//! question and prints one result line per measurement (see loadtest/README.md).
//!
//! Every run works in a fresh namespace and removes its keys at the end, so it can run against
//! a shared development cluster.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use kvcm_core::registry::Registry;
use kvcm_core::store::{DataPlane, Limits};
use kvcm_core::valkey::Access;
use kvcm_core::wire::admin::{CacheConfig, InstanceGroup, NfsStorageSpec, StorageConfig};
use kvcm_core::wire::{LocationSpecInfo, ModelDeployment, RegisterInstanceRequest};
use redis::cluster_async::ClusterConnection;
use std::sync::Arc;
use std::time::Instant;

// kvcm-api's allocator: its router and server run in this process.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod auth;
mod breakdown;
mod durability;
mod events;
mod h1;
mod peer;
mod rate;
mod read_cpu;
mod throughput;

#[derive(Parser)]
#[command(about = "kvcm benchmarks against a real Valkey cluster")]
struct Args {
    /// Valkey cluster seed.
    #[arg(long, default_value = "redis://127.0.0.1:7001", global = true)]
    valkey: String,
    /// Append each result as one JSON line to this file (`make bench` builds its summary from it).
    #[arg(long, global = true)]
    record: Option<std::path::PathBuf>,
    /// Run the whole benchmark on one single-threaded runtime, as kvcm-api's serving threads
    /// run reads (serial subcommands always do; the others generate load on every core unless
    /// this is given).
    #[arg(long, global = true)]
    single_threaded: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Valkey memory per cached block: writes --blocks blocks (prompts of 128 chained blocks) and
    /// reads the used_memory delta of the node that holds the instance.
    Memory {
        #[arg(long, default_value_t = 1_000_000)]
        blocks: usize,
        /// Specs per block (tp0..tpN-1).
        #[arg(long, default_value_t = 1)]
        specs: usize,
    },
    /// Valkey CPU per 128-block prefix read (HMGET + recency bookkeeping) from INFO commandstats.
    ReadCpu {
        #[arg(long, default_value_t = 131_072)]
        blocks: usize,
        #[arg(long, default_value_t = 20_000)]
        reads: usize,
        /// The instance's group reclaims by LFU, so that reads also keep LFU's read counts
        /// (one `HINCRBY` per read).
        #[arg(long)]
        lfu: bool,
        /// The instance's group reclaims by `adaptive`, so that a read ending at a leaf also
        /// counts a hit (a `ZSCORE`, and the hits of each 100 ms in one pipeline of `HINCRBY`s).
        #[arg(long, conflicts_with = "lfu")]
        adaptive: bool,
    },
    /// Baseline for read-cpu, side by side: a plain HMGET of 128 fields from a hash of --fields
    /// 8-byte fields with --value-bytes values, no kvcm involved.
    HmgetBaseline {
        #[arg(long, default_value_t = 131_072)]
        fields: usize,
        #[arg(long, default_value_t = 25)]
        value_bytes: usize,
        #[arg(long, default_value_t = 20_000)]
        reads: usize,
    },
    /// Deletion throughput: --blocks blocks with real files are removed, then 1 and 2 in-process
    /// workers drain the deletion stream (files unlinked, metadata released).
    Deletion {
        #[arg(long, default_value_t = 50_000)]
        blocks: usize,
    },
    /// Cost of one reclaim round: --blocks blocks, a quota whose watermark is exceeded by
    /// --over-percent, one reclaimer round evicting back under it.
    Reclaim {
        #[arg(long, default_value_t = 1_000_000)]
        blocks: usize,
        #[arg(long, default_value_t = 10)]
        over_percent: u64,
    },
    /// Throughput, side by side in one run: 128-block prefix reads through HTTP vs the same reads
    /// called straight on the data plane (DESIGN §7: HTTP ≥ 60% of direct), and two-phase writes
    /// of 32 new blocks per session through HTTP (target ≥ 5k sessions/s).
    Throughput(throughput::Params),
    /// Cost of `durability = "replica_ack"`, side by side in one run: two-phase writes of 32
    /// blocks on the data plane with `off` and with `replica_ack` (WAIT for one replica),
    /// alternating rounds; sessions/s at --concurrency and serial session latency. Needs a
    /// cluster with replicas (`infra/valkey-cluster.sh start --replicas 2`).
    Durability {
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        #[arg(long, default_value_t = 3)]
        seconds: u64,
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        #[arg(long, default_value_t = 300)]
        serial: usize,
    },
    /// Side by side with a peer: serial getCacheLocation QT_PREFIX_MATCH of N blocks through HTTP
    /// vs Mooncake store master's batch_is_exist of N keys through its Python client, alternating
    /// rounds (needs a running mooncake_master; `make bench` starts one).
    Peer {
        #[arg(long, value_delimiter = ',', default_value = "128,1024")]
        sizes: Vec<usize>,
        /// Measured rounds (one more, first, warms up).
        #[arg(long, default_value_t = 7)]
        rounds: usize,
        /// Serial calls per side, size and round.
        #[arg(long, default_value_t = 200)]
        requests: usize,
        /// The mooncake_master's RPC address.
        #[arg(long, default_value = "127.0.0.1:50051")]
        mooncake_master: String,
        /// Python with Mooncake's wheel folder on PYTHONPATH (and its libraries on LD_LIBRARY_PATH).
        #[arg(long, default_value = "python3")]
        python: String,
        #[arg(long, default_value = "loadtest/peer/mooncake_peer.py")]
        script: String,
    },
    /// What authentication costs: 128-block prefix reads through HTTP with meta auth off, with an
    /// engine API key and with an engine account, in alternating rounds (DESIGN §7: ≤ 5%).
    Auth {
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        #[arg(long, default_value_t = 3)]
        seconds: u64,
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// Where a serial prefix read's time goes: a raw HMGET on the node, the same through the
    /// cluster client, the data plane's read, and the read through HTTP, alternating rounds.
    Breakdown {
        #[arg(long, value_delimiter = ',', default_value = "128,1024,20000")]
        sizes: Vec<usize>,
        /// Only these layers (hmget-node, hmget-cluster, data-plane, http); all by default.
        #[arg(long, value_delimiter = ',')]
        layers: Vec<String>,
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        #[arg(long, default_value_t = 300)]
        requests: usize,
    },
    /// Serial prefix-match latency through a real HTTP frontend (p50 / p99).
    Latency {
        #[arg(long, value_delimiter = ',', default_value = "100,1000,5000,20000")]
        sizes: Vec<usize>,
        #[arg(long, default_value_t = 1000)]
        requests: usize,
    },
    /// Engine-reported cache tiers through HTTP, next to Tair KVCM's published figures: one
    /// reportEvent of N BLOCK_ADDs (new blocks, then the same again: an update), serial
    /// getHostCacheState of N blocks with --hosts reporters holding the chain, Valkey memory per
    /// reported block, and one reportEvent of N adds of blocks the other hosts hold.
    Events {
        #[arg(long, value_delimiter = ',', default_value = "100,1000,5000,20000")]
        sizes: Vec<usize>,
        /// Rounds of each BLOCK_ADD request (medians reported).
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Serial getHostCacheState requests per size (a quarter from 5,000 blocks up).
        #[arg(long, default_value_t = 400)]
        requests: usize,
        #[arg(long, default_value_t = 4)]
        hosts: usize,
    },
}

struct Bench {
    ns: String,
    conn: ClusterConnection,
    valkey: Access,
    registry: Arc<Registry>,
    data: DataPlane,
    instance: String,
}

/// Registers a bench instance in group `g` with `specs` location specs (tp0..).
async fn register(registry: &Registry, instance: &str, specs: usize) -> Result<()> {
    registry
        .register_instance(&RegisterInstanceRequest {
            instance_group: "g".into(),
            instance_id: instance.to_string(),
            block_size: 16,
            location_spec_infos: (0..specs)
                .map(|i| LocationSpecInfo { name: format!("tp{i}"), size: 1 << 20 })
                .collect(),
            model_deployment: Some(ModelDeployment {
                model_name: "m".into(),
                dtype: "bf16".into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await?;
    Ok(())
}

impl Bench {
    async fn new(valkey: &str, specs: usize) -> Result<Bench> {
        Self::with_group(valkey, specs, Default::default()).await
    }

    /// [`Self::new`] with the group's cache configuration (e.g. its reclaim policy).
    async fn with_group(valkey: &str, specs: usize, cache_config: CacheConfig) -> Result<Bench> {
        let ns = format!("bench{:08x}", fastrand::u32(..));
        let mut config = valkey_config(valkey)?;
        config.valkey_timeout_ms = 5000;
        let valkey = Access::from_config(&config)?;
        let conn = valkey.connect().await?;
        let registry = Registry::open(conn.clone(), &ns, Default::default()).await?;
        let storage = StorageConfig {
            global_unique_name: "files".into(),
            nfs: Some(NfsStorageSpec { root_path: "/tmp/kvcm-bench/".into(), key_count_per_file: 1 }),
            ..Default::default()
        };
        registry.add_storage(storage).await?;
        registry
            .create_group(InstanceGroup {
                name: "g".into(),
                storage_candidates: vec!["files".into()],
                cache_config,
                ..Default::default()
            })
            .await?;
        let instance = "bench-instance".to_string();
        register(&registry, &instance, specs).await?;
        let limits = Limits {
            max_keys_per_request: 1 << 20,
            write_timeout_default_s: 600,
            write_timeout_max_s: 600,
            usage_cache_ms: 60_000,
            ..Default::default()
        };
        let data = DataPlane::new(conn.clone(), &ns, limits);
        Ok(Bench { ns, conn, valkey, registry, data, instance })
    }

    /// Writes `prompts` prompts of `len` chained random blocks; returns the prompts' keys.
    async fn fill(&self, prompts: usize, len: usize, keep: usize) -> Result<Vec<Vec<i64>>> {
        let snap = self.registry.snapshot();
        let inst = self.registry.instance(&self.instance).await?;
        let mut kept = Vec::new();
        let chunks: Vec<usize> = (0..prompts).collect();
        for batch in chunks.chunks(16) {
            let futs = batch.iter().map(|_| {
                let keys: Vec<i64> = (0..len).map(|_| fastrand::i64(..)).collect();
                let (data, snap, inst) = (&self.data, &snap, &inst);
                async move {
                    let w = data.start_write_cache(snap, inst, &keys, &[], 0).await?;
                    let mask =
                        kvcm_core::wire::WireBlockMask { offset: Some(w.locations.len() as i32), bool_masks: None };
                    data.finish_write_cache(&inst.instance_id, &w.session_id, Some(&mask)).await?;
                    anyhow::Ok(keys)
                }
            });
            for keys in futures::future::try_join_all(futs).await? {
                if kept.len() < keep {
                    kept.push(keys);
                }
            }
        }
        Ok(kept)
    }

    /// A direct connection to the primary that holds the instance's slot.
    async fn node(&self) -> Result<redis::aio::MultiplexedConnection> {
        let keys = self.data.keys(&self.instance);
        let slot = kvcm_core::keys::slot(&keys.blocks);
        let mut c = self.conn.clone();
        let slots: redis::Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut c).await?;
        let redis::Value::Array(ranges) = slots else { anyhow::bail!("CLUSTER SLOTS reply") };
        for r in ranges {
            let redis::Value::Array(parts) = r else { continue };
            let (lo, hi): (u16, u16) =
                (redis::from_redis_value(parts[0].clone())?, redis::from_redis_value(parts[1].clone())?);
            if (lo..=hi).contains(&slot) {
                let redis::Value::Array(node) = parts[2].clone() else { continue };
                let host: String = redis::from_redis_value(node[0].clone())?;
                let port: u16 = redis::from_redis_value(node[1].clone())?;
                return Ok(self.valkey.node(&format!("{host}:{port}")).await?);
            }
        }
        anyhow::bail!("no node serves slot {slot}")
    }

    /// Writes one chain of `n` random blocks, in sessions of 1024, and returns its keys.
    async fn write_chain(&self, n: usize) -> Result<Vec<i64>> {
        let snap = self.registry.snapshot();
        let inst = self.registry.instance(&self.instance).await?;
        let keys: Vec<i64> = (0..n).map(|_| fastrand::i64(..)).collect();
        for chunk in keys.chunks(1024) {
            let w = self.data.start_write_cache(&snap, &inst, chunk, &[], 0).await?;
            let mask = kvcm_core::wire::WireBlockMask { offset: Some(w.locations.len() as i32), bool_masks: None };
            self.data.finish_write_cache(&self.instance, &w.session_id, Some(&mask)).await?;
        }
        Ok(keys)
    }

    async fn cleanup(&self) -> Result<()> {
        let keys = self.data.keys(&self.instance);
        let mut c = self.conn.clone();
        for k in keys.all() {
            let _: () = redis::cmd("UNLINK").arg(k).query_async(&mut c).await?;
        }
        for k in kvcm_core::keys::RegistryKeys::new(&self.ns).all() {
            let _: () = redis::cmd("UNLINK").arg(k).query_async(&mut c).await?;
        }
        Ok(())
    }
}

async fn info_field(node: &mut redis::aio::MultiplexedConnection, section: &str, field: &str) -> Result<f64> {
    Ok(info_fields(node, section, &[field]).await?[0])
}

/// Several numeric fields of one `INFO <section>` snapshot, in the order asked.
async fn info_fields(node: &mut redis::aio::MultiplexedConnection, section: &str, fields: &[&str]) -> Result<Vec<f64>> {
    let info: String = redis::cmd("INFO").arg(section).query_async(node).await?;
    fields
        .iter()
        .map(|field| {
            info.lines()
                .find_map(|l| l.strip_prefix(&format!("{field}:")))
                .and_then(|v| v.trim().parse().ok())
                .with_context(|| format!("INFO {section} has no {field}"))
        })
        .collect()
}

/// (calls, usec) of one command from INFO commandstats.
async fn command_stat(node: &mut redis::aio::MultiplexedConnection, cmd: &str) -> Result<(f64, f64)> {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(node).await?;
    let Some(line) = info.lines().find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:"))) else {
        return Ok((0.0, 0.0));
    };
    let get = |k: &str| {
        line.split(',').find_map(|kv| kv.strip_prefix(&format!("{k}="))).and_then(|v| v.parse().ok()).unwrap_or(0.0)
    };
    Ok((get("calls"), get("usec")))
}

/// A kvcm config for the seed `valkey`: the embedded defaults plus the environment's Valkey
/// access settings (`KVCM_VALKEY_*`: TLS files, user, timeouts, and `KVCM_VALKEY_PASSWORD`), so a
/// benchmark reaches a TLS / AUTH cluster as kvcm would; everything else stays at its default,
/// so runs compare.
fn valkey_config(valkey: &str) -> Result<kvcm_core::config::Config> {
    let mut env: Vec<(String, String)> =
        std::env::vars().filter(|(k, _)| k.starts_with("KVCM_VALKEY_") && k != "KVCM_VALKEY_URL").collect();
    env.push(("KVCM_VALKEY_URL".into(), valkey.into()));
    Ok(kvcm_core::config::Config::load_from(None, &env)?.0)
}

/// An in-process kvcm-api (the real router and HTTP server) on a free loopback port. It runs on
/// a multi-threaded runtime of its own, on its own threads, as the kvcm-api binary does: the
/// benchmark's runtime (single-threaded for serial measurements) only drives the client.
async fn serve(
    valkey: &str,
    ns: &str,
    max_keys: usize,
    tweak: impl FnOnce(&mut kvcm_core::config::Config),
) -> Result<(std::net::SocketAddr, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<anyhow::Result<()>>)> {
    let mut config = valkey_config(valkey)?;
    config.meta_port = 0;
    config.admin_port = 0;
    config.grpc = false; // benchmarks measure HTTP; several servers run at once
    config.namespace = ns.to_string();
    config.max_keys_per_request = max_keys.max(1);
    config.max_body_bytes = 64 << 20;
    config.log_level = "warn".into();
    tweak(&mut config);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new().name("kvcm-api".into()).spawn(move || {
        let served =
            tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(anyhow::Error::from).and_then(
                |runtime| {
                    runtime.block_on(async move {
                        let server = kvcm_api::build(config).await?;
                        let _ = addr_tx.send(server.meta_addr);
                        server
                            .run(async move {
                                let _ = stop_rx.await;
                            })
                            .await
                    })
                },
            );
        let _ = done_tx.send(served);
    })?;
    let Ok(addr) = addr_rx.await else {
        // The server failed to start: why.
        return match done_rx.await {
            Ok(Err(e)) => Err(e),
            _ => Err(anyhow::anyhow!("the in-process kvcm-api stopped before listening")),
        };
    };
    let serving = tokio::spawn(async move { done_rx.await? });
    Ok((addr, stop_tx, serving))
}

/// Appends one JSON line to the `--record` file, if any.
fn record(path: &Option<std::path::PathBuf>, value: serde_json::Value) -> Result<()> {
    use std::io::Write;
    if let Some(path) = path {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        writeln!(f, "{value}")?;
    }
    Ok(())
}

/// The body of a `getCacheLocation` `QT_PREFIX_MATCH` request for `keys`, serialised once.
fn prefix_read(instance: &str, keys: &[i64]) -> bytes::Bytes {
    serde_json::json!({"instance_id": instance, "query_type": "QT_PREFIX_MATCH", "block_keys": keys}).to_string().into()
}

/// Serial requests per size: a quarter for the long reads (5,000 blocks and up), at least 20.
fn serial_requests(blocks: usize, requests: usize) -> usize {
    if blocks >= 5000 { requests / 4 } else { requests }.max(20)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// The median of unsorted values.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    percentile(&v, 0.5)
}

impl Cmd {
    /// Whether the subcommand times serial calls: it then runs on a single-threaded runtime, as a
    /// serial client would, so its measurements carry no thread hand-offs of its own (on the
    /// multi-threaded runtime each call woke another thread twice, ~15–25 µs of a 128-block
    /// read; docs/benchmarks.md, "Serving threads"). The others generate concurrent load on
    /// every core.
    fn is_serial(&self) -> bool {
        matches!(self, Cmd::Latency { .. } | Cmd::Breakdown { .. } | Cmd::Peer { .. } | Cmd::Events { .. })
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let mut runtime = if args.single_threaded || args.cmd.is_serial() {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    runtime.enable_all().build()?.block_on(run(args))
}

async fn run(args: Args) -> Result<()> {
    match args.cmd {
        Cmd::Memory { blocks, specs } => {
            let b = Bench::new(&args.valkey, specs).await?;
            let mut node = b.node().await?;
            let before = info_field(&mut node, "memory", "used_memory").await?;
            let t = Instant::now();
            b.fill(blocks.div_ceil(128), 128, 0).await?;
            let written = blocks.div_ceil(128) * 128;
            let after = info_field(&mut node, "memory", "used_memory").await?;
            println!(
                "memory: {written} blocks, {specs} spec(s): {:.1} bytes/block (used_memory +{:.1} MiB; filled in {:.1} s)",
                (after - before) / written as f64,
                (after - before) / 1048576.0,
                t.elapsed().as_secs_f64()
            );
            let per_block = (after - before) / written as f64;
            record(
                &args.record,
                serde_json::json!({"bench": "memory", "blocks": written, "specs": specs, "bytes_per_block": per_block}),
            )?;
            b.cleanup().await?;
        }
        Cmd::ReadCpu { blocks, reads, lfu, adaptive } => {
            read_cpu::read_cpu(&args.valkey, blocks, reads, lfu, adaptive).await?
        }
        Cmd::HmgetBaseline { fields, value_bytes, reads } => {
            read_cpu::hmget_baseline(&args.valkey, fields, value_bytes, reads).await?
        }
        Cmd::Deletion { blocks } => {
            for workers in [1usize, 2] {
                let b = Bench::new(&args.valkey, 1).await?;
                let root = format!("/tmp/kvcm-bench-del-{}/", b.ns);
                // Point the storage at a fresh directory, with real files for every block.
                let mut cfg = b.registry.snapshot().storages["files"].clone();
                cfg.nfs.as_mut().expect("nfs").root_path = root.clone();
                b.registry.update_storage(cfg, true).await?;
                let prompts = b.fill(blocks.div_ceil(128), 128, usize::MAX).await?;
                let dir = format!("{root}{}/tp0", b.instance);
                std::fs::create_dir_all(&dir)?;
                for k in prompts.iter().flatten() {
                    std::fs::write(format!("{dir}/{:016x}", *k as u64), b"")?;
                }
                let inst = b.registry.instance(&b.instance).await?;
                let all: Vec<i64> = prompts.iter().flatten().copied().collect();
                b.data.remove_blocks(&inst, &all, 0, 1 << 32).await?;
                let mut ws = Vec::new();
                for i in 0..workers {
                    let mut config = valkey_config(&args.valkey)?;
                    config.namespace = b.ns.clone();
                    config.worker.metrics_port = 0;
                    config.worker.id = format!("bench-{i}");
                    config.worker.delete_batch = 256;
                    ws.push(kvcm_worker::build(config).await?.worker);
                }
                let t = Instant::now();
                let runs = ws.iter().map(|w| {
                    let inst = b.instance.clone();
                    async move {
                        loop {
                            if kvcm_worker::deleter::process_instance(w, &inst).await? == 0 {
                                return anyhow::Ok(());
                            }
                        }
                    }
                });
                futures::future::try_join_all(runs).await?;
                let secs = t.elapsed().as_secs_f64();
                let left = std::fs::read_dir(&dir)?.count();
                anyhow::ensure!(left == 0, "{left} files left");
                println!(
                    "deletion: {} blocks with files, {workers} worker(s): {:.0} blocks/s ({secs:.2} s)",
                    all.len(),
                    all.len() as f64 / secs
                );
                let _ = std::fs::remove_dir_all(&root);
                b.cleanup().await?;
            }
        }
        Cmd::Reclaim { blocks, over_percent } => {
            let b = Bench::new(&args.valkey, 1).await?;
            b.fill(blocks.div_ceil(128), 128, 0).await?;
            let written = (blocks.div_ceil(128) * 128) as i64;
            let bytes = written << 20; // 1 MiB per block (one spec of 1 MiB)
            let mut group = b.registry.get_group("g").await?;
            let current = group.version;
            group.version += 1;
            group.quota.capacity = bytes * 100 / (100 + over_percent as i64);
            group.cache_config.reclaim_strategy.trigger_strategy.used_percentage = 1.0;
            b.registry.update_group(group.clone(), current).await?;
            let mut config = valkey_config(&args.valkey)?;
            config.namespace = b.ns.clone();
            config.worker.metrics_port = 0;
            let w = kvcm_worker::build(config).await?.worker;
            let mut node = b.node().await?;
            let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut node).await?;
            let snap = w.registry.snapshot();
            let t = Instant::now();
            let freed = kvcm_worker::reclaimer::reclaim_group(&w, &snap, &snap.groups["g"]).await?;
            let secs = t.elapsed().as_secs_f64();
            let (calls, usec) = command_stat(&mut node, "evalsha").await?;
            println!(
                "reclaim: {written} blocks, {over_percent}% over the watermark: one round evicted {} blocks in {secs:.2} s ({:.0} blocks/s); {calls} script calls, {:.0} us each on average",
                freed >> 20,
                (freed >> 20) as f64 / secs,
                usec / calls.max(1.0)
            );
            b.cleanup().await?;
        }
        Cmd::Peer { sizes, rounds, requests, mooncake_master, python, script } => {
            let a = peer::PeerArgs { sizes, rounds, requests, mooncake_master, python, script };
            for rec in peer::run(&args.valkey, &a).await? {
                record(&args.record, rec)?;
            }
        }
        Cmd::Auth { concurrency, seconds, rounds } => auth::run(&args.valkey, concurrency, seconds, rounds).await?,
        Cmd::Throughput(params) => throughput::run(&args.valkey, &args.record, params).await?,
        Cmd::Durability { concurrency, seconds, rounds, serial } => {
            let rec = durability::run(&args.valkey, concurrency, seconds, rounds, serial).await?;
            record(&args.record, rec)?;
        }
        Cmd::Breakdown { sizes, layers, rounds, requests } => {
            breakdown::run(&args.valkey, &sizes, &layers, rounds, requests, &args.record).await?
        }
        Cmd::Events { sizes, rounds, requests, hosts } => {
            events::run(&args.valkey, &args.record, &sizes, rounds, requests, hosts).await?
        }
        Cmd::Latency { sizes, requests } => {
            let b = Bench::new(&args.valkey, 1).await?;
            let longest = *sizes.iter().max().unwrap_or(&0);
            let keys = b.write_chain(longest).await?;
            let (addr, stop_tx, serving) = serve(&args.valkey, &b.ns, longest, |_| {}).await?;
            let mut http = h1::H1::connect(addr).await?;
            for &n in &sizes {
                let body = prefix_read(&b.instance, &keys[..n]);
                let count = serial_requests(n, requests);
                let mut lat = Vec::with_capacity(count);
                for i in 0..count + 20 {
                    let t = Instant::now();
                    let resp = http.post("/api/getCacheLocation", body.clone()).await?;
                    let ms = t.elapsed().as_secs_f64() * 1000.0;
                    if i == 0 {
                        let v: serde_json::Value = serde_json::from_slice(&resp)?;
                        anyhow::ensure!(
                            v["locations"].as_array().map(|a| a.len()) == Some(n),
                            "matched {}",
                            v["locations"]
                        );
                    }
                    if i >= 20 {
                        lat.push(ms); // the first 20 warm up connections and caches
                    }
                }
                lat.sort_by(|a, b| a.total_cmp(b));
                println!(
                    "latency: prefix match of {n} blocks, {count} serial requests: p50 {:.3} ms, p99 {:.3} ms",
                    percentile(&lat, 0.5),
                    percentile(&lat, 0.99)
                );
                record(
                    &args.record,
                    serde_json::json!({"bench": "latency", "blocks": n, "requests": count,
                    "p50_ms": percentile(&lat, 0.5), "p99_ms": percentile(&lat, 0.99)}),
                )?;
            }
            let _ = stop_tx.send(());
            serving.await??;
            b.cleanup().await?;
        }
    }
    Ok(())
}
