//! Budgets: per-API-key caps on what a key may start in a calendar month (UTC), enforced when
//! an invoke is admitted (`steward_store::budget`). Listing, reading, putting and deleting
//! them (`api/budgets.rs`), the calling key's own month (`app/billing.rs`), and the refusal of
//! an invoke whose key's budget has no room (`app/invoke.rs`). Reading needs
//! `impact-limits:read`; putting and deleting need `impact-limits:write`, which no agent role
//! holds: a budget is an operator's cap on an agent's key.

use super::{Error, Principal, Result};
use crate::error::codes;
use crate::state::AppState;
use std::collections::BTreeMap;
use steward_core::impact::LIMIT_AMOUNT_MAX;
use steward_core::{scopes, KeyId, LimitId};
use steward_store::{
    Actor, BudgetRefusal, BudgetSpec, BudgetStatus, StoreError, BUDGET_DIMENSION_INVOCATIONS,
};
use steward_wire::BudgetBody;

/// The alert threshold a new budget gets when the put names none: the share of a cap past which
/// the view reports `alerting` (the hosted product's documented default is the same 80%).
pub const BUDGET_ALERT_THRESHOLD_DEFAULT: f64 = 0.8;

/// Why a put naming a cost cap is refused: nothing prices a call (every call would cost 0
/// cents), so the cap could never refuse, and a stored cap that never refuses would mislead.
pub const COST_CAP_REFUSED: &str = "Steward prices no call (every call costs 0 cents), so a cost cap could never refuse; leave it out or null, and cap `dimensionCaps.invocations` instead";

/// The answer to an invoke its key's budget refused (no invocation exists).
pub fn refused(refusal: &BudgetRefusal) -> Error {
    let (code, message) = match refusal {
        BudgetRefusal::Exceeded { cap, .. } => (
            codes::BUDGET_EXCEEDED,
            format!("this key's budget allows {cap} invocations this month and has no room left"),
        ),
        BudgetRefusal::ReconciliationRequired { exposure, .. } => (
            codes::BUDGET_RECONCILIATION_REQUIRED,
            format!(
                "this key's budget has room only if some of its {exposure} unknown effects did not happen: reconcile them first"
            ),
        ),
    };
    Error::of(code, message).with_details(refusal.details())
}

/// Every budgeted key of the principal's environment with this month's usage.
pub async fn list(state: &AppState, principal: &Principal) -> Result<Vec<BudgetStatus>> {
    principal.require(scopes::IMPACT_LIMITS_READ)?;
    Ok(state
        .store
        .list_budgets(&principal.env.id, state.clock.now())
        .await?)
}

/// The budget of the key `key_id` (as given in the path) with this month's usage.
pub async fn get(state: &AppState, principal: &Principal, key_id: &str) -> Result<BudgetStatus> {
    principal.require(scopes::IMPACT_LIMITS_READ)?;
    let key = key_in_env(state, principal, key_id).await?;
    state
        .store
        .budget(&principal.env.id, &key, state.clock.now())
        .await?
        .ok_or_else(|| Error::not_found("budget"))
}

/// Puts the budget of the key `key_id`: a field of `body` left out keeps its value, `null`
/// clears a cap ([`apply`]).
pub async fn put(
    state: &AppState,
    principal: &Principal,
    key_id: &str,
    body: BudgetBody,
) -> Result<BudgetStatus> {
    principal.require(scopes::IMPACT_LIMITS_WRITE)?;
    let key = key_in_env(state, principal, key_id).await?;
    let now = state.clock.now();
    let current = state.store.budget(&principal.env.id, &key, now).await?;
    let spec = apply(body, current.map(|c| c.budget.spec))?;
    let limit_id = LimitId::from_unique(&crate::clock::unique());
    state
        .store
        .put_budget(
            &principal.env.id,
            &key,
            &limit_id,
            &spec,
            &Actor::key(&principal.key.id, now),
        )
        .await
        .map_err(|e| match e {
            StoreError::NotFound { .. } => Error::not_found("api key"),
            e => e.into(),
        })
}

/// Deletes the budget of the key `key_id`: the key is no longer capped. Returns the key.
pub async fn delete(state: &AppState, principal: &Principal, key_id: &str) -> Result<KeyId> {
    principal.require(scopes::IMPACT_LIMITS_WRITE)?;
    let key = key_in_env(state, principal, key_id).await?;
    let now = state.clock.now();
    let deleted = state
        .store
        .delete_budget(&principal.env.id, &key, &Actor::key(&principal.key.id, now))
        .await?;
    if !deleted {
        return Err(Error::not_found("budget"));
    }
    Ok(key)
}

/// The key named `id`, if it belongs to the principal's environment; anything else is 404.
async fn key_in_env(state: &AppState, principal: &Principal, id: &str) -> Result<KeyId> {
    let missing = || Error::not_found("api key");
    let id = KeyId::parse(id).map_err(|_| missing())?;
    match state.store.key(&id).await? {
        Some(key) if key.env_id == principal.env.id => Ok(id),
        _ => Err(missing()),
    }
}

fn amount(field: &str, value: i64) -> Result<i64> {
    if (0..=LIMIT_AMOUNT_MAX).contains(&value) {
        Ok(value)
    } else {
        Err(Error::validation(
            field,
            format!("must be an integer from 0 to {LIMIT_AMOUNT_MAX}"),
        ))
    }
}

fn dimension_caps(given: BTreeMap<String, i64>) -> Result<BTreeMap<String, i64>> {
    let mut caps = BTreeMap::new();
    for (dimension, cap) in given {
        let field = format!("dimensionCaps.{dimension}");
        if dimension != BUDGET_DIMENSION_INVOCATIONS {
            return Err(Error::validation(
                field,
                format!(
                    "is not a dimension Steward counts (only `{BUDGET_DIMENSION_INVOCATIONS}`)"
                ),
            ));
        }
        caps.insert(dimension, amount(&field, cap)?);
    }
    Ok(caps)
}

/// The spec after applying the body to `current` (or to the defaults): a field left out keeps
/// its value, `null` clears a cap. A cost cap is refused ([`COST_CAP_REFUSED`]); one stored by
/// an earlier version is cleared by any put.
fn apply(body: BudgetBody, current: Option<BudgetSpec>) -> Result<BudgetSpec> {
    let mut spec = current.unwrap_or(BudgetSpec {
        monthly_cost_cents_cap: None,
        dimension_caps: BTreeMap::new(),
        alert_threshold: BUDGET_ALERT_THRESHOLD_DEFAULT,
        enabled: true,
    });
    if body.monthly_cost_cents_cap.is_some() {
        return Err(Error::validation("monthlyCostCentsCap", COST_CAP_REFUSED));
    }
    spec.monthly_cost_cents_cap = None;
    match body.dimension_caps {
        None => {}
        Some(None) => spec.dimension_caps.clear(),
        Some(Some(caps)) => spec.dimension_caps = dimension_caps(caps)?,
    }
    if let Some(t) = body.alert_threshold {
        if !(t > 0.0 && t <= 1.0) {
            return Err(Error::validation(
                "alertThreshold",
                "must be a number greater than 0 and at most 1",
            ));
        }
        spec.alert_threshold = t;
    }
    if let Some(enabled) = body.enabled {
        spec.enabled = enabled;
    }
    Ok(spec)
}
