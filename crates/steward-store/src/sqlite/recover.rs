//! Start-up recovery: settle what a crash left in between, without sending anything.

use super::conn::unavailable;
use super::invocations::change_effect;
use crate::error::StoreResult;
use crate::records::*;
use rusqlite::{params, Transaction};
use steward_core::{next, EffectEvent, EffectId, EffectState, EnvironmentId, Millis};

fn effects_in(
    tx: &Transaction<'_>,
    state: EffectState,
) -> StoreResult<Vec<(EnvironmentId, EffectId, u32)>> {
    let mut stmt = tx
        .prepare(
            "SELECT env_id, id, attempt_count FROM effects WHERE state = ?1 ORDER BY created_at",
        )
        .map_err(unavailable)?;
    let rows = stmt
        .query_map(params![state.name()], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, u32>(2)?,
            ))
        })
        .map_err(unavailable)?;
    let mut out = Vec::new();
    for row in rows {
        let (env, id, attempts) = row.map_err(unavailable)?;
        let env = EnvironmentId::parse(&env).map_err(|e| super::rows::corrupt("env id", e))?;
        let id = EffectId::parse(&id).map_err(|e| super::rows::corrupt("effect id", e))?;
        out.push((env, id, attempts));
    }
    Ok(out)
}

pub(crate) fn recover(tx: &Transaction<'_>, now: Millis) -> StoreResult<RecoveryReport> {
    let mut report = RecoveryReport::default();
    let actor = Actor::system(now);
    for (env, id, attempts) in effects_in(tx, EffectState::Dispatching)? {
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
        change_effect(tx, &change)?;
        report.dispatching_to_unknown.push(id);
    }
    for (env, id, _) in effects_in(tx, EffectState::Ready)? {
        if super::approvals::approved_for(tx, &id)? {
            let invocation: String = tx
                .query_row(
                    "SELECT invocation_id FROM effects WHERE id = ?1",
                    params![id.as_str()],
                    |r| r.get(0),
                )
                .map_err(unavailable)?;
            let invocation = steward_core::InvocationId::parse(&invocation)
                .map_err(|e| super::rows::corrupt("invocation id", e))?;
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
        change_effect(tx, &change)?;
        report.ready_to_failed.push(id);
    }
    let marked = tx
        .execute(
            "UPDATE idempotency SET state = 'done' WHERE state = 'in_progress' AND kind = 'invoke'",
            [],
        )
        .map_err(unavailable)?;
    let dropped = tx
        .execute(
            "DELETE FROM idempotency WHERE state = 'in_progress' AND kind = 'generic'",
            [],
        )
        .map_err(unavailable)?;
    report.requests_cleared = (marked + dropped) as u64;
    Ok(report)
}
