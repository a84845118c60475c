//! One accepted connection: hyper's HTTP/1 state machine serving the plane's axum `Router`, and a
//! watchdog that closes the connection when it overstays a timeout or a shutdown's drain bound.
//!
//! The watchdog is a single timer in the connection's own task (a `select!` beside hyper's
//! future), not a timer per request: requests only store their phase in the connection's
//! [`Activity`], and the timer, when it fires, reads the phase, closes the connection if the
//! phase's deadline has passed and otherwise sleeps again until the earlier of that deadline and
//! one [`Timeouts::recheck`] period. Closing means dropping hyper's connection future, which
//! closes the socket without a reply; hyper does not answer a header timeout either.
//!
//! Shutdown: a message on the connection's `drain` channel calls hyper's `graceful_shutdown`
//! (an idle connection closes at once; a request in progress finishes, its response says
//! `connection: close`), and the connection is dropped if it is still open `drain_timeout` later.

use super::activity::{Activity, Phase, Timeouts, WatchedIo};
use axum::Router;
use axum::extract::ConnectInfo;
use axum::extract::Request;
use axum::response::Response;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tower::ServiceExt;
use tower::util::Oneshot;

/// Serves `stream` until the client closes it, hyper ends it, a timeout closes it, or the drain
/// bound after a shutdown message passes.
pub async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    builder: &http1::Builder,
    timeouts: Timeouts,
    drain_timeout: Duration,
    mut drain: oneshot::Receiver<()>,
) {
    let accepted = Instant::now();
    let activity = Arc::new(Activity::new(accepted));
    let io = TokioIo::new(WatchedIo::new(stream, activity.clone()));
    let mut conn = pin!(builder.serve_connection(io, Requests { router, peer, activity: activity.clone() }));
    let mut watchdog = pin!(tokio::time::sleep_until(accepted + timeouts.recheck()));
    let mut draining: Option<Instant> = None;
    loop {
        tokio::select! {
            // hyper first: it is what wakes this task almost every time.
            biased;
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            () = watchdog.as_mut() => {
                let now = Instant::now();
                let (phase, since) = activity.phase(now);
                let deadline = timeouts.deadline(phase, since);
                if deadline.is_some_and(|d| now >= d) {
                    let timeout = if phase == Phase::Head { "header-read" } else { "idle" };
                    tracing::debug!(timeout, "closing a connection: timeout passed");
                    return;
                }
                if draining.is_some_and(|d| now >= d) {
                    tracing::debug!(?phase, "closing a connection still open at the end of the shutdown drain");
                    return;
                }
                let next = [deadline, draining].into_iter().flatten().fold(now + timeouts.recheck(), Instant::min);
                watchdog.as_mut().reset(next);
            }
            // Err (the server dropped its sender) cannot happen while the server lives; treat it
            // as a shutdown message too, so a connection never outlives its server unbounded.
            _ = &mut drain, if draining.is_none() => {
                let until = Instant::now() + drain_timeout;
                draining = Some(until);
                conn.as_mut().graceful_shutdown();
                if until < watchdog.deadline() {
                    watchdog.as_mut().reset(until);
                }
            }
        }
    }
}

/// The hyper service of one connection: the plane's router, with the start and end of every
/// request reported to the connection's [`Activity`], and the peer address put into every
/// request (as axum's `ConnectInfo`, which the login back-off counts failures by).
struct Requests {
    router: Router,
    peer: SocketAddr,
    activity: Arc<Activity>,
}

impl hyper::service::Service<Request<Incoming>> for Requests {
    type Response = Response;
    type Error = Infallible;
    type Future = InFlight;

    fn call(&self, mut req: Request<Incoming>) -> InFlight {
        self.activity.request_started();
        req.extensions_mut().insert(ConnectInfo(self.peer));
        // What axum::serve and hyper_util's TowerToHyperService do per request: clone the
        // router (one Arc) and drive it through poll_ready + call.
        InFlight { inner: self.router.clone().oneshot(req), _finished: Finished(self.activity.clone()) }
    }
}

pin_project_lite::pin_project! {
    /// A request's handler future; its end (completion or drop) makes the connection idle.
    struct InFlight {
        #[pin]
        inner: Oneshot<Router, Request<Incoming>>,
        _finished: Finished,
    }
}

impl Future for InFlight {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx)
    }
}

/// Marks the request finished when dropped: hyper drops a handler future as soon as it
/// completes, and also when the connection closes mid-request.
struct Finished(Arc<Activity>);

impl Drop for Finished {
    fn drop(&mut self) {
        self.0.request_finished();
    }
}
