//! `/metrics`' figures: each counts what it names, over every environment, and the reconciler's
//! lag is how long the most overdue reconcile has waited.

use super::*;
use steward_store::{DeadLetter, DeliveryOutcome, Redelivery};

/// On a fresh store: one parked approval, one effect dispatching, one unknown since 2.5 s (due
/// at once), one unknown scheduled for later, and one dead letter are counted as such; the lag
/// is measured from the due one, and a scheduled reconcile is not lag until its time.
pub async fn figures_count_what_an_operator_graphs(store: Arc<dyn Store>) {
    let env = Env::new(&store, "figures").await;
    let action = env.create_action(refund_definition("refund")).await;
    let empty = store.figures(Millis(10_000)).await.expect("figures");
    assert_eq!(empty, OperatingFigures::default(), "a fresh store");

    approvals::park(&env, &action, json!({"n": "parked"}), 1, None).await;
    let sent = expect_created(
        store
            .submit(&env.submission(&action, json!({"n": "sent"})))
            .await
            .expect("submit"),
    );
    env.begin_attempt(&sent.effect_id, 2_000).await;
    let mut unknowns = Vec::new();
    for n in ["due", "scheduled"] {
        let inv = expect_created(
            store
                .submit(&env.submission(&action, json!({ "n": n })))
                .await
                .expect("submit"),
        );
        env.begin_attempt(&inv.effect_id, 2_000).await;
        env.finish_attempt(&inv.effect_id, EffectState::Unknown, 2_500)
            .await;
        unknowns.push(inv);
    }
    store
        .schedule_reconcile(&env.id, &unknowns[1].effect_id, Some(Millis(9_000)))
        .await
        .expect("schedule");

    let s = webhooks::subscription(&env, "effects");
    store
        .create_subscription(&s, &Actor::system(T0))
        .await
        .expect("subscription");
    let claimed = store
        .claim_subscriptions("replica-a", T0, Millis(T0.0 + 10_000), 1_000)
        .await
        .expect("claim");
    assert!(claimed.iter().any(|c| c.id == s.id));
    let letter = DeadLetter {
        id: format!("dlq_{}", unique("letter")),
        subscription_id: s.id.clone(),
        env_id: env.id.clone(),
        event_seq: 11,
        event_type: "effect.settled".into(),
        body: "{\"id\":\"evt_11\"}".into(),
        attempts: 6,
        last_error: "HTTP 503".into(),
        created_at: T0,
        redelivery: Redelivery::Dead,
        redelivered_at: None,
    };
    assert!(store
        .record_delivery(
            &s.id,
            "replica-a",
            webhooks::claim_epoch(&store, &s).await,
            s.cursor,
            &DeliveryOutcome::DeadLetter { letter },
            T0,
            None
        )
        .await
        .expect("dead letter"));

    let at = |now| {
        let store = store.clone();
        async move { store.figures(Millis(now)).await.expect("figures") }
    };
    let figures = at(10_000).await;
    assert_eq!(
        figures,
        OperatingFigures {
            approvals_pending: 1,
            effects_dispatching: 1,
            effects_unknown: 2,
            reconcile_overdue_ms: 7_500,
            dead_letters_waiting: 1,
        }
    );
    // Before the scheduled one is due, only the due one counts; after, still the older.
    assert_eq!(at(5_000).await.reconcile_overdue_ms, 2_500);
    // Once the due one is scheduled past now, the scheduled one (due at 9 s) is the lag.
    store
        .schedule_reconcile(&env.id, &unknowns[0].effect_id, Some(Millis(60_000)))
        .await
        .expect("schedule");
    assert_eq!(at(10_000).await.reconcile_overdue_ms, 1_000);
    assert_eq!(at(8_000).await.reconcile_overdue_ms, 0, "none due yet");

    let pool = store.pool_use();
    assert!(pool.max > 0 && pool.in_use <= pool.max, "{pool:?}");
}
