//! Effects: compare-and-set transitions, start-up recovery, and `retryOf`.

use super::*;
use steward_core::impact::ReservationState;
use steward_core::{EvidenceKind, EvidenceSource};

/// `change_effect` is a compare-and-set carrying the attempt, evidence and response with it.
pub async fn effect_change_is_compare_and_set(store: Arc<dyn Store>) {
    let env = Env::new(&store, "cas").await;
    let action = env.create_action(refund_definition("refund")).await;
    let inv = expect_created(
        store
            .submit(&env.submission(&action, json!({"n": 1})))
            .await
            .expect("submit"),
    );
    let effect = inv.effect_id.clone();

    let mut begin = env.change(&effect, EffectState::Ready, EffectState::Dispatching, 2_000);
    begin.attempt = Some(AttemptChange::Begin {
        number: 1,
        deadline_at: Millis(32_000),
        owner: writer(),
    });
    begin.evidence = Some(NewEvidence::new(
        EvidenceKind::Attempt,
        EvidenceSource::Steward,
        "attempt 1 recorded",
    ));
    store
        .change_effect(&begin)
        .await
        .expect("Ready -> Dispatching");
    match store.change_effect(&begin).await {
        Err(StoreError::StateConflict { expected, found }) => {
            assert_eq!(expected, EffectState::Ready);
            assert_eq!(found, EffectState::Dispatching);
        }
        other => panic!("a second Begin from Ready must be a StateConflict, got {other:?}"),
    }

    let detail = env.effect(&effect).await;
    assert_eq!(detail.effect.state, EffectState::Dispatching);
    assert_eq!(detail.effect.attempt_count, 1);
    assert_eq!(
        detail.attempts.len(),
        1,
        "the refused second Begin recorded no attempt"
    );
    let attempt = &detail.attempts[0];
    assert_eq!(attempt.number, 1);
    assert_eq!(attempt.status, "dispatching");
    assert_eq!(attempt.started_at, Millis(2_000));
    assert_eq!(attempt.deadline_at, Millis(32_000));
    assert_eq!(attempt.finished_at, None);
    assert_eq!(detail.evidence.len(), 2);
    let record = env.invocation(&inv.id).await;
    assert_eq!(
        record.state,
        EffectState::Dispatching,
        "the invocation follows its effect"
    );
    assert_eq!(record.completed_at, None);

    // A compare-and-set from a stale state changes nothing at all, audit included.
    let audit_before = all_audit_events(&store).await.len();
    let mut stale = env.change(&effect, EffectState::Ready, EffectState::Failed, 2_100);
    stale.evidence = Some(NewEvidence::new(
        EvidenceKind::Blocked,
        EvidenceSource::Steward,
        "must not be recorded",
    ));
    stale.error = Some(json!({"code": "must_not_be_recorded"}));
    assert!(matches!(
        store.change_effect(&stale).await,
        Err(StoreError::StateConflict {
            expected: EffectState::Ready,
            found: EffectState::Dispatching
        })
    ));
    assert_eq!(
        env.effect(&effect).await,
        detail,
        "a refused change leaves the effect as it was"
    );
    assert_eq!(env.invocation(&inv.id).await, record);
    assert_eq!(all_audit_events(&store).await.len(), audit_before);

    // Evidence without a state change.
    let note = NewEvidence::new(
        EvidenceKind::Note,
        EvidenceSource::Operator,
        "looked at the dashboard",
    )
    .with_data(json!({"ticket": 7}));
    store
        .append_evidence(&env.id, &effect, &note, &env.actor(2_500))
        .await
        .expect("append_evidence");

    // The attempt ends ambiguously.
    let mut finish = env.change(
        &effect,
        EffectState::Dispatching,
        EffectState::Unknown,
        3_000,
    );
    finish.attempt = Some(AttemptChange::Finish {
        number: 1,
        response_status: Some(504),
        error: Some("gateway timeout".into()),
    });
    finish.evidence = Some(NewEvidence::new(
        EvidenceKind::Transport,
        EvidenceSource::Provider,
        "no answer before the deadline",
    ));
    finish.response_status = Some(504);
    finish.error = Some(json!({"code": "upstream_timeout"}));
    finish.external_reference = Some("re_123".into());
    store
        .change_effect(&finish)
        .await
        .expect("Dispatching -> Unknown");

    let detail = env.effect(&effect).await;
    assert_eq!(detail.effect.state, EffectState::Unknown);
    assert_eq!(detail.effect.external_reference.as_deref(), Some("re_123"));
    assert_eq!(detail.effect.updated_at, Millis(3_000));
    assert_eq!(detail.attempts.len(), 1);
    let attempt = &detail.attempts[0];
    assert_eq!(
        attempt.status, "unknown",
        "a finished attempt names the state it led to"
    );
    assert_eq!(attempt.finished_at, Some(Millis(3_000)));
    assert_eq!(attempt.response_status, Some(504));
    assert_eq!(attempt.error.as_deref(), Some("gateway timeout"));
    let seqs: Vec<u32> = detail.evidence.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4], "evidence is appended in order");
    let kinds: Vec<&str> = detail.evidence.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, vec!["accepted", "attempt", "note", "transport"]);
    let ats: Vec<Millis> = detail.evidence.iter().map(|e| e.at).collect();
    assert_eq!(ats, vec![T0, Millis(2_000), Millis(2_500), Millis(3_000)]);
    assert_eq!(detail.evidence[2].source.as_str(), "operator");
    assert_eq!(detail.evidence[2].data, Some(json!({"ticket": 7})));
    assert_eq!(detail.evidence[2].actor.as_ref(), Some(&env.key));
    assert_eq!(detail.evidence[3].message, "no answer before the deadline");

    let record = env.invocation(&inv.id).await;
    assert_eq!(record.state, EffectState::Unknown);
    assert_eq!(record.response_status, Some(504));
    assert_eq!(record.error, Some(json!({"code": "upstream_timeout"})));
    assert_eq!(record.completed_at, Some(Millis(3_000)));

    // Settled by a read-only lookup; after that nothing moves it.
    let mut found = env.change(
        &effect,
        EffectState::Unknown,
        EffectState::Succeeded { confirmed: true },
        4_000,
    );
    found.evidence = Some(NewEvidence::new(
        EvidenceKind::Reconcile,
        EvidenceSource::Reconciler,
        "refund re_123 exists",
    ));
    found.response_body = Some(json!({"id": "re_123"}));
    store
        .change_effect(&found)
        .await
        .expect("Unknown -> Succeeded");
    let record = env.invocation(&inv.id).await;
    assert_eq!(record.state, EffectState::Succeeded { confirmed: true });
    assert_eq!(record.response_body, Some(json!({"id": "re_123"})));
    assert!(matches!(
        store.change_effect(&found).await,
        Err(StoreError::StateConflict { .. })
    ));
    let evidence = env.effect(&effect).await.evidence;
    assert_eq!(evidence.len(), 5);
    assert_eq!(evidence[4].kind.as_str(), "reconcile");
}

/// Concurrent identical compare-and-sets: exactly one wins, every other one is a `StateConflict`.
pub async fn effect_change_under_concurrency_moves_once(store: Arc<dyn Store>) {
    let env = Env::new(&store, "cas-race").await;
    let action = env.create_action(refund_definition("refund")).await;
    let inv = expect_created(
        store
            .submit(&env.submission(&action, json!({"n": 2})))
            .await
            .expect("submit"),
    );
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = store.clone();
        let mut change = env.change(
            &inv.effect_id,
            EffectState::Ready,
            EffectState::Dispatching,
            2_000 + i,
        );
        change.attempt = Some(AttemptChange::Begin {
            number: 1,
            deadline_at: Millis(32_000),
            owner: writer(),
        });
        change.evidence = Some(NewEvidence::new(
            EvidenceKind::Attempt,
            EvidenceSource::Steward,
            format!("dispatcher {i}"),
        ));
        tasks.push(tokio::spawn(
            async move { store.change_effect(&change).await },
        ));
    }
    let (mut won, mut conflicts) = (0, 0);
    for task in tasks {
        match task.await.expect("task") {
            Ok(()) => won += 1,
            Err(StoreError::StateConflict {
                expected: EffectState::Ready,
                found: EffectState::Dispatching,
            }) => conflicts += 1,
            Err(other) => panic!("a lost race must be a StateConflict, got {other:?}"),
        }
    }
    assert_eq!((won, conflicts), (1, 15));
    assert_chain_intact(&store).await;
    let detail = env.effect(&inv.effect_id).await;
    assert_eq!(detail.attempts.len(), 1, "one attempt: one dispatch");
    assert_eq!(detail.evidence.len(), 2);
}

/// Start-up recovery settles what a crash left in between, sends nothing, and is idempotent.
pub async fn recover_settles_what_a_crash_left(store: Arc<dyn Store>) {
    let env = Env::new(&store, "recover").await;
    let action = env.create_action(refund_definition("refund")).await;

    // Left dispatching: the attempt was durable, the answer never recorded.
    let mut dispatching_sub = env.submission(&action, json!({"n": "dispatching"}));
    dispatching_sub.idempotency_key = Some(idem("req-dispatching"));
    let dispatching = expect_created(store.submit(&dispatching_sub).await.expect("submit"));
    env.begin_attempt(&dispatching.effect_id, 2_000).await;
    // Left ready: accepted, no attempt recorded.
    let mut ready_sub = env.submission(&action, json!({"n": "ready"}));
    ready_sub.idempotency_key = Some(idem("req-ready"));
    let ready = expect_created(store.submit(&ready_sub).await.expect("submit"));
    // Replayed after an unknown: attempt 2 in flight, attempt 1 already closed.
    let replayed = expect_created(
        store
            .submit(&env.submission(&action, json!({"n": "replayed"})))
            .await
            .expect("submit"),
    );
    env.begin_attempt(&replayed.effect_id, 2_000).await;
    env.finish_attempt(&replayed.effect_id, EffectState::Unknown, 2_500)
        .await;
    let mut replay = env.change(
        &replayed.effect_id,
        EffectState::Unknown,
        EffectState::Dispatching,
        3_000,
    );
    replay.attempt = Some(AttemptChange::Begin {
        number: 2,
        deadline_at: Millis(33_000),
        owner: writer(),
    });
    store
        .change_effect(&replay)
        .await
        .expect("Unknown -> Dispatching");
    // Parked for a human.
    let mut sub = env.submission(&action, json!({"n": "parked"}));
    sub.initial = EffectState::AwaitingApproval;
    let parked = expect_created(store.submit(&sub).await.expect("submit"));
    // Settled before the crash.
    let settled = expect_created(
        store
            .submit(&env.submission(&action, json!({"n": "settled"})))
            .await
            .expect("submit"),
    );
    env.begin_attempt(&settled.effect_id, 2_000).await;
    env.finish_attempt(
        &settled.effect_id,
        EffectState::Succeeded { confirmed: false },
        2_500,
    )
    .await;
    // A generic write in flight.
    let generic = idem("generic-in-flight");
    assert_eq!(
        store
            .idempotency_begin(&env.id, &env.key, &generic, "fp-g", T0, &writer())
            .await
            .expect("begin"),
        IdempotencyBegin::Begun
    );

    let parked_before = env.effect(&parked.effect_id).await;
    let settled_before = env.effect(&settled.effect_id).await;

    let report = store
        .recover(&Sweep::sole(&restarted(), Millis(9_000)))
        .await
        .expect("recover");
    assert!(
        report
            .dispatching_to_unknown
            .contains(&dispatching.effect_id),
        "{report:?}"
    );
    assert!(
        report.ready_to_failed.contains(&ready.effect_id),
        "{report:?}"
    );
    for untouched in [&parked.effect_id, &settled.effect_id] {
        assert!(
            !report.dispatching_to_unknown.contains(untouched),
            "{report:?}"
        );
        assert!(!report.ready_to_failed.contains(untouched), "{report:?}");
    }
    assert!(!report.dispatching_to_unknown.contains(&ready.effect_id));
    assert!(!report.ready_to_failed.contains(&dispatching.effect_id));
    assert!(
        report.requests_cleared >= 3,
        "two invoke markers and one generic marker: {report:?}"
    );

    // Dispatching became unknown: the attempt is closed, evidence says why, nothing re-sent.
    let detail = env.effect(&dispatching.effect_id).await;
    assert_eq!(detail.effect.state, EffectState::Unknown);
    assert_eq!(detail.attempts.len(), 1, "recovery records no new attempt");
    assert_eq!(detail.attempts[0].status, "unknown");
    assert_eq!(detail.attempts[0].finished_at, Some(Millis(9_000)));
    assert!(detail.attempts[0].error.is_some());
    let last = detail.evidence.last().expect("evidence");
    assert_eq!(last.kind.as_str(), "restart");
    assert_eq!(last.at, Millis(9_000));
    assert_eq!(detail.evidence.len(), 3);
    assert_eq!(
        env.invocation(&dispatching.id).await.state,
        EffectState::Unknown
    );

    // The replayed effect's in-flight attempt (2) is the one closed; attempt 1 keeps its record.
    let detail = env.effect(&replayed.effect_id).await;
    assert!(report.dispatching_to_unknown.contains(&replayed.effect_id));
    assert_eq!(detail.effect.state, EffectState::Unknown);
    assert_eq!(detail.effect.attempt_count, 2);
    let closed: Vec<(u32, &str, Option<Millis>)> = detail
        .attempts
        .iter()
        .map(|a| (a.number, a.status.as_str(), a.finished_at))
        .collect();
    assert_eq!(
        closed,
        vec![
            (1, "unknown", Some(Millis(2_500))),
            (2, "unknown", Some(Millis(9_000)))
        ],
        "recovery closes the attempt in flight, not an earlier one"
    );

    // Ready became failed: provably never sent.
    let detail = env.effect(&ready.effect_id).await;
    assert_eq!(detail.effect.state, EffectState::Failed);
    assert!(detail.attempts.is_empty());
    assert_eq!(
        detail.evidence.last().expect("evidence").kind.as_str(),
        "restart"
    );
    let record = env.invocation(&ready.id).await;
    assert_eq!(record.state, EffectState::Failed);
    assert!(record.error.is_some(), "a failed invocation says why");

    // Parked and settled effects are untouched.
    assert_eq!(env.effect(&parked.effect_id).await, parked_before);
    assert_eq!(env.effect(&settled.effect_id).await, settled_before);
    assert_eq!(
        env.invocation(&parked.id).await.state,
        EffectState::AwaitingApproval
    );

    // In-flight invoke requests are answered now: a resend gets the invocation.
    for (key, original, inv) in [
        ("req-dispatching", &dispatching_sub, &dispatching),
        ("req-ready", &ready_sub, &ready),
    ] {
        // The same request again (same key and fingerprint), with fresh ids as a client resend has.
        let mut resend = original.clone();
        resend.invocation_id = InvocationId::from_unique(&unique("inv"));
        resend.effect_id = EffectId::from_unique(&unique("eff"));
        match store.submit(&resend).await.expect("submit") {
            SubmitOutcome::Replayed(r) => {
                assert_eq!(r.id, inv.id);
                assert_eq!(r.state, env.invocation(&inv.id).await.state);
            }
            other => panic!("{key}: expected Replayed after recovery, got {other:?}"),
        }
    }
    // An in-flight generic request was forgotten: it may be sent again.
    assert_eq!(
        store
            .idempotency_begin(
                &env.id,
                &env.key,
                &generic,
                "fp-g",
                Millis(9_500),
                &writer()
            )
            .await
            .expect("begin"),
        IdempotencyBegin::Begun
    );
    store
        .idempotency_abandon(&env.id, &env.key, &generic)
        .await
        .expect("abandon");

    // A second recovery finds nothing more to do.
    let details = [
        env.effect(&dispatching.effect_id).await,
        env.effect(&ready.effect_id).await,
        env.effect(&parked.effect_id).await,
        env.effect(&settled.effect_id).await,
    ];
    let audit_len = all_audit_events(&store).await.len();
    let again = store
        .recover(&Sweep::sole(&restarted(), Millis(10_000)))
        .await
        .expect("recover again");
    assert_eq!(again, RecoveryReport::default(), "recovery is idempotent");
    let after = [
        env.effect(&dispatching.effect_id).await,
        env.effect(&ready.effect_id).await,
        env.effect(&parked.effect_id).await,
        env.effect(&settled.effect_id).await,
    ];
    assert_eq!(after, details);
    assert_eq!(all_audit_events(&store).await.len(), audit_len);
}

/// Recovery settles each orphan's reservations and audits each change as `change_effect`
/// does: a dispatching orphan's reservations become exposure, a ready orphan's are released,
/// and each move has its `impact.settled` and `effect.transition` events.
pub async fn recover_settles_reservations_and_audits_each_change(store: Arc<dyn Store>) {
    let env = Env::new(&store, "recover-held").await;
    let action = env.create_action(refund_definition("refund")).await;
    let limit = limit_record(
        &env,
        json!({"name": "many", "dimension": "resource_mutations", "period": "total", "amount": 100}),
    );
    store
        .create_limit(&limit, &env.actor(T0.0))
        .await
        .expect("create_limit");
    let mut dispatching = Vec::new();
    let mut ready = Vec::new();
    for n in 0..3 {
        for (list, begin) in [(&mut dispatching, true), (&mut ready, false)] {
            let inv = expect_created(
                store
                    .submit(&env.submission(&action, json!({"n": n, "begun": begin})))
                    .await
                    .expect("submit"),
            );
            let reserved = store
                .reserve_impact(&impact_request(
                    &env,
                    &inv.effect_id,
                    vec![mutation(Some(1))],
                    2_000,
                ))
                .await
                .expect("reserve");
            assert!(
                matches!(reserved, ReserveOutcome::Reserved(_)),
                "{reserved:?}"
            );
            if begin {
                env.begin_attempt(&inv.effect_id, 2_000).await;
            }
            list.push(inv.effect_id);
        }
    }
    assert_eq!(usage_of(&env, &limit.id, 2_000).await.reserved, 6);

    let report = store
        .recover(&Sweep::sole(&restarted(), Millis(9_000)))
        .await
        .expect("recover");
    let usage = usage_of(&env, &limit.id, 9_000).await;
    assert_eq!(
        (usage.reserved, usage.exposure),
        (0, 3),
        "unknown keeps its reservation as exposure, failed releases it"
    );
    let events = all_audit_events(&store).await;
    for (effects, to, reservations, in_report) in [
        (
            &dispatching,
            "unknown",
            "exposure",
            &report.dispatching_to_unknown,
        ),
        (&ready, "failed", "released", &report.ready_to_failed),
    ] {
        for effect in effects {
            assert!(in_report.contains(effect), "{report:?}");
            let detail = env.effect(effect).await;
            assert_eq!(detail.effect.state.name(), to);
            let held: Vec<&str> = detail
                .reservations
                .iter()
                .map(|r| r.state.as_str())
                .collect();
            assert_eq!(held, [reservations]);
            let of_effect: Vec<(&str, Option<&Value>)> = events
                .iter()
                .filter(|e| e.subject == effect.as_str() && e.at == 9_000)
                .map(|e| (e.kind.as_str(), e.after.as_ref()))
                .collect();
            assert_eq!(
                of_effect,
                [
                    (
                        "impact.settled",
                        Some(&json!({"reservations": reservations, "count": 1}))
                    ),
                    (
                        "effect.transition",
                        Some(&json!({"state": to, "attempt": null, "responseStatus": null}))
                    ),
                ],
                "{effect}"
            );
        }
    }
}

/// `retryOf` may only name an invocation of this environment that is settled failed.
pub async fn retry_of_requires_a_settled_failure(store: Arc<dyn Store>) {
    let env = Env::new(&store, "retry").await;
    let action = env.create_action(refund_definition("refund")).await;
    let retry = |prior: &InvocationId| {
        let mut sub = env.submission(&action, json!({"charge": "ch_retry"}));
        sub.retry_of = Some(prior.clone());
        sub
    };

    let ghost = InvocationId::from_unique(&unique("ghost"));
    let sub = retry(&ghost);
    assert!(matches!(
        store.submit(&sub).await.expect("submit"),
        SubmitOutcome::RetryOfNotFound
    ));
    assert!(store
        .invocation(&env.id, &sub.invocation_id)
        .await
        .expect("invocation")
        .is_none());

    let running = expect_created(
        store
            .submit(&env.submission(&action, json!({"charge": "a"})))
            .await
            .expect("submit"),
    );
    match store.submit(&retry(&running.id)).await.expect("submit") {
        SubmitOutcome::RetryOfNotFailed { state } => assert_eq!(state, EffectState::Ready),
        other => panic!("expected RetryOfNotFailed, got {other:?}"),
    }
    env.begin_attempt(&running.effect_id, 2_000).await;
    env.finish_attempt(&running.effect_id, EffectState::Unknown, 3_000)
        .await;
    match store.submit(&retry(&running.id)).await.expect("submit") {
        SubmitOutcome::RetryOfNotFailed { state } => {
            assert_eq!(state, EffectState::Unknown, "unknown is not failed")
        }
        other => panic!("expected RetryOfNotFailed, got {other:?}"),
    }
    let succeeded = expect_created(
        store
            .submit(&env.submission(&action, json!({"charge": "b"})))
            .await
            .expect("submit"),
    );
    env.begin_attempt(&succeeded.effect_id, 2_000).await;
    env.finish_attempt(
        &succeeded.effect_id,
        EffectState::Succeeded { confirmed: true },
        3_000,
    )
    .await;
    assert!(matches!(
        store.submit(&retry(&succeeded.id)).await.expect("submit"),
        SubmitOutcome::RetryOfNotFailed {
            state: EffectState::Succeeded { confirmed: true }
        }
    ));

    let failed = expect_created(
        store
            .submit(&env.submission(&action, json!({"charge": "c"})))
            .await
            .expect("submit"),
    );
    let mut block = env.change(
        &failed.effect_id,
        EffectState::Ready,
        EffectState::Failed,
        2_000,
    );
    block.evidence = Some(NewEvidence::new(
        EvidenceKind::Blocked,
        EvidenceSource::Steward,
        "secret not allowed for host",
    ));
    store.change_effect(&block).await.expect("Ready -> Failed");
    let sub = retry(&failed.id);
    let retried = expect_created(store.submit(&sub).await.expect("submit"));
    assert_eq!(retried.id, sub.invocation_id);
    assert_eq!(retried.retry_of, Some(failed.id.clone()));
    assert_eq!(retried.state, EffectState::Ready);
    assert_eq!(
        env.invocation(&failed.id).await.state,
        EffectState::Failed,
        "the failed one stays failed"
    );

    // One retry per failure: the same retry again is that retry; another input is refused, so
    // two concurrent retries can never become two writes.
    match store.submit(&retry(&failed.id)).await.expect("submit") {
        SubmitOutcome::Existing(found) => assert_eq!(found.id, retried.id),
        other => panic!("expected the existing retry, got {other:?}"),
    }
    let mut different = retry(&failed.id);
    different.input = json!({"charge": "other"});
    different.input_fingerprint = steward_core::fingerprint(&different.input);
    assert!(matches!(
        store.submit(&different).await.expect("submit"),
        SubmitOutcome::RetryOfTaken { .. }
    ));

    // A failed invocation of another environment does not exist here.
    let other = Env::new(&store, "retry-other").await;
    let other_action = other.create_action(refund_definition("refund")).await;
    let mut sub = other.submission(&other_action, json!({"charge": "c"}));
    sub.retry_of = Some(failed.id.clone());
    assert!(matches!(
        store.submit(&sub).await.expect("submit"),
        SubmitOutcome::RetryOfNotFound
    ));
}

/// A change that skips a step of the effect's rules (`ready` straight to `succeeded`, a settled
/// effect back to `dispatching`) is refused, whatever state the effect is in, and writes nothing.
pub async fn an_illegal_transition_is_refused_and_writes_nothing(store: Arc<dyn Store>) {
    let env = Env::new(&store, "illegal").await;
    let action = env.create_action(refund_definition("refund")).await;
    let inv = expect_created(
        store
            .submit(&env.submission(&action, json!({"n": 1})))
            .await
            .expect("submit"),
    );
    let effect = inv.effect_id.clone();
    let before = env.effect(&effect).await;
    let audit_before = all_audit_events(&store).await.len();
    // Built by the rules, then edited by hand: the fields are public, the store checks them.
    let mut skip = env.change(&effect, EffectState::Ready, EffectState::Dispatching, 2_000);
    skip.to = EffectState::Succeeded { confirmed: true };
    skip.evidence = Some(NewEvidence::new(
        EvidenceKind::Note,
        EvidenceSource::Steward,
        "must not be recorded",
    ));
    match store.change_effect(&skip).await {
        Err(StoreError::IllegalTransition {
            effect: refused,
            from,
            ..
        }) => {
            assert_eq!(refused, effect);
            assert_eq!(from, EffectState::Ready);
        }
        other => panic!("ready -> succeeded must be refused as illegal, got {other:?}"),
    }
    assert_eq!(env.effect(&effect).await, before, "nothing was written");
    assert_eq!(all_audit_events(&store).await.len(), audit_before);
    // A legal move whose settlement of the reservations was edited is refused too: a refusal
    // releases what it held, it never consumes it.
    let mut consume = env.change(
        &effect,
        EffectState::Ready,
        EffectState::Rejected {
            reason: steward_core::Rejection::Refused,
        },
        2_000,
    );
    assert_eq!(consume.settles, Some(ReservationState::Released));
    consume.settles = Some(ReservationState::Consumed);
    assert!(
        matches!(
            store.change_effect(&consume).await,
            Err(StoreError::IllegalTransition { .. })
        ),
        "a settlement the move's work does not imply must be refused"
    );
    // An attempt recorded on a move that does not enter `dispatching` is refused: it would
    // leave an attempt that nothing sends or answers.
    consume.settles = Some(ReservationState::Released);
    consume.attempt = Some(AttemptChange::Begin {
        number: 1,
        deadline_at: Millis(9_000),
        owner: writer(),
    });
    assert!(
        matches!(
            store.change_effect(&consume).await,
            Err(StoreError::IllegalTransition { .. })
        ),
        "an attempt on a refusal must be refused"
    );
    assert_eq!(env.effect(&effect).await, before, "nothing was written");
    // The constructor that follows the rules refuses an event they do not allow, naming the ids.
    let refused = EffectChange::of(
        &env.id,
        &effect,
        EffectState::Failed,
        steward_core::EffectEvent::BeginAttempt,
        NewEvidence::new(EvidenceKind::Note, EvidenceSource::Steward, "x"),
        env.actor(2_100),
    )
    .expect_err("failed takes no BeginAttempt");
    let message = refused.to_string();
    assert!(
        message.contains(effect.as_str()) && message.contains(env.id.as_str()),
        "{message}"
    );
}
