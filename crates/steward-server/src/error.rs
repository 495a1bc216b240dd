//! The one mapping from domain and storage errors to HTTP answers. Internal detail is logged with
//! its source chain and never sent to the client.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use steward_store::StoreError;

/// An error answer: status, stable code, human message, optional structured details.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            details: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// 400 naming the offending field.
    pub fn validation(field: impl Into<String>, message: impl Into<String>) -> Self {
        let field = field.into();
        let message = format!("{field}: {}", message.into());
        Self::new(StatusCode::BAD_REQUEST, "VALIDATION_ERROR", message)
            .with_details(json!({ "field": field }))
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            format!("{what} not found"),
        )
    }

    pub fn unauthenticated() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "AUTHENTICATION_FAILED",
            "missing or invalid API key",
        )
    }

    pub fn forbidden(scope: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "FORBIDDEN",
            format!("this key lacks the `{scope}` scope"),
        )
        .with_details(json!({ "requiredScope": scope }))
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    pub fn internal(context: &str, err: &dyn std::error::Error) -> Self {
        tracing::error!(error = %err, source = ?err.source(), "{context}");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL_ERROR",
            "internal error",
        )
    }

    pub fn body(&self) -> Value {
        let mut error = json!({ "code": self.code, "message": self.message });
        if let Some(details) = &self.details {
            error["details"] = details.clone();
        }
        json!({ "success": false, "error": error })
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match &err {
            StoreError::Unavailable { .. } => {
                tracing::error!(error = %err, source = ?std::error::Error::source(&err), "storage unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "STORAGE_UNAVAILABLE",
                    "storage is unavailable; nothing was changed and nothing was sent",
                )
            }
            StoreError::NotFound { what } => ApiError::not_found(what),
            StoreError::Duplicate { what } => {
                ApiError::conflict("already_exists", format!("{what} already exists"))
            }
            StoreError::VersionConflict { .. } | StoreError::StateConflict { .. } => {
                ApiError::conflict(
                    "concurrent_modification",
                    "another request changed this record first; read it again",
                )
            }
            StoreError::Halted => ApiError::conflict(
                "environment_halted",
                "this environment is halted; nothing was sent",
            ),
            StoreError::Corrupt(_) => ApiError::internal("corrupt record", &err),
            StoreError::IllegalTransition { .. } => ApiError::internal("illegal transition", &err),
        }
    }
}

/// How long a caller should wait before resending a request whose original is still running
/// (`idempotency_request_in_progress`), in seconds: the `Retry-After` of that 409. One second is
/// a fraction of the dispatch deadline, so a resend soon finds the recorded answer.
pub const IN_PROGRESS_RETRY_AFTER_S: u32 = 1;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry_after = (self.code == "idempotency_request_in_progress")
            .then(|| IN_PROGRESS_RETRY_AFTER_S.to_string());
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(seconds) = retry_after.and_then(|s| s.parse().ok()) {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds);
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
