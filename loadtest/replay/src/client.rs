//! The HTTP side of a simulated engine: one `POST /api/<rpc>` with a JSON body, credentials,
//! a deadline, and a classification of every way a call can fail.
//!
//! [`Rpc`] names the calls the replay makes; [`Client::call`] returns the parsed reply of an OK
//! call or a [`CallError`] whose [`CallError::kind`] is the key errors are counted under in the
//! report (`transport`, `timeout`, `http_<status>`, `bad_reply`, or the reply's status code name
//! such as `REACH_MAX_ENTITY_CAPACITY`). Secrets given as credentials never appear in errors.

use serde_json::Value;
use std::time::{Duration, Instant};

/// A credential, sent as `Authorization: Bearer …` (an API key, or `user:password`, both of which
/// kvcm accepts as a bearer token).
#[derive(Clone, Debug)]
pub enum Credential {
    /// An API key (`kvcm_…`).
    ApiKey(String),
    /// An account as `user:password`.
    Account(String),
}

impl Credential {
    /// The `Authorization` header value.
    fn header(&self) -> String {
        match self {
            Credential::ApiKey(k) | Credential::Account(k) => format!("Bearer {k}"),
        }
    }
}

/// The RPCs a replay makes, for latency and error accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rpc {
    GetCacheLocation,
    StartWriteCache,
    FinishWriteCache,
}

impl Rpc {
    /// Every RPC, in the order of one request's flow.
    pub const ALL: [Rpc; 3] = [Rpc::GetCacheLocation, Rpc::StartWriteCache, Rpc::FinishWriteCache];

    /// The route name (`/api/<name>`).
    pub fn name(self) -> &'static str {
        match self {
            Rpc::GetCacheLocation => "getCacheLocation",
            Rpc::StartWriteCache => "startWriteCache",
            Rpc::FinishWriteCache => "finishWriteCache",
        }
    }
}

/// Why a call did not return an OK reply.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("no reply within the deadline")]
    Timeout,
    #[error("transport error: {0}")]
    Transport(String),
    #[error("HTTP {status}: {body}")]
    Http { status: u16, body: String },
    #[error("reply is not the JSON expected: {0}")]
    BadReply(String),
    #[error("{code}: {message}")]
    Status { code: String, message: String },
}

impl CallError {
    /// The key errors of this kind are counted under.
    pub fn kind(&self) -> String {
        match self {
            CallError::Timeout => "timeout".into(),
            CallError::Transport(_) => "transport".into(),
            CallError::Http { status, .. } => format!("http_{status}"),
            CallError::BadReply(_) => "bad_reply".into(),
            CallError::Status { code, .. } => code.clone(),
        }
    }
}

/// A kvcm HTTP client for one plane (meta or admin). Cheap to clone (reqwest pools connections).
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    auth: Option<String>,
}

impl Client {
    /// A client of `base` (e.g. `http://127.0.0.1:6382`) with a per-call deadline.
    pub fn new(base: &str, credential: Option<&Credential>, timeout: Duration) -> anyhow::Result<Client> {
        let http = reqwest::Client::builder().timeout(timeout).pool_max_idle_per_host(256).build()?;
        Ok(Client { http, base: base.trim_end_matches('/').to_string(), auth: credential.map(Credential::header) })
    }

    /// POSTs `body` to `/api/<rpc>`; the reply of an OK call, with the call's wall time.
    pub async fn call(&self, rpc: &str, body: &Value) -> (Duration, Result<Value, CallError>) {
        let started = Instant::now();
        let result = self.call_inner(rpc, body).await;
        (started.elapsed(), result)
    }

    async fn call_inner(&self, rpc: &str, body: &Value) -> Result<Value, CallError> {
        let mut req = self
            .http
            .post(format!("{}/api/{rpc}", self.base))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(auth) = &self.auth {
            req = req.header("authorization", auth);
        }
        let resp = req.send().await.map_err(classify)?;
        let status = resp.status().as_u16();
        let text = resp.text().await.map_err(classify)?;
        if status != 200 {
            return Err(CallError::Http { status, body: text.chars().take(300).collect() });
        }
        let reply: Value = serde_json::from_str(&text).map_err(|e| CallError::BadReply(e.to_string()))?;
        let code = reply["header"]["status"]["code"].as_str().unwrap_or("<no code>");
        if code != "OK" {
            return Err(CallError::Status {
                code: code.to_string(),
                message: reply["header"]["status"]["message"].as_str().unwrap_or("").to_string(),
            });
        }
        Ok(reply)
    }
}

fn classify(e: reqwest::Error) -> CallError {
    if e.is_timeout() { CallError::Timeout } else { CallError::Transport(e.without_url().to_string()) }
}
