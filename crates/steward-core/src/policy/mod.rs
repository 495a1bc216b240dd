//! Approval policies: environment-scoped rules that decide whether a request needs a human
//! decision, is approved, or is denied, before anything is recorded or sent.
//!
//! A policy targets requests ([`MatchKind`], an action name), narrows them (agent, user, tags,
//! a minimum amount, a CEL `condition` over the input), and has one [`PolicyEffect`]. [`decide`]
//! orders the enabled policies (higher `priority` first, then the stricter effect, then the
//! older policy) and lets the first match decide:
//!
//! ```
//! use serde_json::json;
//! use steward_core::policy::{decide, Facts, Policy, PolicyEffect, PolicySpec, RequestKind};
//! use steward_core::{Millis, PolicyId};
//!
//! let body = json!({"name": "big refunds", "matchKind": "action", "matchActionName": "refund",
//!                   "condition": "input.amount >= 500", "requiredApprovals": 2});
//! let spec = PolicySpec::from_create(body.as_object().unwrap()).unwrap();
//! let policy = Policy { id: PolicyId::from_unique("01"), version: 1, created_at: Millis(0), spec };
//! let input = json!({"amount": 900});
//! let facts = Facts { kind: RequestKind::Action, action_name: Some("refund"), agent_id: None,
//!                     user_id: None, tags: &[], amount: Some(900.0), input: &input };
//! let decision = decide(&[policy], &facts).unwrap();
//! assert_eq!(decision.effect, PolicyEffect::RequireApproval);
//! assert_eq!(decision.required_approvals, 2);
//! ```

mod condition;
mod conditions;
mod decide;
mod spec;

pub use condition::{check as check_condition, CONDITION_LEN_MAX, CONDITION_VARIABLES};
pub use conditions::{
    compile as compile_conditions, CONDITIONS_DEPTH_MAX, CONDITIONS_LIST_MAX, CONDITIONS_NODES_MAX,
    CONDITIONS_PATH_SEGMENTS_MAX, CONDITIONS_STRING_MAX,
};
pub use decide::{
    decide, matches, order, shadow, Facts, Match, Policy, PolicyDecision, PolicyRef, RequestKind,
};
pub use spec::{
    MatchKind, PolicyEffect, PolicyMode, PolicyScope, PolicySpec, MATCH_TAGS_MAX,
    POLICY_NAME_LEN_MAX, PRIORITY_ABS_MAX, REQUIRED_APPROVALS_MAX, SPEC_FIELDS,
};
