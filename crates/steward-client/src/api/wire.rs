//! The records the API returns, with the exact camelCase field names of the `/api/v2` contract.
//! Each keeps the whole JSON object too (`raw`), so nothing the server said is lost when it is
//! saved in the journal.

use serde::Deserialize;
use serde_json::Value;
use steward_core::{ApprovalId, EffectId, InvocationId, InvocationStatus};

/// One invocation as it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    pub id: InvocationId,
    pub status: InvocationStatus,
    pub pending_approval: bool,
    pub approval_id: Option<ApprovalId>,
    /// Present for governed (adapter) actions.
    pub effect_id: Option<EffectId>,
    pub operation_key: Option<String>,
    /// The provider's response body, secrets scrubbed.
    pub body: Option<Value>,
    pub error: Option<Value>,
    pub raw: Value,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InvocationFields {
    id: InvocationId,
    status: InvocationStatus,
    #[serde(default)]
    pending_approval: bool,
    approval_id: Option<ApprovalId>,
    effect_id: Option<EffectId>,
    operation_key: Option<String>,
    body: Option<Value>,
    error: Option<Value>,
}

impl Invocation {
    pub fn from_json(raw: Value) -> Result<Invocation, String> {
        let f: InvocationFields =
            serde_json::from_value(raw.clone()).map_err(|e| format!("invocation: {e}"))?;
        Ok(Invocation {
            id: f.id,
            status: f.status,
            pending_approval: f.pending_approval,
            approval_id: f.approval_id,
            effect_id: f.effect_id,
            operation_key: f.operation_key,
            body: f.body,
            error: f.error,
            raw,
        })
    }
}

/// An approval's decision status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Denied,
    Expired,
}

/// One approval request.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    pub id: ApprovalId,
    pub status: ApprovalStatus,
    pub invocation_id: Option<InvocationId>,
    /// Every decision so far (`keyId`, `decision`, `note`, `at`).
    pub decisions: Vec<Value>,
    pub raw: Value,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApprovalFields {
    id: ApprovalId,
    status: ApprovalStatus,
    invocation_id: Option<InvocationId>,
    #[serde(default)]
    decisions: Vec<Value>,
}

impl Approval {
    pub fn from_json(raw: Value) -> Result<Approval, String> {
        let f: ApprovalFields =
            serde_json::from_value(raw.clone()).map_err(|e| format!("approval: {e}"))?;
        Ok(Approval {
            id: f.id,
            status: f.status,
            invocation_id: f.invocation_id,
            decisions: f.decisions,
            raw,
        })
    }
}

/// What `POST .../effects/{id}/reconcile` did.
#[derive(Debug, Clone, PartialEq)]
pub enum Reconcile {
    /// The server ran a read-only reconcile; its answer.
    Ran(Value),
    /// This server has no reconcile endpoint (404): reconciliation stays a local assignment.
    NotAvailable,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn invocation_fields_use_the_wire_names() {
        let raw = json!({
            "id": "inv_1", "status": "pending_approval", "pendingApproval": true,
            "approvalId": "apr_1", "effectId": "eff_1", "operationKey": "k", "body": null,
            "error": null, "grade": "pending"
        });
        let inv = Invocation::from_json(raw.clone()).unwrap();
        assert_eq!(inv.status, InvocationStatus::PendingApproval);
        assert!(inv.pending_approval);
        assert_eq!(inv.approval_id.unwrap().as_str(), "apr_1");
        assert_eq!(inv.raw, raw);
        assert!(Invocation::from_json(json!({"id": "eff_1", "status": "running"})).is_err());
    }

    #[test]
    fn approval_fields_use_the_wire_names() {
        let a = Approval::from_json(json!({
            "id": "apr_1", "status": "approved", "invocationId": "inv_1",
            "decisions": [{"keyId": "key_1", "decision": "approve"}]
        }))
        .unwrap();
        assert_eq!(a.status, ApprovalStatus::Approved);
        assert_eq!(a.decisions.len(), 1);
    }
}
