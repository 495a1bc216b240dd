//! Governance: approval policies, impact limits and reservations, the kill switch.

use super::*;
use steward_core::impact::ReservationState;
use steward_store::ActualImpact;

// ------------------------------------------------------------------------------------------
// Governance: approval policies, impact limits and reservations, the kill switch
// ------------------------------------------------------------------------------------------

pub fn policy_spec(name: &str, effect: &str) -> PolicySpec {
    let body =
        json!({"name": name, "matchKind": "action", "matchActionName": "refund", "effect": effect});
    PolicySpec::from_create(body.as_object().expect("object")).expect("valid policy")
}

pub fn policy_record(env: &Env, spec: PolicySpec) -> PolicyRecord {
    PolicyRecord {
        id: PolicyId::from_unique(&unique("pol")),
        env_id: env.id.clone(),
        version: 1,
        spec,
        created_at: T0,
        updated_at: T0,
    }
}

pub fn limit_record(env: &Env, body: Value) -> LimitRecord {
    LimitRecord {
        id: LimitId::from_unique(&unique("lim")),
        env_id: env.id.clone(),
        spec: LimitSpec::from_create(body.as_object().expect("object")).expect("valid limit"),
        archived_at: None,
        created_at: T0,
        updated_at: T0,
    }
}

pub fn mutation(amount: Option<i64>) -> Quantity {
    Quantity {
        dimension: "resource_mutations".into(),
        unit: "resource_mutations".into(),
        amount,
    }
}

pub fn impact_request(
    env: &Env,
    effect: &EffectId,
    quantities: Vec<Quantity>,
    at: i64,
) -> ImpactRequest {
    ImpactRequest {
        env_id: env.id.clone(),
        effect_id: effect.clone(),
        action_name: "refund".into(),
        resource: None,
        quantities,
        actor: env.actor(at),
    }
}

pub async fn usage_of(env: &Env, id: &LimitId, at: i64) -> Usage {
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
        .set_halted(
            HaltChange::halt(&env.id, Some("incident")),
            &env.actor(2_000),
        )
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
        .set_halted(HaltChange::resume(&env.id), &env.actor(3_000))
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

/// A policy file's apply: the whole set changes in one transaction, against the set it was
/// planned on; a set that moved since is refused whole.
pub async fn a_policy_set_applies_whole_or_not_at_all(store: Arc<dyn Store>) {
    let env = Env::new(&store, "policy-set").await;
    let keep = policy_record(&env, policy_spec("keep", "require_approval"));
    let edit = policy_record(&env, policy_spec("edit", "require_approval"));
    let drop = policy_record(&env, policy_spec("drop", "auto_approve"));
    for p in [&keep, &edit, &drop] {
        store
            .create_policy(p, None, &env.actor(T0.0))
            .await
            .expect("create_policy");
    }
    let planned_on: Vec<(PolicyId, u32)> = [&keep, &edit, &drop]
        .iter()
        .map(|p| (p.id.clone(), 1))
        .collect();
    let mut edited = edit.spec.clone();
    edited.priority = 9;
    // The new policy takes the name the deleted one gives up: deletions are written first.
    let mut reborn = policy_spec("drop", "auto_deny");
    reborn.acknowledge_broad_scope = true;
    let created = policy_record(&env, reborn);
    let change = PolicySetChange {
        env_id: env.id.clone(),
        expected: planned_on.clone(),
        changes: vec![
            PolicyChange::Create(created.clone()),
            PolicyChange::Update {
                id: edit.id.clone(),
                expected_version: 1,
                spec: edited.clone(),
            },
            PolicyChange::Delete {
                id: drop.id.clone(),
                expected_version: 1,
            },
        ],
    };

    // Planned on a set that has moved since (another edit came first): nothing is written.
    let mut moved = keep.spec.clone();
    moved.priority = 3;
    store
        .update_policy(&env.id, &keep.id, 1, &moved, None, &env.actor(2_000))
        .await
        .expect("a concurrent edit");
    let before = store.list_policies(&env.id).await.expect("list");
    let audit_before = all_audit_events(&store).await.len();
    assert!(matches!(
        store
            .apply_policy_set(&change, Some("file"), &env.actor(3_000))
            .await,
        Err(StoreError::VersionConflict { .. })
    ));
    assert_eq!(store.list_policies(&env.id).await.expect("list"), before);
    assert_eq!(all_audit_events(&store).await.len(), audit_before);

    // Planned on the set as it stands now: every change lands, in one go.
    let mut now_planned = planned_on;
    now_planned[0].1 = 2;
    let change = PolicySetChange {
        expected: now_planned,
        ..change
    };
    let live = store
        .apply_policy_set(&change, Some("file"), &env.actor(4_000))
        .await
        .expect("apply_policy_set");
    let names: Vec<(&str, u32)> = live
        .iter()
        .map(|p| (p.spec.name.as_str(), p.version))
        .collect();
    assert_eq!(names, vec![("keep", 2), ("edit", 2), ("drop", 1)]);
    assert_eq!(live[1].spec, edited);
    assert_eq!(live[2].id, created.id);
    let versions = store
        .policy_versions(&env.id, &drop.id)
        .await
        .expect("versions");
    assert!(versions.last().expect("tombstone").is_tombstone());
    // Each change has its audit event, as the single calls write them.
    assert_eq!(all_audit_events(&store).await.len(), audit_before + 3);
}

/// A manual resolution's actual amounts settle the effect's reservation in the resolution's
/// transaction (consumed at the amount, released at 0); on any other move they are illegal and
/// nothing is written.
pub async fn actual_impact_settles_a_resolution_and_nothing_else(store: Arc<dyn Store>) {
    let env = Env::new(&store, "actual").await;
    let action = env.create_action(refund_definition("refund")).await;
    let limit = limit_record(
        &env,
        json!({"name": "writes", "dimension": "resource_mutations", "period": "total", "amount": 10}),
    );
    store
        .create_limit(&limit, &env.actor(T0.0))
        .await
        .expect("create_limit");
    let sub = env.submission(&action, json!({"paymentIntent": "pi_1", "amount": 1}));
    expect_created(store.submit(&sub).await.expect("submit"));
    let reserved = store
        .reserve_impact(&impact_request(
            &env,
            &sub.effect_id,
            vec![mutation(Some(4))],
            2_000,
        ))
        .await
        .expect("reserve");
    assert!(
        matches!(reserved, ReserveOutcome::Reserved(_)),
        "{reserved:?}"
    );

    // Illegal on a move that is not a resolution: refused, and the effect stays ready.
    let mut early = env.change(
        &sub.effect_id,
        EffectState::Ready,
        EffectState::Dispatching,
        2_100,
    );
    early.actual_impact = Some(vec![ActualImpact {
        dimension: "resource_mutations".into(),
        unit: "resource_mutations".into(),
        amount: 1,
    }]);
    assert!(matches!(
        store.change_effect(&early).await,
        Err(StoreError::IllegalTransition { .. })
    ));
    assert_eq!(
        env.effect(&sub.effect_id).await.effect.state,
        EffectState::Ready
    );

    env.begin_attempt(&sub.effect_id, 2_200).await;
    env.finish_attempt(&sub.effect_id, EffectState::Unknown, 2_300)
        .await;
    let mut resolve = EffectChange::of(
        &env.id,
        &sub.effect_id,
        EffectState::Unknown,
        steward_core::EffectEvent::Resolve {
            outcome: steward_core::ManualOutcome::Succeeded,
        },
        NewEvidence::new(
            EvidenceKind::ManualResolution,
            EvidenceSource::Manual,
            "seen",
        ),
        env.actor(2_400),
    )
    .expect("resolve");
    resolve.actual_impact = Some(vec![ActualImpact {
        dimension: "resource_mutations".into(),
        unit: "resource_mutations".into(),
        amount: 1,
    }]);
    store
        .change_effect(&resolve)
        .await
        .expect("resolve by hand");
    let held = &env.effect(&sub.effect_id).await.reservations[0];
    assert_eq!((held.amount, held.state), (1, ReservationState::Consumed));
    let status = store
        .limit(&env.id, &limit.id, Millis(2_500))
        .await
        .expect("limit")
        .expect("exists");
    assert_eq!((status.usage.consumed, status.available()), (1, 9));
}
