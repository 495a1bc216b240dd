//! OAuth consent sessions: a session's `state` is spent once, never after it expires, and a
//! session settles once; every step is audited and walled by environment.

use super::*;
use steward_store::{ConnectionSession, SessionStatus};

fn session(env: &Env, id: &str, digest: &str, expires_at: i64) -> ConnectionSession {
    ConnectionSession {
        id: id.to_string(),
        env_id: env.id.clone(),
        integration_id: "fixture-oauth".into(),
        secret_name: "PERSON_A".into(),
        description: None,
        state_digest: digest.to_string(),
        verifier_sealed: "00:11".into(),
        redirect_uri: "http://127.0.0.1:1/api/v2/connections/callback".into(),
        status: SessionStatus::Pending,
        reason: None,
        created_by: env.key.as_str().to_string(),
        created_at: T0,
        expires_at: Millis(expires_at),
        updated_at: T0,
    }
}

pub async fn a_sessions_state_is_spent_once_and_never_after_expiry(store: Arc<dyn Store>) {
    let env = Env::new(&store, "oauth-sessions").await;
    let other = Env::new(&store, "oauth-sessions-other").await;
    let (id, digest) = (unique("cs"), unique("digest"));
    let created = store
        .create_session(&session(&env, &id, &digest, 10_000), &env.actor(T0.0))
        .await
        .expect("create_session");
    assert_eq!(created.status, SessionStatus::Pending);
    assert_eq!(created.state_digest, digest);
    assert!(
        store.session(&other.id, &id).await.expect("read").is_none(),
        "another environment does not see the session"
    );

    // Many callbacks with one state: exactly one claims it.
    let claims: Vec<_> = (0..8)
        .map(|_| {
            let (store, digest) = (store.clone(), digest.clone());
            tokio::spawn(async move { store.claim_session(&digest, Millis(2_000)).await })
        })
        .collect();
    let mut won = 0;
    for claim in claims {
        if let Some(claimed) = claim.await.expect("join").expect("claim_session") {
            assert_eq!(claimed.id, id);
            assert_eq!(claimed.status, SessionStatus::Exchanging);
            won += 1;
        }
    }
    assert_eq!(won, 1, "a state is spent exactly once");
    assert!(store
        .claim_session(&digest, Millis(2_500))
        .await
        .expect("replay")
        .is_none());

    let done = store
        .finish_session(
            &env.id,
            &id,
            SessionStatus::Completed,
            None,
            &env.actor(3_000),
        )
        .await
        .expect("finish_session");
    assert_eq!(done.status, SessionStatus::Completed);
    let again = store
        .finish_session(
            &env.id,
            &id,
            SessionStatus::Failed,
            Some("late"),
            &env.actor(3_100),
        )
        .await;
    assert!(
        matches!(again, Err(StoreError::NotFound { .. })),
        "{again:?}"
    );
    let read = store
        .session(&env.id, &id)
        .await
        .expect("read")
        .expect("found");
    assert_eq!(
        read.status,
        SessionStatus::Completed,
        "a settled session stays settled"
    );

    // An expired session's state is refused and the session stays pending.
    let (late_id, late_digest) = (unique("cs"), unique("digest"));
    store
        .create_session(
            &session(&env, &late_id, &late_digest, 5_000),
            &env.actor(T0.0),
        )
        .await
        .expect("create_session");
    assert!(store
        .claim_session(&late_digest, Millis(5_000))
        .await
        .expect("claim")
        .is_none());
    let read = store
        .session(&env.id, &late_id)
        .await
        .expect("read")
        .expect("found");
    assert_eq!(read.status, SessionStatus::Pending);

    // A digest is unique: a second session with it is refused.
    let duplicate = store
        .create_session(
            &session(&env, &unique("cs"), &digest, 10_000),
            &env.actor(T0.0),
        )
        .await;
    assert!(duplicate.is_err(), "a state digest names one session");

    let events = all_audit_events(&store).await;
    let kinds: Vec<&str> = events
        .iter()
        .filter(|e| e.subject == id)
        .map(|e| e.kind.as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "connection.session.created",
            "connection.session.claimed",
            "connection.session.settled"
        ]
    );
    assert!(events
        .iter()
        .filter(|e| e.subject == id)
        .all(|e| !format!("{:?}", e.after).contains(&digest)));
}
