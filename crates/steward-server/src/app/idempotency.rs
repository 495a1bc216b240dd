//! The two refusals of a request resent under an `Idempotency-Key`, for the invoke (whose
//! record of the key is the submission's) and for the HTTP edge (`api/idempotent.rs`, which
//! records other requests' answers whole).

use crate::error::ApiError;
use axum::http::StatusCode;

/// A resend while the original request under its key is still running.
pub fn in_progress() -> ApiError {
    ApiError::conflict(
        "idempotency_request_in_progress",
        "the original request with this Idempotency-Key is still running; call again with the same key for its result",
    )
}

/// A key sent again with a different request.
pub fn reused() -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency_key_reused",
        "this Idempotency-Key was used for a different request",
    )
}
