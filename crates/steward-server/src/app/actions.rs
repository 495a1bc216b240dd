//! Actions: create, read, edit (each edit appends an immutable version), delete. The HTTP
//! handlers (`api/actions.rs`) parse and render around these; `POST /actions/import`
//! (`app/import.rs`) checks each action it imports with [`definition`] too.

use super::warnings::{self, Warning};
use super::{Error, Principal, Result};
use crate::state::AppState;
use serde_json::{Map, Value};
use steward_core::{scopes, ActionDefinition, ActionId};
use steward_store::{ActionRecord, ActionVersion, Actor, StoreError};

/// An action as saved, with what saving it warns of.
#[derive(Debug)]
pub struct Saved {
    pub action: ActionRecord,
    pub warnings: Vec<Warning>,
}

/// Parses and checks a whole definition. `allow_http`: the server allows insecure destinations
/// (local fixtures), so a governed action may call plain http.
pub fn definition(map: Map<String, Value>, allow_http: bool) -> Result<ActionDefinition> {
    let def: ActionDefinition = serde_json::from_value(Value::Object(map))
        .map_err(|e| Error::validation("body", format!("is not a valid action ({e})")))?;
    def.validate()
        .and_then(|()| crate::adapters::check_definition(&def, allow_http))
        .map_err(|e| Error::validation(e.field, e.message))?;
    let def = def.normalized();
    if let Some(schema) = &def.input_schema {
        crate::input_schema::check_schema(schema)?;
    }
    if def.is_governed() {
        if let Some(url) = &def.url_template {
            let host_part = url
                .split("://")
                .nth(1)
                .unwrap_or("")
                .split('/')
                .next()
                .unwrap_or("");
            let secure = url.starts_with("https://") || (allow_http && url.starts_with("http://"));
            if !secure || host_part.contains("{{") {
                return Err(Error::validation(
                    "urlTemplate",
                    "a governed action must call an https URL with a fixed host",
                ));
            }
        }
    }
    Ok(def)
}

/// A new action record (version 1) for `def` in the principal's environment.
pub fn new_record(state: &AppState, principal: &Principal, def: ActionDefinition) -> ActionRecord {
    let now = state.clock.now();
    ActionRecord {
        id: ActionId::from_unique(&crate::clock::unique()),
        env_id: principal.env.id.clone(),
        name: def.name.clone(),
        version: 1,
        definition: def,
        created_at: now,
        updated_at: now,
    }
}

/// What saving `def` warns of: a credential that does not exist yet, or whose `allowedHosts`
/// do not take where the action calls (`app::warnings::credential_reach`).
async fn saved(state: &AppState, principal: &Principal, action: ActionRecord) -> Saved {
    let warnings = warnings::credential_reach(state, &principal.env.id, &action.definition).await;
    Saved { action, warnings }
}

fn conflict_or(e: StoreError) -> Error {
    match e {
        StoreError::Duplicate { .. } => {
            Error::conflict("already_exists", "an action with this name already exists")
        }
        other => other.into(),
    }
}

/// The principal's action named or identified by `reference`; 404 when none.
pub async fn find(
    state: &AppState,
    principal: &Principal,
    reference: &str,
) -> Result<ActionRecord> {
    state
        .store
        .action(&principal.env.id, reference)
        .await?
        .ok_or_else(|| Error::not_found("action"))
}

/// Creates an action from a whole definition (parsed with [`definition`]).
pub async fn create(
    state: &AppState,
    principal: &Principal,
    def: ActionDefinition,
) -> Result<Saved> {
    principal.require(scopes::ACTIONS_WRITE)?;
    let record = new_record(state, principal, def);
    state
        .store
        .create_action(&record, &Actor::key(&principal.key.id, record.created_at))
        .await
        .map_err(conflict_or)?;
    Ok(saved(state, principal, record).await)
}

/// Applies PATCH semantics: a field left out is unchanged, null clears it, `governed: false`
/// removes every declaration.
fn patched(current: &ActionDefinition, patch: &Map<String, Value>) -> Result<Map<String, Value>> {
    let Value::Object(mut merged) =
        serde_json::to_value(current).map_err(|e| Error::internal("action encode", &e))?
    else {
        return Err(Error::validation("body", "cannot edit this action"));
    };
    for (field, value) in patch {
        if value.is_null() {
            merged.remove(field);
        } else {
            merged.insert(field.clone(), value.clone());
        }
    }
    if patch.get("governed") == Some(&Value::Bool(false)) {
        merged.remove("impact");
        merged.remove("verify");
    }
    if merged.get("name").is_none() {
        return Err(Error::validation("name", "cannot be cleared"));
    }
    Ok(merged)
}

/// Changing what a governed action declares (`impact`, `verify`, `governed`) is governance, not
/// editing: it needs `actions:govern` as well as `actions:write`.
fn changes_declarations(current: &ActionDefinition, next: &ActionDefinition) -> bool {
    current.is_governed()
        && (current.impact != next.impact
            || current.verify != next.verify
            || current.governed != next.governed
            || current.is_governed() != next.is_governed())
}

/// Edits an action with a PATCH body: each field given replaces the stored one, `null` clears
/// it (the change stays an object of fields because any field of a definition may be cleared).
/// An edit that changes nothing writes no version.
pub async fn update(
    state: &AppState,
    principal: &Principal,
    reference: &str,
    patch: &Map<String, Value>,
) -> Result<Saved> {
    principal.require(scopes::ACTIONS_WRITE)?;
    let current = find(state, principal, reference).await?;
    let def = definition(
        patched(&current.definition, patch)?,
        state.outbound.allow_insecure,
    )?;
    if def == current.definition {
        return Ok(saved(state, principal, current).await);
    }
    if changes_declarations(&current.definition, &def) {
        principal.require(scopes::ACTIONS_GOVERN)?;
    }
    let actor = Actor::key(&principal.key.id, state.clock.now());
    let updated = state
        .store
        .update_action(
            &principal.env.id,
            &current.id,
            current.version,
            &def,
            &actor,
        )
        .await
        .map_err(conflict_or)?;
    // Disabling cancels parked approvals (as the system): wake their long polls.
    state.approval_events.notify_waiters();
    Ok(saved(state, principal, updated).await)
}

/// One action, by name or id.
pub async fn get(state: &AppState, principal: &Principal, reference: &str) -> Result<ActionRecord> {
    principal.require(scopes::ACTIONS_READ)?;
    find(state, principal, reference).await
}

/// The principal's actions.
pub async fn list(state: &AppState, principal: &Principal) -> Result<Vec<ActionRecord>> {
    principal.require(scopes::ACTIONS_READ)?;
    Ok(state.store.list_actions(&principal.env.id).await?)
}

/// Every version of an action, by name or id (a deleted action's versions by its id).
pub async fn versions(
    state: &AppState,
    principal: &Principal,
    reference: &str,
) -> Result<Vec<ActionVersion>> {
    principal.require(scopes::ACTIONS_READ)?;
    let id = match state.store.action(&principal.env.id, reference).await? {
        Some(action) => action.id,
        None => ActionId::parse(reference).map_err(|_| Error::not_found("action"))?,
    };
    let versions = state.store.action_versions(&principal.env.id, &id).await?;
    if versions.is_empty() {
        return Err(Error::not_found("action"));
    }
    Ok(versions)
}

/// Deletes an action; answers its id.
pub async fn delete(state: &AppState, principal: &Principal, reference: &str) -> Result<ActionId> {
    principal.require(scopes::ACTIONS_WRITE)?;
    let action = find(state, principal, reference).await?;
    let actor = Actor::key(&principal.key.id, state.clock.now());
    state
        .store
        .delete_action(&principal.env.id, &action.id, &actor)
        .await?;
    // Deleting cancels parked approvals (as the system): wake their long polls.
    state.approval_events.notify_waiters();
    Ok(action.id)
}
