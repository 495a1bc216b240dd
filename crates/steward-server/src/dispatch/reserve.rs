//! Write path step 3, the reservation: just before the attempt is recorded, reserve every applicable impact limit
//! for the effect (in the invoke's own transaction, or in one of its own for an effect released
//! later), or refuse it (`ready -> rejected(refused)`, grade
//! `refused`, evidence saying which limit and why). A refused effect sends nothing.

use crate::effect_error::EffectResult;
use crate::state::AppState;
use serde_json::json;
use steward_core::impact::Refusal;
use steward_core::{ActionDefinition, EffectEvent, EffectState};
use steward_core::{EvidenceKind, EvidenceSource};
use steward_store::{
    Actor, EffectChange, ImpactRequest, InvocationRecord, NewEvidence, ReserveOutcome, StoreError,
};

/// What the dispatcher does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reservation {
    /// Every applicable limit holds a reservation (or none applies): record the attempt.
    Go,
    /// A limit refused; the effect is settled `refused` and nothing may be sent.
    Refused,
}

/// The effect's reservation request: its quantities under the action's definition.
pub(crate) fn request(
    state: &AppState,
    inv: &InvocationRecord,
    def: &ActionDefinition,
) -> ImpactRequest {
    ImpactRequest {
        env_id: inv.env_id.clone(),
        effect_id: inv.effect_id.clone(),
        action_name: inv.action_name.clone(),
        resource: crate::adapters::resource(def, inv.dispatch_input()),
        quantities: crate::adapters::quantities(def, inv.dispatch_input()),
        actor: Actor::key(&inv.created_by, state.clock.now()),
    }
}

pub(crate) async fn reserve(
    state: &AppState,
    inv: &InvocationRecord,
    def: &ActionDefinition,
) -> EffectResult<Reservation> {
    let outcome = state
        .store
        .reserve_impact(&request(state, inv, def))
        .await?;
    refuse(state, inv, outcome).await
}

/// Settles the effect `refused` when `outcome` is a refusal; otherwise it may go.
pub(crate) async fn refuse(
    state: &AppState,
    inv: &InvocationRecord,
    outcome: ReserveOutcome,
) -> EffectResult<Reservation> {
    let (limit_id, limit_name, refusal) = match outcome {
        ReserveOutcome::Reserved(_) | ReserveOutcome::AlreadyReserved => {
            return Ok(Reservation::Go)
        }
        ReserveOutcome::Refused {
            limit_id,
            limit_name,
            refusal,
        } => (limit_id, limit_name, refusal),
    };
    let actor = Actor::key(&inv.created_by, state.clock.now());
    let (code, message) = match refusal {
        Refusal::MissingQuantity => (
            "impact_quantity_missing",
            format!(
                "not sent: limit \"{limit_name}\" applies and the input does not hold the declared quantity"
            ),
        ),
        Refusal::Exhausted {
            requested,
            available,
        } => (
            "impact_limit_exhausted",
            format!(
                "not sent: limit \"{limit_name}\" has {available} available and this effect needs {requested}"
            ),
        ),
    };
    let evidence = NewEvidence::new(
        EvidenceKind::Refused,
        EvidenceSource::Steward,
        message.clone(),
    )
    .with_data(json!({"code": code, "limitId": limit_id}));
    let mut change = EffectChange::of(
        &inv.env_id,
        &inv.effect_id,
        EffectState::Ready,
        EffectEvent::Refuse,
        evidence,
        actor,
    )?;
    change.error = Some(json!({"code": code, "message": message, "limitId": limit_id}));
    match state.store.change_effect(&change).await {
        Ok(()) | Err(StoreError::StateConflict { .. }) => Ok(Reservation::Refused),
        Err(e) => Err(e.into()),
    }
}
