//! Authentication and authorisation (DESIGN §6, docs/security.md).
//!
//! **Credentials** come in the `Authorization` header:
//! * an API key, `Bearer kvcm_<id>_<secret>` (or as the password of HTTP Basic, for clients that
//!   only do Basic): looked up by id in the registry snapshot and checked by its SHA-256 digest
//!   in constant time — no Argon2, so engines pay microseconds per request;
//! * an account, `Basic base64(user:password)` or `Bearer user:password`: Argon2id-verified once,
//!   then cached per frontend by the SHA-256 of the header value and the client address, for as
//!   long as the account's stored hash is unchanged (deleting or re-creating the account
//!   invalidates the entry).
//!
//! Each request's outcome is a [`Principal`] put into the request's extensions: handlers take it
//! as a [`Caller`] and check the instance group of what they touch with [`Caller::authorize`].
//! Admins act on everything; an engine credential (ROLE_USER) acts only on the instance groups
//! it is scoped to; with `meta_auth` off the meta plane's callers are anonymous and unrestricted
//! (as Tair KVCM's meta port is).
//!
//! **Fail closed.** With `meta_auth` on, the meta plane always requires a credential, even when
//! none exists. The admin plane is open only while no admin account exists *and* it listens on
//! loopback or `allow_anonymous_admin` is set; `build` refuses to start in the other cases.
//!
//! **Password guessing.** A wrong user name costs what a wrong password costs: the same Argon2
//! verification runs against [`kvcm_core::auth::dummy_hash`]. Failures are counted per user and
//! per client address in Valkey (`lua/auth_failure.lua`, shared by every frontend); past
//! `auth_backoff_after` failures, further attempts are refused with HTTP 429 and `Retry-After`
//! *before* Argon2 runs, the wait doubling with each failure. An address that logged in as the
//! user recently is exempt from that user's back-off, so an attacker guessing a user's password
//! cannot lock that user out of the addresses it uses. Argon2 runs one at a time per frontend and
//! a check waits at most [`ARGON2_WAIT`] for its turn (then 503 + `Retry-After`), so guessing can
//! never occupy more than one core nor push legitimate checks into the request deadline.

use crate::reply::error_response;
use crate::state::AppState;
use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode as Http, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use kvcm_core::keys::AuthKeys;
use kvcm_core::registry::validate::ALL_GROUPS;
use kvcm_core::wire::StatusCode;
use kvcm_core::wire::admin::AccountRole;
use kvcm_core::{Error, scripts};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Longest wait for the Argon2 permit before answering 503 (at most half the request deadline).
pub const ARGON2_WAIT: Duration = Duration::from_secs(2);
/// Most verified account credentials cached per frontend (cleared when full).
const CACHE_LIMIT: usize = 4096;
/// Most password checks waiting for the Argon2 permit per frontend; more get 503 at once.
const MAX_WAITING_CHECKS: usize = 32;

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// No authentication applies (meta plane with `meta_auth` off, or an admin plane that is
    /// open because no admin exists on loopback): unrestricted.
    Anonymous,
    /// A ROLE_ADMIN account or API key: everything.
    Admin { name: String },
    /// A ROLE_USER account or API key: the meta plane, on its instance groups only.
    Engine { name: String, groups: Vec<String> },
}

impl Principal {
    fn from_role(name: String, role: AccountRole, groups: &[String]) -> Principal {
        match role {
            AccountRole::ROLE_ADMIN => Principal::Admin { name },
            _ => Principal::Engine { name, groups: groups.to_vec() },
        }
    }

    /// Whether this caller may act on instances of `group`.
    pub fn may_act_on(&self, group: &str) -> bool {
        match self {
            Principal::Anonymous | Principal::Admin { .. } => true,
            Principal::Engine { groups, .. } => groups.iter().any(|g| g == group || g == ALL_GROUPS),
        }
    }
}

/// The authenticated caller of a request (put there by the plane's guard).
#[derive(Debug, Clone)]
pub struct Caller(pub Arc<Principal>);

impl Caller {
    /// Refuses (HTTP 403) unless the caller may act on instances of `group`; `instance` is the
    /// instance id the request names. The message names the instance, not the group: a scoped
    /// engine learns nothing about other teams' groups.
    pub fn authorize(&self, group: &str, instance: &str) -> Result<(), Error> {
        if self.0.may_act_on(group) {
            return Ok(());
        }
        let who = match &*self.0 {
            Principal::Engine { name, .. } => name.as_str(),
            _ => "",
        };
        Err(Error::Forbidden(format!(
            "credential '{who}' is not scoped to the instance group of instance '{instance}'; an admin can \
             create a credential with that group in instance_groups"
        )))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        // A route without a guard is a bug: fail closed, loudly.
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            tracing::error!(path = %parts.uri.path(), "a route runs without an authentication guard");
            error_response(Http::INTERNAL_SERVER_ERROR, StatusCode::INTERNAL_ERROR, "internal error".into())
        })
    }
}

/// Per-frontend authentication state.
pub struct AuthState {
    /// Digest of a verified account header value and client address → (user, stored hash it was
    /// checked against).
    verified: Mutex<HashMap<[u8; 32], (String, String)>>,
    argon2: Arc<tokio::sync::Semaphore>,
    /// Checks waiting for (or holding) the permit.
    checks_in_line: Arc<std::sync::atomic::AtomicUsize>,
    keys: AuthKeys,
    /// Whether a warning about an unusable `client_ip_header` was logged already.
    warned_client_ip: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for AuthState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cached = self.verified.lock().map(|c| c.len()).unwrap_or(0);
        f.debug_struct("AuthState").field("verified", &cached).finish_non_exhaustive()
    }
}

impl AuthState {
    pub fn new(namespace: &str) -> Self {
        AuthState {
            verified: Mutex::default(),
            argon2: Arc::new(tokio::sync::Semaphore::new(1)),
            checks_in_line: Arc::default(),
            keys: AuthKeys::new(namespace),
            warned_client_ip: Default::default(),
        }
    }
}

/// What the `Authorization` header carries. (Its `Debug` shows no secret.)
#[derive(PartialEq, Eq)]
enum Presented {
    ApiKey(String),
    Password { user: String, password: String },
}

impl std::fmt::Debug for Presented {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Presented::ApiKey(t) => write!(f, "ApiKey({:?})", kvcm_core::auth::api_key_id(t).unwrap_or("?")),
            Presented::Password { user, .. } => write!(f, "Password({user:?}, ***)"),
        }
    }
}

fn presented(value: &str) -> Option<Presented> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    let rest = rest.trim();
    let raw = if scheme.eq_ignore_ascii_case("basic") {
        String::from_utf8(base64::engine::general_purpose::STANDARD.decode(rest).ok()?).ok()?
    } else if scheme.eq_ignore_ascii_case("bearer") {
        if !rest.contains(':') {
            return Some(Presented::ApiKey(rest.to_string()));
        }
        rest.to_string()
    } else {
        return None;
    };
    let (user, password) = raw.split_once(':')?;
    // An API key may also come as the password of HTTP Basic (any user name): clients that can
    // only do Basic — Tair's Python connector through requests' ~/.netrc support — can use keys.
    if kvcm_core::auth::api_key_id(password).is_some() {
        return Some(Presented::ApiKey(password.to_string()));
    }
    Some(Presented::Password { user: user.to_string(), password: password.to_string() })
}

fn unauthorized(msg: &str) -> Response {
    let mut r = error_response(Http::UNAUTHORIZED, StatusCode::INVALID_ARGUMENT, msg.to_string());
    r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"kvcm\""));
    r
}

fn retry_later(http: Http, msg: &str, after: Duration) -> Response {
    let code =
        if http == Http::SERVICE_UNAVAILABLE { StatusCode::SERVICE_NOT_READY } else { StatusCode::INVALID_ARGUMENT };
    let mut r = error_response(http, code, msg.to_string());
    let secs = after.as_millis().div_ceil(1000).max(1);
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs as u64));
    r
}

fn infrastructure(e: Error) -> Response {
    tracing::warn!(error = %e, "authentication could not reach Valkey");
    retry_later(Http::SERVICE_UNAVAILABLE, &e.public_message(), Duration::from_secs(1))
}

/// The client address: the right-most entry of `client_ip_header` when configured (the one the
/// proxy in front appended), else the TCP peer. `None` when neither is known.
pub fn client_address(state: &AppState, headers: &HeaderMap, peer: Option<SocketAddr>) -> Option<IpAddr> {
    let name = &state.config.client_ip_header;
    if !name.is_empty() {
        // The right-most entry is the one the proxy wrote. If it is missing or does not parse,
        // the TCP peer is used — never an earlier entry, which the client may have written.
        let last = headers.get_all(name.as_str()).iter().next_back().and_then(|v| v.to_str().ok());
        match last.and_then(|v| v.rsplit(',').next()).and_then(parse_forwarded) {
            Some(ip) => return Some(ip),
            None if !state.auth.warned_client_ip.swap(true, std::sync::atomic::Ordering::Relaxed) => tracing::warn!(
                header = %name,
                "client_ip_header is set but a request carried no address in it that parses; using the TCP peer \
                 (every client behind the proxy then shares its address for the login back-off)"
            ),
            None => {}
        }
    }
    peer.map(|p| p.ip())
}

/// One proxy-written address: `1.2.3.4`, `1.2.3.4:5678`, `2001:db8::1`, `[2001:db8::1]:443`.
pub(crate) fn parse_forwarded(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    if let Ok(ip) = entry.parse() {
        return Some(ip);
    }
    if let Some(rest) = entry.strip_prefix('[') {
        return rest.split_once(']').and_then(|(ip, _)| ip.parse().ok());
    }
    entry
        .rsplit_once(':')
        .and_then(|(ip, port)| port.parse::<u16>().ok().and(ip.parse::<std::net::Ipv4Addr>().ok()))
        .map(IpAddr::V4)
}

/// What authentication needs from a request, taken out of it before anything awaits (a request
/// body is not `Sync`, so a borrowed request cannot be held across an await).
struct Credentials {
    authorization: Option<String>,
    address: Option<IpAddr>,
}

impl Credentials {
    fn of(state: &AppState, req: &Request) -> Credentials {
        let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
        Credentials {
            authorization: req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(String::from),
            address: client_address(state, req.headers(), peer),
        }
    }
}

/// Authenticates the request's credentials.
async fn authenticate(state: &AppState, plane: &'static str, credentials: Credentials) -> Result<Principal, Response> {
    let outcome = authenticate_inner(state, credentials).await;
    let result = match &outcome {
        Ok(_) => "ok",
        Err(r) if r.status() == Http::TOO_MANY_REQUESTS => "backoff",
        Err(r) if r.status() == Http::SERVICE_UNAVAILABLE => "unavailable",
        Err(_) => "denied",
    };
    state.metrics.auth(plane, result);
    outcome
}

async fn authenticate_inner(state: &AppState, credentials: Credentials) -> Result<Principal, Response> {
    let Some(value) = credentials.authorization.as_deref() else {
        return Err(unauthorized(
            "authentication required: send Authorization: Bearer <API key>, Basic base64(user:password) \
             or Bearer user:password",
        ));
    };
    match presented(value) {
        Some(Presented::ApiKey(token)) => api_key(state, &token).await,
        Some(Presented::Password { user, password }) => {
            account(state, value, &user, &password, credentials.address).await
        }
        None => Err(unauthorized(
            "malformed Authorization header: use Bearer <API key>, Basic base64(user:password) or \
             Bearer user:password",
        )),
    }
}

async fn api_key(state: &AppState, token: &str) -> Result<Principal, Response> {
    const DENIED: &str = "unknown or revoked API key";
    let Some(id) = kvcm_core::auth::api_key_id(token) else { return Err(unauthorized(DENIED)) };
    let key = state.registry.api_key(id).await.map_err(infrastructure)?;
    match key {
        Some(k) if kvcm_core::auth::api_key_matches(token, &k.token_sha256) => {
            Ok(Principal::from_role(format!("key:{}", k.key_id), k.role, &k.instance_groups))
        }
        _ => Err(unauthorized(DENIED)),
    }
}

async fn account(
    state: &AppState,
    header_value: &str,
    user: &str,
    password: &str,
    address: Option<IpAddr>,
) -> Result<Principal, Response> {
    let snap = state.registry.snapshot();
    let stored = snap.accounts.get(user);
    // The cache is keyed by credentials *and* client address: a verification proves the password
    // for that address only, so a backed-off guesser elsewhere cannot use cache hits as an
    // oracle that bypasses the back-off.
    let address = address_key(address);
    let digest: [u8; 32] =
        Sha256::new().chain_update(header_value).chain_update([0]).chain_update(&address).finalize().into();
    if let Some(acct) = stored {
        let cached = state.auth.verified.lock().unwrap_or_else(|p| p.into_inner()).get(&digest).cloned();
        if cached.is_some_and(|(u, h)| u == user && h == acct.password_hash) {
            return Ok(Principal::from_role(user.to_string(), acct.role, &acct.instance_groups));
        }
    }
    // A malformed user name cannot exist, and no password is longer than the longest accepted:
    // refusing these at once tells an attacker nothing they did not know, and keeps them from
    // creating failure counters or running Argon2 on megabytes.
    let lookup = state.registry.lookup_limits();
    if kvcm_core::registry::validate::name(lookup, "user_name", user).is_err()
        || password.len() > kvcm_core::registry::MAX_PASSWORD_BYTES
    {
        return Err(unauthorized(DENIED));
    }
    if let Some(wait) = backoff(state, user, &address).await.map_err(infrastructure)? {
        return Err(too_many(wait));
    }
    // The same verification whether or not the user exists (no timing oracle for user names).
    let (hash, known) = match stored {
        Some(a) => (a.password_hash.clone(), true),
        None => (kvcm_core::auth::dummy_hash().to_string(), false),
    };
    // Verification and its bookkeeping run in their own task: a client that goes away (or a
    // request past its deadline) cannot cut them short, so every failure is counted and the
    // permit is held exactly as long as Argon2 runs.
    let Some(place) = InLine::join(&state.auth.checks_in_line) else {
        return Err(busy());
    };
    let check = Check { user: user.to_string(), password: password.to_string(), hash, known, address };
    let verdict = tokio::spawn(check.run(state.clone(), place)).await.unwrap_or(Verdict::Denied);
    match verdict {
        Verdict::Verified => {}
        Verdict::Denied => return Err(unauthorized(DENIED)),
        Verdict::BackingOff(wait) => return Err(too_many(wait)),
        Verdict::Busy => return Err(busy()),
        Verdict::Unavailable(e) => return Err(infrastructure(e)),
    }
    let Some(acct) = stored else { return Err(unauthorized(DENIED)) };
    let mut cache = state.auth.verified.lock().unwrap_or_else(|p| p.into_inner());
    if cache.len() >= CACHE_LIMIT {
        cache.clear();
    }
    cache.insert(digest, (user.to_string(), acct.password_hash.clone()));
    Ok(Principal::from_role(user.to_string(), acct.role, &acct.instance_groups))
}

const DENIED: &str = "unknown user or wrong password";

fn busy() -> Response {
    retry_later(
        Http::SERVICE_UNAVAILABLE,
        "password checks are busy; retry shortly (engines should use API keys, which need no password check)",
        Duration::from_secs(1),
    )
}

/// A place in the line of password checks of this frontend (at most [`MAX_WAITING_CHECKS`]),
/// given up when dropped.
struct InLine(Arc<std::sync::atomic::AtomicUsize>);

impl InLine {
    fn join(line: &Arc<std::sync::atomic::AtomicUsize>) -> Option<InLine> {
        use std::sync::atomic::Ordering::AcqRel;
        line.fetch_update(AcqRel, std::sync::atomic::Ordering::Acquire, |n| (n < MAX_WAITING_CHECKS).then_some(n + 1))
            .ok()
            .map(|_| InLine(line.clone()))
    }
}

impl Drop for InLine {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

fn too_many(wait: Duration) -> Response {
    retry_later(
        Http::TOO_MANY_REQUESTS,
        "too many failed logins for this user or from this address; retry after the time in Retry-After",
        wait,
    )
}

/// One password verification, owned so that it can outlive the request that asked for it.
struct Check {
    user: String,
    password: String,
    hash: String,
    known: bool,
    address: String,
}

enum Verdict {
    Verified,
    Denied,
    BackingOff(Duration),
    Busy,
    Unavailable(Error),
}

impl Check {
    async fn run(self, state: AppState, _place: InLine) -> Verdict {
        let wait = ARGON2_WAIT.min(Duration::from_millis(state.config.request_timeout_ms / 2));
        let Ok(Ok(permit)) = tokio::time::timeout(wait, state.auth.argon2.clone().acquire_owned()).await else {
            return Verdict::Busy;
        };
        // Our turn: look at the back-off again. A burst of guesses that queued up behind the
        // permit is refused here once the first of them have started the back-off.
        match backoff(&state, &self.user, &self.address).await {
            Ok(Some(wait)) => return Verdict::BackingOff(wait),
            Ok(None) => {}
            Err(e) => return Verdict::Unavailable(e),
        }
        state.metrics.password_check();
        let (password, hash) = (self.password, self.hash);
        // The permit travels with the hashing thread and back: held until the outcome is
        // recorded, so the next check in line sees a back-off this failure starts.
        let (matches, permit) =
            match tokio::task::spawn_blocking(move || (kvcm_core::auth::verify_password(&password, &hash), permit))
                .await
            {
                Ok(done) => done,
                Err(_) => return Verdict::Denied,
            };
        let recorded = if matches && self.known {
            record_success(&state, &self.user, &self.address).await
        } else {
            record_failure(&state, &self.user, &self.address).await
        };
        drop(permit);
        match recorded {
            Err(e) => Verdict::Unavailable(e),
            Ok(()) if matches && self.known => Verdict::Verified,
            Ok(()) => Verdict::Denied,
        }
    }
}

/// The address failures are counted against: IPv4 as is (also when mapped into IPv6), IPv6 by
/// its /64 prefix (one host usually holds a whole /64, so counting single addresses would let
/// it rotate past the back-off), `unknown` when neither proxy header nor peer is known.
pub fn address_key(address: Option<IpAddr>) -> String {
    match address {
        None => "unknown".into(),
        Some(IpAddr::V4(a)) => a.to_string(),
        Some(IpAddr::V6(a)) => match a.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = a.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
    }
}

/// How long this user or address must still wait, if backing off. Three counters apply: the
/// (user, address) pair's always; the user's and the address's unless this address logged in
/// as this user recently — so a guesser elsewhere cannot lock a user out of the addresses it
/// uses, and typos of others behind the same NAT cannot lock out a user who logged in from it.
async fn backoff(state: &AppState, user: &str, address: &str) -> Result<Option<Duration>, Error> {
    let k = &state.auth.keys;
    let mut conn = state.conn.clone();
    let (pair, user_until, address_until, trusted): (Option<u64>, Option<u64>, Option<u64>, bool) = redis::pipe()
        .cmd("HGET")
        .arg(k.pair_failures(user, address))
        .arg("until")
        .cmd("HGET")
        .arg(k.user_failures(user))
        .arg("until")
        .cmd("HGET")
        .arg(k.address_failures(address))
        .arg("until")
        .cmd("EXISTS")
        .arg(k.trusted_address(user, address))
        .query_async(&mut conn)
        .await?;
    let now = kvcm_core::store::now_ms();
    let others = if trusted { None } else { user_until.max(address_until) };
    let until = pair.max(others).unwrap_or(0);
    Ok((until > now).then(|| Duration::from_millis(until - now)))
}

async fn record_failure(state: &AppState, user: &str, address: &str) -> Result<(), Error> {
    let c = &state.config;
    let k = &state.auth.keys;
    let mut inv = scripts::AUTH_FAILURE.script().prepare_invoke();
    inv.key(k.pair_failures(user, address)).key(k.user_failures(user)).key(k.address_failures(address));
    inv.arg(kvcm_core::store::now_ms())
        .arg(c.auth_backoff_after)
        .arg(c.auth_backoff_base_ms)
        .arg(c.auth_backoff_max_ms)
        .arg(c.auth_failure_window_s * 1000)
        // A resend of this call (its reply lost with a connection) counts nothing twice.
        .arg(format!("{:016x}", fastrand::u64(..)));
    let reply: (i64, String) = inv.invoke_async(&mut state.conn.clone()).await?;
    kvcm_core::scripts::status_reply(reply)?;
    tracing::warn!(%user, %address, "failed login");
    Ok(())
}

/// A successful login marks the address as one the user logs in from: exempt from the user's
/// and the address's back-off (not the pair's) for the failure window. It does not clear the
/// user's failures — a guesser spread over many addresses would otherwise get a fresh allowance
/// each time the real user logs in.
async fn record_success(state: &AppState, user: &str, address: &str) -> Result<(), Error> {
    let k = &state.auth.keys;
    let window = state.config.auth_failure_window_s;
    let _: () = redis::pipe()
        .cmd("SET")
        .arg(k.trusted_address(user, address))
        .arg(1)
        .arg("EX")
        .arg(window)
        .ignore()
        .query_async(&mut state.conn.clone())
        .await?;
    Ok(())
}

fn with_caller(mut req: Request, principal: Principal) -> Request {
    req.extensions_mut().insert(Caller(Arc::new(principal)));
    req
}

/// Whether the admin listener is on a loopback address. Never for an AWS Lambda function
/// (`lambda_plane` set): it has no listener and is reachable from wherever its trigger is.
pub fn admin_on_loopback(state: &AppState) -> bool {
    state.config.lambda_plane.is_none() && state.config.admin_bind().parse::<IpAddr>().is_ok_and(|a| a.is_loopback())
}

/// Admin plane: admins only, once an admin account exists. While none exists the plane is open
/// only on loopback or with `allow_anonymous_admin` (fail closed otherwise).
pub async fn admin_guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    // Accounts added or deleted through another frontend must count here at once (one GET of
    // the version; concurrent requests share it).
    if let Err(e) = state.registry.refresh().await {
        tracing::warn!(error = %e, "registry refresh before authentication failed");
        if let Some(refusal) = registry_too_old(&state) {
            return refusal;
        }
    }
    if !state.registry.snapshot().has_admin() {
        if admin_on_loopback(&state) || state.config.allow_anonymous_admin {
            return next.run(with_caller(req, Principal::Anonymous)).await;
        }
        return unauthorized(
            "no admin account exists and this admin plane is not on loopback: set bootstrap_admin_user \
             (see docs/security.md) and restart",
        );
    }
    let credentials = Credentials::of(&state, &req);
    match authenticate(&state, "admin", credentials).await {
        Ok(p @ Principal::Admin { .. }) => next.run(with_caller(req, p)).await,
        Ok(_) => error_response(
            Http::FORBIDDEN,
            StatusCode::INVALID_ARGUMENT,
            "this credential has ROLE_USER; the admin plane needs ROLE_ADMIN".into(),
        )
        .into_response(),
        Err(r) => r,
    }
}

/// Credentials and scopes are decided on the cached registry. If it could not be confirmed
/// current for a while (Valkey's registry shard unreachable), a revoked key or a moved instance
/// could keep passing: refuse instead (503) until the registry is reachable again.
fn registry_too_old(state: &AppState) -> Option<Response> {
    let limit = Duration::from_millis(state.config.registry_refresh_ms.saturating_mul(5)).max(Duration::from_secs(2));
    let stale = state.registry.confirmed_ago().is_none_or(|age| age > limit);
    stale.then(|| {
        retry_later(
            Http::SERVICE_UNAVAILABLE,
            "the registry (Valkey) could not be read recently, so credentials cannot be checked; retry shortly",
            Duration::from_secs(1),
        )
    })
}

/// Meta plane: with `meta_auth` on, every request needs a valid credential (also when none
/// exists: fail closed); handlers then check the instance group. Off: anonymous callers.
pub async fn meta_guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if !state.config.meta_auth {
        return next.run(with_caller(req, Principal::Anonymous)).await;
    }
    if let Some(refusal) = registry_too_old(&state) {
        return refusal;
    }
    let credentials = Credentials::of(&state, &req);
    match authenticate(&state, "meta", credentials).await {
        Ok(p) => next.run(with_caller(req, p)).await,
        Err(r) => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_bearer_and_api_key_credentials_are_read() {
        let pw = |u: &str, p: &str| Some(Presented::Password { user: u.into(), password: p.into() });
        assert_eq!(presented("Basic dXNlcjpwYTpzcw=="), pw("user", "pa:ss"));
        assert_eq!(presented("bearer u:p"), pw("u", "p"));
        assert_eq!(presented("Bearer kvcm_x_y"), Some(Presented::ApiKey("kvcm_x_y".into())));
        assert_eq!(presented("Basic bm9jb2xvbg=="), None);
        let token = format!("kvcm_{}_{}", "a".repeat(16), "b".repeat(64));
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("apikey:{token}"));
        assert_eq!(presented(&format!("Basic {basic}")), Some(Presented::ApiKey(token)));
        assert_eq!(presented("Digest x"), None);
        assert_eq!(presented("Bearer"), None);
    }

    #[test]
    fn proxy_written_addresses_parse_with_or_without_a_port() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(parse_forwarded(" 10.0.0.7 "), Some(ip("10.0.0.7")));
        assert_eq!(parse_forwarded("10.0.0.7:5678"), Some(ip("10.0.0.7")));
        assert_eq!(parse_forwarded("2001:db8::1"), Some(ip("2001:db8::1")));
        assert_eq!(parse_forwarded("[2001:db8::1]:443"), Some(ip("2001:db8::1")));
        for bad in ["unknown", "", "10.0.0.7:x", "[::1", "for=10.0.0.7"] {
            assert_eq!(parse_forwarded(bad), None, "{bad}");
        }
    }

    #[test]
    fn ipv6_clients_are_counted_per_64_and_mapped_ipv4_as_ipv4() {
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert_eq!(address_key(ip("2001:db8:1:2:aaaa::1")), address_key(ip("2001:db8:1:2:bbbb::9")));
        assert_ne!(address_key(ip("2001:db8:1:2::1")), address_key(ip("2001:db8:1:3::1")));
        assert_eq!(address_key(ip("::ffff:10.1.2.3")), "10.1.2.3");
        assert_eq!(address_key(None), "unknown");
    }

    #[test]
    fn engines_act_only_on_their_groups_and_admins_on_all() {
        let engine = Principal::Engine { name: "e".into(), groups: vec!["a".into()] };
        assert!(engine.may_act_on("a"));
        assert!(!engine.may_act_on("b"));
        assert!(!engine.may_act_on(""));
        let fleet = Principal::Engine { name: "f".into(), groups: vec![ALL_GROUPS.into()] };
        assert!(fleet.may_act_on("b"));
        assert!(!Principal::Engine { name: "n".into(), groups: vec![] }.may_act_on("a"));
        assert!(Principal::Admin { name: "r".into() }.may_act_on("b"));
        assert!(Principal::Anonymous.may_act_on("b"));
    }
}
