//! The invoke hot path: its one-read lookups (`caller`, `invoke_context`) and its one-commit
//! writes (`submit_and_begin`, an answer that marks its request answered).

use super::*;
use steward_core::{EvidenceKind, EvidenceSource};
use steward_store::{FirstAttempt, FirstAttemptOutcome};

/// The first attempt of `sub` as the server plans it: no quantities, attempt 1 owned by
/// `writer()`.
pub fn first_attempt(env: &Env, sub: &Submission, at: i64) -> FirstAttempt {
    let mut begin = env.change(
        &sub.effect_id,
        EffectState::Ready,
        EffectState::Dispatching,
        at,
    );
    begin.attempt = Some(AttemptChange::Begin {
        number: 1,
        deadline_at: Millis(at + 30_000),
        owner: writer(),
    });
    begin.evidence = Some(NewEvidence::new(
        EvidenceKind::Attempt,
        EvidenceSource::Steward,
        "attempt 1 recorded",
    ));
    FirstAttempt {
        impact: impact_request(env, &sub.effect_id, vec![mutation(Some(1))], at),
        begin,
    }
}

/// `submit_and_begin` commits the invocation and its first attempt together; a resubmission
/// of the same operation key begins nothing; the recorded answer marks the request answered.
pub async fn submit_and_begin_commits_the_attempt_with_the_invocation(store: Arc<dyn Store>) {
    let env = Env::new(&store, "hot").await;
    let action = env.create_action(refund_definition("refund")).await;
    let mut sub = env.submission(&action, json!({"n": 1}));
    sub.operation_key = Some(op("order-1"));
    sub.idempotency_key = Some(idem("req-1"));
    let first = first_attempt(&env, &sub, 2_000);
    let done = store
        .submit_and_begin(&sub, &first)
        .await
        .expect("submit_and_begin");
    let inv = expect_created(done.outcome);
    assert_eq!(done.first, Some(FirstAttemptOutcome::Begun));
    let detail = env.effect(&inv.effect_id).await;
    assert_eq!(detail.effect.state, EffectState::Dispatching);
    assert_eq!(detail.effect.attempt_count, 1);
    assert_eq!(detail.attempts.len(), 1);
    assert_eq!(detail.attempts[0].status, "dispatching");
    assert_eq!(
        env.invocation(&inv.id).await.state,
        EffectState::Dispatching
    );

    // While the attempt is out, a resend of the request is in progress.
    let mut resend = env.submission(&action, json!({"n": 1}));
    resend.operation_key = sub.operation_key.clone();
    resend.idempotency_key = sub.idempotency_key.clone();
    resend.request_fingerprint = sub.request_fingerprint.clone();
    let again = store
        .submit_and_begin(&resend, &first_attempt(&env, &resend, 2_100))
        .await
        .expect("resend");
    assert!(matches!(again.outcome, SubmitOutcome::InProgress));
    assert_eq!(
        again.first, None,
        "nothing begins for a request in progress"
    );

    // The answer marks the request answered in its own transaction.
    let mut finish = env.change(
        &inv.effect_id,
        EffectState::Dispatching,
        EffectState::Succeeded { confirmed: true },
        2_200,
    );
    finish.attempt = Some(AttemptChange::Finish {
        number: 1,
        response_status: Some(200),
        error: None,
    });
    finish.answers_request = sub.idempotency_key.clone();
    finish.response_status = Some(200);
    let after = store.change_effect_and_read(&finish).await.expect("finish");
    assert_eq!(after.id, inv.id);
    assert_eq!(after.state, EffectState::Succeeded { confirmed: true });
    assert_eq!(after.response_status, Some(200));
    assert_eq!(
        after,
        env.invocation(&inv.id).await,
        "what a read finds after it"
    );
    match store
        .submit(&resend)
        .await
        .expect("resend after the answer")
    {
        SubmitOutcome::Replayed(replayed) => assert_eq!(replayed.id, inv.id),
        other => panic!("expected Replayed after the answer, got {other:?}"),
    }

    // The same operation key without the request key: the existing invocation, no new attempt.
    let mut repeat = env.submission(&action, json!({"n": 1}));
    repeat.operation_key = sub.operation_key.clone();
    let existing = store
        .submit_and_begin(&repeat, &first_attempt(&env, &repeat, 2_300))
        .await
        .expect("repeat");
    match existing.outcome {
        SubmitOutcome::Existing(found) => assert_eq!(found.id, inv.id),
        other => panic!("expected Existing, got {other:?}"),
    }
    assert_eq!(existing.first, None);
    assert_eq!(env.effect(&inv.effect_id).await.attempts.len(), 1);
    assert!(store
        .effect(&env.id, &repeat.effect_id)
        .await
        .expect("effect")
        .is_none());
}

/// A halted environment or a refusing limit leaves the invocation committed `ready`, with no
/// attempt (and, refused, no reservation): what the separate calls would leave.
pub async fn submit_and_begin_halted_or_refused_records_no_attempt(store: Arc<dyn Store>) {
    let env = Env::new(&store, "hot-halt").await;
    let action = env.create_action(refund_definition("refund")).await;
    let limit = limit_record(
        &env,
        json!({"name": "one", "dimension": "resource_mutations", "period": "total", "amount": 1}),
    );
    store
        .create_limit(&limit, &env.actor(T0.0))
        .await
        .expect("create_limit");
    let taken = env.submission(&action, json!({"n": 1}));
    let done = store
        .submit_and_begin(&taken, &first_attempt(&env, &taken, 2_000))
        .await
        .expect("first");
    assert_eq!(done.first, Some(FirstAttemptOutcome::Begun));
    assert_eq!(usage_of(&env, &limit.id, 2_000).await.reserved, 1);

    let refused = env.submission(&action, json!({"n": 2}));
    let done = store
        .submit_and_begin(&refused, &first_attempt(&env, &refused, 2_100))
        .await
        .expect("refused");
    expect_created(done.outcome);
    match done.first {
        Some(FirstAttemptOutcome::Refused(ReserveOutcome::Refused { limit_id, .. })) => {
            assert_eq!(limit_id, limit.id)
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let detail = env.effect(&refused.effect_id).await;
    assert_eq!(detail.effect.state, EffectState::Ready);
    assert!(detail.attempts.is_empty());
    assert_eq!(usage_of(&env, &limit.id, 2_100).await.reserved, 1);

    store
        .archive_limit(&env.id, &limit.id, &env.actor(2_150))
        .await
        .expect("archive");
    store
        .set_halted(
            HaltChange::halt(&env.id, Some("incident")),
            &env.actor(2_200),
        )
        .await
        .expect("halt");
    let parked = env.submission(&action, json!({"n": 3}));
    let done = store
        .submit_and_begin(&parked, &first_attempt(&env, &parked, 2_300))
        .await
        .expect("halted");
    expect_created(done.outcome);
    assert_eq!(done.first, Some(FirstAttemptOutcome::Halted));
    let detail = env.effect(&parked.effect_id).await;
    assert_eq!(detail.effect.state, EffectState::Ready);
    assert!(detail.attempts.is_empty(), "no attempt while halted");
}

/// `caller` and `invoke_context` read what the single reads do.
pub async fn invoke_reads_match_the_single_reads(store: Arc<dyn Store>) {
    let env = Env::new(&store, "hot-read").await;
    let key = key_record(&env, "agent");
    store
        .insert_key(&key, &Actor::system(T0))
        .await
        .expect("insert_key");
    let (found, environment) = store
        .caller(&key.token_hash, T0)
        .await
        .expect("caller")
        .expect("the key is found");
    assert_eq!(found.id, key.id);
    assert_eq!(environment.id, env.id);
    assert!(store
        .caller("sha256:nobody", T0)
        .await
        .expect("caller")
        .is_none());

    let action = env.create_action(refund_definition("refund")).await;
    let credential = secret_record(&env, "STRIPE_TEST_KEY", b"sealed");
    let unrelated = secret_record(&env, "OTHER_KEY", b"sealed too");
    for secret in [&credential, &unrelated] {
        store
            .put_secret(secret, None, &env.actor(T0.0))
            .await
            .expect("put_secret");
    }
    let policy = policy_record(&env, policy_spec("deny refunds", "auto_deny"));
    store
        .create_policy(&policy, None, &env.actor(T0.0))
        .await
        .expect("create_policy");
    let context = |reference: String, request: Option<IdempotencyKey>| {
        let (store, hash) = (store.clone(), key.token_hash.clone());
        async move {
            store
                .invoke_context(&hash, T0, &reference, request.as_ref())
                .await
                .expect("invoke_context")
                .expect("the caller is found")
        }
    };
    assert!(store
        .invoke_context("sha256:nobody", T0, action.name.as_str(), None)
        .await
        .expect("invoke_context")
        .is_none());
    let nothing = context("missing".into(), None).await;
    assert_eq!(nothing.key.id, key.id);
    assert_eq!(nothing.environment.id, env.id);
    assert!(nothing.action.is_none());
    for reference in [action.id.as_str(), action.name.as_str()] {
        let context = context(reference.to_string(), Some(idem("never-sent"))).await;
        assert_eq!(context.action.as_ref().map(|a| &a.id), Some(&action.id));
        assert_eq!(context.policies.len(), 1);
        assert_eq!(context.policies[0].id, policy.id);
        assert!(context.earlier.is_none());
        let names: Vec<&str> = context.secrets.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["STRIPE_TEST_KEY"],
            "the action's secrets, and only those"
        );
        assert_eq!(context.secrets[0].ciphertext, b"sealed");
    }

    let mut sub = env.submission(&action, json!({"n": 1}));
    sub.idempotency_key = Some(idem("req-ctx"));
    // Sent by the key the context is read with: `Idempotency-Key` is scoped to its sender.
    sub.actor = key.id.clone();
    let inv = expect_created(store.submit(&sub).await.expect("submit"));
    let earlier = |context: steward_store::InvokeContext| context.earlier.expect("earlier");
    let pending = earlier(context(action.name.clone(), sub.idempotency_key.clone()).await);
    assert!(matches!(
        pending.clone().outcome(&sub.request_fingerprint),
        SubmitOutcome::InProgress
    ));
    assert!(matches!(
        pending.outcome("another request"),
        SubmitOutcome::IdempotencyMismatch
    ));
    store
        .finish_invoke_request(&env.id, &key.id, sub.idempotency_key.as_ref().unwrap())
        .await
        .expect("finish_invoke_request");
    let answered = earlier(context(action.name.clone(), sub.idempotency_key.clone()).await);
    match answered.outcome(&sub.request_fingerprint) {
        SubmitOutcome::Replayed(replayed) => assert_eq!(replayed.id, inv.id),
        other => panic!("expected Replayed, got {other:?}"),
    }

    // A submission that parks (or is denied) is its own answer: its key is done in the same
    // commit, with no `finish_invoke_request`.
    for (n, initial) in [
        (2, EffectState::AwaitingApproval),
        (
            3,
            EffectState::Rejected {
                reason: Rejection::Denied,
            },
        ),
    ] {
        let mut sub = env.submission(&action, json!({"n": n}));
        sub.idempotency_key = Some(idem(&format!("req-ctx-{n}")));
        sub.actor = key.id.clone();
        sub.initial = initial;
        let inv = expect_created(store.submit(&sub).await.expect("submit"));
        let done = earlier(context(action.name.clone(), sub.idempotency_key.clone()).await);
        match done.outcome(&sub.request_fingerprint) {
            SubmitOutcome::Replayed(replayed) => assert_eq!(replayed.id, inv.id),
            other => panic!("{initial:?}: expected Replayed at once, got {other:?}"),
        }
    }
}

/// Concurrent `submit_and_begin`s of one operation key (and, in pairs, one `Idempotency-Key`)
/// create one effect with one attempt; the others find it; the audit chain stays one line.
pub async fn submit_and_begin_under_concurrency_begins_once(store: Arc<dyn Store>) {
    let env = Env::new(&store, "hot-race").await;
    let action = env.create_action(refund_definition("refund")).await;
    let tasks: Vec<_> = (0..24)
        .map(|i| {
            let mut sub = env.submission(&action, json!({"n": 1}));
            sub.operation_key = Some(op("order-race"));
            if i % 2 == 0 {
                sub.idempotency_key = Some(idem(&format!("req-race-{}", i % 4)));
            }
            let first = first_attempt(&env, &sub, 2_000 + i);
            let store = store.clone();
            tokio::spawn(async move { store.submit_and_begin(&sub, &first).await })
        })
        .collect();
    let mut begun = Vec::new();
    for task in tasks {
        let done = task.await.expect("task").expect("submit_and_begin");
        match done.outcome {
            SubmitOutcome::Created(inv) => {
                assert_eq!(done.first, Some(FirstAttemptOutcome::Begun));
                begun.push(inv.effect_id);
            }
            SubmitOutcome::Existing(_) | SubmitOutcome::InProgress | SubmitOutcome::Replayed(_) => {
                assert_eq!(done.first, None)
            }
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    assert_eq!(begun.len(), 1, "exactly one submission created the effect");
    let effects = store
        .list_effects(&env.id, &effects_of(&action))
        .await
        .expect("list_effects");
    assert_eq!(effects.total, 1);
    assert_eq!(env.effect(&begun[0]).await.attempts.len(), 1);
    assert_chain_intact(&store).await;
}

/// Concurrent `submit_and_begin`s against one limit, through every handle given (several
/// connection pools, as several replicas have), reserve exactly what the limit holds: the rest
/// are refused and record no attempt.
pub async fn submit_and_begin_never_exceeds_a_limit(stores: Vec<Arc<dyn Store>>) {
    /// What the limit holds, and the invokes against it: enough to race, few enough that the
    /// handles' pools stay well inside a shared server's `max_connections`.
    const AMOUNT: i64 = 8;
    const INVOKES: i64 = 24;
    let env = Env::new(&stores[0], "hot-limit").await;
    let action = env.create_action(refund_definition("refund")).await;
    let limit = limit_record(
        &env,
        json!({"name": "eight", "dimension": "resource_mutations", "period": "total", "amount": AMOUNT}),
    );
    stores[0]
        .create_limit(&limit, &env.actor(T0.0))
        .await
        .expect("create_limit");
    let tasks: Vec<_> = (0..INVOKES)
        .map(|i| {
            let store = stores[i as usize % stores.len()].clone();
            let sub = env.submission(&action, json!({ "n": i }));
            let first = first_attempt(&env, &sub, 2_000 + i);
            tokio::spawn(async move {
                let done = store.submit_and_begin(&sub, &first).await;
                (sub.effect_id, done)
            })
        })
        .collect();
    let (mut begun, mut refused) = (Vec::new(), Vec::new());
    for task in tasks {
        let (effect, done) = task.await.expect("task");
        let done = done.expect("submit_and_begin");
        expect_created(done.outcome);
        match done.first {
            Some(FirstAttemptOutcome::Begun) => begun.push(effect),
            Some(FirstAttemptOutcome::Refused(ReserveOutcome::Refused { limit_id, .. })) => {
                assert_eq!(limit_id, limit.id);
                refused.push(effect);
            }
            other => panic!("expected Begun or Refused, got {other:?}"),
        }
    }
    assert_eq!(
        (begun.len() as i64, refused.len() as i64),
        (AMOUNT, INVOKES - AMOUNT),
        "exactly the limit is reserved"
    );
    assert_eq!(usage_of(&env, &limit.id, 3_000).await.reserved, AMOUNT);
    for effect in &begun {
        assert_eq!(env.effect(effect).await.attempts.len(), 1);
    }
    for effect in &refused {
        let detail = env.effect(effect).await;
        assert_eq!(detail.effect.state, EffectState::Ready);
        assert!(detail.attempts.is_empty() && detail.reservations.is_empty());
    }
}

/// A halt committed while invokes are in flight: each in-flight invoke either began (its
/// attempt recorded) or was parked (nothing recorded), and every invoke that starts after the
/// halt returned is parked.
pub async fn a_halt_during_concurrent_invokes_parks_every_later_one(store: Arc<dyn Store>) {
    const BEFORE: i64 = 32;
    const AFTER: i64 = 8;
    let env = Env::new(&store, "hot-halt-race").await;
    let action = env.create_action(refund_definition("refund")).await;
    let invoke = |i: i64| {
        let store = store.clone();
        let sub = env.submission(&action, json!({ "n": i }));
        let first = first_attempt(&env, &sub, 2_000 + i);
        tokio::spawn(async move {
            let done = store.submit_and_begin(&sub, &first).await;
            (sub.effect_id, done)
        })
    };
    let in_flight: Vec<_> = (0..BEFORE).map(invoke).collect();
    tokio::task::yield_now().await;
    store
        .set_halted(
            HaltChange::halt(&env.id, Some("incident")),
            &env.actor(2_500),
        )
        .await
        .expect("halt");
    let later: Vec<_> = (BEFORE..BEFORE + AFTER).map(invoke).collect();
    let mut outcomes = Vec::new();
    for (n, task) in in_flight.into_iter().chain(later).enumerate() {
        let (effect, done) = task.await.expect("task");
        let done = done.expect("submit_and_begin");
        expect_created(done.outcome);
        let detail = env.effect(&effect).await;
        match done.first {
            Some(FirstAttemptOutcome::Begun) => {
                assert!(n < BEFORE as usize, "an invoke after the halt began");
                assert_eq!(detail.attempts.len(), 1);
            }
            Some(FirstAttemptOutcome::Halted) => {
                assert_eq!(detail.effect.state, EffectState::Ready);
                assert!(detail.attempts.is_empty(), "a parked invoke has no attempt");
            }
            other => panic!("expected Begun or Halted, got {other:?}"),
        }
        outcomes.push(done.first);
    }
    assert_eq!(outcomes.len() as i64, BEFORE + AFTER);
}
