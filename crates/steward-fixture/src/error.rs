//! Stripe-shaped error bodies.
//!
//! Stripe answers every failure with `{"error": {"type": ..., "message": ...}}`,
//! optionally with `code` and `param`. [`ApiError`] builds exactly that shape
//! and turns itself into an HTTP response (or into a saved idempotent result).

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// A Stripe-shaped error: HTTP status plus the fields of the `error` object.
#[derive(Clone, Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub code: Option<&'static str>,
    pub param: Option<String>,
    pub message: String,
    /// Adds `Stripe-Should-Retry: true` (Stripe's "nothing happened, retry is safe").
    pub should_retry: bool,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            code: None,
            param: None,
            message: message.into(),
            should_retry: false,
        }
    }

    /// 400 `invalid_request_error` about one request parameter.
    pub fn invalid_param(param: impl Into<String>, message: impl Into<String>) -> Self {
        let mut e = Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            message.into(),
        );
        e.param = Some(param.into());
        e.code = Some("parameter_invalid");
        e
    }

    /// 400 `invalid_request_error` for a required parameter that is absent.
    pub fn missing_param(param: &str) -> Self {
        let mut e = Self::invalid_param(param, format!("Missing required param: {param}."));
        e.code = Some("parameter_missing");
        e
    }

    /// 400 `invalid_request_error` not tied to one parameter (e.g. unreadable body).
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 401: missing or unacceptable API key. Never includes the key itself.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "invalid_request_error", message)
    }

    /// 404 `resource_missing`.
    pub fn not_found(param: Option<&str>, message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::NOT_FOUND, "invalid_request_error", message);
        e.code = Some("resource_missing");
        e.param = param.map(str::to_string);
        e
    }

    /// 400 `idempotency_error`: same key reused with different parameters.
    pub fn idempotency_mismatch(key: &str) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "idempotency_error",
            format!(
                "Keys for idempotent requests can only be used with the same parameters \
                 they were first used with. Try using a key other than '{key}' if you \
                 meant to execute a different request."
            ),
        )
    }

    /// 409 `idempotency_error` / `idempotency_key_in_use`.
    pub fn idempotency_in_use() -> Self {
        let mut e = Self::new(
            StatusCode::CONFLICT,
            "idempotency_error",
            "There is currently another in-progress request using this Idempotency-Key. \
             Please try again later.",
        );
        e.code = Some("idempotency_key_in_use");
        e
    }

    /// 500 `api_error`.
    pub fn server_error(message: impl Into<String>, should_retry: bool) -> Self {
        let mut e = Self::new(StatusCode::INTERNAL_SERVER_ERROR, "api_error", message);
        e.should_retry = should_retry;
        e
    }

    /// 402 `card_error` / `charge_already_refunded`: a definitive rejection.
    pub fn already_refunded(payment_intent: &str) -> Self {
        let mut e = Self::new(
            StatusCode::PAYMENT_REQUIRED,
            "card_error",
            format!("Charge for PaymentIntent {payment_intent} has already been refunded."),
        );
        e.code = Some("charge_already_refunded");
        e
    }

    /// The JSON body, `{"error": {...}}`.
    pub fn body(&self) -> Value {
        let mut inner = json!({ "type": self.kind, "message": self.message });
        if let Some(code) = self.code {
            inner["code"] = json!(code);
        }
        if let Some(param) = &self.param {
            inner["param"] = json!(param);
        }
        json!({ "error": inner })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = json_response(self.status, &self.body());
        if self.should_retry {
            resp.headers_mut()
                .insert("stripe-should-retry", HeaderValue::from_static("true"));
        }
        resp
    }
}

/// A JSON response with the given status.
pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    (status, axum::Json(body)).into_response()
}
