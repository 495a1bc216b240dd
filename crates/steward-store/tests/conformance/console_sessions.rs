//! Operator console sessions: only the token's hash is stored, a session authenticates only
//! while it and its key are live, and sign-out ends it.

use super::*;
use steward_store::ConsoleSessionRecord;

fn session_for(key: &ApiKeyRecord, expires_at: i64) -> ConsoleSessionRecord {
    ConsoleSessionRecord {
        id: format!("ses_{}", unique("session")),
        token_hash: format!("sha256:{}", unique("session-token")),
        key_id: key.id.clone(),
        env_id: key.env_id.clone(),
        created_at: T0,
        expires_at: Millis(expires_at),
    }
}

async fn found(store: &Arc<dyn Store>, session: &ConsoleSessionRecord, now: i64) -> bool {
    let found = store
        .console_session(&session.token_hash, Millis(now))
        .await
        .expect("console_session");
    if let Some((s, key, env)) = &found {
        assert_eq!(s, session, "the session reads back as it was written");
        assert_eq!(key.id, session.key_id);
        assert_eq!(env.id, session.env_id);
    }
    found.is_some()
}

/// A session authenticates until it expires, until its key is revoked or expires, and until
/// it is ended; each of these ends only the sessions it concerns, and every start and end is
/// audited without the token hash.
pub async fn console_sessions_end_with_their_key_or_sign_out(store: Arc<dyn Store>) {
    let env = Env::new(&store, "console").await;
    let mut key = key_record(&env, "operator");
    key.expires_at = Some(Millis(50_000));
    let other = key_record(&env, "other-operator");
    for k in [&key, &other] {
        store
            .insert_key(k, &Actor::system(T0))
            .await
            .expect("insert_key");
    }
    let short = session_for(&key, 10_000);
    let long = session_for(&key, 100_000);
    let other_session = session_for(&other, 100_000);
    for s in [&short, &long, &other_session] {
        store
            .create_console_session(s, &Actor::key(&s.key_id, T0))
            .await
            .expect("create_console_session");
    }
    assert!(matches!(
        store
            .create_console_session(&short, &Actor::key(&key.id, T0))
            .await,
        Err(StoreError::Duplicate { .. })
    ));
    let mut orphan = session_for(&key, 100_000);
    orphan.key_id = KeyId::from_unique(&unique("absent-key"));
    assert!(matches!(
        store
            .create_console_session(&orphan, &Actor::system(T0))
            .await,
        Err(StoreError::NotFound { .. })
    ));

    // The session's own expiry.
    assert!(found(&store, &short, 9_999).await);
    assert!(!found(&store, &short, 10_000).await);
    // The key's expiry ends a session that would otherwise last longer.
    assert!(found(&store, &long, 49_999).await);
    assert!(!found(&store, &long, 50_000).await);
    assert!(
        store
            .console_session(&format!("sha256:{}", unique("unknown")), Millis(2_000))
            .await
            .expect("console_session")
            .is_none(),
        "an unknown token finds nothing"
    );

    // Revoking the other key ends its session at once; the first key's sessions are untouched.
    assert!(found(&store, &other_session, 2_000).await);
    assert!(store
        .revoke_key(&other.id, &Actor::system(Millis(3_000)))
        .await
        .expect("revoke_key"));
    assert!(!found(&store, &other_session, 3_000).await);
    assert!(found(&store, &long, 3_000).await);

    // Sign-out ends the session for good; a second sign-out finds nothing.
    let actor = Actor::key(&key.id, Millis(4_000));
    assert!(store
        .end_console_session(&long.token_hash, &actor)
        .await
        .expect("end_console_session"));
    assert!(!found(&store, &long, 4_000).await);
    assert!(!store
        .end_console_session(&long.token_hash, &actor)
        .await
        .expect("end again"));

    let events = all_audit_events(&store).await;
    let ours: Vec<_> = events
        .iter()
        .filter(|e| e.env_id.as_deref() == Some(env.id.as_str()))
        .filter(|e| e.kind.starts_with("console.session."))
        .collect();
    let kinds: Vec<(&str, &str)> = ours
        .iter()
        .map(|e| (e.kind.as_str(), e.subject.as_str()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("console.session.started", short.id.as_str()),
            ("console.session.started", long.id.as_str()),
            ("console.session.started", other_session.id.as_str()),
            ("console.session.ended", long.id.as_str()),
        ]
    );
    for event in ours {
        let text = serde_json::to_string(&(&event.before, &event.after)).expect("json");
        for s in [&short, &long, &other_session] {
            assert!(
                !text.contains(&s.token_hash),
                "audit event {} carries a session's token hash",
                event.id
            );
        }
    }
}
