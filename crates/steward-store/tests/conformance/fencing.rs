//! Fencing (issue #26 item 3): work a replica owns carries an epoch that grows at each
//! takeover, and every write of that work checks it in the same statement. A write under a
//! stale epoch (an attempt's answer after a takeover, a seal by an earlier sealer, a webhook
//! result from an earlier claim) is refused with `StoreError::Fenced` and writes nothing; the
//! new holder's writes succeed.

use super::*;
use steward_store::{DeliveryOutcome, Fence};

/// The lease every sweep here uses, in milliseconds.
const LEASE_MS: i64 = 5_000;

impl Env {
    /// Dispatching -> succeeded, closing attempt `number` as the replica `holder`.
    fn holder_finish(&self, effect: &EffectId, number: u32, holder: &ReplicaId) -> EffectChange {
        let mut change = self.change(
            effect,
            EffectState::Dispatching,
            EffectState::Succeeded { confirmed: false },
            120_000,
        );
        change.attempt = Some(AttemptChange::Finish {
            number,
            response_status: Some(200),
            error: None,
        });
        change.response_status = Some(200);
        change.fence = Some(Fence::Holder(holder.clone()));
        change
    }

    /// Unknown -> dispatching with attempt `number`, a replay by `owner`.
    async fn replay_as(&self, effect: &EffectId, number: u32, owner: &ReplicaId) {
        let note = NewEvidence::new(EvidenceKind::Replay, EvidenceSource::Steward, "replay");
        let mut change = EffectChange::of(
            &self.id,
            effect,
            EffectState::Unknown,
            steward_core::EffectEvent::Replay,
            note,
            self.actor(110_000),
        )
        .expect("unknown takes a replay");
        change.attempt = Some(AttemptChange::Begin {
            number,
            deadline_at: Millis(140_000),
            owner: owner.clone(),
        });
        self.store
            .change_effect(&change)
            .await
            .expect("Unknown -> Dispatching");
    }
}

/// The refusal of a fenced write: `Fenced`, whose held epoch is never newer than the current
/// one (the same for a replica that never held the work).
fn assert_fenced<T: std::fmt::Debug>(result: Result<T, StoreError>, what: &str) {
    match result {
        Err(StoreError::Fenced { held, current, .. }) => {
            assert!(held <= current, "{what}: held {held}, current {current}")
        }
        other => panic!("{what} must be refused as fenced, got {other:?}"),
    }
}

/// An attempt's owner, taken for dead while its request was in flight, comes back with the
/// answer: refused, whether the effect still reads `unknown` or a replay by the new owner has
/// put it back in `dispatching` (the state compare-and-set alone would let that one through).
/// The new owner's own answer is recorded.
pub async fn an_answer_after_a_takeover_is_refused_and_the_new_owners_is_not(
    store: Arc<dyn Store>,
) {
    let env = Env::new(&store, "fence-attempt").await;
    let action = env.create_action(refund_definition("refund")).await;
    let (paused, sweeper) = (restarted(), restarted());
    let now = Millis(100_000);
    store
        .heartbeat(&paused, Millis(90_000))
        .await
        .expect("heartbeat");
    store.heartbeat(&sweeper, now).await.expect("heartbeat");
    let inv = env.submit_as(&action, json!({"n": 1}), &paused, None).await;
    env.begin_as(&inv.effect_id, &paused).await;
    // A replica that never owned the attempt cannot answer it.
    assert_fenced(
        store
            .change_effect(&env.holder_finish(&inv.effect_id, 1, &restarted()))
            .await,
        "a replica that never owned the attempt",
    );

    let report = store
        .recover(&Sweep::lease(&sweeper, now, LEASE_MS))
        .await
        .expect("sweep");
    assert!(report.dispatching_to_unknown.contains(&inv.effect_id));
    let before = env.effect(&inv.effect_id).await;
    assert_fenced(
        store
            .change_effect(&env.holder_finish(&inv.effect_id, 1, &paused))
            .await,
        "the paused owner's answer after the takeover",
    );
    assert_eq!(env.effect(&inv.effect_id).await, before, "nothing written");

    // The new owner replays: the effect is `dispatching` again, under attempt 2.
    env.replay_as(&inv.effect_id, 2, &sweeper).await;
    let replaying = env.effect(&inv.effect_id).await;
    assert_fenced(
        store
            .change_effect(&env.holder_finish(&inv.effect_id, 1, &paused))
            .await,
        "the paused owner's answer to attempt 1 while attempt 2 is in flight",
    );
    assert_fenced(
        store
            .change_effect(&env.holder_finish(&inv.effect_id, 2, &paused))
            .await,
        "the paused owner naming the new owner's attempt",
    );
    assert_eq!(
        env.effect(&inv.effect_id).await,
        replaying,
        "nothing written"
    );
    let recorded = store
        .change_effect_and_read(&env.holder_finish(&inv.effect_id, 2, &sweeper))
        .await
        .expect("the new owner's answer");
    assert!(matches!(recorded.state, EffectState::Succeeded { .. }));
    let detail = env.effect(&inv.effect_id).await;
    assert_eq!(detail.attempts.len(), 2);
    assert_eq!(detail.attempts[0].status, "unknown", "closed by the sweep");
    assert!(
        detail.attempts[1].status.starts_with("succeeded"),
        "{}",
        detail.attempts[1].status
    );
}

/// An attempt whose deadline passed more than a lease ago is taken by a sweep even though its
/// owner is alive and heartbeating; one still within its deadline plus the lease is not. The
/// owner's late answer to the taken one is refused.
pub async fn a_sweep_takes_an_overdue_attempt_of_a_live_owner(store: Arc<dyn Store>) {
    let env = Env::new(&store, "fence-overdue").await;
    let action = env.create_action(refund_definition("refund")).await;
    let (owner, sweeper) = (restarted(), restarted());
    let now = Millis(100_000);
    for r in [&owner, &sweeper] {
        store.heartbeat(r, now).await.expect("heartbeat");
    }
    let begin = |effect: &EffectId, deadline: i64| {
        let mut change = env.change(effect, EffectState::Ready, EffectState::Dispatching, 2_000);
        change.attempt = Some(AttemptChange::Begin {
            number: 1,
            deadline_at: Millis(deadline),
            owner: owner.clone(),
        });
        change
    };
    let overdue = env.submit_as(&action, json!({"n": 1}), &owner, None).await;
    store
        .change_effect(&begin(&overdue.effect_id, now.0 - LEASE_MS - 1))
        .await
        .expect("begin");
    let within = env.submit_as(&action, json!({"n": 2}), &owner, None).await;
    store
        .change_effect(&begin(&within.effect_id, now.0 - LEASE_MS + 1))
        .await
        .expect("begin");

    let report = store
        .recover(&Sweep::lease(&sweeper, now, LEASE_MS))
        .await
        .expect("sweep");
    assert!(
        report.dispatching_to_unknown.contains(&overdue.effect_id),
        "{report:?}"
    );
    assert!(
        !report.dispatching_to_unknown.contains(&within.effect_id),
        "{report:?}"
    );
    assert!(!report.expired_replicas.contains(&owner), "{report:?}");
    let detail = env.effect(&overdue.effect_id).await;
    assert_eq!(detail.effect.state, EffectState::Unknown);
    let last = detail.evidence.last().expect("evidence");
    assert!(last.message.contains("deadline passed"), "{}", last.message);
    assert_eq!(
        env.effect(&within.effect_id).await.effect.state,
        EffectState::Dispatching
    );

    assert_fenced(
        store
            .change_effect(&env.holder_finish(&overdue.effect_id, 1, &owner))
            .await,
        "the live owner's answer to its overdue attempt",
    );
    store
        .change_effect(&env.holder_finish(&within.effect_id, 1, &owner))
        .await
        .expect("the owner's answer within its deadline");
}

/// A sealer whose lease ran out while another replica sealed is refused under its old epoch,
/// and writes nothing; the current holder seals on, and the old one seals again only by taking
/// the lease afresh.
pub async fn a_seal_under_a_stale_sealer_epoch_is_refused(store: Arc<dyn Store>) {
    seal_all(&store).await;
    let env = Env::new(&store, "fence-seal").await;
    let (first, second) = (restarted(), restarted());
    // Neither heartbeats: no lease holds the other off once it has run out.
    const T: i64 = 200_000_000;
    let seal = |sealer: &ReplicaId, at: i64, epoch: Option<i64>| AuditSeal {
        epoch,
        ..seal_request(sealer, at)
    };
    let sealed_epoch = |outcome: SealOutcome| match outcome {
        SealOutcome::Sealed { epoch, .. } => epoch,
        other => panic!("expected a seal, got {other:?}"),
    };
    env.create_action(template_definition("one")).await;
    let held = sealed_epoch(
        store
            .seal_audit(&seal(&first, T, None))
            .await
            .expect("first seal"),
    );
    env.create_action(template_definition("two")).await;
    assert_eq!(
        sealed_epoch(
            store
                .seal_audit(&seal(&first, T + 1_000, Some(held)))
                .await
                .expect("a renewal")
        ),
        held,
        "a renewal keeps the epoch"
    );

    // `first` pauses past its lease; `second` takes the sealer's lease.
    let later = T + 1_000 + SEAL_LEASE_MS + 1;
    env.create_action(template_definition("three")).await;
    let current = sealed_epoch(
        store
            .seal_audit(&seal(&second, later, None))
            .await
            .expect("second seal"),
    );
    assert!(current > held);
    env.create_action(template_definition("four")).await;
    let head = store.audit_head().await.expect("head");
    let unsealed = store.unsealed_audit_events(0, 100).await.expect("unsealed");
    assert_fenced(
        store
            .seal_audit(&seal(&first, later + SEAL_LEASE_MS + 1, Some(held)))
            .await,
        "a seal under the first sealer's epoch",
    );
    assert_eq!(
        store.audit_head().await.expect("head"),
        head,
        "nothing sealed"
    );
    assert_eq!(
        store.unsealed_audit_events(0, 100).await.expect("unsealed"),
        unsealed
    );
    assert_eq!(
        sealed_epoch(
            store
                .seal_audit(&seal(&second, later + 1, Some(current)))
                .await
                .expect("the holder seals on")
        ),
        current
    );
    seal_all(&store).await;
}

/// A deliverer whose claim ran out while another replica claimed the subscription cannot
/// record its result, even at the cursor it read; nor can it after claiming again, under its
/// first claim's token. The current claim records.
pub async fn a_delivery_result_under_a_stale_claim_is_refused(store: Arc<dyn Store>) {
    let env = Env::new(&store, "fence-hooks").await;
    let s = webhooks::subscription(&env, "effects");
    store
        .create_subscription(&s, &Actor::system(T0))
        .await
        .expect("create");
    let claim = |owner: &'static str, at: i64| {
        let store = store.clone();
        let id = s.id.clone();
        async move {
            store
                .claim_subscriptions(owner, Millis(at), Millis(at + 1_000), 1_000)
                .await
                .expect("claim")
                .into_iter()
                .find(|c| c.id == id)
                .expect("claimed")
        }
    };
    let advance = DeliveryOutcome::Advance { cursor: 11 };
    let first = claim("replica-a", T0.0).await;
    // `replica-a` pauses past its claim; `replica-b` claims.
    let second = claim("replica-b", T0.0 + 2_000).await;
    assert!(second.lease_epoch > first.lease_epoch);
    let record = |owner: &'static str, epoch: i64| {
        let store = store.clone();
        let (id, advance) = (s.id.clone(), advance.clone());
        async move {
            store
                .record_delivery(&id, owner, epoch, 10, &advance, Millis(T0.0 + 2_500), None)
                .await
        }
    };
    assert_fenced(
        record("replica-a", first.lease_epoch).await,
        "the first claim's result",
    );
    assert_eq!(webhooks::claim_epoch(&store, &s).await, second.lease_epoch);
    assert_eq!(
        store
            .subscription(&env.id, &s.id)
            .await
            .expect("read")
            .expect("exists")
            .cursor,
        10,
        "nothing written"
    );
    assert!(record("replica-b", second.lease_epoch)
        .await
        .expect("the current claim's result"));
    // Claimed again by the first replica later: its old token is still stale.
    let third = claim("replica-a", T0.0 + 5_000).await;
    assert_fenced(
        record("replica-a", first.lease_epoch).await,
        "a token from an earlier claim of the same replica",
    );
    assert!(third.lease_epoch > second.lease_epoch);
}
