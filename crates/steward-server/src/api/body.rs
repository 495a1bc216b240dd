//! Request body and header parsing with errors that name the field.

use crate::error::ApiError;
use axum::body::Bytes;
use axum::http::HeaderMap;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use steward_core::IdempotencyKey;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::ToSchema;

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

/// Parses a JSON object body as `T` (an empty body is `{}`). Unknown fields are refused first,
/// against the properties of `T`'s schema, the same way [`only_known`] names them; then a field
/// `T` refuses is named by its path (`details.field`), with `T`'s message.
pub fn parse<T: DeserializeOwned + ToSchema + 'static>(bytes: &Bytes) -> Result<T, ApiError> {
    let map = object(bytes)?;
    only_known_to::<T>(&map)?;
    deserialize(map)
}

/// [`parse`] for a body already read as an object, for the handlers that also keep the object
/// itself (an idempotency fingerprint of the request as sent).
pub fn typed<T: DeserializeOwned + ToSchema + 'static>(
    map: &Map<String, Value>,
) -> Result<T, ApiError> {
    only_known_to::<T>(map)?;
    deserialize(map.clone())
}

fn deserialize<T: DeserializeOwned>(map: Map<String, Value>) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(Value::Object(map)).map_err(|e| {
        let field = e.path().to_string();
        ApiError::validation(field, e.into_inner().to_string())
    })
}

/// Refuses fields `T`'s schema does not describe, naming the first one: for the bodies whose
/// fields a handler reads from the object itself (a change where `null` clears a field).
pub fn only_known_to<T: ToSchema + 'static>(map: &Map<String, Value>) -> Result<(), ApiError> {
    let known = properties::<T>();
    only_known(map, &known.iter().map(String::as_str).collect::<Vec<_>>())
}

/// The property names of `T`'s schema: the fields its body may carry. Worked out once per
/// type: building a schema describes every field, which every request would otherwise repeat.
fn properties<T: ToSchema + 'static>() -> Arc<[String]> {
    type Known = Mutex<HashMap<TypeId, Arc<[String]>>>;
    static KNOWN: OnceLock<Known> = OnceLock::new();
    let known = KNOWN.get_or_init(Known::default);
    let id = TypeId::of::<T>();
    if let Some(names) = known.lock().unwrap_or_else(|e| e.into_inner()).get(&id) {
        return names.clone();
    }
    let names: Arc<[String]> = match T::schema() {
        RefOr::T(Schema::Object(object)) => object.properties.keys().cloned().collect(),
        _ => panic!("the body {} is not an object schema", T::name()),
    };
    known
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id, names.clone());
    names
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

#[cfg(test)]
mod tests {
    use super::*;
    use steward_wire::{DecisionBody, HaltBody, ResumeBody, Text};

    fn refusal<T: DeserializeOwned + ToSchema + std::fmt::Debug + 'static>(body: &str) -> ApiError {
        parse::<T>(&Bytes::from(body.to_string())).unwrap_err()
    }

    #[test]
    fn a_typed_body_names_an_unknown_field_as_only_known_does() {
        let typed = refusal::<DecisionBody>(r#"{"note": 1, "nope": true}"#);
        let by_hand = only_known(
            &object(&Bytes::from(r#"{"nope": true}"#)).unwrap(),
            &["note"],
        )
        .unwrap_err();
        assert_eq!(
            (typed.code, &typed.message, &typed.details),
            (by_hand.code, &by_hand.message, &by_hand.details)
        );
        assert_eq!(typed.details, Some(serde_json::json!({"field": "nope"})));
        let none = refusal::<ResumeBody>(r#"{"reason": "x"}"#);
        assert_eq!(none.details, Some(serde_json::json!({"field": "reason"})));
    }

    #[test]
    fn a_typed_body_names_the_field_it_refuses_with_the_hand_parsers_message() {
        let err = refusal::<HaltBody>(r#"{"reason": 7}"#);
        assert_eq!(err.code, "VALIDATION_ERROR");
        assert_eq!(err.message, "reason: must be a string");
        assert_eq!(err.details, Some(serde_json::json!({"field": "reason"})));
        let err = refusal::<DecisionBody>("[1]");
        assert_eq!(err.message, "body: must be a JSON object");
        let empty: DecisionBody = parse(&Bytes::from_static(b" ")).unwrap();
        assert_eq!(empty.note, None);
    }

    /// A nested object's unknown field is named by its path, as the import's hand parser named
    /// it (`auth.nope`), and a wrongly typed entry of a list by its index.
    #[test]
    fn a_nested_refusal_names_where_it_is() {
        let err = parse::<steward_wire::ImportBody>(&Bytes::from_static(
            br#"{"spec": {}, "auth": {"headerName": "X", "nope": 1}}"#,
        ))
        .unwrap_err();
        assert_eq!(
            err.details,
            Some(serde_json::json!({"field": "auth.nope"})),
            "{}",
            err.message
        );
        let err = parse::<steward_wire::ImportBody>(&Bytes::from_static(
            br#"{"spec": {}, "only": ["a", 2]}"#,
        ))
        .unwrap_err();
        assert_eq!(
            err.details,
            Some(serde_json::json!({"field": "only[1]"})),
            "{}",
            err.message
        );
    }

    /// The fields each type knows are kept per type: one type's do not answer for another's,
    /// the first time or from what was kept.
    #[test]
    fn each_body_type_keeps_its_own_fields() {
        for _ in 0..2 {
            let halt: HaltBody = parse(&Bytes::from_static(br#"{"reason": "x"}"#)).unwrap();
            assert_eq!(halt.reason.map(Text::into_string).as_deref(), Some("x"));
            let err = refusal::<DecisionBody>(r#"{"reason": "x"}"#);
            assert_eq!(err.details, Some(serde_json::json!({"field": "reason"})));
            let decision: DecisionBody = parse(&Bytes::from_static(br#"{"note": "n"}"#)).unwrap();
            assert_eq!(decision.note.map(Text::into_string).as_deref(), Some("n"));
            let err = refusal::<HaltBody>(r#"{"note": "n"}"#);
            assert_eq!(err.details, Some(serde_json::json!({"field": "note"})));
        }
    }
}
