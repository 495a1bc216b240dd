//! One OpenAPI Schema Object turned into the JSON Schema an action's `inputSchema` holds.
//!
//! Schemas are read from the document's own JSON, not from `oas3`'s typed model: that model
//! keeps only the keywords it knows and silently loses the others (3.0's `nullable`, `not`,
//! `patternProperties`...), and a keyword lost is a check lost. Every keyword is one of:
//! - carried: `type`, `properties`, `required`, `items`, `additionalProperties`, `enum`,
//!   `const`, and the annotations `title`, `description`, `default`; 3.0's `nullable` becomes
//!   `"null"` in `type` (and in `enum`);
//! - dropped with a warning, because it only documents the value ([`DOCUMENTING`]);
//! - dropped silently, because it never constrains a value ([`IGNORED`], `x-*` extensions);
//!   a request property marked `readOnly` is never sent, so it is removed (with a warning);
//! - anything else (`oneOf`, `allOf`, `not`, `discriminator`, `patternProperties`...): the
//!   operation is skipped, naming the keyword.
//!
//! `$ref`s to the same document are inlined; a reference to another document or a recursive
//! one skips the operation. Depth and size are bounded ([`super::SCHEMA_DEPTH_MAX`],
//! [`steward_core::SCHEMA_NODES_MAX`]).

use serde_json::{json, Map, Value};

/// Keywords that only document a value: dropped from the input schema, listed in `warnings`.
pub(super) const DOCUMENTING: [&str; 16] = [
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "pattern",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "contentEncoding",
    "contentMediaType",
];

/// Keywords that never constrain a value: dropped without a word.
const IGNORED: [&str; 9] = [
    "example",
    "examples",
    "externalDocs",
    "xml",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$comment",
    "$schema",
];

/// The JSON Schema types.
const TYPES: [&str; 7] = [
    "string", "number", "integer", "boolean", "array", "object", "null",
];

/// Why a schema was not converted.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Refusal {
    /// The operation cannot be imported faithfully; the reason says why.
    Skip(String),
    /// The schema is past a bound of the import; the message says which.
    Bound(String),
}

/// A converted schema and what was dropped from it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Converted {
    pub schema: Value,
    pub warnings: Vec<String>,
}

/// Converts `schema`, found in `document`. `at` names the value in warnings (`body.amount`).
pub(super) fn convert(document: &Value, schema: &Value, at: &str) -> Result<Converted, Refusal> {
    let mut walk = Walk {
        document,
        refs: Vec::new(),
        nodes: 0,
        warnings: Vec::new(),
    };
    let schema = walk.schema(schema, at, 1)?;
    Ok(Converted {
        schema,
        warnings: walk.warnings,
    })
}

/// Resolves a local `$ref` (`#/components/schemas/Pet`) in `document`.
pub(super) fn resolve<'a>(document: &'a Value, reference: &str) -> Result<&'a Value, Refusal> {
    let Some(pointer) = reference.strip_prefix('#') else {
        return Err(Refusal::Skip(format!(
            "references {reference}, outside this document; nothing is fetched"
        )));
    };
    document.pointer(pointer).ok_or_else(|| {
        Refusal::Skip(format!(
            "references {reference}, which the document does not have"
        ))
    })
}

struct Walk<'a> {
    document: &'a Value,
    /// The references being inlined, outermost first: a repeat is a recursive schema.
    refs: Vec<String>,
    /// Values written so far, against `SCHEMA_NODES_MAX`.
    nodes: usize,
    warnings: Vec<String>,
}

impl Walk<'_> {
    fn schema(&mut self, schema: &Value, at: &str, depth: usize) -> Result<Value, Refusal> {
        if depth > super::SCHEMA_DEPTH_MAX {
            return Err(Refusal::Bound(format!(
                "a schema nests more than {} levels deep (at {at})",
                super::SCHEMA_DEPTH_MAX
            )));
        }
        self.nodes += 1;
        if self.nodes > steward_core::SCHEMA_NODES_MAX {
            return Err(Refusal::Bound(format!(
                "a schema holds more than {} values once its references are inlined (at {at})",
                steward_core::SCHEMA_NODES_MAX
            )));
        }
        let map = match schema {
            Value::Bool(b) => return Ok(Value::Bool(*b)),
            Value::Object(map) => map,
            _ => {
                return Err(Refusal::Skip(format!(
                    "{at}: a schema that is not an object"
                )))
            }
        };
        if let Some(reference) = map.get("$ref") {
            return self.reference(map, reference, at, depth);
        }
        let mut out = Map::new();
        let mut dropped = Vec::new();
        let mut read_only = Vec::new();
        let nullable = match map.get("nullable") {
            None | Some(Value::Bool(false)) => false,
            Some(Value::Bool(true)) => true,
            Some(_) => return Err(Refusal::Skip(format!("{at}: nullable is not a boolean"))),
        };
        for (keyword, value) in map {
            match keyword.as_str() {
                "nullable" => {}
                "type" => {
                    out.insert(keyword.clone(), checked_type(value, at)?);
                }
                "title" | "description" | "default" | "enum" | "const" => {
                    out.insert(keyword.clone(), value.clone());
                }
                "required" => {
                    if !value
                        .as_array()
                        .is_some_and(|r| r.iter().all(Value::is_string))
                    {
                        return Err(Refusal::Skip(format!(
                            "{at}: required is not a list of names"
                        )));
                    }
                    out.insert(keyword.clone(), value.clone());
                }
                "properties" => {
                    let properties = self.properties(value, at, depth, &mut read_only)?;
                    out.insert(keyword.clone(), properties);
                }
                "items" => {
                    if value.is_array() {
                        return Err(Refusal::Skip(format!(
                            "{at}: uses items as a list (tuple), which the import does not carry"
                        )));
                    }
                    let items = self.schema(value, &format!("{at}[]"), depth + 1)?;
                    out.insert(keyword.clone(), items);
                }
                "additionalProperties" => {
                    let extra = self.schema(value, &format!("{at}.*"), depth + 1)?;
                    out.insert(keyword.clone(), extra);
                }
                k if DOCUMENTING.contains(&k) => dropped.push(k.to_string()),
                k if IGNORED.contains(&k) || k.starts_with("x-") => {}
                other => {
                    return Err(Refusal::Skip(format!(
                        "{at}: uses {other}, which the import does not carry"
                    )))
                }
            }
        }
        if let Some(Value::Array(required)) = out.get_mut("required") {
            required.retain(|r| !r.as_str().is_some_and(|r| read_only.iter().any(|n| n == r)));
        }
        if nullable {
            make_nullable(&mut out);
        }
        if !dropped.is_empty() {
            self.warnings.push(format!(
                "{at}: dropped {} (documents the value; not checked)",
                dropped.join(", ")
            ));
        }
        Ok(Value::Object(out))
    }

    fn reference(
        &mut self,
        map: &Map<String, Value>,
        reference: &Value,
        at: &str,
        depth: usize,
    ) -> Result<Value, Refusal> {
        let Some(reference) = reference.as_str() else {
            return Err(Refusal::Skip(format!("{at}: $ref is not a string")));
        };
        // Beside a $ref, only annotations are read (3.0 ignores every sibling; 3.1 applies
        // them, and an applied constraint would be lost here).
        if let Some(other) = map
            .keys()
            .find(|k| !matches!(k.as_str(), "$ref" | "description" | "title" | "summary"))
        {
            return Err(Refusal::Skip(format!(
                "{at}: has {other} beside $ref, which the import does not carry"
            )));
        }
        if self.refs.iter().any(|r| r == reference) {
            return Err(Refusal::Skip(format!(
                "{at}: is recursive ({reference} refers to itself)"
            )));
        }
        let target = resolve(self.document, reference)?;
        self.refs.push(reference.to_string());
        let inlined = self.schema(target, at, depth + 1);
        self.refs.pop();
        let mut inlined = inlined?;
        if let (Some(description), Value::Object(out)) = (map.get("description"), &mut inlined) {
            out.insert("description".into(), description.clone());
        }
        Ok(inlined)
    }

    /// `properties`, without those a request never sends (`readOnly`), whose names go to
    /// `read_only` (to be taken out of `required`).
    fn properties(
        &mut self,
        value: &Value,
        at: &str,
        depth: usize,
        read_only: &mut Vec<String>,
    ) -> Result<Value, Refusal> {
        let Some(properties) = value.as_object() else {
            return Err(Refusal::Skip(format!("{at}: properties is not an object")));
        };
        let mut kept = Map::new();
        for (name, property) in properties {
            let place = format!("{at}.{name}");
            if self.is_read_only(property)? {
                self.warnings
                    .push(format!("{place}: readOnly, so never sent; left out"));
                read_only.push(name.clone());
                continue;
            }
            kept.insert(name.clone(), self.schema(property, &place, depth + 1)?);
        }
        Ok(Value::Object(kept))
    }

    fn is_read_only(&self, property: &Value) -> Result<bool, Refusal> {
        let mut node = property;
        // Follow a chain of references, bounded by the document's size.
        for _ in 0..super::SCHEMA_DEPTH_MAX {
            if node.get("readOnly") == Some(&Value::Bool(true)) {
                return Ok(true);
            }
            match node.get("$ref").and_then(Value::as_str) {
                Some(reference) => node = resolve(self.document, reference)?,
                None => return Ok(false),
            }
        }
        Ok(false)
    }
}

fn checked_type(value: &Value, at: &str) -> Result<Value, Refusal> {
    let ok = |t: &Value| t.as_str().is_some_and(|t| TYPES.contains(&t));
    let valid = match value {
        Value::String(_) => ok(value),
        Value::Array(types) => !types.is_empty() && types.iter().all(ok),
        _ => false,
    };
    if valid {
        Ok(value.clone())
    } else {
        Err(Refusal::Skip(format!(
            "{at}: type {value} is not a JSON Schema type"
        )))
    }
}

/// 3.0's `nullable: true`: `null` joins the types (and the allowed values).
fn make_nullable(out: &mut Map<String, Value>) {
    match out.get_mut("type") {
        Some(Value::String(t)) if t != "null" => {
            let t = t.clone();
            out.insert("type".into(), json!([t, "null"]));
        }
        Some(Value::Array(types)) if !types.contains(&json!("null")) => types.push(json!("null")),
        _ => {}
    }
    if let Some(Value::Array(values)) = out.get_mut("enum") {
        if !values.contains(&Value::Null) {
            values.push(Value::Null);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Value {
        json!({"components": {"schemas": {
            "Pet": {"type": "object", "required": ["id", "name"], "properties": {
                "id": {"type": "integer", "format": "int64", "readOnly": true},
                "name": {"type": "string", "maxLength": 20, "example": "Rex"},
                "tag": {"type": "string", "nullable": true}}},
            "Node": {"type": "object", "properties": {"next": {"$ref": "#/components/schemas/Node"}}},
            "Either": {"oneOf": [{"type": "string"}, {"type": "integer"}]}
        }}})
    }

    fn ok(schema: Value) -> Converted {
        convert(&doc(), &schema, "body").unwrap()
    }

    #[test]
    fn references_are_inlined_documenting_keywords_dropped_with_a_warning() {
        let c = ok(json!({"$ref": "#/components/schemas/Pet"}));
        assert_eq!(
            c.schema,
            json!({"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string"},
                "tag": {"type": ["string", "null"]}}})
        );
        assert_eq!(
            c.warnings,
            vec![
                "body.id: readOnly, so never sent; left out".to_string(),
                "body.name: dropped maxLength (documents the value; not checked)".to_string(),
            ]
        );
    }

    #[test]
    fn nullable_joins_null_to_the_type_and_the_values() {
        let c = ok(json!({"type": "string", "enum": ["a"], "nullable": true}));
        assert_eq!(
            c.schema,
            json!({"type": ["string", "null"], "enum": ["a", null]})
        );
        assert!(c.warnings.is_empty());
    }

    #[test]
    fn unsupported_keywords_recursion_and_foreign_references_skip() {
        let skip = |schema: Value| match convert(&doc(), &schema, "body") {
            Err(Refusal::Skip(reason)) => reason,
            other => panic!("{schema}: {other:?}"),
        };
        assert!(skip(json!({"$ref": "#/components/schemas/Either"})).contains("uses oneOf"));
        assert!(skip(json!({"type": "object", "discriminator": {}})).contains("discriminator"));
        assert!(skip(json!({"$ref": "#/components/schemas/Node"})).contains("recursive"));
        assert!(skip(json!({"$ref": "other.yaml#/Pet"})).contains("outside this document"));
        assert!(skip(json!({"$ref": "#/components/schemas/Nope"})).contains("does not have"));
        assert!(skip(json!({"type": "file"})).contains("not a JSON Schema type"));
        assert!(skip(json!({"items": [{"type": "string"}]})).contains("tuple"));
        assert!(
            skip(json!({"$ref": "#/components/schemas/Pet", "minimum": 1})).contains("beside $ref")
        );
    }

    #[test]
    fn depth_and_size_are_bounds_not_skips() {
        let mut deep = json!({"type": "string"});
        for _ in 0..super::super::SCHEMA_DEPTH_MAX {
            deep = json!({"type": "array", "items": deep});
        }
        assert!(matches!(
            convert(&doc(), &deep, "body"),
            Err(Refusal::Bound(_))
        ));
        // Each level refers to the one below twice: 2^20 values once inlined.
        let mut schemas = Map::new();
        schemas.insert("L0".into(), json!({"type": "string"}));
        for i in 1..=20 {
            let below = json!({"$ref": format!("#/components/schemas/L{}", i - 1)});
            schemas.insert(
                format!("L{i}"),
                json!({"properties": {"a": below, "b": below}}),
            );
        }
        let wide = json!({"components": {"schemas": schemas}});
        let top = json!({"$ref": "#/components/schemas/L20"});
        assert!(matches!(
            convert(&wide, &top, "body"),
            Err(Refusal::Bound(_))
        ));
    }
}
