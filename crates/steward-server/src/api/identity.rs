//! `auth/identity` and `environment`: what the calling key is and where it is bound.

use super::openapi as doc;
use crate::app;
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
    let identity = app::keys::identity(&caller);
    ok(steward_wire::Identity {
        credential_type: "api_key".to_string(),
        api_key_id: identity.key_id,
        name: identity.name,
        environment_id: identity.environment.id,
        environment: identity.environment.name,
        scopes: identity.scopes,
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
