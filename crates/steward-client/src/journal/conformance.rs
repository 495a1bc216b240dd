//! One test suite every [`Journal`] implementation must pass: call [`run_all`] with a factory
//! of fresh, empty journals. The SQLite journal runs it in its unit tests; an application with
//! its own journal (another database) can run it the same way.

use super::{Begun, Journal, JournalError};
use crate::operation::{Operation, OperationId};
use crate::state::LocalState;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use steward_core::{ApprovalId, EffectId, InvocationId, InvocationStatus, Millis, OperationKey};

/// An intended `refund` operation in environment `test` with a fresh id.
pub fn sample(key: &str, input: Value) -> Operation {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    Operation::intended(
        OperationId::from_unique(&format!("conformance{n:08}")),
        "test",
        "refund",
        OperationKey::parse(key).expect("a valid key"),
        input,
        None,
        Millis(1_000 + n as i64),
    )
}

/// Runs every check, each on a fresh journal from `fresh`.
pub async fn run_all<J: Journal + 'static>(mut fresh: impl FnMut() -> J) {
    begin_is_idempotent_per_key_and_input(&fresh()).await;
    keys_are_scoped_to_environment_and_action(&fresh()).await;
    save_compares_and_sets_the_version(&fresh()).await;
    every_field_round_trips(&fresh()).await;
    unfinished_excludes_only_continued_oldest_first(&fresh()).await;
    concurrent_begins_of_one_key_make_one_operation(Arc::new(fresh())).await;
}

async fn begin_is_idempotent_per_key_and_input(journal: &impl Journal) {
    let first = sample("order-1", json!({"amount": 5, "pi": "pi_1"}));
    assert_eq!(
        journal.begin(&first).await.unwrap(),
        Begun::Created(first.clone())
    );
    // The same key and input, even in another key order and under another fresh id: the same
    // operation comes back.
    let again = sample("order-1", json!({"pi": "pi_1", "amount": 5}));
    assert_eq!(
        journal.begin(&again).await.unwrap(),
        Begun::Existing(first.clone())
    );
    let other_input = sample("order-1", json!({"amount": 6, "pi": "pi_1"}));
    match journal.begin(&other_input).await {
        Err(JournalError::KeyConflict { existing, .. }) => assert_eq!(existing, first.id),
        other => panic!("a different input under the same key must conflict: {other:?}"),
    }
    assert_eq!(journal.all().await.unwrap(), vec![first]);
}

async fn keys_are_scoped_to_environment_and_action(journal: &impl Journal) {
    let a = sample("order-1", json!({"amount": 5}));
    let mut b = sample("order-1", json!({"amount": 5}));
    b.action = "notify".into();
    let mut c = sample("order-1", json!({"amount": 5}));
    c.environment = "live".into();
    for op in [&a, &b, &c] {
        assert!(matches!(
            journal.begin(op).await.unwrap(),
            Begun::Created(_)
        ));
    }
    assert_eq!(journal.all().await.unwrap().len(), 3);
}

async fn save_compares_and_sets_the_version(journal: &impl Journal) {
    let op = sample("order-2", json!({"amount": 5}));
    journal.begin(&op).await.unwrap();
    let mut submitted = op.clone();
    submitted.state = LocalState::Submitted;
    submitted.attempt_count = 1;
    let saved = journal.save(&submitted).await.unwrap();
    assert_eq!(saved.version, 1);
    assert_eq!(journal.get(&op.id).await.unwrap(), Some(saved.clone()));
    // A save from a stale read is refused and changes nothing.
    let mut stale = submitted.clone();
    stale.state = LocalState::Failed;
    match journal.save(&stale).await {
        Err(JournalError::Stale { id, expected: 0 }) => assert_eq!(id, op.id),
        other => panic!("a stale save must be refused: {other:?}"),
    }
    assert_eq!(journal.get(&op.id).await.unwrap(), Some(saved));
    let missing = sample("nowhere", json!({}));
    assert!(matches!(
        journal.save(&missing).await,
        Err(JournalError::NotFound { .. })
    ));
    assert_eq!(journal.get(&missing.id).await.unwrap(), None);
}

async fn every_field_round_trips(journal: &impl Journal) {
    let mut op = sample("order-3", json!({"amount": 5, "nested": {"a": [1, 2]}}));
    op.retry_of = Some(InvocationId::parse("inv_prior").unwrap());
    journal.begin(&op).await.unwrap();
    op.state = LocalState::Unknown;
    op.invocation_id = Some(InvocationId::parse("inv_1").unwrap());
    op.effect_id = Some(EffectId::parse("eff_1").unwrap());
    op.approval_id = Some(ApprovalId::parse("apr_1").unwrap());
    op.server_status = Some(InvocationStatus::Unknown);
    op.server_record = Some(json!({"id": "inv_1", "status": "unknown"}));
    op.result = Some(json!({"note": "ünïcode"}));
    op.last_error = Some("why".into());
    op.assignee = Some("reconciliation-queue".into());
    op.attempt_count = 3;
    op.updated_at = Millis(99_999);
    let saved = journal.save(&op).await.unwrap();
    op.version = 1;
    assert_eq!(saved, op);
    assert_eq!(journal.get(&op.id).await.unwrap(), Some(op));
}

async fn unfinished_excludes_only_continued_oldest_first(journal: &impl Journal) {
    let mut ids = vec![];
    for (i, state) in LocalState::ALL.into_iter().enumerate() {
        let mut op = sample(&format!("order-state-{i}"), json!({"i": i}));
        journal.begin(&op).await.unwrap();
        op.state = state;
        journal.save(&op).await.unwrap();
        if state != LocalState::Continued {
            ids.push(op.id);
        }
    }
    let unfinished: Vec<OperationId> = journal
        .unfinished()
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.id)
        .collect();
    assert_eq!(unfinished, ids);
    assert_eq!(journal.all().await.unwrap().len(), LocalState::ALL.len());
}

async fn concurrent_begins_of_one_key_make_one_operation<J: Journal + 'static>(journal: Arc<J>) {
    const CONCURRENT_BEGINS: usize = 16;
    let mut tasks = vec![];
    for _ in 0..CONCURRENT_BEGINS {
        let journal = Arc::clone(&journal);
        tasks.push(tokio::spawn(async move {
            let op = sample("order-race", json!({"amount": 7}));
            journal.begin(&op).await.unwrap().into_operation().id
        }));
    }
    let mut ids = vec![];
    for t in tasks {
        ids.push(t.await.unwrap());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 1, "one operation for one key: {ids:?}");
    assert_eq!(journal.all().await.unwrap().len(), 1);
}
