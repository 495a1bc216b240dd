//! The environment's `unkeyedInvokes` setting: `accept` until changed, changed with its audit
//! event, read with the environment wherever a request reads it, and walled by environment.

use super::*;
use steward_core::UnkeyedInvokes;
use steward_store::UnkeyedChange;

pub async fn unkeyed_invokes_is_accept_until_set_and_is_audited(store: Arc<dyn Store>) {
    let env = Env::new(&store, "unkeyed").await;
    let other = Env::new(&store, "unkeyed-other").await;
    let read = |id: EnvironmentId| {
        let store = store.clone();
        async move {
            store
                .environment(&id)
                .await
                .expect("environment")
                .expect("exists")
                .unkeyed_invokes
        }
    };
    assert_eq!(read(env.id.clone()).await, UnkeyedInvokes::Accept);

    let set = store
        .set_unkeyed_invokes(
            UnkeyedChange {
                env: &env.id,
                setting: UnkeyedInvokes::Refuse,
            },
            &env.actor(T0.0),
        )
        .await
        .expect("set");
    assert_eq!(set.unkeyed_invokes, UnkeyedInvokes::Refuse);
    assert_eq!(read(env.id.clone()).await, UnkeyedInvokes::Refuse);
    assert_eq!(
        read(other.id.clone()).await,
        UnkeyedInvokes::Accept,
        "another environment keeps its own"
    );

    // An invoke reads it with its key.
    let key = key_record(&env, "agent");
    store
        .insert_key(&key, &Actor::system(T0))
        .await
        .expect("key");
    let context = store
        .invoke_context(&key.token_hash, T0, "no-such-action", None)
        .await
        .expect("invoke context")
        .expect("the key authenticates");
    assert_eq!(context.environment.unkeyed_invokes, UnkeyedInvokes::Refuse);

    let events = store
        .unsealed_audit_events(0, 100_000)
        .await
        .expect("audit");
    let updated: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "environment.updated" && e.subject == env.id.as_str())
        .collect();
    assert_eq!(updated.len(), 1, "{updated:?}");
    assert_eq!(updated[0].before, Some(json!({"unkeyedInvokes": "accept"})));
    assert_eq!(updated[0].after, Some(json!({"unkeyedInvokes": "refuse"})));
}
