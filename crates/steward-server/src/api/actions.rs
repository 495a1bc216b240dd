//! `actions`: create, read, edit (each edit appends an immutable version), delete.

use super::body;
use super::openapi as doc;
use super::views::ActionView;
use super::{idempotent, views};
use crate::auth::Caller;
use crate::envelope::ok;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Map, Value};
use steward_core::{scopes, ActionDefinition, ActionId};
use steward_store::{ActionRecord, Actor, StoreError};

/// Parses and checks a whole definition. `allow_http`: the server allows insecure destinations
/// (local fixtures), so a governed action may call plain http. `POST /actions/import` checks
/// each action it imports here too.
pub(super) fn definition(map: Map<String, Value>, allow_http: bool) -> ApiResult<ActionDefinition> {
    let def: ActionDefinition = serde_json::from_value(Value::Object(map))
        .map_err(|e| ApiError::validation("body", format!("is not a valid action ({e})")))?;
    def.validate()
        .and_then(|()| crate::adapters::check_definition(&def, allow_http))
        .map_err(|e| ApiError::validation(e.field, e.message))?;
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
                return Err(ApiError::validation(
                    "urlTemplate",
                    "a governed action must call an https URL with a fixed host",
                ));
            }
        }
    }
    Ok(def)
}

/// What saving `def` warns of: a credential that does not exist yet, or whose `allowedHosts`
/// do not take where the action calls (`app::warnings::credential_reach`).
async fn saved_warnings(
    state: &AppState,
    caller: &Caller,
    def: &ActionDefinition,
) -> Vec<steward_wire::Warning> {
    let warnings = crate::app::warnings::credential_reach(state, &caller.env.id, def).await;
    super::warnings::wire(&warnings)
}

fn conflict_or(e: StoreError) -> ApiError {
    match e {
        StoreError::Duplicate { .. } => {
            ApiError::conflict("already_exists", "an action with this name already exists")
        }
        other => other.into(),
    }
}

/// Keys that may edit actions see their wiring; the others see the tool-facing view.
fn view_for(caller: &Caller) -> ActionView {
    if caller.has(scopes::ACTIONS_WRITE) {
        ActionView::Full
    } else {
        ActionView::Tool
    }
}

async fn find(state: &AppState, caller: &Caller, reference: &str) -> ApiResult<ActionRecord> {
    state
        .store
        .action(&caller.env.id, reference)
        .await?
        .ok_or_else(|| ApiError::not_found("action"))
}

#[utoipa::path(
    post,
    path = "/actions",
    operation_id = "actions_create",
    tag = "actions",
    params(doc::IdempotencyHeader),
    request_body = doc::ActionBody,
    responses(
        (status = 201, description = "the action created (version 1)", body = doc::Single<doc::Action>),
        doc::Guarded,
        doc::Invalid,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_WRITE)?;
    let map = body::object(&bytes)?;
    body::only_known_to::<doc::ActionBody>(&map)?;
    let request = json!({"op": "action.create", "body": map});
    idempotent::run_warned(&state, &caller, &headers, request, || async {
        let def = definition(map, state.outbound.allow_insecure)?;
        let now = state.clock.now();
        let record = ActionRecord {
            id: ActionId::from_unique(&crate::clock::unique()),
            env_id: caller.env.id.clone(),
            name: def.name.clone(),
            version: 1,
            definition: def,
            created_at: now,
            updated_at: now,
        };
        state
            .store
            .create_action(&record, &Actor::key(&caller.key.id, now))
            .await
            .map_err(conflict_or)?;
        let warnings = saved_warnings(&state, &caller, &record.definition).await;
        Ok((
            StatusCode::CREATED,
            views::action(&record, ActionView::Full),
            warnings,
        ))
    })
    .await
}

/// Applies PATCH semantics: a field left out is unchanged, null clears it, `governed: false`
/// removes every declaration.
fn patched(
    current: &ActionDefinition,
    patch: &Map<String, Value>,
) -> ApiResult<Map<String, Value>> {
    let Value::Object(mut merged) =
        serde_json::to_value(current).map_err(|e| ApiError::internal("action encode", &e))?
    else {
        return Err(ApiError::validation("body", "cannot edit this action"));
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
        return Err(ApiError::validation("name", "cannot be cleared"));
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

#[utoipa::path(
    patch,
    path = "/actions/{reference}",
    operation_id = "actions_update",
    tag = "actions",
    params(doc::ActionPath, doc::IdempotencyHeader),
    request_body = doc::ActionBody,
    responses(
        (status = 200, description = "the action after the edit (a new version when anything changed)", body = doc::Single<doc::Action>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path(reference): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_WRITE)?;
    let patch = body::object(&bytes)?;
    body::only_known_to::<doc::ActionBody>(&patch)?;
    let request = json!({"op": "action.update", "ref": reference, "body": patch});
    idempotent::run_warned(&state, &caller, &headers, request, || async {
        let current = find(&state, &caller, &reference).await?;
        let def = definition(
            patched(&current.definition, &patch)?,
            state.outbound.allow_insecure,
        )?;
        if def == current.definition {
            let warnings = saved_warnings(&state, &caller, &def).await;
            return Ok((
                StatusCode::OK,
                views::action(&current, ActionView::Full),
                warnings,
            ));
        }
        if changes_declarations(&current.definition, &def) {
            caller.require(scopes::ACTIONS_GOVERN)?;
        }
        let actor = Actor::key(&caller.key.id, state.clock.now());
        let updated = state
            .store
            .update_action(&caller.env.id, &current.id, current.version, &def, &actor)
            .await
            .map_err(conflict_or)?;
        // Disabling cancels parked approvals (as the system): wake their long polls.
        state.approval_events.notify_waiters();
        let warnings = saved_warnings(&state, &caller, &updated.definition).await;
        Ok((
            StatusCode::OK,
            views::action(&updated, ActionView::Full),
            warnings,
        ))
    })
    .await
}

#[utoipa::path(
    get,
    path = "/actions/{reference}",
    operation_id = "actions_get",
    tag = "actions",
    params(doc::ActionPath),
    responses(
        (status = 200, description = "the action", body = doc::Single<doc::Action>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(reference): Path<String>,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_READ)?;
    Ok(ok(views::action(
        &find(&state, &caller, &reference).await?,
        view_for(&caller),
    )))
}

#[utoipa::path(
    get,
    path = "/actions",
    operation_id = "actions_list",
    tag = "actions",
    responses(
        (status = 200, description = "the actions", body = doc::List<doc::Action>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn list(State(state): State<AppState>, caller: Caller) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_READ)?;
    let actions = state.store.list_actions(&caller.env.id).await?;
    Ok(ok(actions
        .iter()
        .map(|a| views::action(a, view_for(&caller)))
        .collect::<Vec<_>>()))
}

#[utoipa::path(
    get,
    path = "/actions/{reference}/versions",
    operation_id = "actions_versions",
    tag = "actions",
    params(doc::ActionPath),
    responses(
        (status = 200, description = "every version of the action", body = doc::List<doc::Action>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn versions(
    State(state): State<AppState>,
    caller: Caller,
    Path(reference): Path<String>,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_READ)?;
    let id = match state.store.action(&caller.env.id, &reference).await? {
        Some(action) => action.id,
        None => ActionId::parse(&reference).map_err(|_| ApiError::not_found("action"))?,
    };
    let versions = state.store.action_versions(&caller.env.id, &id).await?;
    if versions.is_empty() {
        return Err(ApiError::not_found("action"));
    }
    let names = views::KeyNames::of(&state, &caller.env.id).await?;
    Ok(ok(versions
        .iter()
        .map(|v| views::action_version(v, view_for(&caller), &names))
        .collect::<Vec<_>>()))
}

#[utoipa::path(
    delete,
    path = "/actions/{reference}",
    operation_id = "actions_delete",
    tag = "actions",
    params(doc::ActionPath, doc::IdempotencyHeader),
    responses(
        (status = 200, description = "`{\"id\", \"deleted\": true}`", body = doc::Single<doc::Deleted>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::Conflict,
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(reference): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_WRITE)?;
    let request = json!({"op": "action.delete", "ref": reference});
    idempotent::run(&state, &caller, &headers, request, || async {
        let action = find(&state, &caller, &reference).await?;
        let actor = Actor::key(&caller.key.id, state.clock.now());
        state
            .store
            .delete_action(&caller.env.id, &action.id, &actor)
            .await?;
        // Deleting cancels parked approvals (as the system): wake their long polls.
        state.approval_events.notify_waiters();
        Ok((StatusCode::OK, steward_wire::Deleted::new(&action.id)))
    })
    .await
}
