//! Connecting to Valkey: one multiplexed cluster connection per process, cloned into every
//! handler (no pool on the request path; see TOOLS.md), plus the single-node connections that
//! commands reaching one node need (SCAN, INFO). Per-command and connect timeouts come from the
//! config; scripts are loaded on every primary once connected.
//!
//! [`Access`] is everything a connection needs, built once from the config: the seed URLs, the
//! AUTH user and password (the password from `KVCM_VALKEY_PASSWORD` or `valkey_password_file`,
//! see `config`), and for `rediss://` seeds the TLS material — a CA file that replaces the
//! system's trusted roots (loaded by the redis crate through rustls-native-certs, so
//! `SSL_CERT_FILE` / `SSL_CERT_DIR` choose them), a client certificate and key for mutual TLS.
//! The files are read and parsed when the `Access` is built, so a bad file stops the start with
//! an error naming its key. TLS is rustls with the ring provider, installed here.
//!
//! How it fails: a cluster connect that fails is diagnosed before it is reported
//! ([`ConnectError`]). Rejected credentials and untrusted certificates get a message naming the
//! setting to fix. Otherwise the seeds are probed on fresh sockets — a plain `PING`, then a TLS
//! ClientHello — so a `redis://` URL at a TLS-only port says "seems to speak TLS: use
//! rediss://" and a `rediss://` URL at a plain port says it answers in plain text, where the
//! client alone would report a reset, a protocol error or a timeout. No message carries a
//! password: URLs are printed redacted, and Valkey's error replies do not echo it.

use crate::config::{Config, VALKEY_PASSWORD_ENV, ValkeyPassword, redact_url};
use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, ClientTlsConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisError,
    TlsCertificates,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Why connecting to Valkey failed, worded for the operator who must fix it.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// A TLS file that cannot be used (the key names it).
    #[error("key `{key}`: {why}")]
    Setting { key: &'static str, why: String },
    /// A `redis://` seed whose port answers a TLS ClientHello.
    #[error("the endpoint at {addr} seems to speak TLS: use rediss:// (and valkey_tls_ca_file for a private CA)")]
    SpeaksTls { addr: String },
    /// A `rediss://` seed whose port answers in plain RESP.
    #[error(
        "the endpoint at {addr} answers in plain text, not TLS: use redis://, or point rediss:// at the port \
         where it serves TLS"
    )]
    SpeaksPlain { addr: String },
    /// WRONGPASS: the user or password is wrong (the password is never shown).
    #[error("Valkey refused the credentials of user `{user}` (password from {from}): {detail}")]
    Refused { user: String, from: String, detail: String },
    /// NOAUTH: the server wants a password and none was given.
    #[error("Valkey requires a password and none is configured: set {VALKEY_PASSWORD_ENV} or valkey_password_file")]
    AuthRequired,
    /// The TLS handshake failed for a reason the operator can fix.
    #[error("TLS handshake with Valkey failed ({detail}): {hint}")]
    Tls { detail: String, hint: String },
    /// Anything else Valkey or the client reported.
    #[error(transparent)]
    Valkey(#[from] RedisError),
    /// Connected, but the Lua scripts could not be loaded.
    #[error("cannot load the Lua scripts: {0}")]
    Scripts(crate::error::Error),
}

/// What every connection to the cluster needs: seeds, credentials, TLS material, timeouts.
/// Cheap to clone; its `Debug` shows no secret.
#[derive(Clone)]
pub struct Access {
    seeds: Vec<String>,
    username: Option<String>,
    password: Option<ValkeyPassword>,
    tls: Option<Tls>,
    timeout: Duration,
    connect_timeout: Duration,
}

/// TLS settings of `rediss://` seeds.
#[derive(Clone)]
struct Tls {
    /// Set when a CA file or client certificate replaces the client's defaults.
    certs: Option<TlsCertificates>,
    ca_file: Option<String>,
    client_cert: bool,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let seeds: Vec<String> = self.seeds.iter().map(|s| redact_url(s)).collect();
        f.debug_struct("Access")
            .field("seeds", &seeds)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|p| &p.source))
            .field("tls", &self.tls.as_ref().map(|t| (&t.ca_file, t.client_cert)))
            .finish()
    }
}

impl Access {
    /// Reads the config's Valkey settings, and its TLS files for `rediss://` seeds.
    pub fn from_config(config: &Config) -> Result<Access, ConnectError> {
        install_crypto_provider();
        let optional = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let tls = if config.valkey_tls() {
            let ca = optional(&config.valkey_tls_ca_file);
            let root_cert = ca.as_deref().map(|path| read_pem_certs("valkey_tls_ca_file", path)).transpose()?;
            let client_tls = match optional(&config.valkey_tls_client_cert_file) {
                Some(cert) => Some(ClientTlsConfig {
                    client_cert: read_pem_certs("valkey_tls_client_cert_file", &cert)?,
                    client_key: read_pem_key("valkey_tls_client_key_file", &config.valkey_tls_client_key_file)?,
                }),
                None => None,
            };
            let client_cert = client_tls.is_some();
            let custom = root_cert.is_some() || client_cert;
            Some(Tls { certs: custom.then_some(TlsCertificates { client_tls, root_cert }), ca_file: ca, client_cert })
        } else {
            None
        };
        Ok(Access {
            seeds: config.valkey_urls(),
            username: optional(&config.valkey_username),
            password: config.valkey_password.clone(),
            tls,
            timeout: Duration::from_millis(config.valkey_timeout_ms),
            connect_timeout: Duration::from_millis(config.valkey_connect_timeout_ms),
        })
    }

    /// Seeds alone: credentials only as the URLs carry them, and for `rediss://` the system's
    /// roots (tools and tests of a local cluster).
    pub fn from_urls(urls: &[String], timeout_ms: u64, connect_timeout_ms: u64) -> Access {
        install_crypto_provider();
        let tls = urls.first().is_some_and(|u| u.starts_with("rediss://"));
        Access {
            seeds: urls.to_vec(),
            username: None,
            password: None,
            tls: tls.then_some(Tls { certs: None, ca_file: None, client_cert: false }),
            timeout: Duration::from_millis(timeout_ms),
            connect_timeout: Duration::from_millis(connect_timeout_ms),
        }
    }

    /// Opens the cluster connection and loads every Lua script.
    pub async fn connect(&self) -> Result<ClusterConnection, ConnectError> {
        let mut conn = self.cluster().await?;
        crate::scripts::load_all(&mut conn).await.map_err(ConnectError::Scripts)?;
        Ok(conn)
    }

    /// Opens the cluster connection (no scripts loaded); a failure is diagnosed.
    pub async fn cluster(&self) -> Result<ClusterConnection, ConnectError> {
        // With a password and a plain scheme, the seeds are probed first: AUTH must not go out in
        // clear to an endpoint that speaks only TLS (the usual mistake with ElastiCache), only to
        // be refused after the password has crossed the network.
        if self.tls.is_none() && (self.password.is_some() || self.url_password()) {
            for seed in &self.seeds {
                let Some((host, port)) = host_port(seed) else { continue };
                if probe(&host, port, self.connect_timeout).await == Speaks::Tls {
                    return Err(ConnectError::SpeaksTls { addr: format!("{host}:{port}") });
                }
            }
        }
        let mut builder = ClusterClient::builder(self.seeds.clone())
            .response_timeout(self.timeout)
            .connection_timeout(self.connect_timeout)
            .retries(2);
        if let Some(user) = &self.username {
            builder = builder.username(user);
        }
        if let Some(password) = &self.password {
            builder = builder.password(password.secret.expose());
        }
        if let Some(certs) = self.tls.as_ref().and_then(|t| t.certs.clone()) {
            builder = builder.certs(certs);
        }
        let client = builder.build()?;
        match client.get_async_connection().await {
            Ok(conn) => Ok(conn),
            Err(e) => Err(self.diagnose(e).await),
        }
    }

    /// A connection to the one node at `addr` (`host:port`, as CLUSTER NODES / SLOTS announce
    /// it), with the seeds' scheme, credentials and TLS settings.
    pub async fn node(&self, addr: &str) -> Result<MultiplexedConnection, ConnectError> {
        let seed = self.seeds.first().map(String::as_str).unwrap_or("redis://");
        let info = node_url(seed, addr).as_str().into_connection_info()?;
        let mut settings = info.redis_settings().clone();
        if let Some(user) = &self.username {
            settings = settings.set_username(user);
        }
        if let Some(password) = &self.password {
            settings = settings.set_password(password.secret.expose());
        }
        let info: ConnectionInfo = info.set_redis_settings(settings);
        let client = match self.tls.as_ref().and_then(|t| t.certs.clone()) {
            Some(certs) => redis::Client::build_with_tls(info, certs)?,
            None => redis::Client::open(info)?,
        };
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.timeout));
        Ok(client.get_multiplexed_async_connection_with_config(&config).await?)
    }

    /// Turns a failed cluster connect into the most useful error: credentials, certificates,
    /// then the wrong scheme found by probing the seeds.
    async fn diagnose(&self, e: RedisError) -> ConnectError {
        // The cluster client wraps the first node's error into its own text (kind Io): the text
        // decides, shown without the wrapper's prefix.
        let full = e.to_string();
        let text = full.strip_prefix("Failed to create initial connections - Io: ").unwrap_or(&full).to_string();
        if text.contains("WRONGPASS")
            || text.contains("AuthenticationFailed")
            || e.kind() == redis::ErrorKind::AuthenticationFailed
        {
            let from = match &self.password {
                Some(p) => p.source.clone(),
                None => "valkey_url".into(),
            };
            let user = self.username.clone().unwrap_or_else(|| self.url_user().unwrap_or_else(|| "default".into()));
            return ConnectError::Refused { user, from, detail: text };
        }
        if text.contains("NOAUTH") {
            return ConnectError::AuthRequired;
        }
        if let Some(tls) = &self.tls
            && let Some(hint) = tls.hint(&text)
        {
            return ConnectError::Tls { detail: text, hint };
        }
        for seed in &self.seeds {
            let Some((host, port)) = host_port(seed) else { continue };
            let addr = format!("{host}:{port}");
            match (probe(&host, port, self.connect_timeout).await, self.tls.is_some()) {
                (Speaks::Tls, false) => return ConnectError::SpeaksTls { addr },
                (Speaks::Resp, true) => return ConnectError::SpeaksPlain { addr },
                _ => {}
            }
        }
        ConnectError::Valkey(e)
    }

    /// Whether a seed URL carries a password.
    fn url_password(&self) -> bool {
        self.seeds.iter().any(|seed| {
            seed.as_str().into_connection_info().is_ok_and(|info| info.redis_settings().password().is_some())
        })
    }

    /// The user name in the first seed URL, if any.
    fn url_user(&self) -> Option<String> {
        let info = self.seeds.first()?.as_str().into_connection_info().ok()?;
        info.redis_settings().username().map(str::to_string)
    }
}

impl Tls {
    /// What to fix, for a TLS failure recognised in the client's error text.
    fn hint(&self, text: &str) -> Option<String> {
        let trust = match &self.ca_file {
            Some(path) => format!("valkey_tls_ca_file {path}"),
            None => "the system's trusted roots (no valkey_tls_ca_file is set)".to_string(),
        };
        if text.contains("NotValidForName") {
            Some(format!(
                "the server's certificate does not name the host kvcm connected to (the seed's host, or the node \
                 address CLUSTER SLOTS announces); it is trusted through {trust}"
            ))
        } else if text.contains("invalid peer certificate") || text.contains("UnknownIssuer") {
            Some(format!(
                "the server's certificate is not trusted by {trust}: set valkey_tls_ca_file to the CA that signed it"
            ))
        } else if text.contains("CertificateRequired") {
            Some(
                "the server requires a client certificate (mutual TLS): set valkey_tls_client_cert_file and \
                 valkey_tls_client_key_file"
                    .to_string(),
            )
        } else if text.contains("alert") && !self.client_cert {
            Some(
                "the server refused the handshake; if it requires mutual TLS, set valkey_tls_client_cert_file and \
                 valkey_tls_client_key_file"
                    .to_string(),
            )
        } else if text.contains("alert") && self.client_cert {
            Some(
                "the server refused the handshake; check that valkey_tls_client_cert_file is signed by a CA the \
                 server trusts"
                    .to_string(),
            )
        } else {
            None
        }
    }
}

/// Opens the cluster connection described by the config and loads every Lua script.
pub async fn connect(config: &Config) -> Result<ClusterConnection, ConnectError> {
    Access::from_config(config)?.connect().await
}

/// PINGs every node of the cluster; Ok only if all answer.
pub async fn ping_all(conn: &mut ClusterConnection) -> crate::error::Result<()> {
    let _: String = redis::cmd("PING").query_async(conn).await?;
    Ok(())
}

/// The seed URL with its host:port replaced by `addr` (keeping scheme, credentials, query).
pub fn node_url(seed: &str, addr: &str) -> String {
    let (scheme, rest) = seed.split_once("://").unwrap_or(("redis", seed));
    let (auth, hostpart) = match rest.rsplit_once('@') {
        Some((a, h)) => (Some(a), h),
        None => (None, rest),
    };
    let tail = hostpart.find(['/', '?', '#']).map(|i| &hostpart[i..]).unwrap_or("");
    // A node that has never met another announces no IP (`:7001`): it is the seed's host.
    let seed_host = hostpart[..hostpart.len() - tail.len()].rsplit_once(':').map_or(hostpart, |(h, _)| h);
    let addr = if addr.starts_with(':') { format!("{seed_host}{addr}") } else { addr.to_string() };
    match auth {
        Some(a) => format!("{scheme}://{a}@{addr}{tail}"),
        None => format!("{scheme}://{addr}{tail}"),
    }
}

/// rustls needs a process-wide crypto provider; the redis crate brings none. Installing twice is
/// harmless (the first one stays).
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The PEM certificates of a file, checked to hold at least one.
fn read_pem_certs(key: &'static str, path: &str) -> Result<Vec<u8>, ConnectError> {
    let bytes =
        std::fs::read(path).map_err(|e| ConnectError::Setting { key, why: format!("cannot read {path}: {e}") })?;
    let certs: Result<Vec<CertificateDer>, _> = CertificateDer::pem_slice_iter(&bytes).collect();
    match certs {
        Ok(certs) if !certs.is_empty() => Ok(bytes),
        Ok(_) => Err(ConnectError::Setting { key, why: format!("{path} holds no PEM certificate") }),
        Err(e) => Err(ConnectError::Setting { key, why: format!("{path} is not valid PEM: {e}") }),
    }
}

/// A PEM private key file, checked to parse (the key itself is never printed).
fn read_pem_key(key: &'static str, path: &str) -> Result<Vec<u8>, ConnectError> {
    let bytes =
        std::fs::read(path).map_err(|e| ConnectError::Setting { key, why: format!("cannot read {path}: {e}") })?;
    match PrivateKeyDer::from_pem_slice(&bytes) {
        Ok(_) => Ok(bytes),
        Err(_) => Err(ConnectError::Setting { key, why: format!("{path} holds no PEM private key") }),
    }
}

/// Host and port of a seed URL.
fn host_port(url: &str) -> Option<(String, u16)> {
    match url.into_connection_info().ok()?.addr() {
        ConnectionAddr::Tcp(host, port) => Some((host.clone(), *port)),
        ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
        _ => None,
    }
}

/// What a port turned out to speak.
#[derive(Debug, PartialEq, Eq)]
enum Speaks {
    Tls,
    Resp,
    Unknown,
}

/// Probes a port on fresh sockets: a plain `PING`, then (if that told nothing) a TLS
/// ClientHello. A TLS record header in reply (handshake `0x16` or alert `0x15`, then major
/// version 3) means TLS; a RESP reply (`+PONG`, `-NOAUTH`, `-ERR …`) means plain text. A TLS
/// server typically resets a plain client or waits for more bytes, so the ClientHello is what
/// tells; each attempt waits at most `timeout`.
async fn probe(host: &str, port: u16, timeout: Duration) -> Speaks {
    let verdict = |reply: Option<Vec<u8>>| match reply.as_deref() {
        Some([0x15 | 0x16, 0x03, ..]) => Speaks::Tls,
        Some([b'+' | b'-' | b'$' | b'*' | b':' | b'%' | b'_', ..]) => Speaks::Resp,
        _ => Speaks::Unknown,
    };
    let plain = verdict(first_bytes(host, port, b"PING\r\n", timeout).await);
    if plain != Speaks::Unknown {
        return plain;
    }
    match client_hello(host) {
        Some(hello) => verdict(first_bytes(host, port, &hello, timeout).await),
        None => Speaks::Unknown,
    }
}

/// The first bytes a port answers to `send`, if it answers within `timeout`.
async fn first_bytes(host: &str, port: u16, send: &[u8], timeout: Duration) -> Option<Vec<u8>> {
    let exchange = async {
        let mut socket = tokio::net::TcpStream::connect((host, port)).await.ok()?;
        socket.write_all(send).await.ok()?;
        let mut buf = [0u8; 16];
        let n = socket.read(&mut buf).await.ok()?;
        (n > 0).then(|| buf[..n].to_vec())
    };
    tokio::time::timeout(timeout, exchange).await.ok().flatten()
}

/// A real TLS ClientHello for `host`, as rustls would send it (nothing is verified: the probe
/// reads only the record header of the reply).
fn client_hello(host: &str) -> Option<Vec<u8>> {
    install_crypto_provider();
    let config =
        rustls::ClientConfig::builder().with_root_certificates(rustls::RootCertStore::empty()).with_no_client_auth();
    let name = ServerName::try_from(host.to_string()).ok()?;
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).ok()?;
    Some(hello)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_urls_keep_scheme_credentials_and_options() {
        assert_eq!(node_url("redis://10.0.0.1:7001", "10.0.0.2:7002"), "redis://10.0.0.2:7002");
        assert_eq!(node_url("rediss://u:p@h:6379/0#insecure", "1.2.3.4:6380"), "rediss://u:p@1.2.3.4:6380/0#insecure");
        assert_eq!(node_url("redis://u:p@10.0.0.1:7001", ":7005"), "redis://u:p@10.0.0.1:7005", "a node without an IP");
    }

    #[test]
    fn a_client_hello_starts_with_a_tls_handshake_record() {
        let hello = client_hello("127.0.0.1").expect("a hello");
        assert_eq!(&hello[..2], &[0x16, 0x03], "{hello:02x?}");
        assert!(client_hello("valkey.example.com").is_some());
    }

    #[tokio::test]
    async fn a_port_that_answers_a_tls_alert_speaks_tls_and_one_that_answers_resp_does_not() {
        // Two one-shot servers on loopback: one answers any bytes with a TLS alert record (what
        // an OpenSSL server sends for an unexpected message), one with a RESP error.
        async fn server(reply: &'static [u8]) -> u16 {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            tokio::spawn(async move {
                while let Ok((mut s, _)) = listener.accept().await {
                    let mut buf = [0u8; 512];
                    let _ = s.read(&mut buf).await;
                    let _ = s.write_all(reply).await;
                }
            });
            port
        }
        let tls = server(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46]).await;
        let resp = server(b"-NOAUTH Authentication required.\r\n").await;
        let t = Duration::from_secs(5);
        assert_eq!(probe("127.0.0.1", tls, t).await, Speaks::Tls);
        assert_eq!(probe("127.0.0.1", resp, t).await, Speaks::Resp);
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        assert_eq!(probe("127.0.0.1", closed, t).await, Speaks::Unknown);
    }

    #[tokio::test]
    async fn a_password_never_goes_in_clear_to_a_port_that_speaks_tls() {
        // A port that answers like a TLS server and records every byte it is sent.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let record = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                record.lock().unwrap().extend_from_slice(&buf[..n]);
                let _ = s.write_all(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46]).await;
            }
        });
        let access = Access::from_urls(&[format!("redis://kv:s3cret-pw@127.0.0.1:{port}")], 2000, 2000);
        match access.cluster().await {
            Err(ConnectError::SpeaksTls { addr }) => assert_eq!(addr, format!("127.0.0.1:{port}")),
            other => panic!("expected SpeaksTls, got {:?}", other.map(|_| ())),
        }
        let seen = String::from_utf8_lossy(&seen.lock().unwrap()).to_string();
        assert!(seen.contains("PING"), "the port was probed: {seen:?}");
        assert!(!seen.contains("s3cret-pw") && !seen.contains("AUTH"), "the password went out: {seen:?}");
    }

    #[test]
    fn certificate_files_are_checked_and_errors_name_their_key() {
        let dir = std::env::temp_dir().join(format!("kvcm-valkey-{}", fastrand::u64(..)));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let e = read_pem_certs("valkey_tls_ca_file", junk.to_str().unwrap()).unwrap_err().to_string();
        assert!(e.contains("valkey_tls_ca_file") && e.contains("no PEM certificate"), "{e}");
        let e = read_pem_key("valkey_tls_client_key_file", junk.to_str().unwrap()).unwrap_err().to_string();
        assert!(e.contains("valkey_tls_client_key_file") && e.contains("no PEM private key"), "{e}");
    }
}
