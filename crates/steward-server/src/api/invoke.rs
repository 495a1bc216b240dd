//! `actions/{ref}/invoke`: accept, record, dispatch once, answer with the invocation as it stands.

use super::body::{self, only_known, optional_string};
use super::{idempotent, views};
use crate::auth::Caller;
use crate::dispatch::{self, provider_idempotency_key, stripe};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};
use steward_core::{
    check_input, fingerprint, scopes, EffectId, EffectState, IdempotencyKey, InvocationId,
    OperationKey,
};
use steward_store::{ActionRecord, InvocationRecord, Submission, SubmitOutcome};

const FIELDS: [&str; 8] = [
    "input",
    "runId",
    "parentSpanId",
    "retryOf",
    "operationKey",
    "previewId",
    "dependsOn",
    "compensates",
];
/// Accepted by the SDK, not implemented here: refused rather than silently ignored, because each
/// is a safety binding the caller relies on.
const UNSUPPORTED: [&str; 3] = ["previewId", "dependsOn", "compensates"];

/// The parsed invoke request.
struct Request {
    input: Value,
    run_id: Option<String>,
    retry_of: Option<InvocationId>,
    operation_key: Option<OperationKey>,
    idempotency_key: Option<IdempotencyKey>,
}

fn parse(headers: &HeaderMap, bytes: &Bytes) -> ApiResult<Request> {
    let idempotency_key = body::idempotency_key(headers)?;
    let map = body::object(bytes)?;
    only_known(&map, &FIELDS)?;
    if let Some(field) = UNSUPPORTED
        .iter()
        .find(|f| map.get(**f).is_some_and(|v| !v.is_null()))
    {
        return Err(ApiError::validation(
            *field,
            "is not supported by this server; nothing was invoked",
        ));
    }
    let input = match map.get("input") {
        None | Some(Value::Null) => json!({}),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => return Err(ApiError::validation("input", "must be a JSON object")),
    };
    let retry_of = optional_string(&map, "retryOf")?
        .map(|r| {
            InvocationId::parse(&r)
                .map_err(|_| ApiError::validation("retryOf", "must be an invocation id (inv_...)"))
        })
        .transpose()?;
    let operation_key = optional_string(&map, "operationKey")?
        .map(|k| {
            OperationKey::parse(&k).map_err(|e| ApiError::validation("operationKey", e.to_string()))
        })
        .transpose()?;
    Ok(Request {
        input,
        run_id: optional_string(&map, "runId")?,
        retry_of,
        operation_key,
        idempotency_key,
    })
}

fn check(action: &ActionRecord, input: &Value) -> ApiResult<()> {
    let def = &action.definition;
    if !def.enabled {
        return Err(ApiError::conflict(
            "action_disabled",
            "this action is disabled",
        ));
    }
    if let Some(schema) = &def.input_schema {
        crate::input_schema::validate(schema, input)?;
    }
    if def.adapter.is_some() {
        stripe::check_input(input)?;
    } else {
        check_input(def, input).map_err(|e| match e {
            steward_core::TemplateError::MissingInput { path } => ApiError::validation(
                format!("input.{path}"),
                "is required by the action's template",
            ),
            other => ApiError::validation("input", other.to_string()),
        })?;
    }
    Ok(())
}

fn answer(inv: &InvocationRecord, replayed: bool) -> Response {
    let status = if inv.state == EffectState::AwaitingApproval {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    let response = crate::envelope::with_status(status, views::invocation(inv));
    if replayed {
        idempotent::replayed(response)
    } else {
        response
    }
}

pub async fn invoke(
    State(state): State<AppState>,
    caller: Caller,
    Path(reference): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_INVOKE)?;
    let request = parse(&headers, &bytes)?;
    if caller.env.halted {
        return Err(ApiError::conflict(
            "environment_halted",
            "this environment is halted; nothing was invoked",
        ));
    }
    let action = state
        .store
        .action(&caller.env.id, &reference)
        .await?
        .ok_or_else(|| ApiError::not_found("action"))?;
    check(&action, &request.input)?;

    let effect_id = EffectId::from_unique(&crate::clock::unique());
    let provider_key = action
        .definition
        .adapter
        .as_ref()
        .map(|_| provider_idempotency_key(&effect_id));
    let gate = super::gate::gate(
        &state,
        &caller,
        &action,
        &request.input,
        request.operation_key.as_ref(),
        request.run_id.as_ref(),
    )
    .await?;
    let submission = Submission {
        env_id: caller.env.id.clone(),
        invocation_id: InvocationId::from_unique(&crate::clock::unique()),
        effect_id,
        input_fingerprint: fingerprint(&request.input),
        request_fingerprint: fingerprint(&json!({
            "action": action.id, "input": request.input, "operationKey": request.operation_key,
            "retryOf": request.retry_of, "runId": request.run_id,
        })),
        action,
        input: request.input,
        operation_key: request.operation_key,
        idempotency_key: request.idempotency_key.clone(),
        run_id: request.run_id,
        retry_of: request.retry_of,
        initial: gate.initial,
        provider_idempotency_key: provider_key,
        approval: gate.approval,
        decision: gate.decision,
        evidence: gate.evidence,
        actor: caller.key.id.clone(),
        now: state.clock.now(),
        owner: state.replica.clone(),
    };
    let started = std::time::Instant::now();
    let submitted = state.store.submit(&submission).await?;
    state.metrics.store_commit("submit", started.elapsed());
    let created = match submitted {
        SubmitOutcome::Created(inv) => inv,
        SubmitOutcome::Existing(inv) => return Ok(answer(&inv, false)),
        SubmitOutcome::Replayed(inv) => return Ok(answer(&inv, true)),
        SubmitOutcome::InProgress => return Err(idempotent::in_progress()),
        SubmitOutcome::IdempotencyMismatch => return Err(idempotent::reused()),
        SubmitOutcome::OperationKeyConflict {
            effect_id,
            invocation_id,
        } => {
            return Err(ApiError::conflict(
                "operation_key_conflict",
                "this operationKey already names an effect with a different input",
            )
            .with_details(json!({"effectId": effect_id, "invocationId": invocation_id})))
        }
        SubmitOutcome::RetryOfNotFound => {
            return Err(ApiError::validation(
                "retryOf",
                "names no invocation in this environment",
            ))
        }
        SubmitOutcome::RetryOfTaken { invocation_id } => {
            return Err(ApiError::conflict(
                "retry_already_exists",
                "this failed invocation already has a retry with another input",
            )
            .with_details(json!({"invocationId": invocation_id})))
        }
        SubmitOutcome::RetryOfNotFailed { state: prior } => {
            return Err(ApiError::conflict(
                "retry_of_not_failed",
                format!(
                    "retryOf names an invocation that is {}, not settled failed",
                    prior.invocation_status().as_str()
                ),
            ))
        }
    };

    // Dispatch and the request's completion run in their own task: a client that disconnects
    // must not cancel either halfway.
    let task_state = state.clone();
    let task_inv = created.clone();
    let finish_key = request.idempotency_key;
    let outcome = tokio::spawn(async move {
        let result = match task_inv.state {
            EffectState::Ready => dispatch::dispatch(&task_state, &task_inv).await,
            _ => Ok(()),
        };
        if let Some(key) = finish_key {
            if let Err(e) = task_state.store.finish_invoke_request(&task_inv.env_id, &key).await {
                tracing::error!(error = %e, invocation = %task_inv.id, "could not mark the invoke request answered");
            }
        }
        result
    })
    .await
    .map_err(|e| ApiError::internal("dispatch task", &e))?;
    outcome?;
    let current = state
        .store
        .invocation(&created.env_id, &created.id)
        .await?
        .ok_or_else(|| ApiError::not_found("invocation"))?;
    state
        .metrics
        .invocation(current.state.invocation_status().as_str());
    Ok(answer(&current, false))
}
