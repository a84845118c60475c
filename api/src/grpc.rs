//! Tair KVCM's gRPC services — `kv_cache_manager.proto.meta.MetaService` and
//! `kv_cache_manager.proto.admin.AdminService`, wire-compatible (`api/proto/tair/*.proto`: Tair's
//! packages, messages, field names and numbers) — served by the very routers that serve HTTP.
//!
//! One core, two transports: a gRPC call's protobuf message is turned into its protobuf JSON
//! (field names as in the proto, 64-bit integers as strings, enums by name — exactly the JSON of
//! `POST /api/<rpcName>`, which is how Tair's HTTP layer speaks too), sent through the plane's
//! axum router in process (so authentication, scopes, bounds, metrics, the event log and errors
//! are the HTTP ones, not a copy), and the JSON reply is read back into the RPC's response
//! message. Nothing is generated per RPC: the protos are compiled at build time into a descriptor
//! pool (`build.rs`, protox) and messages are [`DynamicMessage`]s.
//!
//! How outcomes map: a reply with a `header` (every kvcm reply, errors included) is returned as
//! the response message with gRPC status OK, its `header.status` telling the outcome, as Tair's
//! clients expect; HTTP 401 becomes `UNAUTHENTICATED`, 429 (login back-off) and 413 (body over
//! `max_body_bytes`) `RESOURCE_EXHAUSTED`; a method kvcm does not serve is `UNIMPLEMENTED`; a
//! message that does not decode is `INVALID_ARGUMENT`; HTTP 503 (`SERVICE_NOT_READY`: a
//! failover, a stale registry, the body budget) is `UNAVAILABLE`, which gRPC clients retry. The
//! caller's `authorization` metadata is the HTTP header of the same name (`Bearer <api key>` or
//! `Basic …`), its address the client address (login back-off). Fields a client sends that kvcm's
//! protos do not declare are ignored, as unknown JSON fields are over HTTP.
//!
//! What a call may cost: a request message is at most `max_body_bytes / 4` (its protobuf JSON,
//! where a one-byte varint becomes a quoted number, stays within the `max_body_bytes` the HTTP
//! plane then enforces), and decoding and converting it holds [`EXPANSION`] times its size of
//! the frontend's in-flight body budget (`max_inflight_body_bytes`, shared with HTTP) — past the
//! budget a call waits a second, then answers `UNAVAILABLE`. The JSON is written into a buffer
//! that stops at `max_body_bytes`. Replies are as large as the HTTP reply, which the plane
//! bounds (`max_response_*`).

use axum::Router;
use axum::extract::ConnectInfo;
use bytes::{Buf, BufMut, Bytes};
use prost::Message;
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, MethodDescriptor, SerializeOptions};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tower::ServiceExt;

/// Tair's services as compiled from `api/proto/tair/` by `build.rs`.
pub fn descriptors() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(&include_bytes!(concat!(env!("OUT_DIR"), "/tair_descriptor.bin"))[..])
            .expect("the descriptor set build.rs wrote decodes")
    })
}

/// The meta plane's service name.
pub const META_SERVICE: &str = "kv_cache_manager.proto.meta.MetaService";
/// The admin plane's service name.
pub const ADMIN_SERVICE: &str = "kv_cache_manager.proto.admin.AdminService";
/// Tair's debug service (fault injection), served beside AdminService.
pub const DEBUG_SERVICE: &str = "kv_cache_manager.proto.debug.DebugService";

/// Protobuf JSON as kvcm's HTTP planes write it: proto field names, every field (defaults too).
pub fn json_options() -> SerializeOptions {
    SerializeOptions::new().use_proto_field_name(true).skip_default_fields(false)
}

/// Reads kvcm's JSON into a message, ignoring kvcm's extension fields the proto does not have.
pub fn from_json(desc: prost_reflect::MessageDescriptor, json: &[u8]) -> Result<DynamicMessage, String> {
    let mut de = serde_json::Deserializer::from_slice(json);
    DynamicMessage::deserialize_with_options(desc, &mut de, &DeserializeOptions::new().deny_unknown_fields(false))
        .map_err(|e| e.to_string())
}

/// A message as the JSON kvcm's HTTP planes take.
pub fn to_json(message: &DynamicMessage) -> Result<Vec<u8>, String> {
    to_json_within(message, usize::MAX)
}

/// [`to_json`], failing as soon as the JSON passes `limit` bytes (nothing larger is allocated).
pub fn to_json_within(message: &DynamicMessage, limit: usize) -> Result<Vec<u8>, String> {
    struct Bounded {
        out: Vec<u8>,
        limit: usize,
    }
    impl std::io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.out.len() + buf.len() > self.limit {
                return Err(std::io::Error::other("the request's JSON is larger than max_body_bytes"));
            }
            self.out.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Bounded { out: Vec::new(), limit };
    message
        .serialize_with_options(&mut serde_json::Serializer::new(&mut out), &json_options())
        .map_err(|e| e.to_string())?;
    Ok(out.out)
}

/// Messages travel as their encoded bytes; [`DynamicMessage`] needs its descriptor to decode,
/// which the codec does not know.
#[derive(Debug, Clone, Copy, Default)]
pub struct BytesCodec;

impl Codec for BytesCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = BytesCodec;
    type Decoder = BytesCodec;
    fn encoder(&mut self) -> Self::Encoder {
        BytesCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        BytesCodec
    }
}

impl Encoder for BytesCodec {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for BytesCodec {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// Bytes of memory a request message may take while it is decoded and written as JSON, per
/// byte of its encoding (a one-byte varint becomes a decoded value of ~32 bytes).
pub const EXPANSION: usize = 40;

/// One plane's gRPC service in front of its HTTP router.
#[derive(Clone)]
pub struct Plane {
    service: &'static str,
    router: Router,
    /// `max_body_bytes`: the JSON of a request may not exceed it.
    max_body: usize,
    /// The frontend's in-flight body budget, in KiB (shared with HTTP).
    bodies: std::sync::Arc<tokio::sync::Semaphore>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl Plane {
    pub fn new(
        service: &'static str,
        router: Router,
        max_body: usize,
        bodies: std::sync::Arc<tokio::sync::Semaphore>,
    ) -> Plane {
        Plane { service, router, max_body, bodies }
    }

    async fn handle(self, req: axum::http::Request<tonic::body::Body>) -> axum::http::Response<tonic::body::Body> {
        let name = req.uri().path().rsplit('/').next().unwrap_or_default().to_string();
        let method =
            descriptors().get_service_by_name(self.service).and_then(|s| s.methods().find(|m| m.name() == name));
        let Some(method) = method else {
            return Status::unimplemented(format!("{} has no method {name} in kvcm", self.service)).into_http();
        };
        let max_message = (self.max_body / 4).max(1024);
        let mut grpc =
            tonic::server::Grpc::new(BytesCodec).apply_max_message_size_config(Some(max_message), Some(usize::MAX));
        grpc.unary(Unary { plane: self, method }, req).await
    }
}

struct Unary {
    plane: Plane,
    method: MethodDescriptor,
}

impl tonic::server::UnaryService<Bytes> for Unary {
    type Response = Bytes;
    type Future = BoxFuture<Result<tonic::Response<Bytes>, Status>>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        let (plane, method) = (self.plane.clone(), self.method.clone());
        Box::pin(async move { call(plane, method, request).await })
    }
}

/// The RPC's HTTP route: `/api/` and its name with a lowercase first letter.
fn route(method: &MethodDescriptor) -> String {
    format!("/api/{}", crate::http_rpc_name(method.name()))
}

/// The `header.status.message` of a kvcm reply, or the body as text.
fn reply_message(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["header"]["status"]["message"].as_str().map(String::from))
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned())
}

async fn call(
    plane: Plane,
    method: MethodDescriptor,
    request: tonic::Request<Bytes>,
) -> Result<tonic::Response<Bytes>, Status> {
    let auth = request.metadata().get("authorization").and_then(|v| v.to_str().ok()).map(String::from);
    let peer = request.remote_addr();
    let encoded = request.into_inner();
    // Decoding and converting hold a share of the in-flight budget for the memory they take.
    let kib = u32::try_from((encoded.len().max(1) * EXPANSION).div_ceil(1024)).unwrap_or(u32::MAX);
    let share = tokio::time::timeout(std::time::Duration::from_secs(1), plane.bodies.acquire_many(kib)).await;
    let Ok(Ok(share)) = share else {
        return Err(Status::unavailable("too many requests in flight on this frontend; retry"));
    };
    let json = {
        let input = DynamicMessage::decode(method.input(), encoded)
            .map_err(|e| Status::invalid_argument(format!("{} does not decode: {e}", method.input().full_name())))?;
        to_json_within(&input, plane.max_body).map_err(Status::resource_exhausted)?
    };
    drop(share);
    let mut http_request = axum::http::Request::post(route(&method))
        .header("content-type", "application/json")
        .header("content-length", json.len());
    if let Some(auth) = auth {
        http_request = http_request.header("authorization", auth);
    }
    let mut http_request =
        http_request.body(axum::body::Body::from(json)).map_err(|e| Status::internal(e.to_string()))?;
    if let Some(peer) = peer {
        http_request.extensions_mut().insert(ConnectInfo(peer));
    }
    let response = plane.router.oneshot(http_request).await.unwrap_or_else(|never: Infallible| match never {});
    let status = response.status();
    // The plane bounds its replies (max_response_*); this only collects what it wrote.
    let body =
        axum::body::to_bytes(response.into_body(), usize::MAX).await.map_err(|e| Status::internal(e.to_string()))?;
    match status.as_u16() {
        401 => return Err(Status::unauthenticated(reply_message(&body))),
        413 | 429 => return Err(Status::resource_exhausted(reply_message(&body))),
        503 => return Err(Status::unavailable(reply_message(&body))),
        408 => return Err(Status::deadline_exceeded(reply_message(&body))),
        _ => {}
    }
    let output = from_json(method.output(), &body).map_err(|e| {
        Status::internal(format!("kvcm's reply (HTTP {status}) is not a {}: {e}", method.output().full_name()))
    })?;
    Ok(tonic::Response::new(Bytes::from(output.encode_to_vec())))
}

macro_rules! named_plane {
    ($name:ident, $service:expr) => {
        /// A plane's gRPC service under its Tair name.
        #[derive(Clone)]
        pub struct $name(pub Plane);

        impl tonic::server::NamedService for $name {
            const NAME: &'static str = $service;
        }

        impl tower::Service<axum::http::Request<tonic::body::Body>> for $name {
            type Response = axum::http::Response<tonic::body::Body>;
            type Error = Infallible;
            type Future = BoxFuture<Result<Self::Response, Infallible>>;

            fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
                Poll::Ready(Ok(()))
            }

            fn call(&mut self, req: axum::http::Request<tonic::body::Body>) -> Self::Future {
                let plane = self.0.clone();
                Box::pin(async move { Ok(plane.handle(req).await) })
            }
        }
    };
}

named_plane!(MetaService, META_SERVICE);
named_plane!(AdminService, ADMIN_SERVICE);
named_plane!(DebugService, DEBUG_SERVICE);

/// A gRPC connection holding one of its listener's connection permits until it closes, and
/// closed if its first bytes (the HTTP/2 preface) do not arrive within the deadline: a client
/// cannot hold a permit by connecting and sending nothing.
pub struct Limited {
    stream: tokio::net::TcpStream,
    _permit: tokio::sync::OwnedSemaphorePermit,
    first_bytes: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl tokio::io::AsyncRead for Limited {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        if self.first_bytes.is_some() {
            if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
                self.first_bytes = None;
            } else if read.is_pending()
                && let Some(deadline) = self.first_bytes.as_mut()
                && deadline.as_mut().poll(cx).is_ready()
            {
                return Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no HTTP/2 preface within header_read_timeout_ms",
                )));
            }
        }
        read
    }
}

impl tokio::io::AsyncWrite for Limited {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Limited {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

/// Connections accepted while fewer than `max_connections` are open (a permit is taken before
/// `accept`, as the HTTP listeners do); accept errors (e.g. out of file descriptors) back off.
fn limited(
    listener: tokio::net::TcpListener,
    max_connections: usize,
    first_bytes: std::time::Duration,
) -> impl futures::Stream<Item = std::io::Result<Limited>> {
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(max_connections));
    futures::stream::unfold((listener, permits), move |(listener, permits)| async move {
        let permit = permits.clone().acquire_owned().await.ok()?;
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let deadline = Some(Box::pin(tokio::time::sleep(first_bytes)));
                    let conn = Limited { stream, _permit: permit, first_bytes: deadline };
                    return Some((Ok(conn), (listener, permits)));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "gRPC accept failed; retrying in 100 ms");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    })
}

/// Most concurrent calls on one HTTP/2 connection.
const STREAMS_PER_CONNECTION: u32 = 256;

/// Serves one plane's gRPC service on `listener` until `shutdown`: at most `max_connections`
/// connections at once (as the HTTP planes), each closed if it sends nothing within
/// `first_bytes` (`header_read_timeout_ms`), [`STREAMS_PER_CONNECTION`] calls on each, every
/// call bounded by `request_timeout`; idle connections are pinged every 30 s and closed when
/// the peer stops answering.
pub async fn serve(
    listener: tokio::net::TcpListener,
    routes: tonic::service::Routes,
    request_timeout: std::time::Duration,
    max_connections: usize,
    first_bytes: std::time::Duration,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    tonic::transport::Server::builder()
        .timeout(request_timeout)
        .max_concurrent_streams(STREAMS_PER_CONNECTION)
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(30)))
        .add_routes(routes)
        .serve_with_incoming_shutdown(limited(listener, max_connections, first_bytes), shutdown)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rpc_of_both_services_has_its_http_route() {
        let meta = descriptors().get_service_by_name(META_SERVICE).unwrap();
        let routes: Vec<String> = meta.methods().map(|m| route(&m)).collect();
        assert!(routes.contains(&"/api/getCacheLocationLen".to_string()), "{routes:?}");
        assert!(routes.contains(&"/api/reportEvent".to_string()), "{routes:?}");
        assert_eq!(meta.methods().count(), 13, "every Tair MetaService method");
        let admin = descriptors().get_service_by_name(ADMIN_SERVICE).unwrap();
        assert!(admin.methods().any(|m| route(&m) == "/api/addStorage"));
    }

    #[test]
    fn int64_fields_travel_as_strings_and_enums_by_name() {
        let desc = descriptors().get_message_by_name("kv_cache_manager.proto.meta.GetCacheLocationRequest").unwrap();
        let msg = from_json(
            desc,
            br#"{"instance_id":"i","query_type":"QT_PREFIX_MATCH","block_keys":["1",2],"kvcm_extra":1}"#,
        )
        .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&to_json(&msg).unwrap()).unwrap();
        assert_eq!(json["block_keys"], serde_json::json!(["1", "2"]));
        assert_eq!(json["query_type"], "QT_PREFIX_MATCH");
        assert_eq!(json["sw_size"], 0, "defaults are written, as kvcm's HTTP replies do");
    }
}
