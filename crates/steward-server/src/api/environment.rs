//! The kill switch: `environment/halt` and `environment/resume` (scope `environments:halt`),
//! and the environment's setting `unkeyedInvokes` (`PATCH /environment`, the same scope).
//!
//! While halted, invokes answer 409 `environment_halted` before anything is recorded, and the
//! store refuses to record any attempt, so nothing is sent whatever path reaches the dispatcher
//! (an approval decided meanwhile, start-up recovery, a race with the halt). Approvals can still
//! be decided; approved work stays `ready` ("parked"). Resume dispatches each parked effect once.

use super::body;
use super::idempotent;
use super::openapi as doc;
use crate::app;
use crate::auth::Caller;
use crate::error::ApiResult;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::json;
use steward_core::scopes;
use steward_store::Environment;

/// Named here by the OpenAPI drift test (`openapi_tests/drift.rs`).
#[cfg(test)]
pub use crate::app::environment::HALT_REASON_LEN_MAX;

pub(crate) fn view(env: &Environment) -> steward_wire::Environment {
    steward_wire::Environment {
        id: env.id.clone(),
        name: env.name.clone(),
        halted: env.halted,
        halt_reason: env.halt_reason.clone(),
        unkeyed_invokes: env.unkeyed_invokes.into(),
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
    app::environment::check_reason(reason.as_deref())?;
    let request = json!({"op": "environment.halt", "reason": reason});
    idempotent::run(&state, &caller, &headers, request, || async {
        let env = app::environment::halt(&state, &caller, reason.as_deref()).await?;
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
        let resumed = app::environment::resume(&state, &caller).await?;
        let answer = steward_wire::Environment {
            released: Some(resumed.released as u64),
            ..view(&resumed.environment)
        };
        Ok((StatusCode::OK, answer))
    })
    .await
}

#[utoipa::path(
    patch,
    path = "/environment",
    operation_id = "environment_update",
    tag = "environment",
    params(doc::IdempotencyHeader),
    request_body = doc::EnvironmentBody,
    responses(
        (status = 200, description = "the environment with its settings as now set", body = doc::Single<doc::Environment>),
        doc::Guarded,
        doc::Invalid,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::ENVIRONMENTS_HALT)?;
    let body: doc::EnvironmentBody = body::parse(&bytes)?;
    let setting = steward_core::UnkeyedInvokes::from(body.unkeyed_invokes);
    let request = json!({"op": "environment.update", "unkeyedInvokes": setting.as_str()});
    idempotent::run(&state, &caller, &headers, request, || async {
        let env = app::environment::set_unkeyed_invokes(&state, &caller, setting).await?;
        Ok((StatusCode::OK, view(&env)))
    })
    .await
}
