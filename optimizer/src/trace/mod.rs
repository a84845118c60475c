//! Access traces: reading them and holding them in replay order.
//!
//! A trace is a list of requests, each a timestamp and an ordered sequence of block keys (the
//! prompt's blocks, first block first). Three formats are read, one JSON object per line:
//!
//! * [`TraceFormat::Mooncake`] — `timestamp` (ms), `hash_ids` (one id per 512-token block);
//!   `input_length`, `output_length` and any other field are ignored.
//! * [`TraceFormat::Bailian`] — Qwen-Bailian usage traces: `timestamp` (s, may be fractional),
//!   `hash_ids` (one id per 16-token block); `chat_id`, `parent_chat_id`, `type`, `turn` and the
//!   lengths are ignored, because the conversation structure is already in the prefix-chained ids.
//! * [`TraceFormat::Kvcm`] — kvcm's own event log ([`event_log`]).
//!
//! Reading is streaming: lines are parsed one at a time from a buffered reader, and only the
//! interned form is kept (4 bytes per block access, 12 bytes per request), never the file text.
//! Block keys are interned into dense [`BlockId`]s `0..distinct_blocks` so that policies can use
//! plain vectors instead of hash maps on the hot path. Keys are namespaced (the event log keeps
//! instances apart); the other formats use one namespace.
//!
//! After reading, requests are put in timestamp order with a stable sort, so ties keep file
//! order. Invariants of a [`Trace`]: `starts` is non-decreasing and has one more entry than there
//! are requests; times are non-decreasing; every id is `< distinct_blocks`; the total number of
//! accesses fits in a `u32` (positions in the flattened access sequence are `u32`).
//!
//! Failures are [`TraceError`]s: I/O errors name the file, malformed input names the line (and
//! what was wrong with it).

pub mod bailian;
pub mod event_log;
pub mod mooncake;

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::str::FromStr;

use rustc_hash::FxHashMap;
use serde::Deserializer;
use serde::de::{self, SeqAccess, Visitor};

/// A dense block id, `0..Trace::distinct_blocks()`, assigned in order of first appearance in
/// the file.
pub type BlockId = u32;

/// Position in the flattened, replay-ordered access sequence. `u32::MAX` means "never".
pub type Position = u32;

/// The largest number of block accesses a trace may hold (positions are `u32`, and `u32::MAX`
/// is reserved for "never accessed again").
pub const MAX_ACCESSES: usize = (u32::MAX - 1) as usize;

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("cannot read trace {path}: {source}")]
    Io {
        /// The path as given.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A line is not a valid record of the chosen format.
    #[error("line {line}: {message}")]
    Malformed {
        /// 1-based line number in the file.
        line: u64,
        /// What is wrong, including the field name where serde knows it.
        message: String,
    },
    /// The trace holds more block accesses than positions can address.
    #[error("trace has more than {max} block accesses; split it (e.g. by time window) and replay the parts")]
    TooLarge {
        /// [`MAX_ACCESSES`].
        max: usize,
    },
}

/// The file format of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceFormat {
    /// Mooncake FAST'25 traces (`timestamp` in ms, 512-token blocks).
    Mooncake,
    /// Qwen-Bailian usage traces (`timestamp` in s, 16-token blocks).
    Bailian,
    /// kvcm's event log (`getCacheLocation` events, `trigger_time_us`).
    Kvcm,
}

impl TraceFormat {
    /// Every format, in the order `--help` lists them.
    pub const ALL: [TraceFormat; 3] = [Self::Mooncake, Self::Bailian, Self::Kvcm];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Mooncake => "mooncake",
            Self::Bailian => "bailian",
            Self::Kvcm => "kvcm",
        }
    }

    /// Tokens per block that the format's producer uses, when the format fixes it.
    pub fn default_tokens_per_block(self) -> Option<u64> {
        match self {
            Self::Mooncake => Some(512),
            Self::Bailian => Some(16),
            // The block size is a property of each kvcm instance, not of the log.
            Self::Kvcm => None,
        }
    }

    /// Parses one line into a request, or `Ok(None)` for a line that is not a request (a blank
    /// line, or an event log entry other than `getCacheLocation`).
    fn parse_line(self, line: &str) -> Result<Option<RawRequest>, serde_json::Error> {
        match self {
            Self::Mooncake => mooncake::parse_line(line).map(Some),
            Self::Bailian => bailian::parse_line(line).map(Some),
            Self::Kvcm => event_log::parse_line(line),
        }
    }
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TraceFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "mooncake" => Ok(Self::Mooncake),
            "bailian" | "qwen-bailian" | "qwen_bailian" => Ok(Self::Bailian),
            "kvcm" | "event-log" | "event_log" => Ok(Self::Kvcm),
            other => Err(format!("unknown trace format `{other}`; expected one of: mooncake, bailian, kvcm")),
        }
    }
}

/// One request as parsed from a line, before interning.
#[derive(Debug, Clone, PartialEq)]
pub struct RawRequest {
    /// Arrival time in microseconds of trace time.
    pub time_us: u64,
    /// Namespace of the keys (the event log's `source`); `None` for single-namespace formats.
    pub namespace: Option<String>,
    /// Block keys, first block first.
    pub keys: Vec<i64>,
}

/// A trace in replay order with interned block ids.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// All requests' blocks, concatenated in replay order.
    blocks: Vec<BlockId>,
    /// Request `i` is `blocks[starts[i]..starts[i + 1]]`.
    starts: Vec<u32>,
    /// Arrival time of request `i`, in microseconds, non-decreasing.
    times_us: Vec<u64>,
    /// Number of distinct blocks.
    distinct: u32,
}

impl Trace {
    /// Reads a trace file of the given format.
    pub fn read(path: &Path, format: TraceFormat) -> Result<Trace, TraceError> {
        let file = File::open(path).map_err(|source| TraceError::Io { path: path.display().to_string(), source })?;
        Self::from_reader(BufReader::with_capacity(1 << 20, file), format).map_err(|e| match e {
            TraceError::Io { source, .. } => TraceError::Io { path: path.display().to_string(), source },
            other => other,
        })
    }

    /// Reads a trace from any buffered reader, one line at a time.
    pub fn from_reader<R: BufRead>(mut reader: R, format: TraceFormat) -> Result<Trace, TraceError> {
        let mut builder = TraceBuilder::default();
        let mut line = String::new();
        let mut line_no = 0u64;
        loop {
            line.clear();
            let read =
                reader.read_line(&mut line).map_err(|source| TraceError::Io { path: "<reader>".to_owned(), source })?;
            if read == 0 {
                break;
            }
            line_no += 1;
            let text = line.trim();
            if text.is_empty() {
                continue;
            }
            let request = format
                .parse_line(text)
                .map_err(|e| TraceError::Malformed { line: line_no, message: format!("not a {format} record: {e}") })?;
            if let Some(request) = request {
                builder.push(request.time_us, request.namespace.as_deref(), &request.keys)?;
            }
        }
        Ok(builder.finish())
    }

    /// Builds a trace from `(time_us, keys)` pairs in one namespace (used by tests and
    /// generators).
    pub fn from_requests<I, K>(requests: I) -> Trace
    where
        I: IntoIterator<Item = (u64, K)>,
        K: AsRef<[i64]>,
    {
        let mut builder = TraceBuilder::default();
        for (time_us, keys) in requests {
            builder.push(time_us, None, keys.as_ref()).expect("a test trace fits in u32 positions");
        }
        builder.finish()
    }

    /// Number of requests.
    pub fn requests(&self) -> usize {
        self.times_us.len()
    }

    /// Total number of block accesses (sum of request lengths).
    pub fn accesses(&self) -> usize {
        self.blocks.len()
    }

    /// Number of distinct blocks.
    pub fn distinct_blocks(&self) -> usize {
        self.distinct as usize
    }

    /// The blocks of request `i`, in order.
    pub fn request(&self, i: usize) -> &[BlockId] {
        &self.blocks[self.starts[i] as usize..self.starts[i + 1] as usize]
    }

    /// Position of request `i`'s first block in [`Trace::flat`].
    pub fn start(&self, i: usize) -> Position {
        self.starts[i]
    }

    /// Arrival time of request `i` in microseconds.
    pub fn time_us(&self, i: usize) -> u64 {
        self.times_us[i]
    }

    /// All accesses in replay order.
    pub fn flat(&self) -> &[BlockId] {
        &self.blocks
    }

    /// Time between the first and the last request, in microseconds.
    pub fn span_us(&self) -> u64 {
        match (self.times_us.first(), self.times_us.last()) {
            (Some(first), Some(last)) => last - first,
            _ => 0,
        }
    }

    /// Length of the longest request, in blocks.
    pub fn max_request_len(&self) -> usize {
        self.starts.windows(2).map(|w| (w[1] - w[0]) as usize).max().unwrap_or(0)
    }

    /// Hit blocks with an unbounded cache: for each request, the longest prefix of blocks seen
    /// before it. This is the compulsory-miss bound: no policy at any capacity does better, and
    /// every policy reaches it once nothing is evicted. For a prefix-chained trace it equals
    /// `accesses - distinct_blocks`.
    pub fn unbounded_hit_blocks(&self) -> u64 {
        let mut seen = vec![false; self.distinct_blocks()];
        let mut hits = 0u64;
        for i in 0..self.requests() {
            let blocks = self.request(i);
            hits += blocks.iter().take_while(|&&b| seen[b as usize]).count() as u64;
            for &b in blocks {
                seen[b as usize] = true;
            }
        }
        hits
    }

    /// Checks whether ids are prefix-chained: every block always follows the same parent (the
    /// block before it in its request, or none at position 0).
    pub fn prefix_chain_check(&self) -> ChainCheck {
        const UNSEEN: u32 = u32::MAX;
        const ROOT: u32 = u32::MAX - 1;
        let mut parent = vec![UNSEEN; self.distinct_blocks()];
        let mut inconsistent = vec![false; self.distinct_blocks()];
        for i in 0..self.requests() {
            let mut previous = ROOT;
            for &b in self.request(i) {
                let slot = &mut parent[b as usize];
                if *slot == UNSEEN {
                    *slot = previous;
                } else if *slot != previous {
                    inconsistent[b as usize] = true;
                }
                previous = b;
            }
        }
        ChainCheck { inconsistent_blocks: inconsistent.iter().filter(|&&x| x).count() }
    }
}

/// The result of [`Trace::prefix_chain_check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainCheck {
    /// Blocks seen after more than one parent; 0 for a prefix-chained trace.
    pub inconsistent_blocks: usize,
}

/// Interns requests into a [`Trace`] as they are read.
#[derive(Debug, Default)]
struct TraceBuilder {
    trace: Trace,
    ids: FxHashMap<(u32, i64), BlockId>,
    namespaces: FxHashMap<String, u32>,
    sorted: bool,
}

impl TraceBuilder {
    fn push(&mut self, time_us: u64, namespace: Option<&str>, keys: &[i64]) -> Result<(), TraceError> {
        if self.trace.blocks.len() + keys.len() > MAX_ACCESSES {
            return Err(TraceError::TooLarge { max: MAX_ACCESSES });
        }
        let ns = match namespace {
            None => 0,
            Some(name) => match self.namespaces.get(name) {
                Some(&ns) => ns,
                None => {
                    let ns = self.namespaces.len() as u32 + 1;
                    self.namespaces.insert(name.to_owned(), ns);
                    ns
                }
            },
        };
        if self.trace.starts.is_empty() {
            self.trace.starts.push(0);
            self.sorted = true;
        }
        if let Some(&last) = self.trace.times_us.last() {
            self.sorted &= last <= time_us;
        }
        for &key in keys {
            let next = self.trace.distinct;
            let id = *self.ids.entry((ns, key)).or_insert(next);
            if id == next {
                self.trace.distinct += 1;
            }
            self.trace.blocks.push(id);
        }
        self.trace.starts.push(self.trace.blocks.len() as u32);
        self.trace.times_us.push(time_us);
        Ok(())
    }

    fn finish(mut self) -> Trace {
        if self.trace.starts.is_empty() {
            self.trace.starts.push(0);
        }
        if self.sorted {
            return self.trace;
        }
        // Stable: requests with equal timestamps keep file order.
        let mut order: Vec<usize> = (0..self.trace.requests()).collect();
        order.sort_by_key(|&i| self.trace.times_us[i]);
        let old = std::mem::take(&mut self.trace);
        let mut trace = Trace {
            blocks: Vec::with_capacity(old.blocks.len()),
            starts: Vec::with_capacity(old.starts.len()),
            times_us: Vec::with_capacity(old.times_us.len()),
            distinct: old.distinct,
        };
        trace.starts.push(0);
        for i in order {
            trace.blocks.extend_from_slice(old.request(i));
            trace.starts.push(trace.blocks.len() as u32);
            trace.times_us.push(old.times_us[i]);
        }
        trace
    }
}

/// A line of a trace whose records are `{timestamp, hash_ids, …}` (Mooncake, Qwen-Bailian):
/// other fields are ignored.
#[derive(serde::Deserialize)]
struct TimedLine {
    timestamp: f64,
    #[serde(deserialize_with = "deserialize_keys")]
    hash_ids: Vec<i64>,
}

/// Parses a `{timestamp, hash_ids}` line whose timestamp counts units of `unit_us` microseconds.
pub(crate) fn parse_timed_line(line: &str, unit_us: f64) -> Result<RawRequest, serde_json::Error> {
    let parsed: TimedLine = serde_json::from_str(line)?;
    let time_us = to_micros(parsed.timestamp, unit_us).map_err(serde::de::Error::custom)?;
    Ok(RawRequest { time_us, namespace: None, keys: parsed.hash_ids })
}

/// Converts a timestamp in `unit_us` microseconds per unit to whole microseconds, rejecting
/// values that are negative or not finite.
pub(crate) fn to_micros(value: f64, unit_us: f64) -> Result<u64, String> {
    if !value.is_finite() || value < 0.0 {
        return Err(format!("timestamp {value} is not a non-negative number"));
    }
    Ok((value * unit_us).round() as u64)
}

/// Deserializes a 64-bit block key given as a JSON number or a decimal string. Unsigned values
/// above `i64::MAX` keep their bit pattern (keys are 64-bit hashes; signedness is notation).
pub(crate) fn deserialize_keys<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<i64>, D::Error> {
    struct Keys;

    impl<'de> Visitor<'de> for Keys {
        type Value = Vec<i64>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an array of 64-bit integer block keys (numbers or decimal strings)")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<i64>, A::Error> {
            let mut keys = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(Key(key)) = seq.next_element()? {
                keys.push(key);
            }
            Ok(keys)
        }
    }

    d.deserialize_seq(Keys)
}

/// One block key, as a number or a string.
struct Key(i64);

impl<'de> serde::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct KeyVisitor;

        impl Visitor<'_> for KeyVisitor {
            type Value = Key;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a 64-bit integer block key (number or decimal string)")
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Key, E> {
                Ok(Key(v))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Key, E> {
                Ok(Key(v as i64))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                v.parse::<i64>()
                    .or_else(|_| v.parse::<u64>().map(|u| u as i64))
                    .map(Key)
                    .map_err(|_| E::custom(format!("block key `{v}` is not a 64-bit integer")))
            }
        }

        d.deserialize_any(KeyVisitor)
    }
}

/// Deserializes an unsigned integer given as a JSON number or a decimal string.
pub(crate) fn deserialize_u64_flexible<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    struct U64Visitor;

    impl Visitor<'_> for U64Visitor {
        type Value = u64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a non-negative integer (number or decimal string)")
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::custom(format!("{v} is negative")))
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
            v.parse().map_err(|_| E::custom(format!("`{v}` is not a non-negative integer")))
        }
    }

    d.deserialize_any(U64Visitor)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mooncake(text: &str) -> Result<Trace, TraceError> {
        Trace::from_reader(text.as_bytes(), TraceFormat::Mooncake)
    }

    #[test]
    fn blocks_are_interned_densely_in_order_of_first_appearance() {
        let trace = mooncake(
            "{\"timestamp\": 0, \"hash_ids\": [70, 71, 72]}\n{\"timestamp\": 5, \"hash_ids\": [70, 71, 90]}\n",
        )
        .unwrap();
        assert_eq!(trace.requests(), 2);
        assert_eq!(trace.accesses(), 6);
        assert_eq!(trace.distinct_blocks(), 4);
        assert_eq!(trace.request(0), &[0, 1, 2]);
        assert_eq!(trace.request(1), &[0, 1, 3]);
        assert_eq!(trace.time_us(1), 5_000);
    }

    #[test]
    fn requests_are_replayed_in_timestamp_order_and_ties_keep_file_order() {
        let trace = mooncake(concat!(
            "{\"timestamp\": 9, \"hash_ids\": [1]}\n",
            "{\"timestamp\": 3, \"hash_ids\": [2]}\n",
            "{\"timestamp\": 9, \"hash_ids\": [3]}\n",
            "{\"timestamp\": 3, \"hash_ids\": [4]}\n",
        ))
        .unwrap();
        // Ids are interned in file order: 1→0, 2→1, 3→2, 4→3.
        let order: Vec<&[BlockId]> = (0..trace.requests()).map(|i| trace.request(i)).collect();
        assert_eq!(order, vec![&[1][..], &[3], &[0], &[2]]);
        let times: Vec<u64> = (0..trace.requests()).map(|i| trace.time_us(i)).collect();
        assert_eq!(times, vec![3_000, 3_000, 9_000, 9_000]);
        assert_eq!(trace.start(2), 2);
    }

    #[test]
    fn a_malformed_line_is_reported_with_its_line_number() {
        let err = mooncake(concat!(
            "{\"timestamp\": 0, \"hash_ids\": [1]}\n",
            "\n",
            "{\"timestamp\": 1, \"hash_ids\": [1, \"x\"]}\n",
        ))
        .unwrap_err();
        let message = err.to_string();
        assert!(message.starts_with("line 3:"), "{message}");
        assert!(message.contains("block key `x`"), "{message}");
    }

    #[test]
    fn a_missing_field_is_named_in_the_error() {
        let err = mooncake("{\"timestamp\": 0}\n").unwrap_err();
        let message = err.to_string();
        assert!(message.starts_with("line 1:"), "{message}");
        assert!(message.contains("hash_ids"), "{message}");
    }

    #[test]
    fn a_missing_file_is_reported_with_its_path() {
        let err = Trace::read(Path::new("/nonexistent/trace.jsonl"), TraceFormat::Mooncake).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/trace.jsonl"), "{err}");
    }

    #[test]
    fn unbounded_hits_count_only_the_seen_prefix() {
        // Request 2 has seen blocks 1 and 3 but not 2, so only its first block is a hit.
        let trace = Trace::from_requests(vec![(0, vec![1, 2, 3]), (1, vec![1, 9, 3])]);
        assert_eq!(trace.unbounded_hit_blocks(), 1);
    }

    #[test]
    fn a_block_seen_after_two_different_parents_breaks_the_prefix_chain() {
        let chained = Trace::from_requests(vec![(0, vec![1, 2, 3]), (1, vec![1, 2, 4])]);
        assert_eq!(chained.prefix_chain_check().inconsistent_blocks, 0);
        let broken = Trace::from_requests(vec![(0, vec![1, 2, 3]), (1, vec![5, 3]), (2, vec![3])]);
        assert_eq!(broken.prefix_chain_check().inconsistent_blocks, 1);
    }

    #[test]
    fn keys_may_be_numbers_or_strings_and_large_unsigned_keys_keep_their_bits() {
        let trace = mooncake(
            "{\"timestamp\": 0, \"hash_ids\": [\"-5\", 18446744073709551611, 7]}\n{\"timestamp\": 0, \"hash_ids\": [-5, \"7\"]}\n",
        )
        .unwrap();
        // "-5" and 18446744073709551611 (= -5 as u64) are the same key.
        assert_eq!(trace.request(0), &[0, 0, 1]);
        assert_eq!(trace.request(1), &[0, 1]);
    }

    #[test]
    fn format_names_parse_and_unknown_names_are_rejected_with_the_choices() {
        for format in TraceFormat::ALL {
            assert_eq!(format.name().parse::<TraceFormat>().unwrap(), format);
        }
        let err = "csv".parse::<TraceFormat>().unwrap_err();
        assert!(err.contains("mooncake, bailian, kvcm"), "{err}");
    }
}
