//! Signed receipts as stored: one first key between concurrent starts, rotation appends, and
//! receipts commit with the issuer's cursor, once per settlement event, chained per environment.

use super::*;
use steward_store::{IssueOutcome, ReceiptBatch, ReceiptKeyRecord, ReceiptRecord};

fn key(tag: &str, at: i64) -> ReceiptKeyRecord {
    let id = unique(tag);
    ReceiptKeyRecord {
        id: format!("rk_{}", &id[id.len().saturating_sub(16)..]),
        public_key: format!("{:0>64}", unique(&format!("{tag}-public"))),
        nonce: vec![1; 12],
        sealed: vec![2; 48],
        created_at: Millis(at),
    }
}

fn receipt(
    env: &Env,
    seq: i64,
    previous: &str,
    audit_seq: i64,
    signer: &ReceiptKeyRecord,
) -> ReceiptRecord {
    let effect = EffectId::from_unique(&unique("receipt-effect"));
    ReceiptRecord {
        env_id: env.id.clone(),
        seq,
        effect_id: effect.clone(),
        audit_seq,
        key_id: signer.id.clone(),
        digest: format!("sha256:{}", unique("digest")),
        previous_digest: previous.to_string(),
        body: json!({"sequence": seq, "effectId": effect.as_str(), "note": "\u{20ac}", "n": [1, -2]}),
        issued_at: Millis(T0.0 + seq),
    }
}

/// Concurrent first starts make one key; a rotation adds one after it; each is audited with
/// its public half only.
pub async fn receipt_keys_are_made_once_and_rotation_appends(store: Arc<dyn Store>) {
    let before = store.receipt_keys().await.expect("receipt_keys").len();
    let candidates: Vec<ReceiptKeyRecord> = (0..4).map(|i| key(&format!("first{i}"), 10)).collect();
    let added = futures_join(
        candidates
            .iter()
            .map(|k| {
                let store = store.clone();
                let k = k.clone();
                async move {
                    store
                        .add_receipt_key(&k, true, &Actor::system(T0))
                        .await
                        .expect("add_receipt_key")
                }
            })
            .collect(),
    )
    .await;
    let made = added.iter().filter(|a| **a).count();
    assert_eq!(
        made,
        usize::from(before == 0),
        "one first key between concurrent starts"
    );
    let rotated = key("rotated", 20);
    assert!(store
        .add_receipt_key(&rotated, false, &Actor::system(T0))
        .await
        .expect("rotate"));
    let keys = store.receipt_keys().await.expect("receipt_keys");
    assert_eq!(keys.len(), before + made + 1);
    assert_eq!(keys.last(), Some(&rotated), "the newest key signs");
    assert!(matches!(
        store
            .add_receipt_key(&rotated, false, &Actor::system(T0))
            .await,
        Err(StoreError::Duplicate { .. })
    ));
    seal_all(&store).await;
    let events = store.audit_events(0, 100_000).await.expect("audit_events");
    let audited: Vec<&AuditEvent> = events
        .iter()
        .filter(|e| e.kind == "receipt_key.created" && e.subject == rotated.id)
        .collect();
    assert_eq!(audited.len(), 1);
    assert_eq!(
        audited[0].after,
        Some(json!({"publicKey": rotated.public_key, "createdAt": 20}))
    );
}

/// A batch commits with the cursor when the cursor and each environment's head are where it
/// says; otherwise nothing is written. Racing issuers commit one batch; reads give each
/// effect's receipts and each environment's chain in order, bodies as written.
pub async fn receipts_commit_once_with_the_cursor_and_chain_per_environment(store: Arc<dyn Store>) {
    let signer = key("signer", 30);
    store
        .add_receipt_key(&signer, false, &Actor::system(T0))
        .await
        .expect("add_receipt_key");
    let (a, b) = (
        Env::new(&store, "receipts-a").await,
        Env::new(&store, "receipts-b").await,
    );
    let cursor = store.receipt_cursor().await.expect("receipt_cursor");
    let genesis = steward_core::receipt::GENESIS_DIGEST;
    let a1 = receipt(&a, 1, genesis, cursor + 1, &signer);
    let b1 = receipt(&b, 1, genesis, cursor + 2, &signer);
    let a2 = receipt(&a, 2, &a1.digest, cursor + 4, &signer);
    let batch = ReceiptBatch {
        after_audit_seq: cursor,
        through_audit_seq: cursor + 5,
        receipts: vec![a1.clone(), b1.clone(), a2.clone()],
    };
    let outcomes = futures_join(
        (0..3)
            .map(|_| {
                let (store, batch) = (store.clone(), batch.clone());
                async move { store.issue_receipts(&batch).await.expect("issue_receipts") }
            })
            .collect(),
    )
    .await;
    let issued = outcomes
        .iter()
        .filter(|o| matches!(o, IssueOutcome::Issued { receipts: 3 }))
        .count();
    assert_eq!(issued, 1, "racing issuers commit one batch: {outcomes:?}");
    assert_eq!(store.receipt_cursor().await.unwrap(), cursor + 5);
    assert_eq!(
        store.receipt_head(&a.id).await.unwrap(),
        Some((2, a2.digest.clone()))
    );

    // A batch read before the cursor moved, or one that does not follow a head: nothing.
    let stale = ReceiptBatch {
        after_audit_seq: cursor,
        through_audit_seq: cursor + 9,
        receipts: vec![receipt(&a, 3, &a2.digest, cursor + 6, &signer)],
    };
    assert_eq!(
        store.issue_receipts(&stale).await.unwrap(),
        IssueOutcome::Moved
    );
    let forked = ReceiptBatch {
        after_audit_seq: cursor + 5,
        through_audit_seq: cursor + 9,
        receipts: vec![receipt(&a, 2, &a1.digest, cursor + 6, &signer)],
    };
    assert_eq!(
        store.issue_receipts(&forked).await.unwrap(),
        IssueOutcome::Moved
    );
    let reused = ReceiptBatch {
        after_audit_seq: cursor + 5,
        through_audit_seq: cursor + 9,
        receipts: vec![receipt(&a, 3, &a2.digest, cursor + 4, &signer)],
    };
    assert_eq!(
        store.issue_receipts(&reused).await.unwrap(),
        IssueOutcome::Moved,
        "an event at or before the cursor already has its receipt"
    );
    assert_eq!(store.receipt_cursor().await.unwrap(), cursor + 5);

    // An empty batch moves the cursor past events that settle nothing.
    let empty = ReceiptBatch {
        after_audit_seq: cursor + 5,
        through_audit_seq: cursor + 7,
        receipts: vec![],
    };
    assert_eq!(
        store.issue_receipts(&empty).await.unwrap(),
        IssueOutcome::Issued { receipts: 0 }
    );

    let chain = store.receipts(&a.id, 0, 10).await.expect("receipts");
    assert_eq!(chain, vec![a1.clone(), a2.clone()], "read back as written");
    assert_eq!(
        store.receipts(&a.id, 1, 10).await.unwrap(),
        vec![a2.clone()]
    );
    assert_eq!(store.receipts(&a.id, 0, 1).await.unwrap(), vec![a1.clone()]);
    assert_eq!(
        store.receipts(&b.id, 0, 10).await.unwrap(),
        vec![b1.clone()]
    );
    assert_eq!(
        store.effect_receipts(&a.id, &a2.effect_id).await.unwrap(),
        vec![a2.clone()]
    );
    assert!(
        store
            .effect_receipts(&b.id, &a2.effect_id)
            .await
            .unwrap()
            .is_empty(),
        "environments are walls"
    );
}

/// Runs `futures` together and returns their outputs in order.
async fn futures_join<T: Send + 'static>(
    futures: Vec<impl std::future::Future<Output = T> + Send + 'static>,
) -> Vec<T> {
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}
