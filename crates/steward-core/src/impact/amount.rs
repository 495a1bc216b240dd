//! Impact amount expressions: how much one invocation changes, computed from its input before
//! dispatch. The grammar is deliberately tiny, so an amount is always cheap, total and obvious:
//!
//! ```text
//! amount := term [ "*" integer ]
//! term   := integer | "input." path | "count(" "input." path ")"
//! path   := segment { "." segment }        segment := [A-Za-z0-9_-]+
//! ```
//!
//! Evaluating gives `None` when the input does not hold the quantity (a missing or non-integer
//! field, a negative value, an overflow): an applicable limit then refuses the effect.

use serde_json::Value;

/// The longest amount expression accepted, in bytes.
pub const AMOUNT_EXPRESSION_LEN_MAX: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Term {
    Literal(i64),
    Field(String),
    Count(String),
}

/// A parsed amount expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmountExpr {
    term: Term,
    factor: i64,
}

/// Why an amount expression was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AmountError(String);

fn err(message: impl Into<String>) -> AmountError {
    AmountError(message.into())
}

fn integer(text: &str) -> Result<i64, AmountError> {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err(format!("`{text}` is not a non-negative integer")));
    }
    text.parse::<i64>()
        .map_err(|_| err(format!("`{text}` is too large")))
}

fn input_path(text: &str) -> Result<String, AmountError> {
    let text = text.trim();
    let path = text
        .strip_prefix("input.")
        .ok_or_else(|| err(format!("`{text}` must start with input.")))?;
    let valid = path.split('.').all(|s| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    });
    if valid {
        Ok(path.to_string())
    } else {
        Err(err(format!("`{text}` is not a valid input path")))
    }
}

impl AmountExpr {
    pub fn parse(source: &str) -> Result<AmountExpr, AmountError> {
        if source.len() > AMOUNT_EXPRESSION_LEN_MAX {
            return Err(err(format!(
                "must be at most {AMOUNT_EXPRESSION_LEN_MAX} bytes"
            )));
        }
        let (term_text, factor) = match source.split_once('*') {
            Some((term, factor)) => (term, integer(factor)?),
            None => (source, 1),
        };
        let term_text = term_text.trim();
        let term = if let Some(inner) = term_text
            .strip_prefix("count(")
            .and_then(|rest| rest.strip_suffix(')'))
        {
            Term::Count(input_path(inner)?)
        } else if term_text.starts_with("input.") {
            Term::Field(input_path(term_text)?)
        } else if term_text.bytes().next().is_some_and(|b| b.is_ascii_digit()) {
            Term::Literal(integer(term_text)?)
        } else {
            return Err(err(
                "must be an integer, input.<path> or count(input.<path>), with one optional * <integer>",
            ));
        };
        Ok(AmountExpr { term, factor })
    }

    /// The quantity for one input, or `None` when the input does not hold it.
    pub fn evaluate(&self, input: &Value) -> Option<i64> {
        let base = match &self.term {
            Term::Literal(n) => Some(*n),
            Term::Field(path) => crate::template::lookup(input, path)
                .and_then(Value::as_i64)
                .filter(|n| *n >= 0),
            Term::Count(path) => crate::template::lookup(input, path)
                .and_then(Value::as_array)
                .and_then(|items| i64::try_from(items.len()).ok()),
        }?;
        base.checked_mul(self.factor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn grammar_and_evaluation_table() {
        let input = json!({"amount": 1250, "to": ["a", "b", "c"], "order": {"lines": 4}, "neg": -3, "f": 1.5});
        let cases: [(&str, Option<i64>); 11] = [
            ("1", Some(1)),
            ("  7 * 3 ", Some(21)),
            ("input.amount", Some(1250)),
            ("input.amount * 100", Some(125_000)),
            ("count(input.to)", Some(3)),
            ("count(input.to) * 2", Some(6)),
            ("input.order.lines", Some(4)),
            ("input.missing", None),
            ("input.neg", None),
            ("input.f", None),
            ("count(input.amount)", None),
        ];
        for (source, expected) in cases {
            let expr = AmountExpr::parse(source).unwrap_or_else(|e| panic!("{source}: {e}"));
            assert_eq!(expr.evaluate(&input), expected, "{source}");
        }
    }

    #[test]
    fn refusals() {
        for bad in [
            "",
            "-1",
            "amount",
            "input.",
            "input.a..b",
            "count(input.to",
            "count(to)",
            "input.a * -2",
            "input.a * 2 * 3",
            "input.a + 1",
            "99999999999999999999",
            "input.a * x",
        ] {
            assert!(AmountExpr::parse(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn overflow_gives_no_quantity() {
        let expr = AmountExpr::parse("input.n * 1000").unwrap();
        assert_eq!(expr.evaluate(&json!({"n": i64::MAX / 10})), None);
    }

    proptest! {
        #[test]
        fn a_field_times_a_factor_is_their_product(n in 0i64..1_000_000_000, k in 0i64..1000) {
            let expr = AmountExpr::parse(&format!("input.x * {k}")).unwrap();
            prop_assert_eq!(expr.evaluate(&json!({"x": n})), Some(n * k));
            let count = AmountExpr::parse(&format!("count(input.items) * {k}")).unwrap();
            let items: Vec<u8> = vec![0; (n % 50) as usize];
            prop_assert_eq!(count.evaluate(&json!({"items": items})), Some((n % 50) * k));
        }

        #[test]
        fn parse_never_panics(source in ".{0,40}") {
            let _ = AmountExpr::parse(&source);
        }
    }
}
