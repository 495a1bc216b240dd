//! Per-key budgets (`crate::budget`). Admission runs inside the submission's IMMEDIATE
//! transaction: SQLite's single writer serialises every submission, so reading the key's usage
//! and inserting its reservation cannot interleave with another's.

use super::audit_log::{append, AuditEntry, AuditKind};
use super::conn::{execute_cached, unavailable};
use super::rows::{self, col, query_all, query_one};
use super::SqliteStore;
use crate::budget::{admission, put_entry, Admission, BudgetRecord, BudgetSpec, BudgetStatus};
use crate::budget::{BUDGET_DIMENSION_INVOCATIONS, BUDGET_INVOCATION_UNITS, BUDGET_UNCAPPED_UNITS};
use crate::error::{StoreError, StoreResult};
use crate::records::{Actor, Submission, SubmitOutcome};
use crate::store::Budgets;
use async_trait::async_trait;
use rusqlite::{params, Connection, Row, Transaction};
use steward_core::impact::Period;
use steward_core::{EnvironmentId, KeyId, LimitId, Millis};

const COLUMNS: &str = "key_id, env_id, limit_id, monthly_cost_cents_cap, dimension_caps, alert_threshold, enabled, created_at, updated_at";

fn decode(row: &Row<'_>) -> StoreResult<BudgetRecord> {
    let caps: String = col(row, 4)?;
    Ok(BudgetRecord {
        key_id: KeyId::parse(&col::<String>(row, 0)?).map_err(|e| rows::corrupt("key id", e))?,
        env_id: EnvironmentId::parse(&col::<String>(row, 1)?)
            .map_err(|e| rows::corrupt("env id", e))?,
        limit_id: LimitId::parse(&col::<String>(row, 2)?)
            .map_err(|e| rows::corrupt("limit id", e))?,
        spec: BudgetSpec {
            monthly_cost_cents_cap: col(row, 3)?,
            dimension_caps: BudgetSpec::caps_from_json(&caps)
                .ok_or_else(|| rows::corrupt("budget dimension caps", &caps))?,
            alert_threshold: col(row, 5)?,
            enabled: col(row, 6)?,
        },
        created_at: Millis(col(row, 7)?),
        updated_at: Millis(col(row, 8)?),
    })
}

/// The key's budget, deleted or not (`deleted_at` second).
fn any_record(conn: &Connection, key: &KeyId) -> StoreResult<Option<(BudgetRecord, Option<i64>)>> {
    let sql = format!("SELECT {COLUMNS}, deleted_at FROM budgets WHERE key_id = ?1");
    query_one(conn, &sql, &[&key.as_str()], |row| {
        Ok((decode(row)?, col(row, 9)?))
    })
}

fn live(conn: &Connection, env: &EnvironmentId, key: &KeyId) -> StoreResult<Option<BudgetRecord>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM budgets WHERE env_id = ?1 AND key_id = ?2 AND deleted_at IS NULL"
    );
    query_one(conn, &sql, &[&env.as_str(), &key.as_str()], decode)
}

fn status(conn: &Connection, budget: BudgetRecord, now: Millis) -> StoreResult<BudgetStatus> {
    let window_start = Period::Month.window_start(now);
    let usage = super::limits::usage(conn, &budget.limit_id, window_start)?;
    Ok(BudgetStatus {
        budget,
        window_start,
        usage,
    })
}

/// Admits a submission that would create an invocation under its key's live, enabled budget:
/// reserves one unit for its effect, or answers the refusal (with its audit event and nothing
/// else written). `None` when it may go on. A submission that starts settled (a policy denied
/// it) sends nothing and is not counted.
pub(crate) fn admit(tx: &Transaction<'_>, s: &Submission) -> StoreResult<Option<SubmitOutcome>> {
    if s.initial.is_terminal() {
        return Ok(None);
    }
    let Some(budget) = live(tx, &s.env_id, &s.actor)?.filter(|b| b.spec.enabled) else {
        return Ok(None);
    };
    let status = status(tx, budget, s.now)?;
    let actor = Actor::key(&s.actor, s.now);
    let entry = match admission(s, &status) {
        Admission::Refuse { entry, outcome } => {
            append(tx, &actor, entry)?;
            return Ok(Some(*outcome));
        }
        Admission::Reserve { entry } => entry,
    };
    execute_cached(
        tx,
        "INSERT INTO impact_reservations (limit_id, effect_id, env_id, amount, window_start, state, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, 'reserved', ?6, ?6)",
        params![
            status.budget.limit_id.as_str(), s.effect_id.as_str(), s.env_id.as_str(),
            BUDGET_INVOCATION_UNITS, status.window_start.0, s.now.0
        ],
    )
    .map_err(unavailable)?;
    append(tx, &actor, entry)?;
    Ok(None)
}

fn put(
    tx: &Transaction<'_>,
    env: &EnvironmentId,
    key: &KeyId,
    limit_id: &LimitId,
    spec: &BudgetSpec,
    actor: &Actor,
) -> StoreResult<BudgetRecord> {
    let existing = any_record(tx, key)?;
    if let Some((found, _)) = &existing {
        if &found.env_id != env {
            return Err(StoreError::NotFound { what: "api key" });
        }
    }
    let amount = spec.invocations_cap().unwrap_or(BUDGET_UNCAPPED_UNITS);
    let now = actor.now.0;
    let before = match &existing {
        Some((found, deleted_at)) => {
            execute_cached(
                tx,
                "UPDATE budgets SET monthly_cost_cents_cap = ?1, dimension_caps = ?2, alert_threshold = ?3,
                 enabled = ?4, deleted_at = NULL, updated_at = ?5 WHERE key_id = ?6",
                params![spec.monthly_cost_cents_cap, spec.caps_json(), spec.alert_threshold,
                        spec.enabled, now, key.as_str()],
            )
            .map_err(unavailable)?;
            execute_cached(
                tx,
                "UPDATE impact_limits SET amount = ?1, updated_at = ?2 WHERE id = ?3",
                params![amount, now, found.limit_id.as_str()],
            )
            .map_err(unavailable)?;
            deleted_at.is_none().then(|| found.spec.audit_view())
        }
        None => {
            execute_cached(
                tx,
                "INSERT INTO impact_limits (id, env_id, name, dimension, unit, currency, period, amount, action_name, archived_at, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?4, NULL, 'month', ?5, NULL, NULL, ?6, ?6)",
                params![limit_id.as_str(), env.as_str(), format!("budget:{key}"),
                        BUDGET_DIMENSION_INVOCATIONS, amount, now],
            )
            .map_err(|e| super::conn::constraint(e, "budget"))?;
            execute_cached(
                tx,
                &format!("INSERT INTO budgets ({COLUMNS}, deleted_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, NULL)"),
                params![key.as_str(), env.as_str(), limit_id.as_str(), spec.monthly_cost_cents_cap,
                        spec.caps_json(), spec.alert_threshold, spec.enabled, now],
            )
            .map_err(|e| super::conn::constraint(e, "budget"))?;
            None
        }
    };
    append(tx, actor, put_entry(env, key, before, spec))?;
    live(tx, env, key)?.ok_or(StoreError::NotFound { what: "budget" })
}

#[async_trait]
impl Budgets for SqliteStore {
    async fn put_budget(
        &self,
        env: &EnvironmentId,
        key: &KeyId,
        limit_id: &LimitId,
        spec: &BudgetSpec,
        actor: &Actor,
    ) -> StoreResult<BudgetStatus> {
        let (env, key, limit_id, spec, actor) = (
            env.clone(),
            key.clone(),
            limit_id.clone(),
            spec.clone(),
            actor.clone(),
        );
        self.write(move |tx| {
            let budget = put(tx, &env, &key, &limit_id, &spec, &actor)?;
            status(tx, budget, actor.now)
        })
        .await
    }

    async fn budget(
        &self,
        env: &EnvironmentId,
        key: &KeyId,
        now: Millis,
    ) -> StoreResult<Option<BudgetStatus>> {
        let (env, key) = (env.clone(), key.clone());
        self.read(move |conn| {
            live(conn, &env, &key)?
                .map(|b| status(conn, b, now))
                .transpose()
        })
        .await
    }

    async fn list_budgets(
        &self,
        env: &EnvironmentId,
        now: Millis,
    ) -> StoreResult<Vec<BudgetStatus>> {
        let env = env.clone();
        self.read(move |conn| {
            let sql = format!(
                "SELECT {COLUMNS} FROM budgets WHERE env_id = ?1 AND deleted_at IS NULL ORDER BY key_id"
            );
            query_all(conn, &sql, &[&env.as_str()], decode)?
                .into_iter()
                .map(|b| status(conn, b, now))
                .collect()
        })
        .await
    }

    async fn key_invocations_since(
        &self,
        env: &EnvironmentId,
        key: &KeyId,
        since: Millis,
    ) -> StoreResult<u64> {
        let (env, key) = (env.clone(), key.clone());
        self.read(move |conn| {
            let count: i64 = conn
                .query_row(
                    "SELECT COUNT(*) FROM invocations WHERE env_id = ?1 AND created_at >= ?2 AND created_by = ?3",
                    params![env.as_str(), since.0, key.as_str()],
                    |row| row.get(0),
                )
                .map_err(unavailable)?;
            Ok(count.max(0) as u64)
        })
        .await
    }

    async fn delete_budget(
        &self,
        env: &EnvironmentId,
        key: &KeyId,
        actor: &Actor,
    ) -> StoreResult<bool> {
        let (env, key, actor) = (env.clone(), key.clone(), actor.clone());
        self.write(move |tx| {
            let Some(before) = live(tx, &env, &key)? else {
                return Ok(false);
            };
            execute_cached(
                tx,
                "UPDATE budgets SET deleted_at = ?1, updated_at = ?1 WHERE key_id = ?2",
                params![actor.now.0, key.as_str()],
            )
            .map_err(unavailable)?;
            append(
                tx,
                &actor,
                AuditEntry::new(AuditKind::BudgetDeleted, env.as_str(), key.as_str())
                    .before(before.spec.audit_view()),
            )?;
            Ok(true)
        })
        .await
    }
}
