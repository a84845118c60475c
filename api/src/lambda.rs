//! AWS Lambda mode: one plane's router served by `lambda_http` instead of two listeners.
//!
//! When `kvcm-api` runs in the Lambda runtime (`AWS_LAMBDA_RUNTIME_API` set, see
//! [`in_lambda_runtime`]), `main` calls [`prepare`] and [`Function::run`]. One function serves one
//! plane, chosen by `lambda_plane` (`meta` or `admin`; required there): deploy one function per
//! plane behind an API Gateway HTTP API (payload v2), a REST API (v1) or an ALB.
//!
//! **State.** [`prepare`] runs once per execution environment (the cold start) with the same
//! steps as the server's `build` — [`crate::connect`] (Valkey connection and script load),
//! [`crate::open_registry`] (registry, startup config, bootstrap admin, fail-closed checks),
//! [`crate::app_state`] and the plane's router with every common layer — but binds no socket.
//! The resulting [`AppState`] (connection, registry copy, metrics, auth cache, Argon2 permit,
//! body budget) is shared by every invocation the environment serves. [`ColdStart`] records how
//! long each step took; the first invocation logs it.
//!
//! **Background work on demand.** Lambda freezes the process between invocations, so timers
//! cannot keep anything fresh. Instead, before an invocation is routed ([`Upkeep`]):
//! * every request but `GET /api/healthy` first refreshes the registry if it was last confirmed
//!   longer than `registry_refresh_ms` ago (one version GET; a reload if it moved), and prunes the
//!   metric series of removed instances, as the server's refresh loop does each tick;
//! * `GET /api/healthy` first PINGs every Valkey node if the last check is older than
//!   `health_check_interval_ms`, so it never answers from a check made before a long freeze
//!   (and a flood of probes costs at most one PING round per interval per environment).
//!
//! Both are bounded by `valkey_timeout_ms`. A failed refresh is logged (once per outage) and the
//! request goes on with the cached registry, where auth refuses (503) once the copy is too old to
//! trust — exactly as on a server.
//!
//! **Client address.** The login back-off counts failures per client address, which `auth` takes
//! from axum's `ConnectInfo<SocketAddr>` (or `client_ip_header`). There is no socket here: the
//! address comes from the event ([`source_address`]) and is inserted as `ConnectInfo` (port 0),
//! so `auth` works unchanged and every client keeps its own back-off bucket.
//!
//! **Exposure.** A function is reachable from wherever its trigger is, so it counts as beyond
//! loopback: with no admin credential it refuses to start (unless `allow_anonymous_admin`), and
//! the admin plane never opens anonymously (docs/security.md).
//!
//! **Failures.** A cold start that fails returns the error to `main`, which exits non-zero (Lambda
//! reports an init error and retries with a fresh environment). Handler failures are HTTP replies
//! like on the server; nothing here fails an invocation.

use crate::state::{AppState, Node};
use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use kvcm_core::config::{Config, LambdaPlane};
use lambda_http::request::RequestContext;
use lambda_http::{RequestExt, tower};
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tower::ServiceExt;

/// The variable the Lambda runtime sets to its runtime API's address.
pub const RUNTIME_API_ENV: &str = "AWS_LAMBDA_RUNTIME_API";

/// Whether this process runs in the AWS Lambda runtime (or an emulator of it).
pub fn in_lambda_runtime() -> bool {
    std::env::var_os(RUNTIME_API_ENV).is_some_and(|v| !v.is_empty())
}

/// How long each step of the cold start took.
#[derive(Debug, Clone, Copy, Default)]
pub struct ColdStart {
    /// Cluster connection and `SCRIPT LOAD` on every primary.
    pub valkey: Duration,
    /// Registry load, startup config, bootstrap admin and the fail-closed checks.
    pub registry: Duration,
    /// `AppState` (metrics, event log, auth state) and the plane's router with its layers.
    pub router: Duration,
}

/// One plane, built and ready to serve invocations.
pub struct Function {
    pub plane: LambdaPlane,
    pub state: AppState,
    pub cold_start: ColdStart,
    router: Router,
}

/// Builds the function's state and router once per execution environment: no socket is bound
/// and no background task started.
pub async fn prepare(mut config: Config) -> anyhow::Result<Function> {
    let plane = config.lambda_plane.ok_or_else(|| {
        anyhow::anyhow!(
            "kvcm-api runs in AWS Lambda ({RUNTIME_API_ENV} is set) but lambda_plane is empty: set it (e.g. \
             KVCM_LAMBDA_PLANE=meta) to the plane this function serves, \"meta\" or \"admin\""
        )
    })?;
    if !config.client_ip_header.is_empty() {
        // The event says who called (module docs, "Client address"): a header is not needed, and
        // behind API Gateway it is one the client may have written.
        tracing::info!(
            header = %config.client_ip_header,
            "client_ip_header is ignored in Lambda: the client address comes from the event"
        );
        config.client_ip_header.clear();
    }
    let t = Instant::now();
    let conn = crate::connect(&config).await?;
    let ack = crate::replica_ack(&config).await?;
    let valkey = t.elapsed();
    let t = Instant::now();
    let registry = crate::open_registry(&config, conn.clone()).await?;
    let registry_time = t.elapsed();
    let t = Instant::now();
    let node = node(&config);
    let state = crate::app_state(config, conn, registry, node, ack)?;
    let router = match plane {
        LambdaPlane::Meta => crate::meta_router(&state),
        LambdaPlane::Admin => crate::admin_router(&state),
    };
    let cold_start = ColdStart { valkey, registry: registry_time, router: t.elapsed() };
    Ok(Function { plane, state, cold_start, router })
}

/// This environment's identity for getManagerClusterInfo: `node_id`, else the function and its
/// log stream (one per execution environment). No ports: a function is reached only through its
/// trigger's endpoint.
fn node(config: &Config) -> Node {
    let host = crate::hostname();
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let id = if !config.node_id.is_empty() {
        config.node_id.clone()
    } else {
        match (env("AWS_LAMBDA_FUNCTION_NAME"), env("AWS_LAMBDA_LOG_STREAM_NAME")) {
            (Some(f), Some(s)) => format!("{f}/{s}"),
            (Some(f), None) => format!("{f}/{host}"),
            _ => format!("{host}:lambda"),
        }
    };
    Node { id, host, meta_port: 0, admin_port: 0, grpc_meta_port: 0, grpc_admin_port: 0 }
}

impl Function {
    /// The service one invocation goes through: upkeep, client address, the plane's router.
    /// `started` is when the process started, for the cold-start log line.
    pub fn handler(&self, started: Instant) -> Handler {
        Handler {
            router: self.router.clone(),
            upkeep: Arc::new(Upkeep {
                state: self.state.clone(),
                plane: self.plane,
                registry_failing: AtomicBool::new(false),
                registry_attempted: Mutex::new(None),
                health_failing: AtomicBool::new(false),
                health_checked: Mutex::new(None),
                warned_no_address: AtomicBool::new(false),
                first: Mutex::new(Some((started, self.cold_start))),
            }),
        }
    }

    /// Serves invocations from the Lambda runtime API until the runtime ends the process.
    pub async fn run(self, started: Instant) -> anyhow::Result<()> {
        lambda_http::run(self.handler(started))
            .await
            .map_err(|e| anyhow::anyhow!("the Lambda runtime client failed: {e}"))
    }
}

/// The `tower::Service` `lambda_http` drives, one invocation per call. Cheap to clone.
#[derive(Clone)]
pub struct Handler {
    router: Router,
    upkeep: Arc<Upkeep>,
}

impl tower::Service<lambda_http::Request> for Handler {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: lambda_http::Request) -> Self::Future {
        let (router, upkeep) = (self.router.clone(), self.upkeep.clone());
        match source_address(&req) {
            Some(ip) => {
                req.extensions_mut().insert(ConnectInfo(SocketAddr::new(ip, 0)));
            }
            None if !upkeep.warned_no_address.swap(true, Relaxed) => tracing::warn!(
                "an invocation carried no client address (no source IP in its request context and no \
                 x-forwarded-for): such requests share one login back-off bucket"
            ),
            None => {}
        }
        let health_probe = req.method() == Method::GET && req.uri().path() == "/api/healthy";
        let reply_limit = reply_limit(&req);
        Box::pin(async move {
            let began = Instant::now();
            upkeep.before(health_probe).await;
            let response = router.oneshot(req).await.unwrap_or_else(|never| match never {});
            let response = within_reply_limit(response, reply_limit).await;
            upkeep.after_first(began);
            Ok(response)
        })
    }
}

/// What the server's background tasks do, done on demand before an invocation (module docs).
struct Upkeep {
    state: AppState,
    plane: LambdaPlane,
    registry_failing: AtomicBool,
    /// When the last registry refresh was attempted: while Valkey is failing, at most one
    /// attempt per `registry_refresh_ms`, so invocations do not each wait out a timeout.
    registry_attempted: Mutex<Option<Instant>>,
    health_failing: AtomicBool,
    /// When the last health check finished.
    health_checked: Mutex<Option<Instant>>,
    warned_no_address: AtomicBool,
    /// Process start and cold-start steps, until the first invocation logs them.
    first: Mutex<Option<(Instant, ColdStart)>>,
}

impl Upkeep {
    async fn before(&self, health_probe: bool) {
        let config = &self.state.config;
        let bound = Duration::from_millis(config.valkey_timeout_ms);
        if health_probe {
            let interval = Duration::from_millis(config.health_check_interval_ms);
            let due = lock(&self.health_checked).is_none_or(|at| at.elapsed() >= interval);
            if due {
                let result = self.state.health.check(&mut self.state.conn.clone(), bound).await;
                *lock(&self.health_checked) = Some(Instant::now());
                match result {
                    Ok(()) if self.health_failing.swap(false, Relaxed) => {
                        tracing::info!("Valkey answers PING again: /api/healthy reports OK")
                    }
                    Err(e) if !self.health_failing.swap(true, Relaxed) => {
                        tracing::warn!(error = %e, "Valkey health check failed: /api/healthy reports UNHEALTHY")
                    }
                    _ => {}
                }
            }
            return;
        }
        let period = Duration::from_millis(config.registry_refresh_ms);
        let stale = self.state.registry.confirmed_ago().is_none_or(|age| age >= period);
        let attempt_due = {
            let mut attempted = lock(&self.registry_attempted);
            let due = attempted.is_none_or(|at| at.elapsed() >= period);
            if stale && due {
                *attempted = Some(Instant::now());
            }
            due
        };
        if stale && attempt_due {
            let refresh = crate::refresh_registry_once(&self.state, &self.registry_failing);
            if tokio::time::timeout(bound, refresh).await.is_err() && !self.registry_failing.swap(true, Relaxed) {
                tracing::warn!(
                    timeout_ms = config.valkey_timeout_ms,
                    "registry refresh timed out; serving the cached registry"
                );
            }
        }
    }

    /// Logs the cold start once, when the first invocation is answered.
    fn after_first(&self, invocation_began: Instant) {
        let Some((started, cold)) = lock(&self.first).take() else { return };
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        tracing::info!(
            plane = self.plane.name(),
            valkey_connect_ms = ms(cold.valkey),
            registry_load_ms = ms(cold.registry),
            router_build_ms = ms(cold.router),
            first_invocation_ms = ms(invocation_began.elapsed()),
            process_start_to_first_response_ms = ms(started.elapsed()),
            "cold start: first invocation answered"
        );
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What Lambda can carry back: a synchronous invocation's response payload is at most 6 MB
/// (API Gateway), an ALB target's at most 1 MB. The payload is the reply as a JSON string plus
/// headers; this leaves room for the headers.
const REPLY_LIMIT_INVOKE: usize = 6_000_000;
const REPLY_LIMIT_ALB: usize = 1_000_000;
const REPLY_ENVELOPE: usize = 16 * 1024;

/// The largest reply body the invocation's trigger can take.
fn reply_limit(req: &lambda_http::Request) -> usize {
    match req.request_context_ref() {
        Some(RequestContext::Alb(_)) => REPLY_LIMIT_ALB - REPLY_ENVELOPE,
        _ => REPLY_LIMIT_INVOKE - REPLY_ENVELOPE,
    }
}

/// The response, or — when its body would not fit through Lambda (the trigger would answer a
/// bare 502) — a kvcm error saying what to do. The body's size counts as Lambda counts it: as a
/// JSON string, where every `"` and `\\` takes two bytes. Configure `max_keys_per_request` and
/// `max_location_specs_per_response` so that replies fit (docs/deploy.md); this is the last line.
async fn within_reply_limit(response: Response, limit: usize) -> Response {
    let (parts, body) = response.into_parts();
    let too_large = |size: usize| {
        tracing::warn!(bytes = size, limit, "a reply is too large for Lambda; answered with an error instead");
        crate::reply::error_response(
            axum::http::StatusCode::BAD_REQUEST,
            kvcm_core::wire::StatusCode::INVALID_ARGUMENT,
            format!(
                "the reply ({size} bytes or more) exceeds what AWS Lambda can return ({limit} bytes): ask for \
                 fewer blocks per request (lower max_keys_per_request and max_location_specs_per_response on \
                 this function)"
            ),
        )
    };
    let bytes = match axum::body::to_bytes(body, limit.saturating_add(1)).await {
        Ok(bytes) => bytes,
        Err(_) => return too_large(limit + 1),
    };
    let escaped = bytes.len() + bytes.iter().filter(|b| matches!(b, b'"' | b'\\')).count();
    if escaped > limit {
        return too_large(escaped);
    }
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// The client address of an invocation: the source IP API Gateway puts in the request context
/// (`requestContext.http.sourceIp` of an HTTP API, `requestContext.identity.sourceIp` of a REST
/// API) — what the gateway saw, which the client cannot choose. An ALB passes none: then the
/// right-most `x-forwarded-for` entry, the one the balancer appended. `None` when neither is known.
pub fn source_address(req: &lambda_http::Request) -> Option<IpAddr> {
    let from_context = match req.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(c)) => c.http.source_ip.as_deref(),
        Some(RequestContext::ApiGatewayV1(c)) => c.identity.source_ip.as_deref(),
        _ => None,
    };
    from_context.and_then(crate::auth::parse_forwarded).or_else(|| rightmost_forwarded_for(req.headers()))
}

/// The right-most entry of the last `x-forwarded-for` header, if it is an address.
fn rightmost_forwarded_for(headers: &HeaderMap) -> Option<IpAddr> {
    let last = headers.get_all("x-forwarded-for").iter().next_back()?.to_str().ok()?;
    crate::auth::parse_forwarded(last.rsplit(',').next()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_of(r: Response) -> serde_json::Value {
        serde_json::from_slice(&axum::body::to_bytes(r.into_body(), usize::MAX).await.unwrap()).unwrap()
    }

    #[tokio::test]
    async fn a_reply_too_large_for_lambda_becomes_a_kvcm_error_counted_as_a_json_string() {
        let reply = |body: String| Response::new(axum::body::Body::from(body));
        // Fits: passed through unchanged.
        let fits = within_reply_limit(reply("x".repeat(1000)), 1000).await;
        assert_eq!(fits.status(), 200);
        assert_eq!(axum::body::to_bytes(fits.into_body(), usize::MAX).await.unwrap().len(), 1000);
        // 600 quotes take 1,200 bytes inside the payload's JSON string: too large for 1,000.
        let quoted = within_reply_limit(reply("\"".repeat(600)), 1000).await;
        assert_eq!(quoted.status(), 400);
        let v = body_of(quoted).await;
        assert_eq!(v["header"]["status"]["code"], "INVALID_ARGUMENT", "{v}");
        assert!(v["header"]["status"]["message"].as_str().unwrap().contains("max_keys_per_request"), "{v}");
        // Larger than the limit before counting: refused without buffering it all.
        let big = within_reply_limit(reply("x".repeat(5000)), 1000).await;
        assert_eq!(big.status(), 400);
    }

    /// An API Gateway HTTP API (payload format 2.0) event from `source_ip`.
    fn v2_event(source_ip: &str, forwarded_for: Option<&str>) -> String {
        let mut headers = serde_json::json!({"content-type": "application/json"});
        if let Some(xff) = forwarded_for {
            headers["x-forwarded-for"] = xff.into();
        }
        serde_json::json!({
            "version": "2.0", "routeKey": "$default", "rawPath": "/api/getCacheLocation", "rawQueryString": "",
            "headers": headers,
            "requestContext": {
                "accountId": "123456789012", "apiId": "api", "domainName": "api.example.com",
                "domainPrefix": "api", "requestId": "r1", "routeKey": "$default", "stage": "$default",
                "time": "01/Dec/2026:00:00:00 +0000", "timeEpoch": 1796083200000_i64,
                "http": {"method": "POST", "path": "/api/getCacheLocation", "protocol": "HTTP/1.1",
                         "sourceIp": source_ip, "userAgent": "test"}
            },
            "body": "{}", "isBase64Encoded": false
        })
        .to_string()
    }

    fn request(event: &str) -> lambda_http::Request {
        lambda_http::request::from_str(event).expect("a valid event")
    }

    #[test]
    fn an_http_api_event_gives_the_gateways_source_ip_not_a_header_the_client_wrote() {
        let req = request(&v2_event("203.0.113.7", Some("198.51.100.1")));
        assert!(matches!(req.request_context_ref(), Some(RequestContext::ApiGatewayV2(_))));
        assert_eq!(source_address(&req), Some("203.0.113.7".parse().unwrap()));
        let v6 = request(&v2_event("2001:db8::5", None));
        assert_eq!(source_address(&v6), Some("2001:db8::5".parse().unwrap()));
    }

    #[test]
    fn two_http_api_clients_get_two_addresses() {
        let a = source_address(&request(&v2_event("203.0.113.7", None)));
        let b = source_address(&request(&v2_event("203.0.113.8", None)));
        assert!(a.is_some() && b.is_some() && a != b, "{a:?} {b:?}");
    }

    #[test]
    fn a_rest_api_event_gives_its_identity_source_ip() {
        let event = serde_json::json!({
            "resource": "/{proxy+}", "path": "/api/getCacheLocation", "httpMethod": "POST",
            "headers": {"X-Forwarded-For": "198.51.100.1, 192.0.2.9"}, "multiValueHeaders": {},
            "queryStringParameters": null, "multiValueQueryStringParameters": null,
            "pathParameters": null, "stageVariables": null,
            "requestContext": {
                "accountId": "123456789012", "resourceId": "x", "stage": "prod", "requestId": "r2",
                "resourcePath": "/{proxy+}", "httpMethod": "POST", "apiId": "api", "path": "/prod/api/getCacheLocation",
                "identity": {"sourceIp": "192.0.2.44", "userAgent": "test"}
            },
            "body": "{}", "isBase64Encoded": false
        });
        let req = request(&event.to_string());
        assert!(matches!(req.request_context_ref(), Some(RequestContext::ApiGatewayV1(_))));
        assert_eq!(source_address(&req), Some("192.0.2.44".parse().unwrap()));
    }

    #[test]
    fn an_alb_event_gives_the_right_most_forwarded_for_entry() {
        let event = serde_json::json!({
            "requestContext": {"elb": {"targetGroupArn": "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/kvcm/1"}},
            "httpMethod": "POST", "path": "/api/getCacheLocation", "queryStringParameters": {},
            "headers": {"x-forwarded-for": "10.9.9.9, 192.0.2.60", "content-type": "application/json"},
            "body": "{}", "isBase64Encoded": false
        });
        let req = request(&event.to_string());
        assert!(matches!(req.request_context_ref(), Some(RequestContext::Alb(_))));
        assert_eq!(source_address(&req), Some("192.0.2.60".parse().unwrap()));
    }

    #[test]
    fn no_source_ip_and_no_usable_forwarded_for_gives_no_address() {
        assert_eq!(source_address(&request(&v2_event("", None))), None);
        assert_eq!(source_address(&request(&v2_event("", Some("1.2.3.4, not-an-ip")))), None);
        assert_eq!(source_address(&request(&v2_event("", Some("1.2.3.4")))), Some("1.2.3.4".parse().unwrap()));
    }
}
