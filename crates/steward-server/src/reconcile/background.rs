//! The background reconciler: settles `unknown` effects that can be looked up, read-only, with
//! backoff per effect and a bounded number of lookups per tick. Every replica runs one; each
//! pass claims the effects it looks up (`Store::due_for_reconcile`), so two replicas never look
//! up one effect at once.

use super::{can_look_up, reconcile, Reconciled};
use crate::state::AppState;
use std::time::Duration;
use steward_core::EvidenceSource;
use steward_store::Actor;

/// Lookups per tick at most: a provider outage must not turn into a lookup storm.
pub const RECONCILE_BATCH_MAX: u32 = 16;
/// The first retry of an inconclusive lookup waits this long, in milliseconds; each further one
/// doubles, up to [`RECONCILE_BACKOFF_MS_MAX`].
pub const RECONCILE_BACKOFF_MS_MIN: i64 = 1_000;
/// Five minutes: an effect nobody can settle is still looked at regularly.
pub const RECONCILE_BACKOFF_MS_MAX: i64 = 300_000;

/// How long a pass holds the effects it claimed, in milliseconds: each lookup is one provider
/// request bounded by the dispatch deadline, so a pass of [`RECONCILE_BATCH_MAX`] lookups ends
/// well within this. A replica that dies mid-pass holds its claims until they run out; then any
/// replica takes those effects again.
fn claim_ms(state: &AppState) -> i64 {
    let per_lookup = state.dispatch_timeout.as_millis() as i64;
    per_lookup.saturating_mul(i64::from(RECONCILE_BATCH_MAX) + 1)
}

pub fn backoff_ms(count: u32) -> i64 {
    RECONCILE_BACKOFF_MS_MIN
        .saturating_mul(1_i64 << count.min(20))
        .min(RECONCILE_BACKOFF_MS_MAX)
}

/// Runs forever, one tick every `interval`.
pub async fn run(state: AppState, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = once(&state).await {
            tracing::warn!(error = %e, "background reconcile pass failed; retrying next tick");
        }
    }
}

/// One pass: every due effect gets one read-only lookup.
pub async fn once(state: &AppState) -> crate::effect_error::EffectResult<()> {
    let now = state.clock.now();
    for due in state
        .store
        .due_for_reconcile(now, RECONCILE_BATCH_MAX, now.plus_ms(claim_ms(state)))
        .await?
    {
        let inv = state
            .store
            .invocation(&due.env_id, &due.invocation_id)
            .await?;
        let Some(inv) = inv else { continue };
        let def = crate::dispatch::definition_of(&*state.store, &inv).await?;
        if !can_look_up(&def) {
            state
                .store
                .schedule_reconcile(&due.env_id, &due.effect_id, None)
                .await?;
            continue;
        }
        let outcome = reconcile(
            state,
            &due.env_id,
            &due.effect_id,
            EvidenceSource::Reconciler,
            Actor::system(state.clock.now()),
        )
        .await?;
        match outcome {
            Reconciled::StillOpen => {
                let next = state.clock.now().plus_ms(backoff_ms(due.count));
                state
                    .store
                    .schedule_reconcile(&due.env_id, &due.effect_id, Some(next))
                    .await?;
            }
            Reconciled::NoLookup => {
                state
                    .store
                    .schedule_reconcile(&due.env_id, &due.effect_id, None)
                    .await?
            }
            Reconciled::Settled | Reconciled::NotOpen => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        assert_eq!(backoff_ms(0), 1_000);
        assert_eq!(backoff_ms(1), 2_000);
        assert_eq!(backoff_ms(3), 8_000);
        assert_eq!(backoff_ms(30), RECONCILE_BACKOFF_MS_MAX);
    }
}
