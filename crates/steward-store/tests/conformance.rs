//! The store conformance suite: what every `Store` backend must do, written against the trait
//! only (no SQL, nothing backend-specific inside the suite functions).
//!
//! [`run_all`] runs every sub-test against one store, one after the other. Each sub-test uses its
//! own freshly named environments and ids (unique per process run), so they can share a store and
//! a database that outlives the run. Only [`recover_settles_what_a_crash_left`] and
//! [`audit_chain_verifies_and_detects_tampering`] look at store-wide state (recovery and the audit
//! log are global), and they are written so that earlier sub-tests do not disturb them as long
//! as nothing else writes to the store while the suite runs.
//!
//! At the bottom, every sub-test is also its own `#[tokio::test]` against a fresh SQLite file and
//! against a fresh PostgreSQL database (`STEWARD_TEST_DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/postgres`; each test creates `steward_test_<unique>` there
//! and drops it afterwards). An unreachable PostgreSQL fails those tests: it is never skipped.

use serde_json::{json, Value};
use std::collections::{BTreeSet, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};
use steward_core::impact::{LimitSpec, Quantity, Refusal, Usage};
use steward_core::policy::PolicySpec;
use steward_core::{
    fingerprint, ActionDefinition, ActionId, EffectId, EffectState, EnvironmentId, IdempotencyKey,
    InvocationId, KeyId, Millis, OperationKey, ReplicaId,
};
use steward_core::{LimitId, PolicyId, Rejection};
use steward_store::{
    event_hash, verify_chain, ActionRecord, Actor, ApiKeyRecord, AttemptChange, ChainError,
    EffectChange, EffectDetail, EffectFilter, IdempotencyBegin, InvocationFilter, InvocationRecord,
    NewEvidence, PostgresStore, RecoveryReport, SecretRecord, SqliteStore, Store, StoreError,
    Submission, SubmitOutcome, Sweep, GENESIS_HASH,
};
use steward_store::{ImpactRequest, LimitRecord, PolicyRecord, ReserveOutcome};

#[path = "conformance/replicas.rs"]
mod replicas;
use replicas::*;

// ------------------------------------------------------------------------------------------
// The suite
// ------------------------------------------------------------------------------------------

/// Runs every conformance sub-test against `store`, one after the other.
pub async fn run_all(store: Arc<dyn Store>) {
    operation_key_is_unique_under_concurrency(store.clone()).await;
    operation_key_with_other_input_conflicts(store.clone()).await;
    invoke_idempotency_keys(store.clone()).await;
    invoke_idempotency_key_under_concurrency(store.clone()).await;
    effect_change_is_compare_and_set(store.clone()).await;
    effect_change_under_concurrency_moves_once(store.clone()).await;
    recover_settles_what_a_crash_left(store.clone()).await;
    retry_of_requires_a_settled_failure(store.clone()).await;
    generic_idempotency(store.clone()).await;
    actions_are_versioned(store.clone()).await;
    secrets_are_versioned_and_isolated(store.clone()).await;
    keys_are_unique_by_hash(store.clone()).await;
    environments_are_walls(store.clone()).await;
    list_filters_and_paging(store.clone()).await;
    writes_naming_an_unknown_environment_are_not_duplicates(store.clone()).await;
    policies_are_versioned_and_walled(store.clone()).await;
    limit_reservations_never_exceed_a_limit(store.clone()).await;
    a_halted_environment_records_no_attempt(store.clone()).await;
    a_policy_decision_is_recorded_with_the_invocation(store.clone()).await;
    a_sweep_takes_over_only_dead_replicas_work(store.clone()).await;
    concurrent_sweeps_on_one_handle_take_each_piece_once(store.clone()).await;
    reconcile_claims_do_not_overlap(store.clone()).await;
    approval_changes_are_announced(store.clone()).await;
    // Last: it verifies the whole chain, including every event the sub-tests above appended.
    audit_chain_verifies_and_detects_tampering(store.clone()).await;
}

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
    assert_eq!(detail.evidence[0].kind, "submitted");
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
        .idempotency_abandon(&env.id, &key)
        .await
        .expect("idempotency_abandon");
    assert!(matches!(
        store.submit(&fresh("fp-a")).await.expect("submit"),
        SubmitOutcome::InProgress
    ));

    // Answered: a resend gets the invocation as it stands now.
    store
        .finish_invoke_request(&env.id, &key)
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
    begin.evidence = Some(NewEvidence::new("attempt", "steward", "attempt 1 recorded"));
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
    let audit_before = store.audit_events(0, 100_000).await.expect("audit").len();
    let mut stale = env.change(&effect, EffectState::Ready, EffectState::Failed, 2_100);
    stale.evidence = Some(NewEvidence::new(
        "blocked",
        "steward",
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
    assert_eq!(
        store.audit_events(0, 100_000).await.expect("audit").len(),
        audit_before
    );

    // Evidence without a state change.
    let note = NewEvidence::new("note", "operator", "looked at the dashboard")
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
        "timeout",
        "transport",
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
    assert_eq!(kinds, vec!["submitted", "attempt", "note", "timeout"]);
    let ats: Vec<Millis> = detail.evidence.iter().map(|e| e.at).collect();
    assert_eq!(ats, vec![T0, Millis(2_000), Millis(2_500), Millis(3_000)]);
    assert_eq!(detail.evidence[2].source, "operator");
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
        "reconcile",
        "stripe",
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
    assert_eq!(evidence[4].kind, "reconcile");
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
            "attempt",
            "steward",
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
            .idempotency_begin(&env.id, &generic, "fp-g", T0, &writer())
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
    assert_eq!(last.kind, "restart");
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
    assert_eq!(detail.evidence.last().expect("evidence").kind, "restart");
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
            .idempotency_begin(&env.id, &generic, "fp-g", Millis(9_500), &writer())
            .await
            .expect("begin"),
        IdempotencyBegin::Begun
    );
    store
        .idempotency_abandon(&env.id, &generic)
        .await
        .expect("abandon");

    // A second recovery finds nothing more to do.
    let details = [
        env.effect(&dispatching.effect_id).await,
        env.effect(&ready.effect_id).await,
        env.effect(&parked.effect_id).await,
        env.effect(&settled.effect_id).await,
    ];
    let audit_len = store.audit_events(0, 100_000).await.expect("audit").len();
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
    assert_eq!(
        store.audit_events(0, 100_000).await.expect("audit").len(),
        audit_len
    );
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
        "blocked",
        "steward",
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

/// `Idempotency-Key` on the other write endpoints.
pub async fn generic_idempotency(store: Arc<dyn Store>) {
    let env = Env::new(&store, "generic").await;
    let key = idem("create-secret-1");
    let begin = |fp: &'static str| {
        let (store, env_id, key) = (store.clone(), env.id.clone(), key.clone());
        async move {
            store
                .idempotency_begin(&env_id, &key, fp, T0, &writer())
                .await
                .expect("idempotency_begin")
        }
    };
    assert_eq!(begin("fp-1").await, IdempotencyBegin::Begun);
    assert_eq!(begin("fp-1").await, IdempotencyBegin::InProgress);
    assert_eq!(begin("fp-2").await, IdempotencyBegin::Mismatch);

    let body = json!({"success": true, "data": {"name": "STRIPE_TEST_KEY", "version": 1}});
    store
        .idempotency_finish(&env.id, &key, 201, &body, Millis(2_000))
        .await
        .expect("finish");
    assert_eq!(
        begin("fp-1").await,
        IdempotencyBegin::Replay {
            status: 201,
            body: body.clone()
        }
    );
    assert_eq!(begin("fp-2").await, IdempotencyBegin::Mismatch);
    // Abandon only forgets a request still in progress, never a recorded answer.
    store
        .idempotency_abandon(&env.id, &key)
        .await
        .expect("abandon");
    assert_eq!(
        begin("fp-1").await,
        IdempotencyBegin::Replay {
            status: 201,
            body: body.clone()
        }
    );

    let failed = idem("create-secret-2");
    assert_eq!(
        store
            .idempotency_begin(&env.id, &failed, "fp-x", T0, &writer())
            .await
            .expect("begin"),
        IdempotencyBegin::Begun
    );
    store
        .idempotency_abandon(&env.id, &failed)
        .await
        .expect("abandon");
    assert_eq!(
        store
            .idempotency_begin(&env.id, &failed, "fp-y", T0, &writer())
            .await
            .expect("begin"),
        IdempotencyBegin::Begun
    );

    // Scoped per environment.
    let other = Env::new(&store, "generic-other").await;
    assert_eq!(
        store
            .idempotency_begin(&other.id, &key, "fp-2", T0, &writer())
            .await
            .expect("begin"),
        IdempotencyBegin::Begun
    );
    assert_eq!(
        begin("fp-1").await,
        IdempotencyBegin::Replay { status: 201, body }
    );

    // Concurrent first sights: one goes ahead.
    let race = idem("race");
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (store, env_id, race) = (store.clone(), env.id.clone(), race.clone());
        tasks.push(tokio::spawn(async move {
            store
                .idempotency_begin(&env_id, &race, "fp-r", T0, &writer())
                .await
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("task").expect("idempotency_begin"));
    }
    let begun = outcomes
        .iter()
        .filter(|o| **o == IdempotencyBegin::Begun)
        .count();
    let in_progress = outcomes
        .iter()
        .filter(|o| **o == IdempotencyBegin::InProgress)
        .count();
    assert_eq!((begun, in_progress), (1, 31), "{outcomes:?}");
    store
        .idempotency_abandon(&env.id, &failed)
        .await
        .expect("abandon");
    store
        .idempotency_abandon(&env.id, &race)
        .await
        .expect("abandon");
}

/// Actions: unique live names, appended versions, optimistic concurrency, soft delete.
pub async fn actions_are_versioned(store: Arc<dyn Store>) {
    let env = Env::new(&store, "actions").await;
    let v1 = refund_definition("refund");
    let action = env.create_action(v1.clone()).await;
    assert_eq!(action.version, 1);
    assert_eq!(action.definition, v1);
    assert_eq!(action.env_id, env.id);
    assert_eq!(
        store.action(&env.id, "refund").await.expect("action"),
        Some(action.clone()),
        "found by name"
    );

    let clash = action_record(&env, v1.clone());
    assert!(matches!(
        store.create_action(&clash, &env.actor(1_500)).await,
        Err(StoreError::Duplicate { .. })
    ));
    assert!(store
        .action(&env.id, clash.id.as_str())
        .await
        .expect("action")
        .is_none());

    let mut v2 = v1.clone();
    v2.description = Some("refund a charge".into());
    let mut v3 = v2.clone();
    v3.requires_approval = true;
    let updated = store
        .update_action(&env.id, &action.id, 1, &v2, &env.actor(2_000))
        .await
        .expect("update to 2");
    assert_eq!(updated.version, 2);
    assert_eq!(updated.definition, v2);
    let updated = store
        .update_action(&env.id, &action.id, 2, &v3, &env.actor(3_000))
        .await
        .expect("update to 3");
    assert_eq!(updated.version, 3);
    assert_eq!(updated.updated_at, Millis(3_000));
    match store
        .update_action(&env.id, &action.id, 1, &v2, &env.actor(3_500))
        .await
    {
        Err(StoreError::VersionConflict { expected, found }) => {
            assert_eq!((expected, found), (1, 3))
        }
        other => panic!("a stale edit must be a VersionConflict, got {other:?}"),
    }
    let current = store
        .action(&env.id, action.id.as_str())
        .await
        .expect("action")
        .expect("live");
    assert_eq!(current.version, 3);
    assert_eq!(current.definition, v3);
    // Renaming onto another live action's name is a Duplicate and changes nothing.
    let neighbour = env.create_action(template_definition("neighbour")).await;
    let mut renamed = v3.clone();
    renamed.name = "neighbour".into();
    assert!(matches!(
        store
            .update_action(&env.id, &action.id, 3, &renamed, &env.actor(3_600))
            .await,
        Err(StoreError::Duplicate { .. })
    ));
    assert_eq!(
        store
            .action(&env.id, action.id.as_str())
            .await
            .expect("action"),
        Some(current.clone())
    );
    assert_eq!(
        store
            .action(&env.id, "neighbour")
            .await
            .expect("action")
            .map(|a| a.id),
        Some(neighbour.id)
    );

    let versions = store
        .action_versions(&env.id, &action.id)
        .await
        .expect("versions");
    let numbers: Vec<u32> = versions.iter().map(|v| v.version).collect();
    assert_eq!(numbers, vec![1, 2, 3]);
    let definitions: Vec<&ActionDefinition> = versions.iter().map(|v| &v.definition).collect();
    assert_eq!(definitions, vec![&v1, &v2, &v3]);
    assert!(versions.iter().all(|v| v.action_id == action.id));
    assert_eq!(versions[1].created_at, Millis(2_000));
    assert_eq!(versions[1].created_by.as_ref(), Some(&env.key));
    let listed = store.list_actions(&env.id).await.expect("list");
    assert_eq!(listed.iter().filter(|a| a.id == action.id).count(), 1);

    // Another environment neither sees nor touches it.
    let other = Env::new(&store, "actions-other").await;
    assert!(store
        .action(&other.id, action.id.as_str())
        .await
        .expect("action")
        .is_none());
    assert!(store
        .action(&other.id, "refund")
        .await
        .expect("action")
        .is_none());
    assert!(store
        .list_actions(&other.id)
        .await
        .expect("list")
        .is_empty());
    assert!(store
        .action_versions(&other.id, &action.id)
        .await
        .expect("versions")
        .is_empty());
    assert!(store
        .update_action(&other.id, &action.id, 3, &v1, &other.actor(4_000))
        .await
        .is_err());
    assert!(!store
        .delete_action(&other.id, &action.id, &other.actor(4_000))
        .await
        .expect("delete"));
    assert_eq!(
        store
            .action(&env.id, action.id.as_str())
            .await
            .expect("action")
            .expect("live")
            .version,
        3
    );
    // ... and may use the same name for its own action.
    other.create_action(refund_definition("refund")).await;

    // Delete hides the action but keeps its history; the name is free again.
    assert!(store
        .delete_action(&env.id, &action.id, &env.actor(5_000))
        .await
        .expect("delete"));
    assert!(!store
        .delete_action(&env.id, &action.id, &env.actor(5_001))
        .await
        .expect("delete again"));
    assert!(store
        .action(&env.id, action.id.as_str())
        .await
        .expect("action")
        .is_none());
    assert!(store
        .action(&env.id, "refund")
        .await
        .expect("action")
        .is_none());
    assert!(store
        .list_actions(&env.id)
        .await
        .expect("list")
        .iter()
        .all(|a| a.id != action.id));
    assert_eq!(
        store
            .action_versions(&env.id, &action.id)
            .await
            .expect("versions")
            .len(),
        3
    );
    assert!(
        store
            .update_action(&env.id, &action.id, 3, &v1, &env.actor(5_500))
            .await
            .is_err(),
        "a deleted action takes no edits"
    );
    let reborn = env.create_action(refund_definition("refund")).await;
    assert_ne!(reborn.id, action.id);
    assert_eq!(
        store
            .action(&env.id, "refund")
            .await
            .expect("action")
            .map(|a| a.id),
        Some(reborn.id.clone())
    );
    assert_eq!(
        store
            .action_versions(&env.id, &reborn.id)
            .await
            .expect("versions")
            .len(),
        1
    );

    // Concurrent creations of one name: exactly one wins.
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let store = store.clone();
        let record = action_record(&env, refund_definition("raced"));
        let actor = env.actor(6_000);
        tasks.push(tokio::spawn(async move {
            store.create_action(&record, &actor).await
        }));
    }
    let (mut ok, mut duplicate) = (0, 0);
    for task in tasks {
        match task.await.expect("task") {
            Ok(()) => ok += 1,
            Err(StoreError::Duplicate { .. }) => duplicate += 1,
            Err(other) => panic!("a lost name race must be Duplicate, got {other:?}"),
        }
    }
    assert_eq!((ok, duplicate), (1, 15));
    assert_chain_intact(&store).await;
    let names: Vec<String> = store
        .list_actions(&env.id)
        .await
        .expect("list")
        .into_iter()
        .map(|a| a.name)
        .collect();
    assert_eq!(names.iter().filter(|n| *n == "raced").count(), 1);
}

/// Secrets: created at version 1, rotated by compare-and-set on the version, isolated.
pub async fn secrets_are_versioned_and_isolated(store: Arc<dyn Store>) {
    let env = Env::new(&store, "secrets").await;
    let sealed = secret_record(&env, "STRIPE_TEST_KEY", b"sealed-one");
    let stored = store
        .put_secret(&sealed, None, &env.actor(1_000))
        .await
        .expect("create");
    assert_eq!(stored.version, 1);
    assert_eq!(stored.ciphertext, b"sealed-one".to_vec());
    assert_eq!(stored.nonce, sealed.nonce);
    assert_eq!(stored.allowed_hosts, sealed.allowed_hosts);
    assert_eq!(stored.allowed_placements, sealed.allowed_placements);
    assert_eq!(stored.description, sealed.description);
    assert_eq!(
        store
            .secret(&env.id, "STRIPE_TEST_KEY")
            .await
            .expect("secret"),
        Some(stored.clone())
    );

    assert!(
        matches!(
            store.put_secret(&sealed, None, &env.actor(1_500)).await,
            Err(StoreError::VersionConflict { .. })
        ),
        "creating over an existing secret is a conflict, not an overwrite"
    );
    let rotated = secret_record(&env, "STRIPE_TEST_KEY", b"sealed-two");
    let two = store
        .put_secret(&rotated, Some(1), &env.actor(2_000))
        .await
        .expect("rotate");
    assert_eq!(two.version, 2);
    assert_eq!(two.ciphertext, b"sealed-two".to_vec());
    assert_eq!(
        two.created_at, stored.created_at,
        "rotation keeps the creation time"
    );
    assert_eq!(two.updated_at, Millis(2_000));
    match store.put_secret(&sealed, Some(1), &env.actor(2_500)).await {
        Err(StoreError::VersionConflict { expected, found }) => {
            assert_eq!((expected, found), (1, 2))
        }
        other => panic!("a stale rotation must be a VersionConflict, got {other:?}"),
    }
    assert_eq!(
        store
            .secret(&env.id, "STRIPE_TEST_KEY")
            .await
            .expect("secret"),
        Some(two.clone()),
        "the stale rotation changed nothing"
    );

    store
        .put_secret(
            &secret_record(&env, "GITHUB_TOKEN", b"sealed-gh"),
            None,
            &env.actor(3_000),
        )
        .await
        .expect("create");
    let mut names: Vec<String> = store
        .list_secrets(&env.id)
        .await
        .expect("list")
        .into_iter()
        .map(|s| s.name)
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec!["GITHUB_TOKEN".to_string(), "STRIPE_TEST_KEY".to_string()]
    );

    // Another environment has its own vault.
    let other = Env::new(&store, "secrets-other").await;
    assert!(store
        .secret(&other.id, "STRIPE_TEST_KEY")
        .await
        .expect("secret")
        .is_none());
    assert!(store
        .list_secrets(&other.id)
        .await
        .expect("list")
        .is_empty());
    assert!(!store
        .delete_secret(&other.id, "STRIPE_TEST_KEY", &other.actor(3_500))
        .await
        .expect("delete"));
    let theirs = store
        .put_secret(
            &secret_record(&other, "STRIPE_TEST_KEY", b"sealed-theirs"),
            None,
            &other.actor(3_500),
        )
        .await
        .expect("create");
    assert_eq!(theirs.version, 1);
    assert_eq!(
        store
            .secret(&env.id, "STRIPE_TEST_KEY")
            .await
            .expect("secret"),
        Some(two)
    );

    assert!(store
        .delete_secret(&env.id, "STRIPE_TEST_KEY", &env.actor(4_000))
        .await
        .expect("delete"));
    assert!(!store
        .delete_secret(&env.id, "STRIPE_TEST_KEY", &env.actor(4_001))
        .await
        .expect("delete again"));
    assert!(store
        .secret(&env.id, "STRIPE_TEST_KEY")
        .await
        .expect("secret")
        .is_none());
    let names: Vec<String> = store
        .list_secrets(&env.id)
        .await
        .expect("list")
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, vec!["GITHUB_TOKEN".to_string()]);
    assert!(
        matches!(
            store.put_secret(&sealed, Some(2), &env.actor(4_500)).await,
            Err(StoreError::VersionConflict { .. })
        ),
        "rotating a deleted secret is a conflict"
    );
    assert_eq!(
        store
            .secret(&other.id, "STRIPE_TEST_KEY")
            .await
            .expect("secret"),
        Some(theirs),
        "their secret survived ours"
    );
}

/// API keys: stored by hash, unique by hash.
pub async fn keys_are_unique_by_hash(store: Arc<dyn Store>) {
    let env = Env::new(&store, "keys").await;
    let environment = store
        .environment(&env.id)
        .await
        .expect("environment")
        .expect("exists");
    assert_eq!(environment.id, env.id);
    assert!(!environment.halted);
    let again = store
        .ensure_environment(
            &environment.name,
            &EnvironmentId::from_unique(&unique("second-id")),
            &Actor::system(T0),
        )
        .await
        .expect("ensure again");
    assert_eq!(
        again.id, env.id,
        "ensure_environment returns the existing environment"
    );

    let key = key_record(&env, "ci");
    store
        .insert_key(&key, &env.actor(1_000))
        .await
        .expect("insert");
    assert_eq!(
        store.key_by_hash(&key.token_hash).await.expect("by hash"),
        Some(key.clone())
    );
    assert!(store
        .key_by_hash(&format!("sha256:{}", unique("absent")))
        .await
        .expect("by hash")
        .is_none());

    let mut clash = key_record(&env, "ci-copy");
    clash.token_hash = key.token_hash.clone();
    assert!(matches!(
        store.insert_key(&clash, &env.actor(1_500)).await,
        Err(StoreError::Duplicate { .. })
    ));
    assert_eq!(
        store.key_by_hash(&key.token_hash).await.expect("by hash"),
        Some(key.clone()),
        "the first key is kept"
    );

    let second = key_record(&env, "worker");
    store
        .insert_key(&second, &env.actor(2_000))
        .await
        .expect("insert");
    let keys = store.list_keys().await.expect("list");
    assert_eq!(keys.iter().filter(|k| **k == key).count(), 1);
    assert_eq!(keys.iter().filter(|k| **k == second).count(), 1);
    assert!(
        keys.iter().all(|k| k.id != clash.id),
        "the refused key was not stored"
    );
}

/// Writes that name an environment that does not exist must not be reported as duplicates.
pub async fn writes_naming_an_unknown_environment_are_not_duplicates(store: Arc<dyn Store>) {
    let ghost = Env {
        store: store.clone(),
        id: EnvironmentId::from_unique(&unique("ghost-env")),
        key: KeyId::from_unique(&unique("ghost-key")),
    };
    let key = key_record(&ghost, "ghost");
    let key_result = store.insert_key(&key, &ghost.actor(1_000)).await;
    let action = action_record(&ghost, refund_definition("refund"));
    let action_result = store.create_action(&action, &ghost.actor(1_000)).await;
    // Any answer but `Duplicate` conforms (a backend without foreign keys may even accept them):
    // `Duplicate` would make the API answer 409 "already exists" for something that does not.
    assert!(
        !matches!(key_result, Err(StoreError::Duplicate { .. }))
            && !matches!(action_result, Err(StoreError::Duplicate { .. })),
        "no key has this hash and no live action this name, yet: insert_key -> {key_result:?}, \
         create_action -> {action_result:?}"
    );
}

/// A key of one environment sees and touches nothing of another.
pub async fn environments_are_walls(store: Arc<dyn Store>) {
    let ours = Env::new(&store, "wall-ours").await;
    let theirs = Env::new(&store, "wall-theirs").await;
    let action = ours.create_action(refund_definition("refund")).await;
    let mut sub = ours.submission(&action, json!({"charge": "ch_wall"}));
    sub.operation_key = Some(op("wall-op"));
    let inv = expect_created(store.submit(&sub).await.expect("submit"));
    ours.begin_attempt(&inv.effect_id, 2_000).await;
    let before = ours.effect(&inv.effect_id).await;

    assert!(store
        .invocation(&theirs.id, &inv.id)
        .await
        .expect("invocation")
        .is_none());
    assert!(store
        .effect(&theirs.id, &inv.effect_id)
        .await
        .expect("effect")
        .is_none());
    let listed = store
        .list_invocations(
            &theirs.id,
            &InvocationFilter {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert!(listed.items.is_empty());
    assert_eq!(listed.total, 0);
    let listed = store
        .list_effects(
            &theirs.id,
            &EffectFilter {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert!(listed.items.is_empty());
    assert_eq!(listed.total, 0);
    let listed = store
        .list_invocations(
            &theirs.id,
            &InvocationFilter {
                action_id: Some(action.id.clone()),
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert_eq!(
        listed.total, 0,
        "naming our action id does not reach our records"
    );

    // Their key cannot move or annotate our effect.
    let mut change = theirs.change(
        &inv.effect_id,
        EffectState::Dispatching,
        EffectState::Failed,
        3_000,
    );
    change.attempt = Some(AttemptChange::Finish {
        number: 1,
        response_status: Some(400),
        error: None,
    });
    change.evidence = Some(NewEvidence::new("resolve", "operator", "not yours"));
    assert!(
        store.change_effect(&change).await.is_err(),
        "another environment's effect does not exist for them"
    );
    let note = NewEvidence::new("note", "operator", "not yours");
    assert!(store
        .append_evidence(&theirs.id, &inv.effect_id, &note, &theirs.actor(3_000))
        .await
        .is_err());
    assert_eq!(
        ours.effect(&inv.effect_id).await,
        before,
        "our effect is untouched"
    );
    assert_eq!(
        ours.invocation(&inv.id).await.state,
        EffectState::Dispatching
    );

    // Our records are all still there for us.
    let listed = store
        .list_invocations(
            &ours.id,
            &InvocationFilter {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert_eq!(listed.total, 1);
    assert_eq!(listed.items[0].id, inv.id);
}

/// Invocation and effect listings: state filters, action filters, paging and totals.
pub async fn list_filters_and_paging(store: Arc<dyn Store>) {
    let env = Env::new(&store, "lists").await;
    let governed = env.create_action(refund_definition("refund")).await;
    let plain = env.create_action(template_definition("lookup")).await;

    let mut all = Vec::new();
    for i in 0..7 {
        let mut sub = env.submission(&governed, json!({"i": i}));
        // Pairs share a timestamp: paging must not depend on distinct creation times.
        sub.now = Millis(T0.0 + i / 2);
        all.push(expect_created(store.submit(&sub).await.expect("submit")));
    }
    let mut unknown = BTreeSet::new();
    for inv in &all[1..4] {
        env.begin_attempt(&inv.effect_id, 2_000).await;
        env.finish_attempt(&inv.effect_id, EffectState::Unknown, 3_000)
            .await;
        unknown.insert(inv.id.clone());
    }
    let mut block = env.change(
        &all[5].effect_id,
        EffectState::Ready,
        EffectState::Failed,
        2_000,
    );
    block.evidence = Some(NewEvidence::new("blocked", "steward", "blocked"));
    store.change_effect(&block).await.expect("Ready -> Failed");
    let mut plain_ids = BTreeSet::new();
    for i in 0..2 {
        let mut sub = env.submission(&plain, json!({"q": i}));
        sub.now = Millis(T0.0 + 100 + i);
        let inv = expect_created(store.submit(&sub).await.expect("submit"));
        assert!(
            !inv.governed,
            "a template action without impact or verify is not governed"
        );
        plain_ids.insert(inv.id);
    }

    let filter = |states: Option<Vec<EffectState>>,
                  action: Option<&ActionRecord>,
                  limit: u32,
                  offset: u32| InvocationFilter {
        action_id: action.map(|a| a.id.clone()),
        states,
        limit,
        offset,
    };
    let page = store
        .list_invocations(
            &env.id,
            &filter(Some(vec![EffectState::Unknown]), None, 100, 0),
        )
        .await
        .expect("list");
    assert_eq!(page.total, 3);
    assert!(page.items.iter().all(|i| i.state == EffectState::Unknown));
    assert_eq!(
        page.items
            .iter()
            .map(|i| i.id.clone())
            .collect::<BTreeSet<_>>(),
        unknown
    );

    let page = store
        .list_invocations(
            &env.id,
            &filter(
                Some(vec![EffectState::Unknown, EffectState::Failed]),
                None,
                100,
                0,
            ),
        )
        .await
        .expect("list");
    assert_eq!(page.total, 4);
    assert!(page
        .items
        .iter()
        .all(|i| matches!(i.state, EffectState::Unknown | EffectState::Failed)));

    let page = store
        .list_invocations(
            &env.id,
            &filter(Some(vec![EffectState::Ready]), None, 100, 0),
        )
        .await
        .expect("list");
    assert_eq!(
        page.total, 5,
        "three governed and two plain invocations are ready"
    );

    let page = store
        .list_invocations(&env.id, &filter(None, None, 100, 0))
        .await
        .expect("list");
    assert_eq!(page.total, 9);
    assert_eq!(page.items.len(), 9);
    let page = store
        .list_invocations(&env.id, &filter(None, Some(&plain), 100, 0))
        .await
        .expect("list");
    assert_eq!(
        page.items
            .iter()
            .map(|i| i.id.clone())
            .collect::<BTreeSet<_>>(),
        plain_ids
    );

    // Paging over the governed action's seven invocations, newest first.
    let mut seen = Vec::new();
    for (offset, expected_len) in [(0, 3), (3, 3), (6, 1), (9, 0)] {
        let page = store
            .list_invocations(&env.id, &filter(None, Some(&governed), 3, offset))
            .await
            .expect("list");
        assert_eq!(page.total, 7, "total counts every match, not the page");
        assert_eq!(page.items.len(), expected_len, "page at offset {offset}");
        seen.extend(page.items);
    }
    let created: Vec<Millis> = seen.iter().map(|i| i.created_at).collect();
    let mut newest_first = created.clone();
    newest_first.sort_by(|a, b| b.cmp(a));
    assert_eq!(created, newest_first, "pages are ordered newest first");
    let ids: HashSet<InvocationId> = seen.iter().map(|i| i.id.clone()).collect();
    assert_eq!(ids.len(), 7, "pages neither overlap nor skip");
    assert_eq!(
        ids,
        all.iter().map(|i| i.id.clone()).collect::<HashSet<_>>()
    );
    let page = store
        .list_invocations(
            &env.id,
            &filter(Some(vec![EffectState::Unknown]), None, 2, 0),
        )
        .await
        .expect("list");
    assert_eq!((page.items.len(), page.total), (2, 3));

    // Effects: governed ones only.
    let effects = store
        .list_effects(
            &env.id,
            &EffectFilter {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert_eq!(effects.total, 7);
    assert_eq!(
        effects
            .items
            .iter()
            .map(|e| e.id.clone())
            .collect::<HashSet<_>>(),
        all.iter()
            .map(|i| i.effect_id.clone())
            .collect::<HashSet<_>>()
    );
    let effects = store
        .list_effects(
            &env.id,
            &EffectFilter {
                states: Some(vec![EffectState::Unknown]),
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert_eq!(effects.total, 3);
    assert!(effects
        .items
        .iter()
        .all(|e| e.state == EffectState::Unknown));
    let effects = store
        .list_effects(
            &env.id,
            &EffectFilter {
                action_id: Some(plain.id.clone()),
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert_eq!(
        effects.total, 0,
        "an ungoverned action's effects are not listed"
    );
    let effects = store
        .list_effects(
            &env.id,
            &EffectFilter {
                limit: 2,
                offset: 6,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert_eq!((effects.items.len(), effects.total), (1, 7));
}

/// The audit log is one hash chain that verifies end to end, shows any edit or removal, and
/// never holds a secret's sealed value.
pub async fn audit_chain_verifies_and_detects_tampering(store: Arc<dyn Store>) {
    let env = Env::new(&store, "audit").await;
    store
        .insert_key(&key_record(&env, "auditor"), &env.actor(1_000))
        .await
        .expect("insert key");
    let ciphertext = b"SEALED:sk_live_conformance_4242".to_vec();
    let rotated_ciphertext = b"SEALED:sk_live_conformance_9999".to_vec();
    let secret = secret_record(&env, "AUDIT_SECRET", &ciphertext);
    store
        .put_secret(&secret, None, &env.actor(1_100))
        .await
        .expect("create secret");
    let rotated = secret_record(&env, "AUDIT_SECRET", &rotated_ciphertext);
    store
        .put_secret(&rotated, Some(1), &env.actor(1_200))
        .await
        .expect("rotate secret");
    let action = env.create_action(refund_definition("refund")).await;
    let mut v2 = refund_definition("refund");
    v2.description = Some("audited".into());
    store
        .update_action(&env.id, &action.id, 1, &v2, &env.actor(1_300))
        .await
        .expect("update");
    let inv = expect_created(
        store
            .submit(&env.submission(&action, json!({"amount": 5})))
            .await
            .expect("submit"),
    );
    env.begin_attempt(&inv.effect_id, 2_000).await;
    env.finish_attempt(
        &inv.effect_id,
        EffectState::Succeeded { confirmed: true },
        3_000,
    )
    .await;
    let doomed = env.create_action(template_definition("doomed")).await;
    store
        .delete_action(&env.id, &doomed.id, &env.actor(4_000))
        .await
        .expect("delete");
    store
        .delete_secret(&env.id, "AUDIT_SECRET", &env.actor(4_100))
        .await
        .expect("delete secret");

    let events = store.audit_events(0, 100_000).await.expect("audit");
    assert!(
        events.len() >= 10,
        "every change above is audited: {} events",
        events.len()
    );
    let (last_seq, last_hash) =
        verify_chain(0, GENESIS_HASH, &events).expect("the chain verifies end to end");
    assert_eq!(last_seq, events.last().expect("events").seq);
    assert_eq!(last_hash, events.last().expect("events").hash);
    for subject in [
        action.id.as_str(),
        inv.id.as_str(),
        inv.effect_id.as_str(),
        doomed.id.as_str(),
        "AUDIT_SECRET",
    ] {
        let ours: Vec<_> = events.iter().filter(|e| e.subject == subject).collect();
        assert!(!ours.is_empty(), "no audit event names {subject}");
        assert!(
            ours.iter()
                .all(|e| e.env_id.as_deref() == Some(env.id.as_str())),
            "{subject}: wrong environment"
        );
        assert!(
            ours.iter()
                .all(|e| e.actor.as_deref() == Some(env.key.as_str())),
            "{subject}: wrong actor"
        );
    }
    assert!(
        events
            .iter()
            .filter(|e| e.subject == inv.effect_id.as_str())
            .count()
            >= 2,
        "each transition is audited"
    );
    assert!(
        events
            .iter()
            .filter(|e| e.subject == "AUDIT_SECRET")
            .count()
            >= 3,
        "create, rotate, delete"
    );

    // Reading on from the middle continues the same chain.
    let k = events.len() / 2;
    let rest = store
        .audit_events(events[k - 1].seq, 100_000)
        .await
        .expect("audit");
    assert_eq!(rest, events[k..].to_vec());
    assert_eq!(
        verify_chain(events[k - 1].seq, &events[k - 1].hash, &rest),
        Ok((last_seq, last_hash))
    );
    let limited = store.audit_events(0, 3).await.expect("audit");
    assert_eq!(limited, events[..3].to_vec());

    // Any edit shows.
    let i = events.len() - 3;
    let mut tampered = events.clone();
    tampered[i].after = Some(json!({"state": "succeeded_confirmed", "forged": true}));
    assert_eq!(
        verify_chain(0, GENESIS_HASH, &tampered),
        Err(ChainError::Tampered { seq: events[i].seq })
    );
    let mut rehashed = events.clone();
    rehashed[i].after = Some(json!({"forged": true}));
    rehashed[i].hash = event_hash(&rehashed[i]);
    assert_eq!(
        verify_chain(0, GENESIS_HASH, &rehashed),
        Err(ChainError::BrokenLink {
            seq: events[i + 1].seq
        }),
        "re-hashing an edited event breaks the next link"
    );
    let mut removed = events.clone();
    removed.remove(i);
    assert_eq!(
        verify_chain(0, GENESIS_HASH, &removed),
        Err(ChainError::Gap {
            seq: events[i + 1].seq,
            previous: events[i - 1].seq
        })
    );

    // The sealed value never reaches the audit log, in any rendering.
    let rendered = serde_json::to_string(&events).expect("render");
    for bytes in [
        &ciphertext,
        &rotated_ciphertext,
        &secret.nonce,
        &rotated.nonce,
    ] {
        let text = String::from_utf8_lossy(bytes).to_string();
        let decimal = bytes
            .iter()
            .map(u8::to_string)
            .collect::<Vec<_>>()
            .join(",");
        for rendering in [text, to_hex(bytes), to_hex(bytes).to_uppercase(), decimal] {
            assert!(!rendering.is_empty());
            assert!(
                !rendered.contains(&rendering),
                "the audit log contains secret material: {rendering}"
            );
        }
    }
    assert!(!rendered.contains("sk_live_conformance"));
}

/// One operation key submitted through several store handles on the same database (several
/// connections, processes or replicas) still creates one effect.
pub async fn operation_key_unique_across_handles(stores: Vec<Arc<dyn Store>>) {
    assert!(
        stores.len() >= 2,
        "give at least two handles on one database"
    );
    let env = Env::new(&stores[0], "handles").await;
    let action = env.create_action(refund_definition("refund")).await;
    let mut tasks = Vec::new();
    for i in 0..64 {
        let store = stores[i % stores.len()].clone();
        let mut sub = env.submission(&action, json!({"charge": "ch_multi"}));
        sub.operation_key = Some(op("multi-handle-op"));
        tasks.push(tokio::spawn(async move { store.submit(&sub).await }));
    }
    let mut ids = HashSet::new();
    let mut created = 0;
    for task in tasks {
        match task.await.expect("task").expect("submit") {
            SubmitOutcome::Created(r) => {
                created += 1;
                ids.insert(r.id);
            }
            SubmitOutcome::Existing(r) => {
                ids.insert(r.id);
            }
            other => panic!("expected Created or Existing, got {other:?}"),
        }
    }
    assert_eq!(created, 1);
    assert_eq!(ids.len(), 1);
    for store in &stores {
        let effects = store
            .list_effects(&env.id, &effects_of(&action))
            .await
            .expect("list");
        assert_eq!(effects.total, 1, "every handle sees the one effect");
    }
    assert_chain_intact(&stores[1]).await;
}

/// What `submit` and a `Begin` committed is found by a new handle opened after the old one is
/// gone (a restart), and recovery there makes the in-flight attempt unknown.
pub async fn committed_changes_survive_a_restart<F, Fut>(open: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Store>>,
{
    let store = open().await;
    let env = Env::new(&store, "restart").await;
    let action = env.create_action(refund_definition("refund")).await;
    let mut sub = env.submission(&action, json!({"charge": "ch_restart"}));
    sub.operation_key = Some(op("restart-op"));
    sub.idempotency_key = Some(idem("restart-req"));
    let inflight = expect_created(store.submit(&sub).await.expect("submit"));
    env.begin_attempt(&inflight.effect_id, 2_000).await;
    let accepted = expect_created(
        store
            .submit(&env.submission(&action, json!({"charge": "ch_2"})))
            .await
            .expect("submit"),
    );
    let (env_id, key) = (env.id.clone(), env.key.clone());
    drop(env);
    drop(store);

    let store = open().await;
    let env = Env {
        store: store.clone(),
        id: env_id,
        key,
    };
    assert_eq!(
        env.effect(&inflight.effect_id).await.effect.state,
        EffectState::Dispatching
    );
    assert_eq!(
        env.effect(&inflight.effect_id).await.attempts.len(),
        1,
        "the Begin was durable"
    );
    let report = store
        .recover(&Sweep::sole(&restarted(), Millis(9_000)))
        .await
        .expect("recover");
    assert!(report.dispatching_to_unknown.contains(&inflight.effect_id));
    assert!(report.ready_to_failed.contains(&accepted.effect_id));
    assert_eq!(
        env.invocation(&inflight.id).await.state,
        EffectState::Unknown
    );
    match store.submit(&sub).await.expect("resubmit") {
        SubmitOutcome::Replayed(r) => assert_eq!(r.id, inflight.id),
        other => panic!("the resent request must get the original invocation, got {other:?}"),
    }
    let mut fresh = env.submission(&action, json!({"charge": "ch_restart"}));
    fresh.operation_key = Some(op("restart-op"));
    match store.submit(&fresh).await.expect("submit") {
        SubmitOutcome::Existing(r) => {
            assert_eq!((r.id, r.state), (inflight.id.clone(), EffectState::Unknown))
        }
        other => panic!("the operation key still names the original, got {other:?}"),
    }
    let events = store.audit_events(0, 100_000).await.expect("audit");
    verify_chain(0, GENESIS_HASH, &events).expect("the chain survives a restart");
}

// ------------------------------------------------------------------------------------------
// Governance: approval policies, impact limits and reservations, the kill switch
// ------------------------------------------------------------------------------------------

fn policy_spec(name: &str, effect: &str) -> PolicySpec {
    let body =
        json!({"name": name, "matchKind": "action", "matchActionName": "refund", "effect": effect});
    PolicySpec::from_create(body.as_object().expect("object")).expect("valid policy")
}

fn policy_record(env: &Env, spec: PolicySpec) -> PolicyRecord {
    PolicyRecord {
        id: PolicyId::from_unique(&unique("pol")),
        env_id: env.id.clone(),
        version: 1,
        spec,
        created_at: T0,
        updated_at: T0,
    }
}

fn limit_record(env: &Env, body: Value) -> LimitRecord {
    LimitRecord {
        id: LimitId::from_unique(&unique("lim")),
        env_id: env.id.clone(),
        spec: LimitSpec::from_create(body.as_object().expect("object")).expect("valid limit"),
        archived_at: None,
        created_at: T0,
        updated_at: T0,
    }
}

fn mutation(amount: Option<i64>) -> Quantity {
    Quantity {
        dimension: "resource_mutations".into(),
        unit: "resource_mutations".into(),
        amount,
    }
}

fn impact_request(
    env: &Env,
    effect: &EffectId,
    quantities: Vec<Quantity>,
    at: i64,
) -> ImpactRequest {
    ImpactRequest {
        env_id: env.id.clone(),
        effect_id: effect.clone(),
        action_name: "refund".into(),
        quantities,
        actor: env.actor(at),
    }
}

async fn usage_of(env: &Env, id: &LimitId, at: i64) -> Usage {
    env.store
        .limit(&env.id, id, Millis(at))
        .await
        .expect("limit")
        .expect("limit exists")
        .usage
}

/// Policies: a live name is unique per environment; every edit appends an immutable version
/// (compare-and-set on the version); deletion appends a tombstone and keeps every version
/// readable; another environment sees and changes nothing.
pub async fn policies_are_versioned_and_walled(store: Arc<dyn Store>) {
    let env = Env::new(&store, "policies").await;
    let other = Env::new(&store, "policies-other").await;
    let record = policy_record(&env, policy_spec("no refunds", "require_approval"));
    store
        .create_policy(&record, Some("first"), &env.actor(T0.0))
        .await
        .expect("create_policy");
    let twin = policy_record(&env, policy_spec("no refunds", "auto_approve"));
    assert!(matches!(
        store.create_policy(&twin, None, &env.actor(T0.0)).await,
        Err(StoreError::Duplicate { .. })
    ));
    // The same name in another environment is independent.
    store
        .create_policy(
            &policy_record(&other, policy_spec("no refunds", "auto_approve")),
            None,
            &other.actor(T0.0),
        )
        .await
        .expect("same name elsewhere");

    let stored = store
        .policy(&env.id, &record.id)
        .await
        .expect("policy")
        .expect("exists");
    assert_eq!(stored, record);
    let mut edited = record.spec.clone();
    edited.priority = 7;
    let updated = store
        .update_policy(
            &env.id,
            &record.id,
            1,
            &edited,
            Some("raise"),
            &env.actor(2_000),
        )
        .await
        .expect("update_policy");
    assert_eq!((updated.version, updated.spec.priority), (2, 7));
    assert_eq!(updated.updated_at, Millis(2_000));
    match store
        .update_policy(&env.id, &record.id, 1, &edited, None, &env.actor(2_100))
        .await
    {
        Err(StoreError::VersionConflict {
            expected: 1,
            found: 2,
        }) => {}
        other => panic!("a stale edit must conflict, got {other:?}"),
    }

    // Walls.
    assert_eq!(
        store.policy(&other.id, &record.id).await.expect("read"),
        None
    );
    assert!(matches!(
        store
            .update_policy(&other.id, &record.id, 2, &edited, None, &other.actor(2_200))
            .await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(!store
        .delete_policy(&other.id, &record.id, None, &other.actor(2_200))
        .await
        .expect("delete"));
    assert!(store
        .policy_versions(&other.id, &record.id)
        .await
        .expect("versions")
        .is_empty());
    let theirs = store.list_policies(&other.id).await.expect("list");
    assert!(theirs.iter().all(|p| p.id != record.id));
    assert_eq!(store.list_policies(&env.id).await.expect("list").len(), 1);

    // Deletion: gone from the live set, every version kept, a tombstone last.
    assert!(store
        .delete_policy(&env.id, &record.id, Some("retire"), &env.actor(3_000))
        .await
        .expect("delete"));
    assert!(!store
        .delete_policy(&env.id, &record.id, None, &env.actor(3_001))
        .await
        .expect("again"));
    assert_eq!(store.policy(&env.id, &record.id).await.expect("read"), None);
    assert!(store.list_policies(&env.id).await.expect("list").is_empty());
    let versions = store
        .policy_versions(&env.id, &record.id)
        .await
        .expect("versions");
    let summary: Vec<(u32, bool, Option<&str>)> = versions
        .iter()
        .map(|v| (v.version, v.is_tombstone(), v.change_note.as_deref()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, false, Some("first")),
            (2, false, Some("raise")),
            (3, true, Some("retire"))
        ]
    );
    assert_eq!(versions[0].spec.as_ref(), Some(&record.spec));
    assert_eq!(versions[2].created_by, Some(env.key.clone()));
    // The name is free again once the policy is deleted.
    store
        .create_policy(
            &policy_record(&env, policy_spec("no refunds", "auto_deny")),
            None,
            &env.actor(4_000),
        )
        .await
        .expect("a deleted policy's name can be reused");
}

/// Reservations: concurrent reservations never pass a limit; reserving is idempotent per
/// effect; settlement in `change_effect` consumes on success, releases on failure and keeps
/// exposure while unknown; windows reset usage; archived limits stop applying; a missing
/// quantity is refused.
pub async fn limit_reservations_never_exceed_a_limit(store: Arc<dyn Store>) {
    let env = Env::new(&store, "limits").await;
    let action = env.create_action(refund_definition("refund")).await;
    let limit = limit_record(
        &env,
        json!({"name": "ten", "dimension": "resource_mutations", "period": "total", "amount": 10}),
    );
    store
        .create_limit(&limit, &env.actor(T0.0))
        .await
        .expect("create_limit");
    let mut effects = Vec::new();
    for i in 0..40 {
        let sub = env.submission(&action, json!({"n": i}));
        expect_created(store.submit(&sub).await.expect("submit"));
        effects.push(sub.effect_id);
    }
    let tasks: Vec<_> = effects
        .iter()
        .map(|effect| {
            let store = store.clone();
            let request = impact_request(&env, effect, vec![mutation(Some(1))], T0.0);
            tokio::spawn(async move {
                (
                    request.effect_id.clone(),
                    store.reserve_impact(&request).await,
                )
            })
        })
        .collect();
    let mut granted = Vec::new();
    let mut refused = 0;
    for task in tasks {
        let (effect, outcome) = task.await.expect("reserve task");
        match outcome.expect("reserve_impact") {
            ReserveOutcome::Reserved(held) => {
                assert_eq!(held, vec![(limit.id.clone(), 1)]);
                granted.push(effect);
            }
            ReserveOutcome::Refused {
                limit_id, refusal, ..
            } => {
                assert_eq!(limit_id, limit.id);
                assert_eq!(
                    refusal,
                    Refusal::Exhausted {
                        requested: 1,
                        available: 0
                    }
                );
                refused += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        (granted.len(), refused),
        (10, 30),
        "exactly the limit is granted"
    );
    assert_eq!(
        usage_of(&env, &limit.id, T0.0).await,
        Usage {
            consumed: 0,
            reserved: 10,
            exposure: 0
        }
    );
    assert_eq!(
        store
            .reserve_impact(&impact_request(
                &env,
                &granted[0],
                vec![mutation(Some(1))],
                T0.0
            ))
            .await
            .expect("again"),
        ReserveOutcome::AlreadyReserved
    );

    // Settlement: 4 succeed, 3 become unknown, 3 fail without an attempt.
    for effect in &granted[..7] {
        env.begin_attempt(effect, 2_000).await;
    }
    for effect in &granted[..4] {
        env.finish_attempt(effect, EffectState::Succeeded { confirmed: true }, 2_100)
            .await;
    }
    for effect in &granted[4..7] {
        env.finish_attempt(effect, EffectState::Unknown, 2_100)
            .await;
    }
    for effect in &granted[7..] {
        store
            .change_effect(&env.change(effect, EffectState::Ready, EffectState::Failed, 2_200))
            .await
            .expect("Ready -> Failed");
    }
    let usage = usage_of(&env, &limit.id, 2_300).await;
    assert_eq!(
        usage,
        Usage {
            consumed: 4,
            reserved: 0,
            exposure: 3
        }
    );
    assert_eq!(usage.available(10), 3);
    // An unknown effect found at the provider consumes its exposure.
    store
        .change_effect(&env.change(
            &granted[4],
            EffectState::Unknown,
            EffectState::Succeeded { confirmed: true },
            2_400,
        ))
        .await
        .expect("Unknown -> Succeeded");
    assert_eq!(
        usage_of(&env, &limit.id, 2_500).await,
        Usage {
            consumed: 5,
            reserved: 0,
            exposure: 2
        }
    );
    let listed = store
        .list_limits(&env.id, false, Millis(2_500))
        .await
        .expect("list_limits");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].available(), 3);

    // A missing quantity is refused while a limit applies.
    let sub = env.submission(&action, json!({"n": "missing"}));
    expect_created(store.submit(&sub).await.expect("submit"));
    match store
        .reserve_impact(&impact_request(
            &env,
            &sub.effect_id,
            vec![mutation(None)],
            2_600,
        ))
        .await
        .expect("reserve")
    {
        ReserveOutcome::Refused {
            refusal: Refusal::MissingQuantity,
            ..
        } => {}
        other => panic!("a missing quantity must be refused, got {other:?}"),
    }

    // Lowering keeps what is held; archiving stops new reservations but keeps the numbers.
    let lowered = store
        .update_limit(&env.id, &limit.id, Some("two"), Some(2), &env.actor(2_700))
        .await
        .expect("update_limit");
    assert_eq!(
        (lowered.spec.name.as_str(), lowered.spec.amount),
        ("two", 2)
    );
    assert!(store
        .archive_limit(&env.id, &limit.id, &env.actor(2_800))
        .await
        .expect("archive"));
    assert!(!store
        .archive_limit(&env.id, &limit.id, &env.actor(2_801))
        .await
        .expect("archive again"));
    assert_eq!(
        store
            .reserve_impact(&impact_request(
                &env,
                &sub.effect_id,
                vec![mutation(None)],
                2_900
            ))
            .await
            .expect("reserve"),
        ReserveOutcome::Reserved(Vec::new()),
        "an archived limit no longer applies"
    );
    assert!(store
        .list_limits(&env.id, false, Millis(3_000))
        .await
        .expect("list")
        .is_empty());
    let archived = store
        .list_limits(&env.id, true, Millis(3_000))
        .await
        .expect("list");
    assert_eq!(
        archived[0].usage,
        Usage {
            consumed: 5,
            reserved: 0,
            exposure: 2
        }
    );

    // A daily limit counts each UTC day on its own; other environments never see it.
    let daily = limit_record(
        &env,
        json!({"name": "daily", "dimension": "resource_mutations", "period": "day", "amount": 1}),
    );
    store
        .create_limit(&daily, &env.actor(T0.0))
        .await
        .expect("create_limit");
    let day = 86_400_000;
    let mut outcomes = Vec::new();
    for at in [day + 10, day + 20, 2 * day + 10] {
        let sub = env.submission(&action, json!({"at": at}));
        expect_created(store.submit(&sub).await.expect("submit"));
        let outcome = store
            .reserve_impact(&impact_request(
                &env,
                &sub.effect_id,
                vec![mutation(Some(1))],
                at,
            ))
            .await
            .expect("reserve");
        outcomes.push(matches!(outcome, ReserveOutcome::Reserved(ref held) if !held.is_empty()));
    }
    assert_eq!(outcomes, vec![true, false, true]);
    let other = Env::new(&store, "limits-other").await;
    assert_eq!(
        store
            .limit(&other.id, &daily.id, Millis(day))
            .await
            .expect("read"),
        None
    );
    assert!(store
        .list_limits(&other.id, true, Millis(day))
        .await
        .expect("list")
        .is_empty());
}

/// The kill switch: while halted, `change_effect` records no attempt (`Halted`), other
/// transitions still commit, and the ready work is listed for release on resume.
pub async fn a_halted_environment_records_no_attempt(store: Arc<dyn Store>) {
    let env = Env::new(&store, "halt").await;
    let other = Env::new(&store, "halt-other").await;
    let action = env.create_action(refund_definition("refund")).await;
    let theirs = other.create_action(refund_definition("refund")).await;
    let parked = env.submission(&action, json!({"n": 1}));
    let dropped = env.submission(&action, json!({"n": 2}));
    let elsewhere = other.submission(&theirs, json!({"n": 3}));
    for sub in [&parked, &dropped, &elsewhere] {
        expect_created(store.submit(sub).await.expect("submit"));
    }
    let halted = store
        .set_halted(&env.id, true, Some("incident"), &env.actor(2_000))
        .await
        .expect("halt");
    assert!(halted.halted);
    assert_eq!(halted.halt_reason.as_deref(), Some("incident"));
    let mut begin = env.change(
        &parked.effect_id,
        EffectState::Ready,
        EffectState::Dispatching,
        2_100,
    );
    begin.attempt = Some(AttemptChange::Begin {
        number: 1,
        deadline_at: Millis(40_000),
        owner: writer(),
    });
    assert!(matches!(
        store.change_effect(&begin).await,
        Err(StoreError::Halted)
    ));
    let detail = env.effect(&parked.effect_id).await;
    assert_eq!(
        detail.effect.state,
        EffectState::Ready,
        "nothing was recorded"
    );
    assert!(detail.attempts.is_empty());
    // Settling without sending is still allowed; the other environment is not halted.
    store
        .change_effect(&env.change(
            &dropped.effect_id,
            EffectState::Ready,
            EffectState::Failed,
            2_200,
        ))
        .await
        .expect("a refusal commits while halted");
    other.begin_attempt(&elsewhere.effect_id, 2_300).await;
    let ready: Vec<InvocationId> = store
        .ready_invocations(&env.id)
        .await
        .expect("ready")
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(ready, vec![parked.invocation_id.clone()]);

    let resumed = store
        .set_halted(&env.id, false, None, &env.actor(3_000))
        .await
        .expect("resume");
    assert!(!resumed.halted);
    assert_eq!(resumed.halt_reason, None);
    assert!(
        !store
            .environment(&env.id)
            .await
            .expect("env")
            .expect("exists")
            .halted
    );
    store
        .change_effect(&begin)
        .await
        .expect("the attempt is recorded after resume");
    assert!(store
        .ready_invocations(&env.id)
        .await
        .expect("ready")
        .is_empty());
}

/// A policy decision is recorded with the invocation it shaped, and a denied invocation is
/// created settled (never dispatched).
pub async fn a_policy_decision_is_recorded_with_the_invocation(store: Arc<dyn Store>) {
    let env = Env::new(&store, "decision").await;
    let action = env.create_action(refund_definition("refund")).await;
    let mut sub = env.submission(&action, json!({"amount": 5}));
    let decision = json!({"source": "policy", "code": "POLICY_DENIED", "effect": "denied",
                          "policy": {"id": "pol_x", "name": "no", "version": 1}});
    sub.initial = EffectState::Rejected {
        reason: Rejection::Denied,
    };
    sub.decision = Some(decision.clone());
    let created = expect_created(store.submit(&sub).await.expect("submit"));
    assert_eq!(created.decision, Some(decision.clone()));
    assert_eq!(
        created.state,
        EffectState::Rejected {
            reason: Rejection::Denied
        }
    );
    assert_eq!(
        created.completed_at,
        Some(T0),
        "a denied invocation is complete at once"
    );
    assert_eq!(env.invocation(&created.id).await.decision, Some(decision));
    assert!(store
        .ready_invocations(&env.id)
        .await
        .expect("ready")
        .is_empty());
}

// ------------------------------------------------------------------------------------------
// Helpers
// ------------------------------------------------------------------------------------------

const T0: Millis = Millis(1_000);

/// The whole audit log verifies: concurrent writers did not fork or break the chain.
async fn assert_chain_intact(store: &Arc<dyn Store>) {
    let events = store.audit_events(0, 100_000).await.expect("audit_events");
    assert!(!events.is_empty());
    if let Err(err) = verify_chain(0, GENESIS_HASH, &events) {
        panic!("the audit chain is broken after concurrent writes: {err}");
    }
}

/// A string unique to this process run (and across runs sharing a database).
fn unique(tag: &str) -> String {
    static RUN: OnceLock<String> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let run = RUN.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        format!("{nanos:x}")
    });
    format!("{tag}-{run}-{}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// The replica that writes everything the sub-tests put in flight. It never heartbeats, so
/// every recovery sweep takes it for dead.
fn writer() -> ReplicaId {
    ReplicaId::from_unique("conformance-writer")
}

/// A fresh replica: a new process starting (for `Sweep::sole`) or a live one.
fn restarted() -> ReplicaId {
    ReplicaId::from_unique(&unique("rep"))
}

fn op(key: &str) -> OperationKey {
    OperationKey::parse(key).expect("operation key")
}

fn idem(key: &str) -> IdempotencyKey {
    IdempotencyKey::parse(key).expect("idempotency key")
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn refund_definition(name: &str) -> ActionDefinition {
    serde_json::from_value(json!({
        "name": name,
        "adapter": {"type": "stripe.refund", "config": {"mode": "test"}, "credentialSecret": "STRIPE_TEST_KEY"}
    }))
    .expect("adapter definition")
}

fn template_definition(name: &str) -> ActionDefinition {
    serde_json::from_value(
        json!({"name": name, "method": "GET", "urlTemplate": "https://api.example.com/lookup"}),
    )
    .expect("template definition")
}

fn action_record(env: &Env, definition: ActionDefinition) -> ActionRecord {
    ActionRecord {
        id: ActionId::from_unique(&unique("act")),
        env_id: env.id.clone(),
        name: definition.name.clone(),
        version: 1,
        definition,
        created_at: T0,
        updated_at: T0,
    }
}

fn secret_record(env: &Env, name: &str, ciphertext: &[u8]) -> SecretRecord {
    SecretRecord {
        env_id: env.id.clone(),
        name: name.to_string(),
        nonce: format!("nonce-{}", unique("n")).into_bytes(),
        ciphertext: ciphertext.to_vec(),
        description: Some("test key".into()),
        allowed_hosts: Some(vec!["api.stripe.com".into()]),
        allowed_placements: Some(vec!["header".into()]),
        version: 0,
        created_at: T0,
        updated_at: T0,
    }
}

fn key_record(env: &Env, name: &str) -> ApiKeyRecord {
    ApiKeyRecord {
        id: KeyId::from_unique(&unique("key")),
        env_id: env.id.clone(),
        name: name.to_string(),
        scopes: vec!["actions:invoke".into(), "effects:read".into()],
        token_hash: format!("sha256:{}", unique("token")),
        created_at: T0,
    }
}

fn invocations_of(action: &ActionRecord) -> InvocationFilter {
    InvocationFilter {
        action_id: Some(action.id.clone()),
        states: None,
        limit: 1_000,
        offset: 0,
    }
}

fn effects_of(action: &ActionRecord) -> EffectFilter {
    EffectFilter {
        action_id: Some(action.id.clone()),
        states: None,
        limit: 1_000,
        offset: 0,
    }
}

fn expect_created(outcome: SubmitOutcome) -> InvocationRecord {
    match outcome {
        SubmitOutcome::Created(record) => record,
        other => panic!("expected Created, got {other:?}"),
    }
}

/// A freshly created environment and the key that acts in it.
struct Env {
    store: Arc<dyn Store>,
    id: EnvironmentId,
    key: KeyId,
}

impl Env {
    async fn new(store: &Arc<dyn Store>, tag: &str) -> Env {
        let name = unique(tag);
        let id = EnvironmentId::from_unique(&unique(tag));
        let env = store
            .ensure_environment(&name, &id, &Actor::system(T0))
            .await
            .expect("ensure_environment");
        assert_eq!(env.id, id, "a new name creates a new environment");
        assert_eq!(env.name, name);
        Env {
            store: store.clone(),
            id,
            key: KeyId::from_unique(&unique("key")),
        }
    }

    fn actor(&self, at: i64) -> Actor {
        Actor::key(&self.key, Millis(at))
    }

    async fn create_action(&self, definition: ActionDefinition) -> ActionRecord {
        let record = action_record(self, definition);
        self.store
            .create_action(&record, &self.actor(T0.0))
            .await
            .expect("create_action");
        let stored = self
            .store
            .action(&self.id, record.id.as_str())
            .await
            .expect("action")
            .expect("created action");
        assert_eq!(stored.name, record.name);
        assert_eq!(stored.version, 1);
        assert_eq!(stored.definition, record.definition);
        stored
    }

    /// A submission with fresh ids and no keys.
    fn submission(&self, action: &ActionRecord, input: Value) -> Submission {
        Submission {
            env_id: self.id.clone(),
            invocation_id: InvocationId::from_unique(&unique("inv")),
            effect_id: EffectId::from_unique(&unique("eff")),
            action: action.clone(),
            input_fingerprint: fingerprint(&input),
            request_fingerprint: fingerprint(&json!({"action": action.name, "input": input})),
            input,
            operation_key: None,
            idempotency_key: None,
            run_id: None,
            retry_of: None,
            initial: EffectState::Ready,
            provider_idempotency_key: None,
            approval: None,
            decision: None,
            evidence: NewEvidence::new("submitted", "steward", "invocation accepted"),
            actor: self.key.clone(),
            now: T0,
            owner: writer(),
        }
    }

    fn change(
        &self,
        effect: &EffectId,
        from: EffectState,
        to: EffectState,
        at: i64,
    ) -> EffectChange {
        EffectChange::new(&self.id, effect, from, to, self.actor(at))
    }

    async fn invocation(&self, id: &InvocationId) -> InvocationRecord {
        self.store
            .invocation(&self.id, id)
            .await
            .expect("invocation")
            .expect("invocation exists")
    }

    async fn effect(&self, id: &EffectId) -> EffectDetail {
        self.store
            .effect(&self.id, id)
            .await
            .expect("effect")
            .expect("effect exists")
    }

    /// Ready -> Dispatching with attempt 1.
    async fn begin_attempt(&self, effect: &EffectId, at: i64) {
        let mut change = self.change(effect, EffectState::Ready, EffectState::Dispatching, at);
        change.attempt = Some(AttemptChange::Begin {
            number: 1,
            deadline_at: Millis(at + 30_000),
            owner: writer(),
        });
        change.evidence = Some(NewEvidence::new("attempt", "steward", "attempt 1 recorded"));
        self.store
            .change_effect(&change)
            .await
            .expect("Ready -> Dispatching");
    }

    /// Dispatching -> `to`, closing attempt 1.
    async fn finish_attempt(&self, effect: &EffectId, to: EffectState, at: i64) {
        let mut change = self.change(effect, EffectState::Dispatching, to, at);
        change.attempt = Some(AttemptChange::Finish {
            number: 1,
            response_status: Some(200),
            error: None,
        });
        change.evidence = Some(NewEvidence::new(
            "response",
            "provider",
            format!("attempt 1 led to {}", to.name()),
        ));
        change.response_status = Some(200);
        self.store
            .change_effect(&change)
            .await
            .expect("finish attempt");
    }
}

// ------------------------------------------------------------------------------------------
// The SQLite backend
// ------------------------------------------------------------------------------------------

fn sqlite_store() -> (tempfile::TempDir, Arc<dyn Store>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(&dir.path().join("steward.db")).expect("open sqlite store");
    (dir, Arc::new(store))
}

/// Every sub-test as its own `#[tokio::test]`, once per backend: `sqlite::NAME` on a fresh file,
/// `postgres::NAME` on a fresh database.
macro_rules! conformance_tests {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let (_dir, store) = super::sqlite_store();
                    super::$name(store).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let database = super::TestDatabase::create().await;
                    super::$name(database.store().await).await;
                }
            )*
        }
    };
}

conformance_tests!(
    operation_key_is_unique_under_concurrency,
    operation_key_with_other_input_conflicts,
    invoke_idempotency_keys,
    invoke_idempotency_key_under_concurrency,
    effect_change_is_compare_and_set,
    effect_change_under_concurrency_moves_once,
    recover_settles_what_a_crash_left,
    retry_of_requires_a_settled_failure,
    generic_idempotency,
    actions_are_versioned,
    secrets_are_versioned_and_isolated,
    keys_are_unique_by_hash,
    environments_are_walls,
    list_filters_and_paging,
    policies_are_versioned_and_walled,
    limit_reservations_never_exceed_a_limit,
    a_halted_environment_records_no_attempt,
    a_policy_decision_is_recorded_with_the_invocation,
    a_sweep_takes_over_only_dead_replicas_work,
    concurrent_sweeps_on_one_handle_take_each_piece_once,
    reconcile_claims_do_not_overlap,
    approval_changes_are_announced,
    audit_chain_verifies_and_detects_tampering,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_run_all_on_one_store() {
    let (_dir, store) = sqlite_store();
    run_all(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_operation_key_unique_across_handles() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("steward.db");
    let stores: Vec<Arc<dyn Store>> = (0..3)
        .map(|_| Arc::new(SqliteStore::open(&path).expect("open")) as Arc<dyn Store>)
        .collect();
    operation_key_unique_across_handles(stores).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_concurrent_sweeps_across_handles_take_each_piece_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("steward.db");
    let stores: Vec<Arc<dyn Store>> = (0..3)
        .map(|_| Arc::new(SqliteStore::open(&path).expect("open")) as Arc<dyn Store>)
        .collect();
    concurrent_sweeps_take_each_piece_once(stores).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_committed_changes_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("steward.db");
    committed_changes_survive_a_restart(|| {
        let path = path.clone();
        async move { Arc::new(SqliteStore::open(&path).expect("open")) as Arc<dyn Store> }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_writes_naming_an_unknown_environment_are_not_duplicates() {
    let (_dir, store) = sqlite_store();
    writes_naming_an_unknown_environment_are_not_duplicates(store).await;
}

// ------------------------------------------------------------------------------------------
// The PostgreSQL backend
// ------------------------------------------------------------------------------------------

/// The server the PostgreSQL tests create their databases on, unless `STEWARD_TEST_DATABASE_URL`
/// names another (CI and developers run one on loopback with trust auth).
const TEST_DATABASE_URL_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A database of its own for one test, dropped when the test ends, passed or panicked.
struct TestDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl TestDatabase {
    async fn create() -> TestDatabase {
        let admin_url = std::env::var("STEWARD_TEST_DATABASE_URL")
            .unwrap_or_else(|_| TEST_DATABASE_URL_DEFAULT.to_string());
        let name = unique("steward_test").replace('-', "_");
        let admin = admin_client(&admin_url).await;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("cannot create test database {name}: {e}"));
        let url = with_database(&admin_url, &name);
        TestDatabase {
            admin_url,
            name,
            url,
        }
    }

    /// A new store handle (its own connection pool) on this database.
    async fn store(&self) -> Arc<dyn Store> {
        Arc::new(
            PostgresStore::connect(&self.url)
                .await
                .unwrap_or_else(|e| panic!("cannot open the store on {}: {e}", self.name)),
        )
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // Drop has no runtime to await on: a thread with its own runs the DROP, even while a
        // failed test unwinds. FORCE ends the store's connections that are still open.
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                let admin = admin_client(&admin_url).await;
                admin
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) && !std::thread::panicking() {
            panic!("cannot drop test database {}: {dropped:?}", self.name);
        }
    }
}

/// A connection to the admin database, or a test failure that says how to get one.
async fn admin_client(admin_url: &str) -> tokio_postgres::Client {
    match tokio_postgres::connect(admin_url, tokio_postgres::NoTls).await {
        Ok((client, connection)) => {
            tokio::spawn(connection);
            client
        }
        Err(e) => panic!(
            "PostgreSQL is unreachable at {admin_url} ({e}). The PostgreSQL conformance tests \
             need a server that lets them create databases: start one, or point \
             STEWARD_TEST_DATABASE_URL at one."
        ),
    }
}

/// `url` with its database replaced by `name` (URL or `key=value` form).
fn with_database(url: &str, name: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return format!("{url} dbname={name}");
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let query = rest[authority_end..]
        .find('?')
        .map_or("", |i| &rest[authority_end + i..]);
    format!("{}/{name}{query}", &url[..scheme_end + 3 + authority_end])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_run_all_on_one_store() {
    let database = TestDatabase::create().await;
    run_all(database.store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_operation_key_unique_across_handles() {
    let database = TestDatabase::create().await;
    let mut stores = Vec::new();
    for _ in 0..3 {
        stores.push(database.store().await);
    }
    operation_key_unique_across_handles(stores).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_concurrent_sweeps_across_handles_take_each_piece_once() {
    let database = TestDatabase::create().await;
    let mut stores = Vec::new();
    for _ in 0..3 {
        stores.push(database.store().await);
    }
    concurrent_sweeps_take_each_piece_once(stores).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_committed_changes_survive_a_restart() {
    let database = TestDatabase::create().await;
    committed_changes_survive_a_restart(|| database.store()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_writes_naming_an_unknown_environment_are_not_duplicates() {
    let database = TestDatabase::create().await;
    writes_naming_an_unknown_environment_are_not_duplicates(database.store().await).await;
}

/// Replicas starting together on an empty database: each connects, the schema is applied once,
/// and connecting again is a no-op.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_concurrent_connects_migrate_once() {
    let database = TestDatabase::create().await;
    let mut connects = Vec::new();
    for _ in 0..4 {
        let url = database.url.clone();
        connects.push(tokio::spawn(
            async move { PostgresStore::connect(&url).await },
        ));
    }
    for connect in connects {
        connect
            .await
            .expect("connect task")
            .expect("concurrent connect");
    }
    let store = database.store().await;
    let env = Env::new(&store, "migrated").await;
    env.create_action(refund_definition("refund")).await;
    let client = admin_client(&database.url).await;
    let applied: Vec<i64> = client
        .query(
            "SELECT version FROM steward_migrations ORDER BY version",
            &[],
        )
        .await
        .expect("migrations table")
        .iter()
        .map(|row| row.get(0))
        .collect();
    let expected: Vec<i64> = (1..=applied.len() as i64).collect();
    assert!(!applied.is_empty());
    assert_eq!(applied, expected, "each migration applied exactly once");
}

#[test]
fn test_database_urls_name_the_new_database() {
    for (given, expected) in [
        (
            "postgres://postgres@127.0.0.1:5432/postgres",
            "postgres://postgres@127.0.0.1:5432/db1",
        ),
        ("postgres://root@localhost", "postgres://root@localhost/db1"),
        (
            "postgresql://u:p@h/postgres?sslmode=disable",
            "postgresql://u:p@h/db1?sslmode=disable",
        ),
        (
            "host=127.0.0.1 user=postgres",
            "host=127.0.0.1 user=postgres dbname=db1",
        ),
    ] {
        assert_eq!(with_database(given, "db1"), expected);
    }
}
