//! A sweep's batch writes what settling its changes one by one writes: on PostgreSQL a sweep
//! settles a chunk with one statement per table (`settle_all`), on SQLite with one
//! `change_effect` after another; either way the rows, the settlements and the audit events must
//! be those of the single-change path.

use super::*;
use steward_core::{EffectEvent, LimitId};

/// One environment's orphans: effects `dispatching` with attempt 1 in flight and effects
/// `ready` with no attempt, each holding one reservation under the environment's limit.
struct Orphans {
    env: Env,
    limit: LimitId,
    dispatching: Vec<EffectId>,
    ready: Vec<EffectId>,
}

/// Builds [`Orphans`] whose work `owner` holds: the sweep takes them over unless `owner` is the
/// sweeping replica itself.
async fn orphans(store: &Arc<dyn Store>, tag: &str, owner: &ReplicaId) -> Orphans {
    let env = Env::new(store, tag).await;
    let action = env.create_action(refund_definition("refund")).await;
    let limit = limit_record(
        &env,
        json!({"name": "many", "dimension": "resource_mutations", "period": "total", "amount": 100}),
    );
    store
        .create_limit(&limit, &env.actor(T0.0))
        .await
        .expect("create_limit");
    let (mut dispatching, mut ready) = (Vec::new(), Vec::new());
    for n in 0..2 {
        for begin in [true, false] {
            let mut submission = env.submission(&action, json!({"n": n, "begun": begin}));
            submission.owner = owner.clone();
            let inv = expect_created(store.submit(&submission).await.expect("submit"));
            let request = impact_request(&env, &inv.effect_id, vec![mutation(Some(1))], 2_000);
            let reserved = store.reserve_impact(&request).await.expect("reserve");
            assert!(
                matches!(reserved, ReserveOutcome::Reserved(_)),
                "{reserved:?}"
            );
            if begin {
                let mut change = env.change(
                    &inv.effect_id,
                    EffectState::Ready,
                    EffectState::Dispatching,
                    2_000,
                );
                change.attempt = Some(AttemptChange::Begin {
                    number: 1,
                    deadline_at: Millis(32_000),
                    owner: owner.clone(),
                });
                store.change_effect(&change).await.expect("begin attempt 1");
                dispatching.push(inv.effect_id);
            } else {
                ready.push(inv.effect_id);
            }
        }
    }
    Orphans {
        env,
        limit: limit.id,
        dispatching,
        ready,
    }
}

/// The change the sweep made to `twin`, made instead to `effect` of `env`: the same event, note,
/// closed attempt and error, read back from what the sweep wrote.
async fn same_change(
    batch: &Orphans,
    twin: &EffectId,
    env: &Env,
    effect: &EffectId,
    from: EffectState,
) -> EffectChange {
    let done = batch.env.effect(twin).await;
    let note = done.evidence.last().expect("the sweep's note");
    let mut evidence = NewEvidence::new(note.kind, note.source, note.message.clone());
    if let Some(data) = &note.data {
        evidence = evidence.with_data(data.clone());
    }
    let event = match from {
        EffectState::Dispatching => EffectEvent::Restarted,
        _ => EffectEvent::Block,
    };
    let mut change = EffectChange::of(
        &env.id,
        effect,
        from,
        event,
        evidence,
        Actor::system(Millis(9_000)),
    )
    .expect("the sweep's event");
    if let Some(attempt) = done.attempts.iter().find(|a| a.finished_at.is_some()) {
        change.attempt = Some(AttemptChange::Finish {
            number: attempt.number,
            response_status: attempt.response_status,
            error: attempt.error.clone(),
        });
    }
    let invocation = batch.env.invocation(&done.effect.invocation_id).await;
    change.error = invocation.error;
    change
}

/// What a change wrote about one effect, without its ids: the effect's row, its attempts (but
/// their owner), its evidence, its reservations, its invocation's answer, and its audit events
/// at the sweep's time.
async fn written(env: &Env, effect: &EffectId, events: &[AuditEvent]) -> Value {
    let detail = env.effect(effect).await;
    let invocation = env.invocation(&detail.effect.invocation_id).await;
    let e = &detail.effect;
    let attempts: Vec<Value> = detail
        .attempts
        .iter()
        .map(|a| {
            json!([
                a.number,
                a.started_at.0,
                a.deadline_at.0,
                a.finished_at.map(|t| t.0),
                a.status,
                a.response_status,
                a.error
            ])
        })
        .collect();
    let evidence: Vec<Value> = detail
        .evidence
        .iter()
        .map(|v| {
            json!([
                v.seq,
                v.at.0,
                v.kind.as_str(),
                v.source.as_str(),
                v.message,
                v.data
            ])
        })
        .collect();
    let reservations: Vec<Value> = detail
        .reservations
        .iter()
        .map(|r| json!([r.amount, r.window_start.0, r.state.as_str()]))
        .collect();
    let audit: Vec<Value> = events
        .iter()
        .filter(|a| a.subject == effect.as_str() && a.at == 9_000)
        .map(|a| {
            assert_eq!(a.env_id.as_deref(), Some(env.id.as_str()), "{a:?}");
            json!([a.kind, a.actor, a.before, a.after])
        })
        .collect();
    json!({
        "effect": [e.state.name(), e.attempt_count, e.external_reference, e.updated_at.0],
        "attempts": attempts,
        "evidence": evidence,
        "reservations": reservations,
        "invocation": [invocation.state.name(), invocation.response_status, invocation.error,
                       invocation.completed_at.map(|t| t.0)],
        "audit": audit,
    })
}

/// A sweep settles one environment's orphans in a batch; the same changes, made one by one with
/// `change_effect` to a twin environment, write the same rows, settlements and audit events.
pub async fn a_sweeps_batch_writes_what_settling_one_by_one_writes(store: Arc<dyn Store>) {
    let batch = orphans(&store, "sweep-batch", &writer()).await;
    // The sweeping replica's own work is never orphaned: the sweep leaves the twin alone.
    let sweeper = restarted();
    let single = orphans(&store, "sweep-single", &sweeper).await;
    let report = store
        .recover(&Sweep::sole(&sweeper, Millis(9_000)))
        .await
        .expect("recover");
    let pairs: Vec<(&EffectId, &EffectId, EffectState)> = (batch.dispatching.iter())
        .zip(&single.dispatching)
        .map(|(a, b)| (a, b, EffectState::Dispatching))
        .chain(
            (batch.ready.iter())
                .zip(&single.ready)
                .map(|(a, b)| (a, b, EffectState::Ready)),
        )
        .collect();
    for &(twin, effect, from) in &pairs {
        let swept = match from {
            EffectState::Dispatching => &report.dispatching_to_unknown,
            _ => &report.ready_to_failed,
        };
        assert!(swept.contains(twin), "{twin} was not swept: {report:?}");
        assert!(!swept.contains(effect), "{effect} was swept: {report:?}");
        let change = same_change(&batch, twin, &single.env, effect, from).await;
        store.change_effect(&change).await.expect("one change");
    }

    let events = all_audit_events(&store).await;
    for &(twin, effect, _) in &pairs {
        let by_batch = written(&batch.env, twin, &events).await;
        let one_by_one = written(&single.env, effect, &events).await;
        assert_eq!(
            by_batch, one_by_one,
            "{twin} (batch) and {effect} (one by one)"
        );
        assert_eq!(
            by_batch["audit"].as_array().map(Vec::len),
            Some(2),
            "{by_batch}"
        );
    }
    let (a, b) = (
        usage_of(&batch.env, &batch.limit, 9_000).await,
        usage_of(&single.env, &single.limit, 9_000).await,
    );
    assert_eq!((a.reserved, a.exposure), (b.reserved, b.exposure));
    assert_eq!((a.reserved, a.exposure), (0, 2));
}
