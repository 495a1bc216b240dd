//! Links between effects: `dependsOn` (this effect may run only once others hold an outcome) and
//! `compensates` (this effect undoes, in part or whole, a settled one).
//!
//! Both are checked against facts that only ever move one way: an effect that is terminal stays
//! terminal with the same outcome. So a dependency that holds when read still holds when the
//! submission commits, and a link may be checked before the submit transaction without a race.

use super::{EffectState, Outcome};
use crate::{EffectId, FieldError};
use serde_json::Value;

/// The most effects one invoke may depend on.
pub const MAX_DEPENDENCIES: usize = 16;

/// `dependsOn[i]`: the effect must already hold this outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    pub effect: EffectId,
    pub outcome: Outcome,
}

/// The outcomes a dependency may ask for: the settled ones. `pending` and `unknown` are never a
/// fact one can build on, so asking for them is refused when the request is read.
pub const DEPENDABLE: [(&str, Outcome); 3] = [
    ("succeeded", Outcome::Succeeded),
    ("failed", Outcome::Failed),
    ("not_dispatched", Outcome::NotDispatched),
];

impl Outcome {
    /// The wire name (`succeeded`, `not_dispatched`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::NotDispatched => "not_dispatched",
            Outcome::Pending => "pending",
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Unknown => "unknown",
        }
    }
}

/// True when an effect in `state` holds `wanted` for good: it is terminal and its outcome is
/// `wanted`. An effect parked for approval or ready has outcome `not_dispatched` but may still
/// run, so it holds nothing yet.
pub fn holds(state: EffectState, wanted: Outcome) -> bool {
    state.is_terminal() && state.outcome() == wanted
}

/// True when an effect in `state` may be compensated: it settled, so whatever it did is known
/// (a failure may still have had a partial effect). Pending and unknown effects are not: their
/// outcome may yet change, and an effect stopped before dispatch did nothing to undo.
pub fn compensable(state: EffectState) -> bool {
    matches!(state, EffectState::Succeeded { .. } | EffectState::Failed)
}

/// Reads `dependsOn` as the invoke body carries it: a list of `{effect, outcome}`, at most
/// [`MAX_DEPENDENCIES`], no effect named twice. Errors name the field (`dependsOn[2].outcome`).
pub fn parse_dependencies(value: &Value) -> Result<Vec<Dependency>, FieldError> {
    let Value::Array(items) = value else {
        return Err(FieldError::new(
            "dependsOn",
            "must be a list of {effect, outcome}",
        ));
    };
    if items.len() > MAX_DEPENDENCIES {
        return Err(FieldError::new(
            "dependsOn",
            format!("names at most {MAX_DEPENDENCIES} effects"),
        ));
    }
    let mut out: Vec<Dependency> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let field = |name: &str| format!("dependsOn[{i}].{name}");
        let Value::Object(map) = item else {
            return Err(FieldError::new(
                format!("dependsOn[{i}]"),
                "must be an object {effect, outcome}",
            ));
        };
        if let Some(extra) = map.keys().find(|k| *k != "effect" && *k != "outcome") {
            return Err(FieldError::new(field(extra), "is not a known field"));
        }
        let effect = map
            .get("effect")
            .and_then(Value::as_str)
            .ok_or_else(|| FieldError::new(field("effect"), "is required: an effect id (eff_...)"))
            .and_then(|s| {
                EffectId::parse(s)
                    .map_err(|_| FieldError::new(field("effect"), "must be an effect id (eff_...)"))
            })?;
        let wanted = map
            .get("outcome")
            .and_then(Value::as_str)
            .ok_or_else(|| FieldError::new(field("outcome"), "is required"))?;
        let Some((_, outcome)) = DEPENDABLE.iter().find(|(name, _)| *name == wanted) else {
            return Err(FieldError::new(
                field("outcome"),
                "must be succeeded, failed or not_dispatched (pending and unknown never hold)",
            ));
        };
        if out.iter().any(|d| d.effect == effect) {
            return Err(FieldError::new(
                field("effect"),
                "names an effect already listed",
            ));
        }
        out.push(Dependency {
            effect,
            outcome: *outcome,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_terminal_states_hold_an_outcome() {
        for state in EffectState::ALL {
            for (_, wanted) in DEPENDABLE {
                let expected = state.is_terminal() && state.outcome() == wanted;
                assert_eq!(holds(state, wanted), expected, "{state:?} {wanted:?}");
            }
            assert!(!holds(state, Outcome::Pending) && !holds(state, Outcome::Unknown));
        }
        assert!(!holds(EffectState::Ready, Outcome::NotDispatched));
        assert!(!holds(EffectState::Unknown, Outcome::Succeeded));
        assert!(holds(
            EffectState::Succeeded { confirmed: false },
            Outcome::Succeeded
        ));
    }

    #[test]
    fn wire_names_are_the_serialized_names() {
        for outcome in [
            Outcome::NotDispatched,
            Outcome::Pending,
            Outcome::Succeeded,
            Outcome::Failed,
            Outcome::Unknown,
        ] {
            assert_eq!(json!(outcome), json!(outcome.as_str()));
        }
    }

    #[test]
    fn only_settled_effects_are_compensable() {
        let compensable: Vec<_> = EffectState::ALL
            .into_iter()
            .filter(|s| compensable(*s))
            .collect();
        assert_eq!(compensable.len(), 3, "{compensable:?}");
        assert!(!super::compensable(EffectState::Unknown));
        assert!(!super::compensable(EffectState::Rejected {
            reason: super::super::Rejection::Denied
        }));
    }

    #[test]
    fn dependencies_are_read_with_errors_that_name_the_field() {
        let id = EffectId::from_unique("a").to_string();
        let ok = parse_dependencies(&json!([{"effect": id, "outcome": "succeeded"}])).unwrap();
        assert_eq!(ok[0].outcome, Outcome::Succeeded);
        let cases = [
            (json!({"effect": id}), "dependsOn"),
            (json!([1]), "dependsOn[0]"),
            (json!([{"outcome": "succeeded"}]), "dependsOn[0].effect"),
            (
                json!([{"effect": "x", "outcome": "succeeded"}]),
                "dependsOn[0].effect",
            ),
            (
                json!([{"effect": id, "outcome": "unknown"}]),
                "dependsOn[0].outcome",
            ),
            (
                json!([{"effect": id, "outcome": "pending"}]),
                "dependsOn[0].outcome",
            ),
            (json!([{"effect": id}]), "dependsOn[0].outcome"),
            (
                json!([{"effect": id, "outcome": "failed", "x": 1}]),
                "dependsOn[0].x",
            ),
            (
                json!([{"effect": id, "outcome": "failed"}, {"effect": id, "outcome": "failed"}]),
                "dependsOn[1].effect",
            ),
        ];
        for (body, field) in cases {
            let err = parse_dependencies(&body).unwrap_err();
            assert_eq!(err.field, field, "{body}");
        }
        let many: Vec<_> = (0..=MAX_DEPENDENCIES)
            .map(|i| json!({"effect": EffectId::from_unique(&i.to_string()).to_string(), "outcome": "failed"}))
            .collect();
        assert_eq!(
            parse_dependencies(&Value::Array(many)).unwrap_err().field,
            "dependsOn"
        );
    }
}
