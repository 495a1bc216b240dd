//! Large fields left out of lists. Lists and trees (invocations, a run's spans) are read many at
//! a time, so a field that may be large (an invocation's input or response body, a span's
//! input or output) is read into memory only when one record is read alone. In a list, a field
//! whose JSON text is longer than [`LISTED_FIELD_BYTES_MAX`] is replaced, by the backend while
//! it reads the row, with an elision marker `{"$elided": <bytes>}`: the size of what was left
//! out. The record itself is stored whole; the single-record read returns it whole.
//!
//! Both backends count the same bytes: the length of the field's JSON text as stored (compact,
//! as `serde_json` writes it).

use serde_json::{json, Map, Value};

/// The longest field a list or tree carries, in bytes of its JSON text. Sixteen KiB keeps a
/// page of 200 records with a few such fields each within a few MiB, while a typical input,
/// output or response body (well under a kilobyte) is listed as it is.
pub const LISTED_FIELD_BYTES_MAX: usize = 16 * 1024;

/// The key of an elision marker: `{"$elided": <bytes>}`.
pub const ELIDED_KEY: &str = "$elided";

/// The marker that stands in for a field of `bytes` bytes.
pub fn marker(bytes: usize) -> Value {
    json!({ ELIDED_KEY: bytes })
}

/// The size of the field a marker stands in for, if `value` is one.
pub fn elided_bytes(value: &Value) -> Option<u64> {
    let map = value.as_object()?;
    if map.len() != 1 {
        return None;
    }
    map.get(ELIDED_KEY)?.as_u64()
}

/// A JSON document (a span) with each top-level field longer than [`LISTED_FIELD_BYTES_MAX`]
/// replaced by its marker. Read from its stored text; the whole document is parsed once and
/// the large fields dropped at once.
pub fn elide_document(text: &str) -> Result<Value, serde_json::Error> {
    elide_fields(text, None)
}

/// The fields of a run's body a list may elide: those that hold the caller's documents. The
/// others are short, typed values (tags, version, counts) that a marker would not fit.
pub const RUN_ELIDED_FIELDS: [&str; 4] = ["input", "output", "error", "metadata"];

/// [`elide_document`] for the top-level fields `only` names (all of them when `None`).
pub fn elide_fields(text: &str, only: Option<&[&str]>) -> Result<Value, serde_json::Error> {
    if text.len() <= LISTED_FIELD_BYTES_MAX {
        return serde_json::from_str(text);
    }
    let map: Map<String, Value> = serde_json::from_str(text)?;
    Ok(Value::Object(
        map.into_iter()
            .map(|(k, v)| {
                let named = only.is_none_or(|names| names.contains(&k.as_str()));
                let bytes = if named { json_len(&v) } else { 0 };
                let v = if bytes > LISTED_FIELD_BYTES_MAX {
                    marker(bytes)
                } else {
                    v
                };
                (k, v)
            })
            .collect(),
    ))
}

/// `columns` (a select list) with its ` input,`, ` response_body,` and ` edited_input,` read as their elision
/// marker (`{"$elided": <bytes>}`) when longer than [`LISTED_FIELD_BYTES_MAX`] bytes, so the
/// large text never leaves the database. `bytes` is the backend's SQL for a column's length in
/// bytes (`octet_length(c)`, `length(CAST(c AS BLOB))`).
pub(crate) fn listed_columns(columns: &str, bytes: fn(&str) -> String) -> String {
    let elided = |column: &str| {
        let bytes = bytes(column);
        format!(
            "CASE WHEN {bytes} > {LISTED_FIELD_BYTES_MAX} THEN '{{\"{ELIDED_KEY}\":' || {bytes} || '}}' ELSE {column} END"
        )
    };
    columns
        .replace(" input,", &format!(" {},", elided("input")))
        .replace(" response_body,", &format!(" {},", elided("response_body")))
        .replace(" edited_input,", &format!(" {},", elided("edited_input")))
}

/// The length of a value's compact JSON text, in bytes, without writing it out.
pub fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` to an infallible writer cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// One span of a run without its content: what a run's span tree is built from.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanOutline {
    /// The span's place in the run's ingest order: a run's spans page by it.
    pub seq: i64,
    pub span_id: String,
    pub parent_span_id: Option<String>,
    pub name: Option<String>,
    pub kind: Option<String>,
    pub status: Option<String>,
    /// The size of the stored span, in bytes of its JSON text.
    pub bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_columns_elide_only_the_input_and_the_response_body() {
        let sql = listed_columns("id, input, state, response_body, error", |c| {
            format!("len({c})")
        });
        assert_eq!(sql.matches("CASE WHEN").count(), 2, "{sql}");
        assert!(
            sql.starts_with("id, CASE WHEN len(input) > 16384 THEN '{\"$elided\":'"),
            "{sql}"
        );
        assert!(sql.contains("ELSE response_body END, error"), "{sql}");
        assert!(sql.contains("ELSE input END, state,"), "{sql}");
    }

    #[test]
    fn only_fields_over_the_bound_are_replaced_with_their_size() {
        let big = "x".repeat(LISTED_FIELD_BYTES_MAX);
        let doc = json!({"name": "n", "input": big, "output": {"ok": true}});
        let text = doc.to_string();
        let elided = elide_document(&text).unwrap();
        assert_eq!(elided["name"], "n");
        assert_eq!(elided["output"], json!({"ok": true}));
        assert_eq!(
            elided_bytes(&elided["input"]),
            Some((LISTED_FIELD_BYTES_MAX + 2) as u64),
            "the quotes count: the size is that of the JSON text"
        );
        let small = json!({"input": "x".repeat(100)}).to_string();
        assert_eq!(
            elide_document(&small).unwrap(),
            serde_json::from_str::<Value>(&small).unwrap()
        );
    }

    #[test]
    fn only_the_named_fields_are_elided() {
        let big = "x".repeat(LISTED_FIELD_BYTES_MAX);
        let text = json!({"input": big, "agentVersion": big}).to_string();
        let elided = elide_fields(&text, Some(&RUN_ELIDED_FIELDS)).unwrap();
        assert!(elided_bytes(&elided["input"]).is_some());
        assert_eq!(
            elided["agentVersion"],
            json!(big),
            "a typed field is never a marker"
        );
    }

    #[test]
    fn a_marker_is_recognised_and_nothing_else_is() {
        assert_eq!(elided_bytes(&marker(20_000)), Some(20_000));
        assert_eq!(elided_bytes(&json!({"$elided": 1, "other": 2})), None);
        assert_eq!(elided_bytes(&json!("$elided")), None);
        assert_eq!(json_len(&json!({"a": [1, "b"]})), r#"{"a":[1,"b"]}"#.len());
    }
}
