//! kvcm configuration: embedded documented defaults (`core/config/default.toml`) → a TOML file
//! (`-c FILE`) → `KVCM_*` environment variables, later layers winning.
//!
//! Every key must exist in the embedded defaults, so a typo in a file is an error naming the key,
//! and an environment variable is parsed with the type of its default. After merging, the whole
//! config is deserialized into [`Config`] and validated; every error names the offending key.
//!
//! Secrets are never configuration values: the Valkey password comes from the environment
//! variable `KVCM_VALKEY_PASSWORD` or the file named by `valkey_password_file`, is read once at
//! load into [`Config::valkey_password`] (a [`Secret`] whose `Debug` is redacted), and a
//! `valkey_password` key in a file is refused with a message saying where it belongs.

use serde::Deserialize;
use std::path::Path;

/// The embedded defaults, documented inline.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

/// Environment variables with the `KVCM_` prefix that are not configuration keys — the shell
/// scripts' own, and the secrets read from the environment directly — so they are not reported
/// as unknown.
const SCRIPT_VARS: &[&str] = &[
    "home",
    "root",
    "valkey_base_port",
    "valkey_primaries",
    "valkey_replicas",
    "valkey_dir",
    "test_valkey_url",
    "test_tls_base_port",
    "bootstrap_admin_password",
    "valkey_password",
];

/// The environment variable that may hold the bootstrap admin's password (never a config key,
/// so it cannot end up in a config file or a printed configuration).
pub const BOOTSTRAP_PASSWORD_ENV: &str = "KVCM_BOOTSTRAP_ADMIN_PASSWORD";

/// The environment variable that may hold the Valkey password (AUTH token, or the password of
/// `valkey_username`); the other source is `valkey_password_file`. Never a config key.
pub const VALKEY_PASSWORD_ENV: &str = "KVCM_VALKEY_PASSWORD";

/// A secret read from the environment or a file. `Debug` and `Display` print `***`;
/// [`Secret::expose`] is the one way to the text, for the Valkey client.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// The Valkey password and where it came from (for messages that help without showing it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValkeyPassword {
    pub secret: Secret,
    /// `KVCM_VALKEY_PASSWORD`, or `valkey_password_file <path>`.
    pub source: String,
}

/// `valkey_url`: seed URLs that may carry `user:password@`. Its `Debug` and `Display` redact the
/// password, so the URL can be put in any message or log line; [`ValkeyUrl::expose`] is the one
/// way to the raw text, for the Valkey client.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct ValkeyUrl(String);

impl ValkeyUrl {
    pub fn new(url: impl Into<String>) -> Self {
        ValkeyUrl(url.into())
    }

    /// The raw URLs, credentials included. Only for handing to the Valkey client.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ValkeyUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Seeds are comma-separated, but a password may contain a comma: if any piece is not a
        // whole URL, the split is not trustworthy and nothing of the value is shown.
        let pieces: Vec<&str> = self.0.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
        if self.0.contains('@') && pieces.iter().any(|p| !p.contains("://")) {
            return f.write_str("<valkey_url, redacted: it does not split into URLs>");
        }
        let seeds: Vec<String> = pieces.iter().map(|u| redact_url(u)).collect();
        f.write_str(&seeds.join(","))
    }
}

impl std::fmt::Debug for ValkeyUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "\"{self}\"")
    }
}

/// A URL with the password of its `user:password@` part replaced by `***` (the user name stays:
/// it helps diagnose ACL problems and is not a secret). Anything without an `@` comes back
/// unchanged.
///
/// Credentials end at the *last* `@` of the URL: a password may contain `/`, `?`, `#` or `@`
/// (generated ones often do), so the authority cannot be delimited first. An `@` in a path or
/// query makes this redact more than the credentials — safe, never less.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let Some(at) = rest.rfind('@') else { return url.to_string() };
    if scheme.is_empty() {
        return format!("***@{}", &rest[at + 1..]);
    }
    let user = rest[..at].split_once(':').map(|(u, _)| u).filter(|u| !u.contains(['/', '?', '#']));
    match user {
        Some(u) => format!("{scheme}://{u}:***@{}", &rest[at + 1..]),
        None => format!("{scheme}://***@{}", &rest[at + 1..]),
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub bind: String,
    pub meta_port: u16,
    pub admin_port: u16,
    /// Serve Tair's gRPC services too (MetaService on `grpc_meta_port`, AdminService on
    /// `grpc_admin_port`, on the same addresses as the HTTP planes).
    pub grpc: bool,
    pub grpc_meta_port: u16,
    pub grpc_admin_port: u16,
    pub valkey_url: ValkeyUrl,
    pub valkey_username: String,
    pub valkey_password_file: String,
    pub valkey_tls_ca_file: String,
    pub valkey_tls_client_cert_file: String,
    pub valkey_tls_client_key_file: String,
    /// From `KVCM_VALKEY_PASSWORD` or `valkey_password_file`, resolved by [`Config::load_from`];
    /// never deserialized (a `valkey_password` key is refused).
    #[serde(skip)]
    pub valkey_password: Option<ValkeyPassword>,
    pub namespace: String,
    pub valkey_timeout_ms: u64,
    pub valkey_connect_timeout_ms: u64,
    pub log_format: LogFormat,
    pub log_level: String,
    pub access_log: bool,
    pub max_body_bytes: usize,
    pub max_inflight_body_bytes: usize,
    pub request_timeout_ms: u64,
    pub header_read_timeout_ms: u64,
    pub idle_timeout_ms: u64,
    pub max_connections: usize,
    pub serving_threads: usize,
    pub health_check_interval_ms: u64,
    pub registry_refresh_ms: u64,
    pub startup_config: String,
    pub meta_auth: bool,
    pub admin_bind: String,
    pub allow_anonymous_admin: bool,
    /// Tair's debug service (injectFault, removeFault, clearFaults): off unless set; for tests.
    pub debug_faults: bool,
    pub bootstrap_admin_user: String,
    pub bootstrap_admin_password_file: String,
    pub min_password_length: usize,
    pub auth_backoff_after: u32,
    pub auth_backoff_base_ms: u64,
    pub auth_backoff_max_ms: u64,
    pub auth_failure_window_s: u64,
    pub client_ip_header: String,
    pub negative_cache_ms: u64,
    pub max_instance_metric_labels: usize,
    pub node_id: String,
    pub max_keys_per_request: usize,
    pub max_token_ids_per_request: usize,
    pub max_location_specs_per_response: usize,
    pub max_specs_per_instance: usize,
    pub max_spec_groups_per_instance: usize,
    pub max_name_bytes: usize,
    pub max_instance_id_bytes: usize,
    pub max_string_bytes: usize,
    pub max_list_items: usize,
    pub max_group_bytes: usize,
    pub write_timeout_default_s: u32,
    pub write_timeout_max_s: u32,
    pub usage_cache_ms: u64,
    /// ReportEvent: a reporter without a heartbeat this long is hidden from queries.
    pub event_report_heartbeat_timeout_ms: u64,
    /// ReportEvent: a reporter without a heartbeat this long is unregistered.
    pub event_report_cleanup_grace_ms: u64,
    /// ReportEvent: least time between two committed snapshots of one reporter.
    pub event_report_snapshot_min_interval_ms: u64,
    pub durability: Durability,
    pub replica_ack_replicas: u32,
    pub replica_ack_timeout_ms: u64,
    pub event_log_path: String,
    pub event_log_max_bytes: u64,
    pub event_log_max_files: u32,
    /// `lambda_plane`: the one plane served as an AWS Lambda function; `None` (`""`) serves both
    /// planes on listeners. See [`LambdaPlane`].
    #[serde(deserialize_with = "LambdaPlane::from_key")]
    pub lambda_plane: Option<LambdaPlane>,
    pub worker: WorkerConfig,
}

/// `lambda_plane`: which plane's router an AWS Lambda function of `kvcm-api` serves (one function
/// per plane). Parsed from `"meta"`, `"admin"` or `""` (no Lambda: both planes on listeners);
/// anything else is an error naming the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LambdaPlane {
    Meta,
    Admin,
}

impl LambdaPlane {
    fn from_key<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<LambdaPlane>, D::Error> {
        match String::deserialize(d)?.as_str() {
            "" => Ok(None),
            "meta" => Ok(Some(LambdaPlane::Meta)),
            "admin" => Ok(Some(LambdaPlane::Admin)),
            other => Err(serde::de::Error::custom(format!(
                "\"{other}\" is not a plane: use \"meta\", \"admin\" or \"\" (not running in AWS Lambda)"
            ))),
        }
    }

    /// The name used in configuration, logs and metrics (`meta`, `admin`).
    pub fn name(self) -> &'static str {
        match self {
            LambdaPlane::Meta => "meta",
            LambdaPlane::Admin => "admin",
        }
    }
}

/// `durability`: when a data-plane write (startWriteCache, finishWriteCache, removeCache,
/// trimCache) is answered. See `core/src/store/durability.rs` and docs/reliability.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Once the shard's primary ran the script (replication is asynchronous).
    Off,
    /// Once `replica_ack_replicas` replicas also hold it (`WAIT`), else `SERVICE_NOT_READY`.
    ReplicaAck,
}

/// The `[worker]` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerConfig {
    pub metrics_port: u16,
    pub id: String,
    pub discover_interval_ms: u64,
    pub poll_interval_ms: u64,
    pub reclaim_interval_ms: u64,
    pub health_interval_ms: u64,
    pub lease_ms: u64,
    pub delete_batch: usize,
    pub claim_idle_ms: u64,
    pub max_delete_attempts: u64,
    pub max_dead_letters: u64,
    pub file_op_timeout_ms: u64,
    pub evict_batch: usize,
    pub ttl_s: u64,
    /// The pause between two passes of touch-gc over one instance (and between its scans for
    /// removed instances' leftovers); 0 turns the job off.
    pub touch_gc_pause_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, thiserror::Error)]
#[error("configuration: {0}")]
pub struct ConfigError(pub String);

/// What loading produced besides the config: notes for the log once logging is up.
#[derive(Debug, Default)]
pub struct LoadNotes {
    pub ignored_env: Vec<String>,
}

impl Config {
    /// Loads defaults, then `file` if given, then the process environment.
    pub fn load(file: Option<&Path>) -> Result<(Config, LoadNotes), ConfigError> {
        let env: Vec<(String, String)> = std::env::vars().collect();
        Self::load_from(file, &env)
    }

    /// Same as [`Config::load`] with an explicit environment (for tests).
    pub fn load_from(file: Option<&Path>, env: &[(String, String)]) -> Result<(Config, LoadNotes), ConfigError> {
        let defaults: toml::Table =
            toml::from_str(DEFAULT_TOML).map_err(|e| ConfigError(format!("embedded defaults do not parse: {e}")))?;
        let mut merged = defaults.clone();
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError(format!("cannot read config file {}: {e}", path.display())))?;
            let layer: toml::Table = toml::from_str(&text).map_err(|e| {
                ConfigError(format!("config file {} is not valid TOML: {}", path.display(), toml_error(&text, &e)))
            })?;
            merge(&mut merged, layer);
        }
        let mut notes = LoadNotes::default();
        for (name, value) in env {
            let Some(rest) = name.strip_prefix("KVCM_") else { continue };
            let key = rest.to_ascii_lowercase();
            let path: Vec<&str> = key.split("__").collect();
            match lookup(&defaults, &path) {
                Some(default) => {
                    let parsed = parse_like(default, value)
                        .map_err(|why| ConfigError(format!("environment variable {name}={value:?}: {why}")))?;
                    set(&mut merged, &path, parsed);
                }
                None if SCRIPT_VARS.contains(&key.as_str()) => {}
                None => notes.ignored_env.push(name.clone()),
            }
        }
        if merged.contains_key("valkey_password") {
            return Err(ConfigError(format!(
                "key `valkey_password`: a password is never a configuration value: set the environment variable \
                 {VALKEY_PASSWORD_ENV} or name a file holding it in valkey_password_file"
            )));
        }
        let mut config: Config = serde_path_to_error::deserialize(toml::Value::Table(merged))
            .map_err(|e| ConfigError(format!("key `{}`: {}", e.path(), e.inner())))?;
        config.validate()?;
        let from_env = env.iter().find(|(k, _)| k == VALKEY_PASSWORD_ENV).map(|(_, v)| v.as_str());
        config.valkey_password = config.resolve_valkey_password(from_env)?;
        Ok((config, notes))
    }

    /// The Valkey password from `valkey_password_file` or `KVCM_VALKEY_PASSWORD` (exactly one of
    /// them, and not also in `valkey_url`). Errors name the source, never the password.
    fn resolve_valkey_password(&self, from_env: Option<&str>) -> Result<Option<ValkeyPassword>, ConfigError> {
        let bad = |key: &str, why: &str| Err(ConfigError(format!("key `{key}`: {why}")));
        let from_env = from_env.filter(|v| !v.is_empty());
        let password = match (self.valkey_password_file.as_str(), from_env) {
            ("", None) => None,
            ("", Some(v)) => Some(ValkeyPassword { secret: Secret(v.to_string()), source: VALKEY_PASSWORD_ENV.into() }),
            (_, Some(_)) => {
                return bad(
                    "valkey_password_file",
                    &format!("is set and so is {VALKEY_PASSWORD_ENV}: give the password one way only"),
                );
            }
            (path, None) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    ConfigError(format!("key `valkey_password_file`: cannot read {path}: {}", e.kind()))
                })?;
                let text = text.trim_end_matches(['\r', '\n']);
                if text.is_empty() {
                    return bad("valkey_password_file", &format!("{path} is empty"));
                }
                Some(ValkeyPassword {
                    secret: Secret(text.to_string()),
                    source: format!("valkey_password_file {path}"),
                })
            }
        };
        let urls = self.valkey_urls();
        let in_url = |part: fn(&redis::ConnectionInfo) -> bool| {
            urls.iter().any(|u| redis::IntoConnectionInfo::into_connection_info(u.as_str()).is_ok_and(|i| part(&i)))
        };
        if let Some(p) = &password
            && in_url(|i| i.redis_settings().password().is_some())
        {
            return bad("valkey_url", &format!("carries a password and {} gives another: keep one", p.source));
        }
        if !self.valkey_username.is_empty() && in_url(|i| i.redis_settings().username().is_some()) {
            return bad("valkey_url", "carries a user name and valkey_username gives another: keep one");
        }
        if !self.valkey_username.is_empty() && password.is_none() {
            return bad(
                "valkey_username",
                &format!("needs a password: set {VALKEY_PASSWORD_ENV} or valkey_password_file"),
            );
        }
        Ok(password)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, why: &str| Err(ConfigError(format!("key `{key}`: {why}")));
        if self.bind.parse::<std::net::IpAddr>().is_err() {
            return bad("bind", "must be an IP address such as 127.0.0.1 or 0.0.0.0");
        }
        if !self.admin_bind.is_empty() && self.admin_bind.parse::<std::net::IpAddr>().is_err() {
            return bad("admin_bind", "must be empty (same as bind) or an IP address");
        }
        if self.meta_port != 0 && self.meta_port == self.admin_port {
            return bad("admin_port", "must differ from meta_port");
        }
        if self.grpc {
            let ports = [
                ("meta_port", self.meta_port),
                ("admin_port", self.admin_port),
                ("grpc_meta_port", self.grpc_meta_port),
                ("grpc_admin_port", self.grpc_admin_port),
            ];
            for (i, (name, port)) in ports.iter().enumerate().skip(2) {
                if let Some((other, _)) = ports[..i].iter().find(|(_, p)| *p != 0 && p == port) {
                    return bad(name, &format!("must differ from {other}"));
                }
            }
        }
        if self.valkey_urls().is_empty() {
            return bad("valkey_url", "must name at least one redis:// or rediss:// seed node");
        }
        for url in self.valkey_urls() {
            if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                return bad("valkey_url", &format!("\"{}\" must start with redis:// or rediss://", redact_url(&url)));
            }
        }
        for url in self.valkey_urls() {
            // Neither the parser's message nor the piece is shown: a piece may be part of a
            // password that contains a comma. `valkey_url` prints itself redacted.
            if redis::IntoConnectionInfo::into_connection_info(url.as_str()).is_err() {
                return bad("valkey_url", &format!("{} is not a valid list of Valkey URLs", self.valkey_url));
            }
            if url.ends_with("#insecure") {
                return bad(
                    "valkey_url",
                    "#insecure (no certificate checks) is not supported: trust the server's CA with valkey_tls_ca_file",
                );
            }
        }
        let tls = self.valkey_tls();
        if self.valkey_urls().iter().any(|u| u.starts_with("rediss://") != tls) {
            return bad("valkey_url", "seeds must all use redis:// or all rediss:// (TLS)");
        }
        for (key, path) in [
            ("valkey_password_file", &self.valkey_password_file),
            ("valkey_tls_ca_file", &self.valkey_tls_ca_file),
            ("valkey_tls_client_cert_file", &self.valkey_tls_client_cert_file),
            ("valkey_tls_client_key_file", &self.valkey_tls_client_key_file),
        ] {
            if !path.is_empty() && !Path::new(path).is_file() {
                return bad(key, &format!("file {path} does not exist"));
            }
            if !path.is_empty() && key.starts_with("valkey_tls_") && !tls {
                return bad(key, "is set but valkey_url uses redis:// (no TLS): use rediss:// seeds");
            }
        }
        match (self.valkey_tls_client_cert_file.is_empty(), self.valkey_tls_client_key_file.is_empty()) {
            (false, true) => return bad("valkey_tls_client_key_file", "is needed with valkey_tls_client_cert_file"),
            (true, false) => return bad("valkey_tls_client_cert_file", "is needed with valkey_tls_client_key_file"),
            _ => {}
        }
        if self.namespace.is_empty() || !self.namespace.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return bad("namespace", "must be non-empty and use only letters, digits, '-', '_' and '.'");
        }
        // Upper bounds keep deadlines (now + timeout) far from Instant overflow.
        if !(1..=86_400_000).contains(&self.valkey_timeout_ms) {
            return bad("valkey_timeout_ms", "must be within 1..=86400000 (one day)");
        }
        if !(1..=86_400_000).contains(&self.valkey_connect_timeout_ms) {
            return bad("valkey_connect_timeout_ms", "must be within 1..=86400000 (one day)");
        }
        if self.max_body_bytes < 1024 {
            return bad("max_body_bytes", "must be at least 1024");
        }
        if self.max_inflight_body_bytes < self.max_body_bytes || self.max_inflight_body_bytes > 1 << 40 {
            return bad("max_inflight_body_bytes", "must be within max_body_bytes..=1 TiB");
        }
        if !(1..=86_400_000).contains(&self.request_timeout_ms) {
            return bad("request_timeout_ms", "must be within 1..=86400000 (one day)");
        }
        // Connection handling and health checks. Upper bounds keep deadlines (now + timeout) far
        // from Instant overflow.
        const DAY_MS: u64 = 86_400_000;
        if !(1..=DAY_MS).contains(&self.header_read_timeout_ms) {
            return bad("header_read_timeout_ms", "must be within 1..=86400000 (one day)");
        }
        if !(1..=DAY_MS).contains(&self.idle_timeout_ms) {
            return bad("idle_timeout_ms", "must be within 1..=86400000 (one day)");
        }
        if !(1..=1_000_000).contains(&self.max_connections) {
            return bad("max_connections", "must be within 1..=1000000");
        }
        if self.serving_threads > 1024 {
            return bad("serving_threads", "must be within 0..=1024 (0: one per CPU)");
        }
        if !(10..=DAY_MS).contains(&self.health_check_interval_ms) {
            return bad("health_check_interval_ms", "must be within 10..=86400000 (one day)");
        }
        if self.registry_refresh_ms == 0 {
            return bad("registry_refresh_ms", "must be positive");
        }
        if self.max_keys_per_request == 0 || self.max_keys_per_request > 1_000_000 {
            return bad("max_keys_per_request", "must be within 1..=1000000");
        }
        for (key, v, lo, hi) in [
            ("max_token_ids_per_request", self.max_token_ids_per_request, 1, 1 << 26),
            ("max_location_specs_per_response", self.max_location_specs_per_response, 1, 1 << 26),
            ("max_specs_per_instance", self.max_specs_per_instance, 1, 4096),
            ("max_spec_groups_per_instance", self.max_spec_groups_per_instance, 0, 253),
            ("max_name_bytes", self.max_name_bytes, 8, 1024),
            ("max_instance_id_bytes", self.max_instance_id_bytes, 8, 1024),
            ("max_string_bytes", self.max_string_bytes, 64, 1 << 20),
            ("max_list_items", self.max_list_items, 1, 1 << 16),
            ("max_group_bytes", self.max_group_bytes, 1024, 1 << 24),
            ("max_instance_metric_labels", self.max_instance_metric_labels, 0, 1 << 20),
            ("min_password_length", self.min_password_length, 1, 1024),
        ] {
            if !(lo..=hi).contains(&v) {
                return bad(key, &format!("must be within {lo}..={hi}"));
            }
        }
        if self.auth_backoff_after == 0 {
            return bad("auth_backoff_after", "must be at least 1");
        }
        if self.auth_backoff_base_ms == 0 || self.auth_backoff_base_ms > self.auth_backoff_max_ms {
            return bad("auth_backoff_base_ms", "must be within 1..=auth_backoff_max_ms");
        }
        const MONTH_MS: u64 = 30 * 86_400_000;
        if self.auth_failure_window_s == 0 || self.auth_failure_window_s > MONTH_MS / 1000 {
            return bad("auth_failure_window_s", "must be within 1..=2592000 (30 days)");
        }
        if self.auth_backoff_max_ms > MONTH_MS {
            return bad("auth_backoff_max_ms", "must be at most 2592000000 (30 days)");
        }
        if !self.client_ip_header.is_empty() && valid_header_name(&self.client_ip_header).is_none() {
            return bad("client_ip_header", "must be a valid HTTP header name such as x-forwarded-for");
        }
        if !self.bootstrap_admin_password_file.is_empty() && self.bootstrap_admin_user.is_empty() {
            return bad("bootstrap_admin_password_file", "needs bootstrap_admin_user");
        }
        if self.event_report_heartbeat_timeout_ms == 0
            || self.event_report_cleanup_grace_ms < self.event_report_heartbeat_timeout_ms
        {
            return bad(
                "event_report_cleanup_grace_ms",
                "must be at least event_report_heartbeat_timeout_ms, which must be positive",
            );
        }
        if self.write_timeout_default_s == 0 || self.write_timeout_default_s > self.write_timeout_max_s {
            return bad("write_timeout_default_s", "must be within 1..=write_timeout_max_s");
        }
        if self.replica_ack_replicas == 0 || self.replica_ack_replicas > 16 {
            return bad("replica_ack_replicas", "must be within 1..=16");
        }
        if self.replica_ack_timeout_ms == 0 || self.replica_ack_timeout_ms > 60_000 {
            return bad("replica_ack_timeout_ms", "must be within 1..=60000 (0 would wait for ever)");
        }
        if self.durability == Durability::ReplicaAck && self.replica_ack_timeout_ms >= self.valkey_timeout_ms {
            return bad(
                "replica_ack_timeout_ms",
                "must be shorter than valkey_timeout_ms (a WAIT at its limit would otherwise race the client's own timeout)",
            );
        }
        if self.event_log_max_bytes < 4096 {
            return bad("event_log_max_bytes", "must be at least 4096");
        }
        let w = &self.worker;
        if w.discover_interval_ms == 0
            || w.poll_interval_ms == 0
            || w.reclaim_interval_ms == 0
            || w.health_interval_ms == 0
        {
            return bad("worker", "intervals must be positive");
        }
        if w.lease_ms < 100 {
            return bad("worker.lease_ms", "must be at least 100");
        }
        if !(1..=1000).contains(&w.delete_batch) {
            return bad("worker.delete_batch", "must be within 1..=1000");
        }
        if !(1..=1000).contains(&w.evict_batch) {
            return bad("worker.evict_batch", "must be within 1..=1000");
        }
        if w.claim_idle_ms < 100 {
            return bad("worker.claim_idle_ms", "must be at least 100");
        }
        if w.ttl_s > 10 * 365 * 86400 {
            return bad("worker.ttl_s", "must be at most ten years");
        }
        if w.max_dead_letters == 0 {
            return bad("worker.max_dead_letters", "must be at least 1");
        }
        if !(100..=600_000).contains(&w.file_op_timeout_ms) {
            return bad("worker.file_op_timeout_ms", "must be within 100..=600000");
        }
        if w.max_delete_attempts == 0 {
            return bad("worker.max_delete_attempts", "must be at least 1");
        }
        if !self.startup_config.is_empty() && !Path::new(&self.startup_config).is_file() {
            return bad("startup_config", &format!("file {} does not exist", self.startup_config));
        }
        Ok(())
    }

    /// The request bounds.
    pub fn limits(&self) -> crate::limits::Limits {
        crate::limits::Limits {
            max_keys_per_request: self.max_keys_per_request,
            max_token_ids_per_request: self.max_token_ids_per_request,
            max_location_specs_per_response: self.max_location_specs_per_response,
            max_specs_per_instance: self.max_specs_per_instance,
            max_spec_groups_per_instance: self.max_spec_groups_per_instance,
            max_name_bytes: self.max_name_bytes,
            max_instance_id_bytes: self.max_instance_id_bytes,
            max_string_bytes: self.max_string_bytes,
            max_list_items: self.max_list_items,
            max_group_bytes: self.max_group_bytes,
            write_timeout_default_s: self.write_timeout_default_s,
            write_timeout_max_s: self.write_timeout_max_s,
            usage_cache_ms: self.usage_cache_ms,
        }
    }

    /// Engine-reported cache settings (ReportEvent, GetHostCacheState).
    pub fn report_settings(&self) -> crate::store::report_event::ReportSettings {
        crate::store::report_event::ReportSettings {
            heartbeat_timeout_ms: self.event_report_heartbeat_timeout_ms,
            cleanup_grace_ms: self.event_report_cleanup_grace_ms,
            snapshot_min_interval_ms: self.event_report_snapshot_min_interval_ms,
        }
    }

    /// The seed node URLs of `valkey_url`, credentials included (for the Valkey client only;
    /// print `valkey_url` itself, which redacts them).
    pub fn valkey_urls(&self) -> Vec<String> {
        self.valkey_url.expose().split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
    }

    /// Whether the seeds use TLS (`rediss://`; validation makes all seeds agree).
    pub fn valkey_tls(&self) -> bool {
        self.valkey_urls().first().is_some_and(|u| u.starts_with("rediss://"))
    }

    /// The admin listener's address (`admin_bind`, or `bind` when empty).
    pub fn admin_bind(&self) -> &str {
        if self.admin_bind.is_empty() { &self.bind } else { &self.admin_bind }
    }
}

/// A TOML error without the quoted source line it normally shows (the line may hold a secret,
/// such as a `valkey_url` with a password and a missing quote): the message, line and column.
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("{} (line {line}, column {column})", e.message())
        }
        None => e.message().to_string(),
    }
}

/// A header name is ASCII letters, digits and `-` (a subset of RFC 9110 tokens, enough for the
/// proxies kvcm sits behind).
fn valid_header_name(name: &str) -> Option<&str> {
    (!name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')).then_some(name)
}

fn merge(into: &mut toml::Table, from: toml::Table) {
    for (k, v) in from {
        match (into.get_mut(&k), v) {
            (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

fn lookup<'a>(t: &'a toml::Table, path: &[&str]) -> Option<&'a toml::Value> {
    let (first, rest) = path.split_first()?;
    let v = t.get(*first)?;
    if rest.is_empty() {
        return Some(v);
    }
    match v {
        toml::Value::Table(inner) => lookup(inner, rest),
        _ => None,
    }
}

fn set(t: &mut toml::Table, path: &[&str], value: toml::Value) {
    let Some((first, rest)) = path.split_first() else { return };
    if rest.is_empty() {
        t.insert((*first).to_string(), value);
    } else if let Some(toml::Value::Table(inner)) = t.get_mut(*first) {
        set(inner, rest, value);
    }
}

/// Parses an environment value with the type of the key's default.
fn parse_like(default: &toml::Value, raw: &str) -> Result<toml::Value, String> {
    Ok(match default {
        toml::Value::Integer(_) => {
            toml::Value::Integer(raw.trim().parse().map_err(|_| "expected an integer".to_string())?)
        }
        toml::Value::Float(_) => toml::Value::Float(raw.trim().parse().map_err(|_| "expected a number".to_string())?),
        toml::Value::Boolean(_) => toml::Value::Boolean(match raw.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => true,
            "0" | "false" | "no" | "off" => false,
            _ => return Err("expected true or false".into()),
        }),
        toml::Value::String(_) => toml::Value::String(raw.to_string()),
        _ => return Err("this key cannot be set from the environment".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn embedded_defaults_load_and_validate() {
        let (c, notes) = Config::load_from(None, &[]).unwrap();
        assert_eq!((c.meta_port, c.admin_port), (6382, 6492));
        assert!(notes.ignored_env.is_empty());
    }

    #[test]
    fn environment_overrides_file_which_overrides_defaults() {
        let dir = std::env::temp_dir().join(format!("kvcm-config-{}", fastrand::u64(..)));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(&file, "meta_port = 7000\nadmin_port = 7001\nlog_format = \"json\"\n").unwrap();
        let (c, notes) = Config::load_from(
            Some(&file),
            &env(&[("KVCM_META_PORT", "7100"), ("KVCM_TYPO", "1"), ("KVCM_HOME", "/x")]),
        )
        .unwrap();
        assert_eq!((c.meta_port, c.admin_port, c.log_format), (7100, 7001, LogFormat::Json));
        assert_eq!(notes.ignored_env, vec!["KVCM_TYPO".to_string()]);
    }

    #[test]
    fn errors_name_the_offending_key() {
        let e = Config::load_from(None, &env(&[("KVCM_META_PORT", "abc")])).unwrap_err().to_string();
        assert!(e.contains("KVCM_META_PORT") && e.contains("integer"), "{e}");
        let e = Config::load_from(None, &env(&[("KVCM_META_PORT", "70000")])).unwrap_err().to_string();
        assert!(e.contains("meta_port"), "{e}");
        let e = Config::load_from(None, &env(&[("KVCM_LOG_FORMAT", "xml")])).unwrap_err().to_string();
        assert!(e.contains("log_format"), "{e}");
        let e = Config::load_from(None, &env(&[("KVCM_VALKEY_URL", "http://x")])).unwrap_err().to_string();
        assert!(e.contains("valkey_url"), "{e}");
        let dir = std::env::temp_dir().join(format!("kvcm-config-{}", fastrand::u64(..)));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(&file, "meta_prot = 1\n").unwrap();
        let e = Config::load_from(Some(&file), &[]).unwrap_err().to_string();
        assert!(e.contains("meta_prot"), "{e}");
        let e = Config::load_from(None, &env(&[("KVCM_MAX_SPEC_GROUPS_PER_INSTANCE", "254")])).unwrap_err().to_string();
        assert!(e.contains("max_spec_groups_per_instance"), "{e}");
        // Timeouts that would overflow a deadline (now + timeout) at shutdown are refused.
        for key in ["valkey_timeout_ms", "valkey_connect_timeout_ms", "request_timeout_ms"] {
            let var = format!("KVCM_{}", key.to_uppercase());
            for bad in ["0", "86400001", "9000000000000000000"] {
                let e = Config::load_from(None, &env(&[(&var, bad)])).unwrap_err().to_string();
                assert!(e.contains(key), "{key}={bad}: {e}");
            }
            assert!(Config::load_from(None, &env(&[(&var, "86400000")])).is_ok(), "{key} at its bound");
        }
    }

    #[test]
    fn passwords_in_valkey_urls_are_redacted_wherever_the_url_is_printed() {
        assert_eq!(redact_url("redis://u:hunter2@h:6379/0"), "redis://u:***@h:6379/0");
        assert_eq!(redact_url("rediss://:tok3n@h:6380"), "rediss://:***@h:6380");
        assert_eq!(redact_url("rediss://tok3n@h:6380"), "rediss://***@h:6380");
        assert_eq!(redact_url("rediss://h:6380?x=a@b"), "rediss://h:***@b", "over-redacts, never leaks");
        assert_eq!(redact_url("u:pw@h:1"), "***@h:1", "no scheme");
        let comma = ValkeyUrl::new("redis://u:pa,ss@h:1");
        assert!(!comma.to_string().contains("ss") && !format!("{comma:?}").contains("pa"), "{comma}");
        let e = Config::load_from(None, &env(&[("KVCM_VALKEY_URL", "redis://u:pa,ss@h:1")])).unwrap_err().to_string();
        assert!(!e.contains("ss@") && !e.contains(":pa"), "{e}");
        let dir = std::env::temp_dir().join(format!("kvcm-config-{}", fastrand::u64(..)));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(&file, "valkey_url = \"redis://u:hunter2@h:1\n").unwrap();
        let e = Config::load_from(Some(&file), &[]).unwrap_err().to_string();
        assert!(!e.contains("hunter2") && e.contains("line 1"), "{e}");
        for secret in ["p/w", "p?w", "p#w", "p@w", "a/b+c=="] {
            let shown = redact_url(&format!("redis://user:{secret}@h:1/0"));
            assert_eq!(shown, "redis://user:***@h:1/0", "{secret}");
        }
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
        let e = Config::load_from(None, &env(&[("KVCM_VALKEY_URL", "http://u:hunter2@x")])).unwrap_err().to_string();
        assert!(!e.contains("hunter2") && e.contains("valkey_url"), "{e}");
        let (c, notes) = Config::load_from(
            None,
            &env(&[("KVCM_VALKEY_URL", "redis://u:hunter2@a:1, redis://v:pw9@b:2"), (BOOTSTRAP_PASSWORD_ENV, "x")]),
        )
        .unwrap();
        let shown = format!("{c:?} {}", c.valkey_url);
        assert!(!shown.contains("hunter2") && !shown.contains("pw9"), "{shown}");
        assert_eq!(c.valkey_urls(), vec!["redis://u:hunter2@a:1", "redis://v:pw9@b:2"]);
        assert!(notes.ignored_env.is_empty(), "the bootstrap password variable is known");
    }

    #[test]
    fn the_valkey_password_comes_from_the_environment_or_a_file_and_never_from_configuration() {
        let dir = std::env::temp_dir().join(format!("kvcm-config-{}", fastrand::u64(..)));
        std::fs::create_dir_all(&dir).unwrap();
        let (c, notes) = Config::load_from(None, &env(&[(VALKEY_PASSWORD_ENV, "t0ken-env")])).unwrap();
        let p = c.valkey_password.clone().expect("a password");
        assert_eq!((p.secret.expose(), p.source.as_str()), ("t0ken-env", VALKEY_PASSWORD_ENV));
        assert!(notes.ignored_env.is_empty(), "the password variable is known");
        assert!(!format!("{c:?} {p:?} {}", p.secret).contains("t0ken"), "Debug and Display redact it");

        let pw = dir.join("pw");
        std::fs::write(&pw, "t0ken-file\r\n").unwrap();
        let pw = pw.to_str().unwrap();
        let (c, _) =
            Config::load_from(None, &env(&[("KVCM_VALKEY_PASSWORD_FILE", pw), ("KVCM_VALKEY_USERNAME", "kv")]))
                .unwrap();
        let p = c.valkey_password.expect("a password");
        assert_eq!(p.secret.expose(), "t0ken-file", "trailing line breaks are ignored");
        assert_eq!(p.source, format!("valkey_password_file {pw}"));

        let refused = |pairs: &[(&str, &str)], key: &str| {
            let e = Config::load_from(None, &env(pairs)).unwrap_err().to_string();
            assert!(e.contains(&format!("key `{key}`")) && !e.contains("t0ken"), "{e}");
            e
        };
        let e =
            refused(&[("KVCM_VALKEY_PASSWORD_FILE", pw), (VALKEY_PASSWORD_ENV, "t0ken-env")], "valkey_password_file");
        assert!(e.contains("one way only"), "{e}");
        refused(&[("KVCM_VALKEY_URL", "redis://u:t0ken-url@h:1"), (VALKEY_PASSWORD_ENV, "t0ken-env")], "valkey_url");
        refused(&[("KVCM_VALKEY_URL", "redis://u@h:1"), ("KVCM_VALKEY_USERNAME", "v")], "valkey_url");
        refused(&[("KVCM_VALKEY_USERNAME", "kv")], "valkey_username");
        let empty = dir.join("empty");
        std::fs::write(&empty, "\n").unwrap();
        refused(&[("KVCM_VALKEY_PASSWORD_FILE", empty.to_str().unwrap())], "valkey_password_file");
        refused(&[("KVCM_VALKEY_PASSWORD_FILE", "/no/such/file")], "valkey_password_file");
        // A password in a config file is refused, pointing at where it belongs.
        let file = dir.join("c.toml");
        std::fs::write(&file, "valkey_password = \"t0ken-config\"\n").unwrap();
        let e = Config::load_from(Some(&file), &[]).unwrap_err().to_string();
        assert!(e.contains("key `valkey_password`") && e.contains(VALKEY_PASSWORD_ENV) && !e.contains("t0ken"), "{e}");
        // An empty variable is no password.
        let (c, _) = Config::load_from(None, &env(&[(VALKEY_PASSWORD_ENV, "")])).unwrap();
        assert!(c.valkey_password.is_none());
    }

    #[test]
    fn tls_settings_are_checked_at_load_and_errors_name_their_key() {
        let dir = std::env::temp_dir().join(format!("kvcm-config-{}", fastrand::u64(..)));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\n").unwrap();
        let ca = ca.to_str().unwrap();
        let tls = ("KVCM_VALKEY_URL", "rediss://a:1,rediss://b:2");
        let (c, _) = Config::load_from(None, &env(&[tls, ("KVCM_VALKEY_TLS_CA_FILE", ca)])).unwrap();
        assert!(c.valkey_tls());
        let refused = |pairs: &[(&str, &str)], key: &str, why: &str| {
            let e = Config::load_from(None, &env(pairs)).unwrap_err().to_string();
            assert!(e.contains(&format!("key `{key}`")) && e.contains(why), "{e}");
        };
        refused(&[tls, ("KVCM_VALKEY_TLS_CA_FILE", "/no/such/ca.pem")], "valkey_tls_ca_file", "does not exist");
        refused(&[("KVCM_VALKEY_TLS_CA_FILE", ca)], "valkey_tls_ca_file", "use rediss://");
        refused(&[tls, ("KVCM_VALKEY_TLS_CLIENT_CERT_FILE", ca)], "valkey_tls_client_key_file", "is needed");
        refused(&[tls, ("KVCM_VALKEY_TLS_CLIENT_KEY_FILE", ca)], "valkey_tls_client_cert_file", "is needed");
        refused(&[("KVCM_VALKEY_URL", "rediss://a:1,redis://b:2")], "valkey_url", "all rediss://");
        refused(&[("KVCM_VALKEY_URL", "rediss://a:1/#insecure")], "valkey_url", "#insecure");
    }

    #[test]
    fn lambda_plane_is_meta_admin_or_empty_and_a_typo_names_the_key() {
        assert_eq!(Config::load_from(None, &[]).unwrap().0.lambda_plane, None);
        for (raw, plane) in [("meta", LambdaPlane::Meta), ("admin", LambdaPlane::Admin)] {
            let (c, _) = Config::load_from(None, &env(&[("KVCM_LAMBDA_PLANE", raw)])).unwrap();
            assert_eq!(c.lambda_plane, Some(plane));
            assert_eq!(plane.name(), raw);
        }
        let e = Config::load_from(None, &env(&[("KVCM_LAMBDA_PLANE", "Meta")])).unwrap_err().to_string();
        assert!(e.contains("lambda_plane") && e.contains("\"meta\""), "{e}");
    }
}
