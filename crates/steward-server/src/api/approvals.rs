//! `approvals`: the inbox, custom requests, long-poll reads, and decisions. Approving a gated
//! invocation dispatches it exactly once; denying or expiry means it never runs.

use super::body;
use super::openapi as doc;
use super::query::Query;
use super::{idempotent, views};
use crate::app;
use crate::app::reads;
use crate::auth::Caller;
use crate::envelope::{ok, paged};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use steward_core::{scopes, ApprovalId, Decision};
use steward_store::NewApproval;
use steward_wire::Text;

/// The longest expiry a custom request may ask for, in seconds (30 days).
pub const APPROVAL_EXPIRY_S_MAX: i64 = 30 * 24 * 3600;

fn parse_id(id: &str) -> ApiResult<ApprovalId> {
    ApprovalId::parse(id).map_err(|_| ApiError::not_found("approval"))
}

#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// Wait up to this many seconds (at most 55) for a pending approval to be decided. The
    /// key is checked again every second of the wait: one revoked, expired or rotated out
    /// meanwhile gets 401 `AUTHENTICATION_FAILED` with `details.reason` (`key_revoked`,
    /// `key_expired`, `key_missing`) within about two seconds, not the approval; 503
    /// `STORAGE_UNAVAILABLE` (`key_unverified`) when the key could not be read again for
    /// about five seconds.
    #[param(minimum = 0, maximum = 55)]
    #[serde(rename = "waitSeconds")]
    wait_seconds: Option<u64>,
}

#[utoipa::path(
    get,
    path = "/approvals/{id}",
    operation_id = "approvals_get",
    tag = "approvals",
    params(doc::IdPath, WaitQuery),
    responses(
        (status = 200, description = "the approval, once decided or after `waitSeconds`", body = doc::Single<doc::Approval>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<WaitQuery>,
) -> ApiResult<Response> {
    let wait_s = q.wait_seconds.unwrap_or(0);
    let approval = reads::approval(&state, &caller, &id, wait_s).await?;
    let names = views::KeyNames::of(&state, &caller.env.id).await?;
    Ok(ok(views::approval(&approval, &names)))
}

#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    #[param(value_type = Option<doc::ApprovalStatusParam>, inline)]
    status: Option<String>,
    #[serde(rename = "decisionOrigin")]
    #[param(value_type = Option<doc::DecisionOriginParam>, inline)]
    decision_origin: Option<String>,
    /// Page size: 1 to 200 (default 50); out-of-range values are clamped.
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
    /// How many to skip.
    offset: Option<u32>,
}

#[utoipa::path(
    get,
    path = "/approvals",
    operation_id = "approvals_list",
    tag = "approvals",
    params(ListQuery),
    responses(
        (status = 200, description = "a page of approvals", body = doc::Page<doc::Approval>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<ListQuery>,
) -> ApiResult<Response> {
    let filters = reads::ApprovalFilters {
        status: q.status,
        decision_origin: q.decision_origin,
        page: reads::PageRequest {
            limit: q.limit,
            offset: q.offset,
        },
    };
    let page = reads::list_approvals(&state, &caller, &filters).await?;
    let names = views::KeyNames::of(&state, &caller.env.id).await?;
    Ok(paged(
        page.items
            .iter()
            .map(|a| views::approval(a, &names))
            .collect(),
        page.total,
        page.limit,
        page.offset,
    ))
}

#[utoipa::path(
    post,
    path = "/approvals",
    operation_id = "approvals_request",
    tag = "approvals",
    params(doc::IdempotencyHeader),
    request_body = doc::ApprovalRequestBody,
    responses(
        (status = 201, description = "the approval requested", body = doc::Single<doc::Approval>),
        doc::Guarded,
        doc::Invalid,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn request(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::APPROVALS_REQUEST)?;
    let map = body::object(&bytes)?;
    let given: doc::ApprovalRequestBody = body::typed(&map)?;
    let title = match given.title.map(Text::into_string) {
        Some(t) if !t.trim().is_empty() => {
            steward_core::check_text("title", &t, steward_core::TextKind::Line)
                .map_err(|e| ApiError::validation(e.field, e.message))?;
            t
        }
        _ => return Err(ApiError::validation("title", "is required")),
    };
    let payload = match given.payload {
        None => Value::Object(Map::new()),
        Some(v @ Value::Object(_)) => v,
        Some(_) => return Err(ApiError::validation("payload", "must be a JSON object")),
    };
    let expires_in = match given.expires_in_seconds {
        None => None,
        Some(s) if (1..=APPROVAL_EXPIRY_S_MAX).contains(&s) => Some(s),
        Some(_) => {
            return Err(ApiError::validation(
                "expiresInSeconds",
                format!("must be an integer from 1 to {APPROVAL_EXPIRY_S_MAX}"),
            ))
        }
    };
    let description = given.description.map(Text::into_string);
    let run_id = given.run_id.map(Text::into_string);
    let request = json!({"op": "approval.request", "body": map});
    idempotent::run(&state, &caller, &headers, request, || async {
        let now = state.clock.now();
        let new = NewApproval {
            id: ApprovalId::from_unique(&crate::clock::unique()),
            title,
            description,
            payload,
            required_approvals: 1,
            expires_at: expires_in.map(|s| now.plus_ms(s * 1000)),
            run_id,
        };
        let created = state
            .store
            .create_approval(&caller.env.id, &new, &caller.key.id, now)
            .await?;
        let names = views::KeyNames::of(&state, &caller.env.id).await?;
        Ok((StatusCode::CREATED, views::approval(&created, &names)))
    })
    .await
}

#[utoipa::path(
    post,
    path = "/approvals/{id}/approve",
    operation_id = "approvals_approve",
    tag = "approvals",
    params(doc::IdPath, doc::IdempotencyHeader),
    request_body = doc::DecisionBody,
    responses(
        (status = 200, description = "the approval after the decision, and the invocation it gated: a gated invocation it completes is dispatched once, before this answer", body = doc::Single<doc::Decided>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn approve(
    state: State<AppState>,
    caller: Caller,
    id: Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    decide(state, caller, id, headers, bytes, Decision::Approve).await
}

#[utoipa::path(
    post,
    path = "/approvals/{id}/deny",
    operation_id = "approvals_deny",
    tag = "approvals",
    params(doc::IdPath, doc::IdempotencyHeader),
    request_body = doc::DecisionBody,
    responses(
        (status = 200, description = "the approval after the decision, and the invocation it gated (denied: it never runs)", body = doc::Single<doc::Decided>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn deny(
    state: State<AppState>,
    caller: Caller,
    id: Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    decide(state, caller, id, headers, bytes, Decision::Deny).await
}

async fn decide(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
    decision: Decision,
) -> ApiResult<Response> {
    caller.require(scopes::APPROVALS_DECIDE)?;
    let id = parse_id(&id)?;
    let body: doc::DecisionBody = body::parse(&bytes)?;
    let note = body.note.map(steward_wire::Text::into_string);
    let seen = body.input_fingerprint.map(steward_wire::Text::into_string);
    let input = body.input;
    if input.is_some() && decision == Decision::Deny {
        return Err(ApiError::validation(
            "input",
            "an edit goes with an approval (`/approve`); a denial takes no input",
        ));
    }
    let mut request =
        json!({"op": "approval.decide", "id": id, "decision": decision, "note": note});
    // Added only when given, so that a decision's idempotency fingerprint stays what it was.
    if let Some(input) = &input {
        request["input"] = input.clone();
    }
    if let Some(seen) = &seen {
        request["inputFingerprint"] = json!(seen);
    }
    idempotent::run(&state, &caller, &headers, request, || async {
        let decided = match &input {
            Some(input) => {
                let edit = app::approvals::Edit {
                    approval: id.clone(),
                    input: input.clone(),
                    note: note.clone(),
                };
                app::approvals::edit(&state, &caller, edit).await?
            }
            None => {
                let decide = app::approvals::Decide {
                    approval: id.clone(),
                    decision,
                    note: note.clone(),
                    seen: seen.clone(),
                };
                app::approvals::decide(&state, &caller, decide).await?
            }
        };
        // The approval, and the invocation it gated as it stands after the decision; `null`
        // for a custom request. A decision that changed nothing is answered the same way, with
        // the approval as it stands and why (`unchanged`, the reason the console shows).
        let invocation = decided.invocation.as_ref().map(views::invocation);
        let names = views::KeyNames::of(&state, &caller.env.id).await?;
        let unchanged = decided.unchanged.as_ref().map(|reason| {
            let error = reason.error();
            steward_wire::Unchanged {
                code: error.code.to_string(),
                message: error.message,
            }
        });
        Ok((
            StatusCode::OK,
            steward_wire::Decided {
                approval: views::approval(&decided.approval, &names),
                invocation,
                unchanged,
            },
        ))
    })
    .await
}
