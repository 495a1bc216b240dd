//! Holds: besides the kill switch, an operator may hold one action, one operation key, or that
//! key under that action. New work it covers is recorded and parked (`ready`, no attempt:
//! the store refuses its first attempt with `StoreError::Held`), work already dispatching is
//! not disturbed, and releasing the hold dispatches each parked invocation once. A retry of a
//! held operation key answers the same parked invocation (the operation key's one effect).
//! `api/holds.rs`, the console's holds page and `steward holds` all call these; they need the
//! kill switch's scope (`environments:halt`). docs/DECISIONS.md, "Holds".

use super::{Error, Principal, Result};
use crate::state::AppState;
use steward_core::{check_text, scopes, EffectState, HoldId, OperationKey, TextKind};
use steward_store::{Actor, HoldRecord, InvocationRecord, StoreError};

/// The most holds an environment keeps at once: each first attempt reads them, and an
/// operator who needs more wants the kill switch.
pub const HOLDS_PER_ENVIRONMENT_MAX: usize = 100;

/// The longest hold reason kept, in bytes (as a halt's).
pub const HOLD_REASON_LEN_MAX: usize = super::environment::HALT_REASON_LEN_MAX;

/// The longest action name a hold names, in bytes (an action's own bound).
pub const HOLD_ACTION_NAME_LEN_MAX: usize = steward_core::ACTION_NAME_LEN_MAX;

/// What an operator asks to hold: an action, an operation key, or both (that key under that
/// action); at least one.
#[derive(Debug, Clone, Default)]
pub struct NewHold {
    pub action_name: Option<String>,
    pub operation_key: Option<String>,
    pub reason: Option<String>,
}

/// What a release came to: the hold as it was, and how many parked invocations it dispatched.
#[derive(Debug)]
pub struct Released {
    pub hold: HoldRecord,
    pub released: usize,
}

/// Checks a hold's fields without reading anything, naming the field at fault.
pub fn check(new: &NewHold) -> Result<()> {
    if new.action_name.is_none() && new.operation_key.is_none() {
        return Err(Error::validation(
            "actionName",
            "a hold names an actionName, an operationKey, or both",
        ));
    }
    if let Some(name) = &new.action_name {
        if name.is_empty() || name.len() > HOLD_ACTION_NAME_LEN_MAX {
            return Err(Error::validation(
                "actionName",
                format!("must be 1 to {HOLD_ACTION_NAME_LEN_MAX} bytes"),
            ));
        }
    }
    if let Some(key) = &new.operation_key {
        OperationKey::parse(key).map_err(|e| Error::validation("operationKey", e.to_string()))?;
    }
    for (field, text, kind) in [
        ("actionName", &new.action_name, TextKind::Line),
        ("reason", &new.reason, TextKind::Prose),
    ] {
        if let Some(text) = text {
            check_text(field, text, kind).map_err(|e| Error::validation(field, e.message))?;
        }
    }
    if new
        .reason
        .as_ref()
        .is_some_and(|r| r.len() > HOLD_REASON_LEN_MAX)
    {
        return Err(Error::validation(
            "reason",
            format!("must be at most {HOLD_REASON_LEN_MAX} bytes"),
        ));
    }
    Ok(())
}

/// A hold id from a path; one that does not parse is a hold that does not exist.
pub fn parse_id(id: &str) -> Result<HoldId> {
    HoldId::parse(id).map_err(|_| Error::not_found("hold"))
}

/// Holds an action, an operation key, or both, in the principal's environment. An `actionName`
/// must name an action of the environment. From the answer on, no first attempt of the work it
/// covers is recorded, on any replica.
pub async fn create(state: &AppState, principal: &Principal, new: NewHold) -> Result<HoldRecord> {
    principal.require(scopes::ENVIRONMENTS_HALT)?;
    check(&new)?;
    let env = &principal.env.id;
    if let Some(name) = &new.action_name {
        if state.store.action(env, name).await?.is_none() {
            return Err(Error::validation(
                "actionName",
                format!("names no action called `{name}` in this environment"),
            ));
        }
    }
    if state.store.list_holds(env).await?.len() >= HOLDS_PER_ENVIRONMENT_MAX {
        return Err(Error::validation(
            "actionName",
            format!("the environment already keeps {HOLDS_PER_ENVIRONMENT_MAX} holds, the most it may; release one or halt the environment"),
        ));
    }
    let now = state.clock.now();
    let record = HoldRecord {
        id: HoldId::from_unique(&crate::clock::unique()),
        env_id: env.clone(),
        action_name: new.action_name,
        operation_key: new.operation_key,
        reason: new.reason,
        created_by: principal.key.id.to_string(),
        created_at: now,
    };
    state
        .store
        .create_hold(&record, &Actor::key(&principal.key.id, now))
        .await
        .map_err(|e| match e {
            StoreError::Duplicate { .. } => Error::of(
                crate::error::codes::ALREADY_EXISTS,
                "the environment already holds this action and operation key",
            ),
            e => e.into(),
        })?;
    tracing::warn!(environment = %env, hold = %record.id, "hold created");
    Ok(record)
}

/// The principal's environment's holds, oldest first.
pub async fn list(state: &AppState, principal: &Principal) -> Result<Vec<HoldRecord>> {
    principal.require(scopes::ENVIRONMENTS_HALT)?;
    Ok(state.store.list_holds(&principal.env.id).await?)
}

/// Releases a hold and dispatches, once each, the parked invocations it covered. One still
/// covered by another hold (or a halt) is parked again, unsent.
pub async fn release(state: &AppState, principal: &Principal, id: &HoldId) -> Result<Released> {
    principal.require(scopes::ENVIRONMENTS_HALT)?;
    let actor = Actor::key(&principal.key.id, state.clock.now());
    let hold = state
        .store
        .release_hold(&principal.env.id, id, &actor)
        .await?;
    let released = crate::dispatch::park::release_matching(state, &principal.env.id, |inv| {
        hold.covers(
            &inv.action_name,
            inv.operation_key.as_ref().map(|k| k.as_str()),
        )
    })
    .await?;
    tracing::info!(environment = %principal.env.id, hold = %hold.id, released, "hold released");
    Ok(Released { hold, released })
}

/// The hold an invocation is parked under, if it is parked (`ready`) and one covers it: what an
/// answer shows as `held`.
pub async fn holding(state: &AppState, inv: &InvocationRecord) -> Result<Option<HoldRecord>> {
    if inv.state != EffectState::Ready {
        return Ok(None);
    }
    let holds = state.store.list_holds(&inv.env_id).await?;
    Ok(holds.into_iter().find(|h| {
        h.covers(
            &inv.action_name,
            inv.operation_key.as_ref().map(|k| k.as_str()),
        )
    }))
}
