//! Invocations and effects: the invoke write path's records.

use super::audit_log::{append, Entry};
use super::conn::Tx;
use super::conn::{in_transaction, Mode};
use super::rows::{self, col};
use super::PostgresStore;
use crate::error::{StoreError, StoreResult};
use crate::records::*;
use crate::store::Effects;
use crate::submit::{verdict, Facts, Verdict};
use async_trait::async_trait;
use serde_json::{json, Value};
use steward_core::impact::ReservationState;
use steward_core::LimitId;
use steward_core::{
    ActionId, EffectId, EffectState, EnvironmentId, IdempotencyKey, InvocationId, KeyId, Millis,
    OperationKey,
};

pub(crate) async fn invocation(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    id: &InvocationId,
) -> StoreResult<Option<InvocationRecord>> {
    let sql = format!(
        "SELECT {} FROM invocations WHERE env_id = $1 AND id = $2",
        rows::INVOCATION_COLUMNS
    );
    tx.one(&sql, &[&env.as_str(), &id.as_str()], rows::invocation)
        .await
}

pub(crate) async fn must_invocation(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    id: &str,
) -> StoreResult<InvocationRecord> {
    let id = InvocationId::parse(id).map_err(|e| rows::corrupt("invocation id", e))?;
    invocation(tx, env, &id)
        .await?
        .ok_or(StoreError::NotFound { what: "invocation" })
}

/// What [`verdict`] needs to decide a submission, read in its transaction.
async fn facts(tx: &Tx<'_>, s: &Submission) -> StoreResult<Facts> {
    let env = &s.env_id;
    let mut facts = Facts::default();
    if let Some(key) = &s.idempotency_key {
        facts.earlier = super::idempotency::earlier(tx, env, &s.actor, key).await?;
        if facts.settled_by_earlier() {
            return Ok(facts);
        }
    }
    if let Some(prior) = &s.retry_of {
        facts.retried = Some(invocation(tx, env, prior).await?);
        let retry = tx
            .query_first(
                "SELECT id FROM invocations WHERE env_id = $1 AND retry_of = $2",
                &[&env.as_str(), &prior.as_str()],
            )
            .await?;
        if let Some(row) = retry {
            facts.existing_retry = Some(must_invocation(tx, env, col(&row, 0)?).await?);
        }
    }
    if let Some(op) = &s.operation_key {
        let existing = tx
            .query_first(
                "SELECT id, invocation_id FROM effects
                 WHERE env_id = $1 AND action_id = $2 AND operation_key = $3",
                &[&env.as_str(), &s.action.id.as_str(), &op.as_str()],
            )
            .await?;
        if let Some(row) = existing {
            let effect_id = rows::id(&row, 0, EffectId::parse)?;
            let found = must_invocation(tx, env, col(&row, 1)?).await?;
            facts.by_operation_key = Some((effect_id, found));
        }
    }
    Ok(facts)
}

/// Records an invoke request. Behind the write lock (`Store::submit`), each check below sees
/// every submission committed before it and no other submission can commit in between: the
/// unique indexes on the operation key, the retried invocation and the idempotency key are the
/// second check. Without it (`submit_and_begin`, `Mode::WriteConcurrent`) the unique indexes decide
/// between concurrent submissions: the loser's insert fails, and its transaction runs again and
/// finds the winner's row with the checks below.
pub(crate) async fn submit(tx: &Tx<'_>, s: &Submission) -> StoreResult<SubmitOutcome> {
    match verdict(s, facts(tx, s).await?) {
        Verdict::Answer(outcome) => return Ok(outcome),
        Verdict::Existing(found) => {
            if let Some(key) = &s.idempotency_key {
                record_invoke_key(tx, s, key, &found.id, "done").await?;
            }
            return Ok(SubmitOutcome::Existing(found));
        }
        Verdict::Create => {}
    }
    insert_new(tx, s).await?;
    if let Some(key) = &s.idempotency_key {
        record_invoke_key(tx, s, key, &s.invocation_id, "in_progress").await?;
    }
    Ok(SubmitOutcome::Created(
        must_invocation(tx, &s.env_id, s.invocation_id.as_str()).await?,
    ))
}

async fn record_invoke_key(
    tx: &Tx<'_>,
    s: &Submission,
    key: &IdempotencyKey,
    invocation: &InvocationId,
    state: &str,
) -> StoreResult<()> {
    tx.execute(
        "INSERT INTO idempotency (env_id, key_id, key, fingerprint, kind, state, invocation_id, created_at, owner)
         VALUES ($1, $8, $2, $3, 'invoke', $4, $5, $6, $7)",
        &[
            &s.env_id.as_str(),
            &key.as_str(),
            &s.request_fingerprint,
            &state,
            &invocation.as_str(),
            &s.now.0,
            &s.owner.as_str(),
            &s.actor.as_str(),
        ],
    )
    .await?;
    Ok(())
}

async fn insert_new(tx: &Tx<'_>, s: &Submission) -> StoreResult<()> {
    let governed = s.action.definition.is_governed();
    let state = s.initial.name();
    let op = s.operation_key.as_ref().map(|k| k.as_str());
    let completed = s.initial.is_terminal().then_some(s.now.0);
    tx.execute(
        "INSERT INTO invocations (id, env_id, action_id, action_name, action_version, effect_id, governed, state,
            input, input_fingerprint, operation_key, run_id, retry_of, created_by, created_at, approval_id,
            decision, completed_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)",
        &[
            &s.invocation_id.as_str(), &s.env_id.as_str(), &s.action.id.as_str(), &s.action.name,
            &i64::from(s.action.version), &s.effect_id.as_str(), &governed, &state, &s.input.to_string(),
            &s.input_fingerprint, &op, &s.run_id, &s.retry_of.as_ref().map(|r| r.as_str()),
            &s.actor.as_str(), &s.now.0, &s.approval.as_ref().map(|a| a.id.as_str()),
            &s.decision.as_ref().map(Value::to_string), &completed,
        ],
    )
    .await?;
    tx.execute(
        "INSERT INTO effects (id, env_id, invocation_id, action_id, action_name, operation_key, governed, state,
            provider_idempotency_key, created_by, created_at, updated_at, owner)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $12)",
        &[
            &s.effect_id.as_str(), &s.env_id.as_str(), &s.invocation_id.as_str(), &s.action.id.as_str(),
            &s.action.name, &op, &governed, &state, &s.provider_idempotency_key, &s.actor.as_str(), &s.now.0,
            &s.owner.as_str(),
        ],
    )
    .await?;
    if let Some(approval) = &s.approval {
        let binding = super::approvals::Binding {
            invocation: &s.invocation_id,
            effect: &s.effect_id,
            action: &s.action.id,
            version: s.action.version,
            input_fingerprint: &s.input_fingerprint,
        };
        super::approvals::insert(tx, &s.env_id, approval, &s.actor, Some(binding), s.now).await?;
    }
    let actor = Actor::key(&s.actor, s.now);
    insert_evidence(tx, &s.effect_id, &s.evidence, &actor).await?;
    append(
        tx,
        &actor,
        Entry {
            env: Some(s.env_id.as_str()),
            kind: "invocation.created",
            subject: s.invocation_id.as_str(),
            before: None,
            after: Some(json!({
                "effectId": s.effect_id, "actionId": s.action.id, "actionVersion": s.action.version,
                "state": state, "inputFingerprint": s.input_fingerprint, "operationKey": op,
                "decision": s.decision,
            })),
        },
    )
    .await
}

pub(crate) async fn insert_evidence(
    tx: &Tx<'_>,
    effect: &EffectId,
    e: &NewEvidence,
    actor: &Actor,
) -> StoreResult<u32> {
    let next = tx
        .count(
            "SELECT COALESCE(MAX(seq), 0) + 1 FROM evidence WHERE effect_id = $1",
            &[&effect.as_str()],
        )
        .await?;
    tx.execute(
        "INSERT INTO evidence (effect_id, seq, at, kind, source, message, data, actor) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        &[
            &effect.as_str(), &next, &actor.now.0, &e.kind.as_str(), &e.source.as_str(), &e.message,
            &e.data.as_ref().map(Value::to_string), &actor.key.as_ref().map(|k| k.as_str()),
        ],
    )
    .await?;
    u32::try_from(next).map_err(|_| rows::corrupt("evidence seq", next))
}

/// Marks answered the invoke request behind `key` that created the effect's invocation (the
/// request an `EffectChange::answers_request` names: its sender is the invocation's creator).
async fn finish_answered_request(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    effect: &EffectId,
    key: &IdempotencyKey,
) -> StoreResult<()> {
    tx.execute(
        "UPDATE idempotency SET state = 'done'
         WHERE env_id = $1 AND key = $2 AND kind = 'invoke'
           AND invocation_id = (SELECT invocation_id FROM effects WHERE id = $3)",
        &[&env.as_str(), &key.as_str(), &effect.as_str()],
    )
    .await?;
    Ok(())
}

async fn current_state(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    effect: &EffectId,
) -> StoreResult<EffectState> {
    let row = tx
        .query_first(
            "SELECT state FROM effects WHERE env_id = $1 AND id = $2",
            &[&env.as_str(), &effect.as_str()],
        )
        .await?
        .ok_or(StoreError::NotFound { what: "effect" })?;
    rows::state(col(&row, 0)?)
}

/// Moves the effect with a compare-and-set on its state: `UPDATE ... WHERE state = from`, and
/// `StateConflict` with the state found when no row moved.
pub(crate) async fn change_effect(tx: &Tx<'_>, c: &EffectChange) -> StoreResult<()> {
    c.check_legal()?;
    let now = c.actor.now.0;
    let to = c.to.name();
    let (attempt_number, owner) = match &c.attempt {
        Some(AttemptChange::Begin { number, owner, .. }) => (Some(*number), Some(owner.as_str())),
        _ => (None, None),
    };
    // The kill switch: no attempt is recorded, so nothing is sent, while the environment is
    // halted. Read under the environment's lock, held shared to the commit, so an attempt
    // committed after a halt cannot exist; checked before anything is written, so a caller that
    // goes on in the same transaction (`submit_and_begin`) keeps nothing of the attempt. A stale
    // `from` is still a conflict.
    let halted = match c.attempt {
        Some(AttemptChange::Begin { .. }) => super::kill_switch::is_halted(tx, &c.env_id).await?,
        _ => false,
    };
    if halted {
        let found = current_state(tx, &c.env_id, &c.effect_id).await?;
        return Err(if found == c.from {
            StoreError::Halted
        } else {
            StoreError::StateConflict {
                expected: c.from,
                found,
            }
        });
    }
    let moved = tx
        .execute(
            "UPDATE effects SET state = $1, updated_at = $2, attempt_count = COALESCE($3, attempt_count),
                external_reference = COALESCE($4, external_reference), owner = COALESCE($5, owner)
             WHERE env_id = $6 AND id = $7 AND state = $8",
            &[
                &to, &now, &attempt_number.map(i64::from), &c.external_reference, &owner,
                &c.env_id.as_str(), &c.effect_id.as_str(), &c.from.name(),
            ],
        )
        .await?;
    if moved == 0 {
        let found = current_state(tx, &c.env_id, &c.effect_id).await?;
        return Err(StoreError::StateConflict {
            expected: c.from,
            found,
        });
    }
    match &c.attempt {
        Some(AttemptChange::Begin {
            number,
            deadline_at,
            owner,
        }) => {
            tx.execute(
                "INSERT INTO attempts (effect_id, number, started_at, deadline_at, status, owner) VALUES ($1, $2, $3, $4, 'dispatching', $5)",
                &[&c.effect_id.as_str(), &i64::from(*number), &now, &deadline_at.0, &owner.as_str()],
            )
            .await?;
        }
        Some(AttemptChange::Finish {
            number,
            response_status,
            error,
        }) => {
            let closed = tx
                .execute(
                    "UPDATE attempts SET finished_at = $1, status = $2, response_status = $3, error = $4
                     WHERE effect_id = $5 AND number = $6",
                    &[
                        &now, &to, &response_status.map(i64::from), error,
                        &c.effect_id.as_str(), &i64::from(*number),
                    ],
                )
                .await?;
            if closed != 1 {
                return Err(StoreError::Corrupt(format!(
                    "attempt {number} of {} does not exist",
                    c.effect_id
                )));
            }
        }
        None => {}
    }
    super::limits::settle(tx, &c.env_id, &c.effect_id, c.settles, &c.actor).await?;
    let completed = (c.to.is_terminal() || c.to == EffectState::Unknown).then_some(now);
    tx.execute(
        "UPDATE invocations SET state = $1, response_status = COALESCE($2, response_status),
            response_body = COALESCE($3, response_body), error = COALESCE($4, error),
            completed_at = COALESCE(completed_at, $5)
         WHERE effect_id = $6",
        &[
            &to,
            &c.response_status.map(i64::from),
            &c.response_body.as_ref().map(Value::to_string),
            &c.error.as_ref().map(Value::to_string),
            &completed,
            &c.effect_id.as_str(),
        ],
    )
    .await?;
    if let Some(e) = &c.evidence {
        insert_evidence(tx, &c.effect_id, e, &c.actor).await?;
    }
    if let Some(key) = &c.answers_request {
        finish_answered_request(tx, &c.env_id, &c.effect_id, key).await?;
    }
    append(
        tx,
        &c.actor,
        Entry {
            env: Some(c.env_id.as_str()),
            kind: "effect.transition",
            subject: c.effect_id.as_str(),
            before: Some(json!({"state": c.from.name()})),
            after: Some(
                json!({"state": to, "attempt": attempt_number, "responseStatus": c.response_status}),
            ),
        },
    )
    .await
}

/// The state filter as a text array parameter: `None` matches every state, an empty list none.
fn state_names(states: &Option<Vec<EffectState>>) -> Option<Vec<&'static str>> {
    states
        .as_ref()
        .map(|list| list.iter().map(|s| s.name()).collect())
}

fn reconcile_due(row: &tokio_postgres::Row) -> StoreResult<ReconcileDue> {
    Ok(ReconcileDue {
        env_id: rows::id(row, 0, EnvironmentId::parse)?,
        effect_id: rows::id(row, 1, EffectId::parse)?,
        invocation_id: rows::id(row, 2, InvocationId::parse)?,
        count: rows::int(row, 3)?,
    })
}

/// `reconcile_after` for "never automatically".
const RECONCILE_NEVER: i64 = i64::MAX;

#[async_trait]
impl Effects for PostgresStore {
    async fn submit(&self, submission: &Submission) -> StoreResult<SubmitOutcome> {
        in_transaction!(self, Mode::Write, |tx| submit(&tx, submission))
    }

    async fn invoke_context(
        &self,
        token_hash: &str,
        now: Millis,
        action: &str,
        idempotency_key: Option<&IdempotencyKey>,
    ) -> StoreResult<Option<InvokeContext>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let Some(caller) = super::identity::key_by_hash(&tx, token_hash)
                .await?
                .filter(|k| k.usable_at(now))
            else {
                return Ok(None);
            };
            let Some(environment) = super::identity::environment(&tx, &caller.env_id).await? else {
                return Ok(None);
            };
            let env = &environment.id;
            let action = super::catalog::action(&tx, env, action).await?;
            let mut secrets = Vec::new();
            for name in action.iter().flat_map(|a| secrets_named_by(&a.definition)) {
                secrets.extend(super::catalog::secret(&tx, env, &name).await?);
            }
            Ok(Some(InvokeContext {
                policies: super::policies::list(&tx, env).await?,
                earlier: match idempotency_key {
                    Some(key) => super::idempotency::earlier(&tx, env, &caller.id, key).await?,
                    None => None,
                },
                key: caller,
                environment,
                action,
                secrets,
            }))
        })
    }

    async fn submit_and_begin(
        &self,
        submission: &Submission,
        first: &FirstAttempt,
    ) -> StoreResult<Submitted> {
        in_transaction!(self, Mode::WriteConcurrent, |tx| async {
            let s = submission;
            let outcome = submit(&tx, s).await?;
            if !matches!(outcome, SubmitOutcome::Created(_)) {
                return Ok(Submitted {
                    outcome,
                    first: None,
                });
            }
            let reserved = super::limits::reserve(&tx, &first.impact).await?;
            let first = if matches!(reserved, crate::ReserveOutcome::Refused { .. }) {
                FirstAttemptOutcome::Refused(reserved)
            } else {
                match change_effect(&tx, &first.begin).await {
                    Ok(()) => FirstAttemptOutcome::Begun,
                    Err(StoreError::Halted) => FirstAttemptOutcome::Halted,
                    Err(e) => return Err(e),
                }
            };
            Ok(Submitted {
                outcome,
                first: Some(first),
            })
        })
    }

    async fn finish_invoke_request(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
    ) -> StoreResult<()> {
        in_transaction!(self, Mode::WriteConcurrent, |tx| async {
            tx.execute(
                "UPDATE idempotency SET state = 'done'
         WHERE env_id = $1 AND key = $2 AND key_id IN ($3, $4) AND kind = 'invoke'",
                &[
                    &env.as_str(),
                    &key.as_str(),
                    &caller.as_str(),
                    &super::idempotency::LEGACY_SCOPE,
                ],
            )
            .await?;
            Ok(())
        })
    }

    async fn change_effect(&self, change: &EffectChange) -> StoreResult<()> {
        in_transaction!(self, Mode::WriteConcurrent, |tx| change_effect(&tx, change))
    }

    async fn change_effect_and_read(&self, change: &EffectChange) -> StoreResult<InvocationRecord> {
        in_transaction!(self, Mode::WriteConcurrent, |tx| async {
            change_effect(&tx, change).await?;
            // The effect's invocation, as this transaction leaves it.
            let sql = format!(
                "SELECT {} FROM invocations WHERE env_id = $1 AND effect_id = $2",
                rows::INVOCATION_COLUMNS
            );
            tx.one(
                &sql,
                &[&change.env_id.as_str(), &change.effect_id.as_str()],
                rows::invocation,
            )
            .await?
            .ok_or(StoreError::NotFound { what: "invocation" })
        })
    }

    async fn append_evidence(
        &self,
        env: &EnvironmentId,
        effect: &EffectId,
        evidence: &NewEvidence,
        actor: &Actor,
    ) -> StoreResult<()> {
        in_transaction!(self, Mode::Write, |tx| async {
            let e = evidence;
            current_state(&tx, env, effect).await?;
            let seq = insert_evidence(&tx, effect, e, actor).await?;
            append(
                &tx,
                actor,
                Entry {
                    env: Some(env.as_str()),
                    kind: "effect.evidence",
                    subject: effect.as_str(),
                    before: None,
                    after: Some(json!({"seq": seq, "kind": e.kind, "source": e.source})),
                },
            )
            .await
        })
    }

    async fn due_for_reconcile(
        &self,
        now: Millis,
        limit: u32,
        claim_until: Millis,
    ) -> StoreResult<Vec<ReconcileDue>> {
        // Claims the due effects: selected and pushed to `claim_until` in one statement. Runs behind
        // the write lock, so two replicas' claims never overlap; `SKIP LOCKED` keeps that true
        // without it (a row another claim holds is left to that claim, not waited for).
        in_transaction!(self, Mode::Write, |tx| async {
            tx.all(
                "WITH due AS (
            SELECT id, COALESCE(reconcile_after, updated_at) AS due_at FROM effects
            WHERE state = 'unknown' AND (reconcile_after IS NULL OR reconcile_after <= $1)
            ORDER BY due_at, id LIMIT $2
            FOR UPDATE SKIP LOCKED),
         claimed AS (
            UPDATE effects e SET reconcile_after = $3 FROM due WHERE e.id = due.id
            RETURNING e.env_id, e.id, e.invocation_id, e.reconcile_count, due.due_at)
         SELECT env_id, id, invocation_id, reconcile_count FROM claimed ORDER BY due_at, id",
                &[&now.0, &i64::from(limit), &claim_until.0],
                reconcile_due,
            )
            .await
        })
    }

    async fn schedule_reconcile(
        &self,
        env: &EnvironmentId,
        effect: &EffectId,
        next_at: Option<Millis>,
    ) -> StoreResult<()> {
        in_transaction!(self, Mode::Write, |tx| async {
            let changed = tx
                .execute(
                    "UPDATE effects SET reconcile_after = $1, reconcile_count = reconcile_count + 1
             WHERE env_id = $2 AND id = $3",
                    &[
                        &next_at.map_or(RECONCILE_NEVER, |t| t.0),
                        &env.as_str(),
                        &effect.as_str(),
                    ],
                )
                .await?;
            if changed == 0 {
                return Err(StoreError::NotFound { what: "effect" });
            }
            Ok(())
        })
    }

    async fn invocation(
        &self,
        env: &EnvironmentId,
        id: &InvocationId,
    ) -> StoreResult<Option<InvocationRecord>> {
        in_transaction!(self, Mode::Read, |tx| invocation(&tx, env, id))
    }

    async fn invocation_by_operation_key(
        &self,
        env: &EnvironmentId,
        action: &ActionId,
        operation_key: &OperationKey,
    ) -> StoreResult<Option<InvocationRecord>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let key = operation_key;
            let sql = format!(
                "SELECT {} FROM invocations WHERE env_id = $1 AND effect_id =
           (SELECT id FROM effects WHERE env_id = $1 AND action_id = $2 AND operation_key = $3)",
                rows::INVOCATION_COLUMNS
            );
            tx.one(
                &sql,
                &[&env.as_str(), &action.as_str(), &key.as_str()],
                rows::invocation,
            )
            .await
        })
    }

    async fn list_invocations(
        &self,
        env: &EnvironmentId,
        filter: &InvocationFilter,
    ) -> StoreResult<Page<InvocationRecord>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let f = filter;
            let action = f.action_id.as_ref().map(|a| a.as_str());
            let states = state_names(&f.states);
            let filter = "env_id = $1 AND ($2::text IS NULL OR action_id = $2)
                  AND ($3::text[] IS NULL OR state = ANY($3))";
            let total = tx
                .count(
                    &format!("SELECT COUNT(*) FROM invocations WHERE {filter}"),
                    &[&env.as_str(), &action, &states],
                )
                .await?;
            let sql = format!(
                "SELECT {} FROM invocations WHERE {filter} ORDER BY created_at DESC, id DESC LIMIT $4 OFFSET $5",
                rows::INVOCATION_COLUMNS
            );
            let items = tx
                .all(
                    &sql,
                    &[
                        &env.as_str(),
                        &action,
                        &states,
                        &i64::from(f.limit),
                        &i64::from(f.offset),
                    ],
                    rows::invocation,
                )
                .await?;
            Ok(Page {
                items,
                total: total as u64,
            })
        })
    }

    async fn effect(
        &self,
        env: &EnvironmentId,
        id: &EffectId,
    ) -> StoreResult<Option<EffectDetail>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let sql = format!(
                "SELECT {} FROM effects WHERE env_id = $1 AND id = $2",
                rows::EFFECT_COLUMNS
            );
            let Some(effect) = tx
                .one(&sql, &[&env.as_str(), &id.as_str()], rows::effect)
                .await?
            else {
                return Ok(None);
            };
            let attempts = tx
                .all(
                    &format!(
                        "SELECT {} FROM attempts WHERE effect_id = $1 ORDER BY number",
                        rows::ATTEMPT_COLUMNS
                    ),
                    &[&id.as_str()],
                    rows::attempt,
                )
                .await?;
            let evidence = tx
                .all(
                    &format!(
                        "SELECT {} FROM evidence WHERE effect_id = $1 ORDER BY seq",
                        rows::EVIDENCE_COLUMNS
                    ),
                    &[&id.as_str()],
                    rows::evidence,
                )
                .await?;
            let reservations = tx
                .all(
                    "SELECT r.limit_id, l.name, r.amount, r.window_start, r.state
             FROM impact_reservations r JOIN impact_limits l ON l.id = r.limit_id
             WHERE r.effect_id = $1 ORDER BY l.name, r.limit_id",
                    &[&id.as_str()],
                    |row| {
                        let state: &str = col(row, 4)?;
                        Ok(ReservationRecord {
                            limit_id: rows::id(row, 0, LimitId::parse)?,
                            limit_name: col::<&str>(row, 1)?.to_string(),
                            amount: col(row, 2)?,
                            window_start: rows::millis(row, 3)?,
                            state: ReservationState::parse(state)
                                .ok_or_else(|| rows::corrupt("reservation state", state))?,
                        })
                    },
                )
                .await?;
            Ok(Some(EffectDetail {
                effect,
                attempts,
                evidence,
                reservations,
            }))
        })
    }

    async fn list_effects(
        &self,
        env: &EnvironmentId,
        filter: &EffectFilter,
    ) -> StoreResult<Page<EffectRecord>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let f = filter;
            let action = f.action_id.as_ref().map(|a| a.as_str());
            let states = state_names(&f.states);
            let filter = "env_id = $1 AND governed AND ($2::text IS NULL OR action_id = $2)
                  AND ($3::text[] IS NULL OR state = ANY($3))";
            let total = tx
                .count(
                    &format!("SELECT COUNT(*) FROM effects WHERE {filter}"),
                    &[&env.as_str(), &action, &states],
                )
                .await?;
            let sql = format!(
                "SELECT {} FROM effects WHERE {filter} ORDER BY created_at DESC, id DESC LIMIT $4 OFFSET $5",
                rows::EFFECT_COLUMNS
            );
            let items = tx
                .all(
                    &sql,
                    &[
                        &env.as_str(),
                        &action,
                        &states,
                        &i64::from(f.limit),
                        &i64::from(f.offset),
                    ],
                    rows::effect,
                )
                .await?;
            Ok(Page {
                items,
                total: total as u64,
            })
        })
    }

    async fn count_unknown(&self) -> StoreResult<u64> {
        let n: i64 = in_transaction!(self, Mode::Read, |tx| tx
            .count("SELECT COUNT(*) FROM effects WHERE state = 'unknown'", &[]))?;
        Ok(n as u64)
    }
}
