//! A lean HTTP/1.1 client for the load generator: one kept-alive connection driven by hyper
//! directly, with no pool, redirect or retry layers and no URL parsing per request.
//!
//! The load generator shares the machine's cores with the server it measures; reqwest's
//! per-request work (URL parsing, pool checkout, its tower layers) made the generator, not the
//! server, a large share of what an HTTP-vs-direct comparison measured. A connector in an engine
//! holds one connection and posts to fixed paths, which is what this does.

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;

/// One HTTP/1.1 connection to a server.
pub struct H1 {
    addr: SocketAddr,
    send: SendRequest<Full<Bytes>>,
}

impl H1 {
    pub async fn connect(addr: SocketAddr) -> Result<H1> {
        let tcp = tokio::net::TcpStream::connect(addr).await.with_context(|| format!("connecting to {addr}"))?;
        tcp.set_nodelay(true)?;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(H1 { addr, send })
    }

    /// POSTs a JSON body to `path`; the reply's body, or an error for a non-2xx status.
    pub async fn post(&mut self, path: &str, body: Bytes) -> Result<Bytes> {
        self.send.ready().await.context("the connection closed")?;
        let req = hyper::Request::post(path)
            .header(hyper::header::HOST, self.addr.to_string())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))?;
        let resp = self.send.send_request(req).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        anyhow::ensure!(status.is_success(), "HTTP {status}: {}", String::from_utf8_lossy(&body));
        Ok(body)
    }
}
