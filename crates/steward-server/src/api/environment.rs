//! The kill switch: `environment/halt` and `environment/resume` (scope `environments:halt`).
//!
//! While halted, invokes answer 409 `environment_halted` before anything is recorded, and the
//! store refuses to record any attempt, so nothing is sent whatever path reaches the dispatcher
//! (an approval decided meanwhile, start-up recovery, a race with the halt). Approvals can still
//! be decided; approved work stays `ready` ("parked"). Resume dispatches each parked effect once.

use super::body;
use super::idempotent;
use super::openapi as doc;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::json;
use steward_core::scopes;
use steward_store::{Actor, Environment};

/// The longest halt reason kept, in bytes.
pub const HALT_REASON_LEN_MAX: usize = 1_000;

pub(crate) fn view(env: &Environment) -> steward_wire::Environment {
    steward_wire::Environment {
        id: env.id.clone(),
        name: env.name.clone(),
        halted: env.halted,
        halt_reason: env.halt_reason.clone(),
        released: None,
    }
}

#[utoipa::path(
    post,
    path = "/environment/halt",
    operation_id = "environment_halt",
    tag = "environment",
    params(doc::IdempotencyHeader),
    request_body = doc::HaltBody,
    responses(
        (status = 200, description = "the environment, now halted", body = doc::Single<doc::Environment>),
        doc::Guarded,
        doc::Invalid,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn halt(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::ENVIRONMENTS_HALT)?;
    let body: doc::HaltBody = body::parse(&bytes)?;
    let reason = body.reason.map(steward_wire::Text::into_string);
    if reason
        .as_ref()
        .is_some_and(|r| r.len() > HALT_REASON_LEN_MAX)
    {
        return Err(ApiError::validation(
            "reason",
            format!("must be at most {HALT_REASON_LEN_MAX} bytes"),
        ));
    }
    let request = json!({"op": "environment.halt", "reason": reason});
    idempotent::run(&state, &caller, &headers, request, || async {
        let actor = Actor::key(&caller.key.id, state.clock.now());
        let env = state
            .store
            .set_halted(&caller.env.id, true, reason.as_deref(), &actor)
            .await?;
        tracing::warn!(environment = %env.id, "environment halted");
        Ok((StatusCode::OK, view(&env)))
    })
    .await
}

#[utoipa::path(
    post,
    path = "/environment/resume",
    operation_id = "environment_resume",
    tag = "environment",
    params(doc::IdempotencyHeader),
    request_body = doc::ResumeBody,
    responses(
        (status = 200, description = "the environment, resumed, with `released`: how many parked effects were dispatched", body = doc::Single<doc::Environment>),
        doc::Guarded,
        doc::Invalid,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn resume(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::ENVIRONMENTS_HALT)?;
    let doc::ResumeBody {} = body::parse(&bytes)?;
    let request = json!({"op": "environment.resume"});
    idempotent::run(&state, &caller, &headers, request, || async {
        let actor = Actor::key(&caller.key.id, state.clock.now());
        let env = state
            .store
            .set_halted(&caller.env.id, false, None, &actor)
            .await?;
        let released = crate::dispatch::park::release(&state, &env.id).await?;
        tracing::info!(environment = %env.id, released, "environment resumed");
        let answer = steward_wire::Environment {
            released: Some(released as u64),
            ..view(&env)
        };
        Ok((StatusCode::OK, answer))
    })
    .await
}
