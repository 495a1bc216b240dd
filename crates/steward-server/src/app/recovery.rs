//! Recovering an effect whose outcome is unknown: asking the provider again (`reconcile`), and
//! settling it by hand with evidence (`resolve_effect`, `resolve_invocation`), by a key other
//! than the one that invoked. `api/recovery.rs` is the HTTP door; the console's unknown-effects
//! page goes through it.

use super::{Error, Principal, Result};
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
