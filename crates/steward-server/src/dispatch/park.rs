//! The kill switch's dispatch side. While an environment is halted the store refuses to record
//! any attempt (`StoreError::Halted`), so nothing is sent; the dispatcher leaves the effect
//! `ready` with evidence ("parked"). Resuming dispatches every parked effect once: the
//! attempt's compare-and-set (`ready -> dispatching`) lets exactly one dispatcher through.
//!
//! A hold (`app/holds.rs`) parks the same way, for the work it covers only
//! (`StoreError::Held`); releasing it dispatches that work once, by the same compare-and-set.

use crate::effect_error::EffectResult;
use crate::state::AppState;
use steward_core::{EnvironmentId, EvidenceKind, EvidenceSource};
use steward_store::{Actor, InvocationRecord, NewEvidence};

/// Why a ready effect was parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parked {
    /// The environment is halted (the kill switch).
    Halted,
    /// An operator's hold covers the invocation's action or operation key.
    Held,
}

impl Parked {
    /// The evidence note recorded on the effect.
    fn note(self) -> &'static str {
        match self {
            Parked::Halted => "parked: environment halted; nothing was sent. It is dispatched once when the environment resumes.",
            Parked::Held => "parked: held by an operator; nothing was sent. It is dispatched once when the hold is released.",
        }
    }
}

/// Records that a ready effect was not sent, and why.
pub(crate) async fn park(
    state: &AppState,
    inv: &InvocationRecord,
    why: Parked,
) -> EffectResult<()> {
    let note = NewEvidence::new(EvidenceKind::Parked, EvidenceSource::Steward, why.note());
    state
        .store
        .append_evidence(
            &inv.env_id,
            &inv.effect_id,
            &note,
            &Actor::system(state.clock.now()),
        )
        .await?;
    tracing::info!(invocation = %inv.id, reason = ?why, "parked");
    Ok(())
}

/// Dispatches, once each and in their own tasks, the environment's parked (`ready`) effects.
/// Returns how many were released.
pub async fn release(state: &AppState, env: &EnvironmentId) -> EffectResult<usize> {
    release_matching(state, env, |_| true).await
}

/// Dispatches, once each and in their own tasks, the environment's parked (`ready`) effects
/// whose invocation `matches`. Returns how many were released. Work still parked by something
/// else (a halt, another hold) is parked again by the store's refusal, and nothing is sent.
pub async fn release_matching(
    state: &AppState,
    env: &EnvironmentId,
    matches: impl Fn(&InvocationRecord) -> bool,
) -> EffectResult<usize> {
    let parked: Vec<_> = state
        .store
        .ready_invocations(env)
        .await?
        .into_iter()
        .filter(|inv| matches(inv))
        .collect();
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
