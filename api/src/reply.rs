//! The JSON edge of every RPC: [`WireJson`] parses a request body (HTTP 400 on bad JSON, 413 on
//! an oversized body) and [`Reply`] writes `{header: {status, request_id}, ...fields}` with
//! every field present, as protobuf JSON does — on errors too, with default values.
//!
//! Domain errors are HTTP 200 with a non-OK code and the message from core. Infrastructure
//! errors are logged here with the request id and answered with a generic message.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode as Http;
use axum::response::{IntoResponse, Response};
use kvcm_core::Error;
use kvcm_core::wire::{Header, Status, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::marker::PhantomData;
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

/// A request body parsed as protocol JSON.
#[derive(Debug)]
pub struct WireJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for WireJson<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let body = WireBody::<T>::from_request(req, state).await?;
        body.decode().map(WireJson)
    }
}

/// A request body checked as [`WireJson`] checks it (its size, a JSON object) and decoded by the
/// handler ([`WireBody::decode`]), so that the message may borrow from the body — a large
/// reportEvent's strings ([`kvcm_core::wire::meta::ReportEventBody`]). `Req` is the message the
/// OpenAPI description names.
#[derive(Debug)]
pub struct WireBody<Req> {
    bytes: Bytes,
    message: PhantomData<fn() -> Req>,
}

impl<Req> WireBody<Req> {
    /// The body as `T`, or the reply [`WireJson`] gives a body that is not one (HTTP 400).
    // The error is the reply itself, returned as the handler's (as a rejection is).
    #[allow(clippy::result_large_err)]
    pub fn decode<'a, T: Deserialize<'a>>(&'a self) -> Result<T, Response> {
        serde_json::from_slice::<T>(&self.bytes).map_err(|e| {
            error_response(
                Http::BAD_REQUEST,
                StatusCode::INVALID_ARGUMENT,
                format!("request body is not valid JSON for this RPC: {e}"),
            )
        })
    }
}

impl<S: Send + Sync, Req> FromRequest<S> for WireBody<Req> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = match Bytes::from_request(req, state).await {
            Ok(b) => b,
            Err(rejection) => {
                let status = rejection.status();
                let msg = if status == Http::PAYLOAD_TOO_LARGE {
                    "request body is larger than max_body_bytes; send fewer keys per request".to_string()
                } else {
                    rejection.body_text()
                };
                return Err(error_response(status, StatusCode::INVALID_ARGUMENT, msg));
            }
        };
        // A message is a JSON object. (serde would also read an array positionally into a
        // struct, which no protobuf JSON client sends and nobody should rely on.)
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(error_response(
                Http::BAD_REQUEST,
                StatusCode::INVALID_ARGUMENT,
                "request body is not valid JSON for this RPC: it must be a JSON object ({…})".into(),
            ));
        }
        Ok(WireBody { bytes, message: PhantomData })
    }
}

fn request_id() -> String {
    format!("{:016x}", fastrand::u64(..))
}

/// The wire status of a response, attached as an extension so the metrics layer can count it.
#[derive(Debug, Clone, Copy)]
pub struct WireCode(pub StatusCode);

/// How a reply message writes its fields after the header: through serde for ordinary
/// messages, as pre-rendered bytes for [`Rendered`] ones.
pub trait Fields {
    /// Appends `,"name":value` for each field the message writes (nothing if it has none).
    fn write_fields(&self, out: &mut Vec<u8>) -> serde_json::Result<()>;

    /// Fields that are already bytes, handed over to be sent as they are rather than copied
    /// into the reply (`None`: write them with [`Fields::write_fields`]).
    fn take_rendered(&mut self) -> Option<Vec<u8>> {
        None
    }

    /// A failure to put in the header over these (real, not default) fields: see [`Partial`].
    fn failure(&self) -> Option<(StatusCode, String)> {
        None
    }
}

impl<T: Serialize> Fields for T {
    fn write_fields(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        let start = out.len();
        serde_json::to_writer(&mut *out, self)?;
        // A message serialises as one JSON object, `{}` or `{"a":…,…}`: its fields are what
        // lies between the braces (the same bytes `#[serde(flatten)]` would write).
        debug_assert!(out.get(start) == Some(&b'{') && out.last() == Some(&b'}'));
        if out.len() - start <= 2 {
            out.truncate(start);
        } else {
            out[start] = b',';
            out.pop();
        }
        Ok(())
    }
}

/// The fields of a message as a JSON object (for the OpenAPI description's checks).
pub fn fields_value<T: Fields>(message: &T) -> serde_json::Result<serde_json::Value> {
    let mut fields = Vec::new();
    message.write_fields(&mut fields)?;
    let mut object = b"{".to_vec();
    object.extend_from_slice(fields.get(1..).unwrap_or_default());
    object.push(b'}');
    serde_json::from_slice(&object)
}

/// A reply message of type `T` whose fields were rendered to JSON already, by code that
/// writes the bytes serde would write for `T` (the read path renders thousands of locations
/// without building them). Described, and defaulted in error replies, as `T`.
pub struct Rendered<T> {
    fields: Vec<u8>,
    message: PhantomData<fn() -> T>,
}

impl<T> Rendered<T> {
    /// A buffer holding `,"name":`, for the caller to append the field's JSON value to and
    /// hand to [`Rendered::new`].
    pub fn field(name: &str) -> Vec<u8> {
        let mut out = b",".to_vec();
        // A string always serialises.
        let _ = serde_json::to_writer(&mut out, name);
        out.push(b':');
        out
    }

    /// The message whose fields are `fields` (`,"name":value` for each, in `T`'s order).
    pub fn new(fields: Vec<u8>) -> Self {
        Rendered { fields, message: PhantomData }
    }
}

impl<T> Fields for Rendered<T> {
    fn write_fields(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.extend_from_slice(&self.fields);
        Ok(())
    }

    fn take_rendered(&mut self) -> Option<Vec<u8>> {
        Some(std::mem::take(&mut self.fields))
    }
}

/// A reply body sent as a few pieces, each as it is: the envelope's head, pre-rendered fields
/// (megabytes for a long read, never copied again) and the closing brace. Its exact length is
/// known, so the reply keeps its Content-Length.
struct Pieces {
    parts: std::collections::VecDeque<Bytes>,
    left: u64,
}

impl Pieces {
    fn new(parts: impl IntoIterator<Item = Bytes>) -> Self {
        let parts: std::collections::VecDeque<Bytes> = parts.into_iter().filter(|p| !p.is_empty()).collect();
        let left = parts.iter().map(|p| p.len() as u64).sum();
        Pieces { parts, left }
    }
}

impl hyper::body::Body for Pieces {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        let next = self.parts.pop_front();
        if let Some(part) = &next {
            self.left -= part.len() as u64;
        }
        std::task::Poll::Ready(next.map(|part| Ok(hyper::body::Frame::data(part))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.left)
    }
}

impl<T: Fields + Default> Default for Rendered<T> {
    fn default() -> Self {
        let mut fields = Vec::new();
        if let Err(e) = T::default().write_fields(&mut fields) {
            tracing::error!(error = %e, "default reply serialisation failed");
        }
        Rendered::new(fields)
    }
}

impl<T> std::fmt::Debug for Rendered<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rendered").field("bytes", &self.fields.len()).finish()
    }
}

/// A reply message whose header may carry a failure over its real fields, for RPCs that report
/// per item and are not transactional (ReportEvent: `item_results` has every item's code, the
/// header the first failure). Described, and defaulted in error replies, as `T`.
#[derive(Debug, Default)]
pub struct Partial<T> {
    pub body: T,
    pub failure: Option<(StatusCode, String)>,
}

impl<T: Fields> Fields for Partial<T> {
    fn write_fields(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        self.body.write_fields(out)
    }

    fn failure(&self) -> Option<(StatusCode, String)> {
        self.failure.clone()
    }
}

impl<T: PartialSchema> PartialSchema for Partial<T> {
    fn schema() -> RefOr<Schema> {
        T::schema()
    }
}

impl<T: ToSchema> ToSchema for Partial<T> {
    fn name() -> std::borrow::Cow<'static, str> {
        T::name()
    }
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        T::schemas(schemas)
    }
}

impl<T: PartialSchema> PartialSchema for Rendered<T> {
    fn schema() -> RefOr<Schema> {
        T::schema()
    }
}

impl<T: ToSchema> ToSchema for Rendered<T> {
    fn name() -> std::borrow::Cow<'static, str> {
        T::name()
    }
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        T::schemas(schemas)
    }
}

fn envelope<T: Fields>(http: Http, code: StatusCode, message: String, mut body: T) -> Response {
    let header = Header { status: Status { code, message }, request_id: request_id() };
    let mut json = b"{\"header\":".to_vec();
    let rendered = body.take_rendered();
    let written = serde_json::to_writer(&mut json, &header).and_then(|()| match rendered {
        Some(_) => Ok(()),
        None => body.write_fields(&mut json),
    });
    if let Err(e) = written {
        tracing::error!(error = %e, "response serialisation failed");
        return (Http::INTERNAL_SERVER_ERROR, "{}").into_response();
    }
    let content_type = [(axum::http::header::CONTENT_TYPE, "application/json")];
    let mut resp = match rendered {
        Some(fields) => {
            let body = Pieces::new([Bytes::from(json), Bytes::from(fields), Bytes::from_static(b"}")]);
            (http, content_type, axum::body::Body::new(body)).into_response()
        }
        None => {
            json.push(b'}');
            (http, content_type, json).into_response()
        }
    };
    resp.extensions_mut().insert(WireCode(code));
    resp
}

/// An error reply that carries only a header (for rejections before a handler runs).
pub fn error_response(http: Http, code: StatusCode, message: String) -> Response {
    envelope(http, code, message, serde_json::Map::new())
}

/// The outcome of an RPC: its response fields, or an error that becomes a non-OK header over
/// default fields.
#[derive(Debug)]
pub struct Reply<T>(pub Result<T, Error>);

impl<T> From<Result<T, Error>> for Reply<T> {
    fn from(r: Result<T, Error>) -> Self {
        Reply(r)
    }
}

impl<T: Fields + Default> IntoResponse for Reply<T> {
    fn into_response(self) -> Response {
        match self.0 {
            Ok(body) => match body.failure() {
                Some((code, message)) => envelope(Http::OK, code, message, body),
                None => envelope(Http::OK, StatusCode::OK, "OK".into(), body),
            },
            Err(e) => {
                if e.is_out_of_memory() {
                    tracing::error!(error = %e, "request failed: Valkey is out of memory (raise maxmemory or lower quotas)");
                } else if e.is_unavailable() {
                    // Expected during a failover, once per request: not an error of kvcm's.
                    tracing::warn!(error = %e, "request failed: the metadata store is unavailable");
                } else if e.is_internal() {
                    tracing::error!(error = %e, "request failed");
                }
                // Domain errors are HTTP 200 (Tair's convention); a credential acting beyond
                // its scopes is an authorisation failure, HTTP 403 like the guards' refusals;
                // an unavailable metadata store (unreachable, failing over) is HTTP 503 with
                // Retry-After, so that connectors and load balancers retry.
                let http = match &e {
                    Error::Forbidden(_) => Http::FORBIDDEN,
                    e if e.is_unavailable() => Http::SERVICE_UNAVAILABLE,
                    _ => Http::OK,
                };
                let mut resp = envelope(http, e.code(), e.public_message(), T::default());
                if http == Http::SERVICE_UNAVAILABLE {
                    resp.headers_mut()
                        .insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
                }
                resp
            }
        }
    }
}
