//! Committing what `pending.rs` keeps: the changes this process could not record while the
//! database was away, tried again as soon as it answers. Apart from the queue itself so that
//! `AppState` can hold the queue without importing what reads `AppState`.

use super::pending::{
    not_sent_from_ready, unknown_instead, Entry, Kind, PENDING_RETRY_MS_MAX, PENDING_RETRY_MS_MIN,
};
use crate::state::AppState;
use std::time::Duration;
use steward_core::{EffectId, EffectState, EvidenceKind, EvidenceSource};
use steward_store::{Actor, EffectChange, NewEvidence, StoreError};

/// Tries to commit the change kept for `effect` now (a resend of its key asks). Returns `true`
/// when nothing is kept for it any more.
pub async fn settle_now(state: &AppState, effect: &EffectId) -> bool {
    let Some(entry) = state.pending.take(effect) else {
        return true;
    };
    match settle(state, entry).await {
        None => true,
        Some(entry) => {
            state.pending.put_back(entry);
            false
        }
    }
}

/// Tries every kept change once. Returns whether the database refused for being unavailable
/// (the round stops at the first such failure: the others would fail alike).
pub async fn settle_all(state: &AppState) -> bool {
    for id in state.pending.ids() {
        let Some(entry) = state.pending.take(&id) else {
            continue;
        };
        if let Some(entry) = settle(state, entry).await {
            state.pending.put_back(entry);
            return true;
        }
    }
    false
}

/// Commits `entry`'s change. `None` once it is settled one way or the other; `Some` (to keep)
/// when the database could not take it.
async fn settle(state: &AppState, mut entry: Entry) -> Option<Entry> {
    let effect = entry.change.effect_id.clone();
    // A request of this process is beginning or sending an attempt of this effect: a "not
    // sent" mark waits, as that attempt may be the one it names (`pending.rs`).
    if entry.kind == Kind::NotSent && state.pending.is_sending(&effect) {
        return Some(entry);
    }
    match state.store.change_effect(&entry.change).await {
        Ok(()) => {
            tracing::info!(effect = %effect, to = entry.change.to.name(), kind = ?entry.kind, "recorded a kept answer now that the database took it");
            None
        }
        Err(e) if e.commit_unknown() => {
            entry.tried_ambiguously = true;
            Some(entry)
        }
        Err(e) if e.storage_failed() => Some(entry),
        Err(StoreError::StateConflict { found, .. })
            if entry.tried_ambiguously && found == entry.change.to =>
        {
            tracing::info!(effect = %effect, "a kept answer's earlier commit had landed after all");
            None
        }
        Err(StoreError::StateConflict {
            found: EffectState::Ready,
            ..
        }) if entry.kind == Kind::NotSent => {
            // The intent committed without its attempt (the kill switch, a refused limit): it
            // is settled failed from `ready` as it is, never sent.
            entry.change = not_sent_from_ready(&entry.change);
            Box::pin(settle(state, entry)).await
        }
        Err(StoreError::StateConflict { found, .. }) if entry.kind == Kind::NotSent => {
            tracing::info!(effect = %effect, found = found.name(), "the attempt whose commit lost its answer was not recorded: nothing to settle");
            None
        }
        Err(StoreError::StateConflict { found, .. }) => {
            tracing::warn!(effect = %effect, found = found.name(), kind = ?entry.kind, "a kept answer came too late: the effect was settled meanwhile (another replica's sweep); its answer is kept as evidence");
            late(state, &entry.change, found).await;
            None
        }
        // The attempt is another replica's: this request's was never recorded.
        Err(StoreError::Fenced { .. }) if entry.kind == Kind::NotSent => {
            tracing::info!(effect = %effect, "the attempt whose commit lost its answer was not recorded (another owns the effect): nothing to settle");
            None
        }
        // Another replica took the attempt over (its epoch moved on): the new owner's state
        // stands and what this one held is only evidence.
        Err(StoreError::Fenced { .. }) => {
            let found = match state.store.effect(&entry.change.env_id, &effect).await {
                Ok(Some(found)) => found.effect.state,
                _ => EffectState::Unknown,
            };
            tracing::warn!(effect = %effect, found = found.name(), kind = ?entry.kind, "fenced: another replica took this attempt over; the kept change is dropped and kept as evidence");
            late(state, &entry.change, found).await;
            None
        }
        Err(StoreError::NotFound { .. }) if entry.kind == Kind::NotSent => {
            tracing::info!(effect = %effect, "the intent whose commit lost its answer was not recorded: nothing to settle");
            None
        }
        Err(e) if entry.kind == Kind::Answer => {
            tracing::error!(effect = %effect, error = %e, "a kept answer was refused; its effect is marked unknown instead");
            entry.change = unknown_instead(&entry.change, "answer");
            entry.kind = Kind::Unknown;
            Some(entry)
        }
        Err(e) => {
            tracing::error!(effect = %effect, error = %e, kind = ?entry.kind, "a kept change was refused and dropped: the sweep of attempts past their deadline settles the effect");
            None
        }
    }
}

/// Appends what a dropped answer said, as late evidence (best effort: logged if it fails).
async fn late(state: &AppState, change: &EffectChange, found: EffectState) {
    let said = change
        .evidence
        .as_ref()
        .map(|e| e.message.clone())
        .unwrap_or_default();
    let note = NewEvidence::new(
        EvidenceKind::LateAnswer,
        EvidenceSource::Provider,
        format!(
            "an answer this Steward process could not record while the database was away \
             arrived after another process had marked the effect {}: {said}",
            found.name()
        ),
    );
    let actor = Actor::system(state.clock.now());
    if let Err(e) = state
        .store
        .append_evidence(&change.env_id, &change.effect_id, &note, &actor)
        .await
    {
        tracing::warn!(effect = %change.effect_id, error = %e, "could not append the late answer as evidence");
    }
}

/// Commits the kept changes for as long as the process runs: at once when something is kept,
/// then again with backoff while the database refuses.
pub(crate) async fn run(state: AppState) {
    let mut wait = Duration::from_millis(PENDING_RETRY_MS_MIN);
    loop {
        if state.pending.is_empty() {
            state.pending.kept().await;
            wait = Duration::from_millis(PENDING_RETRY_MS_MIN);
        }
        let refused = settle_all(&state).await;
        if refused {
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_millis(PENDING_RETRY_MS_MAX));
        } else {
            wait = Duration::from_millis(PENDING_RETRY_MS_MIN);
        }
    }
}
