//! The rows Steward keeps, as plain data.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use steward_core::link::Dependency;
use steward_core::{
    ActionDefinition, ActionId, ApprovalId, ApprovalStatus, Decision, EffectEvent, EffectId,
    EffectState, EnvironmentId, EvidenceKind, EvidenceSource, IdempotencyKey, InvocationId, KeyId,
    Millis, OperationKey, PreviewId, ReplicaId,
};

#[derive(Debug, Clone, PartialEq)]
pub struct Environment {
    pub id: EnvironmentId,
    pub name: String,
    pub halted: bool,
    pub halt_reason: Option<String>,
    pub created_at: Millis,
    /// What a governed HTTP invoke with neither an operation key nor an `Idempotency-Key`
    /// gets: accepted with a warning, or refused.
    pub unkeyed_invokes: steward_core::UnkeyedInvokes,
}

/// The environment's `unkeyed_invokes` column as stored: `NULL` (every environment made before
/// the setting) is `accept`, the behaviour it had.
pub(crate) fn unkeyed_invokes(
    stored: Option<String>,
) -> crate::StoreResult<steward_core::UnkeyedInvokes> {
    match stored.as_deref() {
        None => Ok(steward_core::UnkeyedInvokes::Accept),
        Some(name) => steward_core::UnkeyedInvokes::parse(name).ok_or_else(|| {
            crate::StoreError::Corrupt(format!("environment unkeyed_invokes: {name}"))
        }),
    }
}

/// The environment `Identity::ensure_environment` finds by `name`, or creates with `id` when
/// there is none of that name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewEnvironment<'a> {
    pub name: &'a str,
    pub id: &'a EnvironmentId,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ApiKeyRecord {
    pub id: KeyId,
    pub env_id: EnvironmentId,
    pub name: String,
    pub scopes: Vec<String>,
    /// `sha256:<hex>` of the bearer token. The token itself is never stored.
    pub token_hash: String,
    pub created_at: Millis,
    /// From this time on the key no longer authenticates (set at creation, or by a rotation
    /// to end the old key's overlap).
    pub expires_at: Option<Millis>,
    /// When the key was revoked; a revoked key never authenticates again.
    pub revoked_at: Option<Millis>,
    /// Roughly when the key last authenticated a request: written at most once per key per
    /// interval (the server's `KEY_LAST_USED_INTERVAL_S`), never on a request's critical path.
    pub last_used_at: Option<Millis>,
}

impl ApiKeyRecord {
    /// What the audit log records of a key: its name, scopes, expiry and revocation, never its
    /// token's hash.
    pub(crate) fn audit_view(&self) -> Value {
        let mut view = serde_json::json!({"name": self.name, "scopes": self.scopes});
        if let Some(at) = self.expires_at {
            view["expiresAt"] = serde_json::json!(at.0);
        }
        if let Some(at) = self.revoked_at {
            view["revokedAt"] = serde_json::json!(at.0);
        }
        view
    }

    /// True when the key may authenticate a request at `now`: not revoked, not expired.
    pub fn usable_at(&self, now: Millis) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|at| now < at)
    }
}

/// A key rotation: a new key with the old one's environment, name and scopes, in the same
/// transaction as the old key's new expiry (the end of the overlap, never later than it was).
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRotation {
    pub old: KeyId,
    pub new_id: KeyId,
    /// The new key's `token_hash`.
    pub new_token_hash: String,
    pub new_expires_at: Option<Millis>,
    /// The old key stops authenticating at this time.
    pub old_expires_at: Millis,
}

impl KeyRotation {
    /// What the rotation writes, the same in every backend, from the old key as read in the
    /// rotation's transaction: the old key's new expiry (the overlap's end, never later than
    /// it was) and the new key. A key that is unknown, revoked or expired is not rotated.
    pub(crate) fn plan(
        &self,
        old: Option<ApiKeyRecord>,
        now: Millis,
    ) -> crate::StoreResult<(ApiKeyRecord, Millis, ApiKeyRecord)> {
        let old = old
            .filter(|k| k.usable_at(now))
            .ok_or(crate::StoreError::NotFound { what: "key" })?;
        let old_expires_at = old
            .expires_at
            .map_or(self.old_expires_at, |at| at.min(self.old_expires_at));
        let new = ApiKeyRecord {
            id: self.new_id.clone(),
            env_id: old.env_id.clone(),
            name: old.name.clone(),
            scopes: old.scopes.clone(),
            token_hash: self.new_token_hash.clone(),
            created_at: now,
            expires_at: self.new_expires_at,
            revoked_at: None,
            last_used_at: None,
        };
        Ok((old, old_expires_at, new))
    }
}

/// A vault entry. `ciphertext` is sealed with the master key; nothing else holds the value.
#[derive(Debug, Clone, PartialEq)]
pub struct SecretRecord {
    pub env_id: EnvironmentId,
    pub name: String,
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
    pub description: Option<String>,
    pub allowed_hosts: Option<Vec<String>>,
    pub allowed_placements: Option<Vec<String>>,
    pub version: u32,
    pub created_at: Millis,
    pub updated_at: Millis,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ActionRecord {
    pub id: ActionId,
    pub env_id: EnvironmentId,
    pub name: String,
    pub version: u32,
    pub definition: ActionDefinition,
    pub created_at: Millis,
    pub updated_at: Millis,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ActionVersion {
    pub action_id: ActionId,
    pub version: u32,
    pub definition: ActionDefinition,
    pub created_at: Millis,
    pub created_by: Option<KeyId>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct InvocationRecord {
    pub id: InvocationId,
    pub env_id: EnvironmentId,
    pub action_id: ActionId,
    pub action_name: String,
    pub action_version: u32,
    pub effect_id: EffectId,
    pub governed: bool,
    pub state: EffectState,
    pub input: Value,
    pub input_fingerprint: String,
    pub operation_key: Option<OperationKey>,
    pub run_id: Option<String>,
    pub retry_of: Option<InvocationId>,
    pub response_status: Option<u16>,
    pub response_body: Option<Value>,
    pub error: Option<Value>,
    pub decision: Option<Value>,
    pub approval_id: Option<String>,
    pub created_by: KeyId,
    pub created_at: Millis,
    pub completed_at: Option<Millis>,
    /// The span of the run (`run_id`) the invocation was made under, as the caller named it.
    pub parent_span_id: Option<String>,
    /// An approver's edit of the input while it awaited approval (`crate::input_edit`): what
    /// dispatch renders ([`InvocationRecord::dispatch_input`]); `input` stays as sent.
    pub edit: Option<crate::InputEdit>,
    /// What the shadow (log-only) policies that matched would have decided (a JSON array, as
    /// submitted); `None` when none matched.
    pub shadow_decisions: Option<Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EffectRecord {
    pub id: EffectId,
    pub env_id: EnvironmentId,
    pub invocation_id: InvocationId,
    pub action_id: ActionId,
    pub action_name: String,
    pub operation_key: Option<OperationKey>,
    pub state: EffectState,
    pub attempt_count: u32,
    pub external_reference: Option<String>,
    pub provider_idempotency_key: Option<String>,
    pub created_by: KeyId,
    pub created_at: Millis,
    pub updated_at: Millis,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    pub number: u32,
    pub started_at: Millis,
    pub deadline_at: Millis,
    pub finished_at: Option<Millis>,
    /// `dispatching` until finished; then the effect state the attempt led to.
    pub status: String,
    pub response_status: Option<u16>,
    pub error: Option<String>,
    /// The replica that recorded the attempt and sent the request (`None` for attempts recorded
    /// before replicas were tracked).
    pub owner: Option<ReplicaId>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EvidenceRecord {
    pub seq: u32,
    pub at: Millis,
    pub kind: EvidenceKind,
    pub source: EvidenceSource,
    pub message: String,
    pub data: Option<Value>,
    pub actor: Option<KeyId>,
}

/// One impact limit's hold on an effect: how much, in which window, and where it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct ReservationRecord {
    pub limit_id: steward_core::LimitId,
    pub limit_name: String,
    pub amount: i64,
    pub window_start: Millis,
    pub state: steward_core::impact::ReservationState,
}

/// An effect with its attempts, its append-only evidence and its impact reservations.
#[derive(Debug, Clone, PartialEq)]
pub struct EffectDetail {
    pub effect: EffectRecord,
    pub attempts: Vec<AttemptRecord>,
    pub evidence: Vec<EvidenceRecord>,
    /// By limit name.
    pub reservations: Vec<ReservationRecord>,
    pub links: EffectLinks,
    /// The preview named by `links.preview`, read with the effect.
    pub preview: Option<PreviewRecord>,
}

/// How an effect is linked to others (`steward_core::link`). Written once, with the effect;
/// `compensated_by` is the other side of other effects' `compensates`, read with the effect.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EffectLinks {
    /// The effects that held these outcomes when this one was recorded (`dependsOn`).
    pub depends_on: Vec<Dependency>,
    /// The settled effect this one compensates.
    pub compensates: Option<EffectId>,
    /// The effects recorded as compensations of this one, oldest first.
    pub compensated_by: Vec<EffectId>,
    /// The execution-bound preview the invoke was bound to (`previewId`).
    pub preview: Option<PreviewId>,
}

/// What `StoreError::Duplicate` names when a submission binds a preview another effect is
/// already bound to: a preview binds one effect, ever.
pub const PREVIEW_BINDING: &str = "preview binding";

/// An execution-bound preview as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct PreviewRecord {
    pub id: PreviewId,
    pub env_id: EnvironmentId,
    pub action_id: ActionId,
    pub action_name: String,
    pub action_version: u32,
    pub input: Value,
    pub input_fingerprint: String,
    /// The fingerprint of the rendered request (secrets redacted, per-invoke ids as
    /// placeholders): an invoke bound to it must render the same.
    pub request_digest: String,
    /// What was computed when it was made: the request, the provider reads, the impact, the
    /// preconditions and the guarantees, as the API shows them.
    pub body: Value,
    pub run_id: Option<String>,
    pub created_by: KeyId,
    pub created_at: Millis,
    pub expires_at: Millis,
    /// The preview this one refreshed.
    pub refreshes: Option<PreviewId>,
    /// The preview that refreshed this one; an invoke may no longer bind to it.
    pub superseded_by: Option<PreviewId>,
    /// The effect bound to it (read through the effect's links).
    pub bound_effect: Option<EffectId>,
}

impl EffectLinks {
    pub fn is_empty(&self) -> bool {
        self.depends_on.is_empty()
            && self.compensates.is_none()
            && self.compensated_by.is_empty()
            && self.preview.is_none()
    }
}

/// One entry of the audit log: written with its own content hash by the transaction that makes
/// the change, and sealed into the hash chain afterwards (`audit.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// The order events were written in: increasing, with gaps (a rolled-back transaction's
    /// events take ids too). Not the chain's order: that is [`ChainLink::seq`].
    pub id: i64,
    pub at: i64,
    pub env_id: Option<String>,
    pub actor: Option<String>,
    pub kind: String,
    pub subject: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
    /// The event's own hash over its content (`audit::content_hash`). `None` only for events
    /// chained before sealing existed, whose chain hash covers their content directly.
    pub content_hash: Option<String>,
    /// Its place in the sealed chain; `None` until the sealer seals it.
    pub link: Option<ChainLink>,
}

impl AuditEvent {
    /// Its sequence number in the sealed chain, once sealed.
    pub fn seq(&self) -> Option<i64> {
        self.link.as_ref().map(|l| l.seq)
    }

    /// What it records; `None` for a stored kind outside [`crate::AuditKind`]'s list.
    pub fn audit_kind(&self) -> Option<crate::AuditKind> {
        crate::AuditKind::parse(&self.kind)
    }
}

/// A sealed event's place in the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainLink {
    /// 1, 2, 3, ... in the order the sealer sealed the events, without gaps.
    pub seq: i64,
    /// The chain hash of the event sealed before it (`audit::GENESIS_HASH` for the first).
    pub prev_hash: String,
    /// Its chain hash (`audit::link_hash`).
    pub hash: String,
}

/// Who changed something, and when.
#[derive(Debug, Clone, PartialEq)]
pub struct Actor {
    pub key: Option<KeyId>,
    pub now: Millis,
}

impl Actor {
    pub fn key(key: &KeyId, now: Millis) -> Self {
        Self {
            key: Some(key.clone()),
            now,
        }
    }
    pub fn system(now: Millis) -> Self {
        Self { key: None, now }
    }
}

/// New evidence to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvidence {
    pub kind: EvidenceKind,
    pub source: EvidenceSource,
    pub message: String,
    pub data: Option<Value>,
}

impl NewEvidence {
    pub fn new(kind: EvidenceKind, source: EvidenceSource, message: impl Into<String>) -> Self {
        Self {
            kind,
            source,
            message: message.into(),
            data: None,
        }
    }
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

/// An invoke request to record: the invocation, its effect and the keys that name them.
#[derive(Debug, Clone)]
pub struct Submission {
    pub env_id: EnvironmentId,
    pub invocation_id: InvocationId,
    pub effect_id: EffectId,
    pub action: ActionRecord,
    pub input: Value,
    pub input_fingerprint: String,
    pub operation_key: Option<OperationKey>,
    /// Scoped to `actor`, the API key that sent it; the operation key spans keys.
    pub idempotency_key: Option<IdempotencyKey>,
    /// Fingerprint of the whole request, for `Idempotency-Key` comparison.
    pub request_fingerprint: String,
    pub run_id: Option<String>,
    pub retry_of: Option<InvocationId>,
    pub initial: EffectState,
    pub provider_idempotency_key: Option<String>,
    /// For a gated invocation (`initial` is `AwaitingApproval`): the approval to create with it.
    pub approval: Option<NewApproval>,
    /// The policy decision that shaped `initial` (recorded on the invocation, never rewritten).
    /// `initial` may be `Rejected { Denied }` only with a decision: a policy denied it.
    pub decision: Option<Value>,
    /// What the environment's shadow (log-only) policies that matched would have decided: a
    /// JSON array, recorded on the invocation and never acted on; `None` when none matched.
    pub shadow_decisions: Option<Value>,
    pub evidence: NewEvidence,
    pub actor: KeyId,
    pub now: Millis,
    /// The replica recording it, which dispatches the effect when it is `ready`: until that
    /// replica's lease expires, no other replica's recovery sweep touches the effect or the
    /// request's in-flight `Idempotency-Key` marker.
    pub owner: ReplicaId,
    /// `dependsOn` and `compensates`, checked before submission and recorded with the effect.
    pub links: EffectLinks,
    /// The span of the run the invocation is made under (`parentSpanId`), kept for the run's
    /// timeline; it decides nothing.
    pub parent_span_id: Option<String>,
}

impl Submission {
    /// The invocation as `Store::submit` records it when it is `Created`.
    pub fn created(&self) -> InvocationRecord {
        InvocationRecord {
            id: self.invocation_id.clone(),
            env_id: self.env_id.clone(),
            action_id: self.action.id.clone(),
            action_name: self.action.name.clone(),
            action_version: self.action.version,
            effect_id: self.effect_id.clone(),
            governed: self.action.definition.is_governed(),
            state: self.initial,
            input: self.input.clone(),
            input_fingerprint: self.input_fingerprint.clone(),
            operation_key: self.operation_key.clone(),
            run_id: self.run_id.clone(),
            retry_of: self.retry_of.clone(),
            response_status: None,
            response_body: None,
            error: None,
            decision: self.decision.clone(),
            approval_id: self.approval.as_ref().map(|a| a.id.to_string()),
            created_by: self.actor.clone(),
            created_at: self.now,
            completed_at: self.initial.is_terminal().then_some(self.now),
            parent_span_id: self.parent_span_id.clone(),
            edit: None,
            shadow_decisions: self.shadow_decisions.clone(),
        }
    }
}

/// What an invoke reads before it decides anything, in one read (`Store::invoke_context`).
#[derive(Debug, Clone)]
pub struct InvokeContext {
    /// The caller's key, found by its token's hash.
    pub key: ApiKeyRecord,
    /// The key's environment: everything below is read in it.
    pub environment: Environment,
    pub action: Option<ActionRecord>,
    /// The environment's approval policies, as `Store::list_policies` returns them.
    pub policies: Vec<crate::PolicyRecord>,
    /// The request already recorded under the same `Idempotency-Key`, if any.
    pub earlier: Option<EarlierRequest>,
    /// The action's secrets ([`secrets_named_by`]) that exist, as `Store::secret` reads them.
    pub secrets: Vec<SecretRecord>,
}

/// The secrets an action's definition names: its adapter's credential and its template's
/// references, each once.
pub fn secrets_named_by(def: &steward_core::ActionDefinition) -> Vec<String> {
    let mut names: Vec<String> = def
        .adapter
        .iter()
        .map(|a| a.credential_secret.clone())
        .collect();
    if let Ok(references) = steward_core::secret_references(def) {
        names.extend(references.into_iter().map(|(name, _)| name));
    }
    names.sort();
    names.dedup();
    names
}

/// A request recorded under an `Idempotency-Key`, as `Store::submit` checks it.
#[derive(Debug, Clone, PartialEq)]
pub struct EarlierRequest {
    pub fingerprint: String,
    /// `false` while the request is in progress.
    pub answered: bool,
    /// The invocation it answered with, if it was an invoke.
    pub invocation: Option<InvocationRecord>,
}

impl EarlierRequest {
    /// What `Store::submit` answers a request with this fingerprint under the same key: the
    /// same outcome, decided from a read, with nothing written.
    pub fn outcome(self, request_fingerprint: &str) -> SubmitOutcome {
        match (
            self.fingerprint == request_fingerprint,
            self.answered,
            self.invocation,
        ) {
            (false, _, _) => SubmitOutcome::IdempotencyMismatch,
            (true, false, _) => SubmitOutcome::InProgress,
            (true, true, Some(inv)) => SubmitOutcome::Replayed(inv),
            (true, true, None) => SubmitOutcome::IdempotencyMismatch,
        }
    }
}

/// The first attempt of a `ready` submission, recorded in the submission's own transaction
/// (`Store::submit_and_begin`).
#[derive(Debug, Clone)]
pub struct FirstAttempt {
    /// The effect's impact reservation (write path step 3).
    pub impact: crate::ImpactRequest,
    /// `ready -> dispatching` with `AttemptChange::Begin` (write path step 3, the attempt).
    pub begin: EffectChange,
}

/// What became of a [`FirstAttempt`].
#[derive(Debug, Clone, PartialEq)]
pub enum FirstAttemptOutcome {
    /// The attempt is committed as `dispatching` with the submission: it may be sent.
    Begun,
    /// The environment is halted: the invocation is committed `ready`, with no attempt.
    Halted,
    /// A hold covers the invocation: it is committed `ready`, with no attempt.
    Held,
    /// An impact limit refused the effect (`ReserveOutcome::Refused`): the invocation is
    /// committed `ready`, with no reservation and no attempt.
    Refused(crate::ReserveOutcome),
}

/// What `Store::submit_and_begin` did.
#[derive(Debug, Clone)]
pub struct Submitted {
    pub outcome: SubmitOutcome,
    /// For a `Created` outcome only: what became of the first attempt.
    pub first: Option<FirstAttemptOutcome>,
}

/// An approval request to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewApproval {
    pub id: ApprovalId,
    pub title: String,
    pub description: Option<String>,
    pub payload: Value,
    pub required_approvals: u32,
    pub expires_at: Option<Millis>,
    pub run_id: Option<String>,
}

/// One key's decision on an approval.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionRecord {
    pub key: KeyId,
    pub decision: Decision,
    pub note: Option<String>,
    pub at: Millis,
}

/// A human decision request, with the decisions cast so far.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRecord {
    pub id: ApprovalId,
    pub env_id: EnvironmentId,
    pub status: ApprovalStatus,
    pub title: String,
    pub description: Option<String>,
    pub payload: Value,
    /// For a gated invocation: what the approver is shown and what dispatch will use.
    pub invocation_id: Option<InvocationId>,
    pub effect_id: Option<EffectId>,
    pub action_id: Option<ActionId>,
    pub action_version: Option<u32>,
    pub input_fingerprint: Option<String>,
    pub requested_by: KeyId,
    pub required_approvals: u32,
    pub decision_origin: Option<String>,
    pub decided_at: Option<Millis>,
    pub expires_at: Option<Millis>,
    pub run_id: Option<String>,
    pub created_at: Millis,
    pub decisions: Vec<DecisionRecord>,
    /// The edit of the gated invocation's input, when an approver edited it: `input_fingerprint`
    /// is then the edit's, and the edit keeps the one it was requested with.
    pub edit: Option<crate::ApprovalEdit>,
}

/// What casting a decision did.
#[derive(Debug, Clone)]
pub enum DecideOutcome {
    /// Recorded; `ready` is the parked invocation when this decision released it for dispatch
    /// (exactly one decision ever gets it).
    Recorded {
        approval: ApprovalRecord,
        ready: Option<Box<InvocationRecord>>,
    },
    /// Nothing changed (already settled, or this key already decided): the approval as it stands.
    Unchanged(ApprovalRecord),
    /// The approval had run out; it is now expired and the decision was not counted.
    Expired(ApprovalRecord),
    /// The deciding key requested this approval.
    SelfDecision,
    /// The deciding key edited the input this approval now holds: its ballot counts for
    /// nothing on its own edit.
    OwnEdit,
    /// The approval's input was edited after the decider read it (`DecisionRequest::seen`):
    /// the ballot was not counted; the approval as it stands.
    InputChanged(ApprovalRecord),
}

/// What withdrawing an approval (`Approvals::withdraw_approval`) did.
#[derive(Debug, Clone)]
pub enum Withdrawal {
    /// Withdrawn now: denied with `decisionOrigin: withdrawn`, its parked effect rejected;
    /// nothing was or will be sent. The approval as it stands after.
    Withdrawn(ApprovalRecord),
    /// Settled before (decided, expired, or withdrawn already; an approval found run out is
    /// expired now): nothing else changed. The approval as it stands.
    Unchanged(ApprovalRecord),
    /// Only the key that requested an approval may withdraw it; nothing changed.
    NotRequester,
}

/// One key's decision on an approval, as `Approvals::decide_and_begin` takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionRequest {
    pub env_id: EnvironmentId,
    pub approval_id: ApprovalId,
    /// The deciding key; never the one that requested the approval.
    pub key: KeyId,
    pub decision: Decision,
    pub note: Option<String>,
    pub now: Millis,
    /// The deciding replica: it owns the effect the decision releases, and dispatches it.
    pub replica: ReplicaId,
    /// The approval's `input_fingerprint` as the decider saw it, when it says: a ballot on an
    /// approval whose input was edited since is not counted (`DecideOutcome::InputChanged`).
    pub seen: Option<String>,
}

/// What `Approvals::decide_and_begin` did.
#[derive(Debug, Clone)]
pub struct Decided {
    pub outcome: DecideOutcome,
    /// When the decision released its invocation and a first attempt was given: what became of
    /// that attempt, in the decision's own transaction. `None` otherwise (nothing was released,
    /// or no attempt was given: the released effect is `ready`, owned by the deciding replica).
    pub first: Option<FirstAttemptOutcome>,
}

/// What a decision on an approval may release, read in one snapshot before deciding
/// (`Approvals::release_context`): what the decider prepares the released attempt from.
#[derive(Debug, Clone, PartialEq)]
pub struct ReleaseContext {
    /// The approval with the decisions cast so far.
    pub approval: ApprovalRecord,
    /// The gated invocation, while it is still parked (`awaiting_approval`) and the action
    /// version it names exists; `None` for a custom request or once it moved on.
    pub parked: Option<ParkedInvocation>,
}

/// A gated invocation waiting for its approval, with what its dispatch reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ParkedInvocation {
    pub invocation: InvocationRecord,
    /// The provider idempotency key recorded with its effect.
    pub provider_idempotency_key: Option<String>,
    /// The definition of the action version the invocation names.
    pub definition: ActionDefinition,
    /// The secrets that definition names ([`secrets_named_by`]) that exist, as `Store::secret`
    /// reads them.
    pub secrets: Vec<SecretRecord>,
}

/// Filters for the approval inbox.
#[derive(Debug, Clone, Default)]
pub struct ApprovalFilter {
    pub status: Option<ApprovalStatus>,
    pub origins: Option<Vec<String>>,
    pub limit: u32,
    pub offset: u32,
}

/// What recording an invoke request found.
#[derive(Debug, Clone, PartialEq)]
pub enum SubmitOutcome {
    /// A new invocation and effect were recorded.
    Created(InvocationRecord),
    /// The operation key already names an effect with the same input: that invocation.
    Existing(InvocationRecord),
    /// The idempotency key was seen with the same request: its invocation, as it stands now.
    Replayed(InvocationRecord),
    /// The idempotency key's original request is still being handled.
    InProgress,
    /// The idempotency key was used for a different request.
    IdempotencyMismatch,
    /// The operation key names an effect with a different input.
    OperationKeyConflict {
        effect_id: EffectId,
        invocation_id: InvocationId,
    },
    /// `retryOf` names no invocation in this environment.
    RetryOfNotFound,
    /// `retryOf` names an invocation that is not settled `failed`.
    RetryOfNotFailed { state: EffectState },
    /// The failed invocation already has a retry, with another input: one retry per failure,
    /// so that two concurrent retries cannot become two writes.
    RetryOfTaken { invocation_id: InvocationId },
    /// The calling key's budget (`crate::budget`) cannot admit another invocation this month;
    /// nothing was written.
    BudgetRefused(crate::BudgetRefusal),
}

/// The attempt part of an effect change.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptChange {
    /// Record a new attempt as `dispatching`, owned by the replica `owner` that will send it.
    /// Durable before anything is sent. While `owner` keeps its lease, no recovery sweep
    /// touches the attempt; once the lease has expired, a sweep makes the effect `unknown`.
    Begin {
        number: u32,
        deadline_at: Millis,
        owner: ReplicaId,
    },
    /// Close an attempt with what it led to.
    Finish {
        number: u32,
        response_status: Option<u16>,
        error: Option<String>,
    },
}

/// Who writes an effect change, for fencing (docs/DECISIONS.md, "Fencing tokens").
///
/// An effect carries an epoch that grows at each takeover; an attempt records the epoch it was
/// begun under. Ownership of an attempt in flight is the pair (owner, epoch): the replica that
/// began it holds it until a takeover moves the epoch on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fence {
    /// The replica that began the attempt the change finishes (`AttemptChange::Finish`). The
    /// change is refused with `StoreError::Fenced`, writing nothing, unless that replica still
    /// owns the effect under the epoch the attempt was begun with: a takeover since (a sweep
    /// that took the replica for dead, or the attempt for overdue) wins.
    Holder(ReplicaId),
    /// A takeover by this replica (a recovery sweep): the effect becomes its, under the next
    /// epoch, so the previous owner's late writes are refused.
    TakeOver(ReplicaId),
}

/// One compare-and-set transition of an effect, with everything recorded alongside it.
#[derive(Debug, Clone)]
pub struct EffectChange {
    pub env_id: EnvironmentId,
    pub effect_id: EffectId,
    pub from: EffectState,
    pub to: EffectState,
    /// What the move does to the effect's impact reservations, from the transition's work:
    /// applied in the same transaction (`None` leaves them as they are).
    pub settles: Option<steward_core::impact::ReservationState>,
    pub attempt: Option<AttemptChange>,
    pub evidence: Option<NewEvidence>,
    pub response_status: Option<u16>,
    pub response_body: Option<Value>,
    pub error: Option<Value>,
    pub external_reference: Option<String>,
    pub actor: Actor,
    /// The invoke request (by its `Idempotency-Key`) this change answers: marked answered in the
    /// same transaction, as `Store::finish_invoke_request` would.
    pub answers_request: Option<IdempotencyKey>,
    /// What a manual resolution says the effect really changed: after the settlement above, the
    /// effect's reservation under each limit of that dimension and unit holds this amount,
    /// consumed (or released when it is 0). Legal only when an `unknown` effect is resolved.
    pub actual_impact: Option<Vec<ActualImpact>>,
    /// The fencing this change is written under: `None` for a change by no owner of the
    /// effect's work (a reconcile, a resolution, an approval's decision), checked by its
    /// compare-and-set on the state alone.
    pub fence: Option<Fence>,
}

/// One quantity an effect really changed, as a person resolving it by hand reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActualImpact {
    pub dimension: String,
    /// The currency (lower case) for money, the dimension name otherwise, as limits name it.
    pub unit: String,
    pub amount: i64,
}

impl EffectChange {
    /// The change `event` makes to an effect read in state `from`, decided by the effect's
    /// rules (`steward_core::next`), with `evidence` saying why: the new state, and what the
    /// transition's work does to the effect's impact reservations (`steward_core::settlement`).
    /// The attempt, the answer and the reference are the caller's to add. An event the rules do
    /// not allow from `from` is an error naming the effect and its environment: the caller read
    /// a state it did not expect. This is the only way to build a change.
    pub fn of(
        env_id: &EnvironmentId,
        effect_id: &EffectId,
        from: EffectState,
        event: EffectEvent,
        evidence: NewEvidence,
        actor: Actor,
    ) -> Result<Self, crate::StoreError> {
        let (to, work) =
            steward_core::next(from, event).map_err(|_| crate::StoreError::IllegalTransition {
                env: env_id.clone(),
                effect: effect_id.clone(),
                from,
                step: format!("the event {event:?}"),
            })?;
        Ok(Self {
            env_id: env_id.clone(),
            effect_id: effect_id.clone(),
            from,
            to,
            settles: steward_core::settlement(&work),
            attempt: None,
            evidence: Some(evidence),
            response_status: None,
            response_body: None,
            error: None,
            external_reference: None,
            actor,
            answers_request: None,
            actual_impact: None,
            fence: None,
        })
    }

    /// When the change completes its invocation: on the move into a terminal state or into
    /// `unknown` (the caller has its answer, even if it is "unknown"); `None` otherwise.
    pub(crate) fn completed_at(&self) -> Option<Millis> {
        (self.to.is_terminal() || self.to == EffectState::Unknown).then_some(self.actor.now)
    }

    /// Refuses a change that no event makes: a `from -> to` move outside the rules, or a
    /// settlement of the reservations that is not the one that move's work implies (the fields
    /// are public, so a caller could have edited either). Every backend calls this before it
    /// writes the change.
    pub(crate) fn check_legal(&self) -> Result<(), crate::StoreError> {
        let made_by_some_event = EffectEvent::ALL.iter().any(|&event| {
            matches!(steward_core::next(self.from, event),
                Ok((to, work)) if to == self.to && steward_core::settlement(&work) == self.settles)
        });
        // An attempt begins only on the move into `dispatching`, and is answered only on the
        // move out of it: a change that records an attempt on any other move is a bug.
        let attempt_fits = match &self.attempt {
            Some(AttemptChange::Begin { .. }) => {
                self.to == EffectState::Dispatching && self.from != EffectState::Dispatching
            }
            Some(AttemptChange::Finish { .. }) => {
                self.from == EffectState::Dispatching && self.to != EffectState::Dispatching
            }
            None => true,
        };
        // Actual amounts settle only a resolution of an unknown effect.
        let actual_fits = self.actual_impact.is_none()
            || (self.from == EffectState::Unknown && self.to.is_terminal());
        // An attempt's holder writes only to finish its attempt: the epoch checked is that
        // attempt's.
        let fence_fits = !matches!(self.fence, Some(Fence::Holder(_)))
            || matches!(self.attempt, Some(AttemptChange::Finish { .. }));
        if made_by_some_event && attempt_fits && actual_fits && fence_fits {
            return Ok(());
        }
        Err(crate::StoreError::IllegalTransition {
            env: self.env_id.clone(),
            effect: self.effect_id.clone(),
            from: self.from,
            step: match (attempt_fits && fence_fits, self.settles) {
                (false, _) => format!(
                    "a move to `{}` with {:?} under {:?}",
                    self.to.name(),
                    self.attempt,
                    self.fence
                ),
                (true, Some(settles)) => {
                    format!("a move to `{}` settling {settles:?}", self.to.name())
                }
                (true, None) => format!("a move to `{}`", self.to.name()),
            },
        })
    }
}

/// Filters for listing invocations.
#[derive(Debug, Clone, Default)]
pub struct InvocationFilter {
    pub action_id: Option<ActionId>,
    pub states: Option<Vec<EffectState>>,
    pub limit: u32,
    pub offset: u32,
}

/// Filters for listing effects (governed ones only).
#[derive(Debug, Clone, Default)]
pub struct EffectFilter {
    pub action_id: Option<ActionId>,
    pub states: Option<Vec<EffectState>>,
    pub limit: u32,
    pub offset: u32,
}

/// A page of results with the total count.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub total: u64,
}

/// What an `Idempotency-Key` on a generic write found.
#[derive(Debug, Clone, PartialEq)]
pub enum IdempotencyBegin {
    /// First sight: go ahead; finish or abandon it afterwards.
    Begun,
    /// Already answered: the recorded response.
    Replay {
        status: u16,
        body: Value,
    },
    InProgress,
    Mismatch,
}

/// One recovery sweep: which replica runs it, and which replicas count as dead.
///
/// In-flight work (an effect `ready` or `dispatching`, an in-flight `Idempotency-Key` marker) is
/// *orphaned* when its owner is not [`Sweep::replica`] and is dead: it has no heartbeat at all,
/// or its last heartbeat is older than [`Sweep::dead_before`]. Work recorded before replicas
/// were tracked has no owner and is orphaned too.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    /// The replica running the sweep. Its own work is never orphaned; orphaned approved work
    /// becomes its to dispatch.
    pub replica: ReplicaId,
    pub now: Millis,
    /// A replica whose last heartbeat is older than this is dead.
    pub dead_before: Millis,
    /// An attempt in flight whose deadline is older than this (past by more than the lease) is
    /// overdue: the sweep takes it whoever owns it, live or dead, the sweeper included.
    pub overdue_before: Millis,
}

impl Sweep {
    /// The only process of its store, starting: every other replica is dead (the embedded
    /// store's lock file proves that no other process serves it).
    pub fn sole(replica: &ReplicaId, now: Millis) -> Self {
        Self {
            replica: replica.clone(),
            now,
            dead_before: Millis(i64::MAX),
            // Everything in flight that is not its own is orphaned already, and it has no
            // attempt of its own yet.
            overdue_before: Millis(i64::MIN),
        }
    }

    /// One of several replicas: a replica is dead once its last heartbeat is older than
    /// `lease_ms`.
    pub fn lease(replica: &ReplicaId, now: Millis, lease_ms: i64) -> Self {
        Self {
            replica: replica.clone(),
            now,
            dead_before: now.plus_ms(-lease_ms),
            overdue_before: now.plus_ms(-lease_ms),
        }
    }
}

/// What a recovery sweep did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecoveryReport {
    /// Orphaned effects found `dispatching` and marked `unknown` (nothing re-sent).
    pub dispatching_to_unknown: Vec<EffectId>,
    /// Orphaned effects found `ready` with no attempt and no approval, whose request died with
    /// its replica: settled `failed` as provably never sent.
    pub ready_to_failed: Vec<EffectId>,
    /// Orphaned in-flight request markers cleared.
    pub requests_cleared: u64,
    /// Orphaned effects released by an approval but not yet attempted: still `ready`, now owned
    /// by the sweeping replica, which dispatches them once (the approver's decision stands
    /// across a crash).
    pub approved_to_dispatch: Vec<(EnvironmentId, InvocationId)>,
    /// Dead replicas whose registration the sweep removed, after taking over their work.
    pub expired_replicas: Vec<ReplicaId>,
}

/// An approval changed in another process (announced by a shared store, see
/// [`Approvals::approval_events`](crate::Approvals::approval_events)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalEvent {
    /// A decision was recorded on this approval, or it expired.
    Changed(ApprovalId),
    /// The store (re)started listening, or a sweep removed a dead replica: changes made while
    /// the store was not listening, or by the dead replica just before it died, may not have
    /// been announced, so whoever waits should read again.
    Resync,
}

/// An unknown effect due for a background reconcile.
#[derive(Debug, Clone, PartialEq)]
pub struct ReconcileDue {
    pub env_id: EnvironmentId,
    pub effect_id: EffectId,
    pub invocation_id: InvocationId,
    /// Background lookups already made.
    pub count: u32,
}

/// An operator's hold (docs/DECISIONS.md, "Holds"): while it exists, no first attempt is
/// recorded for an effect whose invocation it matches, so that work stays `ready` ("parked")
/// until the hold is released. It names an action, an operation key, or both (then only that
/// key under that action); at least one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldRecord {
    pub id: steward_core::HoldId,
    pub env_id: EnvironmentId,
    /// The action's name, when the hold is on an action.
    pub action_name: Option<String>,
    /// The operation key, when the hold is on one operation.
    pub operation_key: Option<String>,
    pub reason: Option<String>,
    pub created_by: String,
    pub created_at: Millis,
}

impl HoldRecord {
    /// True when this hold covers an invocation of `action_name` under `operation_key`.
    pub fn covers(&self, action_name: &str, operation_key: Option<&str>) -> bool {
        let action = self.action_name.as_deref().is_none_or(|a| a == action_name);
        let key = match self.operation_key.as_deref() {
            None => true,
            Some(k) => operation_key == Some(k),
        };
        action && key
    }
}
