//! Impact limits and reservations. A tally runs under its environment's lock, shared (no limit
//! is created or archived meanwhile), and locks the limits that apply to its effect (`FOR
//! UPDATE`, ordered by id) before it sums their usage: concurrent tallies against one limit, from
//! any replica, are checked one after the other and their sum never passes it, while tallies
//! against other limits, or in an environment without limits, do not wait for each other.
//! Settlement runs inside `change_effect`'s transaction and only moves reservations between
//! states, never adding usage.

use super::audit_log::{append, Entry};
use super::conn::Tx;
use super::conn::{in_transaction, Mode};
use super::rows::{self, col, id, millis, millis_opt};
use super::PostgresStore;
use crate::error::{StoreError, StoreResult};
use crate::governance::{ImpactRequest, LimitRecord, LimitStatus, ReserveOutcome};
use crate::records::Actor;
use crate::store::Limits;
use crate::tally::{reserved, reserved_audit, tally, Tally};
use async_trait::async_trait;
use serde_json::json;
use std::collections::HashMap;
use steward_core::impact::{LimitSpec, Period, ReservationState, Usage};
use steward_core::{EffectId, EnvironmentId, LimitId, Millis};
use tokio_postgres::Row;

const COLUMNS: &str = "id, env_id, name, dimension, unit, currency, period, amount, action_name, archived_at, created_at, updated_at";

fn decode(row: &Row) -> StoreResult<LimitRecord> {
    let period: &str = col(row, 6)?;
    Ok(LimitRecord {
        id: id(row, 0, LimitId::parse)?,
        env_id: id(row, 1, EnvironmentId::parse)?,
        spec: LimitSpec {
            name: col(row, 2)?,
            dimension: col(row, 3)?,
            unit: col(row, 4)?,
            currency: col(row, 5)?,
            period: Period::parse(period).ok_or_else(|| rows::corrupt("period", period))?,
            amount: col(row, 7)?,
            action_name: col(row, 8)?,
        },
        archived_at: millis_opt(row, 9)?,
        created_at: millis(row, 10)?,
        updated_at: millis(row, 11)?,
    })
}

fn audit_view(l: &LimitRecord) -> serde_json::Value {
    json!({
        "name": l.spec.name, "dimension": l.spec.dimension, "unit": l.spec.unit,
        "period": l.spec.period.as_str(), "amount": l.spec.amount, "actionName": l.spec.action_name,
        "archived": l.archived_at.is_some(),
    })
}

async fn record(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    id: &LimitId,
) -> StoreResult<Option<LimitRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM impact_limits WHERE env_id = $1 AND id = $2");
    tx.one(&sql, &[&env.as_str(), &id.as_str()], decode).await
}

/// A limit's usage in one window.
async fn usage(tx: &Tx<'_>, limit: &LimitId, window: Millis) -> StoreResult<Usage> {
    let sums = tx
        .query(
            "SELECT state, COALESCE(SUM(amount), 0)::BIGINT FROM impact_reservations
             WHERE limit_id = $1 AND window_start = $2 GROUP BY state",
            &[&limit.as_str(), &window.0],
        )
        .await?;
    let mut usage = Usage::default();
    for row in &sums {
        add_sum(&mut usage, col(row, 0)?, col(row, 1)?)?;
    }
    Ok(usage)
}

/// Counts the sum of a limit's reservations in `state` into its usage.
fn add_sum(usage: &mut Usage, state: &str, sum: i64) -> StoreResult<()> {
    match ReservationState::parse(state) {
        Some(ReservationState::Consumed) => usage.consumed = sum,
        Some(ReservationState::Reserved) => usage.reserved = sum,
        Some(ReservationState::Exposure) => usage.exposure = sum,
        Some(ReservationState::Released) => {}
        None => return Err(rows::corrupt("reservation state", state)),
    }
    Ok(())
}

async fn status(tx: &Tx<'_>, limit: LimitRecord, now: Millis) -> StoreResult<LimitStatus> {
    let window_start = limit.spec.period.window_start(now);
    let usage = usage(tx, &limit.id, window_start).await?;
    Ok(LimitStatus {
        limit,
        window_start,
        usage,
    })
}

pub(crate) async fn list(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    include_archived: bool,
    now: Millis,
) -> StoreResult<Vec<LimitStatus>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM impact_limits WHERE env_id = $1 AND ($2 OR archived_at IS NULL) ORDER BY created_at, id"
    );
    let limits = tx
        .all(&sql, &[&env.as_str(), &include_archived], decode)
        .await?;
    let mut out = Vec::with_capacity(limits.len());
    for l in limits {
        out.push(status(tx, l, now).await?);
    }
    Ok(out)
}

/// The statuses of the live limits of `r`'s environment that apply to one of its quantities,
/// in the order the tally reads them (by creation), each locked `FOR UPDATE` to the end of the
/// transaction. The caller holds the environment's lock, so the set of live limits, and what
/// each applies to (`update_limit` changes only a name or an amount), stay as read here.
async fn lock_applicable(tx: &Tx<'_>, r: &ImpactRequest) -> StoreResult<Vec<LimitStatus>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM impact_limits WHERE env_id = $1 AND archived_at IS NULL ORDER BY created_at, id"
    );
    let mut applicable: Vec<LimitRecord> = tx
        .all(&sql, &[&r.env_id.as_str()], decode)
        .await?
        .into_iter()
        .filter(|l| {
            r.quantities
                .iter()
                .any(|q| l.spec.applies(&r.action_name, q))
        })
        .collect();
    if applicable.is_empty() {
        return Ok(Vec::new());
    }
    let now = r.actor.now;
    let ids: Vec<&str> = applicable.iter().map(|l| l.id.as_str()).collect();
    let windows: Vec<i64> = applicable
        .iter()
        .map(|l| l.spec.period.window_start(now).0)
        .collect();
    // Two statements: the usage is summed by the second, whose snapshot is taken once the first
    // holds every lock, so it counts every reservation committed by an earlier tally.
    let amounts = tx
        .query(
            "SELECT id, amount FROM impact_limits WHERE id = ANY($1) ORDER BY id FOR UPDATE",
            &[&ids],
        )
        .await?;
    let sums = tx
        .query(
            "SELECT r.limit_id, r.state, COALESCE(SUM(r.amount), 0)::BIGINT
             FROM impact_reservations r
             JOIN UNNEST($1::text[], $2::bigint[]) AS w(limit_id, window_start)
               ON r.limit_id = w.limit_id AND r.window_start = w.window_start
             GROUP BY r.limit_id, r.state",
            &[&ids, &windows],
        )
        .await?;
    // The amount as locked: an `update_limit` committed before the lock was granted counts.
    let mut amount: HashMap<&str, i64> = HashMap::new();
    for row in &amounts {
        amount.insert(col(row, 0)?, col(row, 1)?);
    }
    let mut usage: HashMap<&str, Usage> = HashMap::new();
    for row in &sums {
        add_sum(
            usage.entry(col(row, 0)?).or_default(),
            col(row, 1)?,
            col(row, 2)?,
        )?;
    }
    for l in &mut applicable {
        l.spec.amount = *amount
            .get(l.id.as_str())
            .ok_or_else(|| rows::corrupt("locked impact limit", l.id.as_str()))?;
    }
    Ok(applicable
        .into_iter()
        .map(|limit| LimitStatus {
            window_start: limit.spec.period.window_start(now),
            usage: usage.get(limit.id.as_str()).copied().unwrap_or_default(),
            limit,
        })
        .collect())
}

pub(crate) async fn reserve(tx: &Tx<'_>, r: &ImpactRequest) -> StoreResult<ReserveOutcome> {
    let held = tx
        .query_first(
            "SELECT 1 FROM impact_reservations WHERE effect_id = $1 LIMIT 1",
            &[&r.effect_id.as_str()],
        )
        .await?;
    if held.is_some() {
        return Ok(ReserveOutcome::AlreadyReserved);
    }
    tx.share_environment(r.env_id.as_str()).await?;
    let now = r.actor.now;
    let limits = lock_applicable(tx, r).await?;
    let holds = match tally(r, &limits) {
        Tally::Reserve(holds) => holds,
        Tally::Refuse { audit, outcome } => {
            append(
                tx,
                &r.actor,
                Entry {
                    env: Some(r.env_id.as_str()),
                    kind: "impact.refused",
                    subject: r.effect_id.as_str(),
                    before: None,
                    after: Some(audit),
                },
            )
            .await?;
            return Ok(outcome);
        }
    };
    for hold in &holds {
        tx.execute(
            "INSERT INTO impact_reservations (limit_id, effect_id, env_id, amount, window_start, state, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, 'reserved', $6, $6)",
            &[&hold.limit.as_str(), &r.effect_id.as_str(), &r.env_id.as_str(), &hold.amount, &hold.window_start.0, &now.0],
        )
        .await?;
    }
    if let Some(audit) = reserved_audit(&holds) {
        append(
            tx,
            &r.actor,
            Entry {
                env: Some(r.env_id.as_str()),
                kind: "impact.reserved",
                subject: r.effect_id.as_str(),
                before: None,
                after: Some(audit),
            },
        )
        .await?;
    }
    Ok(reserved(holds))
}

/// Settles an effect's reservations as its move's work says (`EffectChange::settles`), inside
/// the move's transaction: success consumes, failure or rejection releases, unknown keeps them
/// as exposure.
pub(crate) async fn settle(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    effect: &EffectId,
    settles: Option<ReservationState>,
    actor: &Actor,
) -> StoreResult<()> {
    let Some(after) = settles else {
        return Ok(());
    };
    let open: &[ReservationState] = match after {
        ReservationState::Exposure => &[ReservationState::Reserved],
        ReservationState::Consumed | ReservationState::Released => {
            &[ReservationState::Reserved, ReservationState::Exposure]
        }
        ReservationState::Reserved => &[],
    };
    let mut changed = 0;
    for from in open {
        changed += tx
            .execute(
                "UPDATE impact_reservations SET state = $1, updated_at = $2 WHERE effect_id = $3 AND state = $4",
                &[&after.as_str(), &actor.now.0, &effect.as_str(), &from.as_str()],
            )
            .await?;
    }
    if changed > 0 {
        append(
            tx,
            actor,
            Entry {
                env: Some(env.as_str()),
                kind: "impact.settled",
                subject: effect.as_str(),
                before: None,
                after: Some(json!({"reservations": after.as_str(), "count": changed})),
            },
        )
        .await?;
    }
    Ok(())
}

#[async_trait]
impl Limits for PostgresStore {
    async fn create_limit(&self, limit: &LimitRecord, actor: &Actor) -> StoreResult<()> {
        in_transaction!(self, Mode::Write, |tx| async {
            let l = limit;
            let s = &l.spec;
            // A new limit applies to every tally that starts after this commits: it waits for
            // the tallies in flight in its environment, which did not count it.
            tx.lock_environment(l.env_id.as_str()).await?;
            tx.execute_unique(
                "impact limit",
                &format!("INSERT INTO impact_limits ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL, $10, $10)"),
                &[
                    &l.id.as_str(), &l.env_id.as_str(), &s.name, &s.dimension, &s.unit, &s.currency,
                    &s.period.as_str(), &s.amount, &s.action_name, &actor.now.0,
                ],
            )
            .await?;
            append(
                &tx,
                actor,
                Entry {
                    env: Some(l.env_id.as_str()),
                    kind: "impact_limit.created",
                    subject: l.id.as_str(),
                    before: None,
                    after: Some(audit_view(l)),
                },
            )
            .await
        })
    }

    async fn update_limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        name: Option<&str>,
        amount: Option<i64>,
        actor: &Actor,
    ) -> StoreResult<LimitRecord> {
        in_transaction!(self, Mode::Write, |tx| async {
            let before = record(&tx, env, id).await?.ok_or(StoreError::NotFound {
                what: "impact limit",
            })?;
            tx.execute(
                "UPDATE impact_limits SET name = COALESCE($1, name), amount = COALESCE($2, amount), updated_at = $3
         WHERE env_id = $4 AND id = $5",
                &[&name, &amount, &actor.now.0, &env.as_str(), &id.as_str()],
            )
            .await?;
            let after = record(&tx, env, id).await?.ok_or(StoreError::NotFound {
                what: "impact limit",
            })?;
            append(
                &tx,
                actor,
                Entry {
                    env: Some(env.as_str()),
                    kind: "impact_limit.updated",
                    subject: id.as_str(),
                    before: Some(audit_view(&before)),
                    after: Some(audit_view(&after)),
                },
            )
            .await?;
            Ok(after)
        })
    }

    async fn archive_limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        actor: &Actor,
    ) -> StoreResult<bool> {
        in_transaction!(self, Mode::Write, |tx| async {
            // Waits for the tallies in flight in the environment, which count this limit.
            tx.lock_environment(env.as_str()).await?;
            let changed = tx
                .execute(
                    "UPDATE impact_limits SET archived_at = $1, updated_at = $1 WHERE env_id = $2 AND id = $3 AND archived_at IS NULL",
                    &[&actor.now.0, &env.as_str(), &id.as_str()],
                )
                .await?;
            if changed > 0 {
                append(
                    &tx,
                    actor,
                    Entry {
                        env: Some(env.as_str()),
                        kind: "impact_limit.archived",
                        subject: id.as_str(),
                        before: None,
                        after: Some(json!({"archived": true})),
                    },
                )
                .await?;
            }
            Ok(changed > 0)
        })
    }

    async fn limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        now: Millis,
    ) -> StoreResult<Option<LimitStatus>> {
        in_transaction!(self, Mode::Read, |tx| async {
            match record(&tx, env, id).await? {
                Some(l) => Ok(Some(status(&tx, l, now).await?)),
                None => Ok(None),
            }
        })
    }

    async fn list_limits(
        &self,
        env: &EnvironmentId,
        include_archived: bool,
        now: Millis,
    ) -> StoreResult<Vec<LimitStatus>> {
        in_transaction!(self, Mode::Read, |tx| list(&tx, env, include_archived, now))
    }

    async fn reserve_impact(&self, request: &ImpactRequest) -> StoreResult<ReserveOutcome> {
        in_transaction!(self, Mode::Write, |tx| reserve(&tx, request))
    }
}
