//! Approval policies: a policy and its versions, what `evaluate` decides, and the plan, apply
//! and test answers of policy files.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use steward_core::policy::PolicySpec;
use steward_core::PolicyId;
use utoipa::ToSchema;

/// What kind of request a policy looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MatchKind {
    Any,
    Action,
    Custom,
}

impl From<steward_core::policy::MatchKind> for MatchKind {
    fn from(kind: steward_core::policy::MatchKind) -> Self {
        use steward_core::policy::MatchKind as Core;
        match kind {
            Core::Any => MatchKind::Any,
            Core::Action => MatchKind::Action,
            Core::Custom => MatchKind::Custom,
        }
    }
}

/// What a matching policy decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PolicyEffect {
    RequireApproval,
    AutoApprove,
    AutoDeny,
}

impl From<steward_core::policy::PolicyEffect> for PolicyEffect {
    fn from(effect: steward_core::policy::PolicyEffect) -> Self {
        use steward_core::policy::PolicyEffect as Core;
        match effect {
            Core::RequireApproval => PolicyEffect::RequireApproval,
            Core::AutoApprove => PolicyEffect::AutoApprove,
            Core::AutoDeny => PolicyEffect::AutoDeny,
        }
    }
}

/// What a policy matches, repeated under `match`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyMatch {
    pub kind: MatchKind,
    pub action_name: Option<String>,
    pub agent_id: Option<String>,
    pub user_id: Option<String>,
    pub tags: Option<Vec<String>>,
    pub min_amount: Option<f64>,
    pub condition: Option<String>,
}

/// An approval policy (or, inside a version or a file's plan, its definition at that version).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    pub name: String,
    pub enabled: bool,
    pub effect: PolicyEffect,
    pub required_approvals: u32,
    pub priority: i64,
    pub match_kind: MatchKind,
    pub match_action_name: Option<String>,
    pub match_agent_id: Option<String>,
    pub match_user_id: Option<String>,
    pub match_tags: Option<Vec<String>>,
    pub min_amount: Option<f64>,
    pub condition: Option<String>,
    /// The structured condition, as saved (`null`: none): any JSON.
    #[schema(value_type = Option<Object>)]
    pub conditions: Option<Value>,
    pub acknowledge_broad_scope: bool,
    /// `shadow` for a log-only policy (its would-be decision is recorded on each call it
    /// matches, as the invocation's `shadowDecisions`, and counted; the call is not affected);
    /// absent for an enforced policy (the default), so an enforced definition's view, which a
    /// policy file's plan digest covers, is what it was before modes existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub mode: Option<String>,
    /// `specific_action`, `all_actions`, `custom_requests` or `all_requests`.
    pub scope: String,
    pub needs_scope_review: bool,
    #[schema(inline)]
    pub r#match: PolicyMatch,
    /// The policy's own fields, only on a policy: absent inside a version's `policy` and a
    /// plan's `before` and `after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<String>)]
    pub id: Option<PolicyId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub version: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub created_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub updated_at: Option<String>,
}

impl Policy {
    /// The definition alone, without the policy's id, version and times. A policy file's plan
    /// digest covers this view of each of the file's policies.
    pub fn of_spec(spec: &PolicySpec) -> Policy {
        Policy {
            name: spec.name.clone(),
            enabled: spec.enabled,
            effect: spec.effect.into(),
            required_approvals: spec.required_approvals,
            priority: spec.priority,
            match_kind: spec.match_kind.into(),
            match_action_name: spec.match_action_name.clone(),
            match_agent_id: spec.match_agent_id.clone(),
            match_user_id: spec.match_user_id.clone(),
            match_tags: spec.match_tags.clone(),
            min_amount: spec.min_amount,
            condition: spec.condition.clone(),
            conditions: spec.conditions.clone(),
            acknowledge_broad_scope: spec.acknowledge_broad_scope,
            mode: (spec.mode == steward_core::policy::PolicyMode::Shadow)
                .then(|| spec.mode.as_str().to_string()),
            scope: spec.scope().as_str().to_string(),
            needs_scope_review: spec.needs_scope_review(),
            r#match: PolicyMatch {
                kind: spec.match_kind.into(),
                action_name: spec.match_action_name.clone(),
                agent_id: spec.match_agent_id.clone(),
                user_id: spec.match_user_id.clone(),
                tags: spec.match_tags.clone(),
                min_amount: spec.min_amount,
                condition: spec.condition.clone(),
            },
            id: None,
            version: None,
            created_at: None,
            updated_at: None,
        }
    }
}

/// One retained version of a policy; `policy` is `null` on the deletion's tombstone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyVersion {
    #[schema(value_type = String)]
    pub policy_id: PolicyId,
    pub version: u32,
    pub deleted: bool,
    pub change_note: Option<String>,
    pub created_at: String,
    /// The key that made the version.
    pub created_by: Option<String>,
    /// The name of the key in `createdBy`; `null` when there is none or it is not one of the
    /// environment's.
    pub created_by_name: Option<String>,
    pub policy: Option<Policy>,
}

/// The policy that decided, as a decision names it (its version at the time).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecidingPolicy {
    #[schema(value_type = String)]
    pub id: PolicyId,
    pub name: String,
    pub version: u32,
}

/// A policy's decision, as an invocation records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyDecision {
    /// Always `policy`.
    pub source: String,
    /// `POLICY_DENIED`, `POLICY_REQUIRES_APPROVAL` or `POLICY_APPROVED`.
    pub code: String,
    /// `denied`, `approval_required` or `approved`.
    pub effect: String,
    pub explanation: String,
    pub policy: DecidingPolicy,
}

impl PolicyDecision {
    pub fn of(d: &steward_core::policy::PolicyDecision) -> PolicyDecision {
        PolicyDecision {
            source: "policy".to_string(),
            code: d.effect.decision_code().to_string(),
            effect: d.effect.decision_effect().to_string(),
            explanation: d.explanation.clone(),
            policy: DecidingPolicy {
                id: d.policy.id.clone(),
                name: d.policy.name.clone(),
                version: d.policy.version,
            },
        }
    }
}

/// How a policy `evaluate` considered met the request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MatchResult {
    /// `"matched"`.
    Matched,
    /// `{"undecidable": reason}`: its condition could not be evaluated.
    Undecidable(String),
}

/// One policy `evaluate` considered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Considered {
    #[schema(value_type = String)]
    pub id: PolicyId,
    pub name: String,
    pub version: u32,
    pub result: MatchResult,
}

/// `POST /approval-policies/evaluate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Evaluation {
    /// Always `policy_only`: limits, halts and scopes still apply at invoke.
    pub evaluation: String,
    pub effect: Option<PolicyEffect>,
    pub required_approvals: Option<u32>,
    pub decision: Option<PolicyDecision>,
    pub explanation: String,
    pub matched: Vec<Considered>,
}

/// What a change of a policy file's plan does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PolicyFileOp {
    Create,
    Update,
    Delete,
}

/// One change of a policy file's plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyFileChange {
    pub op: PolicyFileOp,
    pub name: String,
    /// The live policy changed; absent for a creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<String>)]
    pub policy_id: Option<PolicyId>,
    /// Its version when planned; absent for a creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub from_version: Option<u32>,
    /// The live definition; absent for a creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub before: Option<Policy>,
    /// The file's definition; absent for a deletion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub after: Option<Policy>,
}

/// One problem of a policy file, named by where it is (`policies[2].effect`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyFileProblem {
    pub field: String,
    pub message: String,
    /// The entry's name, when the entry has one.
    pub name: Option<String>,
}

/// How many policies a plan creates, updates, deletes and leaves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyFileSummary {
    pub create: u64,
    pub update: u64,
    pub delete: u64,
    pub unchanged: u64,
}

/// `POST /approval-policies/files/plan`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyFilePlan {
    /// Names exactly this change against exactly the live set it was planned on.
    pub digest: String,
    /// Always true in a 200 (a file with problems is a 400 listing them in `details.errors`).
    pub valid: bool,
    /// Always empty in a 200.
    pub errors: Vec<PolicyFileProblem>,
    pub changes: Vec<PolicyFileChange>,
    /// Names of the live policies the file leaves as they are.
    pub unchanged: Vec<String>,
    pub summary: PolicyFileSummary,
}

/// `POST /approval-policies/files/apply`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyFileApplied {
    pub digest: String,
    pub valid: bool,
    pub errors: Vec<PolicyFileProblem>,
    pub changes: Vec<PolicyFileChange>,
    pub unchanged: Vec<String>,
    pub summary: PolicyFileSummary,
    /// False when the file already matched the live set (nothing written).
    pub applied: bool,
    /// The live policies after the change.
    pub policies: Vec<Policy>,
}

/// One case decided by `POST /approval-policies/files/test`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyFileCase {
    pub index: u32,
    pub name: Option<String>,
    /// Null when no policy applies.
    pub effect: Option<PolicyEffect>,
    pub required_approvals: Option<u32>,
    /// The deciding policy's name.
    pub policy: Option<String>,
    pub decision: Option<PolicyDecision>,
    pub explanation: String,
    /// The case's `expect`, as given: any JSON object.
    #[schema(value_type = Option<Object>)]
    pub expected: Option<Value>,
    /// Whether the decision met `expected` (null without an expectation).
    pub passed: Option<bool>,
}

/// `POST /approval-policies/files/test`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyFileTest {
    /// Always `policy_only`: limits, halts and scopes still apply at invoke.
    pub evaluation: String,
    /// Every case with an expectation met it.
    pub passed: bool,
    pub results: Vec<PolicyFileCase>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The definition's view is the one the plan digest has always covered: the same keys and
    /// values as the `json!` view it replaced, so a plan made before stays applicable.
    #[test]
    fn a_definitions_view_is_the_json_the_digest_always_covered() {
        let body = json!({"name": "big", "matchKind": "action", "matchActionName": "refund",
                          "minAmount": 50, "matchTags": ["a"], "effect": "require_approval",
                          "requiredApprovals": 2});
        let spec = PolicySpec::from_create(body.as_object().unwrap()).unwrap();
        let view = serde_json::to_value(Policy::of_spec(&spec)).unwrap();
        let before = json!({
            "name": "big", "enabled": true, "effect": "require_approval",
            "requiredApprovals": 2, "priority": 0, "matchKind": "action",
            "matchActionName": "refund", "matchAgentId": null, "matchUserId": null,
            "matchTags": ["a"], "minAmount": 50.0, "condition": null, "conditions": null,
            "acknowledgeBroadScope": false, "scope": "specific_action",
            "needsScopeReview": false,
            "match": {"kind": "action", "actionName": "refund", "agentId": null,
                      "userId": null, "tags": ["a"], "minAmount": 50.0, "condition": null},
        });
        assert_eq!(view, before);
        assert_eq!(
            steward_core::fingerprint(&view),
            steward_core::fingerprint(&before)
        );
    }

    #[test]
    fn a_match_result_is_a_word_or_the_reason_it_could_not_tell() {
        assert_eq!(
            serde_json::to_value(MatchResult::Matched).unwrap(),
            json!("matched")
        );
        assert_eq!(
            serde_json::to_value(MatchResult::Undecidable("no field".into())).unwrap(),
            json!({"undecidable": "no field"})
        );
    }
}
