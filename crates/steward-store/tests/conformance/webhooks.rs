//! Webhook subscriptions: walled by environment, leased to one deliverer at a time, and the
//! cursor moves only by a recorded outcome from the lease holder at the cursor it read.

use super::*;
use steward_store::{
    DeadLetter, DeliveryOutcome, Redelivery, RedeliveryTarget, SealedSecret, WebhookSubscription,
};

pub fn subscription(env: &Env, topic: &str) -> WebhookSubscription {
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
        lease_epoch: 0,
        attempts: 0,
        next_attempt_at: T0,
        last_error: None,
        created_at: T0,
        updated_at: T0,
        channel: None,
    }
}

/// The epoch of `s`'s lease as stored: the token of its latest claim.
pub async fn claim_epoch(store: &Arc<dyn Store>, s: &WebhookSubscription) -> i64 {
    store
        .subscription(&s.env_id, &s.id)
        .await
        .expect("subscription")
        .expect("subscription exists")
        .lease_epoch
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
    let epoch = claim_epoch(&store, &s).await;
    assert_eq!(mine[0].lease_epoch, epoch, "the claim answers its token");
    assert!(matches!(
        store
            .record_delivery(&s.id, "replica-b", epoch, 10, &retry, now, None)
            .await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(!store
        .record_delivery(&s.id, "replica-a", epoch, 9, &retry, now, None)
        .await
        .unwrap());
    assert!(store
        .record_delivery(&s.id, "replica-a", epoch, 10, &retry, now, None)
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
        redelivery: Redelivery::Dead,
        redelivered_at: None,
    };
    let dead = DeliveryOutcome::DeadLetter {
        letter: letter.clone(),
    };
    assert!(store
        .record_delivery(
            &s.id,
            "replica-b",
            claim_epoch(&store, &s).await,
            10,
            &dead,
            due,
            None
        )
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
        .record_delivery(
            &s.id,
            "replica-a",
            claim_epoch(&store, &s).await,
            11,
            &advance,
            due,
            None
        )
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

fn letter(s: &WebhookSubscription, seq: i64, at: Millis) -> DeadLetter {
    DeadLetter {
        id: format!("dlq_{}", unique("letter")),
        subscription_id: s.id.clone(),
        env_id: s.env_id.clone(),
        event_seq: seq,
        event_type: "effect.settled".into(),
        body: format!("{{\"id\":\"evt_{seq}\"}}"),
        attempts: 3,
        last_error: "HTTP 500".into(),
        created_at: at,
        redelivery: Redelivery::Dead,
        redelivered_at: None,
    }
}

/// A worker keeps its lease while it delivers (no one, itself included, claims the
/// subscription twice); a dead owner's lease is released at once; a dead letter an operator
/// asks for is redelivered once, by the lease holder, and audited; the backlog counts the
/// sealed events after the cursor.
pub async fn webhook_leases_are_kept_released_when_dead_and_letters_redelivered_once(
    store: Arc<dyn Store>,
) {
    let env = Env::new(&store, "hooks-redeliver").await;
    let other = Env::new(&store, "hooks-redeliver-other").await;
    let actor = Actor::system(T0);
    let mut s = subscription(&env, "effects");
    s.cursor = 0;
    store.create_subscription(&s, &actor).await.expect("create");
    let alive = ReplicaId::from_unique(&unique("alive"));
    let dead = ReplicaId::from_unique(&unique("dead"));
    let now = Millis(T0.0 + 5);
    store.heartbeat(&alive, now).await.expect("heartbeat");
    let ours = |claimed: Vec<WebhookSubscription>| claimed.iter().any(|c| c.id == s.id);

    // Kept: recording with `keep_until` holds the lease against every claimer, the holder too.
    let until = Millis(now.0 + 10_000);
    assert!(ours(
        store
            .claim_subscriptions(alive.as_str(), now, until, 1_000)
            .await
            .unwrap()
    ));
    let advance = DeliveryOutcome::Advance { cursor: 1 };
    assert!(store
        .record_delivery(
            &s.id,
            alive.as_str(),
            claim_epoch(&store, &s).await,
            0,
            &advance,
            now,
            Some(until)
        )
        .await
        .unwrap());
    for claimer in [&alive, &dead] {
        let claimed = store
            .claim_subscriptions(claimer.as_str(), now, until, 1_000)
            .await
            .unwrap();
        assert!(!ours(claimed), "{claimer} claimed a held lease");
    }
    // A sweep by a live replica leaves a live owner's lease alone.
    let sweep = Sweep::lease(&alive, now, 5_000);
    store.release_dead_webhook_leases(&sweep).await.unwrap();
    assert!(!ours(
        store
            .claim_subscriptions(dead.as_str(), now, until, 1_000)
            .await
            .unwrap()
    ));
    // Dead: the owner never heartbeated. Its lease is released at once, not after `until`.
    let mut dead_held = subscription(&env, "effects");
    dead_held.cursor = 0;
    store.create_subscription(&dead_held, &actor).await.unwrap();
    let claimed = store
        .claim_subscriptions(dead.as_str(), now, until, 1_000)
        .await
        .unwrap();
    assert!(claimed.iter().any(|c| c.id == dead_held.id));
    assert!(store.release_dead_webhook_leases(&sweep).await.unwrap() >= 1);
    let retaken = store
        .claim_subscriptions(alive.as_str(), now, until, 1_000)
        .await
        .unwrap();
    assert!(retaken.iter().any(|c| c.id == dead_held.id), "released");
    assert!(!ours(retaken), "the live holder's lease stays");
    store
        .delete_subscription(&env.id, &dead_held.id, &actor)
        .await
        .unwrap();

    // A dead letter, then a retry far off: the subscription is not due ...
    let d = letter(&s, 2, now);
    let dead_letter = DeliveryOutcome::DeadLetter { letter: d.clone() };
    assert!(store
        .record_delivery(
            &s.id,
            alive.as_str(),
            claim_epoch(&store, &s).await,
            1,
            &dead_letter,
            now,
            Some(until)
        )
        .await
        .unwrap());
    let later = Millis(now.0 + 3_600_000);
    let retry = DeliveryOutcome::Retry {
        attempts: 1,
        next_attempt_at: later,
        error: "HTTP 500".into(),
    };
    assert!(store
        .record_delivery(
            &s.id,
            alive.as_str(),
            claim_epoch(&store, &s).await,
            2,
            &retry,
            now,
            None
        )
        .await
        .unwrap());
    assert!(!ours(
        store
            .claim_subscriptions(alive.as_str(), now, until, 1_000)
            .await
            .unwrap()
    ));
    assert_eq!(
        store.dead_letter(&env.id, &d.id).await.unwrap().as_ref(),
        Some(&d)
    );
    assert_eq!(store.dead_letter(&other.id, &d.id).await.unwrap(), None);
    // ... until an operator asks for the letter: requested once, audited, due at once.
    let nothing = store
        .request_redelivery(&other.id, RedeliveryTarget::Letter(&d.id), &actor, now)
        .await
        .unwrap();
    assert!(nothing.is_empty(), "walled by environment");
    let marked = store
        .request_redelivery(&env.id, RedeliveryTarget::Letter(&d.id), &actor, now)
        .await
        .unwrap();
    assert_eq!(marked.len(), 1);
    assert_eq!(marked[0].redelivery, Redelivery::Requested);
    let again = store
        .request_redelivery(&env.id, RedeliveryTarget::Subscription(&s.id), &actor, now)
        .await
        .unwrap();
    assert!(again.is_empty(), "already requested");
    assert!(ours(
        store
            .claim_subscriptions(alive.as_str(), now, until, 1_000)
            .await
            .unwrap()
    ));
    let waiting = store.requested_redeliveries(&s.id, 10).await.unwrap();
    assert_eq!(waiting.iter().map(|l| &l.id).collect::<Vec<_>>(), [&d.id]);
    // Only the holder records the answer, once.
    assert!(!store
        .record_redelivery(&d.id, dead.as_str(), Ok(()), now)
        .await
        .unwrap());
    assert!(store
        .record_redelivery(&d.id, alive.as_str(), Ok(()), now)
        .await
        .unwrap());
    assert!(!store
        .record_redelivery(&d.id, alive.as_str(), Ok(()), now)
        .await
        .unwrap());
    let read = store.dead_letter(&env.id, &d.id).await.unwrap().unwrap();
    assert_eq!(
        (read.redelivery, read.redelivered_at),
        (Redelivery::Redelivered, Some(now))
    );
    assert!(store
        .requested_redeliveries(&s.id, 10)
        .await
        .unwrap()
        .is_empty());
    // A failed redelivery leaves the letter dead again, one attempt more, for another request.
    let marked = store
        .request_redelivery(&env.id, RedeliveryTarget::Subscription(&s.id), &actor, now)
        .await
        .unwrap();
    assert_eq!(marked.len(), 1);
    assert!(store
        .record_redelivery(&d.id, alive.as_str(), Err("HTTP 502".into()), now)
        .await
        .unwrap());
    let read = store.dead_letter(&env.id, &d.id).await.unwrap().unwrap();
    assert_eq!(
        (read.redelivery, read.attempts, read.last_error.as_str()),
        (Redelivery::Dead, 4, "HTTP 502")
    );
    let kinds: Vec<String> = all_audit_events(&store)
        .await
        .into_iter()
        .filter(|e| e.subject == s.id)
        .map(|e| e.kind)
        .collect();
    for kind in [
        "webhook.redelivery.requested",
        "webhook.redelivered",
        "webhook.redelivery.failed",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "{kind} in {kinds:?}");
    }

    // The backlog: sealed events of the environment after the cursor.
    seal_all(&store).await;
    let backlog = store.webhook_backlog(Some(&env.id)).await.unwrap();
    assert_eq!(backlog.len(), 1);
    assert_eq!(backlog[0].subscription_id, s.id);
    assert!(backlog[0].events >= 3, "{backlog:?}");
    assert!(store
        .webhook_backlog(Some(&other.id))
        .await
        .unwrap()
        .is_empty());
}

/// An approval channel is a subscription with its kind and settings in `channel`: stored and
/// read back (alone, listed and claimed) as written, and a signed webhook's stays `None`.
pub async fn an_approval_channel_keeps_its_kind_through_reads_and_claims(store: Arc<dyn Store>) {
    let env = Env::new(&store, "channels").await;
    let actor = Actor::system(T0);
    let mut channel = subscription(&env, "approvals");
    channel.channel = Some(json!({"kind": "slack"}));
    let hook = subscription(&env, "approvals");
    store
        .create_subscription(&channel, &actor)
        .await
        .expect("create channel");
    store
        .create_subscription(&hook, &actor)
        .await
        .expect("create hook");
    assert_eq!(
        store.subscription(&env.id, &channel.id).await.unwrap(),
        Some(channel.clone())
    );
    let listed = store
        .subscriptions(&env.id, Some("approvals"))
        .await
        .unwrap();
    let mut kinds: Vec<_> = listed
        .iter()
        .map(|s| (s.id.clone(), s.channel.clone()))
        .collect();
    kinds.sort_by(|a, b| a.0.cmp(&b.0));
    let mut expected = vec![
        (channel.id.clone(), Some(json!({"kind": "slack"}))),
        (hook.id.clone(), None),
    ];
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(kinds, expected);
    let claimed = store
        .claim_subscriptions("replica-a", T0, T0.plus_ms(30_000), 10)
        .await
        .unwrap();
    let mine = claimed
        .iter()
        .find(|s| s.id == channel.id)
        .expect("claimed");
    assert_eq!(mine.channel, Some(json!({"kind": "slack"})));
}
