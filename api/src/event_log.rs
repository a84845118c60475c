//! The event log (DESIGN §6): one JSON line per getCacheLocation / startWriteCache /
//! finishWriteCache, for kvcm-optimizer to replay. Off unless `event_log_path` is set.
//!
//! Requests never wait for the disk: events go through a bounded channel to a writer thread;
//! when the channel is full (the disk cannot keep up) events are dropped and counted in
//! `kvcm_event_log_dropped_total`. The file is rotated at `event_log_max_bytes`: `path` →
//! `path.1` → … → `path.<max_files>` (the oldest is removed). A stopping frontend calls
//! [`EventLog::sync`] once it has answered its last request, so that every queued event is in
//! the file (written and flushed to the OS; not fsynced) before the process exits: the writer
//! thread would otherwise die with it.

use kvcm_core::wire::WireBlockMask;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};

/// One line of the log: what kvcm-optimizer's `--format kvcm` reads (`source`, `type`,
/// `trigger_time_us`, `keys`; optimizer/src/trace/event_log.rs) and the request's other fields.
/// Every event has all nine fields; those its type does not have are empty (`""`, `0`, `[]`,
/// `null`).
#[derive(Debug, Serialize)]
pub struct Event<'a> {
    /// The instance.
    pub source: &'a str,
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// When the frontend took the request (µs since the epoch: [`now_us`]).
    pub trigger_time_us: u64,
    pub query_type: &'a str,
    pub keys: &'a [i64],
    pub block_mask: Option<&'a WireBlockMask>,
    pub sw_size: i32,
    pub write_session_id: &'a str,
    pub success_blocks: Option<&'a WireBlockMask>,
}

/// The requests the log records.
#[derive(Debug, Clone, Copy, Serialize)]
pub enum EventKind {
    #[serde(rename = "getCacheLocation")]
    GetCacheLocation,
    #[serde(rename = "startWriteCache")]
    StartWriteCache,
    #[serde(rename = "finishWriteCache")]
    FinishWriteCache,
}

impl<'a> Event<'a> {
    /// An event of `kind` for `source` now, every other field empty.
    pub fn new(kind: EventKind, source: &'a str) -> Event<'a> {
        Event {
            source,
            kind,
            trigger_time_us: now_us(),
            query_type: "",
            keys: &[],
            block_mask: None,
            sw_size: 0,
            write_session_id: "",
            success_blocks: None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct EventLog {
    tx: SyncSender<Message>,
    dropped: prometheus::IntCounter,
}

/// What the writer thread is sent.
#[derive(Debug)]
enum Message {
    Line(String),
    /// Write and flush everything queued before this, then answer whether all of it was.
    Sync(SyncSender<bool>),
}

impl EventLog {
    /// Opens (appends to) the log and starts its writer thread.
    pub fn open(
        path: &str,
        max_bytes: u64,
        max_files: u32,
        dropped: prometheus::IntCounter,
    ) -> std::io::Result<EventLog> {
        let path = PathBuf::from(path);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let size = file.metadata()?.len();
        let (tx, rx) = sync_channel::<Message>(65536);
        std::thread::Builder::new().name("kvcm-event-log".into()).spawn(move || {
            let mut w = Writer { path, max_bytes, max_files, out: BufWriter::new(file), size, failed: false };
            while let Ok(first) = rx.recv() {
                // Drain what is queued, then flush once; a sync flushes and answers at once.
                let mut next = Some(first);
                while let Some(message) = next {
                    match message {
                        Message::Line(line) => w.write(&line),
                        Message::Sync(done) => {
                            let flushed = w.out.flush().is_ok();
                            let _ = done.send(flushed && !std::mem::take(&mut w.failed));
                        }
                    }
                    next = rx.try_recv().ok();
                }
                let _ = w.out.flush();
            }
            let _ = w.out.flush();
        })?;
        Ok(EventLog { tx, dropped })
    }

    /// Queues one event (rendered here, as one JSON line); never blocks.
    pub fn emit(&self, event: &impl Serialize) {
        let Ok(line) = serde_json::to_string(event) else { return self.dropped.inc() };
        match self.tx.try_send(Message::Line(line)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => self.dropped.inc(),
        }
    }

    /// Blocks, for at most `bound`, until every event queued before this call is written and
    /// flushed to the file; whether it was (false also when a write since the last sync
    /// failed). A full queue is waited for too: this is for a stopping frontend, whose requests
    /// no longer emit.
    pub fn sync(&self, bound: std::time::Duration) -> bool {
        let (done, answer) = sync_channel(1);
        let deadline = std::time::Instant::now() + bound;
        let mut message = Message::Sync(done);
        loop {
            match self.tx.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(back)) => {
                    if std::time::Instant::now() >= deadline {
                        return false;
                    }
                    message = back;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        }
        answer.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())).unwrap_or(false)
    }
}

struct Writer {
    path: PathBuf,
    max_bytes: u64,
    max_files: u32,
    out: BufWriter<File>,
    size: u64,
    /// A line could not be written since the last sync.
    failed: bool,
}

impl Writer {
    fn write(&mut self, line: &str) {
        if self.size + line.len() as u64 + 1 > self.max_bytes && self.size > 0 {
            self.rotate();
        }
        if writeln!(self.out, "{line}").is_ok() {
            self.size += line.len() as u64 + 1;
        } else {
            self.failed = true;
        }
    }

    fn rotate(&mut self) {
        let _ = self.out.flush();
        let name = |i: u32| PathBuf::from(format!("{}.{i}", self.path.display()));
        let _ = std::fs::remove_file(name(self.max_files));
        for i in (1..self.max_files).rev() {
            let _ = std::fs::rename(name(i), name(i + 1));
        }
        if self.max_files > 0 {
            let _ = std::fs::rename(&self.path, name(1));
        } else {
            let _ = std::fs::remove_file(&self.path);
        }
        match OpenOptions::new().create(true).append(true).open(&self.path) {
            Ok(f) => {
                self.out = BufWriter::new(f);
                self.size = 0;
            }
            Err(e) => tracing::error!(error = %e, path = %self.path.display(), "cannot reopen the event log"),
        }
    }
}

/// Microseconds since the epoch.
pub fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sync` returns once every event emitted before it is in the file. The writer is made slow
    /// on purpose — a 1-byte `max_bytes` rotates at every line, renaming 20 files — so that
    /// 500 events emitted at once are far from written when the last `emit` returns.
    #[test]
    fn sync_returns_once_every_queued_event_is_in_the_file() {
        let dir = std::env::temp_dir().join(format!("kvcm-events-{}", fastrand::u64(..)));
        let path = dir.join("events.jsonl");
        let log =
            EventLog::open(path.to_str().unwrap(), 1, 20, prometheus::IntCounter::new("d", "d").unwrap()).unwrap();
        for i in 0..500 {
            log.emit(&serde_json::json!({"i": i}));
        }
        assert!(log.sync(std::time::Duration::from_secs(30)));
        let newest = std::fs::read_to_string(&path).unwrap();
        assert_eq!(newest.trim(), r#"{"i":499}"#);
        let oldest = std::fs::read_to_string(dir.join("events.jsonl.20")).unwrap();
        assert_eq!(oldest.trim(), r#"{"i":479}"#);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_log_rotates_and_keeps_max_files() {
        let dir = std::env::temp_dir().join(format!("kvcm-events-{}", fastrand::u64(..)));
        let path = dir.join("events.jsonl");
        let log =
            EventLog::open(path.to_str().unwrap(), 4096, 2, prometheus::IntCounter::new("d", "d").unwrap()).unwrap();
        for i in 0..300 {
            log.emit(&serde_json::json!({"i": i, "pad": "x".repeat(40)}));
        }
        drop(log);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let last_line =
            |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default().lines().last().map(String::from);
        while last_line(&path).is_none_or(|l| !l.contains("\"i\":299")) {
            assert!(std::time::Instant::now() < deadline, "writer did not catch up");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(dir.join("events.jsonl.1").exists() && dir.join("events.jsonl.2").exists());
        assert!(!dir.join("events.jsonl.3").exists());
        for f in ["events.jsonl", "events.jsonl.1", "events.jsonl.2"] {
            let text = std::fs::read_to_string(dir.join(f)).unwrap();
            assert!(text.len() <= 4096, "{f} is {} bytes", text.len());
            for line in text.lines() {
                serde_json::from_str::<serde_json::Value>(line).unwrap();
            }
        }
    }
}
