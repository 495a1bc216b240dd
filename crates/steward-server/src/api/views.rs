//! How records look on the wire (camelCase JSON, the Anlyon v2 shapes).

use serde_json::{json, Value};
use steward_core::{ActionDefinition, ApprovalStatus, Decision, EffectState, Grade};
use steward_store::{
    ActionRecord, ActionVersion, ApprovalRecord, EffectDetail, EffectRecord, InvocationRecord,
    SecretRecord,
};

/// How much of an action a caller sees. The definition's wiring (URL, headers, body template,
/// adapter configuration and the name of its credential, the verify read-back) is for those who
/// may edit it; an agent choosing a tool sees what it needs to call one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionView {
    /// Everything: keys with `actions:write`.
    Full,
    /// Name, description, inputSchema, impact, requiresApproval, governed, enabled, version.
    Tool,
}

/// The fields only [`ActionView::Full`] shows.
pub const ACTION_WIRING_FIELDS: [&str; 6] = [
    "method",
    "urlTemplate",
    "headers",
    "bodyTemplate",
    "adapter",
    "verify",
];

impl ActionView {
    fn apply(self, mut v: Value) -> Value {
        if self == ActionView::Tool {
            if let Some(map) = v.as_object_mut() {
                for field in ACTION_WIRING_FIELDS {
                    map.remove(field);
                }
            }
        }
        v
    }
}

/// A definition not (yet) saved as an action: what `POST /actions/import` reports for each
/// action, including those a dry run would create.
pub fn definition(def: &ActionDefinition, view: ActionView) -> Value {
    view.apply(definition_fields(def))
}

fn definition_fields(def: &ActionDefinition) -> Value {
    let mut fields = json!({
        "name": def.name,
        "description": def.description,
        "method": def.url_template.as_ref().map(|_| def.method()),
        "urlTemplate": def.url_template,
        "headers": def.headers,
        "bodyTemplate": def.body_template,
        "inputSchema": def.input_schema,
        "requiresApproval": def.requires_approval,
        "enabled": def.enabled,
        "adapter": def.adapter,
        "impact": def.impact,
        "verify": def.verify,
        "governed": def.is_governed(),
    });
    if let Some(seconds) = def.approval_expires_in_seconds {
        fields["approvalExpiresInSeconds"] = json!(seconds);
    }
    if let Some(missing) = def.mcp_missing_operation_key {
        fields["mcpMissingOperationKey"] = json!(missing.as_str());
    }
    fields
}

pub fn action(a: &ActionRecord, view: ActionView) -> Value {
    let mut v = definition_fields(&a.definition);
    v["id"] = json!(a.id);
    v["version"] = json!(a.version);
    v["versionId"] = json!(format!("{}:v{}", a.id, a.version));
    v["createdAt"] = json!(a.created_at.to_rfc3339());
    v["updatedAt"] = json!(a.updated_at.to_rfc3339());
    view.apply(v)
}

pub fn action_version(v: &ActionVersion, view: ActionView) -> Value {
    let mut out = definition_fields(&v.definition);
    out["id"] = json!(format!("{}:v{}", v.action_id, v.version));
    out["actionId"] = json!(v.action_id);
    out["version"] = json!(v.version);
    out["createdAt"] = json!(v.created_at.to_rfc3339());
    out["createdBy"] = json!(v.created_by);
    view.apply(out)
}

pub fn secret(s: &SecretRecord) -> Value {
    json!({
        "name": s.name,
        "description": s.description,
        "allowedHosts": s.allowed_hosts,
        "allowedPlacements": s.allowed_placements,
        "version": s.version,
        "createdAt": s.created_at.to_rfc3339(),
        "updatedAt": s.updated_at.to_rfc3339(),
    })
}

pub fn invocation(i: &InvocationRecord) -> Value {
    let status = i.state.invocation_status();
    let mut v = json!({
        "id": i.id,
        "actionId": i.action_id,
        "action": i.action_name,
        "actionName": i.action_name,
        "actionVersion": i.action_version,
        "actionVersionId": format!("{}:v{}", i.action_id, i.action_version),
        "status": status.as_str(),
        "pendingApproval": i.state == EffectState::AwaitingApproval,
        "approvalId": i.approval_id,
        "input": i.input,
        "operationKey": i.operation_key,
        "runId": i.run_id,
        "retryOf": i.retry_of,
        "responseStatus": i.response_status,
        "body": i.response_body,
        "error": i.error,
        "decision": i.decision,
        "createdAt": i.created_at.to_rfc3339(),
        "completedAt": i.completed_at.map(|t| t.to_rfc3339()),
        "durationMs": i.completed_at.map(|t| t.0 - i.created_at.0),
    });
    if i.governed {
        v["effectId"] = json!(i.effect_id);
        v["grade"] = json!(Grade::of(i.state).as_str());
        v["outcome"] = json!(i.state.outcome());
        v["stage"] = json!(i.state.stage());
        v["unresolved"] = json!(i.state.is_unresolved());
    }
    v
}

/// An invocation as a list shows it: an input or response body the store elided is a link to
/// the invocation read alone (`api/bounded.rs`).
pub fn listed_invocation(i: &InvocationRecord) -> Value {
    let mut v = invocation(i);
    super::bounded::mark_elided(&mut v, &format!("/api/v2/actions/invocations/{}", i.id));
    v
}

pub fn effect(e: &EffectRecord) -> Value {
    json!({
        "id": e.id,
        "invocationId": e.invocation_id,
        "actionId": e.action_id,
        "action": e.action_name,
        "operationKey": e.operation_key,
        "outcome": e.state.outcome(),
        "stage": e.state.stage(),
        "grade": Grade::of(e.state).as_str(),
        "unresolved": e.state.is_unresolved(),
        "attemptCount": e.attempt_count,
        "externalReference": e.external_reference,
        "providerIdempotencyKey": e.provider_idempotency_key,
        "createdAt": e.created_at.to_rfc3339(),
        "updatedAt": e.updated_at.to_rfc3339(),
    })
}

pub fn effect_detail(d: &EffectDetail) -> Value {
    let mut v = effect(&d.effect);
    v["attempts"] = d
        .attempts
        .iter()
        .map(|a| {
            json!({
                "number": a.number,
                "status": a.status,
                "startedAt": a.started_at.to_rfc3339(),
                "deadlineAt": a.deadline_at.to_rfc3339(),
                "finishedAt": a.finished_at.map(|t| t.to_rfc3339()),
                "responseStatus": a.response_status,
                "error": a.error,
            })
        })
        .collect();
    v["evidence"] = d
        .evidence
        .iter()
        .map(|e| {
            json!({
                "seq": e.seq,
                "at": e.at.to_rfc3339(),
                "kind": e.kind,
                "source": e.source,
                "message": e.message,
                "data": e.data,
                "actorKeyId": e.actor,
            })
        })
        .collect();
    v["reservations"] = d
        .reservations
        .iter()
        .map(|r| {
            json!({
                "limitId": r.limit_id,
                "limitName": r.limit_name,
                "amount": r.amount,
                "state": r.state.as_str(),
                "windowStart": r.window_start.to_rfc3339(),
            })
        })
        .collect();
    v["preview"] = match &d.preview {
        // Bound, so its status is `used` whenever it is read.
        Some(p) => super::previews::view(p, p.created_at),
        None => Value::Null,
    };
    v["dependsOn"] = d
        .links
        .depends_on
        .iter()
        .map(|dep| json!({"effect": dep.effect, "outcome": dep.outcome.as_str()}))
        .collect();
    v["previewId"] = json!(d.links.preview);
    v["compensates"] = json!(d.links.compensates);
    v["compensatedBy"] = json!(d.links.compensated_by);
    v
}

/// The note of the decision that settled the approval (the last deny of a denied one, the last
/// approval of an approved one); `null` while pending, for an expiry, or when no one wrote one.
pub fn decision_note(a: &ApprovalRecord) -> Option<&str> {
    let settling = match a.status {
        ApprovalStatus::Approved => Decision::Approve,
        ApprovalStatus::Denied => Decision::Deny,
        ApprovalStatus::Pending | ApprovalStatus::Expired => return None,
    };
    a.decisions
        .iter()
        .rev()
        .find(|d| d.decision == settling)
        .and_then(|d| d.note.as_deref())
}

pub fn approval(a: &ApprovalRecord) -> Value {
    json!({
        "id": a.id,
        "status": a.status.as_str(),
        "title": a.title,
        "description": a.description,
        "payload": a.payload,
        "invocationId": a.invocation_id,
        "effectId": a.effect_id,
        "actionId": a.action_id,
        "actionVersion": a.action_version,
        "inputFingerprint": a.input_fingerprint,
        "requestedBy": a.requested_by,
        "requiredApprovals": a.required_approvals,
        "decisions": a.decisions.iter().map(|d| json!({
            "keyId": d.key,
            "decision": d.decision,
            "note": d.note,
            "at": d.at.to_rfc3339(),
        })).collect::<Vec<_>>(),
        "decisionOrigin": a.decision_origin,
        "decisionNote": decision_note(a),
        "decidedAt": a.decided_at.map(|t| t.to_rfc3339()),
        "expiresAt": a.expires_at.map(|t| t.to_rfc3339()),
        "runId": a.run_id,
        "createdAt": a.created_at.to_rfc3339(),
    })
}
