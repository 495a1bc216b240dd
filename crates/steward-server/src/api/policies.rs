//! `approval-policies`: CRUD with PATCH semantics, immutable versions (a tombstone after
//! deletion), and a read-only `evaluate`. Reading needs `policies:read`, changing needs
//! `policies:write`; neither is in a default role, so an agent's key cannot see or change the
//! policy that governs it.

use super::body::{self, only_known, optional_string};
use super::idempotent;
use super::openapi as doc;
use super::query::Query;
use crate::adapters::money_amount;
use crate::app::gate::decision_json;
use crate::auth::Caller;
use crate::envelope::{ok, PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use steward_core::policy::{
    decide, matches, order, Facts, Match, MatchKind, Policy, PolicySpec, RequestKind, SPEC_FIELDS,
};
use steward_core::{scopes, FieldError, PolicyId};
use steward_store::{Actor, PolicyRecord, PolicyVersion, StoreError};

pub(super) fn spec_view(spec: &PolicySpec) -> Value {
    json!({
        "name": spec.name,
        "enabled": spec.enabled,
        "effect": spec.effect.as_str(),
        "requiredApprovals": spec.required_approvals,
        "priority": spec.priority,
        "matchKind": spec.match_kind.as_str(),
        "matchActionName": spec.match_action_name,
        "matchAgentId": spec.match_agent_id,
        "matchUserId": spec.match_user_id,
        "matchTags": spec.match_tags,
        "minAmount": spec.min_amount,
        "condition": spec.condition,
        "conditions": spec.conditions,
        "acknowledgeBroadScope": spec.acknowledge_broad_scope,
        "scope": spec.scope().as_str(),
        "needsScopeReview": spec.needs_scope_review(),
        "match": {
            "kind": spec.match_kind.as_str(),
            "actionName": spec.match_action_name,
            "agentId": spec.match_agent_id,
            "userId": spec.match_user_id,
            "tags": spec.match_tags,
            "minAmount": spec.min_amount,
            "condition": spec.condition,
        },
    })
}

pub(crate) fn view(p: &PolicyRecord) -> Value {
    let mut v = spec_view(&p.spec);
    v["id"] = json!(p.id);
    v["version"] = json!(p.version);
    v["createdAt"] = json!(p.created_at.to_rfc3339());
    v["updatedAt"] = json!(p.updated_at.to_rfc3339());
    v
}

fn version_view(v: &PolicyVersion) -> Value {
    json!({
        "policyId": v.policy_id,
        "version": v.version,
        "deleted": v.is_tombstone(),
        "changeNote": v.change_note,
        "createdAt": v.created_at.to_rfc3339(),
        "createdBy": v.created_by,
        "policy": v.spec.as_ref().map(spec_view),
    })
}

fn invalid(e: FieldError) -> ApiError {
    ApiError::validation(e.field, e.message)
}

fn parse_id(id: &str) -> ApiResult<PolicyId> {
    PolicyId::parse(id).map_err(|_| ApiError::not_found("policy"))
}

/// The body's policy fields, with `changeNote` taken out.
fn split_body(bytes: &Bytes) -> ApiResult<(Map<String, Value>, Option<String>)> {
    let mut map = body::object(bytes)?;
    let mut known: Vec<&str> = SPEC_FIELDS.to_vec();
    known.push("changeNote");
    only_known(&map, &known)?;
    let note = optional_string(&map, "changeNote")?;
    map.remove("changeNote");
    Ok((map, note))
}

/// `matchActionName` must name an action in the key's own environment.
pub(super) async fn check_action(
    state: &AppState,
    caller: &Caller,
    spec: &PolicySpec,
) -> ApiResult<()> {
    if let Some(name) = &spec.match_action_name {
        if state.store.action(&caller.env.id, name).await?.is_none() {
            return Err(ApiError::validation(
                "matchActionName",
                format!("names no action called `{name}` in this environment"),
            ));
        }
    }
    Ok(())
}

fn conflict_or(e: StoreError) -> ApiError {
    match e {
        StoreError::Duplicate { .. } => {
            ApiError::conflict("already_exists", "a policy with this name already exists")
        }
        other => other.into(),
    }
}

async fn find(state: &AppState, caller: &Caller, id: &PolicyId) -> ApiResult<PolicyRecord> {
    state
        .store
        .policy(&caller.env.id, id)
        .await?
        .ok_or_else(|| ApiError::not_found("policy"))
}

#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only the policies that could govern this action: the ones naming it and the broad ones.
    #[serde(rename = "actionName")]
    action_name: Option<String>,
}

/// Could a policy govern invocations of `action`? The ones naming it, plus the broad ones.
fn could_govern(spec: &PolicySpec, action: &str) -> bool {
    match spec.match_kind {
        MatchKind::Custom => false,
        MatchKind::Any => true,
        MatchKind::Action => spec
            .match_action_name
            .as_deref()
            .is_none_or(|name| name == action),
    }
}

#[utoipa::path(
    get,
    path = "/approval-policies",
    operation_id = "policies_list",
    tag = "approval-policies",
    params(ListQuery),
    responses(
        (status = 200, description = "the policies, in evaluation order", body = doc::List<doc::Policy>),
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
    let records = state.store.list_policies(&caller.env.id).await?;
    let mut policies: Vec<Policy> = records
        .iter()
        .filter(|r| {
            q.action_name
                .as_deref()
                .is_none_or(|a| could_govern(&r.spec, a))
        })
        .map(PolicyRecord::policy)
        .collect();
    order(&mut policies);
    let items = policies
        .iter()
        .filter_map(|p| records.iter().find(|r| r.id == p.id))
        .map(view)
        .collect();
    Ok(ok(Value::Array(items)))
}

#[utoipa::path(
    get,
    path = "/approval-policies/{id}",
    operation_id = "policies_get",
    tag = "approval-policies",
    params(doc::IdPath),
    responses(
        (status = 200, description = "the policy", body = doc::Single<doc::Policy>),
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
    Ok(ok(view(&find(&state, &caller, &id).await?)))
}

#[utoipa::path(
    post,
    path = "/approval-policies",
    operation_id = "policies_create",
    tag = "approval-policies",
    params(doc::IdempotencyHeader),
    request_body = doc::PolicyBody,
    responses(
        (status = 201, description = "the policy created", body = doc::Single<doc::Policy>),
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
    let (map, note) = split_body(&bytes)?;
    let request = json!({"op": "policy.create", "body": map, "changeNote": note});
    idempotent::run(&state, &caller, &headers, request, || async {
        let spec = PolicySpec::from_create(&map).map_err(invalid)?;
        check_action(&state, &caller, &spec).await?;
        let now = state.clock.now();
        let record = PolicyRecord {
            id: PolicyId::from_unique(&crate::clock::unique()),
            env_id: caller.env.id.clone(),
            version: 1,
            spec,
            created_at: now,
            updated_at: now,
        };
        state
            .store
            .create_policy(&record, note.as_deref(), &Actor::key(&caller.key.id, now))
            .await
            .map_err(conflict_or)?;
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
    request_body = doc::PolicyBody,
    responses(
        (status = 200, description = "the policy after the change (a new version when anything changed)", body = doc::Single<doc::Policy>),
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
    let (patch, note) = split_body(&bytes)?;
    let request = json!({"op": "policy.update", "id": id, "body": patch, "changeNote": note});
    idempotent::run(&state, &caller, &headers, request, || async {
        let current = find(&state, &caller, &id).await?;
        let spec = current.spec.patched(&patch).map_err(invalid)?;
        if spec == current.spec {
            return Ok((StatusCode::OK, view(&current)));
        }
        if spec.match_action_name != current.spec.match_action_name {
            check_action(&state, &caller, &spec).await?;
        }
        let actor = Actor::key(&caller.key.id, state.clock.now());
        let updated = state
            .store
            .update_policy(
                &caller.env.id,
                &id,
                current.version,
                &spec,
                note.as_deref(),
                &actor,
            )
            .await
            .map_err(conflict_or)?;
        Ok((StatusCode::OK, view(&updated)))
    })
    .await
}

#[utoipa::path(
    delete,
    path = "/approval-policies/{id}",
    operation_id = "policies_delete",
    tag = "approval-policies",
    params(doc::IdPath, doc::IdempotencyHeader),
    request_body = doc::PolicyDeleteBody,
    responses(
        (status = 200, description = "`{\"id\", \"deleted\": true}`", body = doc::Single<doc::Deleted>),
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
    let map = body::object(&bytes)?;
    only_known(&map, doc::PolicyDeleteBody::FIELDS)?;
    let note = optional_string(&map, "changeNote")?;
    let request = json!({"op": "policy.delete", "id": id, "changeNote": note});
    idempotent::run(&state, &caller, &headers, request, || async {
        let actor = Actor::key(&caller.key.id, state.clock.now());
        if !state
            .store
            .delete_policy(&caller.env.id, &id, note.as_deref(), &actor)
            .await?
        {
            return Err(ApiError::not_found("policy"));
        }
        Ok((StatusCode::OK, steward_wire::Deleted::new(&id)))
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

async fn versions_of(
    state: &AppState,
    caller: &Caller,
    id: &PolicyId,
) -> ApiResult<Vec<PolicyVersion>> {
    let versions = state.store.policy_versions(&caller.env.id, id).await?;
    if versions.is_empty() {
        return Err(ApiError::not_found("policy"));
    }
    Ok(versions)
}

/// Retained versions, newest first; `before` pages back (the previous page's `nextBefore`).
#[utoipa::path(
    get,
    path = "/approval-policies/{id}/versions",
    operation_id = "policies_versions",
    tag = "approval-policies",
    params(doc::IdPath, VersionsQuery),
    responses(
        (status = 200, description = "retained versions, newest first", body = doc::VersionPage<doc::PolicyVersion>),
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
    let all = versions_of(&state, &caller, &id).await?;
    let limit = q
        .limit
        .unwrap_or(PAGE_LIMIT_DEFAULT)
        .clamp(1, PAGE_LIMIT_MAX) as usize;
    let mut newest_first: Vec<&PolicyVersion> = all
        .iter()
        .rev()
        .filter(|v| q.before.is_none_or(|b| v.version < b))
        .collect();
    let has_more = newest_first.len() > limit;
    newest_first.truncate(limit);
    let next_before = has_more
        .then(|| newest_first.last().map(|v| v.version))
        .flatten();
    let page = steward_wire::VersionPage::new(
        newest_first.iter().map(|v| version_view(v)).collect(),
        all.len() as u64,
        limit as u32,
        next_before,
    );
    Ok((StatusCode::OK, axum::Json(page)).into_response())
}

#[utoipa::path(
    get,
    path = "/approval-policies/{id}/versions/{version}",
    operation_id = "policies_version",
    tag = "approval-policies",
    params(doc::PolicyVersionPath),
    responses(
        (status = 200, description = "one version (a tombstone after deletion)", body = doc::Single<doc::PolicyVersion>),
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
    let all = versions_of(&state, &caller, &id).await?;
    let found = all
        .iter()
        .find(|v| v.version == version)
        .ok_or_else(|| ApiError::not_found("policy version"))?;
    Ok(ok(version_view(found)))
}

pub(super) const EVALUATE_FIELDS: [&str; 5] =
    ["kind", "actionName", "agentId", "userId", "payload"];

/// Read-only policy matching for a described request: which policy would decide, and how. It
/// records nothing and is not an authorization: limits, halts and scopes still apply at invoke.
#[utoipa::path(
    post,
    path = "/approval-policies/evaluate",
    operation_id = "policies_evaluate",
    tag = "approval-policies",
    request_body = doc::EvaluateBody,
    responses(
        (status = 200, description = "which policy would decide a described request, and how; nothing is recorded", body = doc::Single<doc::Evaluation>),
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
    let map = body::object(&bytes)?;
    only_known(&map, &EVALUATE_FIELDS)?;
    let kind = match optional_string(&map, "kind")?.as_deref() {
        Some("action") => RequestKind::Action,
        Some("custom") => RequestKind::Custom,
        _ => return Err(ApiError::validation("kind", "must be action or custom")),
    };
    let action_name = optional_string(&map, "actionName")?;
    let agent_id = optional_string(&map, "agentId")?;
    let user_id = optional_string(&map, "userId")?;
    let payload = match map.get("payload") {
        None | Some(Value::Null) => json!({}),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => return Err(ApiError::validation("payload", "must be a JSON object")),
    };
    let action = match (&kind, &action_name) {
        (RequestKind::Action, Some(name)) => state.store.action(&caller.env.id, name).await?,
        _ => None,
    };
    let amount = match &action {
        Some(a) => money_amount(&a.definition, &payload).map(|n| n as f64),
        None => payload.get("amount").and_then(Value::as_f64),
    };
    let facts = Facts {
        kind,
        action_name: action_name.as_deref(),
        agent_id: agent_id.as_deref(),
        user_id: user_id.as_deref(),
        tags: &[],
        amount,
        input: &payload,
    };
    let mut policies: Vec<Policy> = state
        .store
        .list_policies(&caller.env.id)
        .await?
        .iter()
        .map(PolicyRecord::policy)
        .collect();
    order(&mut policies);
    let considered: Vec<Value> = policies
        .iter()
        .filter_map(|p| {
            let result = match matches(&p.spec, &facts) {
                Match::No => return None,
                Match::Yes => json!("matched"),
                Match::Undecidable(reason) => json!({"undecidable": reason}),
            };
            Some(json!({"id": p.id, "name": p.spec.name, "version": p.version, "result": result}))
        })
        .collect();
    let decision = decide(&policies, &facts);
    Ok(ok(json!({
        "evaluation": "policy_only",
        "effect": decision.as_ref().map(|d| d.effect.as_str()),
        "requiredApprovals": decision.as_ref().map(|d| d.required_approvals),
        "decision": decision.as_ref().map(decision_json),
        "explanation": decision
            .as_ref()
            .map(|d| d.explanation.clone())
            .unwrap_or_else(|| "no policy applies".to_string()),
        "matched": considered,
    })))
}
