//! Impact limits and reservations. Reserving every applicable limit for an effect is one
//! IMMEDIATE transaction: SQLite's single writer serialises concurrent reservations, so their
//! sum never passes a limit. Settlement runs inside `change_effect`'s transaction.

use super::audit_log::append;
use super::conn::{unavailable, CachedQuery};
use super::rows::{query_all, query_one};
use super::SqliteStore;
use crate::change_plan::ChangePlan;
use crate::error::{StoreError, StoreResult};
use crate::governance::{ImpactRequest, LimitRecord, LimitStatus, ReserveOutcome};
use crate::limit_rows::{self, add_sum, COLUMNS, NOT_A_BUDGET};
use crate::records::{Actor, ActualImpact, EffectChange};
use crate::store::Limits;
use crate::tally::{refused_entry, reserved, reserved_entry, tally, Tally};
use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use steward_core::impact::Usage;
use steward_core::{EnvironmentId, LimitId, Millis};

fn record(
    conn: &Connection,
    env: &EnvironmentId,
    id: &LimitId,
) -> StoreResult<Option<LimitRecord>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM impact_limits WHERE env_id = ?1 AND id = ?2 AND {NOT_A_BUDGET}"
    );
    query_one(conn, &sql, &[&env.as_str(), &id.as_str()], |row| {
        limit_rows::limit(row)
    })
}

/// A limit's usage in one window.
pub(crate) fn usage(conn: &Connection, limit: &LimitId, window: Millis) -> StoreResult<Usage> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT state, COALESCE(SUM(amount), 0) FROM impact_reservations
             WHERE limit_id = ?1 AND window_start = ?2 GROUP BY state",
        )
        .map_err(unavailable)?;
    let mut rows = stmt
        .query(params![limit.as_str(), window.0])
        .map_err(unavailable)?;
    let mut usage = Usage::default();
    while let Some(row) = rows.next().map_err(unavailable)? {
        let state: String = row.get(0).map_err(unavailable)?;
        let sum: i64 = row.get(1).map_err(unavailable)?;
        add_sum(&mut usage, &state, sum)?;
    }
    Ok(usage)
}

fn status(conn: &Connection, limit: LimitRecord, now: Millis) -> StoreResult<LimitStatus> {
    let window_start = limit.spec.period.window_start(now);
    let usage = usage(conn, &limit.id, window_start)?;
    Ok(LimitStatus {
        limit,
        window_start,
        usage,
    })
}

pub(crate) fn list(
    conn: &Connection,
    env: &EnvironmentId,
    include_archived: bool,
    now: Millis,
) -> StoreResult<Vec<LimitStatus>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM impact_limits WHERE env_id = ?1 AND (?2 OR archived_at IS NULL) AND {NOT_A_BUDGET} ORDER BY created_at, id"
    );
    query_all(conn, &sql, &[&env.as_str(), &include_archived], |row| {
        limit_rows::limit(row)
    })?
    .into_iter()
    .map(|l| status(conn, l, now))
    .collect()
}

pub(crate) fn reserve(tx: &Transaction<'_>, r: &ImpactRequest) -> StoreResult<ReserveOutcome> {
    let held: Option<i64> = tx
        .query_row_cached(
            "SELECT 1 FROM impact_reservations WHERE effect_id = ?1
             AND limit_id NOT IN (SELECT limit_id FROM budgets) LIMIT 1",
            params![r.effect_id.as_str()],
            |row| row.get(0),
        )
        .optional()
        .map_err(unavailable)?;
    if held.is_some() {
        return Ok(ReserveOutcome::AlreadyReserved);
    }
    let now = r.actor.now;
    let limits = list(tx, &r.env_id, false, now)?;
    let holds = match tally(r, &limits) {
        Tally::Reserve(holds) => holds,
        Tally::Refuse { audit, outcome } => {
            append(tx, &r.actor, refused_entry(r, audit))?;
            return Ok(outcome);
        }
    };
    for hold in &holds {
        super::conn::execute_cached(
            tx,
            "INSERT INTO impact_reservations (limit_id, effect_id, env_id, amount, window_start, state, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 'reserved', ?6, ?6)",
            params![hold.limit.as_str(), r.effect_id.as_str(), r.env_id.as_str(), hold.amount, hold.window_start.0, now.0],
        )
        .map_err(unavailable)?;
    }
    if let Some(entry) = reserved_entry(r, &holds) {
        append(tx, &r.actor, entry)?;
    }
    Ok(reserved(holds))
}

/// Settles an effect's reservations as its move's work says (`EffectChange::settles`), inside
/// the move's transaction: success consumes, failure or rejection releases, unknown keeps them
/// as exposure.
pub(crate) fn settle(tx: &Transaction<'_>, plan: &ChangePlan<'_>) -> StoreResult<()> {
    let Some(settlement) = plan.settlement else {
        return Ok(());
    };
    let mut changed = 0;
    for from in settlement.from {
        changed += super::conn::execute_cached(
            tx,
            "UPDATE impact_reservations SET state = ?1, updated_at = ?2 WHERE effect_id = ?3 AND state = ?4",
            params![
                settlement.after.as_str(),
                plan.now,
                plan.change.effect_id.as_str(),
                from.as_str()
            ],
        )
        .map_err(unavailable)?;
    }
    match plan.settled_entry(changed as u64) {
        Some(entry) => append(tx, &plan.change.actor, entry),
        None => Ok(()),
    }
}

/// A manual resolution's actual amounts (`EffectChange::actual_impact`), after the settlement:
/// the effect's reservation under each limit of that dimension and unit holds the amount,
/// consumed, or released when it is 0. One audit event says what changed.
pub(crate) fn settle_actual(
    tx: &Transaction<'_>,
    c: &EffectChange,
    actual: &[ActualImpact],
) -> StoreResult<()> {
    let mut changed = 0;
    for a in actual {
        changed += super::conn::execute_cached(
            tx,
            crate::governance::SETTLE_ACTUAL_SQL_SQLITE,
            params![
                a.amount,
                crate::governance::actual_state(a).as_str(),
                c.actor.now.0,
                c.effect_id.as_str(),
                a.dimension,
                a.unit
            ],
        )
        .map_err(unavailable)?;
    }
    append(
        tx,
        &c.actor,
        crate::governance::actual_entry(c, actual, changed),
    )
}

#[async_trait]
impl Limits for SqliteStore {
    async fn create_limit(&self, limit: &LimitRecord, actor: &Actor) -> StoreResult<()> {
        let (l, actor) = (limit.clone(), actor.clone());
        self.write(move |tx| {
            let s = &l.spec;
            super::conn::execute_cached(
                tx,
                &format!("INSERT INTO impact_limits ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, NULL, ?10, ?10, ?11)"),
                params![
                    l.id.as_str(), l.env_id.as_str(), s.name, s.dimension, s.unit, s.currency,
                    s.period.as_str(), s.amount, s.action_name, actor.now.0, s.resource_prefix
                ],
            )
            .map_err(|e| super::conn::constraint(e, "impact limit"))?;
            append(
                tx,
                &actor,
                limit_rows::created(&l),
            )
        })
        .await
    }

    async fn update_limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        name: Option<&str>,
        amount: Option<i64>,
        actor: &Actor,
    ) -> StoreResult<LimitRecord> {
        let (env, id, name, actor) = (
            env.clone(),
            id.clone(),
            name.map(str::to_string),
            actor.clone(),
        );
        self.write(move |tx| {
            let name = name.as_deref();
            let before = record(tx, &env, &id)?.ok_or(StoreError::NotFound {
                what: "impact limit",
            })?;
            super::conn::execute_cached(
                tx,
                "UPDATE impact_limits SET name = COALESCE(?1, name), amount = COALESCE(?2, amount), updated_at = ?3
         WHERE env_id = ?4 AND id = ?5",
                params![name, amount, actor.now.0, env.as_str(), id.as_str()],
            )
            .map_err(unavailable)?;
            let after = record(tx, &env, &id)?.ok_or(StoreError::NotFound {
                what: "impact limit",
            })?;
            append(
                tx,
                &actor,
                limit_rows::updated(&before, &after),
            )?;
            Ok(after)
        })
        .await
    }

    async fn archive_limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        actor: &Actor,
    ) -> StoreResult<bool> {
        let (env, id, actor) = (env.clone(), id.clone(), actor.clone());
        self.write(move |tx| {
            let changed = super::conn::execute_cached(
                tx,
                    "UPDATE impact_limits SET archived_at = ?1, updated_at = ?1 WHERE env_id = ?2 AND id = ?3 AND archived_at IS NULL",
                    params![actor.now.0, env.as_str(), id.as_str()],
                )
                .map_err(unavailable)?;
            if changed > 0 {
                append(
                    tx,
                    &actor,
                    limit_rows::archived(&env, &id),
                )?;
            }
            Ok(changed > 0)
        })
        .await
    }

    async fn limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        now: Millis,
    ) -> StoreResult<Option<LimitStatus>> {
        let (env, id) = (env.clone(), id.clone());
        self.read(move |conn| {
            record(conn, &env, &id)?
                .map(|l| status(conn, l, now))
                .transpose()
        })
        .await
    }

    async fn list_limits(
        &self,
        env: &EnvironmentId,
        include_archived: bool,
        now: Millis,
    ) -> StoreResult<Vec<LimitStatus>> {
        let env = env.clone();
        self.read(move |conn| list(conn, &env, include_archived, now))
            .await
    }

    async fn reserve_impact(&self, request: &ImpactRequest) -> StoreResult<ReserveOutcome> {
        let request = request.clone();
        self.write(move |tx| reserve(tx, &request)).await
    }
}
