//! Start-up recovery: settle what a crash left in between, without sending anything.

use super::conn::Tx;
use super::invocations::change_effect;
use super::rows::{self, int};
use crate::error::StoreResult;
use crate::records::*;
use steward_core::{next, EffectEvent, EffectId, EffectState, EnvironmentId, InvocationId, Millis};

fn env_effect_attempts(row: &tokio_postgres::Row) -> StoreResult<(EnvironmentId, EffectId, u32)> {
    Ok((
        rows::id(row, 0, EnvironmentId::parse)?,
        rows::id(row, 1, EffectId::parse)?,
        int(row, 2)?,
    ))
}

async fn effects_in(
    tx: &Tx<'_>,
    state: EffectState,
) -> StoreResult<Vec<(EnvironmentId, EffectId, u32)>> {
    tx.all(
        "SELECT env_id, id, attempt_count FROM effects WHERE state = $1 ORDER BY created_at, id",
        &[&state.name()],
        env_effect_attempts,
    )
    .await
}

pub(crate) async fn recover(tx: &Tx<'_>, now: Millis) -> StoreResult<RecoveryReport> {
    let mut report = RecoveryReport::default();
    let actor = Actor::system(now);
    for (env, id, attempts) in effects_in(tx, EffectState::Dispatching).await? {
        let (to, _) = next(EffectState::Dispatching, EffectEvent::Restarted)
            .expect("dispatching takes Restarted");
        let mut change = EffectChange::new(&env, &id, EffectState::Dispatching, to, actor.clone());
        change.attempt = Some(AttemptChange::Finish {
            number: attempts,
            response_status: None,
            error: Some("Steward stopped while this attempt was in flight".into()),
        });
        change.evidence = Some(NewEvidence::new(
            "restart",
            "steward",
            "Steward restarted while this attempt was in flight: the provider may have acted. \
             Marked unknown; nothing was re-sent. Reconcile to settle it.",
        ));
        change_effect(tx, &change).await?;
        report.dispatching_to_unknown.push(id);
    }
    for (env, id, _) in effects_in(tx, EffectState::Ready).await? {
        if super::approvals::approved_for(tx, &id).await? {
            let row = tx
                .query_first(
                    "SELECT invocation_id FROM effects WHERE id = $1",
                    &[&id.as_str()],
                )
                .await?
                .ok_or_else(|| rows::corrupt("effect vanished during recovery", &id))?;
            let invocation = rows::id(&row, 0, InvocationId::parse)?;
            report.approved_to_dispatch.push((env, invocation));
            continue;
        }
        let (to, _) = next(EffectState::Ready, EffectEvent::Block).expect("ready takes Block");
        let mut change = EffectChange::new(&env, &id, EffectState::Ready, to, actor.clone());
        change.evidence = Some(NewEvidence::new(
            "restart",
            "steward",
            "Steward stopped after accepting this invocation and before recording any attempt: \
             nothing was sent. Settled failed; start a new invocation with retryOf to try again.",
        ));
        change.error = Some(
            serde_json::json!({"code": "not_dispatched", "message": "Steward stopped before dispatch; nothing was sent"}),
        );
        change_effect(tx, &change).await?;
        report.ready_to_failed.push(id);
    }
    let marked = tx
        .execute(
            "UPDATE idempotency SET state = 'done' WHERE state = 'in_progress' AND kind = 'invoke'",
            &[],
        )
        .await?;
    let dropped = tx
        .execute(
            "DELETE FROM idempotency WHERE state = 'in_progress' AND kind = 'generic'",
            &[],
        )
        .await?;
    report.requests_cleared = marked + dropped;
    Ok(report)
}
