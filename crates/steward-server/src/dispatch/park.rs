//! The kill switch's dispatch side. While an environment is halted the store refuses to record
//! any attempt (`StoreError::Halted`), so nothing is sent; the dispatcher leaves the effect
//! `ready` with evidence ("parked"). Resuming dispatches every parked effect once: the
//! attempt's compare-and-set (`ready -> dispatching`) lets exactly one dispatcher through.

use crate::effect_error::EffectResult;
use crate::state::AppState;
use steward_core::{EnvironmentId, EvidenceKind, EvidenceSource};
use steward_store::{Actor, InvocationRecord, NewEvidence};

/// Records that a ready effect was not sent because its environment is halted.
pub(crate) async fn park(state: &AppState, inv: &InvocationRecord) -> EffectResult<()> {
    let note = NewEvidence::new(
        EvidenceKind::Parked,
        EvidenceSource::Steward,
        "parked: environment halted; nothing was sent. It is dispatched once when the environment resumes.",
    );
    state
        .store
        .append_evidence(
            &inv.env_id,
            &inv.effect_id,
            &note,
            &Actor::system(state.clock.now()),
        )
        .await?;
    tracing::info!(invocation = %inv.id, "parked: environment halted");
    Ok(())
}

/// Dispatches, once each and in their own tasks, the environment's parked (`ready`) effects.
/// Returns how many were released.
pub async fn release(state: &AppState, env: &EnvironmentId) -> EffectResult<usize> {
    let parked = state.store.ready_invocations(env).await?;
    let count = parked.len();
    for inv in parked {
        let state = state.clone();
        tokio::spawn(async move {
            if let Err(e) = super::dispatch(&state, &inv).await {
                tracing::error!(invocation = %inv.id, error = %e, "released dispatch failed");
            }
        });
    }
    Ok(count)
}
