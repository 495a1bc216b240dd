//! Shadow (log-only) policies on the wire: what each would have decided for an invocation.

use serde::{Deserialize, Serialize};
use steward_core::PolicyId;
use utoipa::ToSchema;

/// What one shadow policy that matched an invocation would have decided, had it been enforced.
/// The call was not affected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShadowDecision {
    #[schema(value_type = String)]
    pub policy_id: PolicyId,
    pub policy_name: String,
    /// The policy version that judged the call.
    pub version: u32,
    /// `require_approval`, `auto_approve` or `auto_deny`.
    pub decision: String,
    /// For `require_approval`: how many approvers it would have asked for.
    pub required_approvals: Option<u32>,
    /// True when its condition could not be evaluated (so it would have required approval).
    pub undecidable: bool,
    pub explanation: String,
}
