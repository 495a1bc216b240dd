//! A policy's `condition`: a CEL expression over the request, checked when the policy is saved and
//! evaluated for each request. An expression that cannot be evaluated for a request (a missing
//! field, a type mismatch, a result that is not a boolean) decides nothing by itself: the caller
//! treats it as "approval is required".

use cel::objects::{Key, Map as CelMap};
use cel::{Context, Program, Value as Cel};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// The longest condition accepted, in bytes: a rule, not a program.
pub const CONDITION_LEN_MAX: usize = 4_096;

/// The variables a condition may read.
pub const CONDITION_VARIABLES: [&str; 4] = ["input", "action", "agentId", "amount"];

/// What a condition reads for one request.
#[derive(Debug, Clone, Copy)]
pub struct ConditionInput<'a> {
    /// The invocation's input (or a custom request's payload).
    pub input: &'a Value,
    pub action: Option<&'a str>,
    pub agent_id: Option<&'a str>,
    pub amount: Option<f64>,
}

/// Checks a condition at save time: it parses, and it reads only known variables.
pub fn check(source: &str) -> Result<(), String> {
    if source.trim().is_empty() {
        return Err("must not be empty".into());
    }
    if source.len() > CONDITION_LEN_MAX {
        return Err(format!("must be at most {CONDITION_LEN_MAX} bytes"));
    }
    let program = compile(source)?;
    let references = program.references();
    let mut unknown: Vec<&str> = references
        .variables()
        .into_iter()
        .filter(|v| !CONDITION_VARIABLES.contains(v))
        .collect();
    unknown.sort_unstable();
    match unknown.first() {
        None => Ok(()),
        Some(name) => Err(format!(
            "reads `{name}`, which is not available; a condition may read {}",
            CONDITION_VARIABLES.join(", ")
        )),
    }
}

fn compile(source: &str) -> Result<Program, String> {
    Program::compile(source).map_err(|e| format!("is not valid CEL: {}", e.to_string().trim()))
}

/// Evaluates a condition for one request: `Ok(true)` or `Ok(false)` when it decided, `Err` with
/// the reason when it could not.
pub fn holds(source: &str, request: &ConditionInput<'_>) -> Result<bool, String> {
    let program = compile(source)?;
    let mut context = Context::default();
    context.add_variable_from_value("input", to_cel(request.input));
    context.add_variable_from_value(
        "action",
        request
            .action
            .map(|a| Cel::String(Arc::new(a.to_string())))
            .unwrap_or(Cel::Null),
    );
    context.add_variable_from_value(
        "agentId",
        request
            .agent_id
            .map(|a| Cel::String(Arc::new(a.to_string())))
            .unwrap_or(Cel::Null),
    );
    context.add_variable_from_value(
        "amount",
        request.amount.map(number_to_cel).unwrap_or(Cel::Null),
    );
    match program.execute(&context) {
        Ok(Cel::Bool(b)) => Ok(b),
        Ok(other) => Err(format!(
            "evaluated to {:?}, not true or false",
            other.type_of()
        )),
        Err(e) => Err(e.to_string()),
    }
}

fn number_to_cel(n: f64) -> Cel {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        Cel::Int(n as i64)
    } else {
        Cel::Float(n)
    }
}

/// JSON to CEL: integers become `int` (so `input.amount >= 500` compares like with like),
/// other numbers `double`.
fn to_cel(value: &Value) -> Cel {
    match value {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Cel::Int(i),
            (None, Some(u), _) => Cel::UInt(u),
            (None, None, Some(f)) => Cel::Float(f),
            (None, None, None) => Cel::Null,
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => Cel::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => {
            let entries: HashMap<Key, Cel> = map
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            Cel::Map(CelMap {
                map: Arc::new(entries),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Operator text never panics the parser or the evaluator: each is a refusal with a reason.
    #[test]
    fn malformed_conditions_are_refusals_not_panics() {
        for source in [
            "input.amount >=",
            "(((",
            "\"unterminated",
            "input.",
            "1 +",
            "input[",
            "a ? b",
            "}{",
        ] {
            assert!(check(source).is_err(), "{source:?} should be refused");
            assert!(holds(
                source,
                &ConditionInput {
                    input: &json!({}),
                    action: None,
                    agent_id: None,
                    amount: None
                }
            )
            .is_err());
        }
    }

    fn eval(source: &str, input: Value) -> Result<bool, String> {
        holds(
            source,
            &ConditionInput {
                input: &input,
                action: Some("refund"),
                agent_id: Some("key_1"),
                amount: input.get("amount").and_then(Value::as_f64),
            },
        )
    }

    #[test]
    fn save_time_checks() {
        assert!(check(r#"input.amount >= 500 && input.currency == "USD""#).is_ok());
        assert!(check("action == 'refund' && amount > 10 && agentId != ''").is_ok());
        // cel-interpreter 0.10's parser panics on some syntax errors; that is a refusal too.
        assert!(check("input.amount >=").is_err());
        assert!(check("input.amount >= )").is_err());
        assert!(check("env.secret == 1").unwrap_err().contains("`env`"));
        assert!(check("   ").is_err());
        assert!(check(&"1 == 1 && ".repeat(1000)).is_err());
    }

    #[test]
    fn evaluation_table() {
        let cases = [
            ("input.amount >= 500", json!({"amount": 500}), Ok(true)),
            ("input.amount >= 500", json!({"amount": 499}), Ok(false)),
            ("input.amount >= 500.5", json!({"amount": 501}), Ok(true)),
            (
                r#"input.currency == "USD""#,
                json!({"currency": "USD"}),
                Ok(true),
            ),
            (
                "size(input.to) > 2",
                json!({"to": ["a", "b", "c"]}),
                Ok(true),
            ),
            ("action == 'refund'", json!({}), Ok(true)),
            ("amount > 10", json!({"amount": 11}), Ok(true)),
            (
                "input.nested.deep == true",
                json!({"nested": {"deep": true}}),
                Ok(true),
            ),
        ];
        for (source, input, expected) in cases {
            assert_eq!(
                eval(source, input.clone()),
                expected,
                "{source} over {input}"
            );
        }
    }

    #[test]
    fn what_cannot_be_evaluated_is_an_error_not_false() {
        // A missing field, a wrong type, a non-boolean result.
        assert!(eval("input.amount >= 500", json!({})).is_err());
        assert!(eval("input.amount >= 500", json!({"amount": "lots"})).is_err());
        assert!(eval("input.amount", json!({"amount": 3})).is_err());
    }
}
