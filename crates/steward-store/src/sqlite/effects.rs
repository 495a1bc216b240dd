//! Invocations and effects: the invoke write path's records.

use super::audit_log::append;
use super::conn::{unavailable, CachedQuery};
use super::identity::{environment, key_by_hash};
use super::rows::{self, query_all, query_one};
use super::SqliteStore;
use crate::change_plan::{ChangePlan, EvidenceRow};
use crate::error::{StoreError, StoreResult};
use crate::records::*;
use crate::store::Effects;
use crate::submit::{verdict, Facts, Verdict};
use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde_json::Value;
use steward_core::impact::ReservationState;
use steward_core::{
    ActionId, EffectId, EffectState, EnvironmentId, IdempotencyKey, InvocationId, KeyId,
    OperationKey, ReplicaId,
};
use steward_core::{LimitId, Millis};

pub(crate) fn invocation(
    conn: &Connection,
    env: &EnvironmentId,
    id: &InvocationId,
) -> StoreResult<Option<InvocationRecord>> {
    let sql = format!(
        "SELECT {} FROM invocations WHERE env_id = ?1 AND id = ?2",
        rows::INVOCATION_COLUMNS
    );
    query_one(conn, &sql, &[&env.as_str(), &id.as_str()], rows::invocation)
}

pub(crate) fn must_invocation(
    conn: &Connection,
    env: &EnvironmentId,
    id: &str,
) -> StoreResult<InvocationRecord> {
    let id = InvocationId::parse(id).map_err(|e| rows::corrupt("invocation id", e))?;
    invocation(conn, env, &id)?.ok_or(StoreError::NotFound { what: "invocation" })
}

/// What [`verdict`] needs to decide a submission, read in its transaction.
fn facts(tx: &Transaction<'_>, s: &Submission) -> StoreResult<Facts> {
    let env = &s.env_id;
    let mut facts = Facts::default();
    if let Some(key) = &s.idempotency_key {
        facts.earlier = super::idempotency::earlier(tx, env, &s.actor, key)?;
        if facts.settled_by_earlier() {
            return Ok(facts);
        }
    }
    if let Some(prior) = &s.retry_of {
        facts.retried = Some(invocation(tx, env, prior)?);
        let retry: Option<String> = tx
            .query_row_cached(
                "SELECT id FROM invocations WHERE env_id = ?1 AND retry_of = ?2",
                params![env.as_str(), prior.as_str()],
                |r| r.get(0),
            )
            .optional()
            .map_err(unavailable)?;
        facts.existing_retry = retry.map(|id| must_invocation(tx, env, &id)).transpose()?;
    }
    if let Some(op) = &s.operation_key {
        let existing: Option<(String, String)> = tx
            .query_row_cached(
                "SELECT e.id, e.invocation_id FROM effects e
                 WHERE e.env_id = ?1 AND e.action_id = ?2 AND e.operation_key = ?3",
                params![env.as_str(), s.action.id.as_str(), op.as_str()],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(unavailable)?;
        if let Some((effect_id, invocation_id)) = existing {
            let effect_id =
                EffectId::parse(&effect_id).map_err(|e| rows::corrupt("effect id", e))?;
            facts.by_operation_key = Some((effect_id, must_invocation(tx, env, &invocation_id)?));
        }
    }
    Ok(facts)
}

pub(crate) fn submit(tx: &Transaction<'_>, s: &Submission) -> StoreResult<SubmitOutcome> {
    match verdict(s, facts(tx, s)?) {
        Verdict::Answer(outcome) => return Ok(outcome),
        Verdict::Existing(found) => {
            if let Some(key) = &s.idempotency_key {
                record_invoke_key(tx, s, key, &found.id, "done")?;
            }
            return Ok(SubmitOutcome::Existing(found));
        }
        Verdict::Create => {}
    }
    if let Some(refused) = super::budgets::admit(tx, s)? {
        return Ok(refused);
    }
    insert_new(tx, s)?;
    if let Some(key) = &s.idempotency_key {
        let state = crate::submit::invoke_key_state(s);
        record_invoke_key(tx, s, key, &s.invocation_id, state)?;
    }
    Ok(SubmitOutcome::Created(must_invocation(
        tx,
        &s.env_id,
        s.invocation_id.as_str(),
    )?))
}

fn record_invoke_key(
    tx: &Transaction<'_>,
    s: &Submission,
    key: &IdempotencyKey,
    invocation: &InvocationId,
    state: &str,
) -> StoreResult<()> {
    super::conn::execute_cached(
        tx,
        "INSERT INTO idempotency (env_id, key_id, key, fingerprint, kind, state, invocation_id, created_at, owner)
         VALUES (?1, ?8, ?2, ?3, 'invoke', ?4, ?5, ?6, ?7)",
        params![
            s.env_id.as_str(),
            key.as_str(),
            s.request_fingerprint,
            state,
            invocation.as_str(),
            s.now.0,
            s.owner.as_str(),
            s.actor.as_str()
        ],
    )
    .map_err(unavailable)?;
    Ok(())
}

fn insert_new(tx: &Transaction<'_>, s: &Submission) -> StoreResult<()> {
    let governed = s.action.definition.is_governed();
    let state = s.initial.name();
    let op = s.operation_key.as_ref().map(|k| k.as_str());
    let completed = s.initial.is_terminal().then_some(s.now.0);
    super::conn::execute_cached(
        tx,
        "INSERT INTO invocations (id, env_id, action_id, action_name, action_version, effect_id, governed, state,
            input, input_fingerprint, operation_key, run_id, retry_of, created_by, created_at, approval_id,
            decision, completed_at, parent_span_id, shadow_decisions)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
        params![
            s.invocation_id.as_str(), s.env_id.as_str(), s.action.id.as_str(), s.action.name, s.action.version,
            s.effect_id.as_str(), governed, state, s.input.to_string(), s.input_fingerprint, op, s.run_id,
            s.retry_of.as_ref().map(|r| r.as_str()), s.actor.as_str(), s.now.0,
            s.approval.as_ref().map(|a| a.id.as_str()), s.decision.as_ref().map(Value::to_string), completed,
            s.parent_span_id, s.shadow_decisions.as_ref().map(Value::to_string)
        ],
    )
    .map_err(unavailable)?;
    super::conn::execute_cached(
        tx,
        "INSERT INTO effects (id, env_id, invocation_id, action_id, action_name, operation_key, governed, state,
            provider_idempotency_key, created_by, created_at, updated_at, owner)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, ?12)",
        params![
            s.effect_id.as_str(), s.env_id.as_str(), s.invocation_id.as_str(), s.action.id.as_str(), s.action.name,
            op, governed, state, s.provider_idempotency_key, s.actor.as_str(), s.now.0, s.owner.as_str()
        ],
    )
    .map_err(unavailable)?;
    if let Some(approval) = &s.approval {
        let binding = crate::approval_change::Binding::of(s);
        super::approvals::insert(tx, &s.env_id, approval, &s.actor, Some(binding), s.now)?;
    }
    let actor = Actor::key(&s.actor, s.now);
    insert_evidence(tx, &s.effect_id, &s.evidence, &actor)?;
    super::links::insert(tx, s)?;
    append(tx, &actor, crate::submit::created_entry(s))
}

pub(crate) fn insert_evidence(
    tx: &Transaction<'_>,
    effect: &EffectId,
    e: &NewEvidence,
    actor: &Actor,
) -> StoreResult<u32> {
    insert_evidence_row(tx, &EvidenceRow::new(effect, e, actor))
}

/// Appends `row` at its effect's next `seq`, and returns that `seq`.
fn insert_evidence_row(tx: &Transaction<'_>, row: &EvidenceRow<'_>) -> StoreResult<u32> {
    let seq: u32 = tx
        .query_row_cached(
            "SELECT COALESCE(MAX(seq), 0) + 1 FROM evidence WHERE effect_id = ?1",
            params![row.effect],
            |r| r.get(0),
        )
        .map_err(unavailable)?;
    super::conn::execute_cached(
        tx,
        "INSERT INTO evidence (effect_id, seq, at, kind, source, message, data, actor)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            row.effect,
            seq,
            row.at,
            row.kind,
            row.source,
            row.message,
            row.data,
            row.actor
        ],
    )
    .map_err(unavailable)?;
    Ok(seq)
}

/// Marks answered the invoke request behind `key` that created the effect's invocation (the
/// request an `EffectChange::answers_request` names: its sender is the invocation's creator).
/// Only the creator's row, or a legacy row of the environment, can be in progress (a request of
/// another key that found the invocation was recorded answered), so the key's scope is looked up
/// rather than every request of the environment scanned.
fn finish_answered_request(
    tx: &Transaction<'_>,
    env: &EnvironmentId,
    effect: &EffectId,
    key: &IdempotencyKey,
) -> StoreResult<()> {
    super::conn::execute_cached(
        tx,
        "UPDATE idempotency SET state = 'done'
         WHERE env_id = ?1 AND key = ?2 AND kind = 'invoke'
           AND key_id IN ((SELECT created_by FROM invocations
                           WHERE id = (SELECT invocation_id FROM effects WHERE id = ?3)), ?4)
           AND invocation_id = (SELECT invocation_id FROM effects WHERE id = ?3)",
        params![
            env.as_str(),
            key.as_str(),
            effect.as_str(),
            super::idempotency::LEGACY_SCOPE
        ],
    )
    .map_err(unavailable)?;
    Ok(())
}

fn current_state(
    tx: &Transaction<'_>,
    env: &EnvironmentId,
    effect: &EffectId,
) -> StoreResult<EffectState> {
    let raw: Option<String> = tx
        .query_row_cached(
            "SELECT state FROM effects WHERE env_id = ?1 AND id = ?2",
            params![env.as_str(), effect.as_str()],
            |r| r.get(0),
        )
        .optional()
        .map_err(unavailable)?;
    rows::state(&raw.ok_or(StoreError::NotFound { what: "effect" })?)
}

/// Refuses a change by an attempt's holder once the attempt is no longer its
/// (`StoreError::Fenced`): the effect's owner must still be `holder`, and the effect's epoch
/// the one the attempt was begun under. Read under the writer's lock, like the state compared,
/// so no takeover lands between this check and the write.
fn check_holder(tx: &Transaction<'_>, c: &EffectChange, holder: &ReplicaId) -> StoreResult<()> {
    let Some(AttemptChange::Finish { number, .. }) = &c.attempt else {
        return Err(StoreError::Corrupt(
            "a holder's change without the attempt it finishes".into(),
        ));
    };
    let (owner, current, held): (Option<String>, i64, Option<i64>) = tx
        .query_row_cached(
            "SELECT e.owner, e.fence, a.fence FROM effects e
             LEFT JOIN attempts a ON a.effect_id = e.id AND a.number = ?3
             WHERE e.env_id = ?1 AND e.id = ?2",
            params![c.env_id.as_str(), c.effect_id.as_str(), number],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()
        .map_err(unavailable)?
        .ok_or(StoreError::NotFound { what: "effect" })?;
    let held = held.unwrap_or(-1);
    if owner.as_deref() == Some(holder.as_str()) && held == current {
        return Ok(());
    }
    Err(StoreError::Fenced {
        what: format!("attempt {number} of {}", c.effect_id),
        held,
        current,
    })
}

/// Moves the effect with a compare-and-set on its state (read first: the writer holds the
/// file's lock, so nothing moves it in between) and writes what its [`ChangePlan`] says. A
/// holder's change is fenced first ([`check_holder`]); a takeover moves the epoch on.
pub(crate) fn change_effect(tx: &Transaction<'_>, c: &EffectChange) -> StoreResult<()> {
    c.check_legal()?;
    if let Some(Fence::Holder(holder)) = &c.fence {
        check_holder(tx, c, holder)?;
    }
    let found = current_state(tx, &c.env_id, &c.effect_id)?;
    if found != c.from {
        return Err(StoreError::StateConflict {
            expected: c.from,
            found,
        });
    }
    let plan = ChangePlan::of(c);
    // The kill switch: no attempt is recorded, so nothing is sent, while the environment is
    // halted. Checked in this transaction, so an attempt committed after a halt cannot exist.
    if plan.begun.is_some() && super::kill_switch::is_halted(tx, &c.env_id)? {
        return Err(StoreError::Halted);
    }
    // A hold: no first attempt is recorded for work it covers; an attempt already recorded
    // (a later one, after a retryable failure) is not disturbed.
    if plan.begun.is_some()
        && c.from == EffectState::Ready
        && super::holds::is_held(tx, &c.env_id, &c.effect_id)?
    {
        return Err(StoreError::Held);
    }
    write_attempt(tx, &plan)?;
    let (owner, bump) = match (&c.fence, plan.begun) {
        (Some(Fence::TakeOver(by)), _) => (Some(by.as_str()), 1),
        (_, Some(b)) => (Some(b.owner), 0),
        _ => (None, 0),
    };
    super::conn::execute_cached(
        tx,
        "UPDATE effects SET state = ?1, updated_at = ?2, attempt_count = COALESCE(?3, attempt_count),
            external_reference = COALESCE(?4, external_reference), owner = COALESCE(?5, owner),
            fence = fence + ?7
         WHERE id = ?6",
        params![
            plan.to,
            plan.now,
            plan.begun.map(|b| b.number),
            c.external_reference,
            owner,
            c.effect_id.as_str(),
            bump
        ],
    )
    .map_err(unavailable)?;
    super::limits::settle(tx, &plan)?;
    if let Some(actual) = &c.actual_impact {
        super::limits::settle_actual(tx, c, actual)?;
    }
    let i = &plan.invocation;
    super::conn::execute_cached(
        tx,
        "UPDATE invocations SET state = ?1, response_status = COALESCE(?2, response_status),
            response_body = COALESCE(?3, response_body), error = COALESCE(?4, error),
            completed_at = COALESCE(completed_at, ?5)
         WHERE id = (SELECT invocation_id FROM effects WHERE id = ?6)",
        params![
            plan.to,
            i.response_status,
            i.response_body,
            i.error,
            i.completed_at,
            c.effect_id.as_str()
        ],
    )
    .map_err(unavailable)?;
    if let Some(row) = &plan.evidence {
        insert_evidence_row(tx, row)?;
    }
    if let Some(key) = &c.answers_request {
        finish_answered_request(tx, &c.env_id, &c.effect_id, key)?;
    }
    append(tx, &c.actor, plan.transition_entry())
}

/// The attempt the plan begins or closes; closing one that does not exist is corruption.
fn write_attempt(tx: &Transaction<'_>, plan: &ChangePlan<'_>) -> StoreResult<()> {
    let effect = plan.change.effect_id.as_str();
    if let Some(b) = plan.begun {
        super::conn::execute_cached(
            tx,
            "INSERT INTO attempts (effect_id, number, started_at, deadline_at, status, owner, fence)
             VALUES (?1, ?2, ?3, ?4, 'dispatching', ?5, (SELECT fence FROM effects WHERE id = ?1))",
            params![effect, b.number, plan.now, b.deadline_at, b.owner],
        )
        .map_err(unavailable)?;
    }
    if let Some(f) = plan.finished {
        let closed = super::conn::execute_cached(
            tx,
            "UPDATE attempts SET finished_at = ?1, status = ?2, response_status = ?3, error = ?4
             WHERE effect_id = ?5 AND number = ?6",
            params![
                plan.now,
                plan.to,
                f.response_status,
                f.error,
                effect,
                f.number
            ],
        )
        .map_err(unavailable)?;
        if closed != 1 {
            return Err(StoreError::Corrupt(format!(
                "attempt {} of {effect} does not exist",
                f.number
            )));
        }
    }
    Ok(())
}

/// The filter on states. For `effects`, when every state asked for is open (not terminal), the
/// condition of `effects_open` is repeated: it changes no result and lets the listing use it.
fn state_clause(states: &Option<Vec<EffectState>>, effects: bool) -> String {
    match states {
        None => String::new(),
        Some(list) if list.is_empty() => " AND 0".to_string(),
        Some(list) => {
            let names: Vec<String> = list.iter().map(|s| format!("'{}'", s.name())).collect();
            let open = if effects && list.iter().all(|s| !s.is_terminal()) {
                format!(" AND {}", super::schema::OPEN_STATES_TERM)
            } else {
                String::new()
            };
            format!(" AND state IN ({}){open}", names.join(","))
        }
    }
}

fn count(conn: &Connection, sql: &str, params: &[&dyn rusqlite::ToSql]) -> StoreResult<u64> {
    conn.query_row_cached(sql, params, |r| r.get::<_, i64>(0))
        .map(|n| n as u64)
        .map_err(unavailable)
}

/// `reconcile_after` for "never automatically".
const RECONCILE_NEVER: i64 = i64::MAX;

#[async_trait]
impl Effects for SqliteStore {
    async fn submit(&self, submission: &Submission) -> StoreResult<SubmitOutcome> {
        let submission = submission.clone();
        self.write(move |tx| submit(tx, &submission)).await
    }

    async fn invoke_context(
        &self,
        token_hash: &str,
        now: Millis,
        action: &str,
        idempotency_key: Option<&IdempotencyKey>,
    ) -> StoreResult<Option<InvokeContext>> {
        let (hash, action, key) = (
            token_hash.to_string(),
            action.to_string(),
            idempotency_key.cloned(),
        );
        self.read_here(move |c| {
            let Some(caller) = key_by_hash(c, &hash)?.filter(|k| k.usable_at(now)) else {
                return Ok(None);
            };
            let Some(environment) = environment(c, &caller.env_id)? else {
                return Ok(None);
            };
            let env = &environment.id;
            let action = super::catalog::action(c, env, &action)?;
            let mut secrets = Vec::new();
            for name in action.iter().flat_map(|a| secrets_named_by(&a.definition)) {
                secrets.extend(super::catalog::secret(c, env, &name)?);
            }
            Ok(Some(InvokeContext {
                policies: super::policies::list(c, env)?,
                earlier: match &key {
                    Some(key) => super::idempotency::earlier(c, env, &caller.id, key)?,
                    None => None,
                },
                key: caller,
                environment,
                action,
                secrets,
            }))
        })
        .await
    }

    async fn submit_and_begin(
        &self,
        submission: &Submission,
        first: &FirstAttempt,
    ) -> StoreResult<Submitted> {
        let (s, first) = (submission.clone(), first.clone());
        self.write(move |tx| {
            let outcome = submit(tx, &s)?;
            if !matches!(outcome, SubmitOutcome::Created(_)) {
                return Ok(Submitted {
                    outcome,
                    first: None,
                });
            }
            let reserved = super::limits::reserve(tx, &first.impact)?;
            let first = if matches!(reserved, crate::ReserveOutcome::Refused { .. }) {
                FirstAttemptOutcome::Refused(reserved)
            } else {
                match change_effect(tx, &first.begin) {
                    Ok(()) => FirstAttemptOutcome::Begun,
                    Err(StoreError::Halted) => FirstAttemptOutcome::Halted,
                    Err(StoreError::Held) => FirstAttemptOutcome::Held,
                    Err(e) => return Err(e),
                }
            };
            Ok(Submitted {
                outcome,
                first: Some(first),
            })
        })
        .await
    }

    async fn finish_invoke_request(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
    ) -> StoreResult<()> {
        let (env, caller, key) = (env.clone(), caller.clone(), key.clone());
        self.write(move |tx| {
            super::conn::execute_cached(
                tx,
                "UPDATE idempotency SET state = 'done'
         WHERE env_id = ?1 AND key = ?2 AND key_id IN (?3, ?4) AND kind = 'invoke'",
                params![
                    env.as_str(),
                    key.as_str(),
                    caller.as_str(),
                    super::idempotency::LEGACY_SCOPE
                ],
            )
            .map_err(unavailable)?;
            Ok(())
        })
        .await
    }

    async fn change_effect(&self, change: &EffectChange) -> StoreResult<()> {
        let change = change.clone();
        self.write(move |tx| change_effect(tx, &change)).await
    }

    async fn change_effect_and_read(&self, change: &EffectChange) -> StoreResult<InvocationRecord> {
        let change = change.clone();
        self.write(move |tx| {
            change_effect(tx, &change)?;
            // The effect's invocation, as this transaction leaves it.
            let sql = format!(
                "SELECT {} FROM invocations
         WHERE env_id = ?1 AND id = (SELECT invocation_id FROM effects WHERE id = ?2)",
                rows::INVOCATION_COLUMNS
            );
            query_one(
                tx,
                &sql,
                &[&change.env_id.as_str(), &change.effect_id.as_str()],
                rows::invocation,
            )?
            .ok_or(StoreError::NotFound { what: "invocation" })
        })
        .await
    }

    async fn append_evidence(
        &self,
        env: &EnvironmentId,
        effect: &EffectId,
        evidence: &NewEvidence,
        actor: &Actor,
    ) -> StoreResult<()> {
        let (env, effect, e, actor) =
            (env.clone(), effect.clone(), evidence.clone(), actor.clone());
        self.write(move |tx| {
            current_state(tx, &env, &effect)?;
            let seq = insert_evidence(tx, &effect, &e, &actor)?;
            append(
                tx,
                &actor,
                crate::submit::evidence_entry(&env, &effect, seq, &e),
            )
        })
        .await
    }

    async fn due_for_reconcile(
        &self,
        now: Millis,
        limit: u32,
        claim_until: Millis,
    ) -> StoreResult<Vec<ReconcileDue>> {
        // The due effects are selected and pushed to `claim_until` in one IMMEDIATE transaction.
        self.write(move |tx| {
            let due = query_all(
                tx,
                "SELECT env_id, id, invocation_id, reconcile_count FROM effects
         WHERE state = 'unknown' AND (reconcile_after IS NULL OR reconcile_after <= ?1)
         ORDER BY COALESCE(reconcile_after, updated_at), id LIMIT ?2",
                &[&now.0, &limit],
                |row| {
                    let corrupt = |e| rows::corrupt("id", e);
                    Ok(ReconcileDue {
                        env_id: EnvironmentId::parse(&rows::col::<String>(row, 0)?)
                            .map_err(corrupt)?,
                        effect_id: EffectId::parse(&rows::col::<String>(row, 1)?)
                            .map_err(corrupt)?,
                        invocation_id: InvocationId::parse(&rows::col::<String>(row, 2)?)
                            .map_err(corrupt)?,
                        count: rows::col(row, 3)?,
                    })
                },
            )?;
            for d in &due {
                super::conn::execute_cached(
                    tx,
                    "UPDATE effects SET reconcile_after = ?1 WHERE id = ?2",
                    params![claim_until.0, d.effect_id.as_str()],
                )
                .map_err(unavailable)?;
            }
            Ok(due)
        })
        .await
    }

    async fn schedule_reconcile(
        &self,
        env: &EnvironmentId,
        effect: &EffectId,
        next_at: Option<Millis>,
    ) -> StoreResult<()> {
        let (env, effect) = (env.clone(), effect.clone());
        self.write(move |tx| {
            let changed = super::conn::execute_cached(
                tx,
                "UPDATE effects SET reconcile_after = ?1, reconcile_count = reconcile_count + 1
             WHERE env_id = ?2 AND id = ?3",
                params![
                    next_at.map(|t| t.0).unwrap_or(RECONCILE_NEVER),
                    env.as_str(),
                    effect.as_str()
                ],
            )
            .map_err(unavailable)?;
            if changed == 0 {
                return Err(StoreError::NotFound { what: "effect" });
            }
            Ok(())
        })
        .await
    }

    async fn invocation(
        &self,
        env: &EnvironmentId,
        id: &InvocationId,
    ) -> StoreResult<Option<InvocationRecord>> {
        let (env, id) = (env.clone(), id.clone());
        self.read(move |conn| invocation(conn, &env, &id)).await
    }

    async fn invocation_by_operation_key(
        &self,
        env: &EnvironmentId,
        action: &ActionId,
        operation_key: &OperationKey,
    ) -> StoreResult<Option<InvocationRecord>> {
        let (env, action, key) = (env.clone(), action.clone(), operation_key.clone());
        self.read(move |conn| {
            let sql = format!(
                "SELECT {} FROM invocations WHERE env_id = ?1 AND id =
           (SELECT invocation_id FROM effects WHERE env_id = ?1 AND action_id = ?2 AND operation_key = ?3)",
                rows::INVOCATION_COLUMNS
            );
            query_one(
                conn,
                &sql,
                &[&env.as_str(), &action.as_str(), &key.as_str()],
                rows::invocation,
            )
        })
        .await
    }

    async fn list_invocations(
        &self,
        env: &EnvironmentId,
        filter: &InvocationFilter,
    ) -> StoreResult<Page<InvocationRecord>> {
        let (env, f) = (env.clone(), filter.clone());
        self.read(move |conn| {
            let action = f.action_id.as_ref().map(|a| a.as_str());
            let filter = format!(
                "env_id = ?1 AND (?2 IS NULL OR action_id = ?2){}",
                state_clause(&f.states, false)
            );
            let total = count(
                conn,
                &format!("SELECT COUNT(*) FROM invocations WHERE {filter}"),
                &[&env.as_str(), &action],
            )?;
            let sql = format!(
                "SELECT {} FROM invocations WHERE {filter} ORDER BY created_at DESC, id DESC LIMIT ?3 OFFSET ?4",
                rows::invocation_listed_columns()
            );
            let items = query_all(
                conn,
                &sql,
                &[&env.as_str(), &action, &f.limit, &f.offset],
                rows::invocation,
            )?;
            Ok(Page { items, total })
        })
        .await
    }

    async fn effect(
        &self,
        env: &EnvironmentId,
        id: &EffectId,
    ) -> StoreResult<Option<EffectDetail>> {
        let (env, id) = (env.clone(), id.clone());
        self.read(move |conn| {
            let sql = format!(
                "SELECT {} FROM effects WHERE env_id = ?1 AND id = ?2",
                rows::EFFECT_COLUMNS
            );
            let Some(effect) = query_one(conn, &sql, &[&env.as_str(), &id.as_str()], rows::effect)? else {
                return Ok(None);
            };
            let attempts = query_all(
                conn,
                "SELECT number, started_at, deadline_at, finished_at, status, response_status, error, owner FROM attempts WHERE effect_id = ?1 ORDER BY number",
                &[&id.as_str()],
                rows::attempt,
            )?;
            let evidence = query_all(
                conn,
                "SELECT seq, at, kind, source, message, data, actor FROM evidence WHERE effect_id = ?1 ORDER BY seq",
                &[&id.as_str()],
                rows::evidence,
            )?;
            let reservations = query_all(
                conn,
                "SELECT r.limit_id, l.name, r.amount, r.window_start, r.state
         FROM impact_reservations r JOIN impact_limits l ON l.id = r.limit_id
         WHERE r.effect_id = ?1 ORDER BY l.name, r.limit_id",
                &[&id.as_str()],
                |row| {
                    let state: String = rows::col(row, 4)?;
                    Ok(ReservationRecord {
                        limit_id: LimitId::parse(&rows::col::<String>(row, 0)?)
                            .map_err(|e| rows::corrupt("limit id", e))?,
                        limit_name: rows::col(row, 1)?,
                        amount: rows::col(row, 2)?,
                        window_start: Millis(rows::col(row, 3)?),
                        state: ReservationState::parse(&state)
                            .ok_or_else(|| rows::corrupt("reservation state", &state))?,
                    })
                },
            )?;
            let links = super::links::read(conn, &id)?;
            let preview = match &links.preview {
                Some(p) => super::previews::by_id(conn, p)?,
                None => None,
            };
            Ok(Some(EffectDetail {
                effect,
                attempts,
                evidence,
                reservations,
                links,
                preview,
            }))
        })
        .await
    }

    async fn list_effects(
        &self,
        env: &EnvironmentId,
        filter: &EffectFilter,
    ) -> StoreResult<Page<EffectRecord>> {
        let (env, f) = (env.clone(), filter.clone());
        self.read(move |conn| {
            let action = f.action_id.as_ref().map(|a| a.as_str());
            let filter = format!(
                "env_id = ?1 AND governed = 1 AND (?2 IS NULL OR action_id = ?2){}",
                state_clause(&f.states, true)
            );
            let total = count(
                conn,
                &format!("SELECT COUNT(*) FROM effects WHERE {filter}"),
                &[&env.as_str(), &action],
            )?;
            let sql = format!(
                "SELECT {} FROM effects WHERE {filter} ORDER BY created_at DESC, id DESC LIMIT ?3 OFFSET ?4",
                rows::EFFECT_COLUMNS
            );
            let items = query_all(
                conn,
                &sql,
                &[&env.as_str(), &action, &f.limit, &f.offset],
                rows::effect,
            )?;
            Ok(Page { items, total })
        })
        .await
    }

    async fn count_unknown(&self) -> StoreResult<u64> {
        self.read(|conn| {
            conn.query_row(
                "SELECT COUNT(*) FROM effects WHERE state = 'unknown'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as u64)
            .map_err(unavailable)
        })
        .await
    }
}
