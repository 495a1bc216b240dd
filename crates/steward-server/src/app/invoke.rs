//! The invoke: accept, record, dispatch once, and answer with the invocation as it stands.
//! `POST /actions/{ref}/invoke` (`api/invoke.rs`) and the MCP `tools/call` (`mcp/call.rs`) both
//! call [`invoke`], so governance, operation keys, idempotency, approvals, limits and the halt
//! apply exactly alike.
//!
//! What an invoke reads before deciding comes in a [`Context`], read one of two ways: with the
//! authentication, in one read ([`authenticate`], the HTTP door, which has only a token), or for
//! a principal a front end already authenticated ([`context`], MCP, whose guard authenticated
//! the request and whose catalog already holds the action).

use super::{budgets, gate, idempotency, input, links, previews, seam, Error, Principal, Result};
use crate::dispatch;
use crate::error::codes;
use crate::progress::{Progress, Stage};
use crate::state::AppState;
use serde_json::{json, Value};
use steward_core::{
    fingerprint, scopes, EffectId, EffectState, IdempotencyKey, InvocationId, OperationKey, RunId,
    UnkeyedInvokes,
};
use steward_store::{
    secrets_named_by, ActionRecord, EarlierRequest, EffectLinks, InvocationRecord, PolicyRecord,
    RunRecord, SecretRecord, Submission, SubmitOutcome,
};
use tracing::Instrument;

/// An invoke request, parsed by the front end.
#[derive(Debug, Clone, Default)]
pub struct Invoke {
    /// Any JSON value: whether it must be an object depends on the action ([`input::check`]).
    pub input: Value,
    pub run_id: Option<String>,
    /// The span of the run the invocation is made under, for the run's timeline only: not part
    /// of the request's fingerprint, and it decides nothing.
    pub parent_span_id: Option<String>,
    pub retry_of: Option<InvocationId>,
    pub operation_key: Option<OperationKey>,
    pub idempotency_key: Option<IdempotencyKey>,
    pub links: EffectLinks,
}

/// What an invoke reads before deciding anything.
pub struct Context {
    /// The action the request names, if it names one of the environment.
    pub action: Option<ActionRecord>,
    /// The environment's approval policies.
    pub policies: Vec<PolicyRecord>,
    /// The request the principal already recorded under the same `Idempotency-Key`, if any.
    pub earlier: Option<EarlierRequest>,
    /// The action's secrets that exist.
    pub secrets: Vec<SecretRecord>,
}

/// What an invoke came to: the invocation as it stands, and whether it was answered from an
/// earlier request with the same `Idempotency-Key`.
#[derive(Debug)]
pub struct Invoked {
    pub invocation: InvocationRecord,
    pub replayed: bool,
    /// A governed invoke accepted with neither an operation key nor an `Idempotency-Key`
    /// (the environment's `unkeyedInvokes` is `accept`): the answer warns of it
    /// ([`super::warnings::Warning::NoRequestKey`]).
    pub unkeyed: bool,
}

/// Why an invoke has no invocation to answer with.
#[derive(Debug)]
pub enum Failure {
    /// Refused: nothing was recorded.
    Refused(Error),
    /// The server failed (storage, an internal error, a simulated crash) where the invoke may
    /// already have been recorded: what happened is unknown, and a resend under the same
    /// operation key finds it.
    OutcomeUnknown(Error),
}

impl Failure {
    /// The failure `error` is: the server's own failures leave the outcome unknown, every
    /// other code is a refusal.
    pub fn of(error: Error) -> Failure {
        let failed = [
            codes::INTERNAL_ERROR,
            codes::STORAGE_UNAVAILABLE,
            codes::SIMULATED_CRASH,
            codes::OUTCOME_UNKNOWN,
        ];
        if failed.iter().any(|c| c.code == error.code) {
            Failure::OutcomeUnknown(error)
        } else {
            Failure::Refused(error)
        }
    }

    /// The error as it is answered where no distinction is made (HTTP).
    pub fn into_error(self) -> Error {
        match self {
            Failure::Refused(e) | Failure::OutcomeUnknown(e) => e,
        }
    }
}

impl From<Failure> for Error {
    fn from(failure: Failure) -> Error {
        failure.into_error()
    }
}

/// Authenticates `token_hash` and reads the invoke's context, in one read
/// (`Store::invoke_context`): 401 when the key is missing, revoked or expired, 403 when it may
/// not invoke. `idempotency_key` is the request's, when it has a valid one.
pub async fn authenticate(
    state: &AppState,
    token_hash: &str,
    reference: &str,
    idempotency_key: Option<&IdempotencyKey>,
) -> Result<(Principal, Context)> {
    let read = state
        .store
        .invoke_context(token_hash, state.clock.now(), reference, idempotency_key)
        .await?
        .ok_or_else(Error::unauthenticated)?;
    crate::auth::note_used(state, &read.key);
    let principal = Principal {
        key: read.key,
        env: read.environment,
    };
    principal.require(scopes::ACTIONS_INVOKE)?;
    let context = Context {
        action: read.action,
        policies: read.policies,
        earlier: read.earlier,
        secrets: read.secrets,
    };
    Ok((principal, context))
}

/// The context of an invoke of `action` by a principal already authenticated, sent without an
/// `Idempotency-Key` (so there is no earlier request to find): the environment's policies and
/// the action's secrets.
pub async fn context(
    state: &AppState,
    principal: &Principal,
    action: ActionRecord,
) -> Result<Context> {
    let policies = state.store.list_policies(&principal.env.id).await?;
    let mut secrets = Vec::new();
    for name in secrets_named_by(&action.definition) {
        if let Some(secret) = state.store.secret(&principal.env.id, &name).await? {
            secrets.push(secret);
        }
    }
    Ok(Context {
        action: Some(action),
        policies,
        earlier: None,
        secrets,
    })
}

/// The whole invoke after authentication: the scope, the halt, the action, its input,
/// idempotency, links, the preview binding, the run, governance, then the record and the one
/// dispatch. The checks run in the order every endpoint uses: 403, 409, 404, 400.
pub async fn invoke(
    state: &AppState,
    principal: &Principal,
    context: Context,
    request: Invoke,
    progress: Progress,
) -> std::result::Result<Invoked, Failure> {
    seam::reached(state, seam::UseCase::Invoke);
    run(state, principal, context, request, progress)
        .await
        .map_err(Failure::of)
}

async fn run(
    state: &AppState,
    principal: &Principal,
    context: Context,
    request: Invoke,
    progress: Progress,
) -> Result<Invoked> {
    principal.require(scopes::ACTIONS_INVOKE)?;
    if principal.env.halted {
        return Err(Error::of(
            codes::ENVIRONMENT_HALTED,
            "this environment is halted; nothing was invoked",
        ));
    }
    let action = context.action.ok_or_else(|| Error::not_found("action"))?;
    input::check(&action, &request.input)?;
    let unkeyed = unkeyed(principal, &action, &request)?;
    let mut fingerprinted = json!({
        "action": action.id, "input": request.input, "operationKey": request.operation_key,
        "retryOf": request.retry_of, "runId": request.run_id,
    });
    if let Some(links) = links::fingerprinted(&request.links) {
        fingerprinted["links"] = links;
    }
    let request_fingerprint = fingerprint(&fingerprinted);
    // A resend under the same Idempotency-Key is answered from what is recorded, with nothing
    // written: the same answer `submit` would give (`EarlierRequest::outcome`).
    if let Some(earlier) = context.earlier {
        // The earlier request is still in progress because this process keeps its answer:
        // the resend records it first, and answers with it.
        if let (false, true, Some(inv)) = (
            earlier.answered,
            earlier.fingerprint == request_fingerprint,
            earlier.invocation.as_ref(),
        ) {
            if state.pending.holds(&inv.effect_id) {
                let current = answer_kept(state, inv.clone()).await?;
                return Ok(Invoked {
                    invocation: current,
                    replayed: true,
                    unkeyed: false,
                });
            }
            // A parked invocation's submit is all of its request's work: an unanswered request
            // whose invocation waits for its approval lost only its "answered" mark (the
            // submit's commit lost its answer, `ParkedNotKnown`). It is answered as it stands,
            // and marked, rather than `in progress` for ever.
            if inv.state == EffectState::AwaitingApproval {
                if let Some(key) = &request.idempotency_key {
                    if let Err(e) = state
                        .store
                        .finish_invoke_request(&inv.env_id, &principal.key.id, key)
                        .await
                    {
                        tracing::warn!(error = %e, invocation = %inv.id, "could not mark the parked invoke request answered");
                    }
                }
                return Ok(Invoked {
                    invocation: inv.clone(),
                    replayed: true,
                    unkeyed: false,
                });
            }
        }
        return settle_outcome(state, earlier.outcome(&request_fingerprint), false).await;
    }
    links::check(state, &principal.env.id, &request.links).await?;
    if let Some(preview) = &request.links.preview {
        previews::check_binding(
            state,
            principal,
            &action,
            &request.input,
            request.operation_key.as_ref(),
            preview,
        )
        .await?;
    }

    let run = match &request.run_id {
        Some(id) => Some(named_run(state, principal, id).await?),
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
    let gate = gate::gate(
        principal,
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
        env_id: principal.env.id.clone(),
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
        actor: principal.key.id.clone(),
        now: state.clock.now(),
        owner: state.replica.clone(),
        links: request.links,
        parent_span_id: request.parent_span_id,
        shadow_decisions: gate.shadow,
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
    .map_err(|e| Error::internal("dispatch task", &e))??;
    let invoked = match (submitted, answered) {
        // The recorded answer came back with the invocation as it left it: no read needed.
        (SubmitOutcome::Created(_), Some(current)) => {
            state
                .metrics
                .invocation(current.state.invocation_status().as_str());
            Invoked {
                invocation: current,
                replayed: false,
                unkeyed: false,
            }
        }
        (submitted, _) => settle_outcome(state, submitted, true).await?,
    };
    Ok(Invoked { unkeyed, ..invoked })
}

/// Whether `request` is a governed invoke with neither an operation key nor an
/// `Idempotency-Key`. Such an invoke cannot tell a resend from new work, so an environment
/// whose `unkeyedInvokes` is `refuse` refuses it (400 `operation_key_required`, nothing
/// recorded); otherwise it is accepted and answered with a warning. MCP never gets here
/// without one: a governed `tools/call` without a key is refused or given a derived key first.
fn unkeyed(principal: &Principal, action: &ActionRecord, request: &Invoke) -> Result<bool> {
    let unkeyed = action.definition.is_governed()
        && request.operation_key.is_none()
        && request.idempotency_key.is_none();
    if unkeyed && principal.env.unkeyed_invokes == UnkeyedInvokes::Refuse {
        return Err(Error::of(
            codes::OPERATION_KEY_REQUIRED,
            "this environment refuses governed invokes without an operationKey or an \
             Idempotency-Key; send one (the same one on every retry of this operation)",
        )
        .with_details(json!({"field": "operationKey"})));
    }
    Ok(unkeyed)
}

/// The run an invoke names (`runId`): its user and tags are what approval policies match on.
/// A `runId` that names no run of the environment is refused, naming `runId`, rather than
/// decided as if the run had no user or tags: a policy that should have parked the invocation
/// for that user would otherwise let it run.
async fn named_run(state: &AppState, principal: &Principal, id: &str) -> Result<RunRecord> {
    let missing = || Error::validation("runId", "names no run in this environment");
    let id = RunId::parse(id).map_err(|_| missing())?;
    state
        .store
        .run(&principal.env.id, &id)
        .await?
        .ok_or_else(missing)
}

/// Records the submission and, when it starts `ready`, dispatches it; then marks the request's
/// `Idempotency-Key` answered if the recorded answer did not already. Returns the outcome and,
/// when the answer was recorded here (the dispatched attempt's answer, or a parked or denied
/// submission, which is its own answer), the invocation as it left it.
async fn record_and_dispatch(
    state: &AppState,
    submission: Submission,
    secrets: &[SecretRecord],
    progress: &Progress,
) -> Result<(SubmitOutcome, Option<InvocationRecord>)> {
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
            .await
            .map_err(|source| -> Error {
                // A lost commit answer: recorded or not, never "nothing was changed".
                if source.commit_unknown() {
                    crate::effect_error::EffectError::ParkedNotKnown { source }.into()
                } else {
                    source.into()
                }
            })?;
        state.metrics.store_commit("submit", started.elapsed());
        // A parked or denied invocation is its own answer: `submit` recorded it, and marked the
        // request's `Idempotency-Key` done, in one commit. No second commit, no read back.
        let answered = match &outcome {
            SubmitOutcome::Created(created) => Some(created.clone()),
            _ => None,
        };
        (outcome, answered)
    };
    if let SubmitOutcome::Created(inv) = &outcome {
        state
            .metrics
            .shadow_decisions(inv.shadow_decisions.as_ref());
    }
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

/// `inv` as it stands once an answer this process keeps for its effect is recorded
/// (`dispatch/pending.rs`): a resend of the key first tries to commit it. While the database
/// still refuses, the resend hears `outcome_unknown` rather than `running`: this process knows
/// the provider answered.
async fn answer_kept(state: &AppState, inv: InvocationRecord) -> Result<InvocationRecord> {
    if !state.pending.holds(&inv.effect_id) {
        return Ok(inv);
    }
    if !crate::dispatch::settle_kept::settle_now(state, &inv.effect_id).await {
        return Err(crate::effect_error::EffectError::AnswerNotRecorded {
            effect: inv.effect_id.clone(),
            source: steward_store::StoreError::Unavailable {
                message: "the answer is kept until the database takes it".into(),
                source: None,
            },
        }
        .into());
    }
    Ok(state
        .store
        .invocation(&inv.env_id, &inv.id)
        .await?
        .unwrap_or(inv))
}

/// The answer to a submission's outcome; a created invocation is read back as it now stands.
async fn settle_outcome(
    state: &AppState,
    submitted: SubmitOutcome,
    fresh: bool,
) -> Result<Invoked> {
    let created = match submitted {
        SubmitOutcome::Created(inv) => inv,
        SubmitOutcome::Existing(inv) => {
            return Ok(Invoked {
                invocation: answer_kept(state, inv).await?,
                replayed: false,
                unkeyed: false,
            })
        }
        SubmitOutcome::Replayed(inv) => {
            return Ok(Invoked {
                invocation: inv,
                replayed: true,
                unkeyed: false,
            })
        }
        SubmitOutcome::InProgress => return Err(idempotency::in_progress()),
        SubmitOutcome::IdempotencyMismatch => return Err(idempotency::reused()),
        SubmitOutcome::OperationKeyConflict {
            effect_id,
            invocation_id,
        } => {
            return Err(Error::of(
                codes::OPERATION_KEY_CONFLICT,
                "this operationKey already names an effect with a different input",
            )
            .with_details(json!({"effectId": effect_id, "invocationId": invocation_id})))
        }
        SubmitOutcome::RetryOfNotFound => {
            return Err(Error::validation(
                "retryOf",
                "names no invocation in this environment",
            ))
        }
        SubmitOutcome::RetryOfTaken { invocation_id } => {
            return Err(Error::of(
                codes::RETRY_ALREADY_EXISTS,
                "this failed invocation already has a retry with another input",
            )
            .with_details(json!({"invocationId": invocation_id})))
        }
        SubmitOutcome::BudgetRefused(refusal) => return Err(budgets::refused(&refusal)),
        SubmitOutcome::RetryOfNotFailed { state: prior } => {
            return Err(Error::of(
                codes::RETRY_OF_NOT_FAILED,
                format!(
                    "retryOf names an invocation that is {}, not settled failed",
                    prior.invocation_status().as_str()
                ),
            ))
        }
    };

    // The submission is committed: a read that fails now (a failover right after the commit)
    // must not turn the answer into "storage unavailable, nothing changed" (found by `steward
    // faults`, seed 2: a parked invocation so answered was approved and sent). The record as
    // committed answers instead; a resend with the same keys reads it as it is now.
    let current = match state.store.invocation(&created.env_id, &created.id).await {
        Ok(Some(current)) => current,
        Ok(None) => return Err(Error::not_found("invocation")),
        Err(e) => {
            tracing::warn!(error = %e, invocation = %created.id, "the invocation was recorded but could not be read again; answering it as recorded");
            created
        }
    };
    if fresh {
        state
            .metrics
            .invocation(current.state.invocation_status().as_str());
    }
    Ok(Invoked {
        invocation: current,
        replayed: false,
        unkeyed: false,
    })
}
