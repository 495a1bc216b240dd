//! Every `$ref` in a document, checked before anything follows one.
//!
//! `oas3` resolves a reference to a request body, parameter, response, header, example,
//! security scheme or path item by resolving whatever the target is, so a target that is itself
//! a reference back (`R -> R`, `A -> B -> A`) recursed until the stack overflowed and took the
//! process with it. This pass walks the document once, without recursion, and follows each
//! local reference through the chain of references it lands on: a chain that comes back to a
//! reference already on it is a cycle, refused with the cycle named; a chain longer than
//! [`REFERENCE_CHAIN_MAX`] is refused as past a bound. The document's nesting is bounded here too
//! ([`DOCUMENT_DEPTH_MAX`]), so no later walk can recurse deeper than that.
//!
//! A reference that does not resolve, or points outside the document, is not this pass's
//! business: the operation that uses it is skipped with that reason later, as before. Schemas
//! that refer to themselves through a property (`Node.next -> Node`) are not chains of bare
//! references; `schema.rs` skips the operations that use them.

use super::SPEC_FIELD;
use crate::error::{ApiError, ApiResult};
use serde_json::Value;

/// The most references one chain may pass through before landing on a value, in hops. Real
/// documents use one or two (an alias of a shared component); 32 is the schema depth bound.
pub(crate) const REFERENCE_CHAIN_MAX: usize = super::SCHEMA_DEPTH_MAX;
/// The deepest the document itself may nest, in levels: serde_json's own parsing bound, so a
/// YAML text is held to what a JSON one is.
pub(crate) const DOCUMENT_DEPTH_MAX: usize = 128;

/// Refuses a document with a reference cycle, a reference chain past [`REFERENCE_CHAIN_MAX`] or
/// nesting past [`DOCUMENT_DEPTH_MAX`]; the error names the place and the cycle.
pub(super) fn check(document: &Value) -> ApiResult<()> {
    let mut stack: Vec<(&Value, usize)> = vec![(document, 1)];
    while let Some((node, depth)) = stack.pop() {
        if depth > DOCUMENT_DEPTH_MAX {
            return Err(ApiError::validation(
                SPEC_FIELD,
                format!("nests deeper than {DOCUMENT_DEPTH_MAX} levels"),
            ));
        }
        match node {
            Value::Object(map) => {
                if let Some(Value::String(reference)) = map.get("$ref") {
                    follow(document, reference)?;
                }
                stack.extend(map.values().map(|v| (v, depth + 1)));
            }
            Value::Array(items) => stack.extend(items.iter().map(|v| (v, depth + 1))),
            _ => {}
        }
    }
    Ok(())
}

/// Follows `reference` through every bare reference it lands on.
fn follow(document: &Value, reference: &str) -> ApiResult<()> {
    let mut chain: Vec<&str> = vec![reference];
    let mut current = reference;
    loop {
        let Some(target) = local(document, current) else {
            return Ok(());
        };
        let Some(Value::String(next)) = target.get("$ref") else {
            return Ok(());
        };
        if let Some(start) = chain.iter().position(|r| *r == next.as_str()) {
            let mut cycle: Vec<&str> = chain[start..].to_vec();
            cycle.push(next);
            return Err(ApiError::validation(
                field_of(next),
                format!("is a reference cycle ({})", cycle.join(" -> ")),
            ));
        }
        if chain.len() >= REFERENCE_CHAIN_MAX {
            return Err(ApiError::validation(
                field_of(reference),
                format!("passes through more than {REFERENCE_CHAIN_MAX} references"),
            ));
        }
        chain.push(next);
        current = next;
    }
}

/// The value a local reference names, if the document has it.
fn local<'d>(document: &'d Value, reference: &str) -> Option<&'d Value> {
    document.pointer(reference.strip_prefix('#')?)
}

/// `#/components/requestBodies/R` as the field `spec.components.requestBodies.R`.
fn field_of(reference: &str) -> String {
    let pointer = reference.strip_prefix('#').unwrap_or(reference);
    let mut field = SPEC_FIELD.to_string();
    for token in pointer.split('/').filter(|t| !t.is_empty()) {
        field.push('.');
        field.push_str(&token.replace("~1", "/").replace("~0", "~"));
    }
    field
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn refused(document: &Value) -> (String, String) {
        let e = check(document).expect_err("accepted");
        let field = e.details.unwrap()["field"].as_str().unwrap().to_string();
        (field, e.message)
    }

    #[test]
    fn a_body_that_refers_to_itself_is_named() {
        let doc = json!({"components": {"requestBodies": {"R": {"$ref": "#/components/requestBodies/R"}}},
            "paths": {"/a": {"post": {"requestBody": {"$ref": "#/components/requestBodies/R"}}}}});
        let (field, message) = refused(&doc);
        assert_eq!(field, "spec.components.requestBodies.R");
        assert!(message.contains("#/components/requestBodies/R -> #/components/requestBodies/R"));
    }

    #[test]
    fn a_two_step_cycle_names_both() {
        let doc = json!({"components": {"parameters": {
            "A": {"$ref": "#/components/parameters/B"},
            "B": {"$ref": "#/components/parameters/A"}}}});
        let (_, message) = refused(&doc);
        assert!(message.contains("#/components/parameters/A"), "{message}");
        assert!(message.contains("#/components/parameters/B"), "{message}");
    }

    #[test]
    fn chains_unresolved_and_foreign_references_and_recursive_schemas_pass() {
        let doc = json!({"components": {"schemas": {
            "A": {"$ref": "#/components/schemas/B"},
            "B": {"$ref": "#/components/schemas/C"},
            "C": {"type": "object", "properties": {"next": {"$ref": "#/components/schemas/C"}}},
            "D": {"$ref": "#/components/schemas/Nope"},
            "E": {"$ref": "other.yaml#/E"},
            "F": {"$ref": 7}}}});
        check(&doc).unwrap();
    }

    #[test]
    fn a_long_chain_and_a_deep_document_are_bounds() {
        let mut schemas = serde_json::Map::new();
        for i in 0..=REFERENCE_CHAIN_MAX {
            schemas.insert(
                format!("S{i}"),
                json!({"$ref": format!("#/components/schemas/S{}", i + 1)}),
            );
        }
        schemas.insert(
            format!("S{}", REFERENCE_CHAIN_MAX + 1),
            json!({"type": "string"}),
        );
        let (field, message) = refused(&json!({"components": {"schemas": schemas}}));
        assert!(field.starts_with("spec.components.schemas.S"), "{field}");
        assert!(message.contains("more than"), "{message}");

        let mut deep = json!(1);
        for _ in 0..DOCUMENT_DEPTH_MAX {
            deep = json!([deep]);
        }
        assert_eq!(refused(&deep).0, "spec");
    }

    /// Where each kind of component is referred to from an operation or the paths.
    const KINDS: [&str; 8] = [
        "schemas",
        "requestBodies",
        "parameters",
        "responses",
        "headers",
        "examples",
        "securitySchemes",
        "pathItems",
    ];

    proptest! {
        /// Any kind, any cycle length, any entry point: refused naming a member of the cycle.
        #[test]
        fn every_reference_cycle_is_refused(kind in 0..KINDS.len(), length in 1usize..6, entry in 0usize..6) {
            let kind = KINDS[kind];
            let name = |i: usize| format!("#/components/{kind}/C{}", i % length);
            let mut components = serde_json::Map::new();
            for i in 0..length {
                components.insert(format!("C{i}"), json!({"$ref": name(i + 1)}));
            }
            let doc = json!({"openapi": "3.1.0",
                "components": {kind: components},
                "paths": {"/a": {"post": {"x-use": {"$ref": name(entry)}}}}});
            let (field, message) = refused(&doc);
            prop_assert!(field.starts_with(&format!("spec.components.{kind}.C")), "{}", field);
            prop_assert!(message.contains("reference cycle"), "{}", message);
        }
    }
}
