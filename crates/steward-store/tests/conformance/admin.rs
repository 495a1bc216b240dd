//! Generic request idempotency, actions, secrets, keys, and environments as walls.

use super::*;
use steward_core::{EvidenceKind, EvidenceSource};

/// `Idempotency-Key` on the other write endpoints.
pub async fn generic_idempotency(store: Arc<dyn Store>) {
    let env = Env::new(&store, "generic").await;
    let key = idem("create-secret-1");
    let begin = |fp: &'static str| {
        let (store, env_id, sender, key) =
            (store.clone(), env.id.clone(), env.key.clone(), key.clone());
        async move {
            store
                .idempotency_begin(&env_id, &sender, &key, fp, T0, &writer())
                .await
                .expect("idempotency_begin")
        }
    };
    assert_eq!(begin("fp-1").await, IdempotencyBegin::Begun);
    assert_eq!(begin("fp-1").await, IdempotencyBegin::InProgress);
    assert_eq!(begin("fp-2").await, IdempotencyBegin::Mismatch);

    let body = json!({"success": true, "data": {"name": "STRIPE_TEST_KEY", "version": 1}});
    store
        .idempotency_finish(&env.id, &env.key, &key, 201, &body, Millis(2_000))
        .await
        .expect("finish");
    assert_eq!(
        begin("fp-1").await,
        IdempotencyBegin::Replay {
            status: 201,
            body: body.clone()
        }
    );
    assert_eq!(begin("fp-2").await, IdempotencyBegin::Mismatch);
    // Abandon only forgets a request still in progress, never a recorded answer.
    store
        .idempotency_abandon(&env.id, &env.key, &key)
        .await
        .expect("abandon");
    assert_eq!(
        begin("fp-1").await,
        IdempotencyBegin::Replay {
            status: 201,
            body: body.clone()
        }
    );

    let failed = idem("create-secret-2");
    assert_eq!(
        store
            .idempotency_begin(&env.id, &env.key, &failed, "fp-x", T0, &writer())
            .await
            .expect("begin"),
        IdempotencyBegin::Begun
    );
    store
        .idempotency_abandon(&env.id, &env.key, &failed)
        .await
        .expect("abandon");
    assert_eq!(
        store
            .idempotency_begin(&env.id, &env.key, &failed, "fp-y", T0, &writer())
            .await
            .expect("begin"),
        IdempotencyBegin::Begun
    );

    // Scoped per environment.
    let other = Env::new(&store, "generic-other").await;
    assert_eq!(
        store
            .idempotency_begin(&other.id, &other.key, &key, "fp-2", T0, &writer())
            .await
            .expect("begin"),
        IdempotencyBegin::Begun
    );
    assert_eq!(
        begin("fp-1").await,
        IdempotencyBegin::Replay { status: 201, body }
    );

    // Concurrent first sights: one goes ahead.
    let race = idem("race");
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (store, env_id, sender, race) =
            (store.clone(), env.id.clone(), env.key.clone(), race.clone());
        tasks.push(tokio::spawn(async move {
            store
                .idempotency_begin(&env_id, &sender, &race, "fp-r", T0, &writer())
                .await
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("task").expect("idempotency_begin"));
    }
    let begun = outcomes
        .iter()
        .filter(|o| **o == IdempotencyBegin::Begun)
        .count();
    let in_progress = outcomes
        .iter()
        .filter(|o| **o == IdempotencyBegin::InProgress)
        .count();
    assert_eq!((begun, in_progress), (1, 31), "{outcomes:?}");
    store
        .idempotency_abandon(&env.id, &env.key, &failed)
        .await
        .expect("abandon");
    store
        .idempotency_abandon(&env.id, &env.key, &race)
        .await
        .expect("abandon");
}

/// Actions: unique live names, appended versions, optimistic concurrency, soft delete.
pub async fn actions_are_versioned(store: Arc<dyn Store>) {
    let env = Env::new(&store, "actions").await;
    let v1 = refund_definition("refund");
    let action = env.create_action(v1.clone()).await;
    assert_eq!(action.version, 1);
    assert_eq!(action.definition, v1);
    assert_eq!(action.env_id, env.id);
    assert_eq!(
        store.action(&env.id, "refund").await.expect("action"),
        Some(action.clone()),
        "found by name"
    );

    let clash = action_record(&env, v1.clone());
    assert!(matches!(
        store.create_action(&clash, &env.actor(1_500)).await,
        Err(StoreError::Duplicate { .. })
    ));
    assert!(store
        .action(&env.id, clash.id.as_str())
        .await
        .expect("action")
        .is_none());

    let mut v2 = v1.clone();
    v2.description = Some("refund a charge".into());
    let mut v3 = v2.clone();
    v3.requires_approval = true;
    let updated = store
        .update_action(&env.id, &action.id, 1, &v2, &env.actor(2_000))
        .await
        .expect("update to 2");
    assert_eq!(updated.version, 2);
    assert_eq!(updated.definition, v2);
    let updated = store
        .update_action(&env.id, &action.id, 2, &v3, &env.actor(3_000))
        .await
        .expect("update to 3");
    assert_eq!(updated.version, 3);
    assert_eq!(updated.updated_at, Millis(3_000));
    match store
        .update_action(&env.id, &action.id, 1, &v2, &env.actor(3_500))
        .await
    {
        Err(StoreError::VersionConflict { expected, found }) => {
            assert_eq!((expected, found), (1, 3))
        }
        other => panic!("a stale edit must be a VersionConflict, got {other:?}"),
    }
    let current = store
        .action(&env.id, action.id.as_str())
        .await
        .expect("action")
        .expect("live");
    assert_eq!(current.version, 3);
    assert_eq!(current.definition, v3);
    // Renaming onto another live action's name is a Duplicate and changes nothing.
    let neighbour = env.create_action(template_definition("neighbour")).await;
    let mut renamed = v3.clone();
    renamed.name = "neighbour".into();
    assert!(matches!(
        store
            .update_action(&env.id, &action.id, 3, &renamed, &env.actor(3_600))
            .await,
        Err(StoreError::Duplicate { .. })
    ));
    assert_eq!(
        store
            .action(&env.id, action.id.as_str())
            .await
            .expect("action"),
        Some(current.clone())
    );
    assert_eq!(
        store
            .action(&env.id, "neighbour")
            .await
            .expect("action")
            .map(|a| a.id),
        Some(neighbour.id)
    );

    let versions = store
        .action_versions(&env.id, &action.id)
        .await
        .expect("versions");
    let numbers: Vec<u32> = versions.iter().map(|v| v.version).collect();
    assert_eq!(numbers, vec![1, 2, 3]);
    let definitions: Vec<&ActionDefinition> = versions.iter().map(|v| &v.definition).collect();
    assert_eq!(definitions, vec![&v1, &v2, &v3]);
    assert!(versions.iter().all(|v| v.action_id == action.id));
    assert_eq!(versions[1].created_at, Millis(2_000));
    assert_eq!(versions[1].created_by.as_ref(), Some(&env.key));
    let listed = store.list_actions(&env.id).await.expect("list");
    assert_eq!(listed.iter().filter(|a| a.id == action.id).count(), 1);

    // Another environment neither sees nor touches it.
    let other = Env::new(&store, "actions-other").await;
    assert!(store
        .action(&other.id, action.id.as_str())
        .await
        .expect("action")
        .is_none());
    assert!(store
        .action(&other.id, "refund")
        .await
        .expect("action")
        .is_none());
    assert!(store
        .list_actions(&other.id)
        .await
        .expect("list")
        .is_empty());
    assert!(store
        .action_versions(&other.id, &action.id)
        .await
        .expect("versions")
        .is_empty());
    assert!(store
        .update_action(&other.id, &action.id, 3, &v1, &other.actor(4_000))
        .await
        .is_err());
    assert!(!store
        .delete_action(&other.id, &action.id, &other.actor(4_000))
        .await
        .expect("delete"));
    assert_eq!(
        store
            .action(&env.id, action.id.as_str())
            .await
            .expect("action")
            .expect("live")
            .version,
        3
    );
    // ... and may use the same name for its own action.
    other.create_action(refund_definition("refund")).await;

    // Delete hides the action but keeps its history; the name is free again.
    assert!(store
        .delete_action(&env.id, &action.id, &env.actor(5_000))
        .await
        .expect("delete"));
    assert!(!store
        .delete_action(&env.id, &action.id, &env.actor(5_001))
        .await
        .expect("delete again"));
    assert!(store
        .action(&env.id, action.id.as_str())
        .await
        .expect("action")
        .is_none());
    assert!(store
        .action(&env.id, "refund")
        .await
        .expect("action")
        .is_none());
    assert!(store
        .list_actions(&env.id)
        .await
        .expect("list")
        .iter()
        .all(|a| a.id != action.id));
    assert_eq!(
        store
            .action_versions(&env.id, &action.id)
            .await
            .expect("versions")
            .len(),
        3
    );
    assert!(
        store
            .update_action(&env.id, &action.id, 3, &v1, &env.actor(5_500))
            .await
            .is_err(),
        "a deleted action takes no edits"
    );
    let reborn = env.create_action(refund_definition("refund")).await;
    assert_ne!(reborn.id, action.id);
    assert_eq!(
        store
            .action(&env.id, "refund")
            .await
            .expect("action")
            .map(|a| a.id),
        Some(reborn.id.clone())
    );
    assert_eq!(
        store
            .action_versions(&env.id, &reborn.id)
            .await
            .expect("versions")
            .len(),
        1
    );

    // Concurrent creations of one name: exactly one wins.
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let store = store.clone();
        let record = action_record(&env, refund_definition("raced"));
        let actor = env.actor(6_000);
        tasks.push(tokio::spawn(async move {
            store.create_action(&record, &actor).await
        }));
    }
    let (mut ok, mut duplicate) = (0, 0);
    for task in tasks {
        match task.await.expect("task") {
            Ok(()) => ok += 1,
            Err(StoreError::Duplicate { .. }) => duplicate += 1,
            Err(other) => panic!("a lost name race must be Duplicate, got {other:?}"),
        }
    }
    assert_eq!((ok, duplicate), (1, 15));
    assert_chain_intact(&store).await;
    let names: Vec<String> = store
        .list_actions(&env.id)
        .await
        .expect("list")
        .into_iter()
        .map(|a| a.name)
        .collect();
    assert_eq!(names.iter().filter(|n| *n == "raced").count(), 1);
}

/// Secrets: created at version 1, rotated by compare-and-set on the version, isolated.
pub async fn secrets_are_versioned_and_isolated(store: Arc<dyn Store>) {
    let env = Env::new(&store, "secrets").await;
    let sealed = secret_record(&env, "STRIPE_TEST_KEY", b"sealed-one");
    let stored = store
        .put_secret(&sealed, None, &env.actor(1_000))
        .await
        .expect("create");
    assert_eq!(stored.version, 1);
    assert_eq!(stored.ciphertext, b"sealed-one".to_vec());
    assert_eq!(stored.nonce, sealed.nonce);
    assert_eq!(stored.allowed_hosts, sealed.allowed_hosts);
    assert_eq!(stored.allowed_placements, sealed.allowed_placements);
    assert_eq!(stored.description, sealed.description);
    assert_eq!(
        store
            .secret(&env.id, "STRIPE_TEST_KEY")
            .await
            .expect("secret"),
        Some(stored.clone())
    );

    assert!(
        matches!(
            store.put_secret(&sealed, None, &env.actor(1_500)).await,
            Err(StoreError::VersionConflict { .. })
        ),
        "creating over an existing secret is a conflict, not an overwrite"
    );
    let rotated = secret_record(&env, "STRIPE_TEST_KEY", b"sealed-two");
    let two = store
        .put_secret(&rotated, Some(1), &env.actor(2_000))
        .await
        .expect("rotate");
    assert_eq!(two.version, 2);
    assert_eq!(two.ciphertext, b"sealed-two".to_vec());
    assert_eq!(
        two.created_at, stored.created_at,
        "rotation keeps the creation time"
    );
    assert_eq!(two.updated_at, Millis(2_000));
    match store.put_secret(&sealed, Some(1), &env.actor(2_500)).await {
        Err(StoreError::VersionConflict { expected, found }) => {
            assert_eq!((expected, found), (1, 2))
        }
        other => panic!("a stale rotation must be a VersionConflict, got {other:?}"),
    }
    assert_eq!(
        store
            .secret(&env.id, "STRIPE_TEST_KEY")
            .await
            .expect("secret"),
        Some(two.clone()),
        "the stale rotation changed nothing"
    );

    store
        .put_secret(
            &secret_record(&env, "GITHUB_TOKEN", b"sealed-gh"),
            None,
            &env.actor(3_000),
        )
        .await
        .expect("create");
    let mut names: Vec<String> = store
        .list_secrets(&env.id)
        .await
        .expect("list")
        .into_iter()
        .map(|s| s.name)
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec!["GITHUB_TOKEN".to_string(), "STRIPE_TEST_KEY".to_string()]
    );

    // Another environment has its own vault.
    let other = Env::new(&store, "secrets-other").await;
    assert!(store
        .secret(&other.id, "STRIPE_TEST_KEY")
        .await
        .expect("secret")
        .is_none());
    assert!(store
        .list_secrets(&other.id)
        .await
        .expect("list")
        .is_empty());
    assert!(!store
        .delete_secret(&other.id, "STRIPE_TEST_KEY", &other.actor(3_500))
        .await
        .expect("delete"));
    let theirs = store
        .put_secret(
            &secret_record(&other, "STRIPE_TEST_KEY", b"sealed-theirs"),
            None,
            &other.actor(3_500),
        )
        .await
        .expect("create");
    assert_eq!(theirs.version, 1);
    assert_eq!(
        store
            .secret(&env.id, "STRIPE_TEST_KEY")
            .await
            .expect("secret"),
        Some(two)
    );

    assert!(store
        .delete_secret(&env.id, "STRIPE_TEST_KEY", &env.actor(4_000))
        .await
        .expect("delete"));
    assert!(!store
        .delete_secret(&env.id, "STRIPE_TEST_KEY", &env.actor(4_001))
        .await
        .expect("delete again"));
    assert!(store
        .secret(&env.id, "STRIPE_TEST_KEY")
        .await
        .expect("secret")
        .is_none());
    let names: Vec<String> = store
        .list_secrets(&env.id)
        .await
        .expect("list")
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, vec!["GITHUB_TOKEN".to_string()]);
    assert!(
        matches!(
            store.put_secret(&sealed, Some(2), &env.actor(4_500)).await,
            Err(StoreError::VersionConflict { .. })
        ),
        "rotating a deleted secret is a conflict"
    );
    assert_eq!(
        store
            .secret(&other.id, "STRIPE_TEST_KEY")
            .await
            .expect("secret"),
        Some(theirs),
        "their secret survived ours"
    );
}

/// API keys: stored by hash, unique by hash.
pub async fn keys_are_unique_by_hash(store: Arc<dyn Store>) {
    let env = Env::new(&store, "keys").await;
    let environment = store
        .environment(&env.id)
        .await
        .expect("environment")
        .expect("exists");
    assert_eq!(environment.id, env.id);
    assert!(!environment.halted);
    let again = store
        .ensure_environment(
            steward_store::NewEnvironment {
                name: &environment.name,
                id: &EnvironmentId::from_unique(&unique("second-id")),
            },
            &Actor::system(T0),
        )
        .await
        .expect("ensure again");
    assert_eq!(
        again.id, env.id,
        "ensure_environment returns the existing environment"
    );

    let key = key_record(&env, "ci");
    store
        .insert_key(&key, &env.actor(1_000))
        .await
        .expect("insert");
    assert_eq!(
        store.key_by_hash(&key.token_hash).await.expect("by hash"),
        Some(key.clone())
    );
    assert!(store
        .key_by_hash(&format!("sha256:{}", unique("absent")))
        .await
        .expect("by hash")
        .is_none());

    let mut clash = key_record(&env, "ci-copy");
    clash.token_hash = key.token_hash.clone();
    assert!(matches!(
        store.insert_key(&clash, &env.actor(1_500)).await,
        Err(StoreError::Duplicate { .. })
    ));
    assert_eq!(
        store.key_by_hash(&key.token_hash).await.expect("by hash"),
        Some(key.clone()),
        "the first key is kept"
    );

    let second = key_record(&env, "worker");
    store
        .insert_key(&second, &env.actor(2_000))
        .await
        .expect("insert");
    let keys = store.list_keys().await.expect("list");
    assert_eq!(keys.iter().filter(|k| **k == key).count(), 1);
    assert_eq!(keys.iter().filter(|k| **k == second).count(), 1);
    assert!(
        keys.iter().all(|k| k.id != clash.id),
        "the refused key was not stored"
    );
}

/// Writes that name an environment that does not exist must not be reported as duplicates.
pub async fn writes_naming_an_unknown_environment_are_not_duplicates(store: Arc<dyn Store>) {
    let ghost = Env {
        store: store.clone(),
        id: EnvironmentId::from_unique(&unique("ghost-env")),
        key: KeyId::from_unique(&unique("ghost-key")),
    };
    let key = key_record(&ghost, "ghost");
    let key_result = store.insert_key(&key, &ghost.actor(1_000)).await;
    let action = action_record(&ghost, refund_definition("refund"));
    let action_result = store.create_action(&action, &ghost.actor(1_000)).await;
    // Any answer but `Duplicate` conforms (a backend without foreign keys may even accept them):
    // `Duplicate` would make the API answer 409 "already exists" for something that does not.
    assert!(
        !matches!(key_result, Err(StoreError::Duplicate { .. }))
            && !matches!(action_result, Err(StoreError::Duplicate { .. })),
        "no key has this hash and no live action this name, yet: insert_key -> {key_result:?}, \
         create_action -> {action_result:?}"
    );
}

/// A key of one environment sees and touches nothing of another.
pub async fn environments_are_walls(store: Arc<dyn Store>) {
    let ours = Env::new(&store, "wall-ours").await;
    let theirs = Env::new(&store, "wall-theirs").await;
    let action = ours.create_action(refund_definition("refund")).await;
    let mut sub = ours.submission(&action, json!({"charge": "ch_wall"}));
    sub.operation_key = Some(op("wall-op"));
    let inv = expect_created(store.submit(&sub).await.expect("submit"));
    ours.begin_attempt(&inv.effect_id, 2_000).await;
    let before = ours.effect(&inv.effect_id).await;

    assert!(store
        .invocation(&theirs.id, &inv.id)
        .await
        .expect("invocation")
        .is_none());
    assert!(store
        .effect(&theirs.id, &inv.effect_id)
        .await
        .expect("effect")
        .is_none());
    let listed = store
        .list_invocations(
            &theirs.id,
            &InvocationFilter {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert!(listed.items.is_empty());
    assert_eq!(listed.total, 0);
    let listed = store
        .list_effects(
            &theirs.id,
            &EffectFilter {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert!(listed.items.is_empty());
    assert_eq!(listed.total, 0);
    let listed = store
        .list_invocations(
            &theirs.id,
            &InvocationFilter {
                action_id: Some(action.id.clone()),
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert_eq!(
        listed.total, 0,
        "naming our action id does not reach our records"
    );

    // Their key cannot move or annotate our effect.
    let mut change = theirs.change(
        &inv.effect_id,
        EffectState::Dispatching,
        EffectState::Failed,
        3_000,
    );
    change.attempt = Some(AttemptChange::Finish {
        number: 1,
        response_status: Some(400),
        error: None,
    });
    change.evidence = Some(NewEvidence::new(
        EvidenceKind::ManualResolution,
        EvidenceSource::Operator,
        "not yours",
    ));
    assert!(
        store.change_effect(&change).await.is_err(),
        "another environment's effect does not exist for them"
    );
    let note = NewEvidence::new(EvidenceKind::Note, EvidenceSource::Operator, "not yours");
    assert!(store
        .append_evidence(&theirs.id, &inv.effect_id, &note, &theirs.actor(3_000))
        .await
        .is_err());
    assert_eq!(
        ours.effect(&inv.effect_id).await,
        before,
        "our effect is untouched"
    );
    assert_eq!(
        ours.invocation(&inv.id).await.state,
        EffectState::Dispatching
    );

    // Our records are all still there for us.
    let listed = store
        .list_invocations(
            &ours.id,
            &InvocationFilter {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert_eq!(listed.total, 1);
    assert_eq!(listed.items[0].id, inv.id);
}
