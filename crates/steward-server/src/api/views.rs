//! How records look on the wire: each store record becomes its `steward_wire` view (camelCase
//! JSON, the Anlyon v2 shapes). The view types are also the OpenAPI schemas, so what is built
//! here is what the document describes.

use steward_core::{ActionDefinition, ApprovalStatus, Decision, EffectState, Grade};
use steward_store::{
    ActionRecord, ActionVersion, ApprovalRecord, EffectDetail, EffectRecord, InvocationRecord,
    SecretRecord,
};
use steward_wire as wire;

pub use super::key_names::KeyNames;

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
#[cfg(test)]
pub const ACTION_WIRING_FIELDS: [&str; 6] = [
    "method",
    "urlTemplate",
    "headers",
    "bodyTemplate",
    "adapter",
    "verify",
];

impl ActionView {
    fn apply(self, action: wire::Action) -> wire::Action {
        match self {
            ActionView::Full => action,
            ActionView::Tool => action.without_wiring(),
        }
    }
}

/// A definition not (yet) saved as an action: what `POST /actions/import` reports for each
/// action, including those a dry run would create.
pub fn definition(def: &ActionDefinition, view: ActionView) -> wire::Action {
    view.apply(definition_fields(def))
}

fn definition_fields(def: &ActionDefinition) -> wire::Action {
    wire::Action {
        id: None,
        name: def.name.clone(),
        description: def.description.clone(),
        method: Some(def.url_template.as_ref().map(|_| def.method().to_string())),
        url_template: Some(def.url_template.clone()),
        headers: Some(def.headers.clone()),
        body_template: Some(def.body_template.clone()),
        input_schema: def.input_schema.clone(),
        requires_approval: def.requires_approval,
        approval_expires_in_seconds: def.approval_expires_in_seconds,
        mcp_missing_operation_key: def.mcp_missing_operation_key,
        enabled: def.enabled,
        adapter: Some(def.adapter.clone()),
        impact: def.impact.clone(),
        verify: Some(def.verify.clone()),
        governed: def.is_governed(),
        version: None,
        version_id: None,
        action_id: None,
        created_by: None,
        created_by_name: None,
        created_at: None,
        updated_at: None,
    }
}

pub fn action(a: &ActionRecord, view: ActionView) -> wire::Action {
    view.apply(wire::Action {
        id: Some(a.id.to_string()),
        version: Some(a.version),
        version_id: Some(format!("{}:v{}", a.id, a.version)),
        created_at: Some(a.created_at.to_rfc3339()),
        updated_at: Some(a.updated_at.to_rfc3339()),
        ..definition_fields(&a.definition)
    })
}

pub fn action_version(v: &ActionVersion, view: ActionView, names: &KeyNames) -> wire::Action {
    view.apply(wire::Action {
        id: Some(format!("{}:v{}", v.action_id, v.version)),
        action_id: Some(v.action_id.clone()),
        version: Some(v.version),
        created_at: Some(v.created_at.to_rfc3339()),
        created_by: Some(v.created_by.clone()),
        created_by_name: Some(names.name_opt(v.created_by.as_ref())),
        ..definition_fields(&v.definition)
    })
}

pub fn secret(s: &SecretRecord) -> wire::Secret {
    wire::Secret {
        name: s.name.clone(),
        description: s.description.clone(),
        allowed_hosts: s.allowed_hosts.clone(),
        allowed_placements: s.allowed_placements.clone(),
        version: s.version,
        created_at: s.created_at.to_rfc3339(),
        updated_at: s.updated_at.to_rfc3339(),
    }
}

pub fn invocation(i: &InvocationRecord) -> wire::Invocation {
    let view = wire::Invocation {
        id: i.id.clone(),
        action_id: i.action_id.clone(),
        action: i.action_name.clone(),
        action_name: i.action_name.clone(),
        action_version: i.action_version,
        action_version_id: format!("{}:v{}", i.action_id, i.action_version),
        status: i.state.invocation_status().as_str().to_string(),
        pending_approval: i.state == EffectState::AwaitingApproval,
        approval_id: i.approval_id.clone(),
        input: i.input.clone(),
        operation_key: i.operation_key.clone(),
        run_id: i.run_id.clone(),
        retry_of: i.retry_of.clone(),
        response_status: i.response_status,
        body: i.response_body.clone(),
        error: i.error.clone(),
        decision: i.decision.clone(),
        created_at: i.created_at.to_rfc3339(),
        completed_at: i.completed_at.map(|t| t.to_rfc3339()),
        duration_ms: i.completed_at.map(|t| t.0 - i.created_at.0),
        effect_id: None,
        grade: None,
        outcome: None,
        stage: None,
        unresolved: None,
        elided_fields: None,
        edited_input: None,
        input_edits: None,
        edited_by: None,
        edited_at: None,
        // Recorded by this server as `app::gate::shadow_json` writes it; a record it cannot
        // read is shown without them rather than failing the read.
        shadow_decisions: i
            .shadow_decisions
            .as_ref()
            .and_then(|v| serde_json::from_value(v.clone()).ok()),
        // Filled by the answers that read the holds (`held`).
        held: None,
    };
    let view = match &i.edit {
        Some(edit) => view.edited(wire::InvocationEdit {
            edited_input: edit.input.clone(),
            input_edits: steward_core::input_changes(&i.input, &edit.input)
                .into_iter()
                .map(|c| wire::InputChange {
                    op: c.op.to_string(),
                    path: c.path,
                    before: c.before,
                    after: c.after,
                })
                .collect(),
            edited_by: edit.by.clone(),
            edited_at: edit.at.to_rfc3339(),
        }),
        None => view,
    };
    if !i.governed {
        return view;
    }
    view.governed(wire::Governed {
        effect_id: i.effect_id.clone(),
        grade: Grade::of(i.state).as_str().to_string(),
        outcome: i.state.outcome(),
        stage: i.state.stage(),
        unresolved: i.state.is_unresolved(),
    })
}

/// An invocation as a list shows it: an input or response body the store elided is a link to
/// the invocation read alone (`api/bounded.rs`).
pub fn listed_invocation(i: &InvocationRecord) -> wire::Invocation {
    let mut view = invocation(i);
    let href = format!("/api/v2/actions/invocations/{}", i.id);
    // In the order of the wire's field names, as `bounded::mark_elided` names them.
    let mut elided = Vec::new();
    if let Some(body) = view.body.as_mut() {
        if super::bounded::mark_elided_field(body, &href) {
            elided.push("body".to_string());
        }
    }
    if super::bounded::mark_elided_field(&mut view.input, &href) {
        elided.push("input".to_string());
    }
    if let Some(edited) = view.edited_input.as_mut() {
        if super::bounded::mark_elided_field(edited, &href) {
            elided.push("editedInput".to_string());
        }
        // A change list computed from an elided side would describe the markers: the record
        // read alone has it.
        if elided.iter().any(|f| f == "input" || f == "editedInput") {
            view.input_edits = None;
        }
    }
    if !elided.is_empty() {
        view.elided_fields = Some(elided);
    }
    view
}

pub fn effect(e: &EffectRecord) -> wire::Effect {
    wire::Effect {
        id: e.id.clone(),
        invocation_id: e.invocation_id.clone(),
        action_id: e.action_id.clone(),
        action: e.action_name.clone(),
        operation_key: e.operation_key.clone(),
        outcome: e.state.outcome(),
        stage: e.state.stage(),
        grade: Grade::of(e.state).as_str().to_string(),
        unresolved: e.state.is_unresolved(),
        attempt_count: e.attempt_count,
        external_reference: e.external_reference.clone(),
        provider_idempotency_key: e.provider_idempotency_key.clone(),
        created_at: e.created_at.to_rfc3339(),
        updated_at: e.updated_at.to_rfc3339(),
        attempts: None,
        evidence: None,
        reservations: None,
        preview: None,
        depends_on: None,
        preview_id: None,
        compensates: None,
        compensated_by: None,
    }
}

pub fn effect_detail(d: &EffectDetail, names: &KeyNames) -> wire::Effect {
    let attempts = d
        .attempts
        .iter()
        .map(|a| wire::Attempt {
            number: a.number,
            status: a.status.clone(),
            started_at: a.started_at.to_rfc3339(),
            deadline_at: a.deadline_at.to_rfc3339(),
            finished_at: a.finished_at.map(|t| t.to_rfc3339()),
            response_status: a.response_status,
            error: a.error.clone(),
        })
        .collect();
    let evidence = d
        .evidence
        .iter()
        .map(|e| wire::Evidence {
            seq: e.seq,
            at: e.at.to_rfc3339(),
            kind: e.kind,
            source: e.source,
            message: e.message.clone(),
            data: e.data.clone(),
            actor_key_id: e.actor.clone(),
            actor_key_name: names.name_opt(e.actor.as_ref()),
        })
        .collect();
    let reservations = d
        .reservations
        .iter()
        .map(|r| wire::Reservation {
            limit_id: r.limit_id.clone(),
            limit_name: r.limit_name.clone(),
            amount: r.amount,
            state: r.state.as_str().to_string(),
            window_start: r.window_start.to_rfc3339(),
        })
        .collect();
    let depends_on = d
        .links
        .depends_on
        .iter()
        .map(|dep| wire::Dependency {
            effect: dep.effect.clone(),
            outcome: dep.outcome.as_str().to_string(),
        })
        .collect();
    wire::Effect {
        attempts: Some(attempts),
        evidence: Some(evidence),
        reservations: Some(reservations),
        // Bound, so its status is `used` whenever it is read.
        preview: Some(
            d.preview
                .as_ref()
                .map(|p| super::previews::view(p, p.created_at)),
        ),
        depends_on: Some(depends_on),
        preview_id: Some(d.links.preview.clone()),
        compensates: Some(d.links.compensates.clone()),
        compensated_by: Some(d.links.compensated_by.clone()),
        ..effect(&d.effect)
    }
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

pub fn approval(a: &ApprovalRecord, names: &KeyNames) -> wire::Approval {
    wire::Approval {
        id: a.id.clone(),
        status: a.status.as_str().to_string(),
        title: a.title.clone(),
        description: a.description.clone(),
        payload: a.payload.clone(),
        invocation_id: a.invocation_id.clone(),
        effect_id: a.effect_id.clone(),
        action_id: a.action_id.clone(),
        action_version: a.action_version,
        input_fingerprint: a.input_fingerprint.clone(),
        requested_by: a.requested_by.clone(),
        requested_by_name: names.name(&a.requested_by),
        required_approvals: a.required_approvals,
        decisions: a
            .decisions
            .iter()
            .map(|d| wire::ApprovalDecision {
                key_id: d.key.clone(),
                key_name: names.name(&d.key),
                decision: d.decision,
                note: d.note.clone(),
                at: d.at.to_rfc3339(),
            })
            .collect(),
        decision_origin: a.decision_origin.clone(),
        decision_note: decision_note(a).map(str::to_string),
        decided_at: a.decided_at.map(|t| t.to_rfc3339()),
        expires_at: a.expires_at.map(|t| t.to_rfc3339()),
        run_id: a.run_id.clone(),
        created_at: a.created_at.to_rfc3339(),
        edit: a.edit.as_ref().map(|e| wire::ApprovalEdit {
            edited_by: e.by.clone(),
            edited_by_name: names.name(&e.by),
            edited_at: e.at.to_rfc3339(),
            original_input_fingerprint: e.original_fingerprint.clone(),
        }),
    }
}

/// `view` with `held` set from the hold that parks it, if any (`app::holds::holding`).
pub fn with_hold(
    mut view: wire::Invocation,
    hold: Option<&steward_store::HoldRecord>,
) -> wire::Invocation {
    view.held = hold.map(|h| wire::InvocationHeld {
        hold_id: h.id.to_string(),
        reason: h.reason.clone(),
    });
    view
}

#[cfg(test)]
mod tests {
    //! The views against the `json!` renderings they replaced (kept here as the reference): the
    //! same fields, the same nulls, the same absences.

    use super::*;
    use serde_json::{json, Value};
    use steward_core::{ActionId, EffectId, InvocationId, KeyId, Millis, OperationKey};

    fn definition_json(def: &ActionDefinition) -> Value {
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

    fn action_json(a: &ActionRecord) -> Value {
        let mut v = definition_json(&a.definition);
        v["id"] = json!(a.id);
        v["version"] = json!(a.version);
        v["versionId"] = json!(format!("{}:v{}", a.id, a.version));
        v["createdAt"] = json!(a.created_at.to_rfc3339());
        v["updatedAt"] = json!(a.updated_at.to_rfc3339());
        v
    }

    fn invocation_json(i: &InvocationRecord) -> Value {
        let mut v = json!({
            "id": i.id,
            "actionId": i.action_id,
            "action": i.action_name,
            "actionName": i.action_name,
            "actionVersion": i.action_version,
            "actionVersionId": format!("{}:v{}", i.action_id, i.action_version),
            "status": i.state.invocation_status().as_str(),
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

    fn record(governed: bool, state: EffectState) -> InvocationRecord {
        InvocationRecord {
            id: InvocationId::from_unique("01a"),
            env_id: steward_core::EnvironmentId::from_unique("test"),
            action_id: ActionId::from_unique("01b"),
            action_name: "refund".into(),
            action_version: 3,
            effect_id: EffectId::from_unique("01c"),
            governed,
            state,
            input: json!({"amount": 100}),
            input_fingerprint: "fp".into(),
            operation_key: Some(OperationKey::parse("order-1").unwrap()),
            run_id: None,
            retry_of: None,
            response_status: Some(200),
            response_body: Some(json!({"id": "re_1"})),
            error: None,
            decision: None,
            approval_id: None,
            created_by: KeyId::from_unique("k"),
            created_at: Millis(1_000),
            completed_at: Some(Millis(1_250)),
            parent_span_id: None,
            edit: None,
            shadow_decisions: None,
        }
    }

    fn value<T: serde::Serialize>(view: T) -> Value {
        serde_json::to_value(view).unwrap()
    }

    #[test]
    fn an_invocation_is_written_as_before_governed_or_not() {
        for state in [
            EffectState::Succeeded { confirmed: true },
            EffectState::AwaitingApproval,
            EffectState::Unknown,
        ] {
            for governed in [false, true] {
                let r = record(governed, state);
                assert_eq!(value(invocation(&r)), invocation_json(&r), "{state:?}");
            }
        }
        let plain = value(invocation(&record(
            false,
            EffectState::Succeeded { confirmed: true },
        )));
        assert!(plain.get("effectId").is_none(), "{plain}");
    }

    #[test]
    fn a_listed_invocation_links_its_elided_fields_in_name_order() {
        let mut r = record(true, EffectState::Succeeded { confirmed: false });
        r.input = steward_store::elision_marker(20_000);
        r.response_body = Some(steward_store::elision_marker(30_000));
        let mut expected = invocation_json(&r);
        super::super::bounded::mark_elided(
            &mut expected,
            &format!("/api/v2/actions/invocations/{}", r.id),
        );
        assert_eq!(value(listed_invocation(&r)), expected);
        assert_eq!(expected["elidedFields"], json!(["body", "input"]));
        let whole = record(true, EffectState::Succeeded { confirmed: false });
        assert_eq!(value(listed_invocation(&whole)), invocation_json(&whole));
    }

    #[test]
    fn an_action_is_written_as_before_and_the_tool_view_leaves_out_exactly_the_wiring() {
        let mut definition: ActionDefinition = serde_json::from_value(json!({
            "name": "refund",
            "urlTemplate": "https://example.com/refunds",
            "headers": {"x-a": "b"},
            "bodyTemplate": {"amount": "{{input.amount}}"},
        }))
        .unwrap();
        for expiry in [None, Some(600)] {
            definition.approval_expires_in_seconds = expiry;
            definition.mcp_missing_operation_key =
                expiry.map(|_| steward_core::MissingOperationKey::Refuse);
            let a = ActionRecord {
                id: ActionId::from_unique("01b"),
                env_id: steward_core::EnvironmentId::from_unique("test"),
                name: "refund".into(),
                version: 2,
                definition: definition.clone(),
                created_at: Millis(1),
                updated_at: Millis(2),
            };
            let full = value(action(&a, ActionView::Full));
            assert_eq!(full, action_json(&a));
            let mut without = full.clone();
            for field in ACTION_WIRING_FIELDS {
                without.as_object_mut().unwrap().remove(field);
            }
            assert_eq!(value(action(&a, ActionView::Tool)), without);
            assert_eq!(
                value(definition_view(&definition)),
                definition_json(&definition)
            );
        }
    }

    fn definition_view(def: &ActionDefinition) -> wire::Action {
        definition(def, ActionView::Full)
    }
}
