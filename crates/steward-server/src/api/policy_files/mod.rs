//! Policy files: an environment's whole approval-policy set as one YAML or JSON document that
//! lives in a repository and goes through review. `plan` compares a file with the live policies
//! and answers the change with a digest (read-only); `apply` makes exactly that change, in one
//! transaction, only while the live set is still the one planned against (else 409
//! `STALE_PLAN`, nothing changed); `test` decides described requests against the set as it would
//! be after the apply, and writes nothing. The file's format is in `plan.rs`.

mod plan;

use plan::POLICY_TEST_CASES_MAX;

use super::body::{self, only_known, optional_string};
use super::idempotent;
use super::openapi as doc;
use super::policies::{check_action, spec_view, view};
use crate::adapters::money_amount;
use crate::app::gate::decision_json;
use crate::auth::Caller;
use crate::envelope::ok;
use crate::error::{codes, ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use plan::{FileError, Plan};
use serde_json::{json, Map, Value};
use steward_core::policy::{decide, order, Facts, Policy, PolicySpec, RequestKind};
use steward_core::{scopes, PolicyId};
use steward_store::{Actor, PolicyRecord, StoreError};

/// A 400 listing every problem of the file; `details.field` is the first one's.
fn file_errors(errors: Vec<FileError>) -> ApiError {
    let first = errors
        .first()
        .map(|e| e.field.clone())
        .unwrap_or_else(|| "source".into());
    let message = match errors.len() {
        1 => format!("{}: {}", errors[0].field, errors[0].message),
        n => format!(
            "{n} problems; the first: {}: {}",
            errors[0].field, errors[0].message
        ),
    };
    ApiError::of(codes::VALIDATION_ERROR, message).with_details(json!({
        "field": first,
        "errors": errors.iter().map(FileError::view).collect::<Vec<_>>(),
    }))
}

fn required_text(map: &Map<String, Value>, field: &str) -> ApiResult<String> {
    optional_string(map, field)?.ok_or_else(|| ApiError::validation(field, "is required"))
}

/// The file's policies, each also checked against the environment (a `matchActionName` must
/// name one of its actions), and the plan against the live policies.
async fn planned(
    state: &AppState,
    caller: &Caller,
    source: &str,
) -> ApiResult<(Vec<PolicySpec>, Plan)> {
    let specs = plan::parse(source).map_err(file_errors)?;
    let mut errors = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        if let Err(e) = check_action(state, caller, spec).await {
            errors.push(FileError {
                field: format!("policies[{i}].matchActionName"),
                message: e.message,
                name: Some(spec.name.clone()),
            });
        }
    }
    if !errors.is_empty() {
        return Err(file_errors(errors));
    }
    let live = state.store.list_policies(&caller.env.id).await?;
    let plan = plan::plan(&specs, &live);
    Ok((specs, plan))
}

fn plan_view(plan: &Plan) -> Value {
    let mut changes = Vec::new();
    for spec in &plan.creates {
        changes.push(json!({"op": "create", "name": spec.name, "after": spec_view(spec)}));
    }
    for (current, spec) in &plan.updates {
        changes.push(json!({
            "op": "update", "name": spec.name, "policyId": current.id,
            "fromVersion": current.version, "before": spec_view(&current.spec),
            "after": spec_view(spec),
        }));
    }
    for current in &plan.deletes {
        changes.push(json!({
            "op": "delete", "name": current.spec.name, "policyId": current.id,
            "fromVersion": current.version, "before": spec_view(&current.spec),
        }));
    }
    json!({
        "digest": plan.digest,
        "valid": true,
        "errors": [],
        "changes": changes,
        "unchanged": plan.unchanged.iter().map(|p| &p.spec.name).collect::<Vec<_>>(),
        "summary": {
            "create": plan.creates.len(),
            "update": plan.updates.len(),
            "delete": plan.deletes.len(),
            "unchanged": plan.unchanged.len(),
        },
    })
}

/// Read-only: what applying the file would change, and the digest that applies exactly that.
#[utoipa::path(
    post,
    path = "/approval-policies/files/plan",
    operation_id = "policies_files_plan",
    tag = "approval-policies",
    request_body = doc::PolicyFilePlanBody,
    responses(
        (status = 200, description = "the changes, the policies left unchanged and the digest; nothing is recorded", body = doc::Single<doc::PolicyFilePlan>),
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
    let map = body::object(&bytes)?;
    only_known(&map, &["source"])?;
    let source = required_text(&map, "source")?;
    let (_, plan) = planned(&state, &caller, &source).await?;
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
    request_body = doc::PolicyFileApplyBody,
    responses(
        (status = 200, description = "the change applied and the live policies after it", body = doc::Single<doc::PolicyFileApplied>),
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
    let map = body::object(&bytes)?;
    only_known(&map, &["source", "digest", "changeNote"])?;
    let source = required_text(&map, "source")?;
    let digest = required_text(&map, "digest")?;
    let note = optional_string(&map, "changeNote")?;
    let request =
        json!({"op": "policy.files.apply", "source": source, "digest": digest, "changeNote": note});
    idempotent::run(&state, &caller, &headers, request, || async {
        let (_, plan) = planned(&state, &caller, &source).await?;
        if plan.digest != digest {
            return Err(stale(&plan.digest));
        }
        let now = state.clock.now();
        let change = plan.change(&caller.env.id, |spec| PolicyRecord {
            id: PolicyId::from_unique(&crate::clock::unique()),
            env_id: caller.env.id.clone(),
            version: 1,
            spec: spec.clone(),
            created_at: now,
            updated_at: now,
        });
        let live = if plan.is_empty() {
            state.store.list_policies(&caller.env.id).await?
        } else {
            state
                .store
                .apply_policy_set(&change, note.as_deref(), &Actor::key(&caller.key.id, now))
                .await
                .map_err(|e| match e {
                    // Another edit landed between this read and the write.
                    StoreError::VersionConflict { .. } | StoreError::Duplicate { .. } => {
                        stale(&plan.digest)
                    }
                    other => other.into(),
                })?
        };
        let mut applied = plan_view(&plan);
        applied["applied"] = json!(!plan.is_empty());
        applied["policies"] = json!(live.iter().map(view).collect::<Vec<_>>());
        Ok((StatusCode::OK, applied))
    })
    .await
}

fn stale(current: &str) -> ApiError {
    ApiError::of(
        codes::STALE_PLAN,
        "the policies or the file changed since this plan; plan again and review the new change",
    )
    .with_details(json!({"currentDigest": current}))
}

/// One described request of a `test` call, and what it expects, if anything.
struct Case {
    name: Option<String>,
    kind: RequestKind,
    action_name: Option<String>,
    agent_id: Option<String>,
    user_id: Option<String>,
    tags: Vec<String>,
    payload: Value,
    expect: Option<Map<String, Value>>,
}

const CASE_FIELDS: [&str; 8] = [
    "name",
    "kind",
    "actionName",
    "agentId",
    "userId",
    "tags",
    "payload",
    "expect",
];

fn cases(value: &Value) -> Result<Vec<Case>, FileError> {
    let err = |field: String, message: &str| FileError {
        field,
        message: message.into(),
        name: None,
    };
    let list = match value {
        Value::Array(list) => list,
        Value::Object(map) => match map.get("cases") {
            Some(Value::Array(list)) => list,
            _ => return Err(err("cases".into(), "must be a list of cases")),
        },
        // Text is read once: what it holds must be the list itself (a string holding another
        // string is refused, never read again).
        Value::String(text) => match plan::read_text(text, "cases")? {
            Value::String(_) => return Err(err("cases".into(), "must be a list of cases")),
            parsed => return cases(&parsed),
        },
        _ => return Err(err("cases".into(), "must be a list of cases")),
    };
    if list.len() > POLICY_TEST_CASES_MAX {
        return Err(FileError {
            field: "cases".into(),
            message: format!("has more than {POLICY_TEST_CASES_MAX} cases"),
            name: None,
        });
    }
    list.iter()
        .enumerate()
        .map(|(i, c)| {
            let at = |field: &str| format!("cases[{i}].{field}");
            let Value::Object(map) = c else {
                return Err(err(format!("cases[{i}]"), "must be a mapping"));
            };
            if let Some(unknown) = map.keys().find(|k| !CASE_FIELDS.contains(&k.as_str())) {
                return Err(err(at(unknown), "is not a case field"));
            }
            let text = |field: &str| -> Result<Option<String>, FileError> {
                match map.get(field) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(err(at(field), "must be a string")),
                }
            };
            let kind = match text("kind")?.as_deref() {
                None | Some("action") => RequestKind::Action,
                Some("custom") => RequestKind::Custom,
                Some(_) => return Err(err(at("kind"), "must be action or custom")),
            };
            let tags = match map.get("tags") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(tags)) => tags
                    .iter()
                    .map(|t| t.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| err(at("tags"), "must be a list of strings"))?,
                Some(_) => return Err(err(at("tags"), "must be a list of strings")),
            };
            let payload = match map.get("payload") {
                None | Some(Value::Null) => json!({}),
                Some(v @ Value::Object(_)) => v.clone(),
                Some(_) => return Err(err(at("payload"), "must be a mapping")),
            };
            let expect = match map.get("expect") {
                None | Some(Value::Null) => None,
                Some(Value::Object(e)) => Some(e.clone()),
                Some(_) => return Err(err(at("expect"), "must be a mapping")),
            };
            Ok(Case {
                name: text("name")?,
                kind,
                action_name: text("actionName")?,
                agent_id: text("agentId")?,
                user_id: text("userId")?,
                tags,
                payload,
                expect,
            })
        })
        .collect()
}

/// The policy set as it would stand after applying `specs` over `live`: unchanged and updated
/// policies keep their ids (an update at its next version), new ones get fresh ids.
fn after_apply(
    specs: &[PolicySpec],
    live: &[PolicyRecord],
    now: steward_core::Millis,
) -> Vec<Policy> {
    let mut policies: Vec<Policy> = specs
        .iter()
        .map(
            |spec| match live.iter().find(|p| p.spec.name == spec.name) {
                Some(current) => Policy {
                    id: current.id.clone(),
                    version: current.version + u32::from(current.spec != *spec),
                    created_at: current.created_at,
                    spec: spec.clone(),
                },
                None => Policy {
                    id: PolicyId::from_unique(&crate::clock::unique()),
                    version: 1,
                    created_at: now,
                    spec: spec.clone(),
                },
            },
        )
        .collect();
    order(&mut policies);
    policies
}

/// Decides each case against the set as it would be after applying the file. Writes nothing
/// and dispatches nothing.
#[utoipa::path(
    post,
    path = "/approval-policies/files/test",
    operation_id = "policies_files_test",
    tag = "approval-policies",
    request_body = doc::PolicyFileTestBody,
    responses(
        (status = 200, description = "each case's decision, and whether it met its expectation; nothing is recorded", body = doc::Single<doc::PolicyFileTest>),
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
    let map = body::object(&bytes)?;
    only_known(&map, &["source", "cases"])?;
    let source = required_text(&map, "source")?;
    let cases =
        cases(map.get("cases").unwrap_or(&Value::Null)).map_err(|e| file_errors(vec![e]))?;
    let (specs, _) = planned(&state, &caller, &source).await?;
    let live = state.store.list_policies(&caller.env.id).await?;
    let policies = after_apply(&specs, &live, state.clock.now());
    let mut all_passed = true;
    let mut results = Vec::with_capacity(cases.len());
    for (i, case) in cases.iter().enumerate() {
        let action = match (&case.kind, &case.action_name) {
            (RequestKind::Action, Some(name)) => state.store.action(&caller.env.id, name).await?,
            _ => None,
        };
        let amount = match &action {
            Some(a) => money_amount(&a.definition, &case.payload).map(|n| n as f64),
            None => case.payload.get("amount").and_then(Value::as_f64),
        };
        let facts = Facts {
            kind: case.kind,
            action_name: case.action_name.as_deref(),
            agent_id: case.agent_id.as_deref(),
            user_id: case.user_id.as_deref(),
            tags: &case.tags,
            amount,
            input: &case.payload,
        };
        let decision = decide(&policies, &facts);
        let effect = decision.as_ref().map(|d| d.effect.as_str());
        let observed = json!({
            "effect": effect,
            "requiredApprovals": decision.as_ref().map(|d| d.required_approvals),
            "policy": decision.as_ref().map(|d| d.policy.name.clone()),
        });
        let passed = case.expect.as_ref().map(|expect| {
            expect
                .iter()
                .all(|(field, want)| observed.get(field).is_some_and(|got| got == want))
        });
        all_passed &= passed.unwrap_or(true);
        results.push(json!({
            "index": i,
            "name": case.name,
            "effect": effect,
            "requiredApprovals": observed["requiredApprovals"],
            "policy": observed["policy"],
            "decision": decision.as_ref().map(decision_json),
            "explanation": decision
                .as_ref()
                .map(|d| d.explanation.clone())
                .unwrap_or_else(|| "no policy applies".to_string()),
            "expected": case.expect,
            "passed": passed,
        }));
    }
    Ok(ok(json!({
        "evaluation": "policy_only",
        "passed": all_passed,
        "results": results,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_given_as_text_are_read_once() {
        // A string whose YAML is itself a string: refused, not read again and again.
        for text in ["AAA", "'AAA'", "\"\\\"AAA\\\"\"", ""] {
            let error = cases(&json!(text)).err().expect("refused");
            assert_eq!(error.field, "cases", "{text:?}");
        }
        let listed = cases(&json!("- {name: a, payload: {amount: 1}}")).expect("a list");
        assert_eq!(listed.len(), 1);
        let wrapped = cases(&json!("cases: [{name: a}]")).expect("a mapping with cases");
        assert_eq!(wrapped[0].name.as_deref(), Some("a"));
    }
}
