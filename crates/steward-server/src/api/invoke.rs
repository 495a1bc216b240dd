//! `actions/{ref}/invoke`: accept, record, dispatch once, answer with the invocation as it stands.

use super::body::{self, only_known, optional_string};
use super::openapi as doc;
use super::{idempotent, views};
use crate::auth::Caller;
use crate::dispatch;
use crate::error::{codes, ApiError, ApiResult};
use crate::progress::{Progress, Stage};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};
use steward_core::{
    check_input, fingerprint, scopes, EffectId, EffectState, IdempotencyKey, InvocationId,
    OperationKey, PreviewId, RunId,
};
use steward_store::{
    ActionRecord, EffectLinks, InvocationRecord, RunRecord, SecretRecord, Submission, SubmitOutcome,
};
use tracing::Instrument;

pub(super) const FIELDS: [&str; 8] = [
    "input",
    "runId",
    "parentSpanId",
    "retryOf",
    "operationKey",
    "previewId",
    "dependsOn",
    "compensates",
];
/// The parsed invoke request.
struct Request {
    input: Value,
    run_id: Option<String>,
    parent_span_id: Option<String>,
    retry_of: Option<InvocationId>,
    operation_key: Option<OperationKey>,
    idempotency_key: Option<IdempotencyKey>,
    links: EffectLinks,
}

fn parse(idempotency_key: Option<IdempotencyKey>, bytes: &Bytes) -> ApiResult<Request> {
    let map = body::object(bytes)?;
    only_known(&map, &FIELDS)?;
    // Any JSON value: whether it must be an object depends on the action (`check`).
    let input = match map.get("input") {
        None | Some(Value::Null) => json!({}),
        Some(v) => v.clone(),
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
        parent_span_id: parent_span_id(&map)?,
        retry_of,
        operation_key,
        idempotency_key,
        links: EffectLinks {
            preview: optional_string(&map, "previewId")?
                .map(|id| {
                    PreviewId::parse(&id).map_err(|_| {
                        ApiError::validation("previewId", "must be a preview id (prv_...)")
                    })
                })
                .transpose()?,
            ..super::links::parse(&map)?
        },
    })
}

/// `parentSpanId`: the span of the run the invocation is made under, shaped as a span id.
/// It needs a `runId`, and is kept for the run's timeline only: it is not part of the request's
/// fingerprint and decides nothing.
fn parent_span_id(map: &serde_json::Map<String, Value>) -> ApiResult<Option<String>> {
    let Some(id) = optional_string(map, "parentSpanId")? else {
        return Ok(None);
    };
    if map.get("runId").is_none_or(Value::is_null) {
        return Err(ApiError::validation("parentSpanId", "needs a runId"));
    }
    let max = super::runs::parse::SPAN_ID_BYTES_MAX;
    let fits = !id.is_empty()
        && id.len() <= max
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if !fits {
        return Err(ApiError::validation(
            "parentSpanId",
            format!("must be 1 to {max} letters, digits, `_`, `-`, `.` or `:`"),
        ));
    }
    Ok(Some(id))
}

/// The run an invoke names (`runId`): its user and tags are what approval policies match on.
/// A `runId` that names no run of the environment is refused, naming `runId`, rather than
/// decided as if the run had no user or tags: a policy that should have parked the invocation
/// for that user would otherwise let it run.
async fn named_run(state: &AppState, caller: &Caller, id: &str) -> ApiResult<RunRecord> {
    let missing = || ApiError::validation("runId", "names no run in this environment");
    let id = RunId::parse(id).map_err(|_| missing())?;
    state
        .store
        .run(&caller.env.id, &id)
        .await?
        .ok_or_else(missing)
}

pub(super) fn check(action: &ActionRecord, input: &Value) -> ApiResult<()> {
    let def = &action.definition;
    if !def.enabled {
        return Err(ApiError::of(
            codes::ACTION_DISABLED,
            "this action is disabled",
        ));
    }
    if !input.is_object() && def.takes_object_input() {
        return Err(ApiError::validation("input", "must be a JSON object"));
    }
    if let Some(schema) = &def.input_schema {
        crate::input_schema::validate(schema, input)?;
    }
    if def.adapter.is_some() {
        crate::adapters::check_input(def, input)
            .map_err(|e| ApiError::validation(e.field, e.message))?;
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

#[utoipa::path(
    post,
    path = "/actions/{reference}/invoke",
    operation_id = "invoke_invoke",
    tag = "invocations",
    params(doc::ActionPath, doc::IdempotencyHeader),
    request_body = doc::InvokeBody,
    responses(
        (status = 200, description = "the invocation as it stands after dispatch", body = doc::Single<doc::Invocation>),
        (status = 202, description = "the invocation, waiting for approval", body = doc::Single<doc::Invocation>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
        doc::BudgetRefused,
    )
)]
pub async fn invoke(
    State(state): State<AppState>,
    Path(reference): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    let token_hash = crate::auth::token_hash(&headers)?;
    let invoked = run(
        &state,
        &token_hash,
        &reference,
        body::idempotency_key(&headers),
        &bytes,
        Progress::none(),
    )
    .await?;
    Ok(answer(&invoked.invocation, invoked.replayed))
}

/// What an invoke came to: the invocation as it stands, and whether it was answered from an
/// earlier request with the same `Idempotency-Key`.
pub(crate) struct Invoked {
    pub invocation: InvocationRecord,
    pub replayed: bool,
}

/// The whole invoke, for the HTTP handler and the MCP `tools/call` (`mcp/call.rs`) alike:
/// authentication, governance, operation keys, idempotency, approvals, limits and halt.
/// `bytes` is the invoke request body as `POST /actions/{reference}/invoke` takes it.
pub(crate) async fn run(
    state: &AppState,
    token_hash: &str,
    reference: &str,
    idempotency_key: ApiResult<Option<IdempotencyKey>>,
    bytes: &Bytes,
    progress: Progress,
) -> ApiResult<Invoked> {
    // Authentication and everything the invoke reads come from one read (`invoke_context`);
    // the checks then run in the order every other endpoint uses: 401, 403, 400, 409, 404.
    let context = state
        .store
        .invoke_context(
            token_hash,
            state.clock.now(),
            reference,
            idempotency_key.as_ref().ok().and_then(Option::as_ref),
        )
        .await?
        .ok_or_else(ApiError::unauthenticated)?;
    crate::auth::note_used(state, &context.key);
    let caller = Caller {
        key: context.key,
        env: context.environment,
    };
    caller.require(scopes::ACTIONS_INVOKE)?;
    let request = parse(idempotency_key?, bytes)?;
    if caller.env.halted {
        return Err(ApiError::of(
            codes::ENVIRONMENT_HALTED,
            "this environment is halted; nothing was invoked",
        ));
    }
    let action = context
        .action
        .ok_or_else(|| ApiError::not_found("action"))?;
    check(&action, &request.input)?;
    let mut fingerprinted = json!({
        "action": action.id, "input": request.input, "operationKey": request.operation_key,
        "retryOf": request.retry_of, "runId": request.run_id,
    });
    if let Some(links) = super::links::fingerprinted(&request.links) {
        fingerprinted["links"] = links;
    }
    let request_fingerprint = fingerprint(&fingerprinted);
    // A resend under the same Idempotency-Key is answered from what is recorded, with nothing
    // written: the same answer `submit` would give (`EarlierRequest::outcome`).
    if let Some(earlier) = context.earlier {
        return settle_outcome(state, earlier.outcome(&request_fingerprint), false).await;
    }
    super::links::check(state, &caller.env.id, &request.links).await?;
    if let Some(preview) = &request.links.preview {
        super::previews::check_binding(
            state,
            &caller,
            &action,
            &request.input,
            request.operation_key.as_ref(),
            preview,
        )
        .await?;
    }

    let run = match &request.run_id {
        Some(id) => Some(named_run(state, &caller, id).await?),
        None => None,
    };
    // An invoke naming a run is traced under the run's trace: the request span (and so the
    // store and dispatch spans under it) takes the run's root span as its parent.
    if let Some(context) = run.as_ref().and_then(crate::telemetry::run_context) {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        tracing::Span::current().set_parent(context);
    }
    let effect_id = EffectId::from_unique(&crate::clock::unique());
    let provider_key = crate::adapters::provider_key(&action.definition, &effect_id);
    let gate = super::gate::gate(
        &caller,
        &context.policies,
        &action,
        &request.input,
        request.operation_key.as_ref(),
        run.as_ref(),
        state.clock.now(),
    )?;
    progress.report(Stage::PolicyEvaluated {
        initial: gate.initial,
    });
    let submission = Submission {
        env_id: caller.env.id.clone(),
        invocation_id: InvocationId::from_unique(&crate::clock::unique()),
        effect_id,
        input_fingerprint: fingerprint(&request.input),
        request_fingerprint,
        action,
        input: request.input,
        operation_key: request.operation_key,
        idempotency_key: request.idempotency_key,
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
        links: request.links,
        parent_span_id: request.parent_span_id,
    };
    // Recording and dispatch run in their own task: a client that disconnects must not cancel
    // either halfway.
    let task_state = state.clone();
    let secrets = context.secrets;
    let span = tracing::info_span!("steward.invoke", action = %submission.action.name);
    let (submitted, answered) = tokio::spawn(
        async move { record_and_dispatch(&task_state, submission, &secrets, &progress).await }
            .instrument(span),
    )
    .await
    .map_err(|e| ApiError::internal("dispatch task", &e))??;
    match (submitted, answered) {
        // The recorded answer came back with the invocation as it left it: no read needed.
        (SubmitOutcome::Created(_), Some(current)) => {
            state
                .metrics
                .invocation(current.state.invocation_status().as_str());
            Ok(Invoked {
                invocation: current,
                replayed: false,
            })
        }
        (submitted, _) => settle_outcome(state, submitted, true).await,
    }
}

/// Records the submission and, when it starts `ready`, dispatches it; then marks the request's
/// `Idempotency-Key` answered if the recorded answer did not already. Returns the outcome and,
/// when the answer was recorded here, the invocation as it left it.
async fn record_and_dispatch(
    state: &AppState,
    submission: Submission,
    secrets: &[SecretRecord],
    progress: &Progress,
) -> ApiResult<(SubmitOutcome, Option<InvocationRecord>)> {
    let started = std::time::Instant::now();
    let (outcome, answered) = if submission.initial == EffectState::Ready {
        let def = submission.action.definition.clone();
        let done =
            dispatch::submit_and_dispatch(state, &submission, &def, secrets, progress).await?;
        (done.outcome, done.answered)
    } else {
        let outcome = state
            .store
            .submit(&submission)
            .instrument(tracing::info_span!("steward.store", operation = "submit"))
            .await?;
        state.metrics.store_commit("submit", started.elapsed());
        (outcome, None)
    };
    if let (SubmitOutcome::Created(inv), Some(key), None) =
        (&outcome, &submission.idempotency_key, &answered)
    {
        if let Err(e) = state
            .store
            .finish_invoke_request(&inv.env_id, &submission.actor, key)
            .await
        {
            tracing::error!(error = %e, invocation = %inv.id, "could not mark the invoke request answered");
        }
    }
    Ok((outcome, answered))
}

/// The answer to a submission's outcome; a created invocation is read back as it now stands.
async fn settle_outcome(
    state: &AppState,
    submitted: SubmitOutcome,
    fresh: bool,
) -> ApiResult<Invoked> {
    let created = match submitted {
        SubmitOutcome::Created(inv) => inv,
        SubmitOutcome::Existing(inv) => {
            return Ok(Invoked {
                invocation: inv,
                replayed: false,
            })
        }
        SubmitOutcome::Replayed(inv) => {
            return Ok(Invoked {
                invocation: inv,
                replayed: true,
            })
        }
        SubmitOutcome::InProgress => return Err(idempotent::in_progress()),
        SubmitOutcome::IdempotencyMismatch => return Err(idempotent::reused()),
        SubmitOutcome::OperationKeyConflict {
            effect_id,
            invocation_id,
        } => {
            return Err(ApiError::of(
                codes::OPERATION_KEY_CONFLICT,
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
            return Err(ApiError::of(
                codes::RETRY_ALREADY_EXISTS,
                "this failed invocation already has a retry with another input",
            )
            .with_details(json!({"invocationId": invocation_id})))
        }
        SubmitOutcome::BudgetRefused(refusal) => return Err(super::budgets::refused(&refusal)),
        SubmitOutcome::RetryOfNotFailed { state: prior } => {
            return Err(ApiError::of(
                codes::RETRY_OF_NOT_FAILED,
                format!(
                    "retryOf names an invocation that is {}, not settled failed",
                    prior.invocation_status().as_str()
                ),
            ))
        }
    };

    let current = state
        .store
        .invocation(&created.env_id, &created.id)
        .await?
        .ok_or_else(|| ApiError::not_found("invocation"))?;
    if fresh {
        state
            .metrics
            .invocation(current.state.invocation_status().as_str());
    }
    Ok(Invoked {
        invocation: current,
        replayed: false,
    })
}
