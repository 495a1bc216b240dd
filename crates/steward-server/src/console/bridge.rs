//! Calls into the API's own handlers. The console never re-implements a rule: it builds the
//! request the API would receive (a JSON body, a query string), calls the handler function
//! with the signed-in operator as its [`Caller`], and renders the `data` the handler answered,
//! or its error. Whatever `/api/v2` checks, refuses or records, the console does too.
//!
//! What is left here: the catalog (actions, policies, limits), the webhook dead letters and the
//! unknown queue's reconcile and resolve buttons, whose use cases do not yet take a typed input
//! the console can build without the handler's own checks. The reads (invocations, effects,
//! approvals) call `app::reads` and render through `records.rs`; the decisions and the
//! environment call `app/` directly. The form helpers below serve every page.

use crate::api::query::{parse, Query};
use crate::error::{ApiError, ApiResult};
use axum::body::Bytes;
use axum::response::Response;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::HashMap;

/// The largest API answer the console reads, in bytes: a page of 200 records with inputs and
/// evidence fits many times over.
const ANSWER_BYTES_MAX: usize = 32 * 1024 * 1024;

/// The `data` of a handler's answer, or the handler's error.
pub async fn data(answer: ApiResult<Response>) -> Result<Value, ApiError> {
    full(answer)
        .await
        .map(|body| body.get("data").cloned().unwrap_or(Value::Null))
}

/// A handler's whole answer (`data` with its `pagination`), or the handler's error.
async fn full(answer: ApiResult<Response>) -> Result<Value, ApiError> {
    let response = answer?;
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), ANSWER_BYTES_MAX)
        .await
        .map_err(|e| ApiError::internal("console: reading an API answer", &e))?;
    let body: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::internal("console: decoding an API answer", &e))?;
    if status.is_success() {
        return Ok(body);
    }
    // An answer replayed from an idempotency record: the envelope's error, as the API said it.
    let message = body
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or("refused")
        .to_string();
    // The API's own code, as its table names it (the table holds every code it answers).
    let code = body
        .pointer("/error/code")
        .and_then(Value::as_str)
        .and_then(crate::error::codes::find)
        .map_or(crate::error::codes::INTERNAL_ERROR.code, |c| c.code);
    Err(ApiError::new(status, code, message))
}

/// A query string parsed as the handler's `Query<T>` extractor would parse it.
pub fn query<T: DeserializeOwned>(text: &str) -> Result<Query<T>, ApiError> {
    parse(text).map(Query)
}

/// A JSON request body.
pub fn body(value: Value) -> Bytes {
    Bytes::from(value.to_string())
}

/// The items of a list answer (`data` is the page's array).
pub fn items(value: &Value) -> &[Value] {
    value.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// A form field with text in it, or the API's validation error naming the field.
pub fn required<'a>(form: &'a HashMap<String, String>, name: &str) -> Result<&'a str, ApiError> {
    form.get(name)
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::validation(name, "is required"))
}

/// A form field with text in it, if there is one.
pub fn optional<'a>(form: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    form.get(name).map(|s| s.trim()).filter(|s| !s.is_empty())
}
