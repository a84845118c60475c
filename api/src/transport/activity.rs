//! What one connection is doing, as far as its timeouts care: waiting for a request head, running
//! a request, or idle between requests — and since when.
//!
//! [`Activity`] is written by the connection's IO wrapper [`WatchedIo`] (bytes read or written)
//! and by the service wrapper in `connection.rs` (a request starts or ends), and read by the
//! connection's watchdog. All three run on the connection's own task, so nothing contends: the
//! state is an `AtomicU64` only because the connection future must be `Send`. Phase and start
//! time share that one word (phase in the low two bits, microseconds since accept above), so an
//! update is one relaxed store and a reader never sees a phase with another phase's start time.
//!
//! The request path reads the clock at most twice per request (~25 ns each here): at the first
//! byte of a request head on a kept-alive connection, and when response bytes are written. A
//! finished handler stores Idle with an *unknown* start, which the response write that follows
//! at once overwrites; if no write comes, the watchdog uses the time it first sees the unknown
//! start. Either way a recorded start is never earlier than the real one, so no timeout fires
//! early.
//!
//! Transitions (hyper's HTTP/1 serves one request at a time per connection):
//!
//! ```text
//!  accept ──► Head ──(service called: head complete)──► Busy ──(handler done)──► Idle
//!              ▲                                                                  │
//!              └────────────────(first byte of the next request)──────────────────┘
//!  Idle ──(bytes of the response written)──► Idle, start time moved to now
//! ```
//!
//! [`Timeouts::deadline`] turns a phase into a deadline: Head must end within the header-read
//! timeout, Idle within the idle timeout, Busy has none here (`request_timeout_ms` bounds a
//! handler, the body read included, with an HTTP 408). Nothing here fails; the watchdog acts.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Where a connection is in its request cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for (the rest of) a request head: since accept, or since the first byte of the
    /// next request on a kept-alive connection.
    Head,
    /// A request's handler is running.
    Busy,
    /// No request in flight: since the last handler finished, or since the last response byte
    /// was written, whichever is later.
    Idle,
}

const HEAD: u64 = 0;
const BUSY: u64 = 1;
const IDLE: u64 = 2;
/// The start-time field of an Idle phase whose start is not known yet (see the module docs).
const UNKNOWN: u64 = u64::MAX >> 2;

/// One connection's phase and the time it began. See the module docs.
#[derive(Debug)]
pub struct Activity {
    accepted: Instant,
    word: AtomicU64,
}

impl Activity {
    /// A connection accepted at `accepted`: waiting for its first request head since then.
    pub fn new(accepted: Instant) -> Activity {
        Activity { accepted, word: AtomicU64::new(HEAD) }
    }

    /// The current phase and when it began, seen at `now`: an Idle phase whose start is still
    /// unknown is recorded as starting now.
    pub fn phase(&self, now: Instant) -> (Phase, Instant) {
        let word = self.word.load(Relaxed);
        let phase = match word & 3 {
            HEAD => Phase::Head,
            BUSY => Phase::Busy,
            _ => Phase::Idle,
        };
        let micros = match word >> 2 {
            UNKNOWN => self.set(IDLE, now),
            micros => micros,
        };
        (phase, self.accepted + Duration::from_micros(micros))
    }

    /// hyper has parsed a complete request head and calls the service. Busy has no deadline, so
    /// no clock read.
    pub fn request_started(&self) {
        self.word.store(BUSY, Relaxed);
    }

    /// The request's handler has finished (or was dropped). The response write that follows
    /// records when.
    pub fn request_finished(&self) {
        self.word.store(UNKNOWN << 2 | IDLE, Relaxed);
    }

    fn bytes_read(&self) {
        // Only the first byte after an idle period starts the header-read clock; later bytes of
        // the same head must not restart it, or trickling one byte at a time would never end.
        if self.word.load(Relaxed) & 3 == IDLE {
            self.set(HEAD, Instant::now());
        }
    }

    fn bytes_written(&self) {
        // A response still being flushed to a slow reader is not idle time: the idle timeout
        // counts from the last byte that moved.
        if self.word.load(Relaxed) & 3 == IDLE {
            self.set(IDLE, Instant::now());
        }
    }

    /// Records `phase` starting at `at`, rounded up to the microsecond (a recorded start is
    /// never earlier than the real one); returns the recorded microseconds since accept.
    fn set(&self, phase: u64, at: Instant) -> u64 {
        // A connection would have to live 2^62 µs to reach UNKNOWN.
        let micros = (at.saturating_duration_since(self.accepted).as_nanos().div_ceil(1000) as u64).min(UNKNOWN - 1);
        self.word.store(micros << 2 | phase, Relaxed);
        micros
    }
}

/// The two per-connection timeouts of a listener.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub header_read: Duration,
    pub idle: Duration,
}

impl Timeouts {
    /// When a connection in `phase` since `since` must be closed if nothing changes; `None`
    /// while a request runs.
    pub fn deadline(&self, phase: Phase, since: Instant) -> Option<Instant> {
        match phase {
            Phase::Head => Some(since + self.header_read),
            Phase::Idle => Some(since + self.idle),
            Phase::Busy => None,
        }
    }

    /// How long a watchdog may sleep without checking again. A phase that begins while it
    /// sleeps ends no earlier than its start plus the shorter timeout, so waking at least this
    /// often never misses a deadline.
    pub fn recheck(&self) -> Duration {
        self.header_read.min(self.idle)
    }
}

/// The accepted socket, reporting bytes read and written to the connection's [`Activity`].
/// Everything else is passed through, vectored writes included (hyper writes a response head
/// and body with one `writev`).
#[derive(Debug)]
pub struct WatchedIo {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl WatchedIo {
    pub fn new(stream: TcpStream, activity: Arc<Activity>) -> WatchedIo {
        WatchedIo { stream, activity }
    }

    fn wrote(&self, poll: &Poll<io::Result<usize>>) {
        if matches!(poll, Poll::Ready(Ok(n)) if *n > 0) {
            self.activity.bytes_written();
        }
    }
}

impl AsyncRead for WatchedIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.bytes_read();
        }
        poll
    }
}

impl AsyncWrite for WatchedIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.wrote(&poll);
        poll
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.wrote(&poll);
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timeouts = Timeouts { header_read: Duration::from_millis(100), idle: Duration::from_millis(1000) };

    #[test]
    fn a_new_connection_must_send_its_head_within_the_header_read_timeout_from_accept() {
        let accepted = Instant::now();
        let a = Activity::new(accepted);
        assert_eq!(a.phase(Instant::now()), (Phase::Head, accepted));
        assert_eq!(T.deadline(Phase::Head, accepted), Some(accepted + T.header_read));
    }

    #[test]
    fn a_running_request_has_no_deadline_and_its_response_write_starts_the_idle_clock() {
        let a = Activity::new(Instant::now());
        a.request_started();
        let (phase, since) = a.phase(Instant::now());
        assert_eq!(phase, Phase::Busy);
        assert_eq!(T.deadline(phase, since), None);
        a.request_finished();
        let before = Instant::now();
        a.bytes_written();
        let (phase, since) = a.phase(Instant::now());
        assert_eq!(phase, Phase::Idle);
        assert!(since >= before - Duration::from_micros(1), "idle since the response was written");
        assert_eq!(T.deadline(phase, since), Some(since + T.idle));
    }

    #[test]
    fn an_idle_start_nobody_recorded_is_taken_as_when_the_watchdog_first_sees_it() {
        let a = Activity::new(Instant::now());
        a.request_started();
        a.request_finished();
        let seen = Instant::now() + Duration::from_millis(5);
        let (phase, since) = a.phase(seen);
        assert_eq!(phase, Phase::Idle);
        assert!(since >= seen && since - seen < Duration::from_micros(1), "{since:?} {seen:?}");
        assert_eq!(a.phase(seen + Duration::from_secs(1)), (Phase::Idle, since), "recorded once");
    }

    #[test]
    fn only_the_first_byte_after_idle_starts_the_header_clock() {
        let a = Activity::new(Instant::now());
        a.request_started();
        a.bytes_read(); // body bytes of the running request change nothing
        assert_eq!(a.phase(Instant::now()).0, Phase::Busy);
        a.request_finished();
        a.bytes_read();
        let (phase, since) = a.phase(Instant::now());
        assert_eq!(phase, Phase::Head);
        std::thread::sleep(Duration::from_millis(2));
        a.bytes_read(); // a trickled byte does not restart the clock
        a.bytes_written();
        assert_eq!(a.phase(Instant::now()), (Phase::Head, since));
    }

    #[test]
    fn writing_a_response_moves_the_idle_start_forward() {
        let a = Activity::new(Instant::now());
        a.request_started();
        a.request_finished();
        a.bytes_written();
        let (_, first) = a.phase(Instant::now());
        std::thread::sleep(Duration::from_millis(2));
        a.bytes_written();
        let (phase, later) = a.phase(Instant::now());
        assert_eq!(phase, Phase::Idle);
        assert!(later > first);
    }

    #[test]
    fn the_recheck_period_is_the_shorter_timeout() {
        assert_eq!(T.recheck(), Duration::from_millis(100));
    }
}
