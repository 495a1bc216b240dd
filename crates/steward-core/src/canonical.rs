//! Canonical JSON and fingerprints. Two requests "are the same" when their canonical forms are
//! byte-equal: object keys sorted, no insignificant whitespace, numbers as serde_json prints them.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Serializes `value` canonically (sorted object keys, compact).
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    // serde_json writes UTF-8, and so does everything else written here.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_scalar(key, out);
                out.push(b':');
                write_canonical(&map[key], out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

/// A key or a scalar as serde_json prints it (what `Value`'s `Display` writes), without the
/// `String` that `to_string` makes for each.
fn write_scalar<T: serde::Serialize + ?Sized>(scalar: &T, out: &mut Vec<u8>) {
    serde_json::to_writer(out, scalar).expect("a string or a JSON scalar serializes into memory");
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

    /// Written into one buffer, each key and scalar is what `Value`'s `Display` prints for it
    /// (how each was written before, one `String` apiece).
    #[test]
    fn keys_and_scalars_are_written_as_display_prints_them() {
        let value = json!({
            "é\u{1}\"\\/\n": [1.5, -0.0, 1e300, 18446744073709551615u64, -9223372036854775808i64],
            "😀\u{7f}": {"z": true, "a": null, "": "\u{2028}\t"},
        });
        fn reference(value: &Value) -> String {
            match value {
                Value::Object(map) => {
                    let mut keys: Vec<&String> = map.keys().collect();
                    keys.sort();
                    let members: Vec<String> = keys
                        .into_iter()
                        .map(|k| format!("{}:{}", Value::String(k.clone()), reference(&map[k])))
                        .collect();
                    format!("{{{}}}", members.join(","))
                }
                Value::Array(items) => {
                    let items: Vec<String> = items.iter().map(reference).collect();
                    format!("[{}]", items.join(","))
                }
                scalar => scalar.to_string(),
            }
        }
        assert_eq!(canonical_json(&value), reference(&value));
    }
}
