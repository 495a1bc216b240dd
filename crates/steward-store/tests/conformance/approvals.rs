//! Approval decisions that begin what they release: `release_context` reads what a decision may
//! release, and `decide_and_begin` commits the decision with the released effect's reservation
//! and attempt, or with nothing beyond the decision where the rules say so.

use super::*;
use steward_core::{ApprovalId, ApprovalStatus, Decision};
use steward_store::{
    DecideOutcome, Decided, DecisionRequest, FirstAttempt, FirstAttemptOutcome, NewApproval,
};

/// A parked invocation of `action` and its approval, which needs `required` approvals and runs
/// out at `expires_at`. Requested by `env.key`.
pub async fn park(
    env: &Env,
    action: &ActionRecord,
    input: Value,
    required: u32,
    expires_at: Option<Millis>,
) -> (InvocationRecord, ApprovalId) {
    let sub = gated_submission(env, action, input, required, expires_at);
    let parked = expect_created(env.store.submit(&sub).await.expect("submit"));
    let approval = ApprovalId::parse(parked.approval_id.as_deref().expect("approval id"))
        .expect("approval id");
    (parked, approval)
}

/// A submission of `action` that parks for an approval needing `required` approvals, running out
/// at `expires_at`.
fn gated_submission(
    env: &Env,
    action: &ActionRecord,
    input: Value,
    required: u32,
    expires_at: Option<Millis>,
) -> Submission {
    let mut sub = env.submission(action, input);
    sub.initial = EffectState::AwaitingApproval;
    sub.approval = Some(NewApproval {
        id: ApprovalId::from_unique(&unique("apr")),
        title: "approve the refund".into(),
        description: None,
        payload: json!({}),
        required_approvals: required,
        expires_at,
        run_id: None,
    });
    sub
}

/// `key` approving `approval` at `at` on replica `decider`.
pub fn approve(
    env: &Env,
    approval: &ApprovalId,
    key: &KeyId,
    decider: &ReplicaId,
    at: i64,
) -> DecisionRequest {
    DecisionRequest {
        env_id: env.id.clone(),
        approval_id: approval.clone(),
        key: key.clone(),
        decision: Decision::Approve,
        note: Some(format!("ok from {key}")),
        now: Millis(at),
        replica: decider.clone(),
        seen: None,
    }
}

/// The first attempt of `parked`'s effect as the deciding replica plans it: one resource
/// mutation, attempt 1 owned by `decider`.
pub fn released_attempt(
    env: &Env,
    parked: &InvocationRecord,
    decider: &ReplicaId,
    at: i64,
) -> FirstAttempt {
    let mut begin = env.change(
        &parked.effect_id,
        EffectState::Ready,
        EffectState::Dispatching,
        at,
    );
    begin.attempt = Some(AttemptChange::Begin {
        number: 1,
        deadline_at: Millis(at + 30_000),
        owner: decider.clone(),
    });
    begin.evidence = Some(NewEvidence::new(
        EvidenceKind::Attempt,
        EvidenceSource::Steward,
        "attempt 1 recorded with the decision",
    ));
    FirstAttempt {
        impact: impact_request(env, &parked.effect_id, vec![mutation(Some(1))], at),
        begin,
    }
}

async fn decide(
    store: &Arc<dyn Store>,
    request: &DecisionRequest,
    first: &FirstAttempt,
) -> Decided {
    store
        .decide_and_begin(request, Some(first))
        .await
        .expect("decide_and_begin")
}

/// The approval as a read finds it.
pub async fn read_approval(env: &Env, id: &ApprovalId) -> steward_store::ApprovalRecord {
    env.store
        .approval(&env.id, id)
        .await
        .expect("approval")
        .expect("approval exists")
}

/// What a decision may release is read in one go; the decision that completes an N-of-M approval
/// commits the released effect's reservation and attempt with it, owned by the deciding
/// replica, and a sweep that finds that replica dead makes the attempt `unknown`. Decisions
/// before it, the requester's own and later ones begin nothing. Every answer's approval is the
/// one a read finds.
pub async fn decide_and_begin_commits_the_attempt_with_the_decision(store: Arc<dyn Store>) {
    let env = Env::new(&store, "release").await;
    let action = env.create_action(refund_definition("refund")).await;
    let credential = secret_record(&env, "STRIPE_TEST_KEY", b"sealed");
    store
        .put_secret(&credential, None, &env.actor(T0.0))
        .await
        .expect("put_secret");
    let limit = limit_record(
        &env,
        json!({"name": "ten", "dimension": "resource_mutations", "period": "total", "amount": 10}),
    );
    store
        .create_limit(&limit, &env.actor(T0.0))
        .await
        .expect("create_limit");
    let (parked, approval) = park(&env, &action, json!({"n": 1}), 2, None).await;
    let decider = restarted();
    let (first_key, second_key, late_key) = (
        KeyId::from_unique(&unique("approver")),
        KeyId::from_unique(&unique("approver")),
        KeyId::from_unique(&unique("approver")),
    );

    let context = store
        .release_context(&env.id, &approval)
        .await
        .expect("release_context")
        .expect("the approval is found");
    assert_eq!(context.approval, read_approval(&env, &approval).await);
    let found = context.parked.as_ref().expect("the invocation is parked");
    assert_eq!(found.invocation, env.invocation(&parked.id).await);
    assert_eq!(found.definition, action.definition);
    assert_eq!(found.provider_idempotency_key, None);
    let names: Vec<&str> = found.secrets.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["STRIPE_TEST_KEY"]);
    let first_ballot = approve(&env, &approval, &first_key, &decider, 2_000);
    assert!(
        !context.releases(&first_ballot),
        "one approval of two releases nothing"
    );
    assert!(store
        .release_context(&env.id, &ApprovalId::from_unique(&unique("apr")))
        .await
        .expect("release_context")
        .is_none());

    // The first of two approvals: recorded, nothing released, nothing begun.
    let first = released_attempt(&env, &parked, &decider, 2_000);
    let done = decide(&store, &first_ballot, &first).await;
    assert_eq!(done.first, None);
    match done.outcome {
        DecideOutcome::Recorded {
            approval: answered,
            ready: None,
        } => {
            assert_eq!(answered.status, ApprovalStatus::Pending);
            assert_eq!(answered, read_approval(&env, &approval).await);
        }
        other => panic!("expected a recorded, unreleased decision, got {other:?}"),
    }
    let detail = env.effect(&parked.effect_id).await;
    assert_eq!(detail.effect.state, EffectState::AwaitingApproval);
    assert!(detail.attempts.is_empty());
    assert_eq!(usage_of(&env, &limit.id, 2_000).await.reserved, 0);

    // The requester never decides its own request, with or without an attempt.
    let own = approve(&env, &approval, &env.key, &decider, 2_100);
    let done = decide(
        &store,
        &own,
        &released_attempt(&env, &parked, &decider, 2_100),
    )
    .await;
    assert!(matches!(done.outcome, DecideOutcome::SelfDecision));
    assert_eq!(done.first, None);

    // The second approval releases the invocation and begins it in the same commit.
    let second_ballot = approve(&env, &approval, &second_key, &decider, 3_000);
    let context = store
        .release_context(&env.id, &approval)
        .await
        .expect("release_context")
        .expect("found");
    assert!(context.releases(&second_ballot));
    let done = decide(
        &store,
        &second_ballot,
        &released_attempt(&env, &parked, &decider, 3_000),
    )
    .await;
    assert_eq!(done.first, Some(FirstAttemptOutcome::Begun));
    match done.outcome {
        DecideOutcome::Recorded {
            approval: answered,
            ready: Some(ready),
        } => {
            assert_eq!(ready.id, parked.id);
            assert_eq!(
                ready.state,
                EffectState::Ready,
                "as the decision released it"
            );
            assert_eq!(answered.status, ApprovalStatus::Approved);
            assert_eq!(answered.decisions.len(), 2);
            assert_eq!(answered, read_approval(&env, &approval).await);
        }
        other => panic!("expected the release, got {other:?}"),
    }
    let detail = env.effect(&parked.effect_id).await;
    assert_eq!(detail.effect.state, EffectState::Dispatching);
    assert_eq!(detail.effect.attempt_count, 1);
    assert_eq!(detail.attempts.len(), 1);
    assert_eq!(detail.attempts[0].owner.as_ref(), Some(&decider));
    assert_eq!(
        env.invocation(&parked.id).await.state,
        EffectState::Dispatching
    );
    assert_eq!(usage_of(&env, &limit.id, 3_000).await.reserved, 1);
    let parked_again = store
        .release_context(&env.id, &approval)
        .await
        .expect("release_context")
        .expect("found");
    assert!(parked_again.parked.is_none(), "no longer parked");

    // A later approval changes nothing and begins nothing.
    let late = approve(&env, &approval, &late_key, &decider, 3_500);
    let done = decide(
        &store,
        &late,
        &released_attempt(&env, &parked, &decider, 3_500),
    )
    .await;
    assert!(matches!(done.outcome, DecideOutcome::Unchanged(_)));
    assert_eq!(done.first, None);
    assert_eq!(env.effect(&parked.effect_id).await.attempts.len(), 1);

    // The deciding replica dies before the answer: the attempt it committed with the decision
    // is taken over like any other attempt in flight, never sent again.
    let sweeper = restarted();
    let report = store
        .recover(&Sweep::lease(&sweeper, Millis(100_000), 5_000))
        .await
        .expect("sweep");
    assert!(
        report.dispatching_to_unknown.contains(&parked.effect_id),
        "{report:?}"
    );
    assert_eq!(
        env.effect(&parked.effect_id).await.effect.state,
        EffectState::Unknown
    );
}

/// Where the rules say no attempt, the decision commits without one: a halted environment
/// leaves the released effect `ready` and owned by the deciding replica (a sweep that finds it
/// dead hands it on), a refusing limit leaves it `ready` with no reservation, a denial and an
/// expiry release nothing, and an attempt of another effect is refused with nothing written.
pub async fn decide_and_begin_records_no_attempt_where_the_rules_say_no(store: Arc<dyn Store>) {
    let env = Env::new(&store, "release-no").await;
    let action = env.create_action(refund_definition("refund")).await;
    let decider = restarted();
    let approver = KeyId::from_unique(&unique("approver"));

    // Halted: the decision commits, the attempt does not.
    store
        .set_halted(
            HaltChange::halt(&env.id, Some("incident")),
            &env.actor(T0.0),
        )
        .await
        .expect("halt");
    let (halted, halted_approval) = park(&env, &action, json!({"n": 1}), 1, None).await;
    let done = decide(
        &store,
        &approve(&env, &halted_approval, &approver, &decider, 2_000),
        &released_attempt(&env, &halted, &decider, 2_000),
    )
    .await;
    assert_eq!(done.first, Some(FirstAttemptOutcome::Halted));
    assert!(matches!(
        done.outcome,
        DecideOutcome::Recorded { ready: Some(_), .. }
    ));
    let detail = env.effect(&halted.effect_id).await;
    assert_eq!(detail.effect.state, EffectState::Ready);
    assert!(detail.attempts.is_empty(), "no attempt while halted");
    let report = store
        .recover(&Sweep::lease(&restarted(), Millis(100_000), 5_000))
        .await
        .expect("sweep");
    assert!(
        report
            .approved_to_dispatch
            .contains(&(env.id.clone(), halted.id.clone())),
        "the released effect was the deciding replica's: {report:?}"
    );
    store
        .set_halted(HaltChange::resume(&env.id), &env.actor(2_500))
        .await
        .expect("resume");

    // A limit with nothing left refuses: no reservation, no attempt, the effect stays ready.
    let none_left = limit_record(
        &env,
        json!({"name": "none", "dimension": "resource_mutations", "period": "total", "amount": 0}),
    );
    store
        .create_limit(&none_left, &env.actor(T0.0))
        .await
        .expect("create_limit");
    let (refused, refused_approval) = park(&env, &action, json!({"n": 2}), 1, None).await;
    let done = decide(
        &store,
        &approve(&env, &refused_approval, &approver, &decider, 3_000),
        &released_attempt(&env, &refused, &decider, 3_000),
    )
    .await;
    match done.first {
        Some(FirstAttemptOutcome::Refused(ReserveOutcome::Refused { limit_id, .. })) => {
            assert_eq!(limit_id, none_left.id)
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let detail = env.effect(&refused.effect_id).await;
    assert_eq!(detail.effect.state, EffectState::Ready);
    assert!(detail.attempts.is_empty());
    assert!(detail.reservations.is_empty());
    store
        .archive_limit(&env.id, &none_left.id, &env.actor(3_100))
        .await
        .expect("archive");

    // An attempt of another effect: refused before anything is written.
    let (parked, approval) = park(&env, &action, json!({"n": 3}), 1, None).await;
    let (other, _) = park(&env, &action, json!({"n": 4}), 1, None).await;
    let wrong = store
        .decide_and_begin(
            &approve(&env, &approval, &approver, &decider, 4_000),
            Some(&released_attempt(&env, &other, &decider, 4_000)),
        )
        .await;
    assert!(
        matches!(wrong, Err(StoreError::IllegalTransition { .. })),
        "{wrong:?}"
    );
    // So is an attempt owned by another replica than the deciding one.
    let foreign_owner = store
        .decide_and_begin(
            &approve(&env, &approval, &approver, &decider, 4_000),
            Some(&released_attempt(&env, &parked, &restarted(), 4_000)),
        )
        .await;
    assert!(
        matches!(foreign_owner, Err(StoreError::IllegalTransition { .. })),
        "{foreign_owner:?}"
    );
    assert_eq!(
        read_approval(&env, &approval).await.status,
        ApprovalStatus::Pending
    );
    assert!(read_approval(&env, &approval).await.decisions.is_empty());
    assert_eq!(
        env.effect(&parked.effect_id).await.effect.state,
        EffectState::AwaitingApproval
    );

    // A denial releases nothing, whatever attempt comes with it.
    let mut deny = approve(&env, &approval, &approver, &decider, 4_100);
    deny.decision = Decision::Deny;
    let done = decide(
        &store,
        &deny,
        &released_attempt(&env, &parked, &decider, 4_100),
    )
    .await;
    assert_eq!(done.first, None);
    assert!(matches!(
        done.outcome,
        DecideOutcome::Recorded { ready: None, .. }
    ));
    let detail = env.effect(&parked.effect_id).await;
    assert!(detail.attempts.is_empty());
    assert_eq!(
        detail.effect.state,
        EffectState::Rejected {
            reason: Rejection::Denied
        }
    );

    // An approval that ran out expires instead, and its effect never runs.
    let (late, late_approval) = park(&env, &action, json!({"n": 5}), 1, Some(Millis(4_500))).await;
    let done = decide(
        &store,
        &approve(&env, &late_approval, &approver, &decider, 5_000),
        &released_attempt(&env, &late, &decider, 5_000),
    )
    .await;
    assert_eq!(done.first, None);
    match done.outcome {
        DecideOutcome::Expired(expired) => assert_eq!(expired.status, ApprovalStatus::Expired),
        other => panic!("expected the expiry, got {other:?}"),
    }
    assert!(env.effect(&late.effect_id).await.attempts.is_empty());
}

/// Concurrent approvals of one request begin its attempt once; concurrent approvals of
/// different requests each begin theirs.
pub async fn concurrent_decisions_begin_each_release_once(store: Arc<dyn Store>) {
    let env = Env::new(&store, "release-race").await;
    let action = env.create_action(refund_definition("refund")).await;
    let (parked, approval) = park(&env, &action, json!({"n": 0}), 1, None).await;
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let decider = restarted();
            let request = approve(
                &env,
                &approval,
                &KeyId::from_unique(&unique("approver")),
                &decider,
                2_000 + i,
            );
            let first = released_attempt(&env, &parked, &decider, 2_000 + i);
            let store = store.clone();
            tokio::spawn(async move { store.decide_and_begin(&request, Some(&first)).await })
        })
        .collect();
    let mut begun = 0;
    for task in tasks {
        let done = task.await.expect("task").expect("decide_and_begin");
        match (&done.outcome, &done.first) {
            (DecideOutcome::Recorded { ready: Some(_), .. }, Some(FirstAttemptOutcome::Begun)) => {
                begun += 1
            }
            (DecideOutcome::Unchanged(_), None) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(begun, 1, "exactly one decision released and began it");
    assert_eq!(env.effect(&parked.effect_id).await.attempts.len(), 1);

    let mut parked_many = Vec::new();
    for n in 1..=6 {
        parked_many.push(park(&env, &action, json!({ "n": n }), 1, None).await);
    }
    let tasks: Vec<_> = parked_many
        .iter()
        .map(|(parked, approval)| {
            let decider = restarted();
            let request = approve(
                &env,
                approval,
                &KeyId::from_unique(&unique("approver")),
                &decider,
                3_000,
            );
            let first = released_attempt(&env, parked, &decider, 3_000);
            let store = store.clone();
            tokio::spawn(async move { store.decide_and_begin(&request, Some(&first)).await })
        })
        .collect();
    for task in tasks {
        let done = task.await.expect("task").expect("decide_and_begin");
        assert_eq!(done.first, Some(FirstAttemptOutcome::Begun));
    }
    for (parked, _) in &parked_many {
        assert_eq!(env.effect(&parked.effect_id).await.attempts.len(), 1);
    }
    assert_chain_intact(&store).await;
}

/// Concurrent gated submissions of one operation key (each under an `Idempotency-Key` of its
/// own) park exactly one invocation with exactly one approval: no global lock orders them (the
/// unique index on the operation key does), and every loser finds the winner's invocation.
pub async fn gated_submits_under_concurrency_park_once(store: Arc<dyn Store>) {
    let env = Env::new(&store, "gated-race").await;
    let action = env.create_action(refund_definition("refund")).await;
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let mut sub = gated_submission(&env, &action, json!({"n": 1}), 1, None);
            sub.operation_key = Some(op("gated-race"));
            sub.idempotency_key = Some(idem(&format!("gated-req-{i}")));
            let store = store.clone();
            tokio::spawn(async move { store.submit(&sub).await })
        })
        .collect();
    let (mut created, mut existing) = (Vec::new(), 0);
    for task in tasks {
        match task.await.expect("task").expect("submit") {
            SubmitOutcome::Created(inv) => created.push(inv),
            SubmitOutcome::Existing(_) => existing += 1,
            other => panic!("expected Created or Existing, got {other:?}"),
        }
    }
    assert_eq!((created.len(), existing), (1, 15));
    let pending = store
        .list_approvals(
            &env.id,
            &steward_store::ApprovalFilter {
                status: Some(ApprovalStatus::Pending),
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .expect("list_approvals");
    assert_eq!(
        pending.total, 1,
        "one approval for the one parked invocation"
    );
    assert_eq!(
        Some(pending.items[0].id.as_str()),
        created[0].approval_id.as_deref()
    );
    let all = store
        .list_invocations(&env.id, &invocations_of(&action))
        .await
        .expect("list");
    assert_eq!(all.total, 1);
    assert_chain_intact(&store).await;
}
