//! `auth/identity` and `environment`: what the calling key is and where it is bound.

use crate::auth::Caller;
use crate::envelope::ok;
use axum::response::Response;
use serde_json::json;

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

pub async fn environment(caller: Caller) -> Response {
    ok(json!({
        "id": caller.env.id,
        "name": caller.env.name,
        "halted": caller.env.halted,
        "haltReason": caller.env.halt_reason,
    }))
}
