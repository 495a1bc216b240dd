//! Policy files: an environment's whole approval-policy set as one YAML or JSON document that
//! lives in a repository and goes through review. `plan` compares a file with the live policies
//! and answers the change with a digest (read-only); `apply` makes exactly that change, in one
//! transaction, only while the live set is still the one planned against (else 409
//! `STALE_PLAN`, nothing changed); `test` decides described requests against the set as it would
//! be after the apply, and writes nothing. The file's format is in `plan.rs`;
//! `api/policy_files.rs` is the HTTP door, which the CLI (`commands/operate/policies.rs`) calls.

pub mod plan;

use super::policies::{check_action, described_action, described_amount};
use super::{Error, Principal, Result};
use crate::error::codes;
use crate::state::AppState;
use plan::{FileError, Plan, POLICY_TEST_CASES_MAX};
use serde_json::{json, Map, Value};
use steward_core::policy::{decide, order, Facts, Policy, PolicyDecision, PolicySpec, RequestKind};
use steward_core::{scopes, PolicyId};
use steward_store::{Actor, PolicyRecord, StoreError};

/// A 400 listing every problem of the file; `details.field` is the first one's.
fn file_errors(errors: Vec<FileError>) -> Error {
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
    Error::of(codes::VALIDATION_ERROR, message).with_details(json!({
        "field": first,
        "errors": errors.iter().map(FileError::view).collect::<Vec<_>>(),
    }))
}

/// The file's policies, each also checked against the environment (a `matchActionName` must
/// name one of its actions), and the plan against the live policies.
async fn planned(
    state: &AppState,
    principal: &Principal,
    source: &str,
) -> Result<(Vec<PolicySpec>, Plan)> {
    let specs = plan::parse(source).map_err(file_errors)?;
    let mut errors = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        if let Err(e) = check_action(state, principal, spec).await {
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
    let live = state.store.list_policies(&principal.env.id).await?;
    let plan = plan::plan(&specs, &live);
    Ok((specs, plan))
}

/// What applying the file `source` would change, and the digest that applies exactly that.
/// Read-only.
pub async fn plan(state: &AppState, principal: &Principal, source: &str) -> Result<Plan> {
    principal.require(scopes::POLICIES_READ)?;
    let (_, plan) = planned(state, principal, source).await?;
    Ok(plan)
}

/// What an apply came to: the plan it applied, whether it wrote anything (not when the file
/// already matched the live set), and the live policies after it.
#[derive(Debug)]
pub struct Applied {
    pub plan: Plan,
    pub applied: bool,
    pub live: Vec<PolicyRecord>,
}

/// Applies exactly the plan `digest` names, in one transaction; `STALE_PLAN` if the file or
/// the live policies differ from what was planned.
pub async fn apply(
    state: &AppState,
    principal: &Principal,
    source: &str,
    digest: &str,
    change_note: Option<&str>,
) -> Result<Applied> {
    principal.require(scopes::POLICIES_WRITE)?;
    let (_, plan) = planned(state, principal, source).await?;
    if plan.digest != digest {
        return Err(stale(&plan.digest));
    }
    let now = state.clock.now();
    let env = &principal.env.id;
    let change = plan.change(env, |spec| PolicyRecord {
        id: PolicyId::from_unique(&crate::clock::unique()),
        env_id: env.clone(),
        version: 1,
        spec: spec.clone(),
        created_at: now,
        updated_at: now,
    });
    let live = if plan.is_empty() {
        state.store.list_policies(env).await?
    } else {
        state
            .store
            .apply_policy_set(&change, change_note, &Actor::key(&principal.key.id, now))
            .await
            .map_err(|e| match e {
                // Another edit landed between this read and the write.
                StoreError::VersionConflict { .. } | StoreError::Duplicate { .. } => {
                    stale(&plan.digest)
                }
                other => other.into(),
            })?
    };
    let applied = !plan.is_empty();
    Ok(Applied {
        plan,
        applied,
        live,
    })
}

fn stale(current: &str) -> Error {
    Error::of(
        codes::STALE_PLAN,
        "the policies or the file changed since this plan; plan again and review the new change",
    )
    .with_details(json!({"currentDigest": current}))
}

/// One described request of a `test` call, and what it expects, if anything.
#[derive(Debug)]
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

fn cases(value: &Value) -> std::result::Result<Vec<Case>, FileError> {
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
            let text = |field: &str| -> std::result::Result<Option<String>, FileError> {
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

/// One case's decision against the set after the apply.
#[derive(Debug)]
pub struct CaseResult {
    /// The case's place in the list.
    pub index: usize,
    pub name: Option<String>,
    /// `None`: no policy applies.
    pub decision: Option<PolicyDecision>,
    /// The case's `expect`, as given.
    pub expected: Option<Map<String, Value>>,
    /// Whether the decision met `expected` (`None` without an expectation).
    pub passed: Option<bool>,
}

/// What [`test`] decided: each case, and whether every case with an expectation met it.
#[derive(Debug)]
pub struct Tested {
    pub passed: bool,
    pub results: Vec<CaseResult>,
}

/// What a case's `expect` is compared with: the decision's effect, approvals and policy name,
/// each `null` when no policy applies.
fn observed(decision: Option<&PolicyDecision>) -> Value {
    json!({
        "effect": decision.map(|d| d.effect.as_str()),
        "requiredApprovals": decision.map(|d| d.required_approvals),
        "policy": decision.map(|d| d.policy.name.clone()),
    })
}

/// Decides each of `cases` (a list, or YAML or JSON text of one) against the set as it would be
/// after applying the file `source`. Writes nothing and dispatches nothing.
pub async fn test(
    state: &AppState,
    principal: &Principal,
    source: &str,
    cases: &Value,
) -> Result<Tested> {
    principal.require(scopes::POLICIES_READ)?;
    let cases = self::cases(cases).map_err(|e| file_errors(vec![e]))?;
    let (specs, _) = planned(state, principal, source).await?;
    let live = state.store.list_policies(&principal.env.id).await?;
    let policies = after_apply(&specs, &live, state.clock.now());
    let mut all_passed = true;
    let mut results = Vec::with_capacity(cases.len());
    for (index, case) in cases.into_iter().enumerate() {
        let action =
            described_action(state, principal, case.kind, case.action_name.as_deref()).await?;
        let facts = Facts {
            kind: case.kind,
            action_name: case.action_name.as_deref(),
            agent_id: case.agent_id.as_deref(),
            user_id: case.user_id.as_deref(),
            tags: &case.tags,
            amount: described_amount(action.as_ref(), &case.payload),
            input: &case.payload,
        };
        let decision = decide(&policies, &facts);
        let observed = observed(decision.as_ref());
        let passed = case.expect.as_ref().map(|expect| {
            expect
                .iter()
                .all(|(field, want)| observed.get(field).is_some_and(|got| got == want))
        });
        all_passed &= passed.unwrap_or(true);
        results.push(CaseResult {
            index,
            name: case.name,
            decision,
            expected: case.expect,
            passed,
        });
    }
    Ok(Tested {
        passed: all_passed,
        results,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_given_as_text_are_read_once() {
        // A string whose YAML is itself a string: refused, not read again and again.
        for text in ["AAA", "'AAA'", "\"\\\"AAA\\\"\"", ""] {
            let error = cases(&json!(text)).expect_err("refused");
            assert_eq!(error.field, "cases", "{text:?}");
        }
        let listed = cases(&json!("- {name: a, payload: {amount: 1}}")).expect("a list");
        assert_eq!(listed.len(), 1);
        let wrapped = cases(&json!("cases: [{name: a}]")).expect("a mapping with cases");
        assert_eq!(wrapped[0].name.as_deref(), Some("a"));
    }
}
