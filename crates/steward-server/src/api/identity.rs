//! `auth/identity` and `environment`: what the calling key is and where it is bound.

use super::openapi as doc;
use crate::auth::Caller;
use crate::envelope::ok;
use axum::response::Response;
use serde_json::json;

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
    ok(json!({
        "credentialType": "api_key",
        "apiKeyId": caller.key.id,
        "name": caller.key.name,
        "environmentId": caller.env.id,
        "environment": caller.env.name,
        "scopes": caller.key.scopes,
        "expiresAt": null,
    }))
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
    ok(json!({
        "id": caller.env.id,
        "name": caller.env.name,
        "halted": caller.env.halted,
        "haltReason": caller.env.halt_reason,
    }))
}
