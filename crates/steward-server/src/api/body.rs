//! Request body and header parsing with errors that name the field.

use crate::error::ApiError;
use axum::body::Bytes;
use axum::http::HeaderMap;
use serde_json::{Map, Value};
use steward_core::IdempotencyKey;

pub use crate::envelope::JSON_BODY_BYTES_MAX;

/// Parses a JSON object body; an empty body is an empty object.
pub fn object(bytes: &Bytes) -> Result<Map<String, Value>, ApiError> {
    // The router's limit stops larger bodies before they are read; this is the second check.
    if bytes.len() > JSON_BODY_BYTES_MAX {
        return Err(super::rejection::payload_too_large());
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::validation("body", "must be a JSON object")),
        Err(e) => Err(ApiError::validation(
            "body",
            format!("is not valid JSON ({e})"),
        )),
    }
}

/// Refuses fields the endpoint does not know, naming the first one.
pub fn only_known(map: &Map<String, Value>, known: &[&str]) -> Result<(), ApiError> {
    match map.keys().find(|k| !known.contains(&k.as_str())) {
        Some(unknown) => Err(ApiError::validation(
            unknown.clone(),
            "is not a known field",
        )),
        None => Ok(()),
    }
}

/// A string field, refused if it holds control or invisible formatting characters (line feeds
/// and tabs aside): every such field is something a person reads (a title, note, reason,
/// description) or an identifier.
pub fn optional_string(map: &Map<String, Value>, field: &str) -> Result<Option<String>, ApiError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => {
            steward_core::check_text(field, s, steward_core::TextKind::Prose)
                .map_err(|e| ApiError::validation(e.field, e.message))?;
            Ok(Some(s.clone()))
        }
        Some(_) => Err(ApiError::validation(field, "must be a string")),
    }
}

/// The `Idempotency-Key` header, if any.
pub fn idempotency_key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, ApiError> {
    let Some(raw) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let text = raw
        .to_str()
        .map_err(|_| ApiError::validation("Idempotency-Key", "must be printable ASCII"))?;
    IdempotencyKey::parse(text)
        .map(Some)
        .map_err(|e| ApiError::validation("Idempotency-Key", e.to_string()))
}
