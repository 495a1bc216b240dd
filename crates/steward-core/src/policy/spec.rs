//! An approval policy's definition: what it targets, what it decides, and the PATCH rules that
//! edit it. Parsing names the offending field the way the client sent it.

use crate::action::FieldError;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The longest policy name, in bytes.
pub const POLICY_NAME_LEN_MAX: usize = 100;
/// The most distinct approvers a policy may require: more than a handful is a process problem,
/// not a rule, and each one is a human who must act before anything runs.
pub const REQUIRED_APPROVALS_MAX: u32 = 10;
/// Priorities live in ±this range, so ordering never overflows and stays readable.
pub const PRIORITY_ABS_MAX: i64 = 1_000_000;
/// The most tags one policy may match on.
pub const MATCH_TAGS_MAX: usize = 20;
/// The longest agent id, user id or tag matched on, in bytes.
pub const MATCH_VALUE_LEN_MAX: usize = 255;

/// What kind of request a policy looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchKind {
    /// Every request: action invocations and custom approval requests.
    Any,
    /// Action invocations (one action when `matchActionName` names it, else every action).
    Action,
    /// Custom approval requests.
    Custom,
}

impl MatchKind {
    pub const ALL: [MatchKind; 3] = [MatchKind::Any, MatchKind::Action, MatchKind::Custom];

    pub fn as_str(self) -> &'static str {
        match self {
            MatchKind::Any => "any",
            MatchKind::Action => "action",
            MatchKind::Custom => "custom",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == value)
    }
}

/// Whether a policy decides (`enforce`, the default) or only records what it would decide
/// (`shadow`: log-only, evaluated on live traffic without affecting the call).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyMode {
    #[default]
    Enforce,
    Shadow,
}

impl PolicyMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyMode::Enforce => "enforce",
            PolicyMode::Shadow => "shadow",
        }
    }

    pub fn parse(s: &str) -> Option<PolicyMode> {
        match s {
            "enforce" => Some(PolicyMode::Enforce),
            "shadow" => Some(PolicyMode::Shadow),
            _ => None,
        }
    }

    /// Serde's `skip_serializing_if`: an enforced policy's stored definition is what it was
    /// before modes existed, byte for byte.
    pub fn is_enforce(&self) -> bool {
        *self == PolicyMode::Enforce
    }
}

/// What a matching policy decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyEffect {
    RequireApproval,
    AutoApprove,
    AutoDeny,
}

impl PolicyEffect {
    pub const ALL: [PolicyEffect; 3] = [
        PolicyEffect::RequireApproval,
        PolicyEffect::AutoApprove,
        PolicyEffect::AutoDeny,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PolicyEffect::RequireApproval => "require_approval",
            PolicyEffect::AutoApprove => "auto_approve",
            PolicyEffect::AutoDeny => "auto_deny",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == value)
    }

    /// How restrictive the effect is; among policies of equal priority the stricter one is
    /// evaluated first.
    pub fn severity(self) -> u8 {
        match self {
            PolicyEffect::AutoDeny => 2,
            PolicyEffect::RequireApproval => 1,
            PolicyEffect::AutoApprove => 0,
        }
    }

    /// The stable code a recorded decision carries.
    pub fn decision_code(self) -> &'static str {
        match self {
            PolicyEffect::AutoDeny => "POLICY_DENIED",
            PolicyEffect::RequireApproval => "POLICY_REQUIRES_APPROVAL",
            PolicyEffect::AutoApprove => "POLICY_APPROVED",
        }
    }

    /// What the decision did to the request, as the recorded decision's `effect`.
    pub fn decision_effect(self) -> &'static str {
        match self {
            PolicyEffect::AutoDeny => "denied",
            PolicyEffect::RequireApproval => "approval_required",
            PolicyEffect::AutoApprove => "approved",
        }
    }
}

/// What a policy reaches, derived from its targeting and reported as `scope`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyScope {
    SpecificAction,
    AllActions,
    CustomRequests,
    AllRequests,
}

impl PolicyScope {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyScope::SpecificAction => "specific_action",
            PolicyScope::AllActions => "all_actions",
            PolicyScope::CustomRequests => "custom_requests",
            PolicyScope::AllRequests => "all_requests",
        }
    }
}

/// One version of a policy's definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicySpec {
    pub name: String,
    pub match_kind: MatchKind,
    pub match_action_name: Option<String>,
    pub match_agent_id: Option<String>,
    pub match_user_id: Option<String>,
    pub match_tags: Option<Vec<String>>,
    pub min_amount: Option<f64>,
    /// A CEL expression over `input` (and `action`, `agentId`, `amount`) that must also hold.
    pub condition: Option<String>,
    /// The structured form of a condition (`conditions.rs`), compiled to CEL; when both are set,
    /// both must hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Value>,
    pub effect: PolicyEffect,
    pub required_approvals: u32,
    pub priority: i64,
    pub enabled: bool,
    pub acknowledge_broad_scope: bool,
    /// `shadow`: evaluated and recorded, never deciding (see [`PolicyMode`]).
    #[serde(default, skip_serializing_if = "PolicyMode::is_enforce")]
    pub mode: PolicyMode,
}

/// The fields a policy body may carry, besides `conditions` and `changeNote` (handled by the
/// caller: one is refused, the other is stored with the version).
pub const SPEC_FIELDS: [&str; 15] = [
    "name",
    "matchKind",
    "matchActionName",
    "matchAgentId",
    "matchUserId",
    "matchTags",
    "minAmount",
    "condition",
    "effect",
    "requiredApprovals",
    "priority",
    "enabled",
    "acknowledgeBroadScope",
    "conditions",
    "mode",
];

/// Fields that `null` may clear; every other field refuses `null` on an edit.
const NULLABLE: [&str; 7] = [
    "conditions",
    "matchActionName",
    "matchAgentId",
    "matchUserId",
    "matchTags",
    "minAmount",
    "condition",
];

impl PolicySpec {
    /// A new policy from a create body. `null` and absence mean the same here: not set.
    pub fn from_create(body: &Map<String, Value>) -> Result<PolicySpec, FieldError> {
        let mut fields = Map::new();
        fields.insert("effect".into(), Value::from("require_approval"));
        fields.insert("requiredApprovals".into(), Value::from(1));
        fields.insert("priority".into(), Value::from(0));
        fields.insert("enabled".into(), Value::from(true));
        fields.insert("acknowledgeBroadScope".into(), Value::from(false));
        for (k, v) in body {
            if !v.is_null() {
                fields.insert(k.clone(), v.clone());
            }
        }
        Self::from_fields(&fields)
    }

    /// This policy edited by a PATCH body: a field left out is unchanged, `null` clears a
    /// nullable matcher, and the result as a whole must make sense (a contradiction is an error).
    pub fn patched(&self, patch: &Map<String, Value>) -> Result<PolicySpec, FieldError> {
        let Value::Object(mut fields) = serde_json::to_value(self).unwrap_or(Value::Null) else {
            return Err(FieldError::new("body", "cannot edit this policy"));
        };
        for (k, v) in patch {
            if v.is_null() {
                if !NULLABLE.contains(&k.as_str()) && SPEC_FIELDS.contains(&k.as_str()) {
                    return Err(FieldError::new(k.clone(), "cannot be cleared"));
                }
                fields.remove(k);
            } else {
                fields.insert(k.clone(), v.clone());
            }
        }
        Self::from_fields(&fields)
    }

    fn from_fields(f: &Map<String, Value>) -> Result<PolicySpec, FieldError> {
        let name = string(f, "name")?
            .map(|n| n.trim().to_string())
            .ok_or_else(|| FieldError::new("name", "is required"))?;
        let match_kind = match string(f, "matchKind")? {
            Some(k) => MatchKind::parse(&k)
                .ok_or_else(|| FieldError::new("matchKind", "must be any, action or custom"))?,
            None => return Err(FieldError::new("matchKind", "is required")),
        };
        let effect = match string(f, "effect")? {
            Some(e) => PolicyEffect::parse(&e).ok_or_else(|| {
                FieldError::new(
                    "effect",
                    "must be require_approval, auto_approve or auto_deny",
                )
            })?,
            None => return Err(FieldError::new("effect", "is required")),
        };
        let spec = PolicySpec {
            name,
            match_kind,
            match_action_name: string(f, "matchActionName")?,
            match_agent_id: string(f, "matchAgentId")?,
            match_user_id: string(f, "matchUserId")?,
            match_tags: tags(f)?,
            min_amount: number(f, "minAmount")?,
            condition: string(f, "condition")?,
            conditions: f.get("conditions").filter(|v| !v.is_null()).cloned(),
            effect,
            required_approvals: integer(f, "requiredApprovals")?
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
                .unwrap_or(1),
            priority: integer(f, "priority")?.unwrap_or(0),
            enabled: boolean(f, "enabled")?.unwrap_or(true),
            acknowledge_broad_scope: boolean(f, "acknowledgeBroadScope")?.unwrap_or(false),
            mode: match string(f, "mode")? {
                Some(m) => PolicyMode::parse(&m)
                    .ok_or_else(|| FieldError::new("mode", "must be enforce or shadow"))?,
                None => PolicyMode::Enforce,
            },
        };
        spec.validate()?;
        Ok(spec)
    }

    /// The rules a whole definition must satisfy.
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.name.is_empty() || self.name.len() > POLICY_NAME_LEN_MAX {
            return Err(FieldError::new(
                "name",
                format!("must be 1-{POLICY_NAME_LEN_MAX} characters"),
            ));
        }
        crate::check_text("name", &self.name, crate::TextKind::Line)?;
        if let Some(action) = &self.match_action_name {
            if self.match_kind != MatchKind::Action {
                return Err(FieldError::new(
                    "matchActionName",
                    format!(
                        "names an action, which contradicts matchKind {}; clear it or use matchKind action",
                        self.match_kind.as_str()
                    ),
                ));
            }
            crate::action::validate_name(action)
                .map_err(|e| FieldError::new("matchActionName", e.message))?;
        }
        for (field, value) in [
            ("matchAgentId", &self.match_agent_id),
            ("matchUserId", &self.match_user_id),
        ] {
            if let Some(v) = value {
                check_match_value(field, v)?;
            }
        }
        if let Some(tags) = &self.match_tags {
            if tags.len() > MATCH_TAGS_MAX {
                return Err(FieldError::new(
                    "matchTags",
                    format!("holds at most {MATCH_TAGS_MAX} tags"),
                ));
            }
            for tag in tags {
                check_match_value("matchTags", tag)?;
            }
        }
        if let Some(min) = self.min_amount {
            if !min.is_finite() || min < 0.0 {
                return Err(FieldError::new(
                    "minAmount",
                    "must be a non-negative number",
                ));
            }
        }
        if let Some(condition) = &self.condition {
            super::condition::check(condition).map_err(|e| FieldError::new("condition", e))?;
        }
        if let Some(conditions) = &self.conditions {
            let compiled = super::conditions::compile(conditions)?;
            super::condition::check(&compiled).map_err(|e| FieldError::new("conditions", e))?;
        }
        if !(1..=REQUIRED_APPROVALS_MAX).contains(&self.required_approvals) {
            return Err(FieldError::new(
                "requiredApprovals",
                format!("must be an integer from 1 to {REQUIRED_APPROVALS_MAX}"),
            ));
        }
        if self.priority.abs() > PRIORITY_ABS_MAX {
            return Err(FieldError::new(
                "priority",
                format!("must be an integer from -{PRIORITY_ABS_MAX} to {PRIORITY_ABS_MAX}"),
            ));
        }
        if self.effect == PolicyEffect::AutoDeny && self.is_broad() && !self.acknowledge_broad_scope
        {
            return Err(FieldError::new(
                "acknowledgeBroadScope",
                format!(
                    "an auto_deny over {} denies every such request; set acknowledgeBroadScope to true to mean it",
                    self.scope().as_str()
                ),
            ));
        }
        Ok(())
    }

    pub fn scope(&self) -> PolicyScope {
        match (self.match_kind, &self.match_action_name) {
            (MatchKind::Action, Some(_)) => PolicyScope::SpecificAction,
            (MatchKind::Action, None) => PolicyScope::AllActions,
            (MatchKind::Custom, _) => PolicyScope::CustomRequests,
            (MatchKind::Any, _) => PolicyScope::AllRequests,
        }
    }

    /// True when a matcher other than the target narrows the policy.
    pub fn is_narrowed(&self) -> bool {
        self.match_agent_id.is_some()
            || self.match_user_id.is_some()
            || self.match_tags.is_some()
            || self.min_amount.is_some()
            || self.condition.is_some()
            || self.conditions.is_some()
    }

    /// The CEL this policy's request must satisfy beyond its matchers: `condition`, the compiled
    /// `conditions`, both joined by `&&`, or nothing. Compiled again here, so a stored tree is
    /// bounded when it is used as well as when it was saved.
    pub fn effective_condition(&self) -> Result<Option<String>, String> {
        let structured = match &self.conditions {
            Some(tree) => Some(super::conditions::compile(tree).map_err(|e| e.message)?),
            None => None,
        };
        Ok(match (&self.condition, structured) {
            (Some(a), Some(b)) => Some(format!("({a}) && {b}")),
            (Some(a), None) => Some(a.clone()),
            (None, b) => b,
        })
    }

    /// True when the policy reaches every request of its kind: no named action, nothing narrowing.
    pub fn is_broad(&self) -> bool {
        self.scope() != PolicyScope::SpecificAction && !self.is_narrowed()
    }

    /// A broad policy nobody acknowledged: it deserves a second look.
    pub fn needs_scope_review(&self) -> bool {
        self.is_broad() && !self.acknowledge_broad_scope
    }
}

fn check_match_value(field: &str, value: &str) -> Result<(), FieldError> {
    if value.is_empty() || value.len() > MATCH_VALUE_LEN_MAX {
        return Err(FieldError::new(
            field,
            format!("values must be 1-{MATCH_VALUE_LEN_MAX} characters"),
        ));
    }
    Ok(())
}

fn string(f: &Map<String, Value>, field: &str) -> Result<Option<String>, FieldError> {
    match f.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(FieldError::new(field, "must be a string")),
    }
}

fn number(f: &Map<String, Value>, field: &str) -> Result<Option<f64>, FieldError> {
    match f.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(_) => Err(FieldError::new(field, "must be a number")),
    }
}

fn integer(f: &Map<String, Value>, field: &str) -> Result<Option<i64>, FieldError> {
    match f.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| FieldError::new(field, "must be an integer")),
    }
}

fn boolean(f: &Map<String, Value>, field: &str) -> Result<Option<bool>, FieldError> {
    match f.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(FieldError::new(field, "must be true or false")),
    }
}

fn tags(f: &Map<String, Value>) -> Result<Option<Vec<String>>, FieldError> {
    match f.get("matchTags") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => {
            let tags = items
                .iter()
                .map(|t| {
                    t.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| FieldError::new("matchTags", "must be a list of strings"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            // An empty list narrows nothing: it is the same as no tag matcher.
            Ok((!tags.is_empty()).then_some(tags))
        }
        Some(_) => Err(FieldError::new("matchTags", "must be a list of strings")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    fn created(v: Value) -> PolicySpec {
        PolicySpec::from_create(&body(v)).expect("valid policy")
    }

    fn field_of(result: Result<PolicySpec, FieldError>) -> String {
        result.expect_err("must be refused").field
    }

    #[test]
    fn create_applies_defaults_and_derives_scope() {
        let p = created(
            json!({"name": " refunds ", "matchKind": "action", "matchActionName": "refund"}),
        );
        assert_eq!(p.name, "refunds");
        assert_eq!(p.effect, PolicyEffect::RequireApproval);
        assert_eq!(p.required_approvals, 1);
        assert_eq!(p.priority, 0);
        assert!(p.enabled);
        assert_eq!(p.scope(), PolicyScope::SpecificAction);
        assert!(!p.needs_scope_review());
        let custom =
            created(json!({"name": "c", "matchKind": "custom", "effect": "require_approval"}));
        assert_eq!(custom.scope(), PolicyScope::CustomRequests);
        assert!(custom.needs_scope_review());
    }

    #[test]
    fn every_refusal_names_its_field() {
        let cases = [
            (json!({"matchKind": "action"}), "name"),
            (json!({"name": "x"}), "matchKind"),
            (json!({"name": "x", "matchKind": "all"}), "matchKind"),
            (
                json!({"name": "x", "matchKind": "action", "effect": "maybe"}),
                "effect",
            ),
            (
                json!({"name": "x", "matchKind": "custom", "matchActionName": "refund"}),
                "matchActionName",
            ),
            (
                json!({"name": "x", "matchKind": "any", "matchActionName": "refund"}),
                "matchActionName",
            ),
            (
                json!({"name": "x", "matchKind": "action", "minAmount": -1}),
                "minAmount",
            ),
            (
                json!({"name": "x", "matchKind": "action", "minAmount": "10"}),
                "minAmount",
            ),
            (
                json!({"name": "x", "matchKind": "action", "requiredApprovals": 0}),
                "requiredApprovals",
            ),
            (
                json!({"name": "x", "matchKind": "action", "requiredApprovals": 11}),
                "requiredApprovals",
            ),
            (
                json!({"name": "x", "matchKind": "action", "priority": 2_000_000}),
                "priority",
            ),
            (
                json!({"name": "x", "matchKind": "action", "condition": "input.amount >"}),
                "condition",
            ),
            (
                json!({"name": "x", "matchKind": "action", "condition": "secret.value == 1"}),
                "condition",
            ),
            (
                json!({"name": "x", "matchKind": "action", "matchTags": [1]}),
                "matchTags",
            ),
            (
                json!({"name": "x", "matchKind": "action", "effect": "auto_deny"}),
                "acknowledgeBroadScope",
            ),
            (
                json!({"name": "x", "matchKind": "any", "effect": "auto_deny"}),
                "acknowledgeBroadScope",
            ),
            (json!({"name": "", "matchKind": "action"}), "name"),
        ];
        for (input, field) in cases {
            assert_eq!(
                field_of(PolicySpec::from_create(&body(input.clone()))),
                field,
                "{input}"
            );
        }
    }

    #[test]
    fn a_broad_auto_deny_is_accepted_once_acknowledged_or_narrowed() {
        created(
            json!({"name": "x", "matchKind": "any", "effect": "auto_deny", "acknowledgeBroadScope": true}),
        );
        let narrowed = created(
            json!({"name": "x", "matchKind": "action", "effect": "auto_deny", "minAmount": 100}),
        );
        assert!(!narrowed.is_broad());
        created(
            json!({"name": "x", "matchKind": "action", "matchActionName": "refund", "effect": "auto_deny"}),
        );
    }

    #[test]
    fn patch_leaves_absent_fields_clears_nulls_and_refuses_contradictions() {
        let p = created(json!({
            "name": "p", "matchKind": "action", "matchActionName": "refund",
            "matchAgentId": "agent_1", "minAmount": 50, "priority": 40
        }));
        let unchanged = p.patched(&body(json!({"priority": 41}))).unwrap();
        assert_eq!(unchanged.match_agent_id.as_deref(), Some("agent_1"));
        assert_eq!(unchanged.min_amount, Some(50.0));
        assert_eq!(unchanged.priority, 41);
        let cleared = p
            .patched(&body(json!({"matchAgentId": null, "minAmount": null})))
            .unwrap();
        assert_eq!(cleared.match_action_name.as_deref(), Some("refund"));
        assert_eq!(cleared.match_agent_id, None);
        assert_eq!(cleared.min_amount, None);
        assert_eq!(
            field_of(p.patched(&body(json!({"matchKind": "custom"})))),
            "matchActionName"
        );
        let custom = p
            .patched(&body(
                json!({"matchKind": "custom", "matchActionName": null}),
            ))
            .unwrap();
        assert_eq!(custom.scope(), PolicyScope::CustomRequests);
        assert_eq!(
            field_of(p.patched(&body(json!({"effect": null})))),
            "effect"
        );
        assert_eq!(field_of(p.patched(&body(json!({"name": null})))), "name");
        let disabled = p.patched(&body(json!({"enabled": false}))).unwrap();
        assert!(!disabled.enabled);
    }
}
