//! Holds: an operator's hold on an action or an operation key refuses the first attempt of
//! the work it covers (and only that work), leaves attempts already recorded alone, is walled
//! by environment, unique per target, audited, and released once.

use super::hotpath::first_attempt;
use super::*;
use steward_core::HoldId;
use steward_store::HoldRecord;

fn hold(env: &Env, action: Option<&str>, key: Option<&str>, at: i64) -> HoldRecord {
    HoldRecord {
        id: HoldId::from_unique(&unique("hold")),
        env_id: env.id.clone(),
        action_name: action.map(str::to_string),
        operation_key: key.map(str::to_string),
        reason: Some("incident".into()),
        created_by: env.key.to_string(),
        created_at: Millis(at),
    }
}

fn keyed(env: &Env, action: &ActionRecord, key: &str, n: i64) -> Submission {
    let mut sub = env.submission(action, json!({"n": n}));
    sub.operation_key = Some(OperationKey::parse(key).expect("a key"));
    sub
}

/// The change that records attempt 1 of `effect` (`ready -> dispatching`).
fn begin(env: &Env, effect: &EffectId, at: i64) -> EffectChange {
    let mut change = env.change(effect, EffectState::Ready, EffectState::Dispatching, at);
    change.attempt = Some(AttemptChange::Begin {
        number: 1,
        deadline_at: Millis(at + 30_000),
        owner: writer(),
    });
    change
}

pub async fn a_hold_parks_only_the_work_it_covers_until_released(store: Arc<dyn Store>) {
    let env = Env::new(&store, "hold").await;
    let other = Env::new(&store, "hold-other").await;
    let refund = env.create_action(refund_definition("refund")).await;
    let email = env.create_action(refund_definition("email")).await;
    let theirs = other.create_action(refund_definition("refund")).await;
    let held_refund = keyed(&env, &refund, "order-1", 1);
    let unrelated = keyed(&env, &refund, "order-2", 2);
    let held_email = keyed(&env, &email, "order-1", 3);
    let in_flight = keyed(&env, &email, "order-9", 4);
    let elsewhere = keyed(&other, &theirs, "order-1", 5);
    for sub in [
        &held_refund,
        &unrelated,
        &held_email,
        &in_flight,
        &elsewhere,
    ] {
        expect_created(store.submit(sub).await.expect("submit"));
    }
    // Work already dispatching when a hold comes is not disturbed.
    env.begin_attempt(&in_flight.effect_id, 1_500).await;

    let on_key = hold(&env, None, Some("order-1"), 2_000);
    store
        .create_hold(&on_key, &env.actor(2_000))
        .await
        .expect("hold the key");
    let on_email = hold(&env, Some("email"), None, 2_010);
    store
        .create_hold(&on_email, &env.actor(2_010))
        .await
        .expect("hold the action");
    let again = hold(&env, None, Some("order-1"), 2_020);
    assert!(
        matches!(
            store.create_hold(&again, &env.actor(2_020)).await,
            Err(StoreError::Duplicate { what: "hold" })
        ),
        "one hold per target"
    );
    let listed: Vec<HoldId> = store
        .list_holds(&env.id)
        .await
        .expect("list")
        .into_iter()
        .map(|h| h.id)
        .collect();
    assert_eq!(listed, vec![on_key.id.clone(), on_email.id.clone()]);
    assert!(store.list_holds(&other.id).await.expect("list").is_empty());

    for sub in [&held_refund, &held_email] {
        assert!(
            matches!(
                store
                    .change_effect(&begin(&env, &sub.effect_id, 2_100))
                    .await,
                Err(StoreError::Held)
            ),
            "a held first attempt is refused"
        );
        let detail = env.effect(&sub.effect_id).await;
        assert_eq!(detail.effect.state, EffectState::Ready, "nothing recorded");
        assert!(detail.attempts.is_empty());
    }
    // A new invoke of the held action is committed ready, without its attempt.
    let fresh = keyed(&env, &email, "order-3", 6);
    let done = store
        .submit_and_begin(&fresh, &first_attempt(&env, &fresh, 2_150))
        .await
        .expect("submit_and_begin");
    expect_created(done.outcome);
    assert_eq!(done.first, Some(FirstAttemptOutcome::Held));
    assert!(env.effect(&fresh.effect_id).await.attempts.is_empty());
    // An unrelated key, the attempt in flight, and the other environment go on.
    env.begin_attempt(&unrelated.effect_id, 2_200).await;
    env.finish_attempt(
        &in_flight.effect_id,
        EffectState::Succeeded { confirmed: false },
        2_250,
    )
    .await;
    other.begin_attempt(&elsewhere.effect_id, 2_300).await;

    let released = store
        .release_hold(&env.id, &on_key.id, &env.actor(3_000))
        .await
        .expect("release");
    assert_eq!(released, on_key);
    assert!(matches!(
        store
            .release_hold(&env.id, &on_key.id, &env.actor(3_010))
            .await,
        Err(StoreError::NotFound { what: "hold" })
    ));
    assert!(
        matches!(
            store
                .release_hold(&other.id, &on_email.id, &other.actor(3_020))
                .await,
            Err(StoreError::NotFound { what: "hold" })
        ),
        "holds are walled by environment"
    );
    env.begin_attempt(&held_refund.effect_id, 3_100).await;
    assert!(
        matches!(
            store
                .change_effect(&begin(&env, &held_email.effect_id, 3_200))
                .await,
            Err(StoreError::Held)
        ),
        "still held by the action's hold"
    );

    let kinds: Vec<(String, String)> = all_audit_events(&store)
        .await
        .into_iter()
        .filter(|e| e.env_id.as_deref() == Some(env.id.as_str()) && e.kind.starts_with("hold."))
        .map(|e| (e.kind, e.subject))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("hold.created".to_string(), on_key.id.to_string()),
            ("hold.created".to_string(), on_email.id.to_string()),
            ("hold.released".to_string(), on_key.id.to_string()),
        ]
    );
}
