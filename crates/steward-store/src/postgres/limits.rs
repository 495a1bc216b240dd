//! Impact limits and reservations. Reserving every applicable limit for an effect is one
//! transaction behind the write lock, so concurrent reservations from any replica are checked
//! one after the other and their sum never passes a limit. Settlement runs inside
//! `change_effect`'s transaction.

use super::audit_log::{append, Entry};
use super::conn::{in_transaction, Mode};
use super::conn::{CommitCheck, Tx};
use super::rows::{self, col, id, millis, millis_opt};
use super::PostgresStore;
use crate::error::{StoreError, StoreResult};
use crate::governance::{ImpactRequest, LimitRecord, LimitStatus, ReserveOutcome};
use crate::records::Actor;
use crate::store::Limits;
use crate::tally::{reserved, reserved_audit, tally, Tally};
use async_trait::async_trait;
use serde_json::json;
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
        let state: &str = col(row, 0)?;
        let sum: i64 = col(row, 1)?;
        match ReservationState::parse(state) {
            Some(ReservationState::Consumed) => usage.consumed = sum,
            Some(ReservationState::Reserved) => usage.reserved = sum,
            Some(ReservationState::Exposure) => usage.exposure = sum,
            Some(ReservationState::Released) => {}
            None => return Err(rows::corrupt("reservation state", state)),
        }
    }
    Ok(usage)
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
    if tx.unlocked() {
        // The hot path (`Mode::WriteLate`): with no active limit there is nothing to tally, and
        // the commit re-reads that behind the lock. Otherwise the tally needs the total order.
        let any = tx
            .query_first(
                "SELECT 1 FROM impact_limits WHERE env_id = $1 AND archived_at IS NULL LIMIT 1",
                &[&r.env_id.as_str()],
            )
            .await?;
        if any.is_none() {
            tx.check_at_commit(CommitCheck::NoLimits {
                env: r.env_id.to_string(),
            });
            return Ok(ReserveOutcome::Reserved(Vec::new()));
        }
        tx.lock().await?;
    }
    let now = r.actor.now;
    let limits = list(tx, &r.env_id, false, now).await?;
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
    let mut changed = 0;
    for from in after.settles_from() {
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
