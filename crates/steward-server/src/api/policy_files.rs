//! Policy files over HTTP: `approval-policies/files/plan`, `apply` and `test`. The use cases
//! (and the file's format) are `app/policy_files/`; the views are built here.

use super::body;
use super::idempotent;
use super::openapi as doc;
use super::policies::{explanation, view};
use crate::app::{self, policy_files::plan::Plan};
use crate::auth::Caller;
use crate::envelope::ok;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};
use steward_core::scopes;
use steward_wire::{self as wire, Text};

/// A field the body must carry.
fn required(text: Option<Text>, field: &str) -> ApiResult<String> {
    text.map(Text::into_string)
        .ok_or_else(|| ApiError::validation(field, "is required"))
}

fn changes(plan: &Plan) -> Vec<wire::PolicyFileChange> {
    let creates = plan.creates.iter().map(|spec| wire::PolicyFileChange {
        op: wire::PolicyFileOp::Create,
        name: spec.name.clone(),
        policy_id: None,
        from_version: None,
        before: None,
        after: Some(wire::Policy::of_spec(spec)),
    });
    let updates = plan
        .updates
        .iter()
        .map(|(current, spec)| wire::PolicyFileChange {
            op: wire::PolicyFileOp::Update,
            name: spec.name.clone(),
            policy_id: Some(current.id.clone()),
            from_version: Some(current.version),
            before: Some(wire::Policy::of_spec(&current.spec)),
            after: Some(wire::Policy::of_spec(spec)),
        });
    let deletes = plan.deletes.iter().map(|current| wire::PolicyFileChange {
        op: wire::PolicyFileOp::Delete,
        name: current.spec.name.clone(),
        policy_id: Some(current.id.clone()),
        from_version: Some(current.version),
        before: Some(wire::Policy::of_spec(&current.spec)),
        after: None,
    });
    creates.chain(updates).chain(deletes).collect()
}

fn plan_view(plan: &Plan) -> wire::PolicyFilePlan {
    wire::PolicyFilePlan {
        digest: plan.digest.clone(),
        valid: true,
        errors: Vec::new(),
        changes: changes(plan),
        unchanged: plan.unchanged.iter().map(|p| p.spec.name.clone()).collect(),
        summary: wire::PolicyFileSummary {
            create: plan.creates.len() as u64,
            update: plan.updates.len() as u64,
            delete: plan.deletes.len() as u64,
            unchanged: plan.unchanged.len() as u64,
        },
    }
}

/// Read-only: what applying the file would change, and the digest that applies exactly that.
#[utoipa::path(
    post,
    path = "/approval-policies/files/plan",
    operation_id = "policies_files_plan",
    tag = "approval-policies",
    request_body = wire::PolicyFilePlanBody,
    responses(
        (status = 200, description = "the changes, the policies left unchanged and the digest; nothing is recorded", body = doc::Single<wire::PolicyFilePlan>),
        doc::Guarded,
        doc::Invalid,
        doc::TooLarge,
    )
)]
pub async fn plan(
    State(state): State<AppState>,
    caller: Caller,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::POLICIES_READ)?;
    let wire::PolicyFilePlanBody { source } = body::parse(&bytes)?;
    let source = required(source, "source")?;
    let plan = app::policy_files::plan(&state, &caller, &source).await?;
    Ok(ok(plan_view(&plan)))
}

/// Applies exactly the plan `digest` names, in one transaction; `STALE_PLAN` if the file or the
/// live policies differ from what was planned.
#[utoipa::path(
    post,
    path = "/approval-policies/files/apply",
    operation_id = "policies_files_apply",
    tag = "approval-policies",
    params(doc::IdempotencyHeader),
    request_body = wire::PolicyFileApplyBody,
    responses(
        (status = 200, description = "the change applied and the live policies after it", body = doc::Single<wire::PolicyFileApplied>),
        doc::Guarded,
        doc::Invalid,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn apply(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::POLICIES_WRITE)?;
    let body: wire::PolicyFileApplyBody = body::parse(&bytes)?;
    let source = required(body.source, "source")?;
    let digest = required(body.digest, "digest")?;
    let note = body.change_note.map(Text::into_string);
    let request =
        json!({"op": "policy.files.apply", "source": source, "digest": digest, "changeNote": note});
    idempotent::run(&state, &caller, &headers, request, || async {
        let done =
            app::policy_files::apply(&state, &caller, &source, &digest, note.as_deref()).await?;
        let planned = plan_view(&done.plan);
        let applied = wire::PolicyFileApplied {
            digest: planned.digest,
            valid: planned.valid,
            errors: planned.errors,
            changes: planned.changes,
            unchanged: planned.unchanged,
            summary: planned.summary,
            applied: done.applied,
            policies: done.live.iter().map(view).collect(),
        };
        Ok((StatusCode::OK, applied))
    })
    .await
}

/// Decides each case against the set as it would be after applying the file. Writes nothing
/// and dispatches nothing.
#[utoipa::path(
    post,
    path = "/approval-policies/files/test",
    operation_id = "policies_files_test",
    tag = "approval-policies",
    request_body = wire::PolicyFileTestBody,
    responses(
        (status = 200, description = "each case's decision, and whether it met its expectation; nothing is recorded", body = doc::Single<wire::PolicyFileTest>),
        doc::Guarded,
        doc::Invalid,
        doc::TooLarge,
    )
)]
pub async fn test(
    State(state): State<AppState>,
    caller: Caller,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::POLICIES_READ)?;
    let body: wire::PolicyFileTestBody = body::parse(&bytes)?;
    let source = required(body.source, "source")?;
    let cases = body.cases.unwrap_or(Value::Null);
    let tested = app::policy_files::test(&state, &caller, &source, &cases).await?;
    let results = tested
        .results
        .into_iter()
        .map(|case| {
            let decision = case.decision.as_ref();
            wire::PolicyFileCase {
                index: case.index as u32,
                name: case.name,
                effect: decision.map(|d| d.effect.into()),
                required_approvals: decision.map(|d| d.required_approvals),
                policy: decision.map(|d| d.policy.name.clone()),
                decision: decision.map(wire::PolicyDecision::of),
                explanation: explanation(decision),
                expected: case.expected.map(Value::Object),
                passed: case.passed,
            }
        })
        .collect();
    Ok(ok(wire::PolicyFileTest {
        evaluation: "policy_only".to_string(),
        passed: tested.passed,
        results,
    }))
}
