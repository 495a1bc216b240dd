//! Canonical JSON and fingerprints. Two requests "are the same" when their canonical forms are
//! byte-equal: object keys sorted, no insignificant whitespace, numbers as serde_json prints them.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Serializes `value` canonically (sorted object keys, compact).
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// A stable fingerprint: `sha256:` and the hex digest of the canonical form.
pub fn fingerprint(value: &Value) -> String {
    fingerprint_str(&canonical_json(value))
}

/// The fingerprint of an already canonical string.
pub fn fingerprint_str(canonical: &str) -> String {
    format!(
        "sha256:{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_change_the_fingerprint() {
        let a = json!({"b": 1, "a": {"y": [1, 2], "x": null}});
        let b = json!({"a": {"x": null, "y": [1, 2]}, "b": 1});
        assert_eq!(canonical_json(&a), r#"{"a":{"x":null,"y":[1,2]},"b":1}"#);
        assert_eq!(fingerprint(&a), fingerprint(&b));
    }

    #[test]
    fn different_values_differ() {
        assert_ne!(
            fingerprint(&json!({"amount": 1})),
            fingerprint(&json!({"amount": 2}))
        );
        assert_ne!(fingerprint(&json!([1, 2])), fingerprint(&json!([2, 1])));
    }
}
