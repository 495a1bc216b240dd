//! Bounds on an action's `inputSchema`, checked when the action is saved and again before each
//! validation, so a schema stored by an older build (or written straight into the database)
//! cannot make a validation run without end.
//!
//! What is refused, and why:
//! - a `$ref` that is not a JSON pointer into the same document (`#` or `#/...`): nothing is
//!   fetched, and anchors or other documents would need a resolver to reason about;
//! - `$dynamicRef` and `$recursiveRef`: their target depends on the path taken at validation;
//! - a reference that points at nothing;
//! - a cycle of subschemas that apply to the *same* value (`$ref`, `allOf`, `anyOf`, `oneOf`,
//!   `not`, `if`/`then`/`else`, `dependentSchemas`): validating it never ends. A cycle that
//!   passes through `properties`, `items` and the other keywords that step into a child value is
//!   fine (a recursive tree schema): the value is finite, so the recursion is too;
//! - more than [`SCHEMA_IN_PLACE_CHECKS_MAX`] subschemas applying to one value (counting every
//!   path, so `anyOf` of `anyOf`s sharing references cannot multiply to millions);
//! - more than [`SCHEMA_NODES_MAX`] JSON values or [`SCHEMA_DEPTH_MAX`] levels of nesting.

use serde_json::Value;
use std::collections::HashMap;

/// The most JSON values (objects, arrays, scalars) a schema may hold: a generous input form,
/// not a schema registry.
pub const SCHEMA_NODES_MAX: usize = 10_000;
/// The deepest a schema document may nest, in levels.
pub const SCHEMA_DEPTH_MAX: usize = 64;
/// How many subschemas may apply in place to one value of the input, counting every path
/// through references and combinators: validation work per input value is bounded by this.
pub const SCHEMA_IN_PLACE_CHECKS_MAX: usize = 256;

/// Keywords whose subschemas apply to the same value as the schema holding them.
const IN_PLACE_SINGLE: [&str; 4] = ["not", "if", "then", "else"];
const IN_PLACE_ARRAYS: [&str; 3] = ["allOf", "anyOf", "oneOf"];
const IN_PLACE_MAPS: [&str; 1] = ["dependentSchemas"];
const UNSUPPORTED_REFS: [&str; 2] = ["$dynamicRef", "$recursiveRef"];

/// Checks `schema`; the error says what is wrong, for a message naming `inputSchema`.
pub fn check_schema_bounds(schema: &Value) -> Result<(), String> {
    check_size(schema)?;
    let mut walk = InPlace {
        root: schema,
        counts: HashMap::new(),
    };
    // Every subschema is a potential starting point for a value of the input.
    for location in locations(schema) {
        let count = walk.count(&location, &mut Vec::new())?;
        if count > SCHEMA_IN_PLACE_CHECKS_MAX {
            return Err(format!(
                "applies more than {SCHEMA_IN_PLACE_CHECKS_MAX} subschemas to one value \
                 (at {}); simplify its references and combinators",
                display(&location)
            ));
        }
    }
    Ok(())
}

fn display(pointer: &str) -> String {
    if pointer.is_empty() {
        "#".to_string()
    } else {
        format!("#{pointer}")
    }
}

/// Size and depth, without recursion.
fn check_size(schema: &Value) -> Result<(), String> {
    let mut nodes = 0usize;
    let mut stack = vec![(schema, 1usize)];
    while let Some((value, depth)) = stack.pop() {
        nodes += 1;
        if nodes > SCHEMA_NODES_MAX {
            return Err(format!("must hold at most {SCHEMA_NODES_MAX} JSON values"));
        }
        if depth > SCHEMA_DEPTH_MAX {
            return Err(format!("must nest at most {SCHEMA_DEPTH_MAX} levels deep"));
        }
        match value {
            Value::Object(map) => stack.extend(map.values().map(|v| (v, depth + 1))),
            Value::Array(items) => stack.extend(items.iter().map(|v| (v, depth + 1))),
            _ => {}
        }
    }
    Ok(())
}

/// Keywords whose value is one subschema, applying to a child value (or, for the in-place
/// ones, to the same value).
const ONE_SCHEMA: [&str; 12] = [
    "not",
    "if",
    "then",
    "else",
    "additionalProperties",
    "additionalItems",
    "items",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
];
/// Keywords whose value is an array of subschemas.
const SCHEMA_ARRAYS: [&str; 5] = ["allOf", "anyOf", "oneOf", "prefixItems", "items"];
/// Keywords whose value maps names to subschemas.
const SCHEMA_MAPS: [&str; 6] = [
    "properties",
    "patternProperties",
    "dependentSchemas",
    "$defs",
    "definitions",
    "dependencies",
];

/// The JSON pointers of every subschema, found by walking schema keywords from the root (data
/// under `enum`, `const`, `default` or `examples` is not a schema and is not walked).
fn locations(schema: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![(schema, String::new())];
    while let Some((value, pointer)) = stack.pop() {
        let Value::Object(map) = value else { continue };
        found.push(pointer.clone());
        for keyword in ONE_SCHEMA {
            if let Some(child @ Value::Object(_)) = map.get(keyword) {
                stack.push((child, format!("{pointer}/{keyword}")));
            }
        }
        for keyword in SCHEMA_ARRAYS {
            if let Some(Value::Array(items)) = map.get(keyword) {
                for (i, child) in items.iter().enumerate() {
                    stack.push((child, format!("{pointer}/{keyword}/{i}")));
                }
            }
        }
        for keyword in SCHEMA_MAPS {
            if let Some(Value::Object(entries)) = map.get(keyword) {
                for (name, child) in entries {
                    stack.push((child, format!("{pointer}/{keyword}/{}", escape(name))));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Counts the subschemas applying in place from a location, refusing cycles.
struct InPlace<'a> {
    root: &'a Value,
    /// Memoised counts per location (the in-place graph is a DAG once cycles are refused).
    counts: HashMap<String, usize>,
}

impl InPlace<'_> {
    /// The number of subschema applications a value meets starting at `location`, itself
    /// included. `path` holds the locations being counted, to find a cycle.
    fn count(&mut self, location: &str, path: &mut Vec<String>) -> Result<usize, String> {
        if let Some(known) = self.counts.get(location) {
            return Ok(*known);
        }
        if path.iter().any(|p| p == location) {
            return Err(format!(
                "has a reference cycle that never reaches a child value ({} -> {})",
                path.iter()
                    .map(|p| display(p))
                    .collect::<Vec<_>>()
                    .join(" -> "),
                display(location)
            ));
        }
        // Recursion depth is bounded: every level is a distinct location on `path`, and a
        // sum past the cap stops the walk, so at most `SCHEMA_IN_PLACE_CHECKS_MAX` levels.
        if path.len() > SCHEMA_IN_PLACE_CHECKS_MAX {
            return Ok(SCHEMA_IN_PLACE_CHECKS_MAX + 1);
        }
        let Some(node) = self.root.pointer(location) else {
            return Err(format!(
                "refers to {}, which does not exist",
                display(location)
            ));
        };
        let targets = in_place_targets(node, location)?;
        path.push(location.to_string());
        let mut total = 1usize;
        for target in targets {
            total = total.saturating_add(self.count(&target, path)?);
            if total > SCHEMA_IN_PLACE_CHECKS_MAX {
                break;
            }
        }
        path.pop();
        self.counts.insert(location.to_string(), total);
        Ok(total)
    }
}

/// The locations whose schemas apply to the same value as the schema at `location`.
fn in_place_targets(node: &Value, location: &str) -> Result<Vec<String>, String> {
    let Value::Object(map) = node else {
        return Ok(Vec::new());
    };
    if let Some(keyword) = UNSUPPORTED_REFS.iter().find(|k| map.contains_key(**k)) {
        return Err(format!(
            "uses {keyword} at {}, which is not supported; use $ref",
            display(location)
        ));
    }
    let mut targets = Vec::new();
    if let Some(reference) = map.get("$ref") {
        targets.push(local_pointer(reference, location)?);
    }
    for keyword in IN_PLACE_SINGLE {
        if map.get(keyword).is_some_and(Value::is_object) {
            targets.push(format!("{location}/{keyword}"));
        }
    }
    for keyword in IN_PLACE_ARRAYS {
        if let Some(Value::Array(items)) = map.get(keyword) {
            targets.extend((0..items.len()).map(|i| format!("{location}/{keyword}/{i}")));
        }
    }
    for keyword in IN_PLACE_MAPS {
        if let Some(Value::Object(entries)) = map.get(keyword) {
            targets.extend(
                entries
                    .keys()
                    .map(|k| format!("{location}/{keyword}/{}", escape(k))),
            );
        }
    }
    Ok(targets)
}

/// A `$ref` as a JSON pointer into the document: `#` or `#/...`, percent-decoding refused.
fn local_pointer(reference: &Value, location: &str) -> Result<String, String> {
    let Some(text) = reference.as_str() else {
        return Err(format!(
            "has a $ref at {} that is not a string",
            display(location)
        ));
    };
    match text.strip_prefix('#') {
        Some(pointer)
            if pointer.is_empty() || (pointer.starts_with('/') && !pointer.contains('%')) =>
        {
            Ok(pointer.to_string())
        }
        _ => Err(format!(
            "has a $ref to {text:?} at {}; only references inside the schema (\"#/...\") are \
             supported",
            display(location)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The probe's repro: two definitions referring to each other. Each invoke spun at 100% CPU
    /// and grew the server past 17 GB; saving it is refused now.
    #[test]
    fn a_ref_cycle_is_refused() {
        let schema = json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                            "$ref": "#/$defs/a"});
        let err = check_schema_bounds(&schema).unwrap_err();
        assert!(err.contains("cycle"), "{err}");
        let self_ref = json!({"$ref": "#"});
        assert!(check_schema_bounds(&self_ref)
            .unwrap_err()
            .contains("cycle"));
        let through_combinators = json!({"$defs": {"a": {"anyOf": [{"not": {"$ref": "#/$defs/a"}}]}},
                                         "allOf": [{"$ref": "#/$defs/a"}]});
        assert!(check_schema_bounds(&through_combinators)
            .unwrap_err()
            .contains("cycle"));
    }

    #[test]
    fn a_recursive_tree_is_fine() {
        let tree = json!({"$defs": {"node": {"type": "object", "properties": {
            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
            "$ref": "#/$defs/node"});
        assert_eq!(check_schema_bounds(&tree), Ok(()));
        let ordinary = json!({"type": "object", "required": ["amount"],
            "properties": {"amount": {"type": "integer", "minimum": 1},
                           "reason": {"enum": ["duplicate", "fraudulent"]}}});
        assert_eq!(check_schema_bounds(&ordinary), Ok(()));
    }

    #[test]
    fn unresolvable_and_remote_references_are_refused() {
        for schema in [
            json!({"$ref": "#/$defs/missing"}),
            json!({"$ref": "https://example.com/schema.json"}),
            json!({"$ref": "other.json#/a"}),
            json!({"$ref": "#anchor"}),
            json!({"$ref": 5}),
            json!({"$dynamicRef": "#meta"}),
            json!({"properties": {"a": {"$ref": "#/properties/b"}}}),
        ] {
            assert!(check_schema_bounds(&schema).is_err(), "{schema}");
        }
    }

    /// References shared by nested combinators multiply: 2^20 paths from 20 levels.
    #[test]
    fn fan_out_through_shared_references_is_bounded() {
        let mut defs = serde_json::Map::new();
        for level in 0..20 {
            defs.insert(
                format!("l{level}"),
                json!({"anyOf": [{"$ref": format!("#/$defs/l{}", level + 1)},
                                  {"$ref": format!("#/$defs/l{}", level + 1)}]}),
            );
        }
        defs.insert("l20".into(), json!({"type": "integer"}));
        let schema = json!({"$defs": defs, "$ref": "#/$defs/l0"});
        assert!(check_schema_bounds(&schema)
            .unwrap_err()
            .contains("more than"));
    }

    #[test]
    fn size_and_depth_are_bounded() {
        let mut deep = json!({"type": "string"});
        for _ in 0..SCHEMA_DEPTH_MAX {
            deep = json!({"properties": {"a": deep}});
        }
        assert!(check_schema_bounds(&deep).unwrap_err().contains("levels"));
        let wide = json!({"enum": (0..SCHEMA_NODES_MAX).collect::<Vec<_>>()});
        assert!(check_schema_bounds(&wide)
            .unwrap_err()
            .contains("JSON values"));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Random schemas built from references, combinators and child keywords: the check
        /// answers (it never panics or loops), and whatever it accepts has no in-place cycle
        /// (checked by a brute-force walk bounded by the cap).
        #[test]
        fn random_schemas_are_accepted_or_refused(
            edges in proptest::collection::vec((0usize..6, 0usize..6, 0usize..4), 0..14)
        ) {
            let mut defs = serde_json::Map::new();
            for d in 0..6 {
                defs.insert(format!("d{d}"), json!({}));
            }
            for (from, to, how) in &edges {
                let reference = json!({"$ref": format!("#/$defs/d{to}")});
                let Some(Value::Object(node)) = defs.get_mut(&format!("d{from}")) else {
                    unreachable!("every definition is an object")
                };
                match how {
                    0 => { node.insert("allOf".into(), json!([reference])); }
                    1 => { node.insert("not".into(), reference); }
                    2 => { node.insert("properties".into(), json!({"x": reference})); }
                    _ => { node.insert("$ref".into(), reference["$ref"].clone()); }
                }
            }
            let schema = json!({"$defs": defs, "$ref": "#/$defs/d0"});
            if check_schema_bounds(&schema).is_ok() {
                // No in-place cycle: walking only in-place edges from the root ends.
                let mut frontier = vec![(String::new(), 0usize)];
                while let Some((location, steps)) = frontier.pop() {
                    proptest::prop_assert!(steps <= SCHEMA_IN_PLACE_CHECKS_MAX, "in-place loop");
                    let node = schema.pointer(&location).expect("checked");
                    for target in in_place_targets(node, &location).expect("checked") {
                        frontier.push((target, steps + 1));
                    }
                }
            }
        }
    }
}
