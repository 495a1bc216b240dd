//! Listings and paging, the audit hash chain, several handles on one database, and restarts.

use super::*;
use steward_core::{EvidenceKind, EvidenceSource};

/// Invocation and effect listings: state filters, action filters, paging and totals.
pub async fn list_filters_and_paging(store: Arc<dyn Store>) {
    let env = Env::new(&store, "lists").await;
    let governed = env.create_action(refund_definition("refund")).await;
    let plain = env.create_action(template_definition("lookup")).await;

    let mut all = Vec::new();
    for i in 0..7 {
        let mut sub = env.submission(&governed, json!({"i": i}));
        // Pairs share a timestamp: paging must not depend on distinct creation times.
        sub.now = Millis(T0.0 + i / 2);
        all.push(expect_created(store.submit(&sub).await.expect("submit")));
    }
    let mut unknown = BTreeSet::new();
    for inv in &all[1..4] {
        env.begin_attempt(&inv.effect_id, 2_000).await;
        env.finish_attempt(&inv.effect_id, EffectState::Unknown, 3_000)
            .await;
        unknown.insert(inv.id.clone());
    }
    let mut block = env.change(
        &all[5].effect_id,
        EffectState::Ready,
        EffectState::Failed,
        2_000,
    );
    block.evidence = Some(NewEvidence::new(
        EvidenceKind::Blocked,
        EvidenceSource::Steward,
        "blocked",
    ));
    store.change_effect(&block).await.expect("Ready -> Failed");
    let mut plain_ids = BTreeSet::new();
    for i in 0..2 {
        let mut sub = env.submission(&plain, json!({"q": i}));
        sub.now = Millis(T0.0 + 100 + i);
        let inv = expect_created(store.submit(&sub).await.expect("submit"));
        assert!(
            !inv.governed,
            "a template action without impact or verify is not governed"
        );
        plain_ids.insert(inv.id);
    }

    let filter = |states: Option<Vec<EffectState>>,
                  action: Option<&ActionRecord>,
                  limit: u32,
                  offset: u32| InvocationFilter {
        action_id: action.map(|a| a.id.clone()),
        states,
        limit,
        offset,
    };
    let page = store
        .list_invocations(
            &env.id,
            &filter(Some(vec![EffectState::Unknown]), None, 100, 0),
        )
        .await
        .expect("list");
    assert_eq!(page.total, 3);
    assert!(page.items.iter().all(|i| i.state == EffectState::Unknown));
    assert_eq!(
        page.items
            .iter()
            .map(|i| i.id.clone())
            .collect::<BTreeSet<_>>(),
        unknown
    );

    let page = store
        .list_invocations(
            &env.id,
            &filter(
                Some(vec![EffectState::Unknown, EffectState::Failed]),
                None,
                100,
                0,
            ),
        )
        .await
        .expect("list");
    assert_eq!(page.total, 4);
    assert!(page
        .items
        .iter()
        .all(|i| matches!(i.state, EffectState::Unknown | EffectState::Failed)));

    let page = store
        .list_invocations(
            &env.id,
            &filter(Some(vec![EffectState::Ready]), None, 100, 0),
        )
        .await
        .expect("list");
    assert_eq!(
        page.total, 5,
        "three governed and two plain invocations are ready"
    );

    let page = store
        .list_invocations(&env.id, &filter(None, None, 100, 0))
        .await
        .expect("list");
    assert_eq!(page.total, 9);
    assert_eq!(page.items.len(), 9);
    let page = store
        .list_invocations(&env.id, &filter(None, Some(&plain), 100, 0))
        .await
        .expect("list");
    assert_eq!(
        page.items
            .iter()
            .map(|i| i.id.clone())
            .collect::<BTreeSet<_>>(),
        plain_ids
    );

    // Paging over the governed action's seven invocations, newest first.
    let mut seen = Vec::new();
    for (offset, expected_len) in [(0, 3), (3, 3), (6, 1), (9, 0)] {
        let page = store
            .list_invocations(&env.id, &filter(None, Some(&governed), 3, offset))
            .await
            .expect("list");
        assert_eq!(page.total, 7, "total counts every match, not the page");
        assert_eq!(page.items.len(), expected_len, "page at offset {offset}");
        seen.extend(page.items);
    }
    let created: Vec<Millis> = seen.iter().map(|i| i.created_at).collect();
    let mut newest_first = created.clone();
    newest_first.sort_by(|a, b| b.cmp(a));
    assert_eq!(created, newest_first, "pages are ordered newest first");
    let ids: HashSet<InvocationId> = seen.iter().map(|i| i.id.clone()).collect();
    assert_eq!(ids.len(), 7, "pages neither overlap nor skip");
    assert_eq!(
        ids,
        all.iter().map(|i| i.id.clone()).collect::<HashSet<_>>()
    );
    let page = store
        .list_invocations(
            &env.id,
            &filter(Some(vec![EffectState::Unknown]), None, 2, 0),
        )
        .await
        .expect("list");
    assert_eq!((page.items.len(), page.total), (2, 3));

    // Effects: governed ones only.
    let effects = store
        .list_effects(
            &env.id,
            &EffectFilter {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert_eq!(effects.total, 7);
    assert_eq!(
        effects
            .items
            .iter()
            .map(|e| e.id.clone())
            .collect::<HashSet<_>>(),
        all.iter()
            .map(|i| i.effect_id.clone())
            .collect::<HashSet<_>>()
    );
    let effects = store
        .list_effects(
            &env.id,
            &EffectFilter {
                states: Some(vec![EffectState::Unknown]),
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert_eq!(effects.total, 3);
    assert!(effects
        .items
        .iter()
        .all(|e| e.state == EffectState::Unknown));
    let effects = store
        .list_effects(
            &env.id,
            &EffectFilter {
                action_id: Some(plain.id.clone()),
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert_eq!(
        effects.total, 0,
        "an ungoverned action's effects are not listed"
    );
    let effects = store
        .list_effects(
            &env.id,
            &EffectFilter {
                limit: 2,
                offset: 6,
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert_eq!((effects.items.len(), effects.total), (1, 7));
}

/// The audit log is one hash chain that verifies end to end, shows any edit or removal, and
/// never holds a secret's sealed value.
pub async fn audit_chain_verifies_and_detects_tampering(store: Arc<dyn Store>) {
    let env = Env::new(&store, "audit").await;
    store
        .insert_key(&key_record(&env, "auditor"), &env.actor(1_000))
        .await
        .expect("insert key");
    let ciphertext = b"SEALED:sk_live_conformance_4242".to_vec();
    let rotated_ciphertext = b"SEALED:sk_live_conformance_9999".to_vec();
    let secret = secret_record(&env, "AUDIT_SECRET", &ciphertext);
    store
        .put_secret(&secret, None, &env.actor(1_100))
        .await
        .expect("create secret");
    let rotated = secret_record(&env, "AUDIT_SECRET", &rotated_ciphertext);
    store
        .put_secret(&rotated, Some(1), &env.actor(1_200))
        .await
        .expect("rotate secret");
    let action = env.create_action(refund_definition("refund")).await;
    let mut v2 = refund_definition("refund");
    v2.description = Some("audited".into());
    store
        .update_action(&env.id, &action.id, 1, &v2, &env.actor(1_300))
        .await
        .expect("update");
    let inv = expect_created(
        store
            .submit(&env.submission(&action, json!({"amount": 5})))
            .await
            .expect("submit"),
    );
    env.begin_attempt(&inv.effect_id, 2_000).await;
    env.finish_attempt(
        &inv.effect_id,
        EffectState::Succeeded { confirmed: true },
        3_000,
    )
    .await;
    let doomed = env.create_action(template_definition("doomed")).await;
    store
        .delete_action(&env.id, &doomed.id, &env.actor(4_000))
        .await
        .expect("delete");
    store
        .delete_secret(&env.id, "AUDIT_SECRET", &env.actor(4_100))
        .await
        .expect("delete secret");

    // Written unsealed: each event carries its own content hash, and an edit to one shows
    // before it is ever sealed.
    let unsealed = store
        .unsealed_audit_events(0, 100_000)
        .await
        .expect("unsealed");
    assert!(
        unsealed.len() >= 10,
        "every change above is audited, unsealed until the sealer runs: {} events",
        unsealed.len()
    );
    assert!(unsealed.iter().all(|e| e.link.is_none()));
    assert!(
        unsealed.windows(2).all(|w| w[0].id < w[1].id),
        "insertion order"
    );
    verify_unsealed(&unsealed).expect("each unsealed event matches its own hash");
    let mut edited = unsealed.clone();
    let j = edited.len() - 2;
    edited[j].after = Some(json!({"forged": true}));
    assert_eq!(
        verify_unsealed(&edited),
        Err(ChainError::TamperedUnsealed { id: unsealed[j].id }),
        "editing an unsealed event is detected"
    );
    for forge in [
        |e: &mut AuditEvent| e.at += 1,
        |e: &mut AuditEvent| e.actor = Some("key_someone_else".into()),
        |e: &mut AuditEvent| e.env_id = None,
        |e: &mut AuditEvent| e.kind = "key.created".into(),
        |e: &mut AuditEvent| e.subject = "another".into(),
        |e: &mut AuditEvent| e.before = Some(json!({})),
    ] {
        let mut forged = unsealed.clone();
        forge(&mut forged[j]);
        assert!(verify_unsealed(&forged).is_err(), "{:?}", forged[j]);
    }
    let report = verify_log(store.as_ref(), 5_000, |_| {})
        .await
        .expect("verify_log")
        .expect("the log verifies before sealing");
    assert!(report.unsealed >= unsealed.len() as u64);

    // Sealed: one chain, in the order the sealer took the events.
    seal_all(&store).await;
    assert!(store
        .unsealed_audit_events(0, 100_000)
        .await
        .expect("unsealed")
        .is_empty());
    let events = store.audit_events(0, 100_000).await.expect("audit");
    let (last_seq, last_hash) =
        verify_chain(0, GENESIS_HASH, &events).expect("the chain verifies end to end");
    let last = events.last().expect("events").link.clone().expect("sealed");
    assert_eq!((last_seq, &last_hash), (last.seq, &last.hash));
    let head = store.audit_head().await.expect("audit_head");
    assert_eq!((head.seq, &head.hash), (last_seq, &last_hash));
    let ours: Vec<&AuditEvent> = events
        .iter()
        .filter(|e| unsealed.iter().any(|u| u.id == e.id))
        .collect();
    assert_eq!(
        ours.iter().map(|e| e.id).collect::<Vec<_>>(),
        unsealed.iter().map(|e| e.id).collect::<Vec<_>>(),
        "sealed in insertion order, each exactly once"
    );
    assert!(ours
        .iter()
        .zip(&unsealed)
        .all(|(sealed, before)| sealed.content_hash == before.content_hash));
    for subject in [
        action.id.as_str(),
        inv.id.as_str(),
        inv.effect_id.as_str(),
        doomed.id.as_str(),
        "AUDIT_SECRET",
    ] {
        let ours: Vec<_> = events.iter().filter(|e| e.subject == subject).collect();
        assert!(!ours.is_empty(), "no audit event names {subject}");
        assert!(
            ours.iter()
                .all(|e| e.env_id.as_deref() == Some(env.id.as_str())),
            "{subject}: wrong environment"
        );
        assert!(
            ours.iter()
                .all(|e| e.actor.as_deref() == Some(env.key.as_str())),
            "{subject}: wrong actor"
        );
    }
    assert!(
        events
            .iter()
            .filter(|e| e.subject == inv.effect_id.as_str())
            .count()
            >= 2,
        "each transition is audited"
    );
    assert!(
        events
            .iter()
            .filter(|e| e.subject == "AUDIT_SECRET")
            .count()
            >= 3,
        "create, rotate, delete"
    );

    // Reading on from the middle continues the same chain.
    let k = events.len() / 2;
    let middle = events[k - 1].link.clone().expect("sealed");
    let rest = store
        .audit_events(middle.seq, 100_000)
        .await
        .expect("audit");
    assert_eq!(rest, events[k..].to_vec());
    assert_eq!(
        verify_chain(middle.seq, &middle.hash, &rest),
        Ok((last_seq, last_hash.clone()))
    );
    let limited = store.audit_events(0, 3).await.expect("audit");
    assert_eq!(limited, events[..3].to_vec());

    // Any edit of a sealed event shows.
    let i = events.len() - 3;
    let seq_of = |e: &AuditEvent| e.seq().expect("sealed");
    let mut tampered = events.clone();
    tampered[i].after = Some(json!({"state": "succeeded_confirmed", "forged": true}));
    assert_eq!(
        verify_chain(0, GENESIS_HASH, &tampered),
        Err(ChainError::Tampered {
            seq: seq_of(&events[i])
        })
    );
    // Its content hash recomputed to match: its chain hash no longer does.
    tampered[i].content_hash = Some(content_hash(&tampered[i]));
    assert_eq!(
        verify_chain(0, GENESIS_HASH, &tampered),
        Err(ChainError::Tampered {
            seq: seq_of(&events[i])
        })
    );
    // Its chain hash recomputed too: the next event's link breaks.
    let mut rehashed = tampered.clone();
    let forged_content = rehashed[i].content_hash.clone().expect("content hash");
    let link = rehashed[i].link.as_mut().expect("sealed");
    link.hash = link_hash(link.seq, &link.prev_hash, &forged_content);
    assert_eq!(
        verify_chain(0, GENESIS_HASH, &rehashed),
        Err(ChainError::BrokenLink {
            seq: seq_of(&events[i + 1])
        }),
        "re-hashing an edited event breaks the next link"
    );
    // Removing one leaves a gap.
    let mut removed = events.clone();
    removed.remove(i);
    assert_eq!(
        verify_chain(0, GENESIS_HASH, &removed),
        Err(ChainError::Gap {
            seq: seq_of(&events[i + 1]),
            previous: seq_of(&events[i - 1])
        })
    );
    // Reordering two shows, whether their places move with them or not.
    let mut reordered = events.clone();
    reordered.swap(i, i + 1);
    assert_eq!(
        verify_chain(0, GENESIS_HASH, &reordered),
        Err(ChainError::Gap {
            seq: seq_of(&events[i + 1]),
            previous: seq_of(&events[i - 1])
        })
    );
    let mut renumbered = reordered.clone();
    let (a, b) = (seq_of(&events[i]), seq_of(&events[i + 1]));
    renumbered[i].link.as_mut().expect("sealed").seq = a;
    renumbered[i + 1].link.as_mut().expect("sealed").seq = b;
    assert_eq!(
        verify_chain(0, GENESIS_HASH, &renumbered),
        Err(ChainError::BrokenLink { seq: a })
    );
    // An unsealed event passed off as sealed is refused.
    let mut unsealed_in_chain = events.clone();
    unsealed_in_chain[i].link = None;
    assert_eq!(
        verify_chain(0, GENESIS_HASH, &unsealed_in_chain),
        Err(ChainError::NotSealed { id: events[i].id })
    );

    // The sealed value never reaches the audit log, in any rendering.
    let rendered = serde_json::to_string(&events).expect("render");
    for bytes in [
        &ciphertext,
        &rotated_ciphertext,
        &secret.nonce,
        &rotated.nonce,
    ] {
        let text = String::from_utf8_lossy(bytes).to_string();
        let decimal = bytes
            .iter()
            .map(u8::to_string)
            .collect::<Vec<_>>()
            .join(",");
        for rendering in [text, to_hex(bytes), to_hex(bytes).to_uppercase(), decimal] {
            assert!(!rendering.is_empty());
            assert!(
                !rendered.contains(&rendering),
                "the audit log contains secret material: {rendering}"
            );
        }
    }
    assert!(!rendered.contains("sk_live_conformance"));
}

/// One operation key submitted through several store handles on the same database (several
/// connections, processes or replicas) still creates one effect.
pub async fn operation_key_unique_across_handles(stores: Vec<Arc<dyn Store>>) {
    assert!(
        stores.len() >= 2,
        "give at least two handles on one database"
    );
    let env = Env::new(&stores[0], "handles").await;
    let action = env.create_action(refund_definition("refund")).await;
    let mut tasks = Vec::new();
    for i in 0..64 {
        let store = stores[i % stores.len()].clone();
        let mut sub = env.submission(&action, json!({"charge": "ch_multi"}));
        sub.operation_key = Some(op("multi-handle-op"));
        tasks.push(tokio::spawn(async move { store.submit(&sub).await }));
    }
    let mut ids = HashSet::new();
    let mut created = 0;
    for task in tasks {
        match task.await.expect("task").expect("submit") {
            SubmitOutcome::Created(r) => {
                created += 1;
                ids.insert(r.id);
            }
            SubmitOutcome::Existing(r) => {
                ids.insert(r.id);
            }
            other => panic!("expected Created or Existing, got {other:?}"),
        }
    }
    assert_eq!(created, 1);
    assert_eq!(ids.len(), 1);
    for store in &stores {
        let effects = store
            .list_effects(&env.id, &effects_of(&action))
            .await
            .expect("list");
        assert_eq!(effects.total, 1, "every handle sees the one effect");
    }
    assert_chain_intact(&stores[1]).await;
}

/// What `submit` and a `Begin` committed is found by a new handle opened after the old one is
/// gone (a restart), and recovery there makes the in-flight attempt unknown.
pub async fn committed_changes_survive_a_restart<F, Fut>(open: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Store>>,
{
    let store = open().await;
    let env = Env::new(&store, "restart").await;
    let action = env.create_action(refund_definition("refund")).await;
    let mut sub = env.submission(&action, json!({"charge": "ch_restart"}));
    sub.operation_key = Some(op("restart-op"));
    sub.idempotency_key = Some(idem("restart-req"));
    let inflight = expect_created(store.submit(&sub).await.expect("submit"));
    env.begin_attempt(&inflight.effect_id, 2_000).await;
    let accepted = expect_created(
        store
            .submit(&env.submission(&action, json!({"charge": "ch_2"})))
            .await
            .expect("submit"),
    );
    let (env_id, key) = (env.id.clone(), env.key.clone());
    drop(env);
    drop(store);

    let store = open().await;
    let env = Env {
        store: store.clone(),
        id: env_id,
        key,
    };
    assert_eq!(
        env.effect(&inflight.effect_id).await.effect.state,
        EffectState::Dispatching
    );
    assert_eq!(
        env.effect(&inflight.effect_id).await.attempts.len(),
        1,
        "the Begin was durable"
    );
    let report = store
        .recover(&Sweep::sole(&restarted(), Millis(9_000)))
        .await
        .expect("recover");
    assert!(report.dispatching_to_unknown.contains(&inflight.effect_id));
    assert!(report.ready_to_failed.contains(&accepted.effect_id));
    assert_eq!(
        env.invocation(&inflight.id).await.state,
        EffectState::Unknown
    );
    match store.submit(&sub).await.expect("resubmit") {
        SubmitOutcome::Replayed(r) => assert_eq!(r.id, inflight.id),
        other => panic!("the resent request must get the original invocation, got {other:?}"),
    }
    let mut fresh = env.submission(&action, json!({"charge": "ch_restart"}));
    fresh.operation_key = Some(op("restart-op"));
    match store.submit(&fresh).await.expect("submit") {
        SubmitOutcome::Existing(r) => {
            assert_eq!((r.id, r.state), (inflight.id.clone(), EffectState::Unknown))
        }
        other => panic!("the operation key still names the original, got {other:?}"),
    }
    verify_log(store.as_ref(), 5_000, |_| {})
        .await
        .expect("verify_log")
        .expect("the audit log survives a restart");
    assert_chain_intact(&store).await;
}
