//! Recovering an effect whose outcome is unknown: asking the provider again (`reconcile`),
//! sending it again under the same provider idempotency key (`replay`), settling it by hand
//! with evidence (`resolve_effect`, `resolve_invocation`), by a key other than the one that
//! invoked, and adding a person's note to its evidence (`note`). `api/recovery.rs` is the HTTP door; the console's unknown-effects
//! page goes through it.

use super::{Error, Principal, Result};
use crate::adapters::REPLAY_WINDOW_MARGIN_MS;
use crate::error::codes;
use crate::reconcile::reconcile as reconcile_effect;
use crate::state::AppState;
use serde_json::{json, Value};
use steward_core::{
    scopes, EffectEvent, EffectId, EffectState, EvidenceKind, EvidenceSource, InvocationId, KeyId,
    ManualOutcome,
};
use steward_store::{
    Actor, ActualImpact, EffectChange, EffectDetail, InvocationRecord, NewEvidence, StoreError,
};

/// Asks the provider what happened to effect `id` (read-only, safe to repeat), and answers with
/// the effect as it then stands.
pub async fn reconcile(
    state: &AppState,
    principal: &Principal,
    id: &EffectId,
) -> Result<EffectDetail> {
    principal.require(scopes::ACTIONS_INVOKE)?;
    detail(state, principal, id).await?;
    let actor = Actor::key(&principal.key.id, state.clock.now());
    reconcile_effect(state, &principal.env.id, id, EvidenceSource::Api, actor).await?;
    detail(state, principal, id).await
}

/// Appends a person's `note` to effect `id`'s evidence; the effect as it then stands.
pub async fn note(
    state: &AppState,
    principal: &Principal,
    id: &EffectId,
    note: &str,
) -> Result<EffectDetail> {
    principal.require(scopes::ACTIONS_RESOLVE)?;
    detail(state, principal, id).await?;
    let evidence = NewEvidence::new(EvidenceKind::Note, EvidenceSource::Manual, note.to_string());
    let actor = Actor::key(&principal.key.id, state.clock.now());
    state
        .store
        .append_evidence(&principal.env.id, id, &evidence, &actor)
        .await?;
    detail(state, principal, id).await
}

/// Sends unknown effect `id` again under the same provider idempotency key, while the provider
/// still keeps that key (with [`REPLAY_WINDOW_MARGIN_MS`] to spare), so the provider answers
/// the first write's outcome instead of writing twice; the effect as it then stands.
pub async fn replay(
    state: &AppState,
    principal: &Principal,
    id: &EffectId,
) -> Result<EffectDetail> {
    principal.require(scopes::ACTIONS_RESOLVE)?;
    let d = detail(state, principal, id).await?;
    if d.effect.state != EffectState::Unknown {
        return Err(Error::of(
            codes::EFFECT_NOT_UNKNOWN,
            format!(
                "only an unknown effect is replayed; this one is {}",
                d.effect.state.invocation_status().as_str()
            ),
        ));
    }
    if d.effect.provider_idempotency_key.is_none() {
        return Err(Error::of(
            codes::REPLAY_NOT_SUPPORTED,
            "this action has no provider idempotency, so a replay could write twice; reconcile or resolve it instead",
        ));
    }
    let inv = invocation(state, principal, &d.effect.invocation_id).await?;
    let def = crate::dispatch::definition_of(&*state.store, &inv).await?;
    // The adapter says how long its provider keeps an idempotency key.
    let Some(window_ms) = crate::adapters::replay_window_ms(&def) else {
        return Err(Error::of(
            codes::REPLAY_NOT_SUPPORTED,
            "this action's adapter is not one this server knows, so a replay could write twice; reconcile or resolve it instead",
        ));
    };
    let first = d
        .attempts
        .first()
        .map(|a| a.started_at)
        .unwrap_or(d.effect.created_at);
    if state.clock.now().0 >= first.0 + window_ms - REPLAY_WINDOW_MARGIN_MS {
        return Err(Error::of(
            codes::REPLAY_WINDOW_CLOSED,
            format!(
                "the provider keeps idempotency keys for {} s; this effect's window has closed (or closes within {} s), so a replay could create a second write",
                window_ms / 1000,
                REPLAY_WINDOW_MARGIN_MS / 1000
            ),
        ));
    }
    // On a task of its own, so a client that goes away does not cut the replay short.
    let task_state = state.clone();
    tokio::spawn(async move { crate::dispatch::replay(&task_state, &inv).await })
        .await
        .map_err(|e| Error::internal("replay task", &e))??;
    detail(state, principal, id).await
}

/// A settlement of an unknown effect by hand, as checked by the front end.
#[derive(Debug, Clone)]
pub struct ResolveEffect {
    pub effect: EffectId,
    pub outcome: ManualOutcome,
    pub reason: String,
    /// `none`, `possible` or `confirmed`.
    pub partial_effect: Option<String>,
    /// What the effect changed, as given (kept in the evidence).
    pub actual_impact: Value,
    /// The same, as amounts the limits count.
    pub actual: Option<Vec<ActualImpact>>,
    pub external_reference: Option<String>,
}

/// Settles an unknown effect by hand; the effect as it then stands.
pub async fn resolve_effect(
    state: &AppState,
    principal: &Principal,
    request: ResolveEffect,
) -> Result<EffectDetail> {
    principal.require(scopes::ACTIONS_RESOLVE)?;
    let d = detail(state, principal, &request.effect).await?;
    let settled = match request.outcome {
        ManualOutcome::Succeeded => "succeeded",
        ManualOutcome::Failed => "failed",
    };
    let evidence = NewEvidence::new(
        EvidenceKind::ManualResolution,
        EvidenceSource::Manual,
        format!("resolved {settled} by hand: {}", request.reason),
    )
    .with_data(json!({"label": "manual", "reason": request.reason, "partialEffect": request.partial_effect, "actualImpact": request.actual_impact, "externalReference": request.external_reference}));
    resolve_by_hand(
        state,
        principal,
        &d,
        request.outcome,
        evidence,
        request.external_reference,
        request.actual,
    )
    .await?;
    detail(state, principal, &request.effect).await
}

/// A settlement of an unknown invocation's effect by hand, as checked by the front end.
#[derive(Debug, Clone)]
pub struct ResolveInvocation {
    pub invocation: InvocationId,
    pub outcome: ManualOutcome,
    pub evidence: String,
    pub external_reference: Option<String>,
}

/// Settles an unknown invocation's effect by hand; the invocation as it then stands.
pub async fn resolve_invocation(
    state: &AppState,
    principal: &Principal,
    request: ResolveInvocation,
) -> Result<InvocationRecord> {
    principal.require(scopes::ACTIONS_RESOLVE)?;
    let inv = invocation(state, principal, &request.invocation).await?;
    let d = detail(state, principal, &inv.effect_id).await?;
    let evidence = NewEvidence::new(
        EvidenceKind::ManualResolution,
        EvidenceSource::Manual,
        format!("resolved by hand: {}", request.evidence),
    )
    .with_data(json!({"label": "manual", "evidence": request.evidence, "externalReference": request.external_reference}));
    resolve_by_hand(
        state,
        principal,
        &d,
        request.outcome,
        evidence,
        request.external_reference,
        None,
    )
    .await?;
    invocation(state, principal, &request.invocation).await
}

async fn invocation(
    state: &AppState,
    principal: &Principal,
    id: &InvocationId,
) -> Result<InvocationRecord> {
    state
        .store
        .invocation(&principal.env.id, id)
        .await?
        .ok_or_else(|| Error::not_found("invocation"))
}

/// The effect `id` of the principal's environment.
pub async fn detail(
    state: &AppState,
    principal: &Principal,
    id: &EffectId,
) -> Result<EffectDetail> {
    state
        .store
        .effect(&principal.env.id, id)
        .await?
        .ok_or_else(|| Error::not_found("effect"))
}

/// Manual resolutions come from a different key than the one that invoked.
fn refuse_own(principal: &Principal, invoker: &KeyId) -> Result<()> {
    if &principal.key.id == invoker {
        return Err(Error::of(
            codes::SELF_RESOLUTION_FORBIDDEN,
            "a key never resolves an invocation it made; resolve it with another key",
        ));
    }
    Ok(())
}

/// Settles an unknown effect by hand, with its evidence.
async fn resolve_by_hand(
    state: &AppState,
    principal: &Principal,
    d: &EffectDetail,
    outcome: ManualOutcome,
    evidence: NewEvidence,
    reference: Option<String>,
    actual: Option<Vec<ActualImpact>>,
) -> Result<()> {
    refuse_own(principal, &d.effect.created_by)?;
    if d.effect.state != EffectState::Unknown {
        return Err(Error::of(
            codes::EFFECT_NOT_UNKNOWN,
            format!(
                "only an unknown effect is resolved by hand; this one is {}",
                d.effect.state.invocation_status().as_str()
            ),
        ));
    }
    let mut change = EffectChange::of(
        &principal.env.id,
        &d.effect.id,
        EffectState::Unknown,
        EffectEvent::Resolve { outcome },
        evidence,
        Actor::key(&principal.key.id, state.clock.now()),
    )?;
    let to = change.to;
    change.external_reference = reference;
    change.actual_impact = actual;
    if to == EffectState::Failed {
        change.error = Some(
            json!({"code": "resolved_failed", "message": "resolved by hand: the write did not happen"}),
        );
    }
    state
        .store
        .change_effect(&change)
        .await
        .map_err(|e| match e {
            StoreError::StateConflict { .. } => Error::of(
                codes::EFFECT_NOT_UNKNOWN,
                "the effect was settled by someone else first",
            ),
            other => other.into(),
        })
}
