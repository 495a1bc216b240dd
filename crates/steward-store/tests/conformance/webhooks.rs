//! Webhook subscriptions: walled by environment, leased to one deliverer at a time, and the
//! cursor moves only by a recorded outcome from the lease holder at the cursor it read.

use super::*;
use steward_store::{DeadLetter, DeliveryOutcome, SealedSecret, WebhookSubscription};

fn subscription(env: &Env, topic: &str) -> WebhookSubscription {
    WebhookSubscription {
        id: format!("whs_{}", unique("sub")),
        env_id: env.id.clone(),
        topic: topic.into(),
        url: "https://example.com/hook".into(),
        event_types: vec!["effect.settled".into()],
        enabled: true,
        headers: json!({"X-Team": "ops"}),
        secret: SealedSecret {
            nonce: vec![1; 12],
            sealed: vec![2; 40],
        },
        previous_secret: None,
        previous_until: None,
        cursor: 10,
        attempts: 0,
        next_attempt_at: T0,
        last_error: None,
        created_at: T0,
        updated_at: T0,
    }
}

pub async fn webhook_subscriptions_are_walled_leased_and_advanced_by_their_holder(
    store: Arc<dyn Store>,
) {
    let env = Env::new(&store, "hooks").await;
    let other = Env::new(&store, "hooks-other").await;
    let actor = Actor::system(T0);
    let s = subscription(&env, "effects");
    store.create_subscription(&s, &actor).await.expect("create");
    assert_eq!(
        store.subscription(&env.id, &s.id).await.unwrap().as_ref(),
        Some(&s),
        "reads back as written"
    );
    assert_eq!(store.subscription(&other.id, &s.id).await.unwrap(), None);
    assert!(store
        .subscriptions(&other.id, None)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store
            .subscriptions(&env.id, Some("effects"))
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(store
        .subscriptions(&env.id, Some("runs"))
        .await
        .unwrap()
        .is_empty());
    assert!(matches!(
        store.create_subscription(&s, &actor).await,
        Err(StoreError::Duplicate { .. })
    ));

    // Rotation is an update: the new secret and the old one with its grace.
    let mut rotated = s.clone();
    rotated.previous_secret = Some(s.secret.clone());
    rotated.previous_until = Some(Millis(T0.0 + 1_000));
    rotated.secret = SealedSecret {
        nonce: vec![3; 12],
        sealed: vec![4; 40],
    };
    let mut elsewhere = rotated.clone();
    elsewhere.env_id = other.id.clone();
    assert!(!store.update_subscription(&elsewhere, &actor).await.unwrap());
    assert!(store.update_subscription(&rotated, &actor).await.unwrap());
    assert_eq!(
        store
            .subscription(&env.id, &s.id)
            .await
            .unwrap()
            .unwrap()
            .previous_secret,
        Some(s.secret.clone())
    );

    // One lease at a time: a second replica finds nothing while the first holds it.
    let now = Millis(T0.0 + 5);
    let until = Millis(now.0 + 10_000);
    let mine: Vec<_> = store
        .claim_subscriptions("replica-a", now, until, 1_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.id == s.id)
        .collect();
    assert_eq!(mine.len(), 1);
    let theirs = store
        .claim_subscriptions("replica-b", now, until, 1_000)
        .await
        .unwrap();
    assert!(theirs.iter().all(|c| c.id != s.id), "leased to one replica");

    // Only the holder, at the cursor it read, records an outcome.
    let retry = DeliveryOutcome::Retry {
        attempts: 1,
        next_attempt_at: Millis(now.0 + 500),
        error: "HTTP 500".into(),
    };
    assert!(!store
        .record_delivery(&s.id, "replica-b", 10, &retry, now)
        .await
        .unwrap());
    assert!(!store
        .record_delivery(&s.id, "replica-a", 9, &retry, now)
        .await
        .unwrap());
    assert!(store
        .record_delivery(&s.id, "replica-a", 10, &retry, now)
        .await
        .unwrap());
    let read = store.subscription(&env.id, &s.id).await.unwrap().unwrap();
    assert_eq!((read.cursor, read.attempts), (10, 1));
    // Not due before its next attempt; due after, and free for any replica.
    let early = store
        .claim_subscriptions("replica-b", Millis(now.0 + 100), until, 1_000)
        .await
        .unwrap();
    assert!(early.iter().all(|c| c.id != s.id), "not due yet");
    let due = Millis(now.0 + 600);
    let claimed = store
        .claim_subscriptions("replica-b", due, Millis(due.0 + 10_000), 1_000)
        .await
        .unwrap();
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
        created_at: due,
    };
    let dead = DeliveryOutcome::DeadLetter {
        letter: letter.clone(),
    };
    assert!(store
        .record_delivery(&s.id, "replica-b", 10, &dead, due)
        .await
        .unwrap());
    let read = store.subscription(&env.id, &s.id).await.unwrap().unwrap();
    assert_eq!(
        (read.cursor, read.attempts),
        (11, 0),
        "past the dead letter"
    );
    assert_eq!(store.dead_letters(&env.id, 10).await.unwrap(), vec![letter]);
    assert!(store.dead_letters(&other.id, 10).await.unwrap().is_empty());
    let claimed = store
        .claim_subscriptions("replica-a", due, Millis(due.0 + 10_000), 1_000)
        .await
        .unwrap();
    assert!(
        claimed.iter().any(|c| c.id == s.id),
        "the lease was released"
    );
    let advance = DeliveryOutcome::Advance { cursor: 20 };
    assert!(store
        .record_delivery(&s.id, "replica-a", 11, &advance, due)
        .await
        .unwrap());
    assert_eq!(
        store
            .subscription(&env.id, &s.id)
            .await
            .unwrap()
            .unwrap()
            .cursor,
        20
    );

    assert!(!store
        .delete_subscription(&other.id, &s.id, &actor)
        .await
        .unwrap());
    assert!(store
        .delete_subscription(&env.id, &s.id, &actor)
        .await
        .unwrap());
    assert_eq!(store.subscription(&env.id, &s.id).await.unwrap(), None);
    assert_eq!(
        store.dead_letters(&env.id, 10).await.unwrap().len(),
        1,
        "letters stay"
    );
}
