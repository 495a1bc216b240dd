//! Reading the `spec` field: a JSON object, or JSON or YAML text, into the document's JSON (kept
//! for schemas, see `schema.rs`) and `oas3`'s model of it (paths, operations, parameters,
//! bodies, security, servers).
//!
//! `oas3` models 3.1. A 3.0 document differs from it in two places that would make it refuse the
//! document rather than misread it: `exclusiveMinimum`/`exclusiveMaximum` are booleans in 3.0,
//! numbers in 3.1. Those two are rewritten in the 3.1 form (in the copy given to `oas3`, and
//! they are dropped from input schemas anyway); 3.0's `nullable` is read from the JSON by
//! `schema.rs`.

use super::{references, SPEC_BYTES_MAX, SPEC_FIELD};
use crate::error::{ApiError, ApiResult};
use serde_json::Value;

/// The OpenAPI major.minor versions the import reads.
const VERSIONS: [&str; 2] = ["3.0", "3.1"];

/// A parsed document.
pub(super) struct Document {
    /// The document as JSON (for schemas and the raw shape of operations).
    pub raw: Value,
    /// The same document in `oas3`'s model.
    pub spec: oas3::Spec,
}

/// Reads `spec`, refusing anything past [`SPEC_BYTES_MAX`] or not an OpenAPI 3.0/3.1 document.
pub(super) fn load(spec: &Value) -> ApiResult<Document> {
    let raw = match spec {
        Value::Object(_) => {
            within_bound(spec)?;
            spec.clone()
        }
        Value::String(text) => {
            if text.len() > SPEC_BYTES_MAX {
                return Err(too_large());
            }
            let parsed = parse_text(text)?;
            // An alias-heavy YAML text can grow when read: the bound holds for what was read.
            within_bound(&parsed)?;
            parsed
        }
        _ => {
            return Err(ApiError::validation(
                SPEC_FIELD,
                "must be an OpenAPI document: a JSON object, or JSON or YAML text",
            ))
        }
    };
    let version = raw.get("openapi").and_then(Value::as_str).ok_or_else(|| {
        ApiError::validation(
            "spec.openapi",
            "is required: an OpenAPI 3.0 or 3.1 document (Swagger 2.0 is not read)",
        )
    })?;
    if !VERSIONS
        .iter()
        .any(|v| version == *v || version.starts_with(&format!("{v}.")))
    {
        return Err(ApiError::validation(
            "spec.openapi",
            format!("is {version}; the import reads OpenAPI 3.0 and 3.1"),
        ));
    }
    // Before anything follows a reference: `oas3` resolves chains by recursion.
    references::check(&raw)?;
    let mut model = raw.clone();
    if version.starts_with("3.0") {
        exclusive_bounds_as_numbers(&mut model);
    }
    let spec: oas3::Spec = serde_path_to_error::deserialize(model).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." || path.is_empty() {
            SPEC_FIELD.to_string()
        } else {
            format!("{SPEC_FIELD}.{path}")
        };
        ApiError::validation(
            field,
            format!("is not a valid OpenAPI document ({})", e.inner()),
        )
    })?;
    Ok(Document { raw, spec })
}

fn too_large() -> ApiError {
    ApiError::validation(
        SPEC_FIELD,
        format!("must be at most {SPEC_BYTES_MAX} bytes"),
    )
}

fn within_bound(value: &Value) -> ApiResult<()> {
    let size = serde_json::to_vec(value)
        .map_err(|e| ApiError::internal("spec size", &e))?
        .len();
    if size > SPEC_BYTES_MAX {
        return Err(too_large());
    }
    Ok(())
}

/// JSON text, else YAML text (JSON is YAML, but JSON's own errors read better).
fn parse_text(text: &str) -> ApiResult<Value> {
    if text.trim_start().starts_with('{') {
        return serde_json::from_str(text)
            .map_err(|e| ApiError::validation(SPEC_FIELD, format!("is not valid JSON ({e})")));
    }
    let value: Value = yaml_serde::from_str(text)
        .map_err(|e| ApiError::validation(SPEC_FIELD, format!("is not valid YAML ({e})")))?;
    if !value.is_object() {
        return Err(ApiError::validation(
            SPEC_FIELD,
            "must be an OpenAPI document (an object at the top)",
        ));
    }
    Ok(value)
}

/// 3.0's `exclusiveMinimum: true` beside `minimum: 1` is 3.1's `exclusiveMinimum: 1`.
fn exclusive_bounds_as_numbers(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (flag, bound) in [
                ("exclusiveMinimum", "minimum"),
                ("exclusiveMaximum", "maximum"),
            ] {
                if let Some(Value::Bool(exclusive)) = map.get(flag) {
                    let exclusive = *exclusive;
                    map.remove(flag);
                    if exclusive {
                        if let Some(limit) = map.remove(bound) {
                            map.insert(flag.to_string(), limit);
                        }
                    }
                }
            }
            map.values_mut().for_each(exclusive_bounds_as_numbers);
        }
        Value::Array(items) => items.iter_mut().for_each(exclusive_bounds_as_numbers),
        _ => {}
    }
}

/// The first server's URL with its variables at their defaults; `None` without servers.
pub(super) fn first_server(spec: &oas3::Spec) -> Option<String> {
    spec.servers.first().map(server_url)
}

/// A server's URL with its variables at their defaults.
pub(super) fn server_url(server: &oas3::spec::Server) -> String {
    let mut url = server.url.clone();
    for (name, variable) in &server.variables {
        url = url.replace(&format!("{{{name}}}"), &variable.default);
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(result: ApiResult<Document>) -> String {
        match result {
            Ok(_) => panic!("accepted"),
            Err(e) => e.details.unwrap()["field"].as_str().unwrap().to_string(),
        }
    }

    const YAML: &str = "openapi: 3.0.3\ninfo: {title: t, version: '1'}\nservers:\n  - url: '{scheme}://api.example.com/v1'\n    variables: {scheme: {default: https}}\npaths:\n  /a:\n    get:\n      responses:\n        200: {description: ok}\n";

    #[test]
    fn yaml_and_json_text_and_objects_are_read() {
        let from_yaml = load(&json!(YAML)).unwrap();
        assert_eq!(
            from_yaml.raw["paths"]["/a"]["get"]["responses"]["200"]["description"],
            "ok"
        );
        assert_eq!(
            first_server(&from_yaml.spec).unwrap(),
            "https://api.example.com/v1"
        );
        let text = serde_json::to_string(&from_yaml.raw).unwrap();
        assert_eq!(load(&json!(text)).unwrap().raw, from_yaml.raw);
        assert_eq!(load(&from_yaml.raw).unwrap().raw, from_yaml.raw);
    }

    #[test]
    fn versions_and_shapes_are_checked_naming_the_field() {
        assert_eq!(field(load(&json!(12))), "spec");
        assert_eq!(field(load(&json!({"swagger": "2.0"}))), "spec.openapi");
        assert_eq!(field(load(&json!({"openapi": "4.0.0"}))), "spec.openapi");
        assert_eq!(field(load(&json!("openapi: [unclosed"))), "spec");
        assert_eq!(field(load(&json!({"openapi": "3.1.0"}))), "spec");
        let bad_paths =
            json!({"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": 7});
        assert!(field(load(&bad_paths)).starts_with("spec"));
    }

    #[test]
    fn a_3_0_exclusive_bound_is_read_as_3_1() {
        let doc = json!({"openapi": "3.0.0", "info": {"title": "t", "version": "1"},
            "components": {"schemas": {"N": {"type": "integer", "minimum": 1, "exclusiveMinimum": true}}}});
        assert!(load(&doc).is_ok());
    }

    #[test]
    fn the_size_bound_holds_for_text_objects_and_what_yaml_aliases_grow_into() {
        let big = "x".repeat(SPEC_BYTES_MAX + 1);
        assert_eq!(field(load(&json!(big))), "spec");
        assert_eq!(
            field(load(&json!({"openapi": "3.1.0", "x-pad": big}))),
            "spec"
        );
        // Each level repeats the one below eight times.
        let mut yaml =
            String::from("openapi: 3.1.0\na0: &a0 [\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"]\n");
        for i in 1..8 {
            let below = format!("*a{}", i - 1);
            yaml.push_str(&format!("a{i}: &a{i} [{}]\n", vec![below; 8].join(", ")));
        }
        assert!(yaml.len() < 1000);
        assert_eq!(field(load(&json!(yaml))), "spec");
    }
}
