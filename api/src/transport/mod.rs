//! How kvcm-api serves a listener: its own accept loop over hyper's HTTP/1 connection, instead of
//! `axum::serve`, which has no header-read timeout, no idle timeout and no connection cap. The
//! routers stay plain axum `Router`s (so the same ones can run under AWS Lambda).
//!
//! Per listener ([`serve`]):
//!
//! * **Connection cap** — a semaphore of `max_connections` permits, taken *before* `accept`.
//!   At the cap the loop stops accepting, so new connections wait in the kernel's accept backlog
//!   (1024 handshaken connections; beyond that the kernel drops SYNs and clients retry them)
//!   until one closes. We chose waiting over accept-and-close because it is what a load balancer
//!   handles best: a short burst costs a little latency instead of errors (an AWS ALB turns a
//!   target that closes a fresh connection into a 502 for the client), a sustained overload
//!   shows up as slow health checks that take this frontend out of rotation, and no CPU goes to
//!   connections that cannot be served. A warning is logged (at most once a minute) while the
//!   cap holds connections back.
//! * **Header-read and idle timeouts** — per connection, see `connection.rs` and `activity.rs`.
//!   hyper 1.12's own `http1::Builder::header_read_timeout` is left off: its timer starts
//!   whenever hyper begins waiting for a request head, which is at accept *and* right after
//!   every response on a kept-alive connection (`proto/h1/conn.rs`: `State::idle` sets
//!   `notify_read` so `poll_read_head` arms the timer at once). It therefore also closes every
//!   idle keep-alive connection after the header-read timeout, and cannot be combined with a
//!   longer idle timeout — which a connection behind a load balancer needs (see `idle_timeout_ms`
//!   in `core/config/default.toml`). Our watchdog starts the header-read clock at accept and at
//!   the first byte of each later request, and the idle clock after each response.
//! * **Serving threads** (the meta plane): the accept loop runs on the shared runtime and hands
//!   each accepted socket, for its whole life, to the live serving thread with the fewest open
//!   connections ([`Serving::Threads`], `crate::serving`); the cap, timeouts and drain below
//!   are the listener's all the same. The admin plane serves where it accepts
//!   ([`Serving::Here`]).
//! * **TCP_NODELAY** on every accepted socket: responses go out in one write, and reads take
//!   well under a millisecond, so Nagle's algorithm could only add delay.
//! * **Graceful shutdown** — when `shutdown` completes the listener is closed (new connections
//!   are refused), every open connection gets hyper's graceful shutdown, and [`serve`] returns
//!   once all have closed, which their watchdogs guarantee within `drain_timeout` (plus a second
//!   of slack before we stop waiting and log what is left).
//!
//! Accept errors never end the loop: per-connection ones (reset before accept) are skipped,
//! others (out of file descriptors) are logged and retried after a second.

mod activity;
mod connection;

pub use activity::Timeouts;

use axum::Router;
use hyper::server::conn::http1;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::time::Instant;

/// The connection handling of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub timeouts: Timeouts,
    /// Open connections at most; more wait in the kernel's accept backlog.
    pub max_connections: usize,
    /// After shutdown, how long open connections may take to finish before they are closed.
    pub drain_timeout: Duration,
}

/// Where a listener's accepted connections are served.
#[derive(Clone)]
pub enum Serving {
    /// On the accepting runtime, by this router.
    Here(Router),
    /// On serving threads (`crate::serving`): each connection goes, for its whole life, to the
    /// thread with the fewest open connections.
    Threads(Arc<[ServingThread]>),
}

/// A serving thread as the accept loop sees it: its runtime, its router (built over its own
/// Valkey connection) and how many connections it serves (`kvcm_serving_thread_connections`).
pub struct ServingThread {
    pub runtime: tokio::runtime::Handle,
    pub router: Router,
    pub open: prometheus::IntGauge,
    /// False once the thread has ended (it cannot take connections any more).
    pub alive: Arc<std::sync::atomic::AtomicBool>,
}

/// Gives a serving thread's connection count back when its connection ends (or never starts).
struct Counted(prometheus::IntGauge);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The live serving thread with the fewest open connections (the first such from `turn`, so
/// equal threads take turns); `None` if every thread has ended.
fn least_loaded(threads: &[ServingThread], turn: usize) -> Option<&ServingThread> {
    let n = threads.len();
    (0..n)
        .map(|i| &threads[(turn + i) % n])
        .filter(|t| t.alive.load(std::sync::atomic::Ordering::Relaxed))
        .min_by_key(|t| t.open.get())
}

/// Serves `serving` on `listener` until `shutdown` completes, then drains (see the module docs).
pub async fn serve(
    plane: &'static str,
    listener: TcpListener,
    serving: Serving,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let open = Arc::new(Open::default());
    let mut builder = http1::Builder::new();
    // Off: it would also cut idle keep-alive connections (module docs). Our watchdog does both.
    builder.header_read_timeout(None);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut last_cap_warning: Option<Instant> = None;
    let mut turn = 0usize;
    loop {
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                if last_cap_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    last_cap_warning = Some(Instant::now());
                    tracing::warn!(
                        plane,
                        max_connections = limits.max_connections,
                        "connection cap reached: new connections wait in the accept backlog until one closes"
                    );
                }
                tokio::select! {
                    permit = permits.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
                    () = &mut shutdown => break,
                }
            }
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    tracing::error!(plane, error = %e, "accept failed; retrying in a second");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        () = &mut shutdown => break,
                    }
                }
            },
            () = &mut shutdown => break,
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(plane, error = %e, "cannot set TCP_NODELAY");
        }
        let (guard, drain) = open.register(permit);
        let builder = builder.clone();
        match &serving {
            Serving::Here(router) => {
                let router = router.clone();
                tokio::spawn(async move {
                    connection::serve(stream, peer, router, &builder, limits.timeouts, limits.drain_timeout, drain)
                        .await;
                    drop(guard);
                });
            }
            Serving::Threads(threads) => {
                turn += 1;
                let Some(thread) = least_loaded(threads, turn) else {
                    // Cannot happen short of a bug that ends a thread's runtime; closing the
                    // connection at once (permit returned) is all that is left to do.
                    tracing::error!(plane, "no serving thread is left to take a connection");
                    continue;
                };
                // The socket leaves this runtime's reactor and joins the serving thread's.
                let stream = match stream.into_std() {
                    Ok(stream) => stream,
                    Err(e) => {
                        tracing::debug!(plane, error = %e, "cannot hand an accepted connection to a serving thread");
                        continue;
                    }
                };
                thread.open.inc();
                let (router, count) = (thread.router.clone(), Counted(thread.open.clone()));
                // A thread that ended just now drops the task, and with it the socket and the
                // connection's permit.
                thread.runtime.spawn(async move {
                    let _count = count;
                    match tokio::net::TcpStream::from_std(stream) {
                        Ok(stream) => {
                            connection::serve(
                                stream,
                                peer,
                                router,
                                &builder,
                                limits.timeouts,
                                limits.drain_timeout,
                                drain,
                            )
                            .await
                        }
                        Err(e) => tracing::debug!(error = %e, "a serving thread cannot take a connection"),
                    }
                    drop(guard);
                });
            }
        }
    }
    drop(listener);
    let drains = open.take_all();
    tracing::info!(plane, connections = drains.len(), "listener closed; draining open connections");
    for drain in drains {
        let _ = drain.send(());
    }
    let all = u32::try_from(limits.max_connections).expect("max_connections is validated to fit");
    if tokio::time::timeout(limits.drain_timeout + Duration::from_secs(1), permits.acquire_many(all)).await.is_err() {
        tracing::warn!(
            plane,
            still_open = limits.max_connections - permits.available_permits(),
            "connections still open after the drain timeout; no longer waiting for them"
        );
    }
}

/// Errors of one connection that was reset before we accepted it; the listener is fine.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// The drain senders of a listener's open connections, so shutdown can reach each one. Touched
/// once when a connection opens and once when it closes, never per request; a shared
/// `watch`/`Notify` would instead be polled (and its mutex taken) on every wake of every
/// connection, as in `axum::serve`.
#[derive(Default)]
struct Open {
    inner: Mutex<OpenInner>,
}

#[derive(Default)]
struct OpenInner {
    next_id: u64,
    drains: HashMap<u64, oneshot::Sender<()>>,
}

impl Open {
    fn register(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> (Registered, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.next_id += 1;
        let id = inner.next_id;
        inner.drains.insert(id, tx);
        (Registered { id, open: self.clone(), _permit: permit }, rx)
    }

    fn take_all(&self) -> Vec<oneshot::Sender<()>> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.drains.drain().map(|(_, tx)| tx).collect()
    }
}

/// A connection's place in [`Open`] and its permit; both are given back on drop, even if the
/// connection's task panics.
struct Registered {
    id: u64,
    open: Arc<Open>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.open.inner.lock().unwrap_or_else(PoisonError::into_inner).drains.remove(&self.id);
    }
}
