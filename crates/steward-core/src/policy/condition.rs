//! A policy's `condition`: a CEL expression over the request, checked when the policy is saved and
//! evaluated for each request. An expression that cannot be evaluated for a request (a missing
//! field, a type mismatch, a result that is not a boolean) decides nothing by itself: the caller
//! treats it as "approval is required".
//!
//! A condition is bounded twice: in bytes and in structure (depth, nodes, nested comprehensions)
//! when it is saved, and again before every evaluation, so a condition stored by an older build
//! or written straight into the database is refused with a reason instead of overflowing a
//! worker's stack (the evaluator recurses once per level of the expression tree).

use cel::common::ast::{EntryExpr, Expr};
use cel::objects::{Key, Map as CelMap};
use cel::{Context, IdedExpr, Program, Value as Cel};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// The longest condition accepted, in bytes: a rule, not a program.
pub const CONDITION_LEN_MAX: usize = 4_096;

/// The deepest expression tree accepted, in levels. The evaluator recurses once per level; a
/// thousand levels overflowed a 2 MiB worker stack, so 64 leaves a margin of more than ten while
/// still allowing a rule of 60 chained `&&` or `+` terms (the parser nests them left to right).
pub const CONDITION_DEPTH_MAX: usize = 64;

/// The most expression nodes accepted: each is evaluated at most once outside a comprehension,
/// so this bounds the work a condition does per request besides its one comprehension.
pub const CONDITION_NODES_MAX: usize = 512;

/// How many comprehensions (`all`, `exists`, `exists_one`, `map`, `filter`) may nest. One walks
/// a list of the input (at most the 1 MiB body's worth); a second inside it would multiply the
/// work by the length of another list.
pub const CONDITION_COMPREHENSION_NESTING_MAX: usize = 1;

/// The stack a condition is parsed and evaluated on, in bytes, whatever thread asks. The
/// evaluator and the parse tree's visitor recurse per level, and an unoptimised build spends
/// over 20 KiB of stack per level: 16 MiB covers [`CONDITION_DEPTH_MAX`] levels many times over
/// in any build, and a runtime's small worker stacks are never what decides.
pub const CONDITION_STACK_BYTES: usize = 16 * 1024 * 1024;

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
    stacker::grow(CONDITION_STACK_BYTES, || check_here(source))
}

fn check_here(source: &str) -> Result<(), String> {
    if source.trim().is_empty() {
        return Err("must not be empty".into());
    }
    let (program, shape) = compile(source)?;
    let references = program.references();
    let mut unknown: Vec<&str> = references
        .variables()
        .into_iter()
        .filter(|v| !CONDITION_VARIABLES.contains(v) && !shape.bound.iter().any(|b| b == v))
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

/// Parses a condition and checks its size and structure: the one way in for both saving and
/// evaluating, so what is evaluated has always passed the same bounds.
fn compile(source: &str) -> Result<(Program, Shape), String> {
    if source.len() > CONDITION_LEN_MAX {
        return Err(format!("must be at most {CONDITION_LEN_MAX} bytes"));
    }
    lexical_bounds(source)?;
    let program = Program::compile(source)
        .map_err(|e| format!("is not valid CEL: {}", e.to_string().trim()))?;
    let shape = Shape::of(program.expression());
    shape.within_bounds()?;
    Ok((program, shape))
}

/// Bounds what the parser is given before it recurses over it: bracket nesting and the number of
/// operator characters. It reads every character, string literals included (telling a string
/// from code here would be a second parser to get wrong), so a condition whose strings are full
/// of brackets or operators may be refused although it is shallow; rules are not written so.
fn lexical_bounds(source: &str) -> Result<(), String> {
    let mut depth = 0usize;
    let mut operators = 0usize;
    for byte in source.bytes() {
        match byte {
            b'(' | b'[' | b'{' => {
                depth += 1;
                operators += 1;
                if depth > CONDITION_DEPTH_MAX {
                    return Err(format!(
                        "nests more than {CONDITION_DEPTH_MAX} levels deep; split it into \
                         simpler rules"
                    ));
                }
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b'+' | b'-' | b'*' | b'/' | b'%' | b'!' | b'<' | b'>' | b'=' | b'&' | b'|' | b'?'
            | b':' | b'.' | b',' => operators += 1,
            _ => {}
        }
        if operators > CONDITION_NODES_MAX {
            return Err(format!(
                "has more than {CONDITION_NODES_MAX} operators; split it into simpler rules"
            ));
        }
    }
    Ok(())
}

/// The structure of an expression tree, measured without recursion.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Shape {
    depth: usize,
    nodes: usize,
    comprehension_nesting: usize,
    /// The variables comprehensions bind (`x` in `input.items.all(x, x > 0)`).
    bound: Vec<String>,
}

impl Shape {
    fn of(root: &IdedExpr) -> Shape {
        let mut shape = Shape::default();
        // (node, its depth, comprehensions enclosing it)
        let mut stack: Vec<(&IdedExpr, usize, usize)> = vec![(root, 1, 0)];
        while let Some((node, depth, nesting)) = stack.pop() {
            shape.nodes += 1;
            shape.depth = shape.depth.max(depth);
            shape.comprehension_nesting = shape.comprehension_nesting.max(nesting);
            if shape.nodes > CONDITION_NODES_MAX || shape.depth > CONDITION_DEPTH_MAX {
                // Past a bound already: no need to walk the rest.
                break;
            }
            let child = |n| (n, depth + 1, nesting);
            match &node.expr {
                Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => {}
                Expr::Call(call) => {
                    stack.extend(call.target.as_deref().map(child));
                    stack.extend(call.args.iter().map(child));
                }
                Expr::Comprehension(c) => {
                    shape.bound.push(c.iter_var.clone());
                    shape.bound.extend(c.iter_var2.clone());
                    stack.extend([&c.iter_range, &c.accu_init, &c.result].map(child));
                    // The loop's own parts run once per element: they are inside it.
                    stack.extend([&c.loop_cond, &c.loop_step].map(|n| (n, depth + 1, nesting + 1)));
                }
                Expr::List(list) => stack.extend(list.elements.iter().map(child)),
                Expr::Map(map) => {
                    for entry in &map.entries {
                        match &entry.expr {
                            EntryExpr::MapEntry(e) => stack.extend([&e.key, &e.value].map(child)),
                            EntryExpr::StructField(f) => stack.push(child(&f.value)),
                        }
                    }
                }
                Expr::Select(select) => stack.push(child(&select.operand)),
                Expr::Struct(structure) => {
                    for entry in &structure.entries {
                        match &entry.expr {
                            EntryExpr::MapEntry(e) => stack.extend([&e.key, &e.value].map(child)),
                            EntryExpr::StructField(f) => stack.push(child(&f.value)),
                        }
                    }
                }
            }
        }
        shape
    }

    fn within_bounds(&self) -> Result<(), String> {
        if self.depth > CONDITION_DEPTH_MAX {
            return Err(format!(
                "nests more than {CONDITION_DEPTH_MAX} levels deep; split it into simpler rules"
            ));
        }
        if self.nodes > CONDITION_NODES_MAX {
            return Err(format!(
                "has more than {CONDITION_NODES_MAX} terms; split it into simpler rules"
            ));
        }
        if self.comprehension_nesting > CONDITION_COMPREHENSION_NESTING_MAX {
            return Err(format!(
                "nests more than {CONDITION_COMPREHENSION_NESTING_MAX} comprehension \
                 (all, exists, exists_one, map, filter) inside another"
            ));
        }
        Ok(())
    }
}

/// Evaluates a condition for one request: `Ok(true)` or `Ok(false)` when it decided, `Err` with
/// the reason when it could not.
pub fn holds(source: &str, request: &ConditionInput<'_>) -> Result<bool, String> {
    stacker::grow(CONDITION_STACK_BYTES, || holds_here(source, request))
}

fn holds_here(source: &str, request: &ConditionInput<'_>) -> Result<bool, String> {
    let (program, _) = compile(source)?;
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

    /// Runs `f` on a thread with a tokio worker's 2 MiB stack, where the server evaluates.
    fn on_worker_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(f)
            .expect("spawn")
            .join()
            .expect("the condition must not panic")
    }

    fn empty_request() -> ConditionInput<'static> {
        static EMPTY: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
        ConditionInput {
            input: EMPTY.get_or_init(|| json!({"a": [1, 2, 3], "n": 5})),
            action: None,
            agent_id: None,
            amount: None,
        }
    }

    /// The probe's repro: 1,500 `1+1+...` terms (3 KB, under the byte cap) were saved, and
    /// evaluating them overflowed the worker's stack and aborted the server. Saving refuses it
    /// now, and evaluating what an older build stored is a reason, not an abort.
    #[test]
    fn a_deep_condition_is_refused_at_save_and_at_use_without_overflowing() {
        let hostile = [
            vec!["1"; 1_500].join("+") + " == 1500",
            vec!["1"; 2_040].join("+"),
            format!("input{}", "[0]".repeat(1_300)),
            format!("input{}", ".a".repeat(2_000)),
            format!("{}true", "!".repeat(4_000)),
            vec!["true"; 800].join(" && "),
            format!("{}1{} == 1", "(".repeat(1_000), ")".repeat(1_000)),
            format!("{}1{}", "[".repeat(1_000), "]".repeat(1_000)),
            "input.a.all(x, input.a.all(y, input.a.all(z, x + y + z > 0)))".to_string(),
        ];
        for source in hostile {
            let shown = source.chars().take(40).collect::<String>();
            let (saved, used) =
                on_worker_stack(move || (check(&source), holds(&source, &empty_request())));
            assert!(saved.is_err(), "{shown}... must be refused at save");
            assert!(used.is_err(), "{shown}... must not be evaluated");
        }
        // Long chains the parser folds are fine either way; they must only not abort.
        for source in [
            format!("{}true", "!".repeat(400)),
            format!("{}1 == 1", "-".repeat(400)),
        ] {
            let (saved, used) =
                on_worker_stack(move || (check(&source), holds(&source, &empty_request())));
            assert_eq!(saved.map(|()| true), used, "a saved condition evaluates");
        }
    }

    #[test]
    fn structure_bounds_leave_room_for_real_rules() {
        let chained = vec!["input.n > 1"; 20].join(" && ");
        assert!(check(&chained).is_ok(), "{chained}");
        assert_eq!(
            on_worker_stack(move || holds(&chained, &empty_request())),
            Ok(true)
        );
        let one_comprehension = "input.a.exists(x, x > 2) && size(input.a) == 3".to_string();
        assert_eq!(check(&one_comprehension), Ok(()));
        assert_eq!(
            on_worker_stack(move || holds(&one_comprehension, &empty_request())),
            Ok(true)
        );
        let nested = "input.a.exists(x, input.a.exists(y, x == y))";
        assert!(check(nested).unwrap_err().contains("comprehension"));
        let too_deep = vec!["1"; CONDITION_DEPTH_MAX + 2].join("+") + " > 0";
        assert!(check(&too_deep).unwrap_err().contains("levels"));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Random token soup up to the byte cap: accepted or refused, never a panic or an abort,
        /// and whatever is accepted at save evaluates (to a value or a reason) on a worker stack.
        #[test]
        fn random_conditions_never_abort(
            tokens in proptest::collection::vec(
                proptest::sample::select(vec![
                    "input", "action", "amount", "agentId", ".a", ".n", "[0]", "1", "2.5", "'s'",
                    "true", "null", "+", "-", "*", "/", "%", "==", "!=", "<", ">=", "&&", "||",
                    "!", "?", ":", "(", ")", "[", "]", "{", "}", ",", "size(", "has(", "in",
                    ".all(x,", ".exists(x,", ".map(x,", "x", " ",
                ]),
                0..1_500,
            ),
            repeat in 1usize..40,
        ) {
            let source: String = tokens.concat().repeat(repeat);
            on_worker_stack(move || {
                let saved = check(&source);
                let used = holds(&source, &empty_request());
                if saved.is_err() && source.len() <= CONDITION_LEN_MAX && !source.trim().is_empty() {
                    // Whatever save refuses for its structure, use refuses too.
                    assert!(used.is_err() || saved.as_ref().is_err_and(|e| e.contains("reads")));
                }
            });
        }

        /// Random well-formed trees of any depth: a tree past the bounds is refused, one within
        /// them is accepted; neither aborts.
        #[test]
        fn random_expression_trees_are_bounded(depth in 1usize..3_000, op in 0usize..4) {
            let (open, close, joiner) = [("", "", "+"), ("(", ")", ""), ("[", "]", ""), ("!", "", "")][op];
            let source = match op {
                0 => vec!["1"; depth].join(joiner) + " > 0",
                3 => format!("{}true", open.repeat(depth)),
                _ => format!("{}1{} == 1", open.repeat(depth), close.repeat(depth)),
            };
            let (saved, _used) = on_worker_stack(move || {
                (check(&source), holds(&source, &empty_request()))
            });
            if op == 0 && depth + 2 > CONDITION_DEPTH_MAX + 1 {
                proptest::prop_assert!(saved.is_err());
            }
        }
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
