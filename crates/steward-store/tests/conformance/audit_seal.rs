//! Audit sealing (issue #13): events written unsealed by their transaction and sealed into the
//! chain afterwards by one sealer. The sub-tests here use the trait only; the helpers at the
//! bottom serve the backend tests in `conformance.rs` that tamper with the database itself,
//! kill a sealer mid-batch, and hold a transaction open.

use super::*;

/// One sealer at a time: the lease keeps a second replica off while the holder is registered
/// and its lease runs; once the lease runs out, or a sweep finds the holder dead and removes
/// it, another replica takes over, and the chain carries on where the last seal left it.
pub async fn one_sealer_holds_the_lease_until_it_expires(store: Arc<dyn Store>) {
    seal_all(&store).await;
    let (a, b) = (restarted(), restarted());
    // Well before `SEAL_ALL_AT`: no lease taken here outlives `seal_all`.
    const T: i64 = 100_000_000;
    for r in [&a, &b] {
        store.heartbeat(r, Millis(T)).await.expect("heartbeat");
    }
    let env = Env::new(&store, "lease").await;
    let sealed = |outcome: SealOutcome| match outcome {
        SealOutcome::Sealed { events, head, .. } => (events, head),
        other => panic!("expected a seal, got {other:?}"),
    };

    // `a` seals and takes the lease.
    let (n, head) = sealed(
        store
            .seal_audit(&seal_request(&a, T))
            .await
            .expect("seal by a"),
    );
    assert!(n >= 1);
    let stored = store.audit_head().await.expect("head");
    assert_eq!((stored.seq, &stored.hash), (head.0, &head.1));
    assert_eq!(stored.sealer.as_ref(), Some(&a));
    assert_eq!(stored.lease_until, Millis(T + SEAL_LEASE_MS));
    assert_eq!(
        store.seal_audit(&seal_request(&a, T)).await.expect("idle"),
        SealOutcome::Idle,
        "nothing left to seal"
    );

    // While it holds the lease, `b` is kept off and writes nothing.
    env.create_action(template_definition("one")).await;
    assert_eq!(
        store
            .seal_audit(&seal_request(&b, T + 2_000))
            .await
            .expect("seal by b"),
        SealOutcome::Held {
            by: a.clone(),
            until: Millis(T + SEAL_LEASE_MS)
        }
    );
    assert!(!store
        .unsealed_audit_events(0, 10)
        .await
        .expect("unsealed")
        .is_empty());
    // Its next seal renews the lease.
    sealed(
        store
            .seal_audit(&seal_request(&a, T + 3_000))
            .await
            .expect("renew"),
    );

    // Then `a` stops sealing (it died mid-batch: its transaction never committed). `b` waits
    // out the lease and takes over.
    env.create_action(template_definition("two")).await;
    let until = Millis(T + 3_000 + SEAL_LEASE_MS);
    assert_eq!(
        store
            .seal_audit(&seal_request(&b, until.0 - 1))
            .await
            .expect("too early"),
        SealOutcome::Held {
            by: a.clone(),
            until
        }
    );
    let (n, _) = sealed(
        store
            .seal_audit(&seal_request(&b, until.0))
            .await
            .expect("take over"),
    );
    assert!(n >= 1);
    assert_eq!(
        store.audit_head().await.expect("head").sealer.as_ref(),
        Some(&b)
    );

    // A sweep that finds `b` dead removes it: its lease no longer holds anyone off.
    env.create_action(template_definition("three")).await;
    let later = until.0 + 1_000;
    assert!(matches!(
        store.seal_audit(&seal_request(&a, later)).await.expect("held"),
        SealOutcome::Held { by, .. } if by == b
    ));
    store
        .heartbeat(&a, Millis(later + 10_000))
        .await
        .expect("heartbeat");
    let report = store
        .recover(&Sweep::lease(&a, Millis(later + 10_000), 5_000))
        .await
        .expect("sweep");
    assert!(report.expired_replicas.contains(&b), "{report:?}");
    sealed(
        store
            .seal_audit(&seal_request(&a, later))
            .await
            .expect("after the sweep"),
    );
    assert_chain_intact(&store).await;
}

/// Seals from several replicas at once, while audited writes commit, never fork the chain and
/// seal each event exactly once.
pub async fn concurrent_seals_seal_each_event_once(store: Arc<dyn Store>) {
    let env = Arc::new(Env::new(&store, "seal-race").await);
    let mut tasks = Vec::new();
    for i in 0..24 {
        let env = env.clone();
        tasks.push(tokio::spawn(async move {
            env.store
                .insert_key(&key_record(&env, &format!("k{i}")), &env.actor(1_000 + i))
                .await
                .expect("insert_key");
        }));
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            // Each from a replica of its own, never registered: no lease holds any of them off.
            let seal = AuditSeal {
                events_max: 3,
                ..seal_request(&restarted(), SEAL_ALL_AT.0)
            };
            store.seal_audit(&seal).await.expect("seal_audit");
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let unsealed = store
        .unsealed_audit_events(0, 100_000)
        .await
        .expect("unsealed");
    seal_all(&store).await;
    let events = store.audit_events(0, 100_000).await.expect("audit");
    verify_chain(0, GENESIS_HASH, &events).expect("one chain");
    assert_every_event_sealed_once(&store, &events).await;
    for event in unsealed {
        assert!(
            events.iter().any(|e| e.id == event.id),
            "event {} was sealed",
            event.id
        );
    }
}

/// No unsealed event is left, and no event is in the chain twice.
pub async fn assert_every_event_sealed_once(store: &Arc<dyn Store>, events: &[AuditEvent]) {
    assert!(store
        .unsealed_audit_events(0, 100_000)
        .await
        .expect("unsealed")
        .is_empty());
    let ids: HashSet<i64> = events.iter().map(|e| e.id).collect();
    assert_eq!(ids.len(), events.len(), "an event sealed twice");
}

// ------------------------------------------------------------------------------------------
// For the backend tests in `conformance.rs`
// ------------------------------------------------------------------------------------------

/// A log with sealed events (at least five) and one unsealed event after them, that verifies.
pub async fn a_log_to_tamper_with(store: &Arc<dyn Store>) {
    let env = Env::new(store, "tamper").await;
    for i in 0..5 {
        store
            .insert_key(&key_record(&env, &format!("k{i}")), &env.actor(1_000 + i))
            .await
            .expect("insert_key");
    }
    seal_all(store).await;
    store
        .insert_key(&key_record(&env, "late"), &env.actor(2_000))
        .await
        .expect("insert_key");
    let report = verify_log(store.as_ref(), 5_000, |_| {})
        .await
        .expect("verify_log")
        .expect("an untouched log verifies");
    assert!(report.sealed >= 5 && report.unsealed == 1, "{report:?}");
}

/// A way to tamper with the audit log in the database (SQL both backends run), and whether
/// what `verify_log` reports is the break it makes.
pub type Tampering = (&'static str, &'static str, fn(&ChainError) -> bool);

/// Each [`Tampering`] is applied to a fresh [`a_log_to_tamper_with`] and must be detected.
pub const TAMPERING: &[Tampering] = &[
    (
        "editing a sealed event",
        "UPDATE audit SET after = '{\"forged\":true}' WHERE seq = 2",
        |e| *e == ChainError::Tampered { seq: 2 },
    ),
    (
        "editing an unsealed event",
        "UPDATE audit SET subject = 'forged' WHERE seq IS NULL",
        |e| matches!(e, ChainError::TamperedUnsealed { .. }),
    ),
    (
        "deleting a sealed event",
        "DELETE FROM audit WHERE seq = 2",
        |e| {
            *e == ChainError::Gap {
                seq: 3,
                previous: 1,
            }
        },
    ),
    (
        "deleting the last sealed event",
        "DELETE FROM audit WHERE seq = (SELECT MAX(seq) FROM audit)",
        |e| matches!(e, ChainError::Truncated { .. }),
    ),
    (
        "unsealing the last sealed event",
        "UPDATE audit SET seq = NULL, prev_hash = NULL, hash = NULL
         WHERE seq = (SELECT MAX(seq) FROM audit)",
        |e| matches!(e, ChainError::Truncated { .. }),
    ),
    (
        "swapping two sealed events",
        "UPDATE audit SET seq = -1 WHERE seq = 2;
         UPDATE audit SET seq = 2 WHERE seq = 3;
         UPDATE audit SET seq = 3 WHERE seq = -1;",
        |e| *e == ChainError::BrokenLink { seq: 2 },
    ),
];

/// `verify_log` finds the break `tampering` made.
pub async fn tampering_is_detected(store: &Arc<dyn Store>, tampering: &Tampering) {
    let (what, _, expected) = tampering;
    match verify_log(store.as_ref(), 5_000, |_| {})
        .await
        .expect("verify_log")
    {
        Err(broken) => assert!(expected(&broken), "{what}: found {broken}"),
        Ok(report) => panic!("{what} went unnoticed: {report:?}"),
    }
}

/// Three events chained before sealing existed, as `(seq, at, subject, after, prev_hash, hash)`,
/// and the SQL that inserts them into an `audit` table of that time.
pub fn legacy_events() -> (Vec<AuditEvent>, String) {
    let mut events = Vec::new();
    let mut prev = GENESIS_HASH.to_string();
    let mut sql = String::new();
    for seq in 1..=3_i64 {
        let mut event = AuditEvent {
            id: seq,
            at: 1_000 + seq,
            env_id: Some("env_legacy".into()),
            actor: None,
            kind: "legacy.event".into(),
            subject: format!("s{seq}"),
            before: None,
            after: Some(json!({ "n": seq })),
            content_hash: None,
            link: None,
        };
        let hash = legacy_event_hash(&event, seq, &prev);
        sql.push_str(&format!(
            "INSERT INTO audit (seq, at, env_id, actor, kind, subject, before, after, prev_hash, hash)
             VALUES ({seq}, {}, 'env_legacy', NULL, 'legacy.event', '{}', NULL, '{}', '{prev}', '{hash}');\n",
            event.at,
            event.subject,
            event.after.as_ref().expect("after"),
        ));
        event.link = Some(ChainLink {
            seq,
            prev_hash: prev.clone(),
            hash: hash.clone(),
        });
        prev = hash;
        events.push(event);
    }
    (events, sql)
}

/// A store migrated from before sealing: its events are the sealed prefix, verified as before,
/// and new events are sealed after them.
pub async fn a_legacy_chain_stays_the_sealed_prefix(store: Arc<dyn Store>) {
    let (legacy, _) = legacy_events();
    let last = legacy.last().and_then(|e| e.link.clone()).expect("sealed");
    let head = store.audit_head().await.expect("head");
    assert_eq!((head.seq, &head.hash), (last.seq, &last.hash));
    assert_eq!(
        store.audit_events(0, 100).await.expect("audit"),
        legacy,
        "the legacy events are read back as they were written"
    );
    let report = verify_log(store.as_ref(), 5_000, |_| {})
        .await
        .expect("verify_log")
        .expect("the migrated log verifies");
    assert_eq!((report.sealed, report.unsealed), (3, 0));

    let env = Env::new(&store, "after-migration").await;
    env.create_action(template_definition("new")).await;
    let unsealed = store.unsealed_audit_events(0, 100).await.expect("unsealed");
    assert!(!unsealed.is_empty());
    assert!(
        unsealed.iter().all(|e| e.id > 3),
        "new events are inserted after the legacy ones"
    );
    seal_all(&store).await;
    let events = store.audit_events(0, 100).await.expect("audit");
    assert_eq!(events[..3], legacy[..]);
    let next = events[3].link.clone().expect("sealed");
    assert_eq!((next.seq, &next.prev_hash), (4, &last.hash));
    assert!(events[3..].iter().all(|e| e.content_hash.is_some()));
    verify_chain(0, GENESIS_HASH, &events).expect("one chain across the migration");
    assert_every_event_sealed_once(&store, &events).await;
}
