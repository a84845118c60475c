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
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A request body parsed as protocol JSON.
#[derive(Debug)]
pub struct WireJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for WireJson<T> {
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
        match serde_json::from_slice::<T>(&bytes) {
            Ok(v) => Ok(WireJson(v)),
            Err(e) => Err(error_response(
                Http::BAD_REQUEST,
                StatusCode::INVALID_ARGUMENT,
                format!("request body is not valid JSON for this RPC: {e}"),
            )),
        }
    }
}

fn request_id() -> String {
    format!("{:016x}", fastrand::u64(..))
}

/// The wire status of a response, attached as an extension so the metrics layer can count it.
#[derive(Debug, Clone, Copy)]
pub struct WireCode(pub StatusCode);

#[derive(Serialize)]
struct Envelope<'a, T: Serialize> {
    header: Header,
    #[serde(flatten)]
    body: &'a T,
}

fn envelope<T: Serialize>(http: Http, code: StatusCode, message: String, body: &T) -> Response {
    let header = Header { status: Status { code, message }, request_id: request_id() };
    let json = match serde_json::to_vec(&Envelope { header, body }) {
        Ok(j) => j,
        Err(e) => {
            tracing::error!(error = %e, "response serialisation failed");
            return (Http::INTERNAL_SERVER_ERROR, "{}").into_response();
        }
    };
    let mut resp = (http, [(axum::http::header::CONTENT_TYPE, "application/json")], json).into_response();
    resp.extensions_mut().insert(WireCode(code));
    resp
}

/// An error reply that carries only a header (for rejections before a handler runs).
pub fn error_response(http: Http, code: StatusCode, message: String) -> Response {
    envelope(http, code, message, &serde_json::Map::new())
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

impl<T: Serialize + Default> IntoResponse for Reply<T> {
    fn into_response(self) -> Response {
        match self.0 {
            Ok(body) => envelope(Http::OK, StatusCode::OK, "OK".into(), &body),
            Err(e) => {
                if e.is_internal() {
                    tracing::error!(error = %e, "request failed");
                }
                // Domain errors are HTTP 200 (Tair's convention); a credential acting beyond
                // its scopes is an authorisation failure, HTTP 403 like the guards' refusals.
                let http = if matches!(e, Error::Forbidden(_)) { Http::FORBIDDEN } else { Http::OK };
                envelope(http, e.code(), e.public_message(), &T::default())
            }
        }
    }
}
