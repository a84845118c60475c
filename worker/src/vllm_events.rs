//! `kvcm-worker events`: ingests the KV-cache events a vLLM engine publishes (ZMQ, msgpack:
//! `BlockStored`, `BlockRemoved`, `AllBlocksCleared`) and reports them to kvcm as that engine's
//! hot tier — the same core operation as `ReportEvent` (docs/events.md, "vLLM engines"). One
//! process per engine, next to it (a sidecar): it knows the engine's `host_ip_port`.
//!
//! **Wire format** (vLLM's `ZmqEventPublisher`): multipart `[topic, seq (8 bytes, big-endian),
//! payload]`, `seq` counting from 0 per publisher; the payload is a msgpack `KVEventBatch` —
//! `[ts, events, data_parallel_rank]` (an array, or a map with those keys) whose events are
//! tagged: arrays `["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
//! lora_id, medium, …]` in older vLLM, maps `{"type": "BlockStored", "block_hashes": …}` since
//! the map encoding. Both are read; unknown fields are ignored. Block hashes are msgpack ints
//! (signed or unsigned) or bytes (sha256 digests: the last 8 bytes, big-endian, are the same
//! number vLLM's int form carries). The replay socket (a ROUTER) answers `[b"", start_seq]` with
//! `[b"", seq, payload]` per buffered batch from `start_seq` on, then seq −1 with an empty
//! payload (later vLLM put the topic first: 2 or 3 frames are accepted).
//!
//! **Block keys** (`key_mode`): `engine` (the default, Tair's choice) — a block's kvcm key is the
//! low 64 bits of vLLM's block hash, read as an i64, so a router must compute vLLM's hashes
//! (which needs the engine's `PYTHONHASHSEED`); `tokens` — kvcm chains its own key from the
//! token ids the event carries: `key = xxh3_64(parent_key as 8 bytes LE ‖ each token as 4 bytes
//! LE)`, the parent of a prompt's first block being 0, so a router computes the same keys from
//! the prompt's tokens alone ([`token_key`]). In `tokens` mode what token keys cannot key or
//! tell apart is not reported (under-reporting, never a wrong hit): a block whose hash a LoRA
//! or extra keys shaped, a block whose parent this process has not seen (and the rest of its
//! chain), and new blocks once [`MAX_KNOWN`] engine hashes are remembered.
//!
//! **Losing and finding the stream.** Every batch's seq is checked: the next one expected
//! applies; a later one means batches were missed — they are fetched from the replay socket;
//! an earlier one (seq back to 0: the engine restarted) or a gap the replay cannot fill means
//! this process no longer knows what the engine holds: a new lifecycle (`HOST_DOWN` +
//! `NODE_REGISTER`: a new epoch, so every block reported before vanishes from answers at once),
//! and on from there — the tier under-reports until the engine stores blocks again, and never
//! reports a block the engine dropped. The same *resync* (new lifecycle, then every batch the
//! replay socket holds from seq 0 when it holds them all) runs at start, when the publisher
//! connects again after a disconnection, and after a batch kvcm could not take (retried every
//! heartbeat tick); a block event kvcm refuses is skipped. `AllBlocksCleared` is a new
//! lifecycle too. While the publisher is connected the reporter heartbeats every
//! `heartbeat_ms` (once a batch was applied); once it disconnects (the engine died) the
//! heartbeats stop and its blocks vanish after kvcm's `event_report_heartbeat_timeout_ms`.

use crate::Worker;
use anyhow::{Context, bail};
use kvcm_core::store::DataPlane;
use kvcm_core::wire::meta::{
    BlockAddEventParams, BlockDeleteEventParams, EventItem, HeartbeatEventParams, HostDownEventParams,
    NodeRegisterEventParams, ReportEventRequest, ReportEventType,
};
use kvcm_core::wire::{InstanceInfo, LocationSpec, StatusCode, StorageType};
use rmpv::Value;
use std::collections::HashMap;
use std::time::Duration;
use zeromq::{Socket, SocketEvent, SocketRecv, SocketSend, ZmqMessage};

/// Most engine hashes remembered in `tokens` mode (a GPU holds far fewer blocks).
pub const MAX_KNOWN: usize = 1 << 22;

/// How block keys are made from vLLM's events (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KeyMode {
    Engine,
    Tokens,
}

/// One engine's event stream and the reporter it feeds.
#[derive(Debug, Clone, clap::Args)]
pub struct Subscription {
    /// The engine's event publisher (vLLM `kv_events_config.endpoint`, e.g. tcp://10.0.0.5:5557).
    #[arg(long)]
    pub endpoint: String,
    /// Its replay socket (vLLM `replay_endpoint`); without it, missed batches start a new lifecycle.
    #[arg(long)]
    pub replay: Option<String>,
    /// The topic vLLM publishes under (`kv_events_config.topic`, "" by default).
    #[arg(long, default_value = "")]
    pub topic: String,
    /// The kvcm instance the engine is registered as.
    #[arg(long)]
    pub instance: String,
    /// The engine's `host_ip_port` (what a router sends prompts to).
    #[arg(long)]
    pub host: String,
    /// The tier: L1P5 (the engine's own memory) or L2 (peers can fetch from it).
    #[arg(long, default_value = "L1P5")]
    pub tier: String,
    /// The medium when an event names none (vLLM: "GPU").
    #[arg(long, default_value = "GPU")]
    pub medium: String,
    #[arg(long, value_enum, default_value = "engine")]
    pub key_mode: KeyMode,
    /// Heartbeat interval while the publisher is connected.
    #[arg(long, default_value_t = 5000)]
    pub heartbeat_ms: u64,
}

/// kvcm's key for a block in `tokens` mode: xxh3-64 of the parent's key (8 bytes LE, 0 for a
/// prompt's first block) followed by the block's token ids (4 bytes LE each).
pub fn token_key(parent: i64, tokens: &[u32]) -> i64 {
    let mut bytes = Vec::with_capacity(8 + 4 * tokens.len());
    bytes.extend_from_slice(&parent.to_le_bytes());
    for t in tokens {
        bytes.extend_from_slice(&t.to_le_bytes());
    }
    xxhash_rust::xxh3::xxh3_64(&bytes) as i64
}

/// A block hash as vLLM sends it: an int (its low 64 bits) or bytes (the last 8, big-endian).
fn hash_of(v: &Value) -> Option<u64> {
    match v {
        Value::Integer(i) => i.as_u64().or_else(|| i.as_i64().map(|x| x as u64)),
        Value::Binary(b) if !b.is_empty() => {
            let tail = &b[b.len().saturating_sub(8)..];
            Some(tail.iter().fold(0u64, |acc, x| (acc << 8) | *x as u64))
        }
        _ => None,
    }
}

/// One decoded engine event.
#[derive(Debug, Clone, PartialEq)]
pub enum EngineEvent {
    Stored {
        hashes: Vec<u64>,
        parent: Option<u64>,
        tokens: Vec<u32>,
        block_size: usize,
        medium: Option<String>,
        /// A LoRA or extra keys (multimodal inputs, a cache salt) shaped the block's hash.
        extras: bool,
    },
    Removed {
        hashes: Vec<u64>,
        medium: Option<String>,
    },
    Cleared,
}

/// Reads field `name` of an event: from a map by name, from an array by position `at` (the
/// tag is element 0).
fn field<'a>(ev: &'a Value, name: &str, at: usize) -> Option<&'a Value> {
    match ev {
        Value::Map(m) => m.iter().find(|(k, _)| k.as_str() == Some(name)).map(|(_, v)| v),
        Value::Array(a) => a.get(at),
        _ => None,
    }
    .filter(|v| !v.is_nil())
}

fn hashes(v: Option<&Value>) -> anyhow::Result<Vec<u64>> {
    let Some(Value::Array(a)) = v else { bail!("block_hashes is not a list") };
    a.iter().map(|h| hash_of(h).context("a block hash is neither an int nor bytes")).collect()
}

fn medium(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_string)
}

/// Decodes a `KVEventBatch` payload into its events (unknown event types are skipped).
pub fn decode_batch(payload: &[u8]) -> anyhow::Result<Vec<EngineEvent>> {
    let batch = rmpv::decode::read_value(&mut &payload[..]).context("the payload is not msgpack")?;
    let events = match &batch {
        Value::Array(a) => a.get(1),
        Value::Map(m) => m.iter().find(|(k, _)| k.as_str() == Some("events")).map(|(_, v)| v),
        _ => None,
    };
    let Some(Value::Array(events)) = events else { bail!("the batch has no event list") };
    let mut out = Vec::with_capacity(events.len());
    for ev in events {
        let tag = match ev {
            Value::Map(_) => field(ev, "type", 0),
            Value::Array(a) => a.first(),
            _ => None,
        };
        match tag.and_then(Value::as_str) {
            Some("BlockStored") => {
                // Token ids that are not all u32 read as none (token keys cannot be made then).
                let tokens = match field(ev, "token_ids", 3) {
                    Some(Value::Array(t)) => t
                        .iter()
                        .map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
                        .collect::<Option<Vec<u32>>>()
                        .unwrap_or_default(),
                    _ => Vec::new(),
                };
                let extras = field(ev, "lora_id", 5).is_some()
                    || field(ev, "lora_name", 7).is_some()
                    || matches!(field(ev, "extra_keys", 8), Some(Value::Array(k)) if k.iter().any(|x| !x.is_nil()));
                out.push(EngineEvent::Stored {
                    hashes: hashes(field(ev, "block_hashes", 1))?,
                    parent: field(ev, "parent_block_hash", 2).and_then(hash_of),
                    tokens,
                    block_size: field(ev, "block_size", 4).and_then(Value::as_u64).unwrap_or(0) as usize,
                    medium: medium(field(ev, "medium", 6)),
                    extras,
                })
            }
            Some("BlockRemoved") => out.push(EngineEvent::Removed {
                hashes: hashes(field(ev, "block_hashes", 1))?,
                medium: medium(field(ev, "medium", 2)),
            }),
            Some("AllBlocksCleared") => out.push(EngineEvent::Cleared),
            _ => {}
        }
    }
    Ok(out)
}

/// What one subscription knows of its engine.
struct Engine {
    sub: Subscription,
    storage_type: StorageType,
    /// `tokens` mode: engine hash → (kvcm key, media holding it).
    known: HashMap<u64, (i64, u32)>,
    /// The seq the next batch should carry; `None` before the first (or after losing the stream).
    next_seq: Option<u64>,
    /// (seq, xxh3 of the payload) of the last batches applied: a batch seen again (the live
    /// copy of one the replay socket gave first) is skipped, not taken for a restart.
    applied: std::collections::VecDeque<(u64, u64)>,
    /// kvcm's view of the engine is to be rebuilt (a report that failed, a publisher that came
    /// back): a new lifecycle and a catch-up, tried again at every heartbeat tick until done.
    resync: bool,
}

/// How many applied batches are remembered to skip duplicates.
const REMEMBERED: usize = 4096;

/// Most batches one replay request takes in, and how long it may take in all.
const REPLAY_MAX: usize = 100_000;
const REPLAY_DEADLINE: Duration = Duration::from_secs(30);

impl Engine {
    fn specs(&self, inst: &InstanceInfo, medium: &str, key: i64) -> Vec<LocationSpec> {
        inst.location_spec_infos
            .iter()
            .map(|s| LocationSpec {
                name: s.name.clone(),
                uri: format!("vllm://{}/{}/{:016x}", self.sub.host, medium.to_ascii_lowercase(), key as u64),
            })
            .collect()
    }

    fn add(&self, inst: &InstanceInfo, key: i64, medium: &str) -> EventItem {
        EventItem {
            event_type: ReportEventType::EVENT_BLOCK_ADD,
            block_add: Some(Box::new(BlockAddEventParams {
                block_key: key.to_string(),
                medium: medium.to_string(),
                specs: self.specs(inst, medium, key),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    /// The report items of one batch (an AllBlocksCleared starts them over with a new
    /// lifecycle). In `tokens` mode the hash map changes here, before the items are reported:
    /// a report that fails leads to a resync, which clears it.
    fn items(&mut self, inst: &InstanceInfo, events: Vec<EngineEvent>) -> Vec<EventItem> {
        let mut items = Vec::new();
        for ev in events {
            match ev {
                EngineEvent::Stored { hashes, parent, tokens, block_size, medium, extras } => {
                    let medium = medium.unwrap_or_else(|| self.sub.medium.clone());
                    if self.sub.key_mode == KeyMode::Engine {
                        items.extend(hashes.iter().map(|h| self.add(inst, *h as i64, &medium)));
                        continue;
                    }
                    // Token keys: a LoRA or extra keys (multimodal inputs, a cache salt) make
                    // blocks of equal tokens different, which token keys cannot tell apart:
                    // such blocks are not reported (under-reporting, never a wrong hit).
                    let mut parent_key = match parent {
                        _ if extras || block_size == 0 => None,
                        Some(p) => self.known.get(&p).map(|(k, _)| *k),
                        None => Some(0),
                    };
                    for (i, h) in hashes.iter().enumerate() {
                        let chunk = tokens.get(i * block_size..(i + 1) * block_size);
                        let (Some(p), Some(chunk)) = (parent_key, chunk) else { break };
                        let key = token_key(p, chunk);
                        let full = self.known.len() >= MAX_KNOWN;
                        match self.known.get_mut(h) {
                            Some(entry) => entry.1 += 1,
                            // Full: a block that could not be deleted later is not reported.
                            None if full => break,
                            None => {
                                self.known.insert(*h, (key, 1));
                            }
                        }
                        parent_key = Some(key);
                        items.push(self.add(inst, key, &medium));
                    }
                }
                EngineEvent::Removed { hashes, medium } => {
                    let medium = medium.unwrap_or_else(|| self.sub.medium.clone());
                    for h in hashes {
                        let key = match self.sub.key_mode {
                            KeyMode::Engine => Some(h as i64),
                            KeyMode::Tokens => match self.known.get_mut(&h) {
                                Some((key, holders)) if *holders > 1 => {
                                    *holders -= 1;
                                    Some(*key)
                                }
                                Some(_) => self.known.remove(&h).map(|(key, _)| key),
                                None => None,
                            },
                        };
                        let Some(key) = key else { continue };
                        items.push(EventItem {
                            event_type: ReportEventType::EVENT_BLOCK_DELETE,
                            block_delete: Some(Box::new(BlockDeleteEventParams {
                                block_key: key.to_string(),
                                medium: medium.clone(),
                                spec_names: inst.location_spec_infos.iter().map(|s| s.name.clone()).collect(),
                            })),
                            ..Default::default()
                        });
                    }
                }
                EngineEvent::Cleared => {
                    // Everything before is gone: a new lifecycle, then what follows.
                    self.known.clear();
                    items.clear();
                    items.extend(lifecycle());
                }
            }
        }
        items
    }
}

/// A new lifecycle of the reporter: `HOST_DOWN` (unregisters it) then `NODE_REGISTER` (registers
/// it with the next epoch): every block it reported before is hidden at once.
fn lifecycle() -> [EventItem; 2] {
    [
        EventItem {
            event_type: ReportEventType::EVENT_HOST_DOWN,
            host_down: Some(HostDownEventParams {}),
            ..Default::default()
        },
        EventItem {
            event_type: ReportEventType::EVENT_NODE_REGISTER,
            node_register: Some(Box::new(NodeRegisterEventParams::default())),
            ..Default::default()
        },
    ]
}

fn heartbeat() -> EventItem {
    EventItem {
        event_type: ReportEventType::EVENT_HEARTBEAT,
        heartbeat: Some(Box::new(HeartbeatEventParams::default())),
        ..Default::default()
    }
}

/// Reports `items` for the engine, split to respect the request bound; `HOST_DOWN` and
/// `NODE_REGISTER` go in requests of their own (Tair's composition rules). A block event kvcm
/// refuses is skipped (logged, counted): one bad item must not stall the stream. Any other
/// refusal — the reporter unregistered (`NODE_NOT_REGISTERED`, e.g. after an outage longer than
/// the cleanup grace), a lifecycle event refused — or kvcm unreachable is an error: the caller
/// resyncs.
async fn report(w: &Worker, e: &Engine, inst: &InstanceInfo, items: Vec<EventItem>) -> anyhow::Result<()> {
    let data: &DataPlane = &w.data;
    let limits = w.registry.limits();
    let max = limits.max_keys_per_request.clamp(1, 4096);
    let alone =
        |i: &EventItem| matches!(i.event_type, ReportEventType::EVENT_NODE_REGISTER | ReportEventType::EVENT_HOST_DOWN);
    let mut rest = items.as_slice();
    while !rest.is_empty() {
        let n = if alone(&rest[0]) {
            1
        } else {
            let n = rest.len().min(max);
            rest[..n].iter().position(alone).unwrap_or(n)
        };
        let req = ReportEventRequest {
            trace_id: String::new(),
            instance_id: e.sub.instance.clone(),
            host_ip_port: e.sub.host.clone(),
            events: rest[..n].to_vec(),
            storage_type: e.storage_type,
        };
        let snap = w.registry.snapshot();
        let settings = kvcm_core::store::report_event::settings_for(
            &snap,
            &inst.instance_group_name,
            e.storage_type,
            w.config.report_settings(),
        )?;
        let out = data.report_event(inst, &req.body(), settings, limits).await?;
        for (i, code) in out.codes.iter().enumerate().filter(|(_, c)| **c != StatusCode::OK) {
            let why = out.reasons.get(i).cloned().flatten().unwrap_or_default();
            let kind = req.events[i].event_type;
            let block = matches!(kind, ReportEventType::EVENT_BLOCK_ADD | ReportEventType::EVENT_BLOCK_DELETE);
            if !block || *code == StatusCode::NODE_NOT_REGISTERED {
                bail!("kvcm refused a {kind:?}: {code:?} {why}");
            }
            w.metrics.engine_stream.with_label_values(&["refused"]).inc();
            tracing::warn!(?kind, ?code, %why, "kvcm refused an engine event; skipped");
        }
        rest = &rest[n..];
    }
    Ok(())
}

/// Asks the replay socket for every batch from `start`: their (seq, payload), in order; an
/// error when it is unreachable, does not answer, answers more than [`REPLAY_MAX`] batches or
/// takes longer than [`REPLAY_DEADLINE`].
async fn replay(endpoint: &str, start: u64) -> anyhow::Result<Vec<(u64, Vec<u8>)>> {
    let deadline = tokio::time::Instant::now() + REPLAY_DEADLINE;
    let mut dealer = zeromq::DealerSocket::new();
    tokio::time::timeout(Duration::from_secs(5), dealer.connect(endpoint))
        .await
        .context("replay connect timed out")??;
    let mut req = ZmqMessage::from(Vec::<u8>::new());
    req.push_back(start.to_be_bytes().to_vec().into());
    dealer.send(req).await?;
    let mut out = Vec::new();
    let result = loop {
        let wait = deadline.saturating_duration_since(tokio::time::Instant::now()).min(Duration::from_secs(5));
        let msg = match tokio::time::timeout(wait, dealer.recv()).await {
            Ok(Ok(msg)) => msg,
            Ok(Err(e)) => break Err(e.into()),
            Err(_) => break Err(anyhow::anyhow!("the replay socket did not answer in time")),
        };
        // [b"" or topic, seq, payload]; [seq, payload] without the delimiter.
        let frames: Vec<Vec<u8>> = msg.into_vec().into_iter().map(|b| b.to_vec()).collect();
        let (seq, payload) = match frames.as_slice() {
            [_, seq, payload] | [seq, payload] => (seq, payload),
            other => break Err(anyhow::anyhow!("a replay reply of {} frames", other.len())),
        };
        let Ok(seq) = <[u8; 8]>::try_from(seq.as_slice()).map(i64::from_be_bytes) else {
            break Err(anyhow::anyhow!("a replay seq not of 8 bytes"));
        };
        if seq < 0 {
            break Ok(());
        }
        if out.len() == REPLAY_MAX {
            break Err(anyhow::anyhow!("the replay answered more than {REPLAY_MAX} batches"));
        }
        out.push((seq as u64, payload.clone()));
    };
    let _ = dealer.close().await;
    result.map(|()| out)
}

/// Runs one subscription until `stop` turns true.
pub async fn run(w: Worker, sub: Subscription, mut stop: tokio::sync::watch::Receiver<bool>) -> anyhow::Result<()> {
    let storage_type = match sub.tier.to_ascii_uppercase().as_str() {
        "L1P5" => StorageType::ST_EVENT_REPORT_L1P5,
        "L2" => StorageType::ST_EVENT_REPORT_L2,
        other => bail!("--tier must be L1P5 or L2, got {other}"),
    };
    // (reportEvent refuses it: the instance's medium-id counter is kept under that name.)
    if sub.medium == "seq" {
        bail!("--medium seq is reserved; name the medium otherwise");
    }
    w.registry.instance(&sub.instance).await.context("the instance is not registered in kvcm")?;
    let mut e =
        Engine { sub, storage_type, known: HashMap::new(), next_seq: None, applied: Default::default(), resync: false };
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    tokio::pin!(stopped);
    let mut socket = zeromq::SubSocket::new();
    let mut monitor = socket.monitor();
    socket.subscribe(&e.sub.topic).await?;
    // vLLM binds its publisher only once the model is loaded: wait for it as long as it takes.
    loop {
        tokio::select! {
            () = &mut stopped => return Ok(()),
            connected = socket.connect(&e.sub.endpoint) => match connected {
                Ok(()) => break,
                Err(err) => tracing::warn!(endpoint = %e.sub.endpoint, error = %err, "the engine's publisher is not up yet; retrying"),
            },
        }
    }
    tracing::info!(endpoint = %e.sub.endpoint, instance = %e.sub.instance, host = %e.sub.host, "subscribed to vLLM KV events");
    // Catch up at once from the engine's buffer (when it still holds seq 0): what it stored
    // before this process started is known without waiting for its next batch.
    if let Err(err) = resync(&w, &mut e).await {
        tracing::warn!(error = %format!("{err:#}"), "kvcm could not be told of the engine yet; retrying");
        e.resync = true;
    }
    let (mut connected, mut lost) = (true, false);
    let mut beat = tokio::time::interval(Duration::from_millis(e.sub.heartbeat_ms.max(100)));
    loop {
        tokio::select! {
            () = &mut stopped => return Ok(()),
            ev = futures::StreamExt::next(&mut monitor) => match ev {
                Some(SocketEvent::Connected(..)) => {
                    connected = true;
                    w.metrics.engine_stream.with_label_values(&["connected"]).inc();
                    // Back after losing the publisher: the engine may have restarted or moved
                    // on without us. Rebuild kvcm's view (new lifecycle, catch-up).
                    if lost {
                        e.resync = true;
                    }
                }
                Some(SocketEvent::Disconnected(_)) => {
                    (connected, lost) = (false, true);
                    e.next_seq = None;
                    w.metrics.engine_stream.with_label_values(&["disconnected"]).inc();
                    tracing::warn!(endpoint = %e.sub.endpoint, "the engine's publisher disconnected: heartbeats stop");
                }
                _ => {}
            },
            _ = beat.tick() => {
                if !connected {
                    continue;
                }
                let done = if e.resync { resync(&w, &mut e).await } else if e.next_seq.is_some() { beat_once(&w, &e).await } else { Ok(()) };
                if let Err(err) = done {
                    e.resync = true;
                    tracing::warn!(error = %format!("{err:#}"), "kvcm's view of the engine will be rebuilt");
                }
            }
            msg = socket.recv() => match msg {
                Ok(msg) => {
                    if let Err(err) = on_message(&w, &mut e, msg).await {
                        // What kvcm holds of the engine can no longer be trusted: rebuild it.
                        e.next_seq = None;
                        e.resync = true;
                        tracing::warn!(error = %format!("{err:#}"), "an engine event batch was not applied; resyncing");
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, "receiving from the engine's publisher failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}

async fn beat_once(w: &Worker, e: &Engine) -> anyhow::Result<()> {
    let inst = w.registry.instance(&e.sub.instance).await?;
    report(w, e, &inst, vec![heartbeat()]).await
}

/// Rebuilds kvcm's view of the engine: a new lifecycle (nothing reported before counts), then
/// every batch the replay socket still holds from seq 0, when it holds them all. An error only
/// when kvcm could not be told (the caller tries again); a replay socket that does not answer
/// leaves the new, empty lifecycle for the live batches to fill.
async fn resync(w: &Worker, e: &mut Engine) -> anyhow::Result<()> {
    let inst = w.registry.instance(&e.sub.instance).await?;
    new_lifecycle(w, e, &inst).await?;
    e.next_seq = None;
    e.resync = false;
    let Some(endpoint) = e.sub.replay.clone() else { return Ok(()) };
    let got = match replay(&endpoint, 0).await {
        Ok(got) => got,
        Err(err) => {
            tracing::warn!(error = %format!("{err:#}"), "no catch-up from the replay socket; waiting for live batches");
            return Ok(());
        }
    };
    let complete = got.first().is_some_and(|(s, _)| *s == 0) && got.windows(2).all(|p| p[1].0 == p[0].0 + 1);
    if complete {
        w.metrics.engine_stream.with_label_values(&["replayed"]).inc();
        if let Err(err) = apply(w, e, &inst, got).await {
            e.resync = true;
            return Err(err);
        }
    }
    Ok(())
}

/// One published batch: checked against the expected seq, applied, or recovered from.
async fn on_message(w: &Worker, e: &mut Engine, msg: ZmqMessage) -> anyhow::Result<()> {
    let frames: Vec<Vec<u8>> = msg.into_vec().into_iter().map(|b| b.to_vec()).collect();
    let [_, seq, payload] = frames.as_slice() else { bail!("a message of {} frames, not 3", frames.len()) };
    let seq = u64::from_be_bytes(seq[..].try_into().context("a seq frame not of 8 bytes")?);
    let inst = w.registry.instance(&e.sub.instance).await?;
    let hash = xxhash_rust::xxh3::xxh3_64(payload);
    let mut batches = vec![(seq, payload.clone())];
    match e.next_seq {
        Some(next) if seq == next => {}
        Some(next) if seq > next => {
            // Missed batches: fetch them; if the engine no longer has them, start over.
            w.metrics.engine_stream.with_label_values(&["gap"]).inc();
            batches = recover(w, e, &inst, next, seq, payload).await?;
        }
        // A batch already applied (the replay socket gave it first): nothing to do.
        Some(_) if e.applied.contains(&(seq, hash)) => return Ok(()),
        // An earlier seq never applied (a new publisher: the engine restarted), or the first
        // batch seen since losing the stream.
        Some(_) | None => {
            if e.next_seq.is_some() {
                w.metrics.engine_stream.with_label_values(&["restart"]).inc();
            }
            new_lifecycle(w, e, &inst).await?;
            if seq > 0 {
                // Joined its stream late: from seq 0 if it still buffers it.
                batches = recover(w, e, &inst, 0, seq, payload).await?;
            }
        }
    }
    apply(w, e, &inst, batches).await
}

/// Applies consecutive batches and remembers them.
async fn apply(w: &Worker, e: &mut Engine, inst: &InstanceInfo, batches: Vec<(u64, Vec<u8>)>) -> anyhow::Result<()> {
    for (s, p) in batches {
        let events = decode_batch(&p).with_context(|| format!("batch {s}"))?;
        let items = e.items(inst, events);
        report(w, e, inst, items).await?;
        e.next_seq = Some(s + 1);
        if e.applied.len() == REMEMBERED {
            e.applied.pop_front();
        }
        e.applied.push_back((s, xxhash_rust::xxh3::xxh3_64(&p)));
        w.metrics.engine_stream.with_label_values(&["batch"]).inc();
    }
    Ok(())
}

/// Batches `from..=upto` (the last one in hand): from the replay socket when it has them all;
/// otherwise a new lifecycle and just the last one.
async fn recover(
    w: &Worker,
    e: &mut Engine,
    inst: &InstanceInfo,
    from: u64,
    upto: u64,
    last: &[u8],
) -> anyhow::Result<Vec<(u64, Vec<u8>)>> {
    if let Some(endpoint) = e.sub.replay.clone() {
        match replay(&endpoint, from).await {
            Ok(got) if got.first().is_some_and(|(s, _)| *s == from) => {
                w.metrics.engine_stream.with_label_values(&["replayed"]).inc();
                let mut out: Vec<(u64, Vec<u8>)> = got.into_iter().filter(|(s, _)| *s < upto).collect();
                out.push((upto, last.to_vec()));
                // Only a run without holes is applied as such.
                if out.windows(2).all(|p| p[1].0 == p[0].0 + 1) {
                    return Ok(out);
                }
            }
            Ok(_) => tracing::warn!(from, "the engine's replay buffer no longer holds the missed batches"),
            Err(err) => tracing::warn!(error = %format!("{err:#}"), "replay failed"),
        }
    }
    new_lifecycle(w, e, inst).await?;
    Ok(vec![(upto, last.to_vec())])
}

/// What this process knew of the engine is void: a new lifecycle epoch hides every block
/// reported before (they cannot be trusted any more).
async fn new_lifecycle(w: &Worker, e: &mut Engine, inst: &InstanceInfo) -> anyhow::Result<()> {
    e.known.clear();
    w.metrics.engine_stream.with_label_values(&["lifecycle"]).inc();
    report(w, e, inst, lifecycle().to_vec()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored_array(hashes: Vec<Value>, parent: Value, tokens: Vec<u32>, bs: u64) -> Value {
        Value::Array(vec![
            "BlockStored".into(),
            Value::Array(hashes),
            parent,
            Value::Array(tokens.into_iter().map(Value::from).collect()),
            bs.into(),
            Value::Nil,
            "GPU".into(),
        ])
    }

    fn encode(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, v).unwrap();
        out
    }

    #[test]
    fn array_and_map_batches_decode_alike_and_hashes_may_be_ints_or_bytes() {
        let digest: Vec<u8> = (0u8..32).collect();
        let arr = Value::Array(vec![
            1.5.into(),
            Value::Array(vec![
                stored_array(vec![Value::from(7u64), Value::Binary(digest.clone())], Value::Nil, vec![1, 2, 3, 4], 2),
                Value::Array(vec!["BlockRemoved".into(), Value::Array(vec![Value::from(-3i64)]), Value::Nil]),
                Value::Array(vec!["AllBlocksCleared".into()]),
                Value::Array(vec!["SomethingNew".into()]),
            ]),
            Value::Nil,
        ]);
        let map = |pairs: Vec<(&str, Value)>| Value::Map(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect());
        let maps = map(vec![
            ("ts", 1.5.into()),
            (
                "events",
                Value::Array(vec![
                    map(vec![
                        ("type", "BlockStored".into()),
                        ("block_hashes", Value::Array(vec![Value::from(7u64), Value::Binary(digest.clone())])),
                        ("token_ids", Value::Array(vec![1u32.into(), 2u32.into(), 3u32.into(), 4u32.into()])),
                        ("block_size", 2u64.into()),
                        ("medium", "GPU".into()),
                        ("extra_keys", Value::Nil),
                    ]),
                    map(vec![
                        ("type", "BlockRemoved".into()),
                        ("block_hashes", Value::Array(vec![Value::from(-3i64)])),
                    ]),
                    map(vec![("type", "AllBlocksCleared".into())]),
                ]),
            ),
        ]);
        let expected = vec![
            EngineEvent::Stored {
                hashes: vec![7, u64::from_be_bytes(digest[24..].try_into().unwrap())],
                parent: None,
                tokens: vec![1, 2, 3, 4],
                block_size: 2,
                medium: Some("GPU".into()),
                extras: false,
            },
            EngineEvent::Removed { hashes: vec![(-3i64) as u64], medium: None },
            EngineEvent::Cleared,
        ];
        assert_eq!(decode_batch(&encode(&arr)).unwrap(), expected);
        assert_eq!(decode_batch(&encode(&maps)).unwrap(), expected);
        assert!(decode_batch(b"\xc1").is_err());
        assert!(decode_batch(&encode(&Value::from(3))).is_err());
    }

    fn engine(mode: KeyMode) -> Engine {
        let sub = Subscription {
            endpoint: String::new(),
            replay: None,
            topic: String::new(),
            instance: "i".into(),
            host: "h:1".into(),
            tier: "L1P5".into(),
            medium: "GPU".into(),
            key_mode: mode,
            heartbeat_ms: 1000,
        };
        Engine {
            sub,
            storage_type: StorageType::ST_EVENT_REPORT_L1P5,
            known: HashMap::new(),
            next_seq: None,
            applied: Default::default(),
            resync: false,
        }
    }

    fn stored(hashes: Vec<u64>, parent: Option<u64>, tokens: Vec<u32>, medium: &str, extras: bool) -> EngineEvent {
        EngineEvent::Stored { hashes, parent, tokens, block_size: 2, medium: Some(medium.into()), extras }
    }

    fn keys_of(items: &[EventItem]) -> Vec<(ReportEventType, String)> {
        items
            .iter()
            .map(|i| {
                let key = i.block_add.as_ref().map(|a| a.block_key.clone());
                (i.event_type, key.or(i.block_delete.as_ref().map(|d| d.block_key.clone())).unwrap_or_default())
            })
            .collect()
    }

    #[test]
    fn token_mode_skips_what_it_cannot_key_and_deletes_a_block_once_no_medium_holds_it() {
        let inst = InstanceInfo::default();
        let mut e = engine(KeyMode::Tokens);
        let k1 = token_key(0, &[1, 2]);
        // A block shaped by a LoRA or extra keys, or whose parent is unknown: not reported.
        assert!(e.items(&inst, vec![stored(vec![5], None, vec![1, 2], "GPU", true)]).is_empty());
        assert!(e.items(&inst, vec![stored(vec![6], Some(99), vec![1, 2], "GPU", false)]).is_empty());
        // Stored on two media, removed from one: still known for the other's removal.
        let items = e.items(&inst, vec![stored(vec![7], None, vec![1, 2], "GPU", false)]);
        assert_eq!(keys_of(&items), [(ReportEventType::EVENT_BLOCK_ADD, k1.to_string())]);
        e.items(&inst, vec![stored(vec![7], None, vec![1, 2], "CPU", false)]);
        let removed = |e: &mut Engine, m: &str| {
            e.items(&inst, vec![EngineEvent::Removed { hashes: vec![7], medium: Some(m.into()) }])
        };
        assert_eq!(keys_of(&removed(&mut e, "GPU")), [(ReportEventType::EVENT_BLOCK_DELETE, k1.to_string())]);
        assert_eq!(keys_of(&removed(&mut e, "CPU")), [(ReportEventType::EVENT_BLOCK_DELETE, k1.to_string())]);
        assert!(removed(&mut e, "CPU").is_empty(), "forgotten once no medium holds it");
        // Engine mode: the hash is the key, whatever shaped it.
        let mut e = engine(KeyMode::Engine);
        let items = e.items(&inst, vec![stored(vec![u64::MAX], None, vec![], "GPU", true)]);
        assert_eq!(keys_of(&items), [(ReportEventType::EVENT_BLOCK_ADD, "-1".to_string())]);
        // AllBlocksCleared: a new lifecycle replaces what came before in the batch.
        let items = e.items(&inst, vec![stored(vec![3], None, vec![], "GPU", false), EngineEvent::Cleared]);
        let kinds: Vec<_> = items.iter().map(|i| i.event_type).collect();
        assert_eq!(kinds, [ReportEventType::EVENT_HOST_DOWN, ReportEventType::EVENT_NODE_REGISTER]);
    }

    #[test]
    fn token_keys_chain_from_the_parent() {
        let first = token_key(0, &[1, 2]);
        assert_eq!(first, token_key(0, &[1, 2]), "deterministic");
        assert_ne!(token_key(first, &[3, 4]), token_key(0, &[3, 4]), "the parent is part of the key");
        let mut bytes = 0i64.to_le_bytes().to_vec();
        bytes.extend([1u32, 2].iter().flat_map(|t| t.to_le_bytes()));
        assert_eq!(first, xxhash_rust::xxh3::xxh3_64(&bytes) as i64, "the documented layout");
    }
}
