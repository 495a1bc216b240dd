//! Per-key budgets (`crate::budget`). Admission locks the key's budget row (`FOR UPDATE`) in the
//! submission's transaction and only then sums its usage, in a statement of its own: under READ
//! COMMITTED that statement's snapshot is taken once the lock is held, so it counts every
//! reservation committed by the submissions of the same key that held the lock before, from any
//! replica, and their sum never passes the cap. Submissions by other keys do not wait.

use super::audit_log::{append, AuditEntry, AuditKind};
use super::conn::{in_transaction, Mode, Tx};
use super::rows::{self, col, id, millis};
use super::PostgresStore;
use crate::budget::{admission, put_entry, Admission, BudgetRecord, BudgetSpec, BudgetStatus};
use crate::budget::{BUDGET_DIMENSION_INVOCATIONS, BUDGET_INVOCATION_UNITS, BUDGET_UNCAPPED_UNITS};
use crate::error::{StoreError, StoreResult};
use crate::records::{Actor, Submission, SubmitOutcome};
use crate::store::Budgets;
use async_trait::async_trait;
use steward_core::impact::Period;
use steward_core::{EnvironmentId, KeyId, LimitId, Millis};
use tokio_postgres::Row;

const COLUMNS: &str = "key_id, env_id, limit_id, monthly_cost_cents_cap, dimension_caps, alert_threshold, enabled, created_at, updated_at";

fn decode(row: &Row) -> StoreResult<BudgetRecord> {
    let caps: &str = col(row, 4)?;
    Ok(BudgetRecord {
        key_id: id(row, 0, KeyId::parse)?,
        env_id: id(row, 1, EnvironmentId::parse)?,
        limit_id: id(row, 2, LimitId::parse)?,
        spec: BudgetSpec {
            monthly_cost_cents_cap: col(row, 3)?,
            dimension_caps: BudgetSpec::caps_from_json(caps)
                .ok_or_else(|| rows::corrupt("budget dimension caps", caps))?,
            alert_threshold: col(row, 5)?,
            enabled: col(row, 6)?,
        },
        created_at: millis(row, 7)?,
        updated_at: millis(row, 8)?,
    })
}

fn decode_with_deleted(row: &Row) -> StoreResult<(BudgetRecord, bool)> {
    Ok((decode(row)?, col::<Option<i64>>(row, 9)?.is_some()))
}

async fn live(tx: &Tx<'_>, env: &EnvironmentId, key: &KeyId) -> StoreResult<Option<BudgetRecord>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM budgets WHERE env_id = $1 AND key_id = $2 AND deleted_at IS NULL"
    );
    tx.one(&sql, &[&env.as_str(), &key.as_str()], decode).await
}

async fn status(tx: &Tx<'_>, budget: BudgetRecord, now: Millis) -> StoreResult<BudgetStatus> {
    let window_start = Period::Month.window_start(now);
    let usage = super::limits::usage(tx, &budget.limit_id, window_start).await?;
    Ok(BudgetStatus {
        budget,
        window_start,
        usage,
    })
}

/// Whether the submitting key has a live, enabled budget: read unlocked, with the submission's
/// other first reads (one round trip for all), so that a key without a budget pays nothing more.
/// A budget put that commits after this read applies from the key's next submission.
pub(crate) async fn budgeted(tx: &Tx<'_>, s: &Submission) -> StoreResult<bool> {
    let row = tx
        .query_first(
            "SELECT 1 FROM budgets WHERE env_id = $1 AND key_id = $2 AND deleted_at IS NULL AND enabled",
            &[&s.env_id.as_str(), &s.actor.as_str()],
        )
        .await?;
    Ok(row.is_some())
}

/// Admits a submission that would create an invocation under its key's live, enabled budget:
/// reserves one unit for its effect, or answers the refusal (with its audit event and nothing
/// else written). `None` when it may go on. A submission that starts settled (a policy denied
/// it) sends nothing and is not counted.
pub(crate) async fn admit(tx: &Tx<'_>, s: &Submission) -> StoreResult<Option<SubmitOutcome>> {
    if s.initial.is_terminal() {
        return Ok(None);
    }
    let locked = format!(
        "SELECT {COLUMNS} FROM budgets WHERE env_id = $1 AND key_id = $2 AND deleted_at IS NULL AND enabled FOR UPDATE"
    );
    let Some(budget) = tx
        .one(&locked, &[&s.env_id.as_str(), &s.actor.as_str()], decode)
        .await?
    else {
        return Ok(None);
    };
    let status = status(tx, budget, s.now).await?;
    let actor = Actor::key(&s.actor, s.now);
    let entry = match admission(s, &status) {
        Admission::Refuse { entry, outcome } => {
            append(tx, &actor, entry).await?;
            return Ok(Some(*outcome));
        }
        Admission::Reserve { entry } => entry,
    };
    tx.execute(
        "INSERT INTO impact_reservations (limit_id, effect_id, env_id, amount, window_start, state, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, 'reserved', $6, $6)",
        &[
            &status.budget.limit_id.as_str(), &s.effect_id.as_str(), &s.env_id.as_str(),
            &BUDGET_INVOCATION_UNITS, &status.window_start.0, &s.now.0,
        ],
    )
    .await?;
    append(tx, &actor, entry).await?;
    Ok(None)
}

async fn put(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    key: &KeyId,
    limit_id: &LimitId,
    spec: &BudgetSpec,
    actor: &Actor,
) -> StoreResult<BudgetRecord> {
    let sql = format!("SELECT {COLUMNS}, deleted_at FROM budgets WHERE key_id = $1 FOR UPDATE");
    let existing = tx.one(&sql, &[&key.as_str()], decode_with_deleted).await?;
    if let Some((found, _)) = &existing {
        if &found.env_id != env {
            return Err(StoreError::NotFound { what: "api key" });
        }
    }
    let amount = spec.invocations_cap().unwrap_or(BUDGET_UNCAPPED_UNITS);
    let now = actor.now.0;
    let caps = spec.caps_json();
    let before = match &existing {
        Some((found, deleted)) => {
            tx.execute(
                "UPDATE budgets SET monthly_cost_cents_cap = $1, dimension_caps = $2, alert_threshold = $3,
                 enabled = $4, deleted_at = NULL, updated_at = $5 WHERE key_id = $6",
                &[&spec.monthly_cost_cents_cap, &caps, &spec.alert_threshold, &spec.enabled, &now, &key.as_str()],
            )
            .await?;
            tx.execute(
                "UPDATE impact_limits SET amount = $1, updated_at = $2 WHERE id = $3",
                &[&amount, &now, &found.limit_id.as_str()],
            )
            .await?;
            (!deleted).then(|| found.spec.audit_view())
        }
        None => {
            let name = format!("budget:{key}");
            tx.execute_unique(
                "budget",
                "INSERT INTO impact_limits (id, env_id, name, dimension, unit, currency, period, amount, action_name, archived_at, created_at, updated_at)
                 VALUES ($1, $2, $3, $4, $4, NULL, 'month', $5, NULL, NULL, $6, $6)",
                &[&limit_id.as_str(), &env.as_str(), &name, &BUDGET_DIMENSION_INVOCATIONS, &amount, &now],
            )
            .await?;
            tx.execute_unique(
                "budget",
                &format!("INSERT INTO budgets ({COLUMNS}, deleted_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, NULL)"),
                &[&key.as_str(), &env.as_str(), &limit_id.as_str(), &spec.monthly_cost_cents_cap,
                  &caps, &spec.alert_threshold, &spec.enabled, &now],
            )
            .await?;
            None
        }
    };
    append(tx, actor, put_entry(env, key, before, spec)).await?;
    live(tx, env, key)
        .await?
        .ok_or(StoreError::NotFound { what: "budget" })
}

#[async_trait]
impl Budgets for PostgresStore {
    async fn put_budget(
        &self,
        env: &EnvironmentId,
        key: &KeyId,
        limit_id: &LimitId,
        spec: &BudgetSpec,
        actor: &Actor,
    ) -> StoreResult<BudgetStatus> {
        in_transaction!(self, Mode::Write, |tx| async {
            let budget = put(&tx, env, key, limit_id, spec, actor).await?;
            status(&tx, budget, actor.now).await
        })
    }

    async fn budget(
        &self,
        env: &EnvironmentId,
        key: &KeyId,
        now: Millis,
    ) -> StoreResult<Option<BudgetStatus>> {
        in_transaction!(self, Mode::Read, |tx| async {
            match live(&tx, env, key).await? {
                Some(b) => Ok(Some(status(&tx, b, now).await?)),
                None => Ok(None),
            }
        })
    }

    async fn list_budgets(
        &self,
        env: &EnvironmentId,
        now: Millis,
    ) -> StoreResult<Vec<BudgetStatus>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let sql = format!(
                "SELECT {COLUMNS} FROM budgets WHERE env_id = $1 AND deleted_at IS NULL ORDER BY key_id"
            );
            let budgets = tx.all(&sql, &[&env.as_str()], decode).await?;
            let mut out = Vec::with_capacity(budgets.len());
            for b in budgets {
                out.push(status(&tx, b, now).await?);
            }
            Ok(out)
        })
    }

    async fn key_invocations_since(
        &self,
        env: &EnvironmentId,
        key: &KeyId,
        since: Millis,
    ) -> StoreResult<u64> {
        in_transaction!(self, Mode::Read, |tx| async {
            let count = tx
                .count(
                    "SELECT COUNT(*) FROM invocations WHERE env_id = $1 AND created_at >= $2 AND created_by = $3",
                    &[&env.as_str(), &since.0, &key.as_str()],
                )
                .await?;
            Ok(count.max(0) as u64)
        })
    }

    async fn delete_budget(
        &self,
        env: &EnvironmentId,
        key: &KeyId,
        actor: &Actor,
    ) -> StoreResult<bool> {
        in_transaction!(self, Mode::Write, |tx| async {
            let Some(before) = live(&tx, env, key).await? else {
                return Ok(false);
            };
            tx.execute(
                "UPDATE budgets SET deleted_at = $1, updated_at = $1 WHERE key_id = $2",
                &[&actor.now.0, &key.as_str()],
            )
            .await?;
            append(
                &tx,
                actor,
                AuditEntry::new(AuditKind::BudgetDeleted, env.as_str(), key.as_str())
                    .before(before.spec.audit_view()),
            )
            .await?;
            Ok(true)
        })
    }
}
