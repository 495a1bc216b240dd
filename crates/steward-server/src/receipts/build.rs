//! What a receipt says: which sealed audit events are settlements ([`settlement_of`]), and the
//! receipt of one from the records it names ([`receipt`], pure).
//!
//! A settlement is an effect's move into `unknown` or a terminal state (`effect.transition`),
//! or an invocation a policy denied as it was recorded (`invocation.created` in state
//! `denied`: its effect never moves). An `unknown` effect that is later resolved has two
//! settlements, so two receipts.
//!
//! A receipt is built after its settlement committed, from the records as they are then; what it
//! states about the settlement itself comes from the settlement's own event (its state, time and
//! response status) and from the evidence written up to it, so a later resolution does not leak
//! into the receipt of the `unknown` before it.

use crate::api::key_names::KeyNames;
use serde_json::Value;
use steward_core::receipt::{
    json_digest, Receipt, ReceiptApproval, ReceiptDecision, ReceiptPolicy, ReceiptProvider,
    ReceiptRequest, ReceiptSettlement, RECEIPT_TYPE,
};
use steward_core::{EffectId, EffectState, EnvironmentId, EvidenceKind, InvocationId};
use steward_store::{ApprovalRecord, AuditEvent, AuditKind, EffectDetail, InvocationRecord};

/// One settlement, as its sealed audit event records it.
#[derive(Debug, Clone, PartialEq)]
pub struct Settlement {
    pub env: EnvironmentId,
    /// The effect that moved (`effect.transition`); for a policy denial, the invocation's.
    pub effect: Option<EffectId>,
    /// The invocation recorded denied (`invocation.created`); `None` for an effect's move.
    pub invocation: Option<InvocationId>,
    pub from: Option<EffectState>,
    pub to: EffectState,
    pub at: i64,
    pub audit_seq: i64,
    pub response_status: Option<u16>,
}

/// True for the states a move into settles an effect, each move into them once: every terminal
/// state, and `unknown` (settled for now, until a reconcile or a resolution settles it again).
pub fn settles(state: EffectState) -> bool {
    state.is_terminal() || state == EffectState::Unknown
}

/// The settlement a sealed audit event records, if it records one.
pub fn settlement_of(event: &AuditEvent) -> Option<Settlement> {
    let audit_seq = event.seq()?;
    let env = EnvironmentId::parse(event.env_id.as_deref()?).ok()?;
    let state_in = |view: &Option<Value>| {
        view.as_ref()
            .and_then(|v| v.get("state"))
            .and_then(Value::as_str)
            .and_then(EffectState::from_name)
    };
    let to = state_in(&event.after)?;
    let base = Settlement {
        env,
        effect: None,
        invocation: None,
        from: None,
        to,
        at: event.at,
        audit_seq,
        response_status: None,
    };
    match event.audit_kind()? {
        AuditKind::EffectTransition if settles(to) => Some(Settlement {
            effect: Some(EffectId::parse(&event.subject).ok()?),
            from: state_in(&event.before),
            response_status: event
                .after
                .as_ref()
                .and_then(|a| a.get("responseStatus"))
                .and_then(Value::as_u64)
                .and_then(|s| u16::try_from(s).ok()),
            ..base
        }),
        AuditKind::InvocationCreated if to.is_terminal() => Some(Settlement {
            effect: event
                .after
                .as_ref()
                .and_then(|a| a.get("effectId"))
                .and_then(Value::as_str)
                .and_then(|id| EffectId::parse(id).ok()),
            invocation: Some(InvocationId::parse(&event.subject).ok()?),
            ..base
        }),
        _ => None,
    }
}

/// The records a receipt is built from, read after the settlement.
pub struct Facts<'a> {
    pub settlement: &'a Settlement,
    pub detail: &'a EffectDetail,
    pub invocation: &'a InvocationRecord,
    pub approval: Option<&'a ApprovalRecord>,
    pub names: &'a KeyNames,
}

/// Where the receipt goes and who signs it.
pub struct Place<'a> {
    pub sequence: u64,
    pub previous_digest: &'a str,
    pub issued_at: i64,
    pub key_id: &'a str,
}

/// The receipt of one settlement, unsigned.
pub fn receipt(facts: &Facts<'_>, place: &Place<'_>) -> Receipt {
    let (s, inv, effect) = (facts.settlement, facts.invocation, &facts.detail.effect);
    Receipt {
        kind: RECEIPT_TYPE.into(),
        environment_id: s.env.to_string(),
        sequence: place.sequence,
        previous_digest: place.previous_digest.into(),
        issued_at: place.issued_at,
        key_id: place.key_id.into(),
        effect_id: effect.id.to_string(),
        invocation_id: inv.id.to_string(),
        action_id: inv.action_id.to_string(),
        action_name: inv.action_name.clone(),
        action_version: inv.action_version,
        operation_key: inv.operation_key.as_ref().map(|k| k.as_str().to_string()),
        input_digest: inv.input_fingerprint.clone(),
        // An approver's edit (edit-and-approve): the input dispatch rendered the request from.
        edited_input_digest: inv.edit.as_ref().map(|e| e.input_fingerprint.clone()),
        settlement: ReceiptSettlement {
            from: s.from.map(|f| f.name().to_string()),
            state: s.to.name().into(),
            outcome: wire_name(&s.to.outcome()),
            status: wire_name(&s.to.invocation_status()),
            at: s.at,
            audit_seq: s.audit_seq,
        },
        request: request(facts.detail, s.at),
        approval: facts.approval.map(|a| approval(a, facts.names)),
        policies: policies(inv.decision.as_ref()),
        provider: ReceiptProvider {
            response_status: s.response_status,
            reference: effect.external_reference.clone(),
            response_digest: s
                .response_status
                .and(inv.response_body.as_ref())
                .map(json_digest),
        },
        signature: None,
    }
}

/// A wire enum's name, as serde spells it.
fn wire_name(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(s)) => s,
        other => unreachable!("a wire enum serializes as a string, not {other:?}"),
    }
}

/// The last request sent up to `at`: the newest attempt evidence with a request digest.
fn request(detail: &EffectDetail, at: i64) -> Option<ReceiptRequest> {
    detail
        .evidence
        .iter()
        .rev()
        .filter(|e| e.kind == EvidenceKind::Attempt && e.at.0 <= at)
        .find_map(|e| {
            let data = e.data.as_ref()?;
            Some(ReceiptRequest {
                attempt: u32::try_from(data.get("attempt")?.as_u64()?).ok()?,
                digest: data.get("requestDigest")?.as_str()?.to_string(),
            })
        })
}

fn approval(a: &ApprovalRecord, names: &KeyNames) -> ReceiptApproval {
    ReceiptApproval {
        id: a.id.to_string(),
        status: a.status.as_str().into(),
        required_approvals: a.required_approvals,
        decisions: a
            .decisions
            .iter()
            .map(|d| ReceiptDecision {
                key_id: d.key.to_string(),
                key_name: names.name(&d.key),
                decision: wire_name(&d.decision),
                at: d.at.0,
            })
            .collect(),
    }
}

/// The policy version the invocation's recorded decision names (`app::gate::decision_json`).
fn policies(decision: Option<&Value>) -> Vec<ReceiptPolicy> {
    let Some(policy) = decision.and_then(|d| d.get("policy")) else {
        return Vec::new();
    };
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let Some(id) = text(policy, "id") else {
        return Vec::new();
    };
    vec![ReceiptPolicy {
        id,
        name: text(policy, "name"),
        version: policy.get("version").and_then(Value::as_u64),
        effect: decision.and_then(|d| text(d, "effect")),
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use steward_store::ChainLink;

    fn event(kind: &str, subject: &str, before: Value, after: Value) -> AuditEvent {
        AuditEvent {
            id: 1,
            at: 50,
            env_id: Some("env_01hx0000000000000000000000".into()),
            actor: None,
            kind: kind.into(),
            subject: subject.into(),
            before: Some(before),
            after: Some(after),
            content_hash: None,
            link: Some(ChainLink {
                seq: 9,
                prev_hash: String::new(),
                hash: String::new(),
            }),
        }
    }

    #[test]
    fn moves_into_unknown_and_terminal_states_are_settlements_and_others_are_not() {
        let effect = "eff_01hx0000000000000000000001";
        let moved = |from: &str, to: &str| {
            settlement_of(&event(
                "effect.transition",
                effect,
                json!({"state": from}),
                json!({"state": to, "responseStatus": 200}),
            ))
        };
        let unknown = moved("dispatching", "unknown").expect("unknown settles for now");
        assert_eq!(unknown.audit_seq, 9);
        assert_eq!(unknown.response_status, Some(200));
        assert_eq!(unknown.from, Some(EffectState::Dispatching));
        assert!(moved("unknown", "succeeded_confirmed").is_some());
        assert!(moved("awaiting_approval", "expired").is_some());
        assert!(moved("ready", "dispatching").is_none());
        assert!(moved("awaiting_approval", "ready").is_none());
    }

    #[test]
    fn an_invocation_recorded_denied_is_a_settlement_and_one_recorded_parked_is_not() {
        let created = |state: &str| {
            settlement_of(&event(
                "invocation.created",
                "inv_01hx0000000000000000000002",
                json!(null),
                json!({"state": state, "effectId": "eff_01hx0000000000000000000001"}),
            ))
        };
        let denied = created("denied").expect("a policy denial settles");
        assert!(denied.invocation.is_some() && denied.effect.is_some());
        assert_eq!(denied.from, None);
        assert!(created("awaiting_approval").is_none());
        assert!(created("ready").is_none());
    }

    #[test]
    fn an_unsealed_event_is_not_read() {
        let mut e = event(
            "effect.transition",
            "eff_01hx0000000000000000000001",
            json!({"state": "dispatching"}),
            json!({"state": "failed"}),
        );
        e.link = None;
        assert!(settlement_of(&e).is_none());
    }
}
