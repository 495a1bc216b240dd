//! A policy's structured `conditions`: a small tree of comparisons, for callers who would rather
//! not write CEL. It is compiled to a CEL expression ([`compile`]) and then bounded and evaluated
//! exactly as a `condition` is, so the two cannot mean different things.
//!
//! ```text
//! node   := {"all": [node, ...]} | {"any": [node, ...]} | {"not": node}
//!         | {"field": path, "op": op, "value": json}
//! path   := input(.name)+ | amount | action | agentId
//! op     := eq | ne | gt | gte | lt | lte | in (value: a list) | contains (value: a string)
//!         | exists (no value; only for input paths)
//! ```

use crate::FieldError;
use serde_json::Value;

/// The deepest a conditions tree may nest (`all`/`any`/`not` levels).
pub const CONDITIONS_DEPTH_MAX: usize = 8;
/// The most nodes (groups and comparisons) one tree may hold.
pub const CONDITIONS_NODES_MAX: usize = 64;
/// The most values an `in` list may hold.
pub const CONDITIONS_LIST_MAX: usize = 64;
/// The most segments of a field path (`input.a.b` has three).
pub const CONDITIONS_PATH_SEGMENTS_MAX: usize = 8;
/// The longest string value a comparison may carry, in bytes.
pub const CONDITIONS_STRING_MAX: usize = 256;

const FIELD: &str = "conditions";

struct Compiler {
    nodes: usize,
}

fn err(at: &str, message: impl Into<String>) -> FieldError {
    FieldError::new(at.to_string(), message)
}

/// The CEL expression `conditions` means; the error names the node (`conditions.all[1].op`).
pub fn compile(conditions: &Value) -> Result<String, FieldError> {
    Compiler { nodes: 0 }.node(conditions, FIELD, 0)
}

impl Compiler {
    fn node(&mut self, node: &Value, at: &str, depth: usize) -> Result<String, FieldError> {
        self.nodes += 1;
        if self.nodes > CONDITIONS_NODES_MAX {
            return Err(err(
                FIELD,
                format!("holds at most {CONDITIONS_NODES_MAX} nodes"),
            ));
        }
        if depth > CONDITIONS_DEPTH_MAX {
            return Err(err(
                FIELD,
                format!("nests at most {CONDITIONS_DEPTH_MAX} levels"),
            ));
        }
        let Value::Object(map) = node else {
            return Err(err(
                at,
                "must be an object: {all}, {any}, {not} or {field, op, value}",
            ));
        };
        let group = |key: &str| map.len() == 1 && map.contains_key(key);
        if group("all") || group("any") {
            let (key, joiner) = if group("all") {
                ("all", " && ")
            } else {
                ("any", " || ")
            };
            let Some(Value::Array(items)) = map.get(key) else {
                return Err(err(&format!("{at}.{key}"), "must be a non-empty list"));
            };
            if items.is_empty() {
                return Err(err(&format!("{at}.{key}"), "must be a non-empty list"));
            }
            let parts = items
                .iter()
                .enumerate()
                .map(|(i, item)| self.node(item, &format!("{at}.{key}[{i}]"), depth + 1))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(format!("({})", parts.join(joiner)));
        }
        if group("not") {
            let inner = self.node(&map["not"], &format!("{at}.not"), depth + 1)?;
            return Ok(format!("!({inner})"));
        }
        comparison(map, at)
    }
}

fn comparison(map: &serde_json::Map<String, Value>, at: &str) -> Result<String, FieldError> {
    if let Some(extra) = map
        .keys()
        .find(|k| !["field", "op", "value"].contains(&k.as_str()))
    {
        return Err(err(&format!("{at}.{extra}"), "is not a known field"));
    }
    let path = map.get("field").and_then(Value::as_str).ok_or_else(|| {
        err(
            &format!("{at}.field"),
            "is required: input.<name>, amount, action or agentId",
        )
    })?;
    let path = field_path(path).map_err(|m| err(&format!("{at}.field"), m))?;
    let op = map
        .get("op")
        .and_then(Value::as_str)
        .ok_or_else(|| err(&format!("{at}.op"), "is required"))?;
    let value_at = format!("{at}.value");
    let value = map.get("value");
    let cel = |v: &Value| literal(v).map_err(|m| err(&value_at, m));
    Ok(match (op, value) {
        ("exists", None) if path.starts_with("input.") => format!("has({path})"),
        ("exists", None) => {
            return Err(err(
                &format!("{at}.field"),
                "exists applies to input paths only",
            ))
        }
        ("exists", Some(_)) => return Err(err(&value_at, "is not taken by exists")),
        (_, None) => return Err(err(&value_at, "is required")),
        ("eq", Some(v)) => format!("{path} == {}", cel(v)?),
        ("ne", Some(v)) => format!("{path} != {}", cel(v)?),
        ("gt" | "gte" | "lt" | "lte", Some(v)) => {
            if !v.is_number() {
                return Err(err(&value_at, "must be a number for an ordering"));
            }
            let sign = match op {
                "gt" => ">",
                "gte" => ">=",
                "lt" => "<",
                _ => "<=",
            };
            format!("{path} {sign} {}", cel(v)?)
        }
        ("in", Some(Value::Array(items))) => {
            if items.is_empty() || items.len() > CONDITIONS_LIST_MAX {
                return Err(err(
                    &value_at,
                    format!("must list 1 to {CONDITIONS_LIST_MAX} values"),
                ));
            }
            let items = items.iter().map(&cel).collect::<Result<Vec<_>, _>>()?;
            format!("{path} in [{}]", items.join(", "))
        }
        ("in", Some(_)) => return Err(err(&value_at, "must be a list for in")),
        ("contains", Some(v @ Value::String(_))) => format!("{path}.contains({})", cel(v)?),
        ("contains", Some(_)) => return Err(err(&value_at, "must be a string for contains")),
        _ => {
            return Err(err(
                &format!("{at}.op"),
                "must be eq, ne, gt, gte, lt, lte, in, contains or exists",
            ))
        }
    })
}

/// A field path, checked: `amount`, `action`, `agentId`, or `input` and 1 to 7 names.
fn field_path(path: &str) -> Result<String, String> {
    if ["amount", "action", "agentId"].contains(&path) {
        return Ok(path.to_string());
    }
    let segments: Vec<&str> = path.split('.').collect();
    let name = |s: &&str| {
        let mut chars = s.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    if segments.first() != Some(&"input")
        || segments.len() < 2
        || segments.len() > CONDITIONS_PATH_SEGMENTS_MAX
        || !segments.iter().all(name)
    {
        return Err(format!(
            "must be amount, action, agentId, or input followed by 1 to {} names (input.amount)",
            CONDITIONS_PATH_SEGMENTS_MAX - 1
        ));
    }
    Ok(path.to_string())
}

/// A JSON scalar as a CEL literal. Strings are written with JSON's escapes, which CEL reads the
/// same way (serde_json never writes `\/`).
fn literal(value: &Value) -> Result<String, String> {
    match value {
        Value::Null => Ok("null".into()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            if !f.is_finite() {
                return Err("must be a finite number".into());
            }
            Ok(format!("{f:?}"))
        }
        Value::Number(n) => Ok(n.to_string()),
        Value::String(s) if s.len() > CONDITIONS_STRING_MAX => {
            Err(format!("strings are at most {CONDITIONS_STRING_MAX} bytes"))
        }
        Value::String(s) => serde_json::to_string(s).map_err(|e| e.to_string()),
        Value::Array(_) | Value::Object(_) => {
            Err("must be a string, number, boolean or null".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::condition::{check, holds, ConditionInput};
    use serde_json::json;

    fn decide(conditions: Value, input: Value) -> bool {
        let cel = compile(&conditions).unwrap();
        check(&cel).unwrap();
        let request = ConditionInput {
            input: &input,
            action: Some("refund"),
            agent_id: Some("key_a"),
            amount: input.get("amount").and_then(Value::as_f64),
        };
        holds(&cel, &request).unwrap()
    }

    #[test]
    fn comparisons_compile_to_the_cel_they_mean() {
        let big = json!({"all": [{"field": "input.amount", "op": "gte", "value": 500},
                                 {"field": "input.currency", "op": "in", "value": ["usd", "eur"]}]});
        assert_eq!(
            compile(&big).unwrap(),
            r#"(input.amount >= 500 && input.currency in ["usd", "eur"])"#
        );
        assert!(decide(
            big.clone(),
            json!({"amount": 900, "currency": "usd"})
        ));
        assert!(!decide(
            big.clone(),
            json!({"amount": 100, "currency": "usd"})
        ));
        assert!(!decide(big, json!({"amount": 900, "currency": "gbp"})));
        let either = json!({"any": [{"field": "action", "op": "eq", "value": "other"},
                                    {"not": {"field": "input.note", "op": "contains", "value": "vip"}}]});
        assert!(decide(either.clone(), json!({"note": "regular"})));
        assert!(!decide(either, json!({"note": "a vip order"})));
        assert!(decide(
            json!({"field": "input.reason", "op": "exists"}),
            json!({"reason": "x"})
        ));
        assert!(!decide(
            json!({"field": "input.reason", "op": "exists"}),
            json!({})
        ));
    }

    #[test]
    fn a_quote_in_a_value_stays_a_value() {
        let tricky = json!({"field": "input.name", "op": "eq", "value": "a\" || true || \""});
        assert!(!decide(tricky.clone(), json!({"name": "b"})));
        assert!(decide(tricky, json!({"name": "a\" || true || \""})));
    }

    #[test]
    fn errors_name_the_node() {
        let cases = [
            (json!([]), "conditions"),
            (json!({"all": []}), "conditions.all"),
            (
                json!({"all": [{"field": "secret.x", "op": "eq", "value": 1}]}),
                "conditions.all[0].field",
            ),
            (
                json!({"field": "input.a", "op": "like", "value": 1}),
                "conditions.op",
            ),
            (
                json!({"field": "input.a", "op": "gt", "value": "x"}),
                "conditions.value",
            ),
            (json!({"field": "input.a", "op": "eq"}), "conditions.value"),
            (
                json!({"field": "input.a", "op": "eq", "value": {"x": 1}}),
                "conditions.value",
            ),
            (
                json!({"field": "input.a", "op": "in", "value": []}),
                "conditions.value",
            ),
            (
                json!({"field": "input.a", "op": "eq", "value": 1, "x": 2}),
                "conditions.x",
            ),
            (
                json!({"field": "input.a-b", "op": "eq", "value": 1}),
                "conditions.field",
            ),
            (
                json!({"field": "amount", "op": "exists"}),
                "conditions.field",
            ),
            (
                json!({"not": {"any": [{"field": "input.a", "op": "exists", "value": 1}]}}),
                "conditions.not.any[0].value",
            ),
        ];
        for (body, field) in cases {
            assert_eq!(compile(&body).unwrap_err().field, field, "{body}");
        }
    }

    #[test]
    fn trees_are_bounded() {
        let mut deep = json!({"field": "input.a", "op": "exists"});
        for _ in 0..=CONDITIONS_DEPTH_MAX {
            deep = json!({"not": deep});
        }
        assert!(compile(&deep).unwrap_err().message.contains("levels"));
        let wide: Vec<Value> = (0..CONDITIONS_NODES_MAX)
            .map(|_| json!({"field": "input.a", "op": "exists"}))
            .collect();
        assert!(compile(&json!({"all": wide}))
            .unwrap_err()
            .message
            .contains("nodes"));
        let long = "x".repeat(CONDITIONS_STRING_MAX + 1);
        assert_eq!(
            compile(&json!({"field": "input.a", "op": "eq", "value": long}))
                .unwrap_err()
                .field,
            "conditions.value"
        );
    }
}
