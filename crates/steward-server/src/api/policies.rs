//! `approval-policies` over HTTP: CRUD with PATCH semantics, immutable versions (a tombstone
//! after deletion), and a read-only `evaluate`. Reading needs `policies:read`, changing needs
//! `policies:write`; neither is in a default role, so an agent's key cannot see or change the
//! policy that governs it. The use cases are `app/policies.rs`; the views are
//! `steward_wire::Policy` and its kin, built here.

use super::body;
use super::idempotent;
use super::key_names::KeyNames;
use super::openapi as doc;
use super::query::Query;
use crate::app::{self, policies::PolicyEdit};
use crate::auth::Caller;
use crate::envelope::ok;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use steward_core::policy::{Match, PolicyDecision};
use steward_core::{scopes, PolicyId};
use steward_store::{PolicyRecord, PolicyVersion};
use steward_wire::{self as wire, Text};

/// A policy as the API shows it.
pub(crate) fn view(p: &PolicyRecord) -> wire::Policy {
    wire::Policy {
        id: Some(p.id.clone()),
        version: Some(p.version),
        created_at: Some(p.created_at.to_rfc3339()),
        updated_at: Some(p.updated_at.to_rfc3339()),
        ..wire::Policy::of_spec(&p.spec)
    }
}

fn version_view(v: &PolicyVersion, names: &KeyNames) -> wire::PolicyVersion {
    wire::PolicyVersion {
        policy_id: v.policy_id.clone(),
        version: v.version,
        deleted: v.is_tombstone(),
        change_note: v.change_note.clone(),
        created_at: v.created_at.to_rfc3339(),
        created_by: v.created_by.as_ref().map(ToString::to_string),
        created_by_name: names.name_opt(v.created_by.as_ref()),
        policy: v.spec.as_ref().map(wire::Policy::of_spec),
    }
}

/// The explanation a decision gives, or why there is none.
pub(super) fn explanation(decision: Option<&PolicyDecision>) -> String {
    decision
        .map(|d| d.explanation.clone())
        .unwrap_or_else(|| "no policy applies".to_string())
}

fn parse_id(id: &str) -> ApiResult<PolicyId> {
    PolicyId::parse(id).map_err(|_| ApiError::not_found("policy"))
}

/// A create or edit body as the use case reads it.
fn edit(body: wire::PolicyBody) -> PolicyEdit {
    PolicyEdit {
        fields: body.fields(),
        change_note: body.change_note.map(Text::into_string),
    }
}

#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only the policies that could govern this action: the ones naming it and the broad ones.
    #[serde(rename = "actionName")]
    action_name: Option<String>,
}

#[utoipa::path(
    get,
    path = "/approval-policies",
    operation_id = "policies_list",
    tag = "approval-policies",
    params(ListQuery),
    responses(
        (status = 200, description = "the policies, in evaluation order", body = doc::List<wire::Policy>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<ListQuery>,
) -> ApiResult<Response> {
    caller.require(scopes::POLICIES_READ)?;
    let records = app::policies::list(&state, &caller, q.action_name.as_deref()).await?;
    Ok(ok(records.iter().map(view).collect::<Vec<_>>()))
}

#[utoipa::path(
    get,
    path = "/approval-policies/{id}",
    operation_id = "policies_get",
    tag = "approval-policies",
    params(doc::IdPath),
    responses(
        (status = 200, description = "the policy", body = doc::Single<wire::Policy>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    caller.require(scopes::POLICIES_READ)?;
    let id = parse_id(&id)?;
    Ok(ok(view(&app::policies::get(&state, &caller, &id).await?)))
}

#[utoipa::path(
    post,
    path = "/approval-policies",
    operation_id = "policies_create",
    tag = "approval-policies",
    params(doc::IdempotencyHeader),
    request_body = wire::PolicyBody,
    responses(
        (status = 201, description = "the policy created", body = doc::Single<wire::Policy>),
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
    caller.require(scopes::POLICIES_WRITE)?;
    let edit = edit(body::parse(&bytes)?);
    let request =
        json!({"op": "policy.create", "body": edit.fields, "changeNote": edit.change_note});
    idempotent::run(&state, &caller, &headers, request, || async {
        let record = app::policies::create(&state, &caller, &edit).await?;
        Ok((StatusCode::CREATED, view(&record)))
    })
    .await
}

#[utoipa::path(
    patch,
    path = "/approval-policies/{id}",
    operation_id = "policies_update",
    tag = "approval-policies",
    params(doc::IdPath, doc::IdempotencyHeader),
    request_body = wire::PolicyBody,
    responses(
        (status = 200, description = "the policy after the change (a new version when anything changed)", body = doc::Single<wire::Policy>),
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
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::POLICIES_WRITE)?;
    let id = parse_id(&id)?;
    let edit = edit(body::parse(&bytes)?);
    let request = json!({"op": "policy.update", "id": id, "body": edit.fields, "changeNote": edit.change_note});
    idempotent::run(&state, &caller, &headers, request, || async {
        let record = app::policies::update(&state, &caller, &id, &edit).await?;
        Ok((StatusCode::OK, view(&record)))
    })
    .await
}

#[utoipa::path(
    delete,
    path = "/approval-policies/{id}",
    operation_id = "policies_delete",
    tag = "approval-policies",
    params(doc::IdPath, doc::IdempotencyHeader),
    request_body = wire::PolicyDeleteBody,
    responses(
        (status = 200, description = "`{\"id\", \"deleted\": true}`", body = doc::Single<wire::Deleted>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::POLICIES_WRITE)?;
    let id = parse_id(&id)?;
    let wire::PolicyDeleteBody { change_note } = body::parse(&bytes)?;
    let note = change_note.map(Text::into_string);
    let request = json!({"op": "policy.delete", "id": id, "changeNote": note});
    idempotent::run(&state, &caller, &headers, request, || async {
        app::policies::delete(&state, &caller, &id, note.as_deref()).await?;
        Ok((StatusCode::OK, wire::Deleted::new(&id)))
    })
    .await
}

#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct VersionsQuery {
    /// Page size: 1 to 200 (default 50); out-of-range values are clamped.
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
    /// Only versions older than this one (the previous page's `nextBefore`).
    before: Option<u32>,
}

/// Retained versions, newest first; `before` pages back (the previous page's `nextBefore`).
#[utoipa::path(
    get,
    path = "/approval-policies/{id}/versions",
    operation_id = "policies_versions",
    tag = "approval-policies",
    params(doc::IdPath, VersionsQuery),
    responses(
        (status = 200, description = "retained versions, newest first", body = wire::VersionPage<wire::PolicyVersion>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn versions(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<VersionsQuery>,
) -> ApiResult<Response> {
    caller.require(scopes::POLICIES_READ)?;
    let id = parse_id(&id)?;
    let page = app::policies::versions(&state, &caller, &id, q.limit, q.before).await?;
    let names = KeyNames::of(&state, &caller.env.id).await?;
    let answer = wire::VersionPage::new(
        page.versions
            .iter()
            .map(|v| version_view(v, &names))
            .collect(),
        page.total as u64,
        page.limit,
        page.next_before,
    );
    Ok((StatusCode::OK, axum::Json(answer)).into_response())
}

#[utoipa::path(
    get,
    path = "/approval-policies/{id}/versions/{version}",
    operation_id = "policies_version",
    tag = "approval-policies",
    params(doc::PolicyVersionPath),
    responses(
        (status = 200, description = "one version (a tombstone after deletion)", body = doc::Single<wire::PolicyVersion>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn version(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, version)): Path<(String, String)>,
) -> ApiResult<Response> {
    caller.require(scopes::POLICIES_READ)?;
    let id = parse_id(&id)?;
    // Parsed here, not by the extractor, whose refusal would be a plain-text 400: a version that
    // is not a number names no version.
    let version: u32 = version
        .parse()
        .map_err(|_| ApiError::not_found("policy version"))?;
    let found = app::policies::version(&state, &caller, &id, version).await?;
    let names = KeyNames::of(&state, &caller.env.id).await?;
    Ok(ok(version_view(&found, &names)))
}

/// Read-only policy matching for a described request: which policy would decide, and how. It
/// records nothing and is not an authorization: limits, halts and scopes still apply at invoke.
#[utoipa::path(
    post,
    path = "/approval-policies/evaluate",
    operation_id = "policies_evaluate",
    tag = "approval-policies",
    request_body = wire::EvaluateBody,
    responses(
        (status = 200, description = "which policy would decide a described request, and how; nothing is recorded", body = doc::Single<wire::Evaluation>),
        doc::Guarded,
        doc::Invalid,
        doc::TooLarge,
    )
)]
pub async fn evaluate(
    State(state): State<AppState>,
    caller: Caller,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::POLICIES_READ)?;
    let body: wire::EvaluateBody = body::parse(&bytes)?;
    let kind = match body.kind {
        Some(wire::RequestKind::Action) => steward_core::policy::RequestKind::Action,
        Some(wire::RequestKind::Custom) => steward_core::policy::RequestKind::Custom,
        None => return Err(ApiError::validation("kind", "must be action or custom")),
    };
    let described = app::policies::Described {
        kind,
        action_name: body.action_name.map(Text::into_string),
        agent_id: body.agent_id.map(Text::into_string),
        user_id: body.user_id.map(Text::into_string),
        payload: serde_json::Value::Object(body.payload.unwrap_or_default()),
    };
    let found = app::policies::evaluate(&state, &caller, &described).await?;
    let decision = found.decision.as_ref();
    let matched = found
        .considered
        .iter()
        .map(|(p, result)| wire::Considered {
            id: p.id.clone(),
            name: p.spec.name.clone(),
            version: p.version,
            result: match result {
                Match::Undecidable(reason) => wire::MatchResult::Undecidable(reason.clone()),
                // `No` is never among the considered.
                Match::Yes | Match::No => wire::MatchResult::Matched,
            },
        })
        .collect();
    Ok(ok(wire::Evaluation {
        evaluation: "policy_only".to_string(),
        effect: decision.map(|d| d.effect.into()),
        required_approvals: decision.map(|d| d.required_approvals),
        decision: decision.map(wire::PolicyDecision::of),
        explanation: explanation(decision),
        matched,
    }))
}
