//! Impact limits: shared caps on money, resource mutations or a declared unit. Reading needs
//! `impact-limits:read`; creating, changing and archiving need `impact-limits:write`. Each
//! answer is the limit with its usage in the current window (`LimitStatus`). `api/limits.rs`
//! parses and renders around these.

use super::{Error, Principal, Result};
use crate::state::AppState;
use steward_core::impact::LimitSpec;
use steward_core::{scopes, LimitId};
use steward_store::{Actor, LimitRecord, LimitStatus};

/// A limit id from a path; one that does not parse is a limit that does not exist.
pub fn parse_id(id: &str) -> Result<LimitId> {
    LimitId::parse(id).map_err(|_| Error::not_found("impact limit"))
}

async fn find(state: &AppState, principal: &Principal, id: &LimitId) -> Result<LimitStatus> {
    state
        .store
        .limit(&principal.env.id, id, state.clock.now())
        .await?
        .ok_or_else(|| Error::not_found("impact limit"))
}

/// The principal's limits (archived ones too when `include_archived`).
pub async fn list(
    state: &AppState,
    principal: &Principal,
    include_archived: bool,
) -> Result<Vec<LimitStatus>> {
    principal.require(scopes::IMPACT_LIMITS_READ)?;
    Ok(state
        .store
        .list_limits(&principal.env.id, include_archived, state.clock.now())
        .await?)
}

/// One limit with its usage.
pub async fn get(state: &AppState, principal: &Principal, id: &LimitId) -> Result<LimitStatus> {
    principal.require(scopes::IMPACT_LIMITS_READ)?;
    find(state, principal, id).await
}

/// Creates a limit; an `actionName` must name an action of the environment.
pub async fn create(
    state: &AppState,
    principal: &Principal,
    spec: LimitSpec,
) -> Result<LimitStatus> {
    principal.require(scopes::IMPACT_LIMITS_WRITE)?;
    if let Some(name) = &spec.action_name {
        if state.store.action(&principal.env.id, name).await?.is_none() {
            return Err(Error::validation(
                "actionName",
                format!("names no action called `{name}` in this environment"),
            ));
        }
    }
    let now = state.clock.now();
    let record = LimitRecord {
        id: LimitId::from_unique(&crate::clock::unique()),
        env_id: principal.env.id.clone(),
        spec,
        archived_at: None,
        created_at: now,
        updated_at: now,
    };
    state
        .store
        .create_limit(&record, &Actor::key(&principal.key.id, now))
        .await?;
    find(state, principal, &record.id).await
}

/// A change of a limit: its name, its amount, or both (each already checked).
#[derive(Debug, Clone, Default)]
pub struct Change {
    pub name: Option<String>,
    pub amount: Option<i64>,
}

/// Renames a limit or changes its amount.
pub async fn update(
    state: &AppState,
    principal: &Principal,
    id: &LimitId,
    change: &Change,
) -> Result<LimitStatus> {
    principal.require(scopes::IMPACT_LIMITS_WRITE)?;
    let actor = Actor::key(&principal.key.id, state.clock.now());
    state
        .store
        .update_limit(
            &principal.env.id,
            id,
            change.name.as_deref(),
            change.amount,
            &actor,
        )
        .await?;
    find(state, principal, id).await
}

/// Archives a limit (once): it stops applying to new effects; existing reservations still
/// settle.
pub async fn archive(state: &AppState, principal: &Principal, id: &LimitId) -> Result<LimitStatus> {
    principal.require(scopes::IMPACT_LIMITS_WRITE)?;
    let current = find(state, principal, id).await?;
    if current.limit.archived_at.is_none() {
        let actor = Actor::key(&principal.key.id, state.clock.now());
        state
            .store
            .archive_limit(&principal.env.id, id, &actor)
            .await?;
    }
    find(state, principal, id).await
}
