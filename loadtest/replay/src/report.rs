//! What a replay measured, and its final report (text or JSON).
//!
//! The hit rate has the optimizer's definition: **hit blocks / requested blocks**, where a
//! request's hit blocks are the prefix `getCacheLocation` matched and its requested blocks are
//! all of its keys. A request whose read failed still counts its blocks as requested (a failed
//! lookup is a miss to an engine), so errors lower the hit rate instead of hiding from it.

use crate::client::Rpc;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Counters and latency samples, accumulated while replaying.
#[derive(Debug, Default)]
pub struct Stats {
    pub requests: u64,
    pub requested_blocks: u64,
    pub hit_blocks: u64,
    /// Blocks finishWriteCache turned serving.
    pub written_blocks: u64,
    /// Suffix blocks the read missed but startWriteCache found present (a concurrent request was
    /// writing them, or they were serving behind a gap in the prefix).
    pub in_flight_blocks: u64,
    /// Of those, the run right after the matched prefix: blocks the read would have hit had
    /// their writes (another request's, or rarely a deletion in progress) been done — what the
    /// optimizer, inserting at once, counts as hits.
    pub in_flight_prefix_blocks: u64,
    /// Suffix blocks not written because startWriteCache failed (e.g. quota used up).
    pub write_refused_blocks: u64,
    /// Blocks whose bytes could not be written to their file URI.
    pub bytes_failed_blocks: u64,
    /// Requests with at least one failed RPC.
    pub failed_requests: u64,
    latencies_ms: BTreeMap<Rpc, Vec<f64>>,
    errors: BTreeMap<String, u64>,
    /// Largest delay between a request's scheduled and actual start (paced replays).
    pub max_lag_ms: f64,
    /// Times back-pressure held a request back, and for how long in all.
    pub backpressure_pauses: u64,
    pub backpressure_paused_ms: f64,
}

impl Stats {
    pub(crate) fn read(&mut self, took: Duration, requested: u64, hit: u64) {
        self.requests += 1;
        self.requested_blocks += requested;
        self.hit_blocks += hit;
        self.sample(Rpc::GetCacheLocation, took);
    }

    pub(crate) fn started(&mut self, took: Duration, present: (u64, u64), _new: u64) {
        self.in_flight_blocks += present.0;
        self.in_flight_prefix_blocks += present.1;
        self.sample(Rpc::StartWriteCache, took);
    }

    pub(crate) fn finished(&mut self, took: Duration, written: u64) {
        self.written_blocks += written;
        self.sample(Rpc::FinishWriteCache, took);
    }

    /// A failed RPC; `requested` is the request's block count when the failure was its read.
    pub(crate) fn failed(&mut self, rpc: Rpc, took: Duration, kind: &str, requested: u64) {
        if rpc == Rpc::GetCacheLocation {
            self.requests += 1;
            self.requested_blocks += requested;
        }
        self.failed_requests += 1;
        self.sample(rpc, took);
        *self.errors.entry(format!("{}/{kind}", rpc.name())).or_default() += 1;
    }

    fn sample(&mut self, rpc: Rpc, took: Duration) {
        self.latencies_ms.entry(rpc).or_default().push(took.as_secs_f64() * 1000.0);
    }

    /// The hit rate so far.
    pub fn hit_rate(&self) -> f64 {
        if self.requested_blocks == 0 { 0.0 } else { self.hit_blocks as f64 / self.requested_blocks as f64 }
    }

    /// The final report.
    pub fn report(&self, context: ReportContext) -> Report {
        let latency_ms = self
            .latencies_ms
            .iter()
            .map(|(rpc, samples)| {
                let mut s = samples.clone();
                s.sort_by(|a, b| a.total_cmp(b));
                let p = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
                (
                    rpc.name().to_string(),
                    Latency { calls: s.len() as u64, p50: p(0.5), p90: p(0.9), p99: p(0.99), max: p(1.0) },
                )
            })
            .collect();
        Report {
            context,
            requests: self.requests,
            requested_blocks: self.requested_blocks,
            hit_blocks: self.hit_blocks,
            hit_rate: self.hit_rate(),
            written_blocks: self.written_blocks,
            in_flight_blocks: self.in_flight_blocks,
            in_flight_prefix_blocks: self.in_flight_prefix_blocks,
            write_refused_blocks: self.write_refused_blocks,
            bytes_failed_blocks: self.bytes_failed_blocks,
            failed_requests: self.failed_requests,
            max_lag_ms: self.max_lag_ms,
            backpressure_pauses: self.backpressure_pauses,
            backpressure_paused_ms: self.backpressure_paused_ms,
            latency_ms,
            errors: self.errors.clone(),
        }
    }
}

/// Latency percentiles of one RPC, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub calls: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// What the replay was, and what the optimizer predicts for it.
#[derive(Debug, Clone, Serialize)]
pub struct ReportContext {
    pub trace: String,
    pub format: String,
    /// Requests of the trace replayed (the first ones in replay order).
    pub trace_requests: usize,
    pub distinct_blocks: usize,
    /// `None` = as fast as possible.
    pub speedup: Option<f64>,
    pub concurrency: usize,
    pub wall_seconds: f64,
    /// The watermark in blocks, when known (setup mode or `--capacity-blocks`).
    pub capacity_blocks: Option<u64>,
    /// The optimizer's hit rate for the same requests at `capacity_blocks`, by policy.
    pub predicted: BTreeMap<String, f64>,
    /// The unbounded-cache hit rate of the same requests (only compulsory misses).
    pub max_hit_rate: f64,
}

/// The final report; `--json` prints it as is.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub context: ReportContext,
    pub requests: u64,
    pub requested_blocks: u64,
    pub hit_blocks: u64,
    pub hit_rate: f64,
    pub written_blocks: u64,
    pub in_flight_blocks: u64,
    pub in_flight_prefix_blocks: u64,
    pub write_refused_blocks: u64,
    pub bytes_failed_blocks: u64,
    pub failed_requests: u64,
    pub max_lag_ms: f64,
    pub backpressure_pauses: u64,
    pub backpressure_paused_ms: f64,
    pub latency_ms: BTreeMap<String, Latency>,
    /// Failed calls by `rpc/kind`.
    pub errors: BTreeMap<String, u64>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.context;
        let pace = c.speedup.map_or("as fast as possible".to_string(), |s| format!("speed-up {s}×"));
        writeln!(
            f,
            "replayed {} requests of {} ({}), {pace}, {} concurrent, in {:.1} s",
            self.requests, c.trace, c.format, c.concurrency, c.wall_seconds
        )?;
        writeln!(
            f,
            "hit rate: {:.2}% ({} hit / {} requested blocks); unbounded cache: {:.2}%",
            100.0 * self.hit_rate,
            self.hit_blocks,
            self.requested_blocks,
            100.0 * c.max_hit_rate
        )?;
        if let Some(cap) = c.capacity_blocks {
            let preds: Vec<String> = c
                .predicted
                .iter()
                .map(|(p, r)| format!("{p} {:.2}% ({:+.2} pts)", 100.0 * r, 100.0 * (self.hit_rate - r)))
                .collect();
            writeln!(f, "optimizer at {cap} blocks: {}", preds.join(", "))?;
        }
        writeln!(
            f,
            "blocks written {}, in flight elsewhere {}, refused {}, bytes failed {}; failed requests {}; max lag {:.0} ms",
            self.written_blocks,
            self.in_flight_blocks,
            self.write_refused_blocks,
            self.bytes_failed_blocks,
            self.failed_requests,
            self.max_lag_ms
        )?;
        if self.backpressure_pauses > 0 {
            writeln!(
                f,
                "back-pressure: {} pauses, {:.1} s in all",
                self.backpressure_pauses,
                self.backpressure_paused_ms / 1000.0
            )?;
        }
        writeln!(f, "{:<18} {:>8} {:>9} {:>9} {:>9} {:>9}", "rpc (ms)", "calls", "p50", "p90", "p99", "max")?;
        for (rpc, l) in &self.latency_ms {
            writeln!(f, "{rpc:<18} {:>8} {:>9.3} {:>9.3} {:>9.3} {:>9.3}", l.calls, l.p50, l.p90, l.p99, l.max)?;
        }
        if self.errors.is_empty() {
            writeln!(f, "errors: none")?;
        } else {
            for (kind, n) in &self.errors {
                writeln!(f, "error {kind}: {n}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_read_counts_its_blocks_as_requested_and_missed() {
        let mut s = Stats::default();
        s.read(Duration::from_millis(1), 10, 4);
        s.failed(Rpc::GetCacheLocation, Duration::from_millis(1), "timeout", 10);
        assert_eq!((s.requests, s.requested_blocks, s.hit_blocks), (2, 20, 4));
        assert!((s.hit_rate() - 0.2).abs() < 1e-12);
        let r = s.report(ReportContext {
            trace: "t".into(),
            format: "mooncake".into(),
            trace_requests: 2,
            distinct_blocks: 10,
            speedup: None,
            concurrency: 1,
            wall_seconds: 1.0,
            capacity_blocks: None,
            predicted: BTreeMap::new(),
            max_hit_rate: 0.5,
        });
        assert_eq!(r.errors["getCacheLocation/timeout"], 1);
        assert_eq!(r.latency_ms["getCacheLocation"].calls, 2);
    }
}
