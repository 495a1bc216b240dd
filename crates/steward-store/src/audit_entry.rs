//! The audit events the store writes: their kinds, a closed list ([`AuditKind`]), and the
//! entries built from the records they describe ([`AuditEntry`]).
//!
//! Every write appends its events in its own transaction. Which event, about which subject and
//! with which `before` and `after`, is decided here, once for every backend; a backend only
//! stores what it is handed (`sqlite/audit_log.rs::append`, `postgres/audit_log.rs::append`).

use crate::audit::content_hash;
use crate::records::{Actor, AuditEvent};
use serde_json::{json, Value};
use steward_core::impact::ReservationState;

/// Declares [`AuditKind`] with its stored names, in one list.
macro_rules! audit_kinds {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)+) => {
        /// What an audit event records: the closed list of the kinds the store writes, stored
        /// by their dotted names (`effect.transition`). The public events (`steward-server`'s
        /// `events/`) are derived from some of them.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum AuditKind {
            $($(#[$doc])* $variant,)+
        }

        impl AuditKind {
            /// Every kind, in declaration order.
            pub const ALL: &'static [AuditKind] = &[$(AuditKind::$variant,)+];

            /// The stored name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(AuditKind::$variant => $name,)+
                }
            }

            /// The kind a stored name names; `None` for a name outside the list (an event
            /// written by a newer or older Steward).
            pub fn parse(name: &str) -> Option<AuditKind> {
                match name {
                    $($name => Some(AuditKind::$variant),)+
                    _ => None,
                }
            }
        }
    };
}

audit_kinds! {
    ActionCreated = "action.created",
    ActionDeleted = "action.deleted",
    ActionUpdated = "action.updated",
    /// One approver's ballot.
    ApprovalDecision = "approval.decision",
    /// An approver edited a parked invocation's input (its ballots start again).
    ApprovalEdited = "approval.edited",
    ApprovalRequested = "approval.requested",
    /// An approval's final status: approved, denied, expired or cancelled.
    ApprovalSettled = "approval.settled",
    BudgetDeleted = "budget.deleted",
    BudgetPut = "budget.put",
    BudgetRefused = "budget.refused",
    BudgetReserved = "budget.reserved",
    ConnectionChecked = "connection.checked",
    ConnectionConnected = "connection.connected",
    /// A consent session's `state` was spent by the provider's callback.
    ConnectionSessionClaimed = "connection.session.claimed",
    ConnectionSessionCreated = "connection.session.created",
    /// A consent session completed or failed.
    ConnectionSessionSettled = "connection.session.settled",
    ConsoleSessionEnded = "console.session.ended",
    ConsoleSessionStarted = "console.session.started",
    EffectEvidence = "effect.evidence",
    /// A sweep made a dead replica's approved effect its own.
    EffectTakenOver = "effect.taken_over",
    /// An effect's move from one state to another.
    EffectTransition = "effect.transition",
    EnvironmentCreated = "environment.created",
    EnvironmentHalted = "environment.halted",
    EnvironmentResumed = "environment.resumed",
    /// An environment's setting changed (`unkeyedInvokes`).
    EnvironmentUpdated = "environment.updated",
    /// An operator held an action or an operation key.
    HoldCreated = "hold.created",
    /// An operator released a hold: the work it parked is dispatched once.
    HoldReleased = "hold.released",
    ImpactActual = "impact.actual",
    ImpactRefused = "impact.refused",
    ImpactReserved = "impact.reserved",
    /// An effect's reservations consumed, released or kept as exposure.
    ImpactSettled = "impact.settled",
    ImpactLimitArchived = "impact_limit.archived",
    ImpactLimitCreated = "impact_limit.created",
    ImpactLimitUpdated = "impact_limit.updated",
    InvocationCreated = "invocation.created",
    KeyCreated = "key.created",
    KeyRevoked = "key.revoked",
    KeyRotated = "key.rotated",
    PolicyCreated = "policy.created",
    PolicyDeleted = "policy.deleted",
    PolicyUpdated = "policy.updated",
    PreviewCreated = "preview.created",
    /// A receipt signing key was made (at first start, or by a rotation).
    ReceiptKeyCreated = "receipt_key.created",
    RunEnded = "run.ended",
    RunFeedbackAdded = "run.feedback_added",
    RunSpansIngested = "run.spans_ingested",
    RunStarted = "run.started",
    RunUpdated = "run.updated",
    SecretCreated = "secret.created",
    SecretDeleted = "secret.deleted",
    SecretRotated = "secret.rotated",
    VaultKeyCheckRecorded = "vault.key_check_recorded",
    WebhookDeadLettered = "webhook.dead_lettered",
    WebhookRedelivered = "webhook.redelivered",
    WebhookRedeliveryFailed = "webhook.redelivery.failed",
    WebhookRedeliveryRequested = "webhook.redelivery.requested",
    WebhookSubscriptionCreated = "webhook.subscription.created",
    WebhookSubscriptionDeleted = "webhook.subscription.deleted",
    WebhookSubscriptionUpdated = "webhook.subscription.updated",
}

impl std::fmt::Display for AuditKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One audit event to append: what happened ([`AuditKind`]), in which environment (`None` for
/// the installation's own, like the vault's key check), to which subject, and the subject's
/// view before and after. Who and when come from the writing transaction's [`Actor`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AuditEntry {
    pub env: Option<String>,
    pub kind: AuditKind,
    pub subject: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

impl AuditEntry {
    /// An event of `kind` about `subject` in environment `env`, with no views yet.
    pub(crate) fn new(kind: AuditKind, env: impl AsRef<str>, subject: impl AsRef<str>) -> Self {
        Self {
            env: Some(env.as_ref().to_string()),
            kind,
            subject: subject.as_ref().to_string(),
            before: None,
            after: None,
        }
    }

    /// An event of `kind` about `subject` that belongs to no environment.
    pub(crate) fn global(kind: AuditKind, subject: impl AsRef<str>) -> Self {
        Self {
            env: None,
            ..Self::new(kind, "", subject)
        }
    }

    /// With the subject's view before the change (a value, or an optional one).
    pub(crate) fn before(mut self, view: impl Into<Option<Value>>) -> Self {
        self.before = view.into();
        self
    }

    /// With the subject's view after the change (a value, or an optional one).
    pub(crate) fn after(mut self, view: impl Into<Option<Value>>) -> Self {
        self.after = view.into();
        self
    }

    /// The unsealed event `actor` appends, with its own content hash (`audit::content_hash`);
    /// the backend gives it its id when it inserts it.
    pub(crate) fn into_event(self, actor: &Actor) -> (AuditEvent, String) {
        let event = AuditEvent {
            id: 0,
            at: actor.now.0,
            env_id: self.env,
            actor: actor.key.as_ref().map(|k| k.to_string()),
            kind: self.kind.as_str().to_string(),
            subject: self.subject,
            before: self.before,
            after: self.after,
            content_hash: None,
            link: None,
        };
        let hash = content_hash(&event);
        (event, hash)
    }

    /// An environment halted (`halted`) or resumed, from `before`, with the reason it stores.
    pub(crate) fn halt(
        before: &crate::records::Environment,
        halted: bool,
        reason: Option<&str>,
    ) -> Self {
        let kind = if halted {
            AuditKind::EnvironmentHalted
        } else {
            AuditKind::EnvironmentResumed
        };
        let env = before.id.as_str();
        Self::new(kind, env, env)
            .before(json!({"halted": before.halted, "reason": before.halt_reason}))
            .after(json!({"halted": halted, "reason": reason}))
    }

    /// A hold was made (`released` false) or released.
    pub(crate) fn hold(hold: &crate::records::HoldRecord, released: bool) -> Self {
        let view = json!({
            "actionName": hold.action_name,
            "operationKey": hold.operation_key,
            "reason": hold.reason,
        });
        let entry = Self::new(
            if released {
                AuditKind::HoldReleased
            } else {
                AuditKind::HoldCreated
            },
            hold.env_id.as_str(),
            hold.id.as_str(),
        );
        if released {
            entry.before(view)
        } else {
            entry.after(view)
        }
    }

    /// The environment's `unkeyedInvokes` setting changed from `before`'s to `setting`.
    pub(crate) fn unkeyed_invokes(
        before: &crate::records::Environment,
        setting: steward_core::UnkeyedInvokes,
    ) -> Self {
        let env = before.id.as_str();
        Self::new(AuditKind::EnvironmentUpdated, env, env)
            .before(json!({"unkeyedInvokes": before.unkeyed_invokes.as_str()}))
            .after(json!({"unkeyedInvokes": setting.as_str()}))
    }

    /// An effect's reservations settled by its move: `count` of them now `after`.
    pub(crate) fn impact_settled(
        env: impl AsRef<str>,
        effect: impl AsRef<str>,
        after: ReservationState,
        count: u64,
    ) -> Self {
        Self::new(AuditKind::ImpactSettled, env, effect)
            .after(json!({"reservations": after.as_str(), "count": count}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_through_its_name_and_names_are_unique() {
        let mut names = std::collections::HashSet::new();
        for kind in AuditKind::ALL {
            assert_eq!(AuditKind::parse(kind.as_str()), Some(*kind), "{kind}");
            assert!(names.insert(kind.as_str()), "{kind} is named twice");
        }
        assert_eq!(AuditKind::parse("effect.moved"), None);
    }

    #[test]
    fn an_entry_becomes_the_event_its_actor_appends() {
        let actor = Actor::system(steward_core::Millis(5));
        let entry = AuditEntry::new(AuditKind::KeyCreated, "env_a", "key_1")
            .before(None)
            .after(json!({"name": "k"}));
        let (event, hash) = entry.into_event(&actor);
        assert_eq!(event.kind, "key.created");
        assert_eq!(event.env_id.as_deref(), Some("env_a"));
        assert_eq!(event.at, 5);
        assert_eq!(event.after, Some(json!({"name": "k"})));
        assert_eq!(hash, content_hash(&event));
        let global = AuditEntry::global(AuditKind::VaultKeyCheckRecorded, "check");
        assert_eq!(global.env, None);
    }
}
