//! JSON Schema checks for action inputs, with errors that name the field.

use crate::error::ApiError;
use serde_json::Value;

/// Checks that `schema` is a usable JSON Schema.
pub fn check_schema(schema: &Value) -> Result<(), ApiError> {
    jsonschema::validator_for(schema).map(|_| ()).map_err(|e| {
        ApiError::validation("inputSchema", format!("is not a valid JSON Schema ({e})"))
    })
}

/// Validates `input` against `schema`. The error names the first offending field as
/// `input.a.b` (or `input` for the whole object).
pub fn validate(schema: &Value, input: &Value) -> Result<(), ApiError> {
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
}
