//! JSON Schema checks for action inputs, with errors that name the field.

use crate::error::ApiError;
use serde_json::Value;

/// Checks that `schema` is a usable JSON Schema within the bounds of
/// [`steward_core::check_schema_bounds`] (no reference cycles, no references outside it).
pub fn check_schema(schema: &Value) -> Result<(), ApiError> {
    bounded(schema)?;
    jsonschema::validator_for(schema).map(|_| ()).map_err(|e| {
        ApiError::validation("inputSchema", format!("is not a valid JSON Schema ({e})"))
    })
}

/// Validates `input` against `schema`. The error names the first offending field as
/// `input.a.b` (or `input` for the whole object).
pub fn validate(schema: &Value, input: &Value) -> Result<(), ApiError> {
    // Checked again at use: the stored schema may predate these bounds.
    bounded(schema)?;
    let validator = jsonschema::validator_for(schema).map_err(|e| {
        ApiError::validation("inputSchema", format!("is not a valid JSON Schema ({e})"))
    })?;
    let Some(error) = validator.iter_errors(input).next() else {
        return Ok(());
    };
    let pointer = error.instance_path.to_string();
    let mut field = String::from("input");
    for segment in pointer.split('/').filter(|s| !s.is_empty()) {
        field.push('.');
        field.push_str(&segment.replace("~1", "/").replace("~0", "~"));
    }
    // A missing required property is reported at its parent; name the property itself.
    if let jsonschema::error::ValidationErrorKind::Required { property } = &error.kind {
        if let Some(name) = property.as_str() {
            field.push('.');
            field.push_str(name);
        }
    }
    Err(ApiError::validation(field, error.to_string()))
}

fn bounded(schema: &Value) -> Result<(), ApiError> {
    steward_core::check_schema_bounds(schema).map_err(|e| ApiError::validation("inputSchema", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_name_the_field() {
        let schema = json!({"type": "object", "required": ["amount"], "properties": {"amount": {"type": "integer"}}});
        let err = validate(&schema, &json!({})).unwrap_err();
        assert_eq!(err.details.unwrap()["field"], "input.amount");
        let err = validate(&schema, &json!({"amount": "x"})).unwrap_err();
        assert_eq!(err.details.unwrap()["field"], "input.amount");
        assert!(validate(&schema, &json!({"amount": 5})).is_ok());
        assert!(check_schema(&json!({"type": 12})).is_err());
    }

    /// The probe's repro: a `$ref` cycle was accepted, and every invoke spun and grew the
    /// server past 17 GB. Saving refuses it, naming `inputSchema`; a stored one (an older
    /// build's) is refused at use instead of validated. The validation runs on a thread so the
    /// old behaviour fails this test instead of hanging it.
    #[test]
    fn a_ref_cycle_is_refused_when_saved_and_when_used() {
        let schema = json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                            "$ref": "#/$defs/a"});
        let err = check_schema(&schema).unwrap_err();
        assert_eq!(err.details.unwrap()["field"], "inputSchema");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(validate(&schema, &json!({"amount": 1})).map_err(|e| e.details));
        });
        let used = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("validating against a stored cyclic schema must answer, not spin");
        assert_eq!(used.unwrap_err().unwrap()["field"], "inputSchema");
    }
}
