//! What an approver's edit changed in an input: a list of changes addressed by JSON Pointer
//! (RFC 6901), in the operations of JSON Patch (RFC 6902), so the agent whose call ran with the
//! edited input can see exactly what differs from what it sent.
//!
//! Objects are compared member by member, arrays of the same length element by element; an
//! array whose length changed, or a value whose type changed, is one `replace` of the whole.
//! Applying the changes in order to the original gives the edit.

use serde_json::Value;

/// One change from the original input to the edited one.
#[derive(Debug, Clone, PartialEq)]
pub struct InputChange {
    /// `add`, `remove` or `replace`.
    pub op: &'static str,
    /// The JSON Pointer of the changed member (`/amount`, `/items/0/sku`; `` for the whole).
    pub path: String,
    /// The value before (`remove`, `replace`).
    pub before: Option<Value>,
    /// The value after (`add`, `replace`).
    pub after: Option<Value>,
}

/// The changes that turn `before` into `after` (empty when they are equal).
pub fn input_changes(before: &Value, after: &Value) -> Vec<InputChange> {
    let mut changes = Vec::new();
    walk(before, after, &mut String::new(), &mut changes);
    changes
}

fn walk(before: &Value, after: &Value, path: &mut String, out: &mut Vec<InputChange>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (key, old) in b {
                let len = push(path, key);
                match a.get(key) {
                    Some(new) => walk(old, new, path, out),
                    None => out.push(change("remove", path, Some(old), None)),
                }
                path.truncate(len);
            }
            for (key, new) in a.iter().filter(|(k, _)| !b.contains_key(*k)) {
                let len = push(path, key);
                out.push(change("add", path, None, Some(new)));
                path.truncate(len);
            }
        }
        (Value::Array(b), Value::Array(a)) if b.len() == a.len() => {
            for (i, (old, new)) in b.iter().zip(a).enumerate() {
                let len = push(path, &i.to_string());
                walk(old, new, path, out);
                path.truncate(len);
            }
        }
        _ if before == after => {}
        _ => out.push(change("replace", path, Some(before), Some(after))),
    }
}

/// Appends `/token` (escaped as RFC 6901 says) to `path`; returns the length to truncate back
/// to.
fn push(path: &mut String, token: &str) -> usize {
    let len = path.len();
    path.push('/');
    path.push_str(&token.replace('~', "~0").replace('/', "~1"));
    len
}

fn change(
    op: &'static str,
    path: &str,
    before: Option<&Value>,
    after: Option<&Value>,
) -> InputChange {
    InputChange {
        op,
        path: path.to_string(),
        before: before.cloned(),
        after: after.cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ops(before: Value, after: Value) -> Vec<(String, String)> {
        input_changes(&before, &after)
            .into_iter()
            .map(|c| (c.op.to_string(), c.path))
            .collect()
    }

    #[test]
    fn a_changed_amount_is_one_replace_at_its_pointer() {
        let changes = input_changes(
            &json!({"orderId": "o-1", "amount": 5000}),
            &json!({"orderId": "o-1", "amount": 500}),
        );
        assert_eq!(
            changes,
            vec![InputChange {
                op: "replace",
                path: "/amount".into(),
                before: Some(json!(5000)),
                after: Some(json!(500)),
            }]
        );
    }

    #[test]
    fn members_added_removed_and_nested_are_addressed_by_escaped_pointers() {
        assert_eq!(
            ops(
                json!({"a/b": 1, "m~n": {"x": [1, 2]}, "gone": true}),
                json!({"a/b": 2, "m~n": {"x": [1, 3]}, "new": null}),
            ),
            vec![
                ("replace".into(), "/a~1b".into()),
                ("remove".into(), "/gone".into()),
                ("replace".into(), "/m~0n/x/1".into()),
                ("add".into(), "/new".into()),
            ]
        );
        assert_eq!(
            ops(json!({"x": [1]}), json!({"x": [1, 2]})),
            vec![("replace".into(), "/x".into())]
        );
        assert_eq!(
            ops(json!(1), json!("1")),
            vec![("replace".into(), "".into())]
        );
        assert!(input_changes(&json!({"a": [1]}), &json!({"a": [1]})).is_empty());
    }
}
