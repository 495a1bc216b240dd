//! Reading invocations and effects, with the SDK's filters.

use super::bounded;
use super::openapi as doc;
use super::query::Query;
use super::views;
use crate::auth::Caller;
use crate::envelope::{ok, paged, PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;
use steward_core::{
    scopes, ActionId, EffectId, EffectState, Grade, InvocationId, InvocationStatus,
};

#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct InvocationQuery {
    /// Only this action's invocations (name or id).
    action: Option<String>,
    #[param(value_type = Option<doc::InvocationStatusParam>, inline)]
    status: Option<String>,
    /// Page size: 1 to 200 (default 50); out-of-range values are clamped. A page also ends
    /// before its answer passes 4 MiB (`hasMore` and `nextCursor` then say where to go on).
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
    /// How many to skip.
    offset: Option<u32>,
    /// Where to start: the `pagination.nextCursor` of the page before (takes the place of
    /// `offset`).
    #[param(max_length = 16)]
    cursor: Option<String>,
}

#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EffectQuery {
    /// Only this action's effects (name or id).
    action: Option<String>,
    #[param(value_type = Option<doc::OutcomeParam>, inline)]
    outcome: Option<String>,
    #[param(value_type = Option<doc::StageParam>, inline)]
    stage: Option<String>,
    #[param(value_type = Option<doc::GradeParam>, inline)]
    grade: Option<String>,
    /// Only effects that still need someone (or only those that do not).
    #[param(value_type = Option<bool>)]
    unresolved: Option<String>,
    /// Page size: 1 to 200 (default 50); out-of-range values are clamped.
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
    /// How many to skip.
    offset: Option<u32>,
}

fn page(limit: Option<u32>, offset: Option<u32>) -> (u32, u32) {
    (
        limit.unwrap_or(PAGE_LIMIT_DEFAULT).clamp(1, PAGE_LIMIT_MAX),
        offset.unwrap_or(0),
    )
}

/// Narrows a set of states by a wire value of one of their derived properties.
fn narrow<T: serde::Serialize>(
    states: Option<Vec<EffectState>>,
    field: &str,
    value: Option<&str>,
    property: impl Fn(EffectState) -> T,
) -> ApiResult<Option<Vec<EffectState>>> {
    let Some(value) = value else {
        return Ok(states);
    };
    let wire = |s: EffectState| {
        serde_json::to_value(property(s))
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
    };
    if !EffectState::ALL
        .iter()
        .any(|s| wire(*s).as_deref() == Some(value))
    {
        return Err(ApiError::validation(
            field,
            format!("`{value}` is not a known value"),
        ));
    }
    let base = states.unwrap_or_else(|| EffectState::ALL.to_vec());
    Ok(Some(
        base.into_iter()
            .filter(|s| wire(*s).as_deref() == Some(value))
            .collect(),
    ))
}

async fn action_filter(
    state: &AppState,
    caller: &Caller,
    reference: Option<&str>,
) -> ApiResult<Option<Option<ActionId>>> {
    let Some(reference) = reference else {
        return Ok(Some(None));
    };
    Ok(state
        .store
        .action(&caller.env.id, reference)
        .await?
        .map(|a| Some(a.id))
        .or_else(|| ActionId::parse(reference).ok().map(Some)))
}

async fn invocations_page(
    state: &AppState,
    caller: &Caller,
    action: Option<&str>,
    q: &InvocationQuery,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_READ)?;
    let _read = state.heavy_reads.admit(caller.key.id.as_str())?;
    let offset = match q.cursor.as_deref() {
        Some(c) => Some(bounded::cursor_offset(c)?),
        None => q.offset,
    };
    let (limit, offset) = page(q.limit, offset);
    let states = match q.status.as_deref() {
        None => None,
        Some(s) => {
            let status = InvocationStatus::parse(s).ok_or_else(|| {
                ApiError::validation("status", format!("`{s}` is not a known status"))
            })?;
            Some(
                EffectState::ALL
                    .into_iter()
                    .filter(|e| e.invocation_status() == status)
                    .collect(),
            )
        }
    };
    let Some(action_id) = action_filter(state, caller, action).await? else {
        return Ok(paged(
            Vec::<steward_wire::Invocation>::new(),
            0,
            limit,
            offset,
        ));
    };
    let filter = steward_store::InvocationFilter {
        action_id,
        states,
        limit,
        offset,
    };
    let found = state
        .store
        .list_invocations(&caller.env.id, &filter)
        .await?;
    Ok(bounded::page(
        found.items.iter().map(views::listed_invocation).collect(),
        found.total,
        limit,
        offset,
    ))
}

#[utoipa::path(
    get,
    path = "/actions/invocations",
    operation_id = "reads_list_invocations",
    tag = "invocations",
    params(InvocationQuery),
    responses(
        (status = 200, description = "a page of invocations, newest first", body = doc::Page<doc::Invocation>),
        doc::Guarded,
        doc::Invalid,
        doc::Busy,
    )
)]
pub async fn list_invocations(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<InvocationQuery>,
) -> ApiResult<Response> {
    invocations_page(&state, &caller, q.action.as_deref(), &q).await
}

#[utoipa::path(
    get,
    path = "/actions/{reference}/invocations",
    operation_id = "reads_invocations_for_action",
    tag = "invocations",
    params(doc::ActionPath, InvocationQuery),
    responses(
        (status = 200, description = "a page of the action's invocations", body = doc::Page<doc::Invocation>),
        doc::Guarded,
        doc::Invalid,
        doc::Busy,
        doc::Missing,
    )
)]
pub async fn invocations_for_action(
    State(state): State<AppState>,
    caller: Caller,
    Path(reference): Path<String>,
    Query(q): Query<InvocationQuery>,
) -> ApiResult<Response> {
    if state
        .store
        .action(&caller.env.id, &reference)
        .await?
        .is_none()
    {
        return Err(ApiError::not_found("action"));
    }
    invocations_page(&state, &caller, Some(&reference), &q).await
}

#[utoipa::path(
    get,
    path = "/actions/invocations/{id}",
    operation_id = "reads_invocation",
    tag = "invocations",
    params(doc::IdPath),
    responses(
        (status = 200, description = "the invocation", body = doc::Single<doc::Invocation>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn invocation(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_READ)?;
    let id = InvocationId::parse(&id).map_err(|_| ApiError::not_found("invocation"))?;
    let found = state
        .store
        .invocation(&caller.env.id, &id)
        .await?
        .ok_or_else(|| ApiError::not_found("invocation"))?;
    Ok(ok(views::invocation(&found)))
}

#[utoipa::path(
    get,
    path = "/actions/effects",
    operation_id = "reads_list_effects",
    tag = "effects",
    params(EffectQuery),
    responses(
        (status = 200, description = "a page of effects, newest first", body = doc::Page<doc::Effect>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn list_effects(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<EffectQuery>,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_READ)?;
    let (limit, offset) = page(q.limit, q.offset);
    let mut states = narrow(None, "outcome", q.outcome.as_deref(), EffectState::outcome)?;
    states = narrow(states, "stage", q.stage.as_deref(), EffectState::stage)?;
    states = narrow(states, "grade", q.grade.as_deref(), Grade::of)?;
    states = match q.unresolved.as_deref() {
        None => states,
        Some(flag @ ("true" | "false")) => {
            let want = flag == "true";
            let base = states.unwrap_or_else(|| EffectState::ALL.to_vec());
            Some(
                base.into_iter()
                    .filter(|s| s.is_unresolved() == want)
                    .collect(),
            )
        }
        Some(_) => return Err(ApiError::validation("unresolved", "must be true or false")),
    };
    let Some(action_id) = action_filter(&state, &caller, q.action.as_deref()).await? else {
        return Ok(paged(Vec::<steward_wire::Effect>::new(), 0, limit, offset));
    };
    let filter = steward_store::EffectFilter {
        action_id,
        states,
        limit,
        offset,
    };
    let found = state.store.list_effects(&caller.env.id, &filter).await?;
    Ok(paged(
        found.items.iter().map(views::effect).collect(),
        found.total,
        limit,
        offset,
    ))
}

#[utoipa::path(
    get,
    path = "/actions/effects/{id}",
    operation_id = "reads_effect",
    tag = "effects",
    params(doc::IdPath),
    responses(
        (status = 200, description = "the effect with its attempts and evidence", body = doc::Single<doc::Effect>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn effect(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_READ)?;
    let id = EffectId::parse(&id).map_err(|_| ApiError::not_found("effect"))?;
    let found = state
        .store
        .effect(&caller.env.id, &id)
        .await?
        .ok_or_else(|| ApiError::not_found("effect"))?;
    let names = views::KeyNames::of(&state, &caller.env.id).await?;
    Ok(ok(views::effect_detail(&found, &names)))
}
