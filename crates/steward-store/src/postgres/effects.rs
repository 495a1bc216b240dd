//! Invocations and effects: the invoke write path's records.

use super::audit_log::append;
use super::conn::{in_transaction, Mode};
use super::conn::{Params, Statement, Tx};
use super::group::in_group;
use super::limits::Gate;
use super::rows::{self, col};
use super::PostgresStore;
use crate::change_plan::{ChangePlan, EvidenceRow};
use crate::error::{StoreError, StoreResult};
use crate::records::*;
use crate::store::Effects;
use crate::submit::{verdict, Facts, Verdict};
use async_trait::async_trait;
use serde_json::Value;
use std::sync::LazyLock;
use steward_core::impact::ReservationState;
use steward_core::LimitId;
use steward_core::{
    ActionId, EffectId, EffectState, EnvironmentId, IdempotencyKey, InvocationId, KeyId, Millis,
    OperationKey, ReplicaId,
};
use tokio_postgres::types::{ToSql, Type};

pub(crate) async fn invocation(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    id: &InvocationId,
) -> StoreResult<Option<InvocationRecord>> {
    let sql = format!(
        "SELECT {} FROM invocations WHERE id = $2 AND env_id = $1 COLLATE \"POSIX\"",
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

/// An environment's wall on a lookup by primary key (or by another unique key): the
/// comparison is made under `POSIX` rather than the column's `C` collation (the same byte
/// equality), so that no index on `env_id` can serve it and the planner has only the key's
/// index to choose. Without it, a statement prepared while its table was nearly empty (a new
/// database) may be planned on an `(env_id, created_at)` index, and that plan is kept while the
/// table grows until PostgreSQL next analyzes it: every lookup then reads every row of the
/// environment.
const ENV_WALL: &str = "env_id = $1 COLLATE \"POSIX\"";

/// The invocation whose effect `(env, action, operation key)` names, if any.
const BY_OPERATION_KEY_SQL: &str = "effect_id = (SELECT id FROM effects WHERE env_id = $1 AND action_id = $2 AND operation_key = $3)";

/// The invocation an operation key names, planned each time it runs ([`Tx::one_planned`]):
/// while `effects` holds a few hundred rows and has no statistics, PostgreSQL rates
/// `effects_env_created` (which matches only the environment) as cheap as the operation key's
/// unique index, and a prepared statement would keep that plan as the table grows; planned
/// each time, the lookup moves to the unique index once the table is larger. The wall by
/// primary key below cannot serve here: the environment leads the unique index.
async fn invocation_by_operation_key(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    action: &ActionId,
    key: &OperationKey,
) -> StoreResult<Option<InvocationRecord>> {
    let sql = format!(
        "SELECT {} FROM invocations WHERE {BY_OPERATION_KEY_SQL} AND {ENV_WALL}",
        rows::INVOCATION_COLUMNS
    );
    tx.one_planned(
        &sql,
        &[
            (&env.as_str(), Type::TEXT),
            (&action.as_str(), Type::TEXT),
            (&key.as_str(), Type::TEXT),
        ],
        rows::invocation,
    )
    .await
}

/// What [`verdict`] needs to decide a submission, read in its transaction: the earlier request
/// under its `Idempotency-Key` and the invocation its operation key names are read together
/// (pipelined, one round trip); `retryOf` (rare) after them.
async fn facts(tx: &Tx<'_>, s: &Submission) -> StoreResult<Facts> {
    let env = &s.env_id;
    let mut facts = Facts::default();
    let earlier = async {
        match &s.idempotency_key {
            Some(key) => super::idempotency::earlier(tx, env, &s.actor, key).await,
            None => Ok(None),
        }
    };
    let by_operation_key = async {
        match &s.operation_key {
            Some(op) => invocation_by_operation_key(tx, env, &s.action.id, op).await,
            None => Ok(None),
        }
    };
    let (earlier, by_operation_key) = tokio::try_join!(earlier, by_operation_key)?;
    facts.earlier = earlier;
    if facts.settled_by_earlier() {
        return Ok(facts);
    }
    facts.by_operation_key = by_operation_key.map(|found| (found.effect_id.clone(), found));
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
    Ok(facts)
}

/// Records an invoke request, with its approval when the action is gated. It takes no write
/// lock (`Store::submit` and `submit_and_begin` run it at READ COMMITTED, `Mode::WriteConcurrent`
/// or a group commit's member): the unique indexes on the operation key, the retried invocation
/// and the idempotency key decide between concurrent submissions. The loser's insert fails, and
/// its transaction runs again and finds the winner's row with the checks below. A budget's
/// admission is ordered by the budget's row lock (`budgets::admit`); the approval row is new.
pub(crate) async fn submit(tx: &Tx<'_>, s: &Submission) -> StoreResult<SubmitOutcome> {
    let (facts, budgeted) = tokio::try_join!(facts(tx, s), super::budgets::budgeted(tx, s))?;
    submit_with(tx, s, facts, budgeted).await
}

/// [`submit`] with its facts already read.
/// `budgeted`: whether the submitting key had a live budget when the transaction began
/// (`budgets::budgeted`, read with the facts so an unbudgeted key costs no round trip).
async fn submit_with(
    tx: &Tx<'_>,
    s: &Submission,
    facts: Facts,
    budgeted: bool,
) -> StoreResult<SubmitOutcome> {
    match verdict(s, facts) {
        Verdict::Answer(outcome) => return Ok(outcome),
        Verdict::Existing(found) => {
            if let Some(key) = &s.idempotency_key {
                record_invoke_key(tx, s, key, &found.id, "done").await?;
            }
            return Ok(SubmitOutcome::Existing(found));
        }
        Verdict::Create => {}
    }
    if budgeted {
        if let Some(refused) = super::budgets::admit(tx, s).await? {
            return Ok(refused);
        }
    }
    Ok(SubmitOutcome::Created(insert_new(tx, s).await?))
}

const RECORD_INVOKE_KEY_SQL: &str = "INSERT INTO idempotency (env_id, key_id, key, fingerprint, kind, state, invocation_id, created_at, owner)
     VALUES ($1, $8, $2, $3, 'invoke', $4, $5, $6, $7)";

async fn record_invoke_key(
    tx: &Tx<'_>,
    s: &Submission,
    key: &IdempotencyKey,
    invocation: &InvocationId,
    state: &str,
) -> StoreResult<()> {
    tx.execute(
        RECORD_INVOKE_KEY_SQL,
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

/// Inserts the new invocation, its effect, its first evidence entry and, under an
/// `Idempotency-Key`, the request's in-flight marker: one round trip (pipelined). Returns the
/// invocation as inserted.
async fn insert_new(tx: &Tx<'_>, s: &Submission) -> StoreResult<InvocationRecord> {
    let governed = s.action.definition.is_governed();
    let state = s.initial.name();
    let op = s.operation_key.as_ref().map(|k| k.as_str());
    let completed = s.initial.is_terminal().then_some(s.now.0);
    let actor = Actor::key(&s.actor, s.now);
    let insert_invocation = format!(
        "INSERT INTO invocations (id, env_id, action_id, action_name, action_version, effect_id, governed, state,
            input, input_fingerprint, operation_key, run_id, retry_of, created_by, created_at, approval_id,
            decision, completed_at, parent_span_id, shadow_decisions)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)
         RETURNING {}",
        rows::INVOCATION_COLUMNS
    );
    let (version, input) = (i64::from(s.action.version), s.input.to_string());
    let (retry_of, approval) = (
        s.retry_of.as_ref().map(|r| r.as_str()),
        s.approval.as_ref().map(|a| a.id.as_str()),
    );
    let decision = s.decision.as_ref().map(Value::to_string);
    let shadow = s.shadow_decisions.as_ref().map(Value::to_string);
    let invocation_params: &Params<'_> = &[
        &s.invocation_id.as_str(),
        &s.env_id.as_str(),
        &s.action.id.as_str(),
        &s.action.name,
        &version,
        &s.effect_id.as_str(),
        &governed,
        &state,
        &input,
        &s.input_fingerprint,
        &op,
        &s.run_id,
        &retry_of,
        &s.actor.as_str(),
        &s.now.0,
        &approval,
        &decision,
        &completed,
        &s.parent_span_id,
        &shadow,
    ];
    let effect_params: &Params<'_> = &[
        &s.effect_id.as_str(),
        &s.env_id.as_str(),
        &s.invocation_id.as_str(),
        &s.action.id.as_str(),
        &s.action.name,
        &op,
        &governed,
        &state,
        &s.provider_idempotency_key,
        &s.actor.as_str(),
        &s.now.0,
        &s.owner.as_str(),
    ];
    let evidence = EvidenceRow::new(&s.effect_id, &s.evidence, &actor);
    let evidence_row_params = evidence_params(&evidence);
    let key_params;
    let mut statements: Vec<Statement<'_>> = vec![
        (&insert_invocation, invocation_params),
        (
            "INSERT INTO effects (id, env_id, invocation_id, action_id, action_name, operation_key, governed, state,
                provider_idempotency_key, created_by, created_at, updated_at, owner)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $12)",
            effect_params,
        ),
        (INSERT_EVIDENCE_SQL, &evidence_row_params),
    ];
    let key_state = crate::submit::invoke_key_state(s);
    let (env, invocation, owner, sender) = (
        s.env_id.as_str(),
        s.invocation_id.as_str(),
        s.owner.as_str(),
        s.actor.as_str(),
    );
    let key = s.idempotency_key.as_ref().map(|k| k.as_str());
    if let Some(key) = &key {
        key_params = [
            &env as &(dyn ToSql + Sync),
            key,
            &s.request_fingerprint,
            &key_state,
            &invocation,
            &s.now.0,
            &owner,
            &sender,
        ];
        statements.push((RECORD_INVOKE_KEY_SQL, &key_params));
    }
    let results = tx.pipeline(&statements).await?;
    let created = results
        .first()
        .and_then(|rows| rows.first())
        .ok_or_else(|| rows::corrupt("inserted invocation", "no row returned"))?;
    let created = rows::invocation(created)?;
    if let Some(approval) = &s.approval {
        let binding = crate::approval_change::Binding::of(s);
        super::approvals::insert(tx, &s.env_id, approval, &s.actor, Some(binding), s.now).await?;
    }
    super::links::insert(tx, s).await?;
    append(tx, &actor, crate::submit::created_entry(s)).await?;
    Ok(created)
}

/// Appends an evidence entry at the effect's next `seq`, read in the same statement. Two
/// transactions appending to one effect at once break the `(effect_id, seq)` key: the later
/// fails (and, on the hot path, runs again).
const INSERT_EVIDENCE_SQL: &str = "INSERT INTO evidence (effect_id, seq, at, kind, source, message, data, actor)
     SELECT $1::TEXT, COALESCE(MAX(seq), 0) + 1, $2::BIGINT, $3::TEXT, $4::TEXT, $5::TEXT, $6::TEXT, $7::TEXT
     FROM evidence WHERE effect_id = $1::TEXT
     RETURNING seq";

/// The parameters of [`INSERT_EVIDENCE_SQL`] for `row`.
fn evidence_params<'a>(row: &'a EvidenceRow<'_>) -> [&'a (dyn ToSql + Sync); 7] {
    [
        &row.effect,
        &row.at,
        &row.kind,
        &row.source,
        &row.message,
        &row.data,
        &row.actor,
    ]
}

pub(crate) async fn insert_evidence(
    tx: &Tx<'_>,
    effect: &EffectId,
    e: &NewEvidence,
    actor: &Actor,
) -> StoreResult<u32> {
    let evidence = EvidenceRow::new(effect, e, actor);
    let next = tx
        .count(INSERT_EVIDENCE_SQL, &evidence_params(&evidence))
        .await?;
    u32::try_from(next).map_err(|_| rows::corrupt("evidence seq", next))
}

async fn current_state(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    effect: &EffectId,
) -> StoreResult<EffectState> {
    let row = tx
        .query_first(
            "SELECT state FROM effects WHERE id = $2 AND env_id = $1 COLLATE \"POSIX\"",
            &[&env.as_str(), &effect.as_str()],
        )
        .await?
        .ok_or(StoreError::NotFound { what: "effect" })?;
    rows::state(col(&row, 0)?)
}

/// An effect's move, in one statement: the compare-and-set on its state (`moved`; by primary
/// key, the environment and the state compared as [`ENV_WALL`] says) and, only if
/// it moved, the attempt it begins or finishes, the settlement of its reservations, its
/// invocation's state and answer, its evidence entry (at the next `seq`), and the answered
/// request's marker. Answers the invocation as the move leaves it (its columns first, all null
/// when nothing moved), then how many rows moved, finished an attempt and settled.
///
/// `$1` new state, `$2` now, `$3` attempt number begun, `$4` external reference, `$5` owner,
/// `$6` environment, `$7` effect, `$8` expected state, `$9` attempt deadline, `$10` attempt
/// number finished, `$11` its response status, `$12` its error, `$13` reservations' new state,
/// `$14` reservation states it settles, `$15`-`$17` the invocation's response status, body and
/// error, `$18` completed at, `$19`-`$23` evidence kind, source, message, data and actor, `$24`
/// the answered request's key, `$25` the attempt's holder a fenced change names (the effect
/// moves only while that replica owns it under the epoch attempt `$10` was begun with), `$26`
/// the replica a takeover makes the owner (the epoch moves on).
static CHANGE_EFFECT_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH moved AS (
        UPDATE effects SET state = $1::TEXT, updated_at = $2::BIGINT,
            attempt_count = COALESCE($3::BIGINT, attempt_count),
            external_reference = COALESCE($4::TEXT, external_reference),
            owner = COALESCE($26::TEXT, $5::TEXT, owner),
            fence = fence + CASE WHEN $26::TEXT IS NULL THEN 0 ELSE 1 END
        WHERE id = $7::TEXT AND env_id = $6::TEXT COLLATE \"POSIX\"
            AND state = $8::TEXT COLLATE \"POSIX\"
            AND ($25::TEXT IS NULL OR (owner = $25::TEXT AND fence = (
                SELECT a.fence FROM attempts a WHERE a.effect_id = $7::TEXT AND a.number = $10::BIGINT)))
        RETURNING id, invocation_id, fence),
    begun AS (
        INSERT INTO attempts (effect_id, number, started_at, deadline_at, status, owner, fence)
        SELECT id, $3::BIGINT, $2::BIGINT, $9::BIGINT, 'dispatching', $5::TEXT, fence FROM moved
        WHERE $3::BIGINT IS NOT NULL
        RETURNING 1),
    finished AS (
        UPDATE attempts SET finished_at = $2::BIGINT, status = $1::TEXT,
            response_status = $11::BIGINT, error = $12::TEXT
        WHERE effect_id = (SELECT id FROM moved) AND number = $10::BIGINT
        RETURNING 1),
    settled AS (
        UPDATE impact_reservations SET state = $13::TEXT, updated_at = $2::BIGINT
        WHERE effect_id = (SELECT id FROM moved) AND state = ANY($14::TEXT[])
        RETURNING 1),
    invocation AS (
        UPDATE invocations SET state = $1::TEXT,
            response_status = COALESCE($15::BIGINT, response_status),
            response_body = COALESCE($16::TEXT, response_body), error = COALESCE($17::TEXT, error),
            completed_at = COALESCE(completed_at, $18::BIGINT)
        WHERE effect_id = (SELECT id FROM moved)
        RETURNING {}),
    evidence AS (
        INSERT INTO evidence (effect_id, seq, at, kind, source, message, data, actor)
        SELECT m.id, (SELECT COALESCE(MAX(e.seq), 0) + 1 FROM evidence e WHERE e.effect_id = m.id),
            $2::BIGINT, $19::TEXT, $20::TEXT, $21::TEXT, $22::TEXT, $23::TEXT
        FROM moved m WHERE $19::TEXT IS NOT NULL
        RETURNING 1),
    answered AS (
        UPDATE idempotency SET state = 'done'
        WHERE env_id = $6::TEXT AND key = $24::TEXT AND kind = 'invoke'
          AND invocation_id = (SELECT invocation_id FROM moved)
        RETURNING 1)
    SELECT invocation.*, (SELECT COUNT(*) FROM moved), (SELECT COUNT(*) FROM finished),
        (SELECT COUNT(*) FROM settled), (SELECT COUNT(*) FROM begun),
        (SELECT COUNT(*) FROM evidence), (SELECT COUNT(*) FROM answered)
    FROM (SELECT 1) AS one LEFT JOIN invocation ON TRUE",
        rows::INVOCATION_COLUMNS
    )
});

/// Where the counts start in a row of [`CHANGE_EFFECT_SQL`]: after the invocation's columns.
fn change_counts_at() -> usize {
    rows::INVOCATION_COLUMNS.split(',').count()
}

/// Moves the effect with a compare-and-set on its state: `UPDATE ... WHERE state = from`, and
/// `StateConflict` with the state found when no row moved. Everything the move writes is one
/// statement ([`CHANGE_EFFECT_SQL`]), so it takes one round trip (two when it begins an attempt
/// and the kill switch is read first).
pub(crate) async fn change_effect(tx: &Tx<'_>, c: &EffectChange) -> StoreResult<()> {
    change_effect_known_halt(tx, c, None).await.map(|_| ())
}

/// [`change_effect`], with the kill switch and the presence of holds already read (under the
/// environment's lock, in this transaction) when `gate` is given. Returns the effect's
/// invocation as the move leaves it.
async fn change_effect_known_halt(
    tx: &Tx<'_>,
    c: &EffectChange,
    gate: Option<Gate>,
) -> StoreResult<Option<InvocationRecord>> {
    c.check_legal()?;
    let plan = ChangePlan::of(c);
    refuse_when_halted(tx, &plan, gate).await?;
    let row = write_change(tx, &plan).await?;
    let at = change_counts_at();
    let moved: i64 = col(&row, at)?;
    if moved == 0 {
        if let (Some(Fence::Holder(holder)), Some(f)) = (&c.fence, plan.finished) {
            fenced(tx, c, holder, f.number).await?;
        }
        let found = current_state(tx, &c.env_id, &c.effect_id).await?;
        return Err(StoreError::StateConflict {
            expected: c.from,
            found,
        });
    }
    if let Some(f) = plan.finished {
        let closed: i64 = col(&row, at + 1)?;
        if closed != 1 {
            return Err(StoreError::Corrupt(format!(
                "attempt {} of {} does not exist",
                f.number, c.effect_id
            )));
        }
    }
    let settled: i64 = col(&row, at + 2)?;
    for entry in plan.audit(settled.max(0) as u64) {
        append(tx, &c.actor, entry).await?;
    }
    if let Some(actual) = &c.actual_impact {
        super::limits::settle_actual(tx, c, actual).await?;
    }
    let has_invocation = col::<Option<&str>>(&row, 0)?.is_some();
    has_invocation.then(|| rows::invocation(&row)).transpose()
}

/// Why a holder's change did not move: `StoreError::Fenced` when the effect is no longer
/// `holder`'s under the epoch attempt `number` was begun with (a takeover came first); `Ok` when
/// the fence holds and the state is what stopped it.
async fn fenced(tx: &Tx<'_>, c: &EffectChange, holder: &ReplicaId, number: i64) -> StoreResult<()> {
    let row = tx
        .query_first(
            "SELECT e.owner, e.fence, a.fence FROM effects e
             LEFT JOIN attempts a ON a.effect_id = e.id AND a.number = $3
             WHERE e.id = $2 AND e.env_id = $1 COLLATE \"POSIX\"",
            &[&c.env_id.as_str(), &c.effect_id.as_str(), &number],
        )
        .await?
        .ok_or(StoreError::NotFound { what: "effect" })?;
    let owner: Option<&str> = col(&row, 0)?;
    let current: i64 = col(&row, 1)?;
    let held = col::<Option<i64>>(&row, 2)?.unwrap_or(-1);
    if owner == Some(holder.as_str()) && held == current {
        return Ok(());
    }
    Err(StoreError::Fenced {
        what: format!("attempt {number} of {}", c.effect_id),
        held,
        current,
    })
}

/// The kill switch: no attempt is recorded, so nothing is sent, while the environment is
/// halted. Read under the environment's lock, held shared to the commit, so an attempt
/// committed after a halt cannot exist; checked before anything is written, so a caller that
/// goes on in the same transaction (`submit_and_begin`) keeps nothing of the attempt. A stale
/// `from` is still a conflict. `gate` is the switch and the presence of holds when the caller
/// read them already.
async fn refuse_when_halted(
    tx: &Tx<'_>,
    plan: &ChangePlan<'_>,
    gate: Option<Gate>,
) -> StoreResult<()> {
    let c = plan.change;
    let halted = match (plan.begun, gate) {
        (Some(_), Some(known)) => known.halted,
        (Some(_), None) => super::kill_switch::is_halted(tx, &c.env_id).await?,
        (None, _) => false,
    };
    // A hold: no first attempt is recorded for work it covers (read under the same shared
    // lock, which `create_hold` takes exclusively); an attempt already recorded is not disturbed.
    let held = !halted
        && plan.begun.is_some()
        && c.from == EffectState::Ready
        && gate.is_none_or(|known| known.any_hold)
        && super::holds::is_held(tx, &c.env_id, &c.effect_id).await?;
    if !halted && !held {
        return Ok(());
    }
    let found = current_state(tx, &c.env_id, &c.effect_id).await?;
    Err(if found == c.from && halted {
        StoreError::Halted
    } else if found == c.from {
        StoreError::Held
    } else {
        StoreError::StateConflict {
            expected: c.from,
            found,
        }
    })
}

/// Runs [`CHANGE_EFFECT_SQL`] for `plan`: its one row.
async fn write_change(tx: &Tx<'_>, plan: &ChangePlan<'_>) -> StoreResult<tokio_postgres::Row> {
    let c = plan.change;
    let (begun, deadline, owner) = match plan.begun {
        Some(b) => (Some(b.number), Some(b.deadline_at), Some(b.owner)),
        None => (None, None, None),
    };
    let (finished, finish_status, finish_error) = match plan.finished {
        Some(f) => (Some(f.number), f.response_status, f.error),
        None => (None, None, None),
    };
    let settle_to = plan.settlement.map(|s| s.after.as_str());
    let settle_from = plan
        .settlement
        .map(|s| s.source_names())
        .unwrap_or_default();
    let e = plan.evidence.as_ref();
    let i = &plan.invocation;
    let (holder, taker) = match &c.fence {
        Some(Fence::Holder(r)) => (Some(r.as_str()), None),
        Some(Fence::TakeOver(r)) => (None, Some(r.as_str())),
        None => (None, None),
    };
    tx.query_first(
        &CHANGE_EFFECT_SQL,
        &[
            &plan.to,
            &plan.now,
            &begun,
            &c.external_reference,
            &owner,
            &c.env_id.as_str(),
            &c.effect_id.as_str(),
            &c.from.name(),
            &deadline,
            &finished,
            &finish_status,
            &finish_error,
            &settle_to,
            &settle_from,
            &i.response_status,
            &i.response_body,
            &i.error,
            &i.completed_at,
            &e.map(|e| e.kind),
            &e.map(|e| e.source),
            &e.map(|e| e.message),
            &e.and_then(|e| e.data.as_deref()),
            &e.and_then(|e| e.actor),
            &plan.answers,
            &holder,
            &taker,
        ],
    )
    .await?
    .ok_or_else(|| rows::corrupt("effect change", "no row"))
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
        // Every rule `submit` checks is held by a unique index (see [`submit`]): it takes no
        // write lock, as `submit_and_begin` does not, and joins a group commit when one is on.
        in_group!(self, |tx| submit(&tx, submission))
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
        // Round trips, once the connection has prepared these statements: the `BEGIN`, the
        // submission's facts and the tally's first reads (the environment's lock, the kill
        // switch, the live limits) together; the inserts; the limits' locks and usage, if any
        // applies, and the reservations; the attempt; the audit events with the `COMMIT`.
        in_group!(self, |tx| async {
            let s = submission;
            let (facts, reads, budgeted) = tokio::try_join!(
                facts(&tx, s),
                super::limits::read_for_tally(&tx, &first.impact),
                super::budgets::budgeted(&tx, s)
            )?;
            let outcome = submit_with(&tx, s, facts, budgeted).await?;
            if !matches!(outcome, SubmitOutcome::Created(_)) {
                return Ok(Submitted {
                    outcome,
                    first: None,
                });
            }
            let gate = reads.gate;
            let reserved = super::limits::reserve_after(&tx, &first.impact, reads).await?;
            let first = if matches!(reserved, crate::ReserveOutcome::Refused { .. }) {
                FirstAttemptOutcome::Refused(reserved)
            } else {
                match change_effect_known_halt(&tx, &first.begin, Some(gate)).await {
                    Ok(_) => FirstAttemptOutcome::Begun,
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
    }

    async fn finish_invoke_request(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
    ) -> StoreResult<()> {
        in_group!(self, |tx| async {
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
        in_group!(self, |tx| change_effect(&tx, change))
    }

    async fn change_effect_and_read(&self, change: &EffectChange) -> StoreResult<InvocationRecord> {
        in_group!(self, |tx| async {
            // The effect's invocation, as this transaction leaves it: returned by the change's
            // own statement.
            change_effect_known_halt(&tx, change, None)
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
                crate::submit::evidence_entry(env, effect, seq, evidence),
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
        in_transaction!(self, Mode::Read, |tx| invocation_by_operation_key(
            &tx,
            env,
            action,
            operation_key
        ))
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
                rows::invocation_listed_columns()
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
            let links = super::links::read(&tx, id).await?;
            let preview = match &links.preview {
                Some(p) => super::previews::by_id(&tx, p).await?,
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
