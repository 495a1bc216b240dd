//! Reading invocations and effects, with the SDK's filters: the query parsed into the
//! application layer's filters (`app/reads.rs`), its records rendered as views.

use super::bounded;
use super::openapi as doc;
use super::query::Query;
use super::views;
use crate::app::{self, reads};
use crate::auth::Caller;
use crate::envelope::{ok, paged};
use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;
use steward_store::InvocationRecord;

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

impl InvocationQuery {
    fn filters(self) -> reads::InvocationFilters {
        reads::InvocationFilters {
            action: self.action,
            status: self.status,
            page: reads::PageRequest {
                limit: self.limit,
                offset: self.offset,
            },
            cursor: self.cursor,
        }
    }
}

impl EffectQuery {
    fn filters(self) -> reads::EffectFilters {
        reads::EffectFilters {
            action: self.action,
            outcome: self.outcome,
            stage: self.stage,
            grade: self.grade,
            unresolved: self.unresolved,
            page: reads::PageRequest {
                limit: self.limit,
                offset: self.offset,
            },
        }
    }
}

/// A page of invocations as the API answers it (ending early past the byte budget).
fn invocations_page(found: reads::Page<InvocationRecord>) -> Response {
    bounded::page(
        found.items.iter().map(views::listed_invocation).collect(),
        found.total,
        found.limit,
        found.offset,
    )
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
    let found = reads::list_invocations(&state, &caller, &q.filters()).await?;
    Ok(invocations_page(found))
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
    let found = reads::invocations_for_action(&state, &caller, &reference, q.filters()).await?;
    Ok(invocations_page(found))
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
    let found = reads::invocation(&state, &caller, &id).await?;
    let hold = app::holds::holding(&state, &found).await?;
    Ok(ok(views::with_hold(
        views::invocation(&found),
        hold.as_ref(),
    )))
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
    let found = reads::list_effects(&state, &caller, &q.filters()).await?;
    Ok(paged(
        found.items.iter().map(views::effect).collect(),
        found.total,
        found.limit,
        found.offset,
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
    let found = reads::effect(&state, &caller, &id).await?;
    let names = views::KeyNames::of(&state, &caller.env.id).await?;
    Ok(ok(views::effect_detail(&found, &names)))
}
