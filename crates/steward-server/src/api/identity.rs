//! `auth/identity` and `environment`: what the calling key is and where it is bound.

use super::openapi as doc;
use crate::auth::Caller;
use crate::envelope::ok;
use axum::response::Response;

#[utoipa::path(
    get,
    path = "/auth/identity",
    operation_id = "identity_identity",
    tag = "identity",
    responses(
        (status = 200, description = "the calling key: its id, name, environment and scopes", body = doc::Single<doc::Identity>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn identity(caller: Caller) -> Response {
    ok(steward_wire::Identity {
        credential_type: "api_key".to_string(),
        api_key_id: caller.key.id.clone(),
        name: caller.key.name.clone(),
        environment_id: caller.env.id.clone(),
        environment: caller.env.name.clone(),
        scopes: caller.key.scopes.clone(),
        expires_at: None,
    })
}

#[utoipa::path(
    get,
    path = "/environment",
    operation_id = "identity_environment",
    tag = "identity",
    responses(
        (status = 200, description = "the key's environment and whether it is halted", body = doc::Single<doc::Environment>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn environment(caller: Caller) -> Response {
    ok(super::environment::view(&caller.env))
}
