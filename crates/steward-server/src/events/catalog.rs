//! Which audit actions are public events, under which type, and what they carry.
//!
//! The mapping is a pure function of one sealed audit event: the stream and the webhooks call
//! it, and a table test below walks every action name.

use serde_json::{json, Map, Value};
use steward_core::Millis;
use steward_store::{AuditEvent, AuditKind};

/// Every event type Steward publishes, by family: what `eventTypes` filters may name, and the
/// built-in topics' contents (`webhooks`).
pub(crate) const EVENT_TYPES: &[&str] = &[
    "run.started",
    "run.ended",
    "approval.requested",
    "approval.decided",
    "approval.expired",
    "effect.dispatched",
    "effect.settled",
    "effect.unknown",
    "effect.resolved",
    "environment.halted",
    "environment.resumed",
];

/// The event id of the sealed event at `seq`.
pub(crate) fn event_id(seq: i64) -> String {
    format!("evt_{seq}")
}

/// The `seq` an event id (`evt_<seq>`, or the bare number the stream's `id:` lines carry)
/// names; `None` for anything else.
pub(crate) fn parse_event_id(text: &str) -> Option<i64> {
    let digits = text.strip_prefix("evt_").unwrap_or(text);
    if digits.is_empty() || digits.len() > 18 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The public event type of a sealed audit event, or `None` for actions that are not published
/// (configuration changes, impact bookkeeping, intermediate effect states).
fn public_type(event: &AuditEvent) -> Option<&'static str> {
    let after = |field: &str| {
        event
            .after
            .as_ref()
            .and_then(|a| a.get(field))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let before_state = event
        .before
        .as_ref()
        .and_then(|b| b.get("state"))
        .and_then(Value::as_str);
    let settled = |to: &str| {
        matches!(
            to,
            "succeeded_confirmed"
                | "succeeded_acknowledged"
                | "failed"
                | "denied"
                | "expired"
                | "refused"
        )
    };
    match event.audit_kind()? {
        AuditKind::RunStarted => Some("run.started"),
        AuditKind::RunEnded => Some("run.ended"),
        AuditKind::ApprovalRequested => Some("approval.requested"),
        AuditKind::ApprovalSettled => match after("status").as_deref() {
            Some("expired") => Some("approval.expired"),
            Some("approved" | "denied") => Some("approval.decided"),
            _ => None,
        },
        AuditKind::EffectTransition => match after("state").as_deref() {
            Some("dispatching") => Some("effect.dispatched"),
            Some("unknown") => Some("effect.unknown"),
            Some(to) if settled(to) && before_state == Some("unknown") => Some("effect.resolved"),
            Some(to) if settled(to) => Some("effect.settled"),
            // `ready`, `awaiting_approval`: steps on the way, not news.
            _ => None,
        },
        AuditKind::EnvironmentHalted => Some("environment.halted"),
        AuditKind::EnvironmentResumed => Some("environment.resumed"),
        // Configuration changes, impact bookkeeping, ballots, sessions, deliveries: not
        // published. Listed one by one, so a new kind is a decision here.
        AuditKind::ActionCreated
        | AuditKind::ActionDeleted
        | AuditKind::ActionUpdated
        | AuditKind::ApprovalDecision
        | AuditKind::ApprovalEdited
        | AuditKind::BudgetDeleted
        | AuditKind::BudgetPut
        | AuditKind::BudgetRefused
        | AuditKind::BudgetReserved
        | AuditKind::ConnectionChecked
        | AuditKind::ConnectionConnected
        | AuditKind::ConnectionSessionClaimed
        | AuditKind::ConnectionSessionCreated
        | AuditKind::ConnectionSessionSettled
        | AuditKind::ConsoleSessionEnded
        | AuditKind::ConsoleSessionStarted
        | AuditKind::EffectEvidence
        | AuditKind::EffectTakenOver
        | AuditKind::EnvironmentCreated
        | AuditKind::EnvironmentUpdated
        | AuditKind::HoldCreated
        | AuditKind::HoldReleased
        | AuditKind::ImpactActual
        | AuditKind::ImpactRefused
        | AuditKind::ImpactReserved
        | AuditKind::ImpactSettled
        | AuditKind::ImpactLimitArchived
        | AuditKind::ImpactLimitCreated
        | AuditKind::ImpactLimitUpdated
        | AuditKind::InvocationCreated
        | AuditKind::KeyCreated
        | AuditKind::KeyRevoked
        | AuditKind::KeyRotated
        | AuditKind::PolicyCreated
        | AuditKind::PolicyDeleted
        | AuditKind::PolicyUpdated
        | AuditKind::PreviewCreated
        | AuditKind::ReceiptKeyCreated
        | AuditKind::RunFeedbackAdded
        | AuditKind::RunSpansIngested
        | AuditKind::RunUpdated
        | AuditKind::SecretCreated
        | AuditKind::SecretDeleted
        | AuditKind::SecretRotated
        | AuditKind::VaultKeyCheckRecorded
        | AuditKind::WebhookDeadLettered
        | AuditKind::WebhookRedelivered
        | AuditKind::WebhookRedeliveryFailed
        | AuditKind::WebhookRedeliveryRequested
        | AuditKind::WebhookSubscriptionCreated
        | AuditKind::WebhookSubscriptionDeleted
        | AuditKind::WebhookSubscriptionUpdated => None,
    }
}

/// The field naming the event's subject in `data`.
fn subject_field(kind: &str) -> &'static str {
    match kind.split('.').next() {
        Some("run") => "runId",
        Some("approval") => "approvalId",
        Some("effect") => "effectId",
        _ => "environmentId",
    }
}

/// The public event for a sealed audit event of environment `env`, or `None` when it is not
/// published or belongs to another environment. `data` holds the subject's id and the audit
/// record's `after` fields (which by invariant 8 never hold a secret), with `previous` from
/// `before`.
pub(crate) fn public_event(env: &str, event: &AuditEvent) -> Option<(i64, Value)> {
    let seq = event.seq()?;
    if event.env_id.as_deref() != Some(env) {
        return None;
    }
    let kind = public_type(event)?;
    let mut data = Map::new();
    data.insert(subject_field(kind).into(), json!(event.subject));
    if let Some(Value::Object(after)) = &event.after {
        for (k, v) in after {
            data.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    if let Some(before) = &event.before {
        data.insert("previous".into(), before.clone());
    }
    Some((
        seq,
        json!({
            "id": event_id(seq),
            "type": kind,
            "environmentId": env,
            "createdAt": Millis(event.at).to_rfc3339(),
            "data": data,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_store::ChainLink;

    fn sealed(kind: &str, before: Option<Value>, after: Option<Value>) -> AuditEvent {
        AuditEvent {
            id: 7,
            at: 1_700_000_000_000,
            env_id: Some("env_a".into()),
            actor: None,
            kind: kind.into(),
            subject: "sub_1".into(),
            before,
            after,
            content_hash: None,
            link: Some(ChainLink {
                seq: 42,
                prev_hash: String::new(),
                hash: String::new(),
            }),
        }
    }

    fn type_of(kind: &str, before: Option<Value>, after: Option<Value>) -> Option<String> {
        public_event("env_a", &sealed(kind, before, after))
            .map(|(_, e)| e["type"].as_str().unwrap().to_string())
    }

    #[test]
    fn every_published_action_maps_to_its_type() {
        let state = |s: &str| Some(json!({ "state": s }));
        let status = |s: &str| Some(json!({ "status": s }));
        /// An audit action with its `before` and `after`, and the type it publishes as.
        type Case<'a> = (&'a str, Option<Value>, Option<Value>, Option<&'a str>);
        let cases: Vec<Case> = vec![
            ("run.started", None, None, Some("run.started")),
            ("run.ended", None, None, Some("run.ended")),
            ("approval.requested", None, None, Some("approval.requested")),
            (
                "approval.settled",
                None,
                status("approved"),
                Some("approval.decided"),
            ),
            (
                "approval.settled",
                None,
                status("denied"),
                Some("approval.decided"),
            ),
            (
                "approval.settled",
                None,
                status("expired"),
                Some("approval.expired"),
            ),
            ("approval.decision", None, None, None),
            (
                "effect.transition",
                state("ready"),
                state("dispatching"),
                Some("effect.dispatched"),
            ),
            (
                "effect.transition",
                state("dispatching"),
                state("unknown"),
                Some("effect.unknown"),
            ),
            (
                "effect.transition",
                state("dispatching"),
                state("failed"),
                Some("effect.settled"),
            ),
            (
                "effect.transition",
                state("awaiting_approval"),
                state("denied"),
                Some("effect.settled"),
            ),
            (
                "effect.transition",
                state("unknown"),
                state("succeeded_confirmed"),
                Some("effect.resolved"),
            ),
            (
                "effect.transition",
                state("awaiting_approval"),
                state("ready"),
                None,
            ),
            ("environment.halted", None, None, Some("environment.halted")),
            (
                "environment.resumed",
                None,
                None,
                Some("environment.resumed"),
            ),
            ("secret.deleted", None, None, None),
            ("key.created", None, None, None),
        ];
        for (kind, before, after, expected) in cases {
            assert_eq!(type_of(kind, before, after).as_deref(), expected, "{kind}");
        }
    }

    #[test]
    fn every_audit_kind_is_published_or_not_by_its_name_alone_unless_it_carries_a_state() {
        let published_bare = [
            "run.started",
            "run.ended",
            "approval.requested",
            "environment.halted",
            "environment.resumed",
        ];
        for kind in AuditKind::ALL {
            let name = kind.as_str();
            let expected = published_bare.contains(&name).then_some(name);
            assert_eq!(type_of(name, None, None).as_deref(), expected, "{name}");
        }
        assert_eq!(type_of("effect.moved", None, None), None);
    }

    #[test]
    fn another_environments_or_an_unsealed_event_is_not_published() {
        let mut e = sealed("run.started", None, None);
        assert!(public_event("env_b", &e).is_none());
        e.link = None;
        assert!(public_event("env_a", &e).is_none());
    }

    #[test]
    fn an_event_carries_its_id_subject_and_fields() {
        let e = sealed(
            "effect.transition",
            Some(json!({"state": "dispatching"})),
            Some(json!({"state": "unknown", "attempt": 1})),
        );
        let (seq, v) = public_event("env_a", &e).unwrap();
        assert_eq!(seq, 42);
        assert_eq!(v["id"], "evt_42");
        assert_eq!(v["data"]["effectId"], "sub_1");
        assert_eq!(v["data"]["attempt"], 1);
        assert_eq!(v["data"]["previous"]["state"], "dispatching");
    }

    #[test]
    fn event_ids_round_trip_and_refuse_junk() {
        assert_eq!(parse_event_id(&event_id(12)), Some(12));
        assert_eq!(parse_event_id("12"), Some(12));
        for junk in ["", "evt_", "evt_-1", "abc", "1e3", "9999999999999999999"] {
            assert_eq!(parse_event_id(junk), None, "{junk}");
        }
    }
}
