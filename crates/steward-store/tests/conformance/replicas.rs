//! Replicas sharing one store: the recovery sweep takes over exactly the work of dead replicas,
//! once, however many replicas sweep at once; the background reconciler's claims do not
//! overlap; approval changes are announced to every process listening.

use super::*;
use std::collections::BTreeMap;
use std::time::Duration;
use steward_core::{ApprovalId, ApprovalStatus, Decision};
use steward_store::{ApprovalEvent, DecideOutcome, NewApproval, Withdrawal, WITHDRAWN_ORIGIN};

/// The lease every sweep here uses, in milliseconds.
const LEASE_MS: i64 = 5_000;
/// How long an announcement may take to arrive, in seconds: generous, never expected.
const ANNOUNCEMENT_WAIT_S: u64 = 10;

impl Env {
    /// Submits `input` as recorded by replica `owner`, with an idempotency key when given.
    async fn submit_as(
        &self,
        action: &ActionRecord,
        input: Value,
        owner: &ReplicaId,
        key: Option<&str>,
    ) -> InvocationRecord {
        let mut sub = self.submission(action, input);
        sub.owner = owner.clone();
        sub.idempotency_key = key.map(idem);
        expect_created(self.store.submit(&sub).await.expect("submit"))
    }

    /// Ready -> Dispatching with attempt 1, recorded by replica `owner`.
    async fn begin_as(&self, effect: &EffectId, owner: &ReplicaId) {
        let mut change = self.change(effect, EffectState::Ready, EffectState::Dispatching, 2_000);
        change.attempt = Some(AttemptChange::Begin {
            number: 1,
            deadline_at: Millis(32_000),
            owner: owner.clone(),
        });
        self.store
            .change_effect(&change)
            .await
            .expect("Ready -> Dispatching");
    }

    /// A gated invocation, approved by another key on replica `decider`: `ready`, owned by it.
    async fn approved_on(
        &self,
        action: &ActionRecord,
        n: &str,
        decider: &ReplicaId,
    ) -> InvocationRecord {
        let mut sub = self.submission(action, json!({"approved": n}));
        sub.initial = EffectState::AwaitingApproval;
        sub.approval = Some(new_approval(&format!("approve {n}"), None));
        let parked = expect_created(self.store.submit(&sub).await.expect("submit"));
        let approval = ApprovalId::parse(parked.approval_id.as_deref().expect("approval id"))
            .expect("approval id");
        let approver = KeyId::from_unique(&unique("approver"));
        match self
            .store
            .decide_approval(
                &self.id,
                &approval,
                &approver,
                Decision::Approve,
                None,
                Millis(3_000),
                decider,
            )
            .await
            .expect("decide")
        {
            DecideOutcome::Recorded {
                ready: Some(inv), ..
            } => {
                assert_eq!(inv.state, EffectState::Ready);
                *inv
            }
            other => panic!("the approval must release the invocation, got {other:?}"),
        }
    }
}

fn new_approval(title: &str, expires_at: Option<Millis>) -> NewApproval {
    NewApproval {
        id: ApprovalId::from_unique(&unique("apr")),
        title: title.into(),
        description: None,
        payload: json!({}),
        required_approvals: 1,
        expires_at,
        run_id: None,
    }
}

/// A live replica's work is never touched; a dead one's (or an unknown one's) is taken over:
/// dispatching becomes unknown, un-approved ready becomes failed, approved ready becomes the
/// sweeper's to dispatch (once: a later sweep leaves it to its new, live owner), in-flight
/// request markers are released. When the live replica dies in turn, its work goes the same way.
pub async fn a_sweep_takes_over_only_dead_replicas_work(store: Arc<dyn Store>) {
    let env = Env::new(&store, "sweep").await;
    let action = env.create_action(refund_definition("refund")).await;
    let (live, dead, ghost, sweeper) = (restarted(), restarted(), restarted(), restarted());
    let now = Millis(100_000);
    store
        .heartbeat(&dead, Millis(90_000))
        .await
        .expect("heartbeat");
    store
        .heartbeat(&live, Millis(99_000))
        .await
        .expect("heartbeat");
    // A heartbeat that arrives late, with an older time, never moves a replica back.
    store
        .heartbeat(&live, Millis(1_000))
        .await
        .expect("heartbeat");
    store.heartbeat(&sweeper, now).await.expect("heartbeat");

    let live_dispatching = env.submit_as(&action, json!({"n": 1}), &live, None).await;
    env.begin_as(&live_dispatching.effect_id, &live).await;
    let dead_dispatching = env.submit_as(&action, json!({"n": 2}), &dead, None).await;
    env.begin_as(&dead_dispatching.effect_id, &dead).await;
    let ghost_dispatching = env.submit_as(&action, json!({"n": 3}), &ghost, None).await;
    env.begin_as(&ghost_dispatching.effect_id, &ghost).await;
    let live_ready = env
        .submit_as(&action, json!({"n": 4}), &live, Some("sweep-live-ready"))
        .await;
    let dead_ready = env
        .submit_as(&action, json!({"n": 5}), &dead, Some("sweep-dead-ready"))
        .await;
    let approved_by_live = env.approved_on(&action, "live", &live).await;
    let approved_by_dead = env.approved_on(&action, "dead", &dead).await;
    let (generic_live, generic_dead) = (idem("sweep-generic-live"), idem("sweep-generic-dead"));
    for (key, owner) in [(&generic_live, &live), (&generic_dead, &dead)] {
        let begun = store
            .idempotency_begin(&env.id, &env.key, key, "fp", T0, owner)
            .await;
        assert_eq!(begun.expect("begin"), IdempotencyBegin::Begun);
    }
    let live_before = [
        env.effect(&live_dispatching.effect_id).await,
        env.effect(&live_ready.effect_id).await,
        env.effect(&approved_by_live.effect_id).await,
    ];

    let report = store
        .recover(&Sweep::lease(&sweeper, now, LEASE_MS))
        .await
        .expect("sweep");
    for (taken, what) in [
        (&dead_dispatching.effect_id, "a dead replica's attempt"),
        (
            &ghost_dispatching.effect_id,
            "an attempt of a replica that never heartbeated",
        ),
    ] {
        assert!(
            report.dispatching_to_unknown.contains(taken),
            "{what}: {report:?}"
        );
    }
    assert!(
        report.ready_to_failed.contains(&dead_ready.effect_id),
        "{report:?}"
    );
    assert!(
        report
            .approved_to_dispatch
            .contains(&(env.id.clone(), approved_by_dead.id.clone())),
        "{report:?}"
    );
    assert!(report.expired_replicas.contains(&dead), "{report:?}");
    for kept in [&live, &sweeper] {
        assert!(!report.expired_replicas.contains(kept), "{report:?}");
    }
    for untouched in [&live_dispatching, &live_ready, &approved_by_live] {
        let id = &untouched.effect_id;
        assert!(!report.dispatching_to_unknown.contains(id), "{report:?}");
        assert!(!report.ready_to_failed.contains(id), "{report:?}");
        assert!(
            !report
                .approved_to_dispatch
                .iter()
                .any(|(_, inv)| inv == &untouched.id),
            "{report:?}"
        );
    }
    assert!(
        !report.ready_to_failed.contains(&approved_by_dead.effect_id),
        "approved work is dispatched, never failed: {report:?}"
    );
    let live_after = [
        env.effect(&live_dispatching.effect_id).await,
        env.effect(&live_ready.effect_id).await,
        env.effect(&approved_by_live.effect_id).await,
    ];
    assert_eq!(
        live_after, live_before,
        "a live replica's work is untouched"
    );

    // The dead replica's attempt: closed as unknown, evidence names the owner, nothing re-sent.
    let detail = env.effect(&dead_dispatching.effect_id).await;
    assert_eq!(detail.effect.state, EffectState::Unknown);
    assert_eq!(detail.attempts.len(), 1, "recovery records no new attempt");
    assert_eq!(detail.attempts[0].status, "unknown");
    assert_eq!(detail.attempts[0].finished_at, Some(now));
    assert_eq!(detail.attempts[0].owner.as_ref(), Some(&dead));
    let last = detail.evidence.last().expect("evidence");
    assert_eq!(last.kind.as_str(), "restart");
    assert_eq!(
        last.data.as_ref().expect("evidence data")["owner"],
        json!(dead.as_str())
    );
    assert_eq!(
        env.effect(&dead_ready.effect_id).await.effect.state,
        EffectState::Failed
    );
    assert_eq!(
        env.effect(&approved_by_dead.effect_id).await.effect.state,
        EffectState::Ready,
        "the approved effect waits for its new owner's dispatch"
    );

    // In-flight markers: the dead replica's are released, the live one's stay in flight.
    let resend = |inv: &InvocationRecord, key: &str, n: i64| {
        let mut sub = env.submission(&action, json!({"n": n}));
        sub.idempotency_key = Some(idem(key));
        sub.request_fingerprint = fingerprint(&json!({"action": action.name, "input": inv.input}));
        sub
    };
    match store
        .submit(&resend(&dead_ready, "sweep-dead-ready", 5))
        .await
        .expect("submit")
    {
        SubmitOutcome::Replayed(r) => assert_eq!(r.id, dead_ready.id),
        other => panic!("the dead replica's request is answered now, got {other:?}"),
    }
    match store
        .submit(&resend(&live_ready, "sweep-live-ready", 4))
        .await
        .expect("submit")
    {
        SubmitOutcome::InProgress => {}
        other => panic!("the live replica's request is still in flight, got {other:?}"),
    }
    let again = store
        .idempotency_begin(&env.id, &env.key, &generic_dead, "fp", T0, &sweeper)
        .await;
    assert_eq!(again.expect("begin"), IdempotencyBegin::Begun, "forgotten");
    let again = store
        .idempotency_begin(&env.id, &env.key, &generic_live, "fp", T0, &sweeper)
        .await;
    assert_eq!(again.expect("begin"), IdempotencyBegin::InProgress, "kept");

    // Another live replica sweeping right after finds nothing of this left: the approved
    // effect is the (live) sweeper's now.
    let other = restarted();
    store.heartbeat(&other, now).await.expect("heartbeat");
    let second = store
        .recover(&Sweep::lease(&other, now, LEASE_MS))
        .await
        .expect("sweep");
    let mine: Vec<&EffectId> = [
        &live_dispatching,
        &dead_dispatching,
        &ghost_dispatching,
        &live_ready,
        &dead_ready,
        &approved_by_live,
        &approved_by_dead,
    ]
    .iter()
    .map(|inv| &inv.effect_id)
    .collect();
    assert!(
        mine.iter()
            .all(|id| !second.dispatching_to_unknown.contains(id)
                && !second.ready_to_failed.contains(id)),
        "{second:?}"
    );
    assert!(
        second
            .approved_to_dispatch
            .iter()
            .all(|(e, _)| e != &env.id),
        "{second:?}"
    );

    // Later the live replica and the first sweeper stop heartbeating: their work goes too.
    let later = Millis(200_000);
    store.heartbeat(&other, later).await.expect("heartbeat");
    let third = store
        .recover(&Sweep::lease(&other, later, LEASE_MS))
        .await
        .expect("sweep");
    assert!(
        third
            .dispatching_to_unknown
            .contains(&live_dispatching.effect_id),
        "{third:?}"
    );
    assert!(
        third.ready_to_failed.contains(&live_ready.effect_id),
        "{third:?}"
    );
    for approved in [&approved_by_live, &approved_by_dead] {
        assert!(
            third
                .approved_to_dispatch
                .contains(&(env.id.clone(), approved.id.clone())),
            "{third:?}"
        );
    }
    for gone in [&live, &sweeper] {
        assert!(third.expired_replicas.contains(gone), "{third:?}");
    }
    let again = store
        .idempotency_begin(&env.id, &env.key, &generic_live, "fp", T0, &other)
        .await;
    assert_eq!(
        again.expect("begin"),
        IdempotencyBegin::Begun,
        "the marker of the replica that died since is forgotten too"
    );
    store
        .idempotency_abandon(&env.id, &env.key, &generic_live)
        .await
        .expect("abandon");
    store
        .idempotency_abandon(&env.id, &env.key, &generic_dead)
        .await
        .expect("abandon");
    assert_chain_intact(&store).await;
}

/// Several replicas sweeping at once (through separate handles where the backend has them):
/// each orphaned piece is taken by exactly one sweep.
pub async fn concurrent_sweeps_take_each_piece_once(stores: Vec<Arc<dyn Store>>) {
    let store = stores[0].clone();
    let env = Env::new(&store, "sweeps").await;
    let action = env.create_action(refund_definition("refund")).await;
    let dead = restarted();
    store
        .heartbeat(&dead, Millis(1_000))
        .await
        .expect("heartbeat");
    let mut dispatching = Vec::new();
    let mut ready = Vec::new();
    let mut approved = Vec::new();
    for n in 0..12 {
        let inv = env.submit_as(&action, json!({"d": n}), &dead, None).await;
        env.begin_as(&inv.effect_id, &dead).await;
        dispatching.push(inv.effect_id);
    }
    for n in 0..6 {
        let inv = env.submit_as(&action, json!({"r": n}), &dead, None).await;
        ready.push(inv.effect_id);
        approved.push(env.approved_on(&action, &n.to_string(), &dead).await.id);
    }

    let now = Millis(100_000);
    let mut sweeps = Vec::new();
    for (i, handle) in stores.iter().cycle().take(8).enumerate() {
        let (handle, sweeper) = (handle.clone(), restarted());
        handle.heartbeat(&sweeper, now).await.expect("heartbeat");
        sweeps.push(tokio::spawn(async move {
            // Staggered by a hair, so that some overlap and some follow.
            tokio::time::sleep(Duration::from_millis(i as u64 % 3)).await;
            handle.recover(&Sweep::lease(&sweeper, now, LEASE_MS)).await
        }));
    }
    let mut reports = Vec::new();
    for sweep in sweeps {
        reports.push(sweep.await.expect("sweep task").expect("sweep"));
    }
    let mut taken: BTreeMap<String, usize> = BTreeMap::new();
    for report in &reports {
        let pieces = report
            .dispatching_to_unknown
            .iter()
            .chain(&report.ready_to_failed)
            .map(|id| id.to_string())
            .chain(
                report
                    .approved_to_dispatch
                    .iter()
                    .map(|(_, inv)| inv.to_string()),
            );
        for piece in pieces {
            *taken.entry(piece).or_default() += 1;
        }
    }
    let expected = dispatching
        .iter()
        .chain(&ready)
        .map(|id| id.to_string())
        .chain(approved.iter().map(|id| id.to_string()));
    for piece in expected {
        assert_eq!(
            taken.get(&piece),
            Some(&1),
            "{piece} taken once: {reports:?}"
        );
    }
    for id in &dispatching {
        let detail = env.effect(id).await;
        assert_eq!(detail.effect.state, EffectState::Unknown);
        let restarts = detail
            .evidence
            .iter()
            .filter(|e| e.kind.as_str() == "restart")
            .count();
        assert_eq!(restarts, 1, "one sweep settled {id}: {:?}", detail.evidence);
    }
    for id in &ready {
        assert_eq!(env.effect(id).await.effect.state, EffectState::Failed);
    }
    let expired = reports
        .iter()
        .filter(|r| r.expired_replicas.contains(&dead))
        .count();
    assert_eq!(
        expired, 1,
        "one sweep removes the dead replica: {reports:?}"
    );
    assert_chain_intact(&store).await;
}

/// [`concurrent_sweeps_take_each_piece_once`] on one handle.
pub async fn concurrent_sweeps_on_one_handle_take_each_piece_once(store: Arc<dyn Store>) {
    concurrent_sweeps_take_each_piece_once(vec![store]).await;
}

/// The background reconciler's claims: a due effect is handed to one caller at a time, and
/// handed out again once the claim runs out.
pub async fn reconcile_claims_do_not_overlap(store: Arc<dyn Store>) {
    let env = Env::new(&store, "claims").await;
    let action = env.create_action(refund_definition("refund")).await;
    let mut mine = Vec::new();
    for n in 0..5 {
        let inv = env
            .submit_as(&action, json!({"u": n}), &writer(), None)
            .await;
        env.begin_attempt(&inv.effect_id, 2_000).await;
        env.finish_attempt(&inv.effect_id, EffectState::Unknown, 2_500)
            .await;
        mine.push(inv.effect_id);
    }
    let now = Millis(10_000);
    let claim_until = Millis(70_000);
    let mut claims = Vec::new();
    for _ in 0..4 {
        let store = store.clone();
        claims.push(tokio::spawn(async move {
            store.due_for_reconcile(now, 10_000, claim_until).await
        }));
    }
    let mut handed: BTreeMap<EffectId, usize> = BTreeMap::new();
    for claim in claims {
        for due in claim.await.expect("claim task").expect("claim") {
            *handed.entry(due.effect_id).or_default() += 1;
        }
    }
    for id in &mine {
        assert_eq!(handed.get(id), Some(&1), "{id} handed out once: {handed:?}");
    }
    let during = store
        .due_for_reconcile(Millis(69_999), 10_000, Millis(80_000))
        .await
        .expect("claim");
    assert!(
        during.iter().all(|d| !mine.contains(&d.effect_id)),
        "claimed effects are not due again before the claim runs out: {during:?}"
    );
    let after = store
        .due_for_reconcile(claim_until, 10_000, Millis(130_000))
        .await
        .expect("claim");
    for id in &mine {
        assert!(
            after.iter().any(|d| &d.effect_id == id),
            "{id} is due again once the claim ran out: {after:?}"
        );
    }
}

/// A shared store announces every approval decision and expiry to every process listening,
/// once the change is committed, and asks them to read again when a sweep removes a dead
/// replica. A store that only one process serves announces nothing (its
/// server wakes its own long polls).
pub async fn approval_changes_are_announced(store: Arc<dyn Store>) {
    let Some(mut events) = store.approval_events() else {
        return;
    };
    assert_eq!(
        next_event(&mut events).await,
        ApprovalEvent::Resync,
        "the first event says the store listens"
    );
    let env = Env::new(&store, "announce").await;
    let approval = new_approval("announced", None);
    store
        .create_approval(&env.id, &approval, &env.key, T0)
        .await
        .expect("create");
    let approver = KeyId::from_unique(&unique("approver"));
    store
        .decide_approval(
            &env.id,
            &approval.id,
            &approver,
            Decision::Approve,
            None,
            Millis(2_000),
            &restarted(),
        )
        .await
        .expect("decide");
    assert_eq!(
        next_event(&mut events).await,
        ApprovalEvent::Changed(approval.id.clone())
    );

    let expiring = new_approval("expiring", Some(Millis(3_000)));
    store
        .create_approval(&env.id, &expiring, &env.key, T0)
        .await
        .expect("create");
    let expired = store.expire_approvals(Millis(4_000)).await.expect("expire");
    assert!(expired.contains(&expiring.id));
    // Every approval the expiry settled is announced; this one among them.
    loop {
        if next_event(&mut events).await == ApprovalEvent::Changed(expiring.id.clone()) {
            break;
        }
    }

    // A sweep that removes a dead replica tells every listener to read again: the dead one may
    // have died between a decision's commit and its announcement.
    let dead = restarted();
    store
        .heartbeat(&dead, Millis(1_000))
        .await
        .expect("heartbeat");
    let report = store
        .recover(&Sweep::lease(&restarted(), Millis(100_000), LEASE_MS))
        .await
        .expect("sweep");
    assert!(report.expired_replicas.contains(&dead), "{report:?}");
    loop {
        if next_event(&mut events).await == ApprovalEvent::Resync {
            break;
        }
    }
}

/// The next announcement, or a test failure after [`ANNOUNCEMENT_WAIT_S`].
async fn next_event(events: &mut tokio::sync::broadcast::Receiver<ApprovalEvent>) -> ApprovalEvent {
    tokio::time::timeout(Duration::from_secs(ANNOUNCEMENT_WAIT_S), events.recv())
        .await
        .expect("an announcement in time")
        .expect("announcement")
}

/// Disabling an action, or deleting it, cancels (as the system, in the same transaction) every
/// approval parked on it: the approval is denied with origin `system`, the effect is rejected
/// and never becomes `ready`, and a later approval changes nothing. Other actions' approvals
/// are untouched.
pub async fn disabling_or_deleting_an_action_cancels_its_parked_approvals(store: Arc<dyn Store>) {
    let env = Env::new(&store, "cancel").await;
    let park = |action: ActionRecord, n: &'static str| {
        let env = &env;
        async move {
            let mut sub = env.submission(&action, json!({"parked": n}));
            sub.initial = EffectState::AwaitingApproval;
            sub.approval = Some(new_approval(&format!("park {n}"), None));
            let parked = expect_created(env.store.submit(&sub).await.expect("submit"));
            let approval = ApprovalId::parse(parked.approval_id.as_deref().expect("approval"))
                .expect("approval id");
            (parked, approval)
        }
    };
    let disabled = env
        .create_action(refund_definition(&unique("to-disable")))
        .await;
    let deleted = env
        .create_action(refund_definition(&unique("to-delete")))
        .await;
    let untouched = env
        .create_action(refund_definition(&unique("untouched")))
        .await;
    let (on_disabled, disabled_approval) = park(disabled.clone(), "disabled").await;
    let (on_deleted, deleted_approval) = park(deleted.clone(), "deleted").await;
    let (_, untouched_approval) = park(untouched.clone(), "untouched").await;

    let mut off = disabled.definition.clone();
    off.enabled = false;
    store
        .update_action(&env.id, &disabled.id, 1, &off, &env.actor(2_000))
        .await
        .expect("disable");
    assert!(store
        .delete_action(&env.id, &deleted.id, &env.actor(2_000))
        .await
        .expect("delete"));

    for (invocation, approval) in [
        (&on_disabled, &disabled_approval),
        (&on_deleted, &deleted_approval),
    ] {
        let a = store
            .approval(&env.id, approval)
            .await
            .expect("read")
            .expect("approval");
        assert_eq!(a.status, ApprovalStatus::Denied, "{approval}");
        assert_eq!(a.decision_origin.as_deref(), Some("system"), "{approval}");
        let inv = store
            .invocation(&env.id, &invocation.id)
            .await
            .expect("read")
            .expect("invocation");
        assert_eq!(
            inv.state,
            EffectState::Rejected {
                reason: Rejection::Denied
            },
            "{}",
            invocation.id
        );
        let approver = KeyId::from_unique(&unique("approver"));
        let late = store
            .decide_approval(
                &env.id,
                approval,
                &approver,
                Decision::Approve,
                None,
                Millis(3_000),
                &restarted(),
            )
            .await
            .expect("decide");
        assert!(
            !matches!(late, DecideOutcome::Recorded { ready: Some(_), .. }),
            "a cancelled approval must not release its effect: {late:?}"
        );
    }
    let other = store
        .approval(&env.id, &untouched_approval)
        .await
        .expect("read")
        .expect("approval");
    assert_eq!(other.status, ApprovalStatus::Pending);
}

/// The key that requested a parked invocation's approval withdraws it (MCP `tasks/cancel`
/// before dispatch): denied with origin `withdrawn`, audited as that key's, its effect rejected
/// and never `ready`; a later approval changes nothing and a second withdrawal is `Unchanged`.
/// Another key may not withdraw it, and an approval that ran out is expired, not withdrawn.
pub async fn the_requester_withdraws_a_parked_approval_and_nothing_runs(store: Arc<dyn Store>) {
    let env = Env::new(&store, "withdraw").await;
    let action = env
        .create_action(refund_definition(&unique("withdrawn")))
        .await;
    let park = |n: &'static str, expires_at: Option<Millis>| {
        let (env, action) = (&env, &action);
        async move {
            let mut sub = env.submission(action, json!({"parked": n}));
            sub.initial = EffectState::AwaitingApproval;
            sub.approval = Some(new_approval(&format!("park {n}"), expires_at));
            let parked = expect_created(env.store.submit(&sub).await.expect("submit"));
            let approval = ApprovalId::parse(parked.approval_id.as_deref().expect("approval"))
                .expect("approval id");
            (parked, approval)
        }
    };
    let (parked, approval) = park("one", None).await;

    let stranger = KeyId::from_unique(&unique("stranger"));
    let refused = store
        .withdraw_approval(&env.id, &approval, &stranger, Millis(2_000))
        .await
        .expect("withdraw by another key");
    assert!(matches!(refused, Withdrawal::NotRequester), "{refused:?}");
    let still = store.approval(&env.id, &approval).await.expect("read");
    assert_eq!(still.expect("approval").status, ApprovalStatus::Pending);

    let withdrawn = store
        .withdraw_approval(&env.id, &approval, &env.key, Millis(2_000))
        .await
        .expect("withdraw");
    let Withdrawal::Withdrawn(a) = withdrawn else {
        panic!("the requester's withdrawal must withdraw: {withdrawn:?}");
    };
    assert_eq!(a.status, ApprovalStatus::Denied);
    assert_eq!(a.decision_origin.as_deref(), Some(WITHDRAWN_ORIGIN));
    let inv = env.invocation(&parked.id).await;
    assert_eq!(
        inv.state,
        EffectState::Rejected {
            reason: Rejection::Denied
        }
    );
    let detail = env.effect(&parked.effect_id).await;
    assert!(
        detail
            .evidence
            .iter()
            .any(|e| e.message.contains("withdrew")),
        "the effect says why it was rejected: {:?}",
        detail.evidence
    );
    let events = all_audit_events(&store).await;
    assert!(
        events.iter().any(|e| e.subject == approval.as_str()
            && e.actor.as_deref() == Some(env.key.as_str())
            && e.after
                .as_ref()
                .is_some_and(|a| a.to_string().contains(WITHDRAWN_ORIGIN))),
        "the withdrawal is audited as the requester's"
    );

    let again = store
        .withdraw_approval(&env.id, &approval, &env.key, Millis(2_500))
        .await
        .expect("withdraw again");
    assert!(matches!(again, Withdrawal::Unchanged(_)), "{again:?}");
    let approver = KeyId::from_unique(&unique("approver"));
    let late = store
        .decide_approval(
            &env.id,
            &approval,
            &approver,
            Decision::Approve,
            None,
            Millis(3_000),
            &restarted(),
        )
        .await
        .expect("decide");
    assert!(
        !matches!(late, DecideOutcome::Recorded { ready: Some(_), .. }),
        "a withdrawn approval must not release its effect: {late:?}"
    );

    let (_, run_out) = park("run-out", Some(Millis(1_500))).await;
    let expired = store
        .withdraw_approval(&env.id, &run_out, &env.key, Millis(2_000))
        .await
        .expect("withdraw a run-out approval");
    let Withdrawal::Unchanged(a) = expired else {
        panic!("a run-out approval is expired, not withdrawn: {expired:?}");
    };
    assert_eq!(a.status, ApprovalStatus::Expired);

    let missing = ApprovalId::from_unique(&unique("missing"));
    let err = store
        .withdraw_approval(&env.id, &missing, &env.key, Millis(2_000))
        .await
        .expect_err("no such approval");
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");
}
