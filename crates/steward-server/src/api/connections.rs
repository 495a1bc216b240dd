//! `connections`: connected accounts, the HTTP door over `app/connections.rs`. An account is a
//! vault secret holding an integration's credential (`integrations.rs`), usable by actions as
//! `{{secret:NAME}}` and never read back.
//! Listing needs `secrets:read`; connecting, checking and reconnecting need `secrets:write`.
//!
//! An API key is checked with the provider before anything is stored: a key the provider
//! refuses is `CONNECTION_KEY_REJECTED`, one that could not be checked is
//! `CONNECTION_KEY_CHECK_FAILED`, and in both cases nothing is written. `check` asks again for
//! a stored key; a refusal then is an answer (`health.status` `needs_reauth`), not an error.
//! Sign-in (OAuth) accounts are connected through a consent session (`app/connection_sessions.rs`):
//! `POST /connections/sessions` answers the `connectUrl`, the provider sends the person back to
//! `GET /connections/callback` (no key: the session's single-use `state` is the proof), and
//! `POST /connections/sessions/{id}/complete` reports `pending` or `completed`. `reconnect` of a
//! signed-in account answers `pending` with a new session under the same name
//! (`app/reconnect.rs`).

use super::body;
use super::openapi as doc;
use super::query::Query;
use super::{idempotent, views};
use crate::app;
use crate::app::connection_sessions::{self as sessions, CallbackQuery, Completion, StartSession};
use crate::app::connections::{Account, ConnectKey};
use crate::app::reconnect::{self, Reconnected};
use crate::auth::Caller;
use crate::envelope::ok;
use crate::error::ApiResult;
use crate::integrations::Integration;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;
use steward_core::scopes;
use steward_wire as wire;

/// An account as the SDK describes it: the secret (its metadata, never its value) with its
/// `integrationId` and `health`.
fn view(account: &Account) -> wire::Connection {
    let c = &account.connection;
    let secret = views::secret(&account.secret);
    wire::Connection {
        name: secret.name,
        description: secret.description,
        allowed_hosts: secret.allowed_hosts,
        allowed_placements: secret.allowed_placements,
        version: secret.version,
        created_at: secret.created_at,
        updated_at: secret.updated_at,
        integration_id: c.integration_id.clone(),
        auth_kind: c.auth_kind.clone(),
        health: wire::ConnectionHealth {
            status: c.health.status.clone(),
            reason: c.health.reason.clone(),
            checked_at: c.health.checked_at.to_rfc3339(),
        },
        connected_at: c.created_at.to_rfc3339(),
    }
}

fn completed(account: &Account) -> wire::ConnectionCompleted {
    wire::ConnectionCompleted::new(view(account))
}

/// The catalog entry as `connections.integrations` lists it.
fn integration_view(i: &Integration) -> wire::Integration {
    wire::Integration {
        id: i.id.clone(),
        name: i.name.clone(),
        auth: wire::IntegrationAuth {
            kind: i.auth_kind.as_str().to_string(),
        },
        allowed_hosts: i.allowed_hosts.clone(),
    }
}

/// A connected account, by the name of the secret that holds its credential.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SecretNamePath {
    /// The secret's name (`^[A-Z0-9_]+$`); anything else is 404.
    #[param(rename = "secretName")]
    #[serde(rename = "secretName")]
    secret_name: String,
}

#[utoipa::path(
    get,
    path = "/connections/integrations",
    operation_id = "connections_integrations",
    tag = "connections",
    responses(
        (status = 200, description = "the integrations an account can be connected for", body = doc::List<doc::Integration>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn integrations(State(state): State<AppState>, caller: Caller) -> ApiResult<Response> {
    let integrations = app::connections::integrations(&state, &caller)?;
    Ok(ok(integrations
        .iter()
        .map(integration_view)
        .collect::<Vec<_>>()))
}

#[utoipa::path(
    get,
    path = "/connections",
    operation_id = "connections_list",
    tag = "connections",
    responses(
        (status = 200, description = "the connected accounts of the key's environment", body = doc::List<doc::Connection>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn list(State(state): State<AppState>, caller: Caller) -> ApiResult<Response> {
    let accounts = app::connections::list(&state, &caller).await?;
    Ok(ok(accounts.iter().map(view).collect::<Vec<_>>()))
}

#[utoipa::path(
    post,
    path = "/connections/keys",
    operation_id = "connections_connect_with_api_key",
    tag = "connections",
    params(doc::IdempotencyHeader),
    request_body = doc::ConnectKeyBody,
    responses(
        (status = 201, description = "the key was accepted by the provider and stored", body = doc::Single<doc::ConnectionCompleted>),
        (status = 422, description = "the provider refused the key; nothing was stored (`CONNECTION_KEY_REJECTED`), or the `Idempotency-Key` was used for a different request", body = doc::ErrorEnvelope),
        (status = 502, description = "the key could not be checked; nothing was stored (`CONNECTION_KEY_CHECK_FAILED`)", body = doc::ErrorEnvelope),
        doc::Guarded,
        doc::Invalid,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn connect_with_api_key(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::SECRETS_WRITE)?;
    let map = body::object(&bytes)?;
    let given: wire::ConnectKeyBody = body::typed(&map)?;
    let input = ConnectKey::from_body(given)?;
    // The key is fingerprinted by its vault tag, never stored or compared in clear.
    let mut fingerprinted = map.clone();
    fingerprinted.insert("apiKey".into(), json!(state.vault.tag(&input.api_key)));
    let request = json!({"op": "connection.key", "body": fingerprinted});
    idempotent::run(&state, &caller, &headers, request, || async {
        let account = app::connections::connect_with_api_key(&state, &caller, &input).await?;
        Ok((StatusCode::CREATED, completed(&account)))
    })
    .await
}

#[utoipa::path(
    post,
    path = "/connections/{secretName}/check",
    operation_id = "connections_check",
    tag = "connections",
    params(SecretNamePath, doc::IdempotencyHeader),
    request_body = doc::CheckBody,
    responses(
        (status = 200, description = "the account with the provider's answer in `health` (`needs_reauth` when the key is refused)", body = doc::Single<doc::Connection>),
        (status = 502, description = "the key could not be checked; health is unchanged (`CONNECTION_KEY_CHECK_FAILED`)", body = doc::ErrorEnvelope),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::TooLarge,
    )
)]
pub async fn check(
    State(state): State<AppState>,
    caller: Caller,
    Path(SecretNamePath { secret_name: name }): Path<SecretNamePath>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::SECRETS_WRITE)?;
    let wire::CheckBody {} = body::parse(&bytes)?;
    let request = json!({"op": "connection.check", "name": name});
    idempotent::run(&state, &caller, &headers, request, || async {
        let account = app::connections::check(&state, &caller, &name).await?;
        Ok((StatusCode::OK, view(&account)))
    })
    .await
}

#[utoipa::path(
    post,
    path = "/connections/{secretName}/reconnect",
    operation_id = "connections_reconnect",
    tag = "connections",
    params(SecretNamePath, doc::IdempotencyHeader),
    request_body = doc::ReconnectBody,
    responses(
        (status = 200, description = "an `api_key` account: the new key was accepted by the provider and replaced the old one (`completed`); an `oauth` account: a new consent session under the same name, to open and `complete` (`pending`)", body = doc::Single<doc::Reconnected>),
        (status = 422, description = "the provider refused the new key; nothing changed (`CONNECTION_KEY_REJECTED`), or the `Idempotency-Key` was used for a different request", body = doc::ErrorEnvelope),
        (status = 502, description = "the new key could not be checked; nothing changed (`CONNECTION_KEY_CHECK_FAILED`)", body = doc::ErrorEnvelope),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::TooLarge,
    )
)]
pub async fn reconnect(
    State(state): State<AppState>,
    caller: Caller,
    Path(SecretNamePath { secret_name: name }): Path<SecretNamePath>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::SECRETS_WRITE)?;
    let map = body::object(&bytes)?;
    let given: wire::ReconnectBody = body::typed(&map)?;
    let key = app::connections::api_key(given.api_key)?;
    let mut fingerprinted = map.clone();
    if let Some(key) = &key {
        fingerprinted.insert("apiKey".into(), json!(state.vault.tag(key)));
    }
    let request = json!({"op": "connection.reconnect", "name": name, "body": fingerprinted});
    let callback = callback_url(&headers);
    idempotent::run(&state, &caller, &headers, request, || async {
        let answer = match reconnect::reconnect(&state, &caller, &name, key, &callback).await? {
            Reconnected::Completed(account) => wire::Reconnected::Completed(completed(&account)),
            Reconnected::Pending(started) => {
                wire::Reconnected::Pending(wire::ConnectionPending::new(session_view(
                    &started.session,
                    "pending",
                    Some(started.connect_url),
                    None,
                )))
            }
        };
        Ok((StatusCode::OK, answer))
    })
    .await
}

/// A session as the SDK reads it; `connect_url` only when it was just created.
fn session_view(
    session: &steward_store::ConnectionSession,
    status: &str,
    connect_url: Option<String>,
    account: Option<&Account>,
) -> wire::ConnectionSession {
    wire::ConnectionSession {
        id: session.id.clone(),
        status: status.to_string(),
        integration_id: session.integration_id.clone(),
        secret_name: session.secret_name.clone(),
        connect_url,
        expires_at: session.expires_at.to_rfc3339(),
        reason: session.reason.clone(),
        connection: account.map(view),
    }
}

/// This server's callback URL as the request reached it: `http://` and the `Host` header (a
/// catalog's `oauth.redirectUri` replaces it, for a server behind a proxy or on https).
fn callback_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or("127.0.0.1");
    format!("http://{host}{}", sessions::CALLBACK_PATH)
}

#[utoipa::path(
    post,
    path = "/connections/sessions",
    operation_id = "connections_create_session",
    tag = "connections",
    params(doc::IdempotencyHeader),
    request_body = doc::SessionBody,
    responses(
        (status = 201, description = "a pending consent session: open `connectUrl` (valid 15 minutes) in the person's browser, then call `complete`", body = doc::Single<doc::ConnectionSession>),
        doc::Guarded,
        doc::Invalid,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn create_session(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::SECRETS_WRITE)?;
    let map = body::object(&bytes)?;
    let given: wire::SessionBody = body::typed(&map)?;
    let input = StartSession::from_body(given)?;
    let callback = callback_url(&headers);
    let request = json!({"op": "connection.session", "body": map});
    idempotent::run(&state, &caller, &headers, request, || async {
        let started = sessions::create(&state, &caller, &input, &callback).await?;
        Ok((
            StatusCode::CREATED,
            session_view(&started.session, "pending", Some(started.connect_url), None),
        ))
    })
    .await
}

#[utoipa::path(
    post,
    path = "/connections/sessions/{id}/complete",
    operation_id = "connections_complete",
    tag = "connections",
    params(doc::IdPath),
    request_body = doc::CompleteBody,
    responses(
        (status = 200, description = "the session: `pending` until the person consented and the code was exchanged, then `completed` with the account", body = doc::Single<doc::ConnectionSession>),
        (status = 422, description = "the session failed (`CONNECTION_SESSION_FAILED`) or expired (`CONNECTION_SESSION_EXPIRED`); nothing was stored", body = doc::ErrorEnvelope),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::TooLarge,
    )
)]
pub async fn complete(
    State(state): State<AppState>,
    caller: Caller,
    Path(doc::IdPath { id }): Path<doc::IdPath>,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::SECRETS_WRITE)?;
    // Not recorded under an `Idempotency-Key`: it only reads, and a recorded `pending` would
    // hide the completion from a caller that polls with one key.
    let wire::CompleteBody { reference: _ } = body::parse(&bytes)?;
    let view = match sessions::complete(&state, &caller, &id).await? {
        Completion::Pending(session) => session_view(&session, "pending", None, None),
        Completion::Completed(session, account) => {
            session_view(&session, "completed", None, Some(&account))
        }
    };
    Ok(ok(view))
}

/// What the provider's redirect carries (RFC 6749 §4.1.2, RFC 9207's `iss`).
#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CallbackParams {
    /// The authorization code.
    code: Option<String>,
    /// The session's single-use `state`.
    state: Option<String>,
    /// Set instead of `code` when consent was not given (`access_denied`, ...).
    error: Option<String>,
    /// Accepted so that a provider's other parameters are not refused; not used (a provider's
    /// free text is never repeated).
    #[allow(dead_code)]
    error_description: Option<String>,
    #[allow(dead_code)]
    error_uri: Option<String>,
    #[allow(dead_code)]
    iss: Option<String>,
    #[allow(dead_code)]
    scope: Option<String>,
    #[allow(dead_code)]
    session_state: Option<String>,
}

#[utoipa::path(
    get,
    path = "/connections/callback",
    operation_id = "connections_callback",
    tag = "connections",
    security(()),
    params(CallbackParams),
    responses(
        (status = 200, description = "the account is connected; the person can close the page", body = doc::Single<doc::CallbackDone>),
        (status = 400, description = "the `state` names no session waiting for it: unknown, already used, or expired (`CONNECTION_SESSION_INVALID`)", body = doc::ErrorEnvelope),
        (status = 422, description = "consent was refused or the code could not be exchanged (`CONNECTION_SESSION_FAILED`); nothing was stored", body = doc::ErrorEnvelope),
    )
)]
pub async fn callback(
    State(state): State<AppState>,
    Query(q): Query<CallbackParams>,
) -> ApiResult<Response> {
    let query = CallbackQuery {
        state: q.state,
        code: q.code,
        error: q.error,
    };
    let session = sessions::callback(&state, &query).await?;
    Ok(ok(wire::CallbackDone {
        status: "completed".into(),
        session_id: session.id.clone(),
        secret_name: session.secret_name.clone(),
        message: "The account is connected. You can close this page.".into(),
    }))
}
