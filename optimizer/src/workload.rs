//! Synthetic workloads (`kvcm-optimizer generate`): traces of the shapes real inference fleets
//! see, so that a policy is chosen on several workloads and not fitted to one trace.
//!
//! Every workload is a list of requests (arrival time, prompt blocks), written in the Mooncake
//! trace format (`timestamp` in ms, `hash_ids`), so every other command — and `kvcm-replay`
//! against a live kvcm — reads it unchanged. Block ids are prefix-chained like real hashed
//! blocks: a block's id stands for its whole prefix, so two prompts share an id exactly where
//! they share a prefix. Generation is deterministic: the same kind, size and seed give the same
//! file.
//!
//! | kind | what it models |
//! |---|---|
//! | `chat` | multi-turn conversations: a shared system prompt (one of a few apps, Zipf-popular, 4–64 blocks), then turns that each resend the conversation so far plus a new user message, after a think time (exponential, mean 60 s) |
//! | `agent` | tool-calling agent loops: many fast turns (think 1–5 s), each appending a small tool result to a long, growing context |
//! | `documents` | one-off long documents (32–256 blocks) behind a short shared instruction, each asked about once, a few a second time soon after |
//! | `bursty` | `chat` whose conversation arrivals come in bursts (rate ×10 for a tenth of the time) |
//! | `mix` | a fleet serving all of the above at once |

use std::io::Write;

use anyhow::bail;

/// A workload's kind (see the module table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadKind {
    Chat,
    Agent,
    Documents,
    Bursty,
    Mix,
}

impl WorkloadKind {
    /// Every kind, in report order.
    pub const ALL: [WorkloadKind; 5] =
        [WorkloadKind::Chat, WorkloadKind::Agent, WorkloadKind::Documents, WorkloadKind::Bursty, WorkloadKind::Mix];

    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::Chat => "chat",
            WorkloadKind::Agent => "agent",
            WorkloadKind::Documents => "documents",
            WorkloadKind::Bursty => "bursty",
            WorkloadKind::Mix => "mix",
        }
    }
}

impl std::str::FromStr for WorkloadKind {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        match WorkloadKind::ALL.iter().find(|k| k.name() == s) {
            Some(k) => Ok(*k),
            None => bail!("unknown workload '{s}': use chat, agent, documents, bursty or mix"),
        }
    }
}

/// One generated request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub time_ms: u64,
    pub blocks: Vec<u64>,
}

/// Prefix-chained block ids: the id of a block is a hash of its parent's id and its own content
/// (`salt`), so equal prefixes give equal ids and different ones never collide in practice.
fn chain(parent: u64, salt: u64) -> u64 {
    // splitmix64 of the pair: cheap, well mixed, deterministic.
    let mut z = parent ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    // 53 bits: a non-negative id every JSON reader keeps exact (traces are read as i64).
    (z ^ (z >> 31)) & ((1 << 53) - 1)
}

/// Draws from the generator's own seeded source.
struct Draw(fastrand::Rng);

impl Draw {
    fn exp_ms(&mut self, mean_ms: f64) -> u64 {
        (-(1.0 - self.0.f64()).ln() * mean_ms) as u64
    }
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        self.0.usize(lo..=hi)
    }
    /// Zipf(1) over `0..n`: rank r with probability ∝ 1/(r+1).
    fn zipf(&mut self, n: usize) -> usize {
        let h: f64 = (1..=n).map(|k| 1.0 / k as f64).sum();
        let mut u = self.0.f64() * h;
        for k in 1..=n {
            u -= 1.0 / k as f64;
            if u <= 0.0 {
                return k - 1;
            }
        }
        n - 1
    }
    fn chance(&mut self, p: f64) -> bool {
        self.0.f64() < p
    }
}

/// A conversation or agent session being replayed into requests.
struct Session {
    /// The blocks sent so far (the next turn resends all of them).
    context: Vec<u64>,
    turns_left: usize,
    next_ms: u64,
}

/// System prompts shared by sessions: `n` apps, sizes from `sizes`, blocks chained from a root.
fn system_prompts(d: &mut Draw, n: usize, sizes: &[usize], namespace: u64) -> Vec<Vec<u64>> {
    (0..n)
        .map(|app| {
            let len = sizes[d.range(0, sizes.len() - 1)];
            let mut id = chain(namespace, app as u64);
            (0..len)
                .map(|j| {
                    id = chain(id, j as u64);
                    id
                })
                .collect()
        })
        .collect()
}

/// Appends `n` new blocks to `context` (new content: unique salts).
fn extend(d: &mut Draw, context: &mut Vec<u64>, n: usize) {
    for _ in 0..n {
        let parent = context.last().copied().unwrap_or(0);
        context.push(chain(parent, d.0.u64(..)));
    }
}

/// The shape of a session-based workload.
struct SessionShape {
    namespace: u64,
    apps: usize,
    prompt_sizes: &'static [usize],
    /// Mean gap between session starts.
    arrival_ms: f64,
    turns: (usize, usize),
    think_ms: (u64, u64),
    /// Blocks added per turn: (lo, hi).
    added: (usize, usize),
    /// The model's context, in blocks: a session that reaches it ends.
    window: usize,
    bursty: bool,
}

fn sessions(d: &mut Draw, shape: &SessionShape, requests: usize) -> Vec<Request> {
    let prompts = system_prompts(d, shape.apps, shape.prompt_sizes, shape.namespace);
    let mut out = Vec::with_capacity(requests);
    let mut live: Vec<Session> = Vec::new();
    let mut clock;
    let mut next_start = 0u64;
    while out.len() < requests {
        // The next event: a new session or the earliest live session's next turn.
        let earliest = live.iter().enumerate().min_by_key(|(_, s)| s.next_ms).map(|(i, s)| (i, s.next_ms));
        match earliest {
            Some((i, at)) if at <= next_start => {
                clock = at;
                let s = &mut live[i];
                let (lo, hi) = shape.added;
                let n = d.range(lo, hi);
                extend(d, &mut s.context, n);
                out.push(Request { time_ms: clock, blocks: s.context.clone() });
                s.turns_left = if s.context.len() >= shape.window { 0 } else { s.turns_left - 1 };
                let (tlo, thi) = shape.think_ms;
                s.next_ms = clock + tlo + d.exp_ms((thi - tlo) as f64);
                if s.turns_left == 0 {
                    live.swap_remove(i);
                }
            }
            _ => {
                clock = next_start;
                let app = d.zipf(prompts.len());
                let (lo, hi) = shape.turns;
                live.push(Session { context: prompts[app].clone(), turns_left: d.range(lo, hi), next_ms: clock });
                let rate = if shape.bursty && (clock / 60_000) % 10 == 0 { 10.0 } else { 1.0 };
                next_start = clock + d.exp_ms(shape.arrival_ms / rate).max(1);
            }
        }
    }
    out
}

fn documents(d: &mut Draw, requests: usize, namespace: u64) -> Vec<Request> {
    let instructions = system_prompts(d, 3, &[2, 4, 8], namespace);
    let mut out: Vec<Request> = Vec::with_capacity(requests);
    let mut clock = 0u64;
    let mut again: Vec<(u64, Vec<u64>)> = Vec::new();
    while out.len() < requests {
        clock += d.exp_ms(500.0).max(1);
        // A follow-up question on a document read a little earlier, or a new document.
        if let Some(pos) = again.iter().position(|(at, _)| *at <= clock) {
            let (_, mut blocks) = again.swap_remove(pos);
            let n = d.range(1, 2);
            extend(d, &mut blocks, n);
            out.push(Request { time_ms: clock, blocks });
            continue;
        }
        let mut blocks = instructions[d.zipf(instructions.len())].clone();
        let n = d.range(32, 256);
        extend(d, &mut blocks, n);
        if d.chance(0.2) {
            again.push((clock + d.exp_ms(30_000.0), blocks.clone()));
        }
        out.push(Request { time_ms: clock, blocks });
    }
    out
}

const CHAT: SessionShape = SessionShape {
    namespace: 1,
    apps: 8,
    prompt_sizes: &[4, 8, 16, 32, 64],
    arrival_ms: 2_000.0,
    turns: (1, 8),
    think_ms: (5_000, 60_000),
    added: (2, 12),
    window: 2_048,
    bursty: false,
};

const AGENT: SessionShape = SessionShape {
    namespace: 2,
    apps: 4,
    prompt_sizes: &[16, 32, 64],
    arrival_ms: 8_000.0,
    turns: (10, 30),
    think_ms: (1_000, 5_000),
    added: (1, 4),
    window: 4_096,
    bursty: false,
};

/// Generates `requests` requests of `kind` from `seed`, in time order.
pub fn generate(kind: WorkloadKind, requests: usize, seed: u64) -> Vec<Request> {
    let mut d = Draw(fastrand::Rng::with_seed(seed));
    let mut out = match kind {
        WorkloadKind::Chat => sessions(&mut d, &CHAT, requests),
        WorkloadKind::Agent => sessions(&mut d, &AGENT, requests),
        WorkloadKind::Documents => documents(&mut d, requests, 3),
        WorkloadKind::Bursty => sessions(&mut d, &SessionShape { namespace: 4, bursty: true, ..CHAT }, requests),
        WorkloadKind::Mix => {
            let quarter = requests.div_ceil(4);
            let mut all = sessions(&mut d, &CHAT, quarter);
            all.extend(sessions(&mut d, &AGENT, quarter));
            all.extend(documents(&mut d, quarter, 3));
            all.extend(sessions(&mut d, &SessionShape { namespace: 4, bursty: true, ..CHAT }, quarter));
            all
        }
    };
    out.sort_by_key(|r| r.time_ms); // stable: ties keep generation order
    out.truncate(requests);
    out
}

/// Writes requests as Mooncake-format JSON lines (`timestamp` ms, `hash_ids`).
pub fn write_mooncake(requests: &[Request], out: &mut impl Write) -> std::io::Result<()> {
    for r in requests {
        let ids: Vec<String> = r.blocks.iter().map(|b| b.to_string()).collect();
        writeln!(out, "{{\"timestamp\":{},\"hash_ids\":[{}]}}", r.time_ms, ids.join(","))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_deterministic_and_time_ordered() {
        for kind in WorkloadKind::ALL {
            let a = generate(kind, 2_000, 7);
            assert_eq!(a, generate(kind, 2_000, 7), "{}", kind.name());
            assert_ne!(a, generate(kind, 2_000, 8), "{}", kind.name());
            assert_eq!(a.len(), 2_000);
            assert!(a.windows(2).all(|w| w[0].time_ms <= w[1].time_ms), "{}", kind.name());
            assert!(a.iter().all(|r| !r.blocks.is_empty()), "{}", kind.name());
        }
    }

    #[test]
    fn conversations_resend_their_prefix_and_share_system_prompts() {
        let reqs = generate(WorkloadKind::Chat, 5_000, 1);
        // Some request's full block list is a strict prefix of a later one's (a next turn).
        let later_turn = reqs.iter().enumerate().take(300).any(|(i, r)| {
            reqs[i + 1..].iter().any(|s| s.blocks.len() > r.blocks.len() && s.blocks.starts_with(&r.blocks))
        });
        assert!(later_turn, "no conversation turn resent an earlier prompt");
        // The most popular system prompt's first block starts many requests.
        let mut firsts = std::collections::HashMap::new();
        for r in &reqs {
            *firsts.entry(r.blocks[0]).or_insert(0) += 1;
        }
        assert!(firsts.len() <= 8, "{} distinct first blocks", firsts.len());
        assert!(firsts.values().max().unwrap() * 4 > reqs.len(), "{firsts:?}");
    }

    #[test]
    fn documents_are_mostly_read_once() {
        let reqs = generate(WorkloadKind::Documents, 3_000, 1);
        let mut seen = std::collections::HashMap::new();
        for r in &reqs {
            for b in &r.blocks {
                *seen.entry(*b).or_insert(0u32) += 1;
            }
        }
        let once = seen.values().filter(|n| **n == 1).count();
        assert!(once * 10 > seen.len() * 7, "{once} of {} blocks read once", seen.len());
    }

    #[test]
    fn the_mooncake_format_is_what_the_trace_reader_reads() {
        let reqs = generate(WorkloadKind::Agent, 50, 3);
        let mut text = Vec::new();
        write_mooncake(&reqs, &mut text).unwrap();
        let line = String::from_utf8(text).unwrap();
        let first: serde_json::Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
        assert_eq!(first["timestamp"], reqs[0].time_ms);
        assert_eq!(first["hash_ids"].as_array().unwrap().len(), reqs[0].blocks.len());
    }
}
