//! The error type every core operation returns, and its mapping to wire status codes.
//!
//! Domain errors (`Error::Status`) carry a message written for the caller: it says what was
//! wrong and what to fix. Infrastructure errors (Valkey unreachable, a script reply we cannot
//! decode) are logged in full by the API layer and answered with a short generic message, so
//! internal details do not leak to clients.

use crate::wire::StatusCode;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A domain outcome the caller can act on (bad argument, duplicate, not found, …).
    #[error("{code}: {message}")]
    Status { code: StatusCode, message: String },
    /// The caller's credential may not act on what the request names (HTTP 403).
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// Valkey could not be reached or answered with an error.
    #[error("valkey: {0}")]
    Valkey(#[from] redis::RedisError),
    /// The metadata store cannot promise what the request needs right now (e.g. replicas did not
    /// acknowledge a write in time): the caller should retry shortly. The message is the
    /// caller's.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// A bug or a corrupt record: something that should not happen.
    #[error("internal: {0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<redis::ParsingError> for Error {
    fn from(e: redis::ParsingError) -> Self {
        Error::Internal(format!("unexpected Valkey reply: {e}"))
    }
}

impl Error {
    pub fn status(code: StatusCode, message: impl Into<String>) -> Self {
        Error::Status { code, message: message.into() }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::status(StatusCode::INVALID_ARGUMENT, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Error::Internal(message.into())
    }

    /// The status code to put in `header.status.code`.
    pub fn code(&self) -> StatusCode {
        match self {
            Error::Status { code, .. } => *code,
            Error::Forbidden(_) => StatusCode::INVALID_ARGUMENT,
            Error::Valkey(e) if unavailable(e) => StatusCode::SERVICE_NOT_READY,
            Error::Unavailable(_) => StatusCode::SERVICE_NOT_READY,
            Error::Valkey(_) | Error::Internal(_) => StatusCode::INTERNAL_ERROR,
        }
    }

    /// True when the metadata store is unavailable right now (unreachable, failing over,
    /// loading, busy) rather than refusing the request: the caller should retry shortly
    /// (frontends answer HTTP 503 with `Retry-After`).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Unavailable(_)) || matches!(self, Error::Valkey(e) if unavailable(e))
    }

    /// The message to put in `header.status.message`: domain messages verbatim, infrastructure
    /// failures summarised.
    pub fn public_message(&self) -> String {
        match self {
            Error::Status { message, .. } | Error::Forbidden(message) | Error::Unavailable(message) => message.clone(),
            Error::Valkey(_) if self.is_out_of_memory() => "the metadata store (Valkey) is out of memory (maxmemory \
                 reached): writes fail until it has room; retry later"
                .into(),
            Error::Valkey(_) if self.is_unavailable() => {
                "the metadata store (Valkey) is unavailable (unreachable or failing over); retry shortly".into()
            }
            Error::Valkey(_) => "the metadata store (Valkey) returned an error".into(),
            Error::Internal(_) => "internal error; see the kvcm-api log".into(),
        }
    }

    /// Valkey refused a write because it reached `maxmemory` (`OOM`): unavailable to the caller
    /// (503, retry later), and an operator must act (raise `maxmemory`, lower quotas).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Error::Valkey(e) if e.code() == Some("OOM"))
    }

    /// True for errors the operator should see in the log (not the caller's fault).
    pub fn is_internal(&self) -> bool {
        !matches!(self, Error::Status { .. } | Error::Forbidden(_))
    }
}

/// Whether a Valkey error is one of unavailability, still there after the client's own retries:
/// the connection failed or dropped, or the cluster is failing over (`CLUSTERDOWN`, `TRYAGAIN`,
/// `MOVED`/`ASK` storms while slots migrate, `MASTERDOWN`, `READONLY` from a demoted primary,
/// `LOADING` after a restart, no connection to the slot's node yet), a script is running past its
/// time (`BUSY`), a primary lacks the replicas `min-replicas-to-write` asks for (`NOREPLICAS`), or
/// Valkey is full (`OOM`). Every other error is a bug or a corrupt reply (`INTERNAL_ERROR`).
fn unavailable(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind as S};
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
        return true;
    }
    match e.kind() {
        ErrorKind::Server(
            S::ClusterDown | S::TryAgain | S::BusyLoading | S::Moved | S::Ask | S::MasterDown | S::ReadOnly,
        ) => true,
        ErrorKind::ClusterConnectionNotFound => true,
        _ => matches!(e.code(), Some("BUSY" | "NOREPLICAS" | "OOM")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(line: &str) -> Error {
        let v = redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).expect("an error reply");
        let redis::Value::ServerError(e) = v else { panic!("{v:?}") };
        Error::Valkey(e.into())
    }

    #[test]
    fn failover_errors_are_service_not_ready_and_others_internal() {
        for line in [
            "CLUSTERDOWN The cluster is down",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "LOADING Valkey is loading the dataset in memory",
            "MOVED 3999 127.0.0.1:6381",
            "ASK 3999 127.0.0.1:6381",
            "MASTERDOWN Link with MASTER is down",
            "READONLY You can't write against a read only replica.",
            "BUSY Valkey is busy running a script.",
            "NOREPLICAS Not enough good replicas to write.",
            "OOM command not allowed when used memory > 'maxmemory'.",
        ] {
            let e = server(line);
            assert_eq!(e.code(), StatusCode::SERVICE_NOT_READY, "{line}");
            assert!(e.is_unavailable(), "{line}");
            assert!(e.public_message().contains("retry"), "{line}");
            assert_eq!(e.is_out_of_memory(), line.starts_with("OOM"), "{line}");
        }
        let io = Error::Valkey(std::io::Error::from(std::io::ErrorKind::ConnectionReset).into());
        assert_eq!(io.code(), StatusCode::SERVICE_NOT_READY);
        for line in
            ["ERR wrong number of arguments", "WRONGTYPE Operation against a key", "NOSCRIPT No matching script"]
        {
            let e = server(line);
            assert_eq!(e.code(), StatusCode::INTERNAL_ERROR, "{line}");
            assert!(!e.is_unavailable(), "{line}");
        }
        assert!(!Error::invalid("x").is_unavailable());
    }
}
