//! API keys over their life (expiry, revocation, rotation, last use), `Idempotency-Key` scoped
//! to the key that sent it, and the master key's check value.

use super::*;
use steward_store::KeyRotation;

async fn insert(store: &Arc<dyn Store>, key: &ApiKeyRecord) {
    store
        .insert_key(key, &Actor::system(T0))
        .await
        .expect("insert_key");
}

/// True when both authenticating reads (`caller` and `invoke_context`) accept the key at `now`.
async fn authenticates(store: &Arc<dyn Store>, key: &ApiKeyRecord, now: i64) -> bool {
    let caller = store
        .caller(&key.token_hash, Millis(now))
        .await
        .expect("caller");
    let context = store
        .invoke_context(&key.token_hash, Millis(now), "no-such-action", None)
        .await
        .expect("invoke_context");
    assert_eq!(
        caller.is_some(),
        context.is_some(),
        "caller and invoke_context disagree about {} at {now}",
        key.id
    );
    if let Some((found, _)) = caller {
        assert_eq!(found.id, key.id);
    }
    context.is_some()
}

/// A revoked key and an expired key are found by neither `caller` nor `invoke_context`.
pub async fn revoked_and_expired_keys_do_not_authenticate(store: Arc<dyn Store>) {
    let env = Env::new(&store, "key-life").await;
    let revoked = key_record(&env, "revoked");
    let mut expiring = key_record(&env, "expiring");
    expiring.expires_at = Some(Millis(T0.0 + 10_000));
    let other = key_record(&env, "other");
    for key in [&revoked, &expiring, &other] {
        insert(&store, key).await;
    }
    assert_eq!(
        store.key(&expiring.id).await.expect("key"),
        Some(expiring.clone()),
        "the expiry is stored"
    );

    assert!(authenticates(&store, &revoked, 2_000).await);
    assert!(store
        .revoke_key(&revoked.id, &Actor::system(Millis(3_000)))
        .await
        .expect("revoke_key"));
    assert!(!authenticates(&store, &revoked, 3_000).await);
    assert!(!authenticates(&store, &revoked, 4_000).await);
    let stored = store.key(&revoked.id).await.expect("key").expect("kept");
    assert_eq!(stored.revoked_at, Some(Millis(3_000)));
    assert_eq!(
        store
            .key_by_hash(&revoked.token_hash)
            .await
            .expect("by hash"),
        Some(stored),
        "the revoked key stays on record"
    );
    assert!(
        !store
            .revoke_key(&revoked.id, &Actor::system(Millis(5_000)))
            .await
            .expect("revoke again"),
        "a second revocation changes nothing"
    );
    assert!(!store
        .revoke_key(
            &KeyId::from_unique(&unique("absent")),
            &Actor::system(Millis(5_000))
        )
        .await
        .expect("revoke unknown"));

    assert!(authenticates(&store, &expiring, T0.0 + 9_999).await);
    assert!(!authenticates(&store, &expiring, T0.0 + 10_000).await);
    assert!(authenticates(&store, &other, T0.0 + 10_000).await);

    let events = all_audit_events(&store).await;
    let revocations: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "key.revoked" && e.subject == revoked.id.as_str())
        .collect();
    assert_eq!(revocations.len(), 1, "one audit event per revocation");
    assert!(!revocations[0]
        .after
        .as_ref()
        .map(Value::to_string)
        .unwrap_or_default()
        .contains(&revoked.token_hash));
}

/// A rotation: the new key has the old one's environment, name and scopes; the old one works
/// until the end of the overlap and never longer than it would have.
pub async fn a_rotated_key_works_until_the_overlap_ends(store: Arc<dyn Store>) {
    let env = Env::new(&store, "key-rotate").await;
    let old = key_record(&env, "rotating");
    insert(&store, &old).await;
    let rotation = KeyRotation {
        old: old.id.clone(),
        new_id: KeyId::from_unique(&unique("key")),
        new_token_hash: format!("sha256:{}", unique("token")),
        new_expires_at: None,
        old_expires_at: Millis(20_000),
    };
    let new = store
        .rotate_key(&rotation, &Actor::system(Millis(10_000)))
        .await
        .expect("rotate_key");
    assert_eq!(new.id, rotation.new_id);
    assert_eq!(new.token_hash, rotation.new_token_hash);
    assert_eq!(
        (&new.env_id, &new.name, &new.scopes),
        (&old.env_id, &old.name, &old.scopes)
    );
    assert_eq!((new.created_at, new.expires_at), (Millis(10_000), None));
    assert!(authenticates(&store, &old, 19_999).await);
    assert!(authenticates(&store, &new, 19_999).await);
    assert!(!authenticates(&store, &old, 20_000).await);
    assert!(authenticates(&store, &new, 20_000).await);
    assert!(all_audit_events(&store)
        .await
        .iter()
        .any(|e| e.kind == "key.rotated" && e.subject == old.id.as_str()));

    // A rotation never lengthens the old key's life.
    let mut short = key_record(&env, "short");
    short.expires_at = Some(Millis(12_000));
    insert(&store, &short).await;
    let rotation = KeyRotation {
        old: short.id.clone(),
        new_id: KeyId::from_unique(&unique("key")),
        new_token_hash: format!("sha256:{}", unique("token")),
        new_expires_at: Some(Millis(50_000)),
        old_expires_at: Millis(30_000),
    };
    let renewed = store
        .rotate_key(&rotation, &Actor::system(Millis(11_000)))
        .await
        .expect("rotate_key");
    assert_eq!(renewed.expires_at, Some(Millis(50_000)));
    assert_eq!(
        store
            .key(&short.id)
            .await
            .expect("key")
            .expect("kept")
            .expires_at,
        Some(Millis(12_000))
    );

    // Only a usable key can be rotated, and a refused rotation inserts nothing.
    store
        .revoke_key(&renewed.id, &Actor::system(Millis(13_000)))
        .await
        .expect("revoke");
    for (old, at) in [(&renewed.id, 14_000), (&short.id, 14_000)] {
        let refused = KeyRotation {
            old: old.clone(),
            new_id: KeyId::from_unique(&unique("key")),
            new_token_hash: format!("sha256:{}", unique("token")),
            new_expires_at: None,
            old_expires_at: Millis(at),
        };
        assert!(matches!(
            store.rotate_key(&refused, &Actor::system(Millis(at))).await,
            Err(StoreError::NotFound { .. })
        ));
        assert!(store.key(&refused.new_id).await.expect("key").is_none());
    }
}

/// `mark_key_used` only moves the last use forward.
pub async fn a_keys_last_use_only_moves_forward(store: Arc<dyn Store>) {
    let env = Env::new(&store, "key-used").await;
    let key = key_record(&env, "used");
    insert(&store, &key).await;
    let last_used = |store: Arc<dyn Store>, id: KeyId| async move {
        store
            .key(&id)
            .await
            .expect("key")
            .expect("exists")
            .last_used_at
    };
    assert_eq!(last_used(store.clone(), key.id.clone()).await, None);
    store
        .mark_key_used(&key.id, Millis(5_000))
        .await
        .expect("mark");
    assert_eq!(
        last_used(store.clone(), key.id.clone()).await,
        Some(Millis(5_000))
    );
    store
        .mark_key_used(&key.id, Millis(4_000))
        .await
        .expect("mark");
    assert_eq!(
        last_used(store.clone(), key.id.clone()).await,
        Some(Millis(5_000))
    );
    let (found, _) = store
        .caller(&key.token_hash, Millis(6_000))
        .await
        .expect("caller")
        .expect("found");
    assert_eq!(found.last_used_at, Some(Millis(5_000)));
}

/// Another API key's request with the same `Idempotency-Key` is a separate request: it neither
/// replays nor is refused by the first key's record, and cannot pre-claim it. The operation key
/// still spans keys.
pub async fn idempotency_keys_are_scoped_to_the_sending_key(store: Arc<dyn Store>) {
    let env = Env::new(&store, "idem-scope").await;
    let (a, b) = (env.key.clone(), KeyId::from_unique(&unique("key")));
    let shared = idem("shared-x");

    // Generic requests.
    let begin = |sender: KeyId, fp: &'static str| {
        let (store, env_id, key) = (store.clone(), env.id.clone(), shared.clone());
        async move {
            store
                .idempotency_begin(&env_id, &sender, &key, fp, T0, &writer())
                .await
                .expect("idempotency_begin")
        }
    };
    assert_eq!(begin(b.clone(), "fp-b").await, IdempotencyBegin::Begun);
    assert_eq!(
        begin(a.clone(), "fp-a").await,
        IdempotencyBegin::Begun,
        "b's in-flight request does not pre-claim a's key"
    );
    let body = json!({"success": true, "data": {"by": "a"}});
    store
        .idempotency_finish(&env.id, &a, &shared, 200, &body, T0)
        .await
        .expect("finish");
    assert_eq!(
        begin(b.clone(), "fp-a").await,
        IdempotencyBegin::Mismatch,
        "b does not get a's answer; it sees only its own request"
    );
    assert_eq!(begin(b.clone(), "fp-b").await, IdempotencyBegin::InProgress);
    assert_eq!(
        begin(a.clone(), "fp-a").await,
        IdempotencyBegin::Replay { status: 200, body }
    );
    store
        .idempotency_abandon(&env.id, &b, &shared)
        .await
        .expect("abandon");
    assert!(matches!(
        begin(a.clone(), "fp-a").await,
        IdempotencyBegin::Replay { .. }
    ));

    // Invokes: a different request under the same header value from another key is a new
    // invocation, not a 422 and not a's invocation.
    let action = env.create_action(refund_definition("refund")).await;
    let mut first = env.submission(&action, json!({"amount": 100}));
    first.idempotency_key = Some(idem("invoke-x"));
    first.operation_key = Some(op("op-scoped"));
    first.actor = a.clone();
    let original = expect_created(store.submit(&first).await.expect("submit"));
    let mut other = env.submission(&action, json!({"amount": 999}));
    other.idempotency_key = Some(idem("invoke-x"));
    other.request_fingerprint = "another request".into();
    other.actor = b.clone();
    let separate = expect_created(store.submit(&other).await.expect("submit"));
    assert_ne!(separate.id, original.id);

    // The same operation key from another key (with its own `Idempotency-Key` value, even the
    // same one) is the one effect.
    let mut again = env.submission(&action, json!({"amount": 100}));
    again.idempotency_key = Some(idem("invoke-x-again"));
    again.operation_key = Some(op("op-scoped"));
    again.actor = b.clone();
    match store.submit(&again).await.expect("submit") {
        SubmitOutcome::Existing(found) => assert_eq!(found.effect_id, original.effect_id),
        other => panic!("expected the existing invocation, got {other:?}"),
    }
    let effects = store
        .list_effects(&env.id, &effects_of(&action))
        .await
        .expect("list_effects");
    assert_eq!(effects.items.len(), 2, "a's effect and b's separate one");

    // `invoke_context` reads only the caller's own record.
    let key_b = ApiKeyRecord {
        id: b.clone(),
        ..key_record(&env, "b")
    };
    insert(&store, &key_b).await;
    let context = store
        .invoke_context(&key_b.token_hash, T0, &action.name, Some(&idem("invoke-x")))
        .await
        .expect("invoke_context")
        .expect("b authenticates");
    let earlier = context.earlier.expect("b's own request");
    assert_eq!(
        earlier.invocation.map(|i| i.id),
        Some(separate.id),
        "b's record, not a's"
    );
}

/// The master key's check value is recorded once: the first value wins.
pub async fn the_master_key_check_is_recorded_once(store: Arc<dyn Store>) {
    let first = store
        .init_master_key_check("v1:first", &Actor::system(T0))
        .await
        .expect("init");
    let second = store
        .init_master_key_check("v1:second", &Actor::system(T0))
        .await
        .expect("init again");
    assert_eq!(first, second, "the value recorded first is kept");
    assert_eq!(
        store.master_key_check().await.expect("read"),
        Some(first.clone())
    );
    let env = Env::new(&store, "key-check").await;
    store
        .put_secret(
            &secret_record(&env, "ANY_SECRET", b"sealed"),
            None,
            &env.actor(T0.0),
        )
        .await
        .expect("put_secret");
    assert!(store.any_secret().await.expect("any_secret").is_some());
}
