//! Per-key budgets: admission at submission never passes a cap under concurrency, a refusal
//! records nothing, the unit settles with its effect, and a budget's limit row stays out of the
//! impact limits.

use super::*;
use std::collections::BTreeMap;
use steward_store::{BudgetRefusal, BudgetSpec};

fn capped(cap: i64) -> BudgetSpec {
    BudgetSpec {
        monthly_cost_cents_cap: None,
        dimension_caps: BTreeMap::from([("invocations".to_string(), cap)]),
        alert_threshold: 0.8,
        enabled: true,
    }
}

pub async fn budget_admission_never_exceeds_a_cap_and_settles_with_the_effect(
    store: Arc<dyn Store>,
) {
    let env = Env::new(&store, "budgets").await;
    let action = env.create_action(refund_definition("refund")).await;
    let budget_limit = LimitId::from_unique(&unique("lim"));
    store
        .put_budget(
            &env.id,
            &env.key,
            &budget_limit,
            &capped(5),
            &env.actor(T0.0),
        )
        .await
        .expect("put_budget");
    let limit = limit_record(
        &env,
        json!({"name": "mutations", "dimension": "resource_mutations", "period": "total", "amount": 100}),
    );
    store
        .create_limit(&limit, &env.actor(T0.0))
        .await
        .expect("create_limit");

    // Half are parked-style submissions, half the invoke hot path (`submit_and_begin`, which on
    // PostgreSQL runs without the write lock).
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let (store, sub) = (store.clone(), env.submission(&action, json!({"n": i})));
            let first = first_attempt(&env, &sub, T0.0);
            tokio::spawn(async move {
                let outcome = if i % 2 == 0 {
                    store.submit(&sub).await
                } else {
                    store
                        .submit_and_begin(&sub, &first)
                        .await
                        .map(|s| s.outcome)
                };
                (sub.invocation_id.clone(), outcome)
            })
        })
        .collect();
    let (mut created, mut refused) = (Vec::new(), 0);
    for task in tasks {
        let (id, outcome) = task.await.expect("submit task");
        match outcome.expect("submit") {
            SubmitOutcome::Created(inv) => created.push(inv),
            SubmitOutcome::BudgetRefused(BudgetRefusal::Exceeded { cap, used }) => {
                assert_eq!((cap, used), (5, 5));
                assert!(
                    store
                        .invocation(&env.id, &id)
                        .await
                        .expect("read")
                        .is_none(),
                    "a refused submission records no invocation"
                );
                refused += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        (created.len(), refused),
        (5, 15),
        "exactly the cap is admitted"
    );
    let status = store
        .budget(&env.id, &env.key, T0)
        .await
        .expect("budget")
        .expect("a budget");
    assert_eq!((status.usage.reserved, status.usage.consumed), (5, 0));
    let limits = store.list_limits(&env.id, true, T0).await.expect("limits");
    assert_eq!(
        limits.iter().map(|l| &l.limit.id).collect::<Vec<_>>(),
        vec![&limit.id],
        "a budget's row is not an impact limit"
    );
    assert!(store
        .limit(&env.id, &budget_limit, T0)
        .await
        .expect("limit")
        .is_none());

    // The budget's unit does not stand for the effect's impact reservations.
    // (A hot-path submission reserved it with its attempt; a parked-style one reserves it here.)
    let first = &created[0].effect_id;
    let state = env.effect(first).await.effect.state;
    let reserved = store
        .reserve_impact(&impact_request(&env, first, vec![mutation(Some(1))], T0.0))
        .await
        .expect("reserve_impact");
    let expected = match state {
        EffectState::Ready => ReserveOutcome::Reserved(vec![(limit.id.clone(), 1)]),
        _ => ReserveOutcome::AlreadyReserved,
    };
    assert_eq!(reserved, expected);
    let detail = env.effect(first).await;
    assert_eq!(
        detail.reservations.len(),
        2,
        "its budget unit and its impact reservation"
    );

    // A failure releases the unit (and its impact reservation): one more is admitted.
    store
        .change_effect(&env.change(first, state, EffectState::Failed, T0.0 + 1))
        .await
        .expect("fail");
    let status = store.budget(&env.id, &env.key, T0).await.unwrap().unwrap();
    assert_eq!(status.usage.reserved, 4);
    expect_created(
        store
            .submit(&env.submission(&action, json!({"n": "again"})))
            .await
            .expect("submit"),
    );
    assert!(matches!(
        store
            .submit(&env.submission(&action, json!({"n": "over"})))
            .await
            .expect("submit"),
        SubmitOutcome::BudgetRefused(BudgetRefusal::Exceeded { .. })
    ));

    // Deleted, the key is uncapped; another environment sees no budget of this key.
    let other = Env::new(&store, "budgets-other").await;
    assert!(store
        .budget(&other.id, &env.key, T0)
        .await
        .unwrap()
        .is_none());
    assert!(!store
        .delete_budget(&other.id, &env.key, &other.actor(T0.0))
        .await
        .unwrap());
    assert!(store
        .delete_budget(&env.id, &env.key, &env.actor(T0.0))
        .await
        .unwrap());
    assert!(store.list_budgets(&env.id, T0).await.unwrap().is_empty());
    expect_created(
        store
            .submit(&env.submission(&action, json!({"n": "uncapped"})))
            .await
            .expect("submit"),
    );
}
