//! Impact limits and reservations. A tally runs under its environment's lock, shared (no limit
//! is created or archived meanwhile), and locks the limits that apply to its effect (`FOR
//! UPDATE`, ordered by id) before it sums their usage: concurrent tallies against one limit, from
//! any replica, are checked one after the other and their sum never passes it, while tallies
//! against other limits, or in an environment without limits, do not wait for each other.
//! Settlement runs inside `change_effect`'s transaction and only moves reservations between
//! states, never adding usage.

use super::audit_log::append;
use super::conn::{in_transaction, Mode};
use super::conn::{Params, Statement, Tx, ENV_LOCK_SHARED_SQL};
use super::rows::{self, col};
use super::PostgresStore;
use crate::error::{StoreError, StoreResult};
use crate::governance::{ImpactRequest, LimitRecord, LimitStatus, ReserveOutcome};
use crate::limit_rows::{self, add_sum, COLUMNS, NOT_A_BUDGET};
use crate::records::{Actor, ActualImpact, EffectChange};
use crate::store::Limits;
use crate::tally::{refused_entry, reserved, reserved_entry, tally, Tally};
use async_trait::async_trait;
use std::collections::HashMap;
use steward_core::impact::Usage;
use steward_core::{EnvironmentId, LimitId, Millis};

async fn record(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    id: &LimitId,
) -> StoreResult<Option<LimitRecord>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM impact_limits WHERE env_id = $1 AND id = $2 AND {NOT_A_BUDGET}"
    );
    tx.one(&sql, &[&env.as_str(), &id.as_str()], limit_rows::limit)
        .await
}

/// A limit's usage in one window.
pub(crate) async fn usage(tx: &Tx<'_>, limit: &LimitId, window: Millis) -> StoreResult<Usage> {
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
        "SELECT {COLUMNS} FROM impact_limits WHERE env_id = $1 AND ($2 OR archived_at IS NULL) AND {NOT_A_BUDGET} ORDER BY created_at, id"
    );
    let limits = tx
        .all(&sql, &[&env.as_str(), &include_archived], limit_rows::limit)
        .await?;
    let mut out = Vec::with_capacity(limits.len());
    for l in limits {
        out.push(status(tx, l, now).await?);
    }
    Ok(out)
}

/// What a tally reads before it locks anything but its environment: whether the effect already
/// holds reservations, whether the environment is halted (for a caller that records the
/// attempt in the same transaction), and the live limits that apply to the effect.
pub(crate) struct TallyReads {
    held: bool,
    /// The kill switch, and whether any hold exists in the environment.
    pub(crate) gate: Gate,
    applicable: Vec<LimitRecord>,
}

/// What decides, before anything is written, whether a first attempt may be recorded: the
/// environment's kill switch, and whether the environment holds any hold (when none does, no
/// hold can cover the effect, and its own read is skipped: one round trip fewer).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gate {
    pub(crate) halted: bool,
    pub(crate) any_hold: bool,
}

/// Reads [`TallyReads`] in one round trip (pipelined), after taking the environment's lock
/// shared unless this transaction holds it: so the set of live limits, and what each applies
/// to (`update_limit` changes only a name or an amount), stay as read until the commit, and the
/// environment is not halted meanwhile.
pub(crate) async fn read_for_tally(tx: &Tx<'_>, r: &ImpactRequest) -> StoreResult<TallyReads> {
    let env = r.env_id.as_str();
    let live = format!(
        "SELECT {COLUMNS} FROM impact_limits WHERE env_id = $1 AND archived_at IS NULL AND {NOT_A_BUDGET} ORDER BY created_at, id"
    );
    let effect: &Params<'_> = &[&r.effect_id.as_str()];
    let env_only: &Params<'_> = &[&env];
    let mut statements: Vec<Statement<'_>> = Vec::with_capacity(4);
    let locked = tx.shares_environment(env);
    if locked {
        statements.push((ENV_LOCK_SHARED_SQL, env_only));
    }
    statements.extend([
        (
            "SELECT 1 FROM impact_reservations WHERE effect_id = $1
             AND limit_id NOT IN (SELECT limit_id FROM budgets) LIMIT 1",
            effect,
        ),
        (
            "SELECT halted, EXISTS (SELECT 1 FROM holds WHERE env_id = $1)
             FROM environments WHERE id = $1",
            env_only,
        ),
        (live.as_str(), env_only),
    ]);
    let mut results = tx
        .pipeline(&statements)
        .await?
        .into_iter()
        .skip(usize::from(locked));
    let mut next = || results.next().unwrap_or_default();
    let held = !next().is_empty();
    let gate = match next().first() {
        Some(row) => Gate {
            halted: col(row, 0)?,
            any_hold: col(row, 1)?,
        },
        None => Gate {
            halted: false,
            any_hold: false,
        },
    };
    let applicable = next()
        .iter()
        .map(limit_rows::limit)
        .collect::<StoreResult<Vec<_>>>()?
        .into_iter()
        .filter(|l| {
            r.quantities
                .iter()
                .any(|q| l.spec.applies(&r.action_name, r.resource.as_deref(), q))
        })
        .collect();
    Ok(TallyReads {
        held,
        gate,
        applicable,
    })
}

/// The statuses of the `applicable` limits, in the order the tally reads them (by creation),
/// each locked `FOR UPDATE` to the end of the transaction: one round trip (pipelined).
async fn lock_applicable(
    tx: &Tx<'_>,
    r: &ImpactRequest,
    mut applicable: Vec<LimitRecord>,
) -> StoreResult<Vec<LimitStatus>> {
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
    let results = tx
        .pipeline(&[
            (
                "SELECT id, amount FROM impact_limits WHERE id = ANY($1) ORDER BY id FOR UPDATE",
                &[&ids],
            ),
            (
                "SELECT r.limit_id, r.state, COALESCE(SUM(r.amount), 0)::BIGINT
                 FROM impact_reservations r
                 JOIN UNNEST($1::text[], $2::bigint[]) AS w(limit_id, window_start)
                   ON r.limit_id = w.limit_id AND r.window_start = w.window_start
                 GROUP BY r.limit_id, r.state",
                &[&ids, &windows],
            ),
        ])
        .await?;
    let (amounts, sums) = match results.as_slice() {
        [amounts, sums] => (amounts, sums),
        _ => return Err(rows::corrupt("limit tally", "a statement answered nothing")),
    };
    // The amount as locked: an `update_limit` committed before the lock was granted counts.
    let mut amount: HashMap<&str, i64> = HashMap::new();
    for row in amounts {
        amount.insert(col(row, 0)?, col(row, 1)?);
    }
    let mut usage: HashMap<&str, Usage> = HashMap::new();
    for row in sums {
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

/// Reserves every live limit that applies to the effect, or none (refused); see the module doc
/// for why concurrent reservations never pass a limit.
pub(crate) async fn reserve(tx: &Tx<'_>, r: &ImpactRequest) -> StoreResult<ReserveOutcome> {
    let reads = read_for_tally(tx, r).await?;
    reserve_after(tx, r, reads).await
}

/// [`reserve`] with its first reads done ([`read_for_tally`], in this transaction).
pub(crate) async fn reserve_after(
    tx: &Tx<'_>,
    r: &ImpactRequest,
    reads: TallyReads,
) -> StoreResult<ReserveOutcome> {
    if reads.held {
        return Ok(ReserveOutcome::AlreadyReserved);
    }
    let now = r.actor.now;
    let limits = lock_applicable(tx, r, reads.applicable).await?;
    let holds = match tally(r, &limits) {
        Tally::Reserve(holds) => holds,
        Tally::Refuse { audit, outcome } => {
            append(tx, &r.actor, refused_entry(r, audit)).await?;
            return Ok(outcome);
        }
    };
    if !holds.is_empty() {
        let limits: Vec<&str> = holds.iter().map(|h| h.limit.as_str()).collect();
        let amounts: Vec<i64> = holds.iter().map(|h| h.amount).collect();
        let windows: Vec<i64> = holds.iter().map(|h| h.window_start.0).collect();
        tx.execute(
            "INSERT INTO impact_reservations (limit_id, effect_id, env_id, amount, window_start, state, created_at, updated_at)
             SELECT limit_id, $2, $3, amount, window_start, 'reserved', $6, $6
             FROM UNNEST($1::text[], $4::bigint[], $5::bigint[]) AS h(limit_id, amount, window_start)",
            &[&limits, &r.effect_id.as_str(), &r.env_id.as_str(), &amounts, &windows, &now.0],
        )
        .await?;
    }
    if let Some(entry) = reserved_entry(r, &holds) {
        append(tx, &r.actor, entry).await?;
    }
    Ok(reserved(holds))
}

/// A manual resolution's actual amounts (`EffectChange::actual_impact`), after the settlement:
/// the effect's reservation under each limit of that dimension and unit holds the amount,
/// consumed, or released when it is 0. One audit event says what changed.
pub(crate) async fn settle_actual(
    tx: &Tx<'_>,
    c: &EffectChange,
    actual: &[ActualImpact],
) -> StoreResult<()> {
    let mut changed = 0;
    for a in actual {
        let state = crate::governance::actual_state(a).as_str();
        changed += tx
            .execute(
                crate::governance::SETTLE_ACTUAL_SQL_POSTGRES,
                &[
                    &a.amount,
                    &state,
                    &c.actor.now.0,
                    &c.effect_id.as_str(),
                    &a.dimension,
                    &a.unit,
                ],
            )
            .await? as usize;
    }
    append(
        tx,
        &c.actor,
        crate::governance::actual_entry(c, actual, changed),
    )
    .await
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
                &format!("INSERT INTO impact_limits ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL, $10, $10, $11)"),
                &[
                    &l.id.as_str(), &l.env_id.as_str(), &s.name, &s.dimension, &s.unit, &s.currency,
                    &s.period.as_str(), &s.amount, &s.action_name, &actor.now.0, &s.resource_prefix,
                ],
            )
            .await?;
            append(&tx, actor, limit_rows::created(l)).await
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
            append(&tx, actor, limit_rows::updated(&before, &after)).await?;
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
                append(&tx, actor, limit_rows::archived(env, id)).await?;
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
