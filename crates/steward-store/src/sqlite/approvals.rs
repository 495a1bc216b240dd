//! Approvals: requests, decisions, expiry. A decision and the parked effect's transition commit
//! together, so an approval can release its invocation exactly once. The store has one writer,
//! so decisions on one approval are tallied one after the other.

use super::audit_log::append;
use super::conn::{unavailable, CachedQuery};
use super::effects::{change_effect, invocation};
use super::rows::{self, col, query_all, query_one};
use super::SqliteStore;
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
use rusqlite::{params, Connection, Row, Transaction};
use steward_core::*;

const INSERT_COLUMNS: &str = "id, env_id, status, title, description, payload, invocation_id, effect_id, action_id, action_version, input_fingerprint, requested_by, required_approvals, decision_origin, decided_at, expires_at, run_id, created_at";

/// What a read selects: [`INSERT_COLUMNS`], then the edit (`crate::input_edit`).
const COLUMNS: &str = "id, env_id, status, title, description, payload, invocation_id, effect_id, action_id, action_version, input_fingerprint, requested_by, required_approvals, decision_origin, decided_at, expires_at, run_id, created_at, edit";

fn parse<T>(raw: String, f: fn(&str) -> Result<T, IdError>) -> StoreResult<T> {
    f(&raw).map_err(|e| rows::corrupt("id", e))
}

fn decode(row: &Row<'_>) -> StoreResult<ApprovalRecord> {
    let status: String = col(row, 2)?;
    let payload: String = col(row, 5)?;
    Ok(ApprovalRecord {
        id: parse(col(row, 0)?, ApprovalId::parse)?,
        env_id: parse(col(row, 1)?, EnvironmentId::parse)?,
        status: ApprovalStatus::parse(&status)
            .ok_or_else(|| rows::corrupt("approval status", &status))?,
        title: col(row, 3)?,
        description: col(row, 4)?,
        payload: serde_json::from_str(&payload).map_err(|e| rows::corrupt("payload", e))?,
        invocation_id: col::<Option<String>>(row, 6)?
            .map(|v| parse(v, InvocationId::parse))
            .transpose()?,
        effect_id: col::<Option<String>>(row, 7)?
            .map(|v| parse(v, EffectId::parse))
            .transpose()?,
        action_id: col::<Option<String>>(row, 8)?
            .map(|v| parse(v, ActionId::parse))
            .transpose()?,
        action_version: col(row, 9)?,
        input_fingerprint: col(row, 10)?,
        requested_by: parse(col(row, 11)?, KeyId::parse)?,
        required_approvals: col(row, 12)?,
        decision_origin: col(row, 13)?,
        decided_at: col::<Option<i64>>(row, 14)?.map(Millis),
        expires_at: col::<Option<i64>>(row, 15)?.map(Millis),
        run_id: col(row, 16)?,
        created_at: Millis(col(row, 17)?),
        decisions: Vec::new(),
        edit: crate::input_edit::decode_approval_edit(col::<Option<String>>(row, 18)?.as_deref())
            .map_err(|e| rows::corrupt("approval edit", e))?,
    })
}

fn with_decisions(conn: &Connection, mut a: ApprovalRecord) -> StoreResult<ApprovalRecord> {
    a.decisions = query_all(
        conn,
        "SELECT key_id, decision, note, at FROM approval_decisions WHERE approval_id = ?1 ORDER BY at, key_id",
        &[&a.id.as_str()],
        |row| {
            let decision: String = col(row, 1)?;
            Ok(DecisionRecord {
                key: parse(col(row, 0)?, KeyId::parse)?,
                decision: match decision.as_str() {
                    "approve" => Decision::Approve,
                    "deny" => Decision::Deny,
                    other => return Err(rows::corrupt("decision", other)),
                },
                note: col(row, 2)?,
                at: Millis(col(row, 3)?),
            })
        },
    )?;
    Ok(a)
}

pub(crate) fn approval(
    conn: &Connection,
    env: &EnvironmentId,
    id: &ApprovalId,
) -> StoreResult<Option<ApprovalRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM approvals WHERE env_id = ?1 AND id = ?2");
    query_one(conn, &sql, &[&env.as_str(), &id.as_str()], decode)?
        .map(|a| with_decisions(conn, a))
        .transpose()
}

pub(crate) fn insert(
    tx: &Transaction<'_>,
    env: &EnvironmentId,
    a: &NewApproval,
    requested_by: &KeyId,
    binding: Option<Binding<'_>>,
    now: Millis,
) -> StoreResult<()> {
    super::conn::execute_cached(
        tx,
        &format!("INSERT INTO approvals ({INSERT_COLUMNS}) VALUES (?1, ?2, 'pending', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, NULL, NULL, ?13, ?14, ?15)"),
        params![
            a.id.as_str(), env.as_str(), a.title, a.description, a.payload.to_string(),
            binding.as_ref().map(|b| b.invocation.as_str()), binding.as_ref().map(|b| b.effect.as_str()),
            binding.as_ref().map(|b| b.action.as_str()), binding.as_ref().map(|b| b.version),
            binding.as_ref().map(|b| b.input_fingerprint), requested_by.as_str(), a.required_approvals.max(1),
            a.expires_at.map(|t| t.0), a.run_id, now.0
        ],
    )
    .map_err(|e| super::conn::constraint(e, "approval"))?;
    append(
        tx,
        &Actor::key(requested_by, now),
        requested_entry(env, a, binding.as_ref()),
    )
}

/// Moves a parked effect with `event`, recording why.
fn move_effect(
    tx: &Transaction<'_>,
    a: &ApprovalRecord,
    event: EffectEvent,
    message: String,
    actor: &Actor,
) -> StoreResult<()> {
    match crate::approval_change::effect_change(a, event, message, actor)? {
        Some(change) => change_effect(tx, &change),
        None => Ok(()),
    }
}

fn settle(
    tx: &Transaction<'_>,
    a: &ApprovalRecord,
    status: ApprovalStatus,
    origin: &str,
    actor: &Actor,
) -> StoreResult<()> {
    super::conn::execute_cached(
        tx,
        "UPDATE approvals SET status = ?1, decision_origin = ?2, decided_at = ?3 WHERE id = ?4 AND status = 'pending'",
        params![status.as_str(), origin, actor.now.0, a.id.as_str()],
    )
    .map_err(unavailable)?;
    append(tx, actor, settled_entry(a, status, origin))
}

fn expire_one(tx: &Transaction<'_>, a: &ApprovalRecord, now: Millis) -> StoreResult<()> {
    let actor = Actor::system(now);
    settle(tx, a, ApprovalStatus::Expired, "system", &actor)?;
    move_effect(
        tx,
        a,
        EffectEvent::Expire,
        "the approval expired before anyone decided; nothing was sent".into(),
        &actor,
    )
}

/// Denies, as the system, every pending approval parking an invocation of `action`: called in
/// the transaction that disables or deletes the action, so approving later cannot run it.
pub(crate) fn cancel_for_action(
    tx: &Transaction<'_>,
    env: &EnvironmentId,
    action: &ActionId,
    why: crate::approval_change::Cancellation,
    now: Millis,
) -> StoreResult<Vec<ApprovalId>> {
    let parked = query_all(
        tx,
        &format!("SELECT {COLUMNS} FROM approvals WHERE env_id = ?1 AND action_id = ?2 AND status = 'pending'"),
        &[&env.as_str(), &action.as_str()],
        decode,
    )?;
    let actor = Actor::system(now);
    for a in &parked {
        settle(tx, a, ApprovalStatus::Denied, "system", &actor)?;
        move_effect(tx, a, EffectEvent::Deny, why.message().into(), &actor)?;
    }
    Ok(parked.into_iter().map(|a| a.id).collect())
}

/// `requester` withdraws approval `id` in `tx` (see `Approvals::withdraw_approval`).
fn withdraw(
    tx: &Transaction<'_>,
    env: &EnvironmentId,
    id: &ApprovalId,
    requester: &KeyId,
    now: Millis,
) -> StoreResult<Withdrawal> {
    let a = approval(tx, env, id)?.ok_or(StoreError::NotFound { what: "approval" })?;
    match withdraw_step(&a, requester, now) {
        WithdrawStep::Answer(WithdrawAnswer::NotRequester) => return Ok(Withdrawal::NotRequester),
        WithdrawStep::Answer(WithdrawAnswer::Unchanged) => return Ok(Withdrawal::Unchanged(a)),
        WithdrawStep::Expire => expire_one(tx, &a, now)?,
        WithdrawStep::Withdraw => {
            let actor = Actor::key(requester, now);
            settle(tx, &a, ApprovalStatus::Denied, WITHDRAWN_ORIGIN, &actor)?;
            move_effect(tx, &a, EffectEvent::Deny, WITHDRAWN_MESSAGE.into(), &actor)?;
        }
    }
    let after = approval(tx, env, id)?.ok_or(StoreError::NotFound { what: "approval" })?;
    Ok(match after.decision_origin.as_deref() {
        Some(WITHDRAWN_ORIGIN) if a.status == ApprovalStatus::Pending => {
            Withdrawal::Withdrawn(after)
        }
        _ => Withdrawal::Unchanged(after),
    })
}

/// The gated invocation `id` with what its dispatch reads, while it is still parked.
fn parked(
    conn: &Connection,
    env: &EnvironmentId,
    id: &InvocationId,
) -> StoreResult<Option<ParkedInvocation>> {
    let Some(invocation) = invocation(conn, env, id)? else {
        return Ok(None);
    };
    if invocation.state != EffectState::AwaitingApproval {
        return Ok(None);
    }
    let found = query_one(
        conn,
        "SELECT e.provider_idempotency_key, v.definition
         FROM effects e JOIN action_versions v ON v.action_id = e.action_id AND v.version = ?3
         WHERE e.env_id = ?1 AND e.id = ?2",
        &[
            &env.as_str(),
            &invocation.effect_id.as_str(),
            &invocation.action_version,
        ],
        |row| Ok((col::<Option<String>>(row, 0)?, col::<String>(row, 1)?)),
    )?;
    let Some((provider_idempotency_key, raw)) = found else {
        return Ok(None);
    };
    let definition = rows::definition(&raw)?;
    let mut secrets = Vec::new();
    for name in secrets_named_by(&definition) {
        secrets.extend(super::catalog::secret(conn, env, &name)?);
    }
    Ok(Some(ParkedInvocation {
        invocation,
        provider_idempotency_key,
        definition,
        secrets,
    }))
}

/// Casts `r` in `tx` and, when it releases the parked invocation, begins `first` there too (see
/// `Approvals::decide_and_begin`).
fn decide(
    tx: &Transaction<'_>,
    r: &DecisionRequest,
    first: Option<&FirstAttempt>,
) -> StoreResult<Decided> {
    let (env, id, now) = (&r.env_id, &r.approval_id, r.now);
    let a = approval(tx, env, id)?.ok_or(StoreError::NotFound { what: "approval" })?;
    let ballot = match decide_step(&a, r) {
        DecideStep::Answer(decided) => return Ok(*decided),
        DecideStep::Expire => {
            expire_one(tx, &a, now)?;
            let a = approval(tx, env, id)?;
            return Ok(expired(a.ok_or(StoreError::NotFound { what: "approval" })?));
        }
        DecideStep::Record(ballot) => ballot,
    };
    let first = first.filter(|_| ballot.releases);
    if let Some(first) = first {
        check_first(&a, r, first)?;
    }
    super::conn::execute_cached(
        tx,
        "INSERT INTO approval_decisions (approval_id, key_id, decision, note, at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![id.as_str(), r.key.as_str(), ballot.word, r.note, now.0],
    )
    .map_err(unavailable)?;
    let actor = Actor::key(&r.key, now);
    append(tx, &actor, ballot.entry)?;
    if ballot.status != ApprovalStatus::Pending {
        settle(tx, &a, ballot.status, HUMAN_ORIGIN, &actor)?;
    }
    if let Some((event, message)) = ballot.effect {
        move_effect(tx, &a, event, message, &actor)?;
    }
    let (mut ready, mut begun) = (None, None);
    if ballot.releases {
        if let Some(inv) = &a.invocation_id {
            ready = invocation(tx, env, inv)?.map(Box::new);
        }
        if let Some(first) = first {
            begun = Some(begin_first(tx, first)?);
        }
        match (&a.effect_id, &begun) {
            // The attempt recorded its owner, the deciding replica, with itself.
            (_, Some(FirstAttemptOutcome::Begun)) | (None, _) => {}
            (Some(effect), _) => {
                // The deciding replica dispatches the released effect: it owns it now.
                super::conn::execute_cached(
                    tx,
                    "UPDATE effects SET owner = ?1 WHERE id = ?2",
                    params![r.replica.as_str(), effect.as_str()],
                )
                .map_err(unavailable)?;
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

/// Records edit `r` in `tx` (see `Approvals::edit_approval`).
fn edit(tx: &Transaction<'_>, r: &EditRequest) -> StoreResult<EditOutcome> {
    let (env, id) = (&r.env_id, &r.approval_id);
    let a = approval(tx, env, id)?.ok_or(StoreError::NotFound { what: "approval" })?;
    let parked = match &a.invocation_id {
        Some(inv) => invocation(tx, env, inv)?,
        None => None,
    };
    let write = match edit_step(&a, parked.as_ref(), r) {
        EditStep::Answer(outcome) => return Ok(*outcome),
        EditStep::Expire => {
            expire_one(tx, &a, r.now)?;
            let a = approval(tx, env, id)?;
            return Ok(EditOutcome::Expired(
                a.ok_or(StoreError::NotFound { what: "approval" })?,
            ));
        }
        EditStep::Write(write) => write,
    };
    let inv = parked.ok_or(StoreError::NotFound { what: "invocation" })?;
    let moved = super::conn::execute_cached(
        tx,
        "UPDATE invocations SET edited_input = ?1, input_edit = ?2 WHERE id = ?3 AND env_id = ?4 AND state = 'awaiting_approval'",
        params![r.input.to_string(), write.invocation_edit, inv.id.as_str(), env.as_str()],
    )
    .map_err(unavailable)?;
    assert_eq!(
        moved, 1,
        "invocation {} of approval {} is parked",
        inv.id, a.id
    );
    super::conn::execute_cached(
        tx,
        "UPDATE approvals SET input_fingerprint = ?1, edit = ?2, payload = ?3 WHERE id = ?4 AND status = 'pending'",
        params![r.input_fingerprint, write.approval_edit, write.payload, id.as_str()],
    )
    .map_err(unavailable)?;
    super::conn::execute_cached(
        tx,
        "DELETE FROM approval_decisions WHERE approval_id = ?1",
        params![id.as_str()],
    )
    .map_err(unavailable)?;
    append(tx, &Actor::key(&r.key, r.now), write.entry)?;
    let approval = approval(tx, env, id)?.ok_or(StoreError::NotFound { what: "approval" })?;
    let invocation =
        invocation(tx, env, &inv.id)?.ok_or(StoreError::NotFound { what: "invocation" })?;
    Ok(EditOutcome::Edited {
        approval,
        invocation: Box::new(invocation),
    })
}

/// The released effect's first attempt, as `submit_and_begin` records a fresh one: the impact
/// reservation, then the attempt; a refusal or a halt records no attempt.
fn begin_first(tx: &Transaction<'_>, first: &FirstAttempt) -> StoreResult<FirstAttemptOutcome> {
    let reserved = super::limits::reserve(tx, &first.impact)?;
    if matches!(reserved, crate::ReserveOutcome::Refused { .. }) {
        return Ok(FirstAttemptOutcome::Refused(reserved));
    }
    match change_effect(tx, &first.begin) {
        Ok(()) => Ok(FirstAttemptOutcome::Begun),
        Err(StoreError::Halted) => Ok(FirstAttemptOutcome::Halted),
        Err(StoreError::Held) => Ok(FirstAttemptOutcome::Held),
        Err(e) => Err(e),
    }
}

#[async_trait]
impl Approvals for SqliteStore {
    async fn create_approval(
        &self,
        env: &EnvironmentId,
        request: &NewApproval,
        requested_by: &KeyId,
        now: Millis,
    ) -> StoreResult<ApprovalRecord> {
        let (env, a, requested_by) = (env.clone(), request.clone(), requested_by.clone());
        self.write(move |tx| {
            insert(tx, &env, &a, &requested_by, None, now)?;
            approval(tx, &env, &a.id)?.ok_or(StoreError::NotFound { what: "approval" })
        })
        .await
    }

    async fn approval(
        &self,
        env: &EnvironmentId,
        id: &ApprovalId,
    ) -> StoreResult<Option<ApprovalRecord>> {
        let (env, id) = (env.clone(), id.clone());
        self.read(move |conn| approval(conn, &env, &id)).await
    }

    async fn list_approvals(
        &self,
        env: &EnvironmentId,
        filter: &ApprovalFilter,
    ) -> StoreResult<Page<ApprovalRecord>> {
        let (env, f) = (env.clone(), filter.clone());
        self.read(move |conn| {
            let status = f.status.map(|s| s.as_str());
            let origin_clause = match &f.origins {
                None => String::new(),
                Some(list) if list.is_empty() => " AND 0".into(),
                Some(list) => {
                    let quoted: Vec<String> = list
                        .iter()
                        .filter(|o| o.bytes().all(|b| b.is_ascii_lowercase()))
                        .map(|o| format!("'{o}'"))
                        .collect();
                    format!(" AND decision_origin IN ({})", quoted.join(","))
                }
            };
            let filter = format!("env_id = ?1 AND (?2 IS NULL OR status = ?2){origin_clause}");
            let total: i64 = conn
                .query_row_cached(
                    &format!("SELECT COUNT(*) FROM approvals WHERE {filter}"),
                    params![env.as_str(), status],
                    |r| r.get(0),
                )
                .map_err(unavailable)?;
            let sql = format!("SELECT {COLUMNS} FROM approvals WHERE {filter} ORDER BY created_at DESC, id DESC LIMIT ?3 OFFSET ?4");
            let items = query_all(
                conn,
                &sql,
                &[&env.as_str(), &status, &f.limit, &f.offset],
                decode,
            )?
            .into_iter()
            .map(|a| with_decisions(conn, a))
            .collect::<StoreResult<Vec<_>>>()?;
            Ok(Page {
                items,
                total: total as u64,
            })
        })
        .await
    }

    async fn decide_and_begin(
        &self,
        request: &DecisionRequest,
        first: Option<&FirstAttempt>,
    ) -> StoreResult<Decided> {
        let (r, first) = (request.clone(), first.cloned());
        self.write(move |tx| decide(tx, &r, first.as_ref())).await
    }

    async fn edit_approval(&self, request: &EditRequest) -> StoreResult<EditOutcome> {
        let r = request.clone();
        self.write(move |tx| edit(tx, &r)).await
    }

    async fn release_context(
        &self,
        env: &EnvironmentId,
        id: &ApprovalId,
    ) -> StoreResult<Option<ReleaseContext>> {
        let (env, id) = (env.clone(), id.clone());
        self.read(move |conn| {
            let Some(approval) = approval(conn, &env, &id)? else {
                return Ok(None);
            };
            let parked = match &approval.invocation_id {
                Some(invocation) => parked(conn, &env, invocation)?,
                None => None,
            };
            Ok(Some(ReleaseContext { approval, parked }))
        })
        .await
    }

    async fn withdraw_approval(
        &self,
        env: &EnvironmentId,
        id: &ApprovalId,
        requester: &KeyId,
        now: Millis,
    ) -> StoreResult<Withdrawal> {
        let (env, id, requester) = (env.clone(), id.clone(), requester.clone());
        self.write(move |tx| withdraw(tx, &env, &id, &requester, now))
            .await
    }

    async fn expire_approvals(&self, now: Millis) -> StoreResult<Vec<ApprovalId>> {
        self.write(move |tx| {
            let due = query_all(
                tx,
                &format!("SELECT {COLUMNS} FROM approvals WHERE status = 'pending' AND expires_at IS NOT NULL AND expires_at <= ?1"),
                &[&now.0],
                decode,
            )?;
            for a in &due {
                expire_one(tx, a, now)?;
            }
            Ok(due.into_iter().map(|a| a.id).collect())
        })
        .await
    }
}
