//! Approvals: requests, decisions, expiry. A decision and the parked effect's transition commit
//! together, so an approval can release its invocation exactly once.
//!
//! A decision locks its approval's row (`SELECT ... FOR UPDATE`) before it reads the tally, and
//! takes no write lock of its own: concurrent decisions on one approval are tallied one after
//! the other (READ COMMITTED: each statement after the row lock was granted sees every decision
//! committed before it), while decisions on different approvals run side by side. Everything
//! else that settles an approval locks its row first too (expiry, the cancellation of an
//! action's parked approvals), so a decision never moves an effect that one of them moved.
//! Changes are announced once committed (`notify`), not inside the transaction.

use super::audit_log::append;
use super::conn::Tx;
use super::conn::{in_transaction, Mode};
use super::effects::{change_effect, invocation};
use super::group::in_group;
use super::rows::{self, col, id, id_opt, int, int_opt, millis, millis_opt};
use super::PostgresStore;
use crate::approval_change::{
    after_ballot, check_first, decide_step, expired, requested_entry, settled_entry, withdraw_step,
    Binding, DecideStep, WithdrawAnswer, WithdrawStep, HUMAN_ORIGIN, WITHDRAWN_MESSAGE,
    WITHDRAWN_ORIGIN,
};
use crate::error::{StoreError, StoreResult};
use crate::input_edit::{edit_step, EditStep};
use crate::records::*;
use crate::store::Approvals;
use crate::{EditOutcome, EditRequest};
use async_trait::async_trait;
use steward_core::*;
use tokio::sync::broadcast;
use tokio_postgres::Row;

const INSERT_COLUMNS: &str = "id, env_id, status, title, description, payload, invocation_id, effect_id, action_id, action_version, input_fingerprint, requested_by, required_approvals, decision_origin, decided_at, expires_at, run_id, created_at";

/// What a read selects: [`INSERT_COLUMNS`], then the edit (`crate::input_edit`).
const COLUMNS: &str = "id, env_id, status, title, description, payload, invocation_id, effect_id, action_id, action_version, input_fingerprint, requested_by, required_approvals, decision_origin, decided_at, expires_at, run_id, created_at, edit";

fn decode(row: &Row) -> StoreResult<ApprovalRecord> {
    let status: &str = col(row, 2)?;
    Ok(ApprovalRecord {
        id: id(row, 0, ApprovalId::parse)?,
        env_id: id(row, 1, EnvironmentId::parse)?,
        status: ApprovalStatus::parse(status)
            .ok_or_else(|| rows::corrupt("approval status", status))?,
        title: col(row, 3)?,
        description: col(row, 4)?,
        payload: rows::json(row, 5, "payload")?,
        invocation_id: id_opt(row, 6, InvocationId::parse)?,
        effect_id: id_opt(row, 7, EffectId::parse)?,
        action_id: id_opt(row, 8, ActionId::parse)?,
        action_version: int_opt(row, 9)?,
        input_fingerprint: col(row, 10)?,
        requested_by: id(row, 11, KeyId::parse)?,
        required_approvals: int(row, 12)?,
        decision_origin: col(row, 13)?,
        decided_at: millis_opt(row, 14)?,
        expires_at: millis_opt(row, 15)?,
        run_id: col(row, 16)?,
        created_at: millis(row, 17)?,
        decisions: Vec::new(),
        edit: crate::input_edit::decode_approval_edit(col::<Option<&str>>(row, 18)?)
            .map_err(|e| rows::corrupt("approval edit", e))?,
    })
}

fn decode_decision(row: &Row) -> StoreResult<DecisionRecord> {
    let decision: &str = col(row, 1)?;
    Ok(DecisionRecord {
        key: id(row, 0, KeyId::parse)?,
        decision: match decision {
            "approve" => Decision::Approve,
            "deny" => Decision::Deny,
            other => return Err(rows::corrupt("decision", other)),
        },
        note: col(row, 2)?,
        at: millis(row, 3)?,
    })
}

async fn with_decisions(tx: &Tx<'_>, mut a: ApprovalRecord) -> StoreResult<ApprovalRecord> {
    a.decisions = tx
        .all(
            "SELECT key_id, decision, note, at FROM approval_decisions WHERE approval_id = $1 ORDER BY at, key_id",
            &[&a.id.as_str()],
            decode_decision,
        )
        .await?;
    Ok(a)
}

pub(crate) async fn approval(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    id: &ApprovalId,
) -> StoreResult<Option<ApprovalRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM approvals WHERE env_id = $1 AND id = $2");
    match tx.one(&sql, &[&env.as_str(), &id.as_str()], decode).await? {
        Some(a) => Ok(Some(with_decisions(tx, a).await?)),
        None => Ok(None),
    }
}

/// The approval, its row locked to the end of the transaction (a concurrent decision, expiry or
/// cancellation of it waits), with every decision committed before the lock was granted.
async fn locked_approval(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    id: &ApprovalId,
) -> StoreResult<Option<ApprovalRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM approvals WHERE env_id = $1 AND id = $2 FOR UPDATE");
    match tx.one(&sql, &[&env.as_str(), &id.as_str()], decode).await? {
        // A later statement: READ COMMITTED reads it after the lock was granted.
        Some(a) => Ok(Some(with_decisions(tx, a).await?)),
        None => Ok(None),
    }
}

/// The gated invocation `id` with what its dispatch reads, while it is still parked.
async fn parked(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    id: &InvocationId,
) -> StoreResult<Option<ParkedInvocation>> {
    let Some(invocation) = invocation(tx, env, id).await? else {
        return Ok(None);
    };
    if invocation.state != EffectState::AwaitingApproval {
        return Ok(None);
    }
    let Some(row) = tx
        .query_first(
            "SELECT e.provider_idempotency_key, v.definition
             FROM effects e JOIN action_versions v ON v.action_id = e.action_id AND v.version = $3
             WHERE e.env_id = $1 AND e.id = $2",
            &[
                &env.as_str(),
                &invocation.effect_id.as_str(),
                &i64::from(invocation.action_version),
            ],
        )
        .await?
    else {
        return Ok(None);
    };
    let definition = rows::definition(&row, 1)?;
    let mut secrets = Vec::new();
    for name in secrets_named_by(&definition) {
        secrets.extend(super::catalog::secret(tx, env, &name).await?);
    }
    Ok(Some(ParkedInvocation {
        provider_idempotency_key: col(&row, 0)?,
        definition,
        secrets,
        invocation,
    }))
}

pub(crate) async fn insert(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    a: &NewApproval,
    requested_by: &KeyId,
    binding: Option<Binding<'_>>,
    now: Millis,
) -> StoreResult<()> {
    let required = a.required_approvals.max(1);
    tx.execute_unique(
        "approval",
        &format!("INSERT INTO approvals ({INSERT_COLUMNS}) VALUES ($1, $2, 'pending', $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, NULL, NULL, $13, $14, $15)"),
        &[
            &a.id.as_str(), &env.as_str(), &a.title, &a.description, &a.payload.to_string(),
            &binding.as_ref().map(|b| b.invocation.as_str()), &binding.as_ref().map(|b| b.effect.as_str()),
            &binding.as_ref().map(|b| b.action.as_str()), &binding.as_ref().map(|b| i64::from(b.version)),
            &binding.as_ref().map(|b| b.input_fingerprint), &requested_by.as_str(), &i64::from(required),
            &a.expires_at.map(|t| t.0), &a.run_id, &now.0,
        ],
    )
    .await?;
    append(
        tx,
        &Actor::key(requested_by, now),
        requested_entry(env, a, binding.as_ref()),
    )
    .await
}

/// Moves a parked effect with `event`, recording why.
async fn move_effect(
    tx: &Tx<'_>,
    a: &ApprovalRecord,
    event: EffectEvent,
    message: String,
    actor: &Actor,
) -> StoreResult<()> {
    match crate::approval_change::effect_change(a, event, message, actor)? {
        Some(change) => change_effect(tx, &change).await,
        None => Ok(()),
    }
}

async fn settle(
    tx: &Tx<'_>,
    a: &ApprovalRecord,
    status: ApprovalStatus,
    origin: &str,
    actor: &Actor,
) -> StoreResult<()> {
    tx.execute(
        "UPDATE approvals SET status = $1, decision_origin = $2, decided_at = $3 WHERE id = $4 AND status = 'pending'",
        &[&status.as_str(), &origin, &actor.now.0, &a.id.as_str()],
    )
    .await?;
    append(tx, actor, settled_entry(a, status, origin)).await
}

/// Expires `a`, read with its row locked, and its parked effect. The caller announces it once
/// committed.
async fn expire_one(tx: &Tx<'_>, a: &ApprovalRecord, now: Millis) -> StoreResult<()> {
    let actor = Actor::system(now);
    settle(tx, a, ApprovalStatus::Expired, "system", &actor).await?;
    move_effect(
        tx,
        a,
        EffectEvent::Expire,
        "the approval expired before anyone decided; nothing was sent".into(),
        &actor,
    )
    .await
}

/// Announces a change of the approval to every replica listening
/// ([`super::notify::APPROVALS_CHANNEL`]) from inside the transaction: PostgreSQL delivers the
/// notification when it commits, and never if it rolls back. Only for the cancellations an
/// action change makes in its own transaction, which are rare; decisions and expiry are
/// announced once committed, by the store's announcer (see `notify` for why).
async fn announce(tx: &Tx<'_>, id: &ApprovalId) -> StoreResult<()> {
    tx.execute(
        "SELECT pg_notify($1, $2)",
        &[&super::notify::APPROVALS_CHANNEL, &id.as_str()],
    )
    .await?;
    Ok(())
}

/// Denies, as the system, every pending approval parking an invocation of `action`: called in
/// the transaction that disables or deletes the action, so approving later cannot run it.
pub(crate) async fn cancel_for_action(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    action: &ActionId,
    why: crate::approval_change::Cancellation,
    now: Millis,
) -> StoreResult<Vec<ApprovalId>> {
    let parked = tx
        .all(
            &format!("SELECT {COLUMNS} FROM approvals WHERE env_id = $1 AND action_id = $2 AND status = 'pending' FOR UPDATE"),
            &[&env.as_str(), &action.as_str()],
            decode,
        )
        .await?;
    let actor = Actor::system(now);
    for a in &parked {
        settle(tx, a, ApprovalStatus::Denied, "system", &actor).await?;
        announce(tx, &a.id).await?;
        move_effect(tx, a, EffectEvent::Deny, why.message().into(), &actor).await?;
    }
    Ok(parked.into_iter().map(|a| a.id).collect())
}

/// `requester` withdraws approval `id` in `tx` (see `Approvals::withdraw_approval`), with the
/// approval's row locked as a decision locks it.
async fn withdraw(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    id: &ApprovalId,
    requester: &KeyId,
    now: Millis,
) -> StoreResult<Withdrawal> {
    let a = locked_approval(tx, env, id)
        .await?
        .ok_or(StoreError::NotFound { what: "approval" })?;
    match withdraw_step(&a, requester, now) {
        WithdrawStep::Answer(WithdrawAnswer::NotRequester) => return Ok(Withdrawal::NotRequester),
        WithdrawStep::Answer(WithdrawAnswer::Unchanged) => return Ok(Withdrawal::Unchanged(a)),
        WithdrawStep::Expire => expire_one(tx, &a, now).await?,
        WithdrawStep::Withdraw => {
            let actor = Actor::key(requester, now);
            settle(tx, &a, ApprovalStatus::Denied, WITHDRAWN_ORIGIN, &actor).await?;
            move_effect(tx, &a, EffectEvent::Deny, WITHDRAWN_MESSAGE.into(), &actor).await?;
        }
    }
    let after = approval(tx, env, id)
        .await?
        .ok_or(StoreError::NotFound { what: "approval" })?;
    Ok(match after.decision_origin.as_deref() {
        Some(WITHDRAWN_ORIGIN) if a.status == ApprovalStatus::Pending => {
            Withdrawal::Withdrawn(after)
        }
        _ => Withdrawal::Unchanged(after),
    })
}

/// Casts `r` in `tx` and, when it releases the parked invocation, begins `first` there too (see
/// `Approvals::decide_and_begin`).
async fn decide(
    tx: &Tx<'_>,
    r: &DecisionRequest,
    first: Option<&FirstAttempt>,
) -> StoreResult<Decided> {
    let (env, id, now) = (&r.env_id, &r.approval_id, r.now);
    let a = locked_approval(tx, env, id)
        .await?
        .ok_or(StoreError::NotFound { what: "approval" })?;
    let ballot = match decide_step(&a, r) {
        DecideStep::Answer(decided) => return Ok(*decided),
        DecideStep::Expire => {
            expire_one(tx, &a, now).await?;
            let a = approval(tx, env, id).await?;
            return Ok(expired(a.ok_or(StoreError::NotFound { what: "approval" })?));
        }
        DecideStep::Record(ballot) => ballot,
    };
    let first = first.filter(|_| ballot.releases);
    if let Some(first) = first {
        check_first(&a, r, first)?;
    }
    tx.execute(
        "INSERT INTO approval_decisions (approval_id, key_id, decision, note, at) VALUES ($1, $2, $3, $4, $5)",
        &[&id.as_str(), &r.key.as_str(), &ballot.word, &r.note, &now.0],
    )
    .await?;
    let actor = Actor::key(&r.key, now);
    append(tx, &actor, ballot.entry).await?;
    if ballot.status != ApprovalStatus::Pending {
        settle(tx, &a, ballot.status, HUMAN_ORIGIN, &actor).await?;
    }
    if let Some((event, message)) = ballot.effect {
        move_effect(tx, &a, event, message, &actor).await?;
    }
    let (mut ready, mut begun) = (None, None);
    if ballot.releases {
        if let Some(inv) = &a.invocation_id {
            ready = invocation(tx, env, inv).await?.map(Box::new);
        }
        if let Some(first) = first {
            begun = Some(begin_first(tx, first).await?);
        }
        match (&a.effect_id, &begun) {
            // The attempt recorded its owner, the deciding replica, with itself.
            (_, Some(FirstAttemptOutcome::Begun)) | (None, _) => {}
            (Some(effect), _) => {
                // The deciding replica dispatches the released effect: it owns it now.
                tx.execute(
                    "UPDATE effects SET owner = $1 WHERE id = $2",
                    &[&r.replica.as_str(), &effect.as_str()],
                )
                .await?;
            }
        }
    }
    Ok(Decided {
        outcome: DecideOutcome::Recorded {
            approval: after_ballot(a, r, ballot.status),
            ready,
        },
        first: begun,
    })
}

/// Records edit `r` in `tx`, the approval's row locked (see `Approvals::edit_approval`).
async fn edit(tx: &Tx<'_>, r: &EditRequest) -> StoreResult<EditOutcome> {
    let (env, id) = (&r.env_id, &r.approval_id);
    let a = locked_approval(tx, env, id)
        .await?
        .ok_or(StoreError::NotFound { what: "approval" })?;
    let parked = match &a.invocation_id {
        Some(inv) => invocation(tx, env, inv).await?,
        None => None,
    };
    let write = match edit_step(&a, parked.as_ref(), r) {
        EditStep::Answer(outcome) => return Ok(*outcome),
        EditStep::Expire => {
            expire_one(tx, &a, r.now).await?;
            let a = approval(tx, env, id).await?;
            return Ok(EditOutcome::Expired(
                a.ok_or(StoreError::NotFound { what: "approval" })?,
            ));
        }
        EditStep::Write(write) => write,
    };
    let inv = parked.ok_or(StoreError::NotFound { what: "invocation" })?;
    let moved = tx
        .execute(
            "UPDATE invocations SET edited_input = $1, input_edit = $2 WHERE id = $3 AND env_id = $4 AND state = 'awaiting_approval'",
            &[&r.input.to_string(), &write.invocation_edit, &inv.id.as_str(), &env.as_str()],
        )
        .await?;
    assert_eq!(
        moved, 1,
        "invocation {} of approval {} is parked",
        inv.id, a.id
    );
    tx.execute(
        "UPDATE approvals SET input_fingerprint = $1, edit = $2, payload = $3 WHERE id = $4 AND status = 'pending'",
        &[&r.input_fingerprint, &write.approval_edit, &write.payload, &id.as_str()],
    )
    .await?;
    tx.execute(
        "DELETE FROM approval_decisions WHERE approval_id = $1",
        &[&id.as_str()],
    )
    .await?;
    append(tx, &Actor::key(&r.key, r.now), write.entry).await?;
    let approval = approval(tx, env, id)
        .await?
        .ok_or(StoreError::NotFound { what: "approval" })?;
    let invocation = invocation(tx, env, &inv.id)
        .await?
        .ok_or(StoreError::NotFound { what: "invocation" })?;
    Ok(EditOutcome::Edited {
        approval,
        invocation: Box::new(invocation),
    })
}

/// The released effect's first attempt, as `submit_and_begin` records a fresh one: the impact
/// reservation, then the attempt; a refusal or a halt records no attempt.
async fn begin_first(tx: &Tx<'_>, first: &FirstAttempt) -> StoreResult<FirstAttemptOutcome> {
    let reserved = super::limits::reserve(tx, &first.impact).await?;
    if matches!(reserved, crate::ReserveOutcome::Refused { .. }) {
        return Ok(FirstAttemptOutcome::Refused(reserved));
    }
    match change_effect(tx, &first.begin).await {
        Ok(()) => Ok(FirstAttemptOutcome::Begun),
        Err(StoreError::Halted) => Ok(FirstAttemptOutcome::Halted),
        Err(StoreError::Held) => Ok(FirstAttemptOutcome::Held),
        Err(e) => Err(e),
    }
}

#[async_trait]
impl Approvals for PostgresStore {
    async fn create_approval(
        &self,
        env: &EnvironmentId,
        request: &NewApproval,
        requested_by: &KeyId,
        now: Millis,
    ) -> StoreResult<ApprovalRecord> {
        in_transaction!(self, Mode::Write, |tx| async {
            let a = request;
            insert(&tx, env, a, requested_by, None, now).await?;
            approval(&tx, env, &a.id)
                .await?
                .ok_or(StoreError::NotFound { what: "approval" })
        })
    }

    async fn approval(
        &self,
        env: &EnvironmentId,
        id: &ApprovalId,
    ) -> StoreResult<Option<ApprovalRecord>> {
        in_transaction!(self, Mode::Read, |tx| approval(&tx, env, id))
    }

    async fn list_approvals(
        &self,
        env: &EnvironmentId,
        filter: &ApprovalFilter,
    ) -> StoreResult<Page<ApprovalRecord>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let f = filter;
            let status = f.status.map(|s| s.as_str());
            let origins: Option<Vec<&str>> = f
                .origins
                .as_ref()
                .map(|list| list.iter().map(String::as_str).collect());
            let filter = "env_id = $1 AND ($2::text IS NULL OR status = $2)
                  AND ($3::text[] IS NULL OR decision_origin = ANY($3))";
            let total = tx
                .count(
                    &format!("SELECT COUNT(*) FROM approvals WHERE {filter}"),
                    &[&env.as_str(), &status, &origins],
                )
                .await?;
            let sql = format!("SELECT {COLUMNS} FROM approvals WHERE {filter} ORDER BY created_at DESC, id DESC LIMIT $4 OFFSET $5");
            let found = tx
                .all(
                    &sql,
                    &[
                        &env.as_str(),
                        &status,
                        &origins,
                        &i64::from(f.limit),
                        &i64::from(f.offset),
                    ],
                    decode,
                )
                .await?;
            let mut items = Vec::with_capacity(found.len());
            for a in found {
                items.push(with_decisions(&tx, a).await?);
            }
            Ok(Page {
                items,
                total: total as u64,
            })
        })
    }

    async fn decide_and_begin(
        &self,
        request: &DecisionRequest,
        first: Option<&FirstAttempt>,
    ) -> StoreResult<Decided> {
        // No write lock: the approval's row lock orders decisions on it (see the module's doc).
        // The released attempt takes what `change_effect` and the reservation take.
        let decided = in_group!(self, |tx| decide(&tx, request, first))?;
        if matches!(
            decided.outcome,
            DecideOutcome::Recorded { .. } | DecideOutcome::Expired(_)
        ) {
            self.announcer.announce(request.approval_id.clone());
        }
        Ok(decided)
    }

    async fn edit_approval(&self, request: &EditRequest) -> StoreResult<EditOutcome> {
        let edited = in_transaction!(self, Mode::WriteConcurrent, |tx| edit(&tx, request))?;
        if matches!(edited, EditOutcome::Edited { .. } | EditOutcome::Expired(_)) {
            self.announcer.announce(request.approval_id.clone());
        }
        Ok(edited)
    }

    async fn release_context(
        &self,
        env: &EnvironmentId,
        id: &ApprovalId,
    ) -> StoreResult<Option<ReleaseContext>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let Some(approval) = approval(&tx, env, id).await? else {
                return Ok(None);
            };
            let parked = match &approval.invocation_id {
                Some(invocation) => parked(&tx, env, invocation).await?,
                None => None,
            };
            Ok(Some(ReleaseContext { approval, parked }))
        })
    }

    async fn withdraw_approval(
        &self,
        env: &EnvironmentId,
        id: &ApprovalId,
        requester: &KeyId,
        now: Millis,
    ) -> StoreResult<Withdrawal> {
        let withdrawn = in_transaction!(self, Mode::WriteConcurrent, |tx| withdraw(
            &tx, env, id, requester, now
        ))?;
        if !matches!(withdrawn, Withdrawal::NotRequester) {
            self.announcer.announce(id.clone());
        }
        Ok(withdrawn)
    }

    async fn expire_approvals(&self, now: Millis) -> StoreResult<Vec<ApprovalId>> {
        // Each due approval's row is locked, and one a decision (or another replica's expiry)
        // holds is skipped: that decision finds it run out and expires it itself, or the next
        // expiry takes it. So each approval expires once, and no write lock is needed.
        let expired = in_transaction!(self, Mode::WriteConcurrent, |tx| async {
            let due = tx
                .all(
                    &format!("SELECT {COLUMNS} FROM approvals WHERE status = 'pending' AND expires_at IS NOT NULL AND expires_at <= $1 ORDER BY id FOR UPDATE SKIP LOCKED"),
                    &[&now.0],
                    decode,
                )
                .await?;
            for a in &due {
                expire_one(&tx, a, now).await?;
            }
            Ok(due.into_iter().map(|a| a.id).collect::<Vec<_>>())
        })?;
        for id in &expired {
            self.announcer.announce(id.clone());
        }
        Ok(expired)
    }

    fn approval_events(&self) -> Option<broadcast::Receiver<ApprovalEvent>> {
        Some(self.announcements.subscribe())
    }
}
