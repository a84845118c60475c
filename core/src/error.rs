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
            Error::Valkey(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => {
                StatusCode::SERVICE_NOT_READY
            }
            Error::Valkey(_) | Error::Internal(_) => StatusCode::INTERNAL_ERROR,
        }
    }

    /// The message to put in `header.status.message`: domain messages verbatim, infrastructure
    /// failures summarised.
    pub fn public_message(&self) -> String {
        match self {
            Error::Status { message, .. } | Error::Forbidden(message) => message.clone(),
            Error::Valkey(_) if self.code() == StatusCode::SERVICE_NOT_READY => {
                "the metadata store (Valkey) is unreachable; retry later".into()
            }
            Error::Valkey(_) => "the metadata store (Valkey) returned an error".into(),
            Error::Internal(_) => "internal error; see the kvcm-api log".into(),
        }
    }

    /// True for errors the operator should see in the log (not the caller's fault).
    pub fn is_internal(&self) -> bool {
        !matches!(self, Error::Status { .. } | Error::Forbidden(_))
    }
}
