//! The one layer every RPC of both planes runs under ([`crate::with_common_layers`]), outermost
//! first: metrics and the access log, injected faults, the in-flight body budget, panic catching
//! and the request deadline.
//!
//! One layer, not five: each `from_fn` layer boxes a service and a future per request, and the
//! five layers these steps used to be took ~10% of a 128-block read's server CPU
//! (docs/benchmarks.md, "One layer for the request path").

use crate::metrics::Metrics;
use crate::reply::error_response;
use axum::extract::{MatchedPath, Request};
use axum::http::StatusCode as Http;
use axum::middleware::Next;
use axum::response::Response;
use futures::FutureExt;
use kvcm_core::faults::Faults;
use kvcm_core::wire::StatusCode;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// What the layer needs of a plane's configuration.
#[derive(Debug)]
pub struct Guard {
    pub plane: &'static str,
    pub metrics: Arc<Metrics>,
    /// `request_timeout_ms`: HTTP 408 past it.
    pub deadline: Duration,
    /// `max_inflight_body_bytes`, in KiB permits.
    pub bodies: Arc<Semaphore>,
    /// `max_body_bytes`: the share a request without a content-length holds.
    pub max_body: usize,
    pub faults: &'static Faults,
}

/// How long a request waits for its share of the body budget before HTTP 503.
const BODY_BUDGET_WAIT: Duration = Duration::from_secs(1);

/// The layer: counts and times the request by route template whatever the outcome.
pub async fn run(guard: Arc<Guard>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().cloned();
    let method = guard.metrics.access_log().then(|| req.method().clone());
    let start = Instant::now();
    let resp = guarded(&guard, req, next).await;
    guard.metrics.request(
        guard.plane,
        route.as_ref().map(MatchedPath::as_str),
        method.as_ref(),
        &resp,
        start.elapsed(),
    );
    resp
}

async fn guarded(guard: &Guard, req: Request, next: Next) -> Response {
    if let Some(faulted) = crate::faults::check(guard.faults, req.uri().path()).await {
        return faulted;
    }
    // The request's share of `max_inflight_body_bytes` (its content-length, or `max_body_bytes`
    // without one; in KiB), held while it runs.
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let bytes = match declared {
        Some(n) => n.min(guard.max_body),
        None if req.method() == axum::http::Method::GET => 0,
        None => guard.max_body,
    };
    let kib = bytes.div_ceil(1024).max(1) as u32;
    let _share = match guard.bodies.try_acquire_many(kib) {
        Ok(share) => share,
        // A timer only when the budget is short.
        Err(_) => match tokio::time::timeout(BODY_BUDGET_WAIT, guard.bodies.acquire_many(kib)).await {
            Ok(Ok(share)) => share,
            _ => return body_budget_spent(),
        },
    };
    // A panic in a handler is a bug: logged, and answered like any internal error.
    match AssertUnwindSafe(tokio::time::timeout(guard.deadline, next.run(req))).catch_unwind().await {
        Ok(Ok(resp)) => resp,
        Ok(Err(_)) => error_response(
            Http::REQUEST_TIMEOUT,
            StatusCode::SERVICE_NOT_READY,
            "the request did not finish within request_timeout_ms; retry".into(),
        ),
        Err(panic) => panicked(panic),
    }
}

fn body_budget_spent() -> Response {
    let mut r = error_response(
        Http::SERVICE_UNAVAILABLE,
        StatusCode::SERVICE_NOT_READY,
        "too many request bytes in flight on this frontend (max_inflight_body_bytes); retry shortly".into(),
    );
    r.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
    r
}

fn panicked(err: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let what = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or("(no message)");
    tracing::error!(panic = %what, "a request handler panicked");
    error_response(
        Http::INTERNAL_SERVER_ERROR,
        StatusCode::INTERNAL_ERROR,
        "internal error; see the kvcm-api log".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::routing::post;
    use tower::ServiceExt;

    async fn panics() -> &'static str {
        panic!("a bug")
    }

    fn guarded_router(metrics: &Arc<Metrics>, deadline: Duration, permits: usize) -> Router {
        let guard = Arc::new(Guard {
            plane: "meta",
            metrics: metrics.clone(),
            deadline,
            bodies: Arc::new(Semaphore::new(permits)),
            max_body: 4096,
            faults: kvcm_core::faults::global(),
        });
        Router::new()
            .route("/api/ok", post(|| async { "fine" }))
            .route("/api/panics", post(panics))
            .route("/api/slow", post(|| async { tokio::time::sleep(Duration::from_secs(5)).await }))
            .route("/api/short", post(|| async { "never run" }))
            .layer(axum::middleware::from_fn(move |req, next| run(guard.clone(), req, next)))
    }

    async fn call(router: &Router, path: &str) -> (u16, Option<String>, String) {
        let req = axum::http::Request::post(path).body(Body::from("{}")).unwrap();
        let resp = router.clone().oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let retry = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (status, retry, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn a_panic_a_late_handler_and_a_spent_budget_get_their_replies_and_are_all_counted() {
        let metrics = Metrics::new(false, 10);
        let router = guarded_router(&metrics, Duration::from_millis(50), 4);
        assert_eq!(call(&router, "/api/ok").await, (200, None, "fine".into()));
        let (status, _, body) = call(&router, "/api/panics").await;
        assert_eq!(status, 500, "{body}");
        assert!(body.contains(r#""code":"INTERNAL_ERROR""#), "{body}");
        let (status, _, body) = call(&router, "/api/slow").await;
        assert_eq!(status, 408, "{body}");
        assert!(body.contains(r#""code":"SERVICE_NOT_READY""#), "{body}");
        // No content-length: the request would hold `max_body` (4 KiB), with only 3 KiB in the
        // budget, so it waits its second and is refused.
        let short = guarded_router(&metrics, Duration::from_secs(5), 3);
        let (status, retry, body) = call(&short, "/api/short").await;
        assert_eq!((status, retry.as_deref()), (503, Some("1")), "{body}");
        assert!(body.contains(r#""code":"SERVICE_NOT_READY""#), "{body}");
        let text = metrics.render();
        for route in ["/api/ok", "/api/panics", "/api/slow", "/api/short"] {
            let counted = text
                .lines()
                .any(|l| l.starts_with("kvcm_http_requests_total{") && l.contains(&format!(r#"route="{route}""#)));
            assert!(counted, "{route} not counted:\n{text}");
        }
    }
}
