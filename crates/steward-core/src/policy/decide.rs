//! Deciding a request against a policy set: order the enabled policies, and the first one that
//! matches decides. A policy that cannot tell whether it matches (its condition could not be
//! evaluated) decides "approval required".

use super::condition::{holds, ConditionInput};
use super::spec::{MatchKind, PolicyEffect, PolicyMode, PolicySpec};
use crate::ids::PolicyId;
use crate::time::Millis;
use serde_json::Value;
use std::cmp::Reverse;

/// One live policy version, as the evaluator sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub id: PolicyId,
    pub version: u32,
    pub created_at: Millis,
    pub spec: PolicySpec,
}

/// What kind of request is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// An action invocation.
    Action,
    /// A custom approval request.
    Custom,
}

/// The facts of one request that policies match on.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    pub kind: RequestKind,
    pub action_name: Option<&'a str>,
    /// The agent's identity. In Steward the key is the agent's credential, so this is the
    /// invoking key's id.
    pub agent_id: Option<&'a str>,
    pub user_id: Option<&'a str>,
    pub tags: &'a [String],
    /// The request's money amount in minor units, when it has one.
    pub amount: Option<f64>,
    pub input: &'a Value,
}

/// Which policy decided, as recorded on the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRef {
    pub id: PolicyId,
    pub name: String,
    pub version: u32,
}

/// A policy's decision for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyDecision {
    pub effect: PolicyEffect,
    /// Distinct approvers needed when `effect` is `RequireApproval`.
    pub required_approvals: u32,
    pub policy: PolicyRef,
    /// True when the policy could not evaluate its condition and so requires approval.
    pub undecidable: bool,
    pub explanation: String,
}

/// Whether one policy matches one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    No,
    Yes,
    /// The policy cannot tell (its condition failed to evaluate); the reason says why.
    Undecidable(String),
}

/// Evaluation order: higher priority first; at equal priority the stricter effect first; then
/// the older policy; then the id, so the order is total and stable.
pub fn order(policies: &mut [Policy]) {
    policies.sort_by_key(|p| {
        (
            Reverse(p.spec.priority),
            Reverse(p.spec.effect.severity()),
            p.created_at,
            p.id.clone(),
        )
    });
}

/// Does `spec` match `facts`? Disabled policies never match.
pub fn matches(spec: &PolicySpec, facts: &Facts<'_>) -> Match {
    if !spec.enabled {
        return Match::No;
    }
    let kind_matches = match (spec.match_kind, facts.kind) {
        (MatchKind::Any, _) => true,
        (MatchKind::Action, RequestKind::Action) => true,
        (MatchKind::Custom, RequestKind::Custom) => true,
        (MatchKind::Action, RequestKind::Custom) | (MatchKind::Custom, RequestKind::Action) => {
            false
        }
    };
    let equal = |wanted: &Option<String>, got: Option<&str>| {
        wanted.as_deref().is_none_or(|w| got == Some(w))
    };
    let tags_match = spec
        .match_tags
        .as_ref()
        .is_none_or(|wanted| wanted.iter().all(|t| facts.tags.contains(t)));
    let amount_matches = spec
        .min_amount
        .is_none_or(|min| facts.amount.is_some_and(|a| a >= min));
    if !(kind_matches
        && equal(&spec.match_action_name, facts.action_name)
        && equal(&spec.match_agent_id, facts.agent_id)
        && equal(&spec.match_user_id, facts.user_id)
        && tags_match
        && amount_matches)
    {
        return Match::No;
    }
    let condition = match spec.effective_condition() {
        Ok(Some(condition)) => condition,
        Ok(None) => return Match::Yes,
        Err(reason) => return Match::Undecidable(reason),
    };
    let input = ConditionInput {
        input: facts.input,
        action: facts.action_name,
        agent_id: facts.agent_id,
        amount: facts.amount,
    };
    match holds(&condition, &input) {
        Ok(true) => Match::Yes,
        Ok(false) => Match::No,
        Err(reason) => Match::Undecidable(reason),
    }
}

/// Decides one request: the first enforced policy in evaluation order that matches (or cannot
/// tell) decides. `None` when no policy applies. Shadow policies ([`PolicyMode::Shadow`]) never
/// decide; [`shadow`] says what they would have.
pub fn decide(policies: &[Policy], facts: &Facts<'_>) -> Option<PolicyDecision> {
    let mut ordered: Vec<Policy> = policies
        .iter()
        .filter(|p| p.spec.mode == PolicyMode::Enforce)
        .cloned()
        .collect();
    order(&mut ordered);
    ordered.iter().find_map(|p| verdict(p, facts))
}

/// What each shadow policy that matches the request (or cannot tell) would decide if it were
/// enforced, in evaluation order: recorded on the request and counted, never acted on. Each is
/// judged on its own, as if it were the only policy: the question an operator asks of a
/// candidate policy is "what would it do to this call".
pub fn shadow(policies: &[Policy], facts: &Facts<'_>) -> Vec<PolicyDecision> {
    let mut ordered: Vec<Policy> = policies
        .iter()
        .filter(|p| p.spec.mode == PolicyMode::Shadow)
        .cloned()
        .collect();
    order(&mut ordered);
    ordered.iter().filter_map(|p| verdict(p, facts)).collect()
}

/// What `p` decides for `facts`, if it matches or cannot tell.
fn verdict(p: &Policy, facts: &Facts<'_>) -> Option<PolicyDecision> {
    {
        let reference = PolicyRef {
            id: p.id.clone(),
            name: p.spec.name.clone(),
            version: p.version,
        };
        match matches(&p.spec, facts) {
            Match::No => None,
            Match::Yes => Some(PolicyDecision {
                effect: p.spec.effect,
                required_approvals: p.spec.required_approvals,
                undecidable: false,
                explanation: format!(
                    "policy \"{}\" (version {}) matched: {}",
                    p.spec.name,
                    p.version,
                    p.spec.effect.as_str()
                ),
                policy: reference,
            }),
            Match::Undecidable(reason) => Some(PolicyDecision {
                effect: PolicyEffect::RequireApproval,
                required_approvals: p.spec.required_approvals,
                undecidable: true,
                explanation: format!(
                    "policy \"{}\" (version {}) could not evaluate its condition ({reason}); approval is required",
                    p.spec.name, p.version
                ),
                policy: reference,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn policy(n: u32, spec: serde_json::Value) -> Policy {
        let Value::Object(body) = spec else { panic!() };
        Policy {
            id: PolicyId::from_unique(&format!("p{n:03}")),
            version: 1,
            created_at: Millis(i64::from(n)),
            spec: PolicySpec::from_create(&body).expect("valid"),
        }
    }

    fn facts<'a>(input: &'a Value, amount: Option<f64>) -> Facts<'a> {
        Facts {
            kind: RequestKind::Action,
            action_name: Some("refund"),
            agent_id: Some("key_a"),
            user_id: None,
            tags: &[],
            amount,
            input,
        }
    }

    #[test]
    fn matcher_table() {
        let input = json!({"amount": 700, "currency": "USD"});
        let f = facts(&input, Some(700.0));
        let cases = [
            (json!({"name": "a", "matchKind": "any"}), Match::Yes),
            (json!({"name": "a", "matchKind": "action"}), Match::Yes),
            (json!({"name": "a", "matchKind": "custom"}), Match::No),
            (
                json!({"name": "a", "matchKind": "action", "matchActionName": "refund"}),
                Match::Yes,
            ),
            (
                json!({"name": "a", "matchKind": "action", "matchActionName": "other"}),
                Match::No,
            ),
            (
                json!({"name": "a", "matchKind": "action", "matchAgentId": "key_a"}),
                Match::Yes,
            ),
            (
                json!({"name": "a", "matchKind": "action", "matchAgentId": "key_b"}),
                Match::No,
            ),
            (
                json!({"name": "a", "matchKind": "action", "matchUserId": "u1"}),
                Match::No,
            ),
            (
                json!({"name": "a", "matchKind": "action", "matchTags": ["vip"]}),
                Match::No,
            ),
            (
                json!({"name": "a", "matchKind": "action", "minAmount": 700}),
                Match::Yes,
            ),
            (
                json!({"name": "a", "matchKind": "action", "minAmount": 701}),
                Match::No,
            ),
            (
                json!({"name": "a", "matchKind": "action", "condition": "input.amount > 500"}),
                Match::Yes,
            ),
            (
                json!({"name": "a", "matchKind": "action", "condition": "input.amount > 900"}),
                Match::No,
            ),
            (
                json!({"name": "a", "matchKind": "action", "enabled": false}),
                Match::No,
            ),
        ];
        for (spec, expected) in cases {
            let p = policy(1, spec.clone());
            assert_eq!(matches(&p.spec, &f), expected, "{spec}");
        }
        let p = policy(
            1,
            json!({"name": "a", "matchKind": "action", "condition": "input.missing > 1"}),
        );
        assert!(matches!(matches(&p.spec, &f), Match::Undecidable(_)));
        let no_amount = facts(&input, None);
        let p = policy(
            1,
            json!({"name": "a", "matchKind": "action", "minAmount": 1}),
        );
        assert_eq!(matches(&p.spec, &no_amount), Match::No);
    }

    #[test]
    fn the_first_policy_in_order_decides() {
        let input = json!({"amount": 700});
        let f = facts(&input, Some(700.0));
        let approve = policy(
            1,
            json!({"name": "approve", "matchKind": "action", "matchActionName": "refund", "effect": "auto_approve", "priority": 5}),
        );
        let deny = policy(
            2,
            json!({"name": "deny", "matchKind": "action", "matchActionName": "refund", "effect": "auto_deny", "priority": 5}),
        );
        let gate = policy(
            3,
            json!({"name": "gate", "matchKind": "action", "requiredApprovals": 2, "priority": 9}),
        );
        // Higher priority wins.
        let d = decide(&[approve.clone(), deny.clone(), gate.clone()], &f).unwrap();
        assert_eq!(d.effect, PolicyEffect::RequireApproval);
        assert_eq!(d.required_approvals, 2);
        assert_eq!(d.policy.name, "gate");
        // At equal priority the stricter effect wins, whatever the input order.
        let d = decide(&[approve.clone(), deny.clone()], &f).unwrap();
        assert_eq!(d.effect, PolicyEffect::AutoDeny);
        let d = decide(&[deny.clone(), approve.clone()], &f).unwrap();
        assert_eq!(d.policy.id, deny.id);
        assert_eq!(decide(&[], &f), None);
    }

    #[test]
    fn an_undecidable_condition_requires_approval_whatever_the_effect() {
        let input = json!({});
        let f = facts(&input, None);
        let p = policy(
            1,
            json!({"name": "big", "matchKind": "action", "matchActionName": "refund", "effect": "auto_deny", "condition": "input.amount > 5", "requiredApprovals": 3}),
        );
        let d = decide(&[p], &f).unwrap();
        assert_eq!(d.effect, PolicyEffect::RequireApproval);
        assert!(d.undecidable);
        assert_eq!(d.required_approvals, 3);
        assert!(
            d.explanation.contains("approval is required"),
            "{}",
            d.explanation
        );
    }

    proptest! {
        /// The decision never depends on the order policies are handed in.
        #[test]
        fn decision_is_independent_of_input_order(
            specs in proptest::collection::vec((0i64..3, 0usize..3, proptest::bool::ANY), 1..8),
            rotate in 0usize..8,
        ) {
            let effects = ["require_approval", "auto_approve", "auto_deny"];
            let policies: Vec<Policy> = specs.iter().enumerate().map(|(i, (priority, effect, named))| {
                let mut spec = json!({"name": format!("p{i}"), "matchKind": "action", "effect": effects[*effect], "priority": priority, "acknowledgeBroadScope": true});
                if *named { spec["matchActionName"] = json!("refund"); }
                policy(i as u32, spec)
            }).collect();
            let input = json!({});
            let f = facts(&input, None);
            let mut rotated = policies.clone();
            let len = rotated.len();
            rotated.rotate_left(rotate % len);
            prop_assert_eq!(decide(&policies, &f), decide(&rotated, &f));
            // And it is the highest-priority, strictest policy.
            let d = decide(&policies, &f).unwrap();
            let top = policies.iter().map(|p| (p.spec.priority, p.spec.effect.severity())).max().unwrap();
            prop_assert_eq!((d.effect.severity(), policies.iter().find(|p| p.id == d.policy.id).unwrap().spec.priority), (top.1, top.0));
        }
    }
}
