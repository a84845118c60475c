//! The event log (DESIGN §6): one JSON line per getCacheLocation / startWriteCache /
//! finishWriteCache, for kvcm-optimizer to replay. Off unless `event_log_path` is set.
//!
//! Requests never wait for the disk: events go through a bounded channel to a writer thread;
//! when the channel is full (the disk cannot keep up) events are dropped and counted in
//! `kvcm_event_log_dropped_total`. The file is rotated at `event_log_max_bytes`: `path` →
//! `path.1` → … → `path.<max_files>` (the oldest is removed).

use serde_json::Value;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};

#[derive(Debug, Clone)]
pub struct EventLog {
    tx: SyncSender<String>,
    dropped: prometheus::IntCounter,
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
        let (tx, rx) = sync_channel::<String>(65536);
        std::thread::Builder::new().name("kvcm-event-log".into()).spawn(move || {
            let mut w = Writer { path, max_bytes, max_files, out: BufWriter::new(file), size };
            while let Ok(line) = rx.recv() {
                w.write(&line);
                // Drain what is queued, then flush once.
                while let Ok(more) = rx.try_recv() {
                    w.write(&more);
                }
                let _ = w.out.flush();
            }
            let _ = w.out.flush();
        })?;
        Ok(EventLog { tx, dropped })
    }

    /// Queues one event; never blocks.
    pub fn emit(&self, event: Value) {
        match self.tx.try_send(event.to_string()) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => self.dropped.inc(),
        }
    }
}

struct Writer {
    path: PathBuf,
    max_bytes: u64,
    max_files: u32,
    out: BufWriter<File>,
    size: u64,
}

impl Writer {
    fn write(&mut self, line: &str) {
        if self.size + line.len() as u64 + 1 > self.max_bytes && self.size > 0 {
            self.rotate();
        }
        if writeln!(self.out, "{line}").is_ok() {
            self.size += line.len() as u64 + 1;
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

    #[test]
    fn the_log_rotates_and_keeps_max_files() {
        let dir = std::env::temp_dir().join(format!("kvcm-events-{}", fastrand::u64(..)));
        let path = dir.join("events.jsonl");
        let log =
            EventLog::open(path.to_str().unwrap(), 4096, 2, prometheus::IntCounter::new("d", "d").unwrap()).unwrap();
        for i in 0..300 {
            log.emit(serde_json::json!({"i": i, "pad": "x".repeat(40)}));
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
                serde_json::from_str::<Value>(line).unwrap();
            }
        }
    }
}
