//! One key, one operation: operation keys and `Idempotency-Key` on invoke, also under concurrency.

use super::*;

/// 64 concurrent submissions of one (environment, action, operation key) with the same input
/// create exactly one invocation and effect; the other 63 get that invocation back.
pub async fn operation_key_is_unique_under_concurrency(store: Arc<dyn Store>) {
    let env = Env::new(&store, "opkey").await;
    let action = env.create_action(refund_definition("refund")).await;
    let input = json!({"charge": "ch_42", "amount": 500});

    let mut tasks = Vec::new();
    for i in 0..64 {
        let store = store.clone();
        let mut sub = env.submission(&action, input.clone());
        sub.operation_key = Some(op("order-42:refund"));
        sub.idempotency_key = Some(idem(&format!("req-{i}")));
        sub.provider_idempotency_key = Some(format!("steward-{}", sub.effect_id));
        tasks.push(tokio::spawn(async move {
            let outcome = store.submit(&sub).await;
            (sub, outcome)
        }));
    }
    let mut created = Vec::new();
    let mut existing = Vec::new();
    for task in tasks {
        let (sub, outcome) = task.await.expect("submit task panicked");
        match outcome.expect("submit failed") {
            SubmitOutcome::Created(record) => created.push((sub, record)),
            SubmitOutcome::Existing(record) => existing.push((sub, record)),
            other => panic!("expected Created or Existing, got {other:?}"),
        }
    }
    assert_eq!(
        created.len(),
        1,
        "exactly one submission creates the effect"
    );
    assert_eq!(existing.len(), 63, "every other submission finds it");
    let (winner, record) = &created[0];
    assert_eq!(record.id, winner.invocation_id);
    assert_eq!(record.effect_id, winner.effect_id);
    for (_, other) in &existing {
        assert_eq!(other.id, record.id, "Existing names the created invocation");
        assert_eq!(other.effect_id, record.effect_id);
    }

    // The created invocation is recorded as submitted.
    assert_eq!(record.env_id, env.id);
    assert_eq!(record.action_id, action.id);
    assert_eq!(record.action_name, "refund");
    assert_eq!(record.action_version, 1);
    assert!(record.governed, "an adapter action is governed");
    assert_eq!(record.state, EffectState::Ready);
    assert_eq!(record.input, input);
    assert_eq!(record.input_fingerprint, fingerprint(&input));
    assert_eq!(record.operation_key, Some(op("order-42:refund")));
    assert_eq!(record.retry_of, None);
    assert_eq!(record.created_by, env.key);
    assert_eq!(record.created_at, T0);
    assert_eq!(record.completed_at, None);
    assert_eq!(env.invocation(&record.id).await, *record);

    // One effect, with its first evidence and no attempt.
    let effects = store
        .list_effects(&env.id, &effects_of(&action))
        .await
        .expect("list_effects");
    assert_eq!(effects.total, 1, "one effect per operation key");
    assert_eq!(effects.items.len(), 1);
    assert_eq!(effects.items[0].id, record.effect_id);
    let detail = env.effect(&record.effect_id).await;
    assert_eq!(detail.effect.invocation_id, record.id);
    assert_eq!(detail.effect.operation_key, Some(op("order-42:refund")));
    assert_eq!(detail.effect.state, EffectState::Ready);
    assert_eq!(detail.effect.attempt_count, 0);
    assert_eq!(
        detail.effect.provider_idempotency_key,
        winner.provider_idempotency_key
    );
    assert!(detail.attempts.is_empty());
    assert_eq!(detail.evidence.len(), 1);
    assert_eq!(detail.evidence[0].seq, 1);
    assert_eq!(detail.evidence[0].kind.as_str(), "accepted");
    let invocations = store
        .list_invocations(&env.id, &invocations_of(&action))
        .await
        .expect("list_invocations");
    assert_eq!(invocations.total, 1);

    // A losing submission's idempotency key now names the existing invocation.
    let (loser, _) = &existing[17];
    match store.submit(loser).await.expect("resubmit") {
        SubmitOutcome::Replayed(r) => assert_eq!(r.id, record.id),
        other => panic!("a resent request whose key got Existing must replay it, got {other:?}"),
    }

    // Whatever the effect's state, the operation key keeps naming it.
    env.begin_attempt(&record.effect_id, 2_000).await;
    env.finish_attempt(
        &record.effect_id,
        EffectState::Succeeded { confirmed: true },
        3_000,
    )
    .await;
    let mut late = env.submission(&action, input.clone());
    late.operation_key = Some(op("order-42:refund"));
    match store.submit(&late).await.expect("late submit") {
        SubmitOutcome::Existing(r) => {
            assert_eq!(r.id, record.id);
            assert_eq!(
                r.state,
                EffectState::Succeeded { confirmed: true },
                "Existing shows the invocation as it stands"
            );
        }
        other => panic!("a settled operation is still found by its key, got {other:?}"),
    }
    assert!(store
        .invocation(&env.id, &late.invocation_id)
        .await
        .expect("invocation")
        .is_none());
    assert_eq!(
        store
            .list_effects(&env.id, &effects_of(&action))
            .await
            .expect("list_effects")
            .total,
        1
    );

    // The key is scoped to (environment, action): another action or environment is independent.
    let other_action = env.create_action(refund_definition("refund-other")).await;
    let mut sub = env.submission(&other_action, input.clone());
    sub.operation_key = Some(op("order-42:refund"));
    expect_created(store.submit(&sub).await.expect("submit"));
    let other_env = Env::new(&store, "opkey-other").await;
    let other_env_action = other_env.create_action(refund_definition("refund")).await;
    let mut sub = other_env.submission(&other_env_action, input);
    sub.operation_key = Some(op("order-42:refund"));
    expect_created(store.submit(&sub).await.expect("submit"));
}

/// The same operation key with a different input is refused, naming what the key already means.
pub async fn operation_key_with_other_input_conflicts(store: Arc<dyn Store>) {
    let env = Env::new(&store, "opconflict").await;
    let action = env.create_action(refund_definition("refund")).await;
    let mut first = env.submission(&action, json!({"charge": "ch_1", "amount": 500}));
    first.operation_key = Some(op("order-7"));
    let original = expect_created(store.submit(&first).await.expect("submit"));

    let mut second = env.submission(&action, json!({"charge": "ch_1", "amount": 900}));
    second.operation_key = Some(op("order-7"));
    second.idempotency_key = Some(idem("conflicting-request"));
    match store.submit(&second).await.expect("submit") {
        SubmitOutcome::OperationKeyConflict {
            effect_id,
            invocation_id,
        } => {
            assert_eq!(effect_id, original.effect_id);
            assert_eq!(invocation_id, original.id);
        }
        other => panic!("expected OperationKeyConflict, got {other:?}"),
    }
    assert!(store
        .invocation(&env.id, &second.invocation_id)
        .await
        .expect("invocation")
        .is_none());
    assert!(store
        .effect(&env.id, &second.effect_id)
        .await
        .expect("effect")
        .is_none());
    let effects = store
        .list_effects(&env.id, &effects_of(&action))
        .await
        .expect("list_effects");
    assert_eq!(effects.total, 1);
    assert_eq!(
        env.invocation(&original.id).await.input,
        json!({"charge": "ch_1", "amount": 500})
    );
    // The key finds its invocation, and only in its own action and environment.
    let found = store
        .invocation_by_operation_key(&env.id, &action.id, &op("order-7"))
        .await
        .expect("by operation key");
    assert_eq!(found.map(|i| i.id), Some(original.id.clone()));
    for (env_id, key) in [
        (&env.id, op("order-8")),
        (
            &Env::new(&store, "opconflict-other").await.id,
            op("order-7"),
        ),
    ] {
        let none = store
            .invocation_by_operation_key(env_id, &action.id, &key)
            .await
            .expect("by operation key");
        assert!(none.is_none(), "{none:?}");
    }

    // Key order in the input does not make it "different": the fingerprint is canonical.
    let mut reordered = env.submission(&action, json!({"amount": 500, "charge": "ch_1"}));
    reordered.operation_key = Some(op("order-7"));
    match store.submit(&reordered).await.expect("submit") {
        SubmitOutcome::Existing(r) => assert_eq!(r.id, original.id),
        other => panic!("expected Existing for the same canonical input, got {other:?}"),
    }
}

/// `Idempotency-Key` on invoke: in progress, replayed, mismatched, and scoped per environment.
pub async fn invoke_idempotency_keys(store: Arc<dyn Store>) {
    let env = Env::new(&store, "idem").await;
    let action = env.create_action(refund_definition("refund")).await;
    let key = idem("invoke-req-1");
    let input = json!({"charge": "ch_9", "amount": 100});

    let fresh = |request_fingerprint: &str| {
        let mut sub = env.submission(&action, input.clone());
        sub.idempotency_key = Some(key.clone());
        sub.request_fingerprint = request_fingerprint.to_string();
        sub
    };
    let original = expect_created(store.submit(&fresh("fp-a")).await.expect("submit"));

    // While the original request is being handled.
    let resend = fresh("fp-a");
    assert!(matches!(
        store.submit(&resend).await.expect("submit"),
        SubmitOutcome::InProgress
    ));
    assert!(store
        .invocation(&env.id, &resend.invocation_id)
        .await
        .expect("invocation")
        .is_none());
    assert!(matches!(
        store.submit(&fresh("fp-b")).await.expect("submit"),
        SubmitOutcome::IdempotencyMismatch
    ));
    // Abandoning is for generic requests: it must not free an invoke's key (a resend would
    // then record a second invocation of the same request).
    store
        .idempotency_abandon(&env.id, &env.key, &key)
        .await
        .expect("idempotency_abandon");
    assert!(matches!(
        store.submit(&fresh("fp-a")).await.expect("submit"),
        SubmitOutcome::InProgress
    ));

    // Answered: a resend gets the invocation as it stands now.
    store
        .finish_invoke_request(&env.id, &env.key, &key)
        .await
        .expect("finish_invoke_request");
    env.begin_attempt(&original.effect_id, 2_000).await;
    match store.submit(&fresh("fp-a")).await.expect("submit") {
        SubmitOutcome::Replayed(r) => {
            assert_eq!(r.id, original.id);
            assert_eq!(r.effect_id, original.effect_id);
            assert_eq!(
                r.state,
                EffectState::Dispatching,
                "replay shows the current state"
            );
        }
        other => panic!("expected Replayed, got {other:?}"),
    }
    assert!(matches!(
        store.submit(&fresh("fp-b")).await.expect("submit"),
        SubmitOutcome::IdempotencyMismatch
    ));
    let all = store
        .list_invocations(&env.id, &invocations_of(&action))
        .await
        .expect("list");
    assert_eq!(all.total, 1, "no resend created an invocation");

    // The same key in another environment is a different key.
    let other = Env::new(&store, "idem-other").await;
    let other_action = other.create_action(refund_definition("refund")).await;
    let mut sub = other.submission(&other_action, input.clone());
    sub.idempotency_key = Some(key.clone());
    sub.request_fingerprint = "fp-a".into();
    let theirs = expect_created(store.submit(&sub).await.expect("submit"));
    assert_ne!(theirs.id, original.id);
    match store.submit(&fresh("fp-a")).await.expect("submit") {
        SubmitOutcome::Replayed(r) => assert_eq!(r.id, original.id),
        other => panic!("the first environment's key is unaffected, got {other:?}"),
    }
}

/// Many concurrent sends of one `Idempotency-Key` (no operation key) record one invocation.
pub async fn invoke_idempotency_key_under_concurrency(store: Arc<dyn Store>) {
    let env = Env::new(&store, "idem-race").await;
    let action = env.create_action(refund_definition("refund")).await;
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let store = store.clone();
        let mut sub = env.submission(&action, json!({"charge": "ch_r", "amount": 1}));
        sub.idempotency_key = Some(idem("same-request"));
        sub.request_fingerprint = "fp-same".into();
        tasks.push(tokio::spawn(async move { store.submit(&sub).await }));
    }
    let (mut created, mut in_progress) = (0, 0);
    for task in tasks {
        match task.await.expect("task").expect("submit") {
            SubmitOutcome::Created(_) => created += 1,
            SubmitOutcome::InProgress => in_progress += 1,
            other => panic!("expected Created or InProgress, got {other:?}"),
        }
    }
    assert_eq!((created, in_progress), (1, 31));
    assert_chain_intact(&store).await;
    let all = store
        .list_invocations(&env.id, &invocations_of(&action))
        .await
        .expect("list");
    assert_eq!(all.total, 1);
}
