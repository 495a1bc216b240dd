//! What a call to the Steward API can end in, short of an answer.

use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Steward answered with an error envelope that retrying cannot change (validation, auth,
    /// scope, not found, conflicts).
    #[error("steward refused the request: {status} {code}: {message}")]
    Refused {
        status: u16,
        code: String,
        message: String,
        details: Option<Value>,
    },
    /// Every attempt failed with something worth retrying (a transport error, 5xx, 429, or a
    /// request still in progress). The same `Idempotency-Key` was sent each time.
    #[error("no answer from steward after {attempts} attempts: {last}")]
    Exhausted { attempts: u32, last: String },
    /// A success status with a body that is not what the contract says.
    #[error("malformed answer from steward: {0}")]
    Malformed(String),
    /// The base URL or a header could not be built.
    #[error("invalid client configuration: {0}")]
    Config(String),
}

impl ApiError {
    /// The error code when Steward refused the request.
    pub fn code(&self) -> Option<&str> {
        match self {
            ApiError::Refused { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The HTTP status when Steward refused the request.
    pub fn status(&self) -> Option<u16> {
        match self {
            ApiError::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }
}
