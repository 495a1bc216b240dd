//! `impact-limits`: shared caps on money, resource mutations or a declared unit. Reading needs
//! `impact-limits:read`; creating, changing and archiving need `impact-limits:write`, which no
//! default role holds. Every listing shows, for the current window, what was consumed, what is
//! reserved, the unknown exposure, and what is available.

use super::body;
use super::idempotent;
use super::openapi as doc;
use super::query::Query;
use crate::app;
use crate::auth::Caller;
use crate::envelope::ok;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{json, Value};
use steward_core::impact::{check_limit_amount, check_limit_name, LimitSpec};
use steward_core::scopes;
use steward_store::LimitStatus;

pub(crate) fn view(s: &LimitStatus) -> steward_wire::Limit {
    let l = &s.limit;
    steward_wire::Limit {
        id: l.id.clone(),
        name: l.spec.name.clone(),
        dimension: l.spec.dimension.clone(),
        unit: l.spec.unit.clone(),
        currency: l.spec.currency.clone(),
        period: l.spec.period.as_str().to_string(),
        amount: l.spec.amount,
        action_name: l.spec.action_name.clone(),
        resource_prefix: l.spec.resource_prefix.clone(),
        archived: l.archived_at.is_some(),
        archived_at: l.archived_at.map(|t| t.to_rfc3339()),
        created_at: l.created_at.to_rfc3339(),
        updated_at: l.updated_at.to_rfc3339(),
        window_start: s.window_start.to_rfc3339(),
        consumed: s.usage.consumed,
        reserved: s.usage.reserved,
        unknown_exposure: s.usage.exposure,
        available: s.available(),
    }
}

#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Include archived limits.
    #[serde(rename = "includeArchived")]
    #[param(value_type = Option<bool>)]
    include_archived: Option<String>,
}

#[utoipa::path(
    get,
    path = "/impact-limits",
    operation_id = "limits_list",
    tag = "impact-limits",
    params(ListQuery),
    responses(
        (status = 200, description = "the limits with their current usage", body = doc::List<doc::Limit>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<ListQuery>,
) -> ApiResult<Response> {
    caller.require(scopes::IMPACT_LIMITS_READ)?;
    let include_archived = match q.include_archived.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => {
            return Err(ApiError::validation(
                "includeArchived",
                "must be true or false",
            ))
        }
    };
    let limits = app::limits::list(&state, &caller, include_archived).await?;
    Ok(ok(limits.iter().map(view).collect::<Vec<_>>()))
}

#[utoipa::path(
    get,
    path = "/impact-limits/{id}",
    operation_id = "limits_get",
    tag = "impact-limits",
    params(doc::IdPath),
    responses(
        (status = 200, description = "the limit with its current usage", body = doc::Single<doc::Limit>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(doc::IdPath { id }): Path<doc::IdPath>,
) -> ApiResult<Response> {
    caller.require(scopes::IMPACT_LIMITS_READ)?;
    let id = app::limits::parse_id(&id)?;
    Ok(ok(view(&app::limits::get(&state, &caller, &id).await?)))
}

#[utoipa::path(
    post,
    path = "/impact-limits",
    operation_id = "limits_create",
    tag = "impact-limits",
    params(doc::IdempotencyHeader),
    request_body = doc::LimitBody,
    responses(
        (status = 201, description = "the limit created", body = doc::Single<doc::Limit>),
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
    caller.require(scopes::IMPACT_LIMITS_WRITE)?;
    let map = body::object(&bytes)?;
    body::only_known_to::<doc::LimitBody>(&map)?;
    let request = json!({"op": "impact_limit.create", "body": map});
    idempotent::run(&state, &caller, &headers, request, || async {
        let spec =
            LimitSpec::from_create(&map).map_err(|e| ApiError::validation(e.field, e.message))?;
        let limit = app::limits::create(&state, &caller, spec).await?;
        Ok((StatusCode::CREATED, view(&limit)))
    })
    .await
}

#[utoipa::path(
    patch,
    path = "/impact-limits/{id}",
    operation_id = "limits_update",
    tag = "impact-limits",
    params(doc::IdPath, doc::IdempotencyHeader),
    request_body = doc::LimitUpdateBody,
    responses(
        (status = 200, description = "the limit after the change", body = doc::Single<doc::Limit>),
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
    Path(doc::IdPath { id }): Path<doc::IdPath>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::IMPACT_LIMITS_WRITE)?;
    let id = app::limits::parse_id(&id)?;
    let map = body::object(&bytes)?;
    let change: doc::LimitUpdateBody = body::typed(&map)?;
    let name = change
        .name
        .map(|n| check_limit_name(&n.into_string()))
        .transpose()
        .map_err(|e| ApiError::validation(e.field, e.message))?;
    let amount = change
        .amount
        .map(|a| check_limit_amount(&Value::from(a)))
        .transpose()
        .map_err(|e| ApiError::validation(e.field, e.message))?;
    let change = app::limits::Change { name, amount };
    let request = json!({"op": "impact_limit.update", "id": id, "body": map});
    idempotent::run(&state, &caller, &headers, request, || async {
        let limit = app::limits::update(&state, &caller, &id, &change).await?;
        Ok((StatusCode::OK, view(&limit)))
    })
    .await
}

/// Archives a limit: it stops applying to new effects; existing reservations still settle.
#[utoipa::path(
    delete,
    path = "/impact-limits/{id}",
    operation_id = "limits_archive",
    tag = "impact-limits",
    params(doc::IdPath, doc::IdempotencyHeader),
    responses(
        (status = 200, description = "the limit, archived", body = doc::Single<doc::Limit>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::Conflict,
    )
)]
pub async fn archive(
    State(state): State<AppState>,
    caller: Caller,
    Path(doc::IdPath { id }): Path<doc::IdPath>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    caller.require(scopes::IMPACT_LIMITS_WRITE)?;
    let id = app::limits::parse_id(&id)?;
    let request = json!({"op": "impact_limit.archive", "id": id});
    idempotent::run(&state, &caller, &headers, request, || async {
        let limit = app::limits::archive(&state, &caller, &id).await?;
        Ok((StatusCode::OK, view(&limit)))
    })
    .await
}
