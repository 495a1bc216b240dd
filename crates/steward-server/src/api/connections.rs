//! `connections`: connected accounts. An account is a vault secret holding an integration's
//! credential (`integrations.rs`), usable by actions as `{{secret:NAME}}` and never read back.
//! Listing needs `secrets:read`; connecting, checking and reconnecting need `secrets:write`.
//!
//! An API key is checked with the provider before anything is stored: a key the provider
//! refuses is `CONNECTION_KEY_REJECTED`, one that could not be checked is
//! `CONNECTION_KEY_CHECK_FAILED`, and in both cases nothing is written. `check` asks again for
//! a stored key; a refusal then is an answer (`health.status` `needs_reauth`), not an error.
//! Sign-in (OAuth) sessions are not offered by this Steward (docs/DECISIONS.md).

use super::body;
use super::openapi as doc;
use super::{idempotent, views};
use crate::auth::Caller;
use crate::envelope::ok;
use crate::error::{codes, ApiError, ApiResult};
use crate::integrations::{check_key, AuthKind, Integration, KeyCheck, KeyVerdict};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;
use steward_core::{is_valid_secret_name, scopes};
use steward_store::{Actor, ConnectionHealth, ConnectionRecord, SecretRecord, StoreError};
use steward_wire::{self as wire, Text};

/// The longest API key accepted, in bytes: provider keys are well under 1 KiB.
pub(crate) const CONNECTION_API_KEY_BYTES_MAX: usize = 4096;

const HEALTHY: &str = "healthy";
const NEEDS_REAUTH: &str = "needs_reauth";

/// An account as the SDK describes it: the secret (its metadata, never its value) with its
/// `integrationId` and `health`.
fn view(c: &ConnectionRecord, secret: &SecretRecord) -> wire::Connection {
    let secret = views::secret(secret);
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

fn completed(c: &ConnectionRecord, secret: &SecretRecord) -> wire::ConnectionCompleted {
    wire::ConnectionCompleted::new(view(c, secret))
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

fn check_secret_name(name: &str, field: &str) -> ApiResult<()> {
    if is_valid_secret_name(name) {
        Ok(())
    } else {
        Err(ApiError::validation(field, "must match ^[A-Z0-9_]+$"))
    }
}

fn api_key(given: Option<wire::Credential>) -> ApiResult<Option<String>> {
    match given.map(wire::Credential::into_string) {
        None => Ok(None),
        Some(k)
            if !k.trim().is_empty()
                && k.len() <= CONNECTION_API_KEY_BYTES_MAX
                && !k.chars().any(char::is_control) =>
        {
            Ok(Some(k.trim().to_string()))
        }
        Some(_) => Err(ApiError::validation(
            "apiKey",
            format!("must be a non-empty string of at most {CONNECTION_API_KEY_BYTES_MAX} bytes without control characters"),
        )),
    }
}

/// The `api_key` integration named `id`, with its key check.
fn key_integration<'a>(
    state: &'a AppState,
    id: &str,
) -> ApiResult<(&'a Integration, &'a KeyCheck)> {
    let integration = state.integrations.get(id).ok_or_else(|| {
        ApiError::validation("integrationId", "names no integration of this server")
    })?;
    match (integration.auth_kind, &integration.key_check) {
        (AuthKind::ApiKey, Some(check)) => Ok((integration, check)),
        _ => Err(ApiError::validation(
            "integrationId",
            "is connected by signing in, which this server does not offer; only api_key integrations connect here",
        )),
    }
}

/// The key check's answer as an error when the key may not be stored.
async fn checked(
    state: &AppState,
    integration: &Integration,
    check: &KeyCheck,
    key: &str,
) -> ApiResult<()> {
    match check_key(&state.http, state.outbound, check, key).await {
        KeyVerdict::Accepted => Ok(()),
        KeyVerdict::Rejected { reason } => Err(ApiError::of(
            codes::CONNECTION_KEY_REJECTED,
            format!("not stored: {reason}"),
        )
        .with_details(json!({"integrationId": integration.id}))),
        KeyVerdict::CheckFailed { reason } => Err(ApiError::of(
            codes::CONNECTION_KEY_CHECK_FAILED,
            format!("not stored: the key could not be checked ({reason})"),
        )
        .with_details(json!({"integrationId": integration.id}))),
    }
}

/// Seals `key` into secret `name`, creating it or rotating the version `expected`.
async fn store_key(
    state: &AppState,
    caller: &Caller,
    name: &str,
    key: &str,
    integration: &Integration,
    description: Option<String>,
    expected: Option<u32>,
) -> ApiResult<SecretRecord> {
    let env = &caller.env.id;
    let (nonce, ciphertext) = state
        .vault
        .seal(env, name, key)
        .map_err(|e| ApiError::internal("vault", &e))?;
    let now = state.clock.now();
    let record = SecretRecord {
        env_id: env.clone(),
        name: name.to_string(),
        nonce,
        ciphertext,
        description,
        allowed_hosts: Some(integration.allowed_hosts.clone()),
        allowed_placements: None,
        version: 0,
        created_at: now,
        updated_at: now,
    };
    state
        .store
        .put_secret(&record, expected, &Actor::key(&caller.key.id, now))
        .await
        .map_err(|e| match e {
            StoreError::VersionConflict { .. } => ApiError::conflict(
                "concurrent_modification",
                "the secret changed while this request ran; send it again",
            ),
            other => other.into(),
        })
}

async fn record(
    state: &AppState,
    caller: &Caller,
    secret: &SecretRecord,
    integration: &Integration,
    description: Option<String>,
) -> ApiResult<ConnectionRecord> {
    let now = state.clock.now();
    let connection = ConnectionRecord {
        env_id: caller.env.id.clone(),
        secret_name: secret.name.clone(),
        integration_id: integration.id.clone(),
        auth_kind: integration.auth_kind.as_str().to_string(),
        description,
        health: ConnectionHealth {
            status: HEALTHY.into(),
            reason: None,
            checked_at: now,
        },
        secret_created_at: secret.created_at,
        created_at: now,
        updated_at: now,
    };
    Ok(state
        .store
        .record_connection(&connection, &Actor::key(&caller.key.id, now))
        .await?)
}

/// The account held by secret `name`, with its secret; 404 if there is none.
async fn account(
    state: &AppState,
    caller: &Caller,
    name: &str,
) -> ApiResult<(ConnectionRecord, SecretRecord)> {
    let missing = || ApiError::not_found("connected account");
    check_secret_name(name, "secretName").map_err(|_| missing())?;
    let connection = state
        .store
        .connection(&caller.env.id, name)
        .await?
        .ok_or_else(missing)?;
    let secret = state
        .store
        .secret(&caller.env.id, name)
        .await?
        .ok_or_else(missing)?;
    Ok((connection, secret))
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
    caller.require(scopes::SECRETS_READ)?;
    Ok(ok(state
        .integrations
        .all()
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
    caller.require(scopes::SECRETS_READ)?;
    let env = &caller.env.id;
    let connections = state.store.list_connections(env).await?;
    let secrets = state.store.list_secrets(env).await?;
    // `list_connections` lists only accounts whose secret exists; one deleted in between is left
    // out.
    let listed = connections
        .iter()
        .filter_map(|c| {
            let secret = secrets.iter().find(|s| s.name == c.secret_name)?;
            Some(view(c, secret))
        })
        .collect::<Vec<_>>();
    Ok(ok(listed))
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
    let integration_id = given
        .integration_id
        .ok_or_else(|| ApiError::validation("integrationId", "is required"))?;
    let name = given
        .secret_name
        .ok_or_else(|| ApiError::validation("secretName", "is required"))?;
    check_secret_name(&name, "secretName")?;
    let key =
        api_key(given.api_key)?.ok_or_else(|| ApiError::validation("apiKey", "is required"))?;
    let description = given.description.map(Text::into_string);
    // The key is fingerprinted by its vault tag, never stored or compared in clear.
    let mut fingerprinted = map.clone();
    fingerprinted.insert("apiKey".into(), json!(state.vault.tag(&key)));
    let request = json!({"op": "connection.key", "body": fingerprinted});
    idempotent::run(&state, &caller, &headers, request, || async {
        let (integration, check) = key_integration(&state, &integration_id)?;
        let env = &caller.env.id;
        let existing = state.store.secret(env, &name).await?;
        let connected = state.store.connection(env, &name).await?;
        let expected = match (&existing, &connected) {
            (None, _) => None,
            (Some(s), Some(c)) if c.integration_id == integration.id => Some(s.version),
            (Some(_), _) => {
                return Err(ApiError::conflict(
                    "already_exists",
                    "a secret with this name exists and is not this integration's account; choose another secretName",
                ))
            }
        };
        checked(&state, integration, check, &key).await?;
        let secret = store_key(&state, &caller, &name, &key, integration, description.clone(), expected).await?;
        let connection = record(&state, &caller, &secret, integration, description).await?;
        Ok((StatusCode::CREATED, completed(&connection, &secret)))
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
        let (connection, secret) = account(&state, &caller, &name).await?;
        let (_, key_check) = key_integration(&state, &connection.integration_id)
            .map_err(|_| ApiError::not_found("integration"))?;
        let key = state
            .vault
            .open(&caller.env.id, &name, &secret.nonce, &secret.ciphertext)
            .map_err(|e| ApiError::internal("vault", &e))?;
        let health = match check_key(&state.http, state.outbound, key_check, &key).await {
            KeyVerdict::Accepted => (HEALTHY, None),
            KeyVerdict::Rejected { reason } => (NEEDS_REAUTH, Some(reason)),
            KeyVerdict::CheckFailed { reason } => {
                return Err(ApiError::of(
                    codes::CONNECTION_KEY_CHECK_FAILED,
                    format!("the key could not be checked ({reason}); its health is unchanged"),
                )
                .with_details(json!({"integrationId": connection.integration_id})))
            }
        };
        let now = state.clock.now();
        let health = ConnectionHealth {
            status: health.0.into(),
            reason: health.1,
            checked_at: now,
        };
        let after = state
            .store
            .record_health(
                &caller.env.id,
                &name,
                &health,
                &Actor::key(&caller.key.id, now),
            )
            .await?;
        Ok((StatusCode::OK, view(&after, &secret)))
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
        (status = 200, description = "the new key was accepted by the provider and replaced the old one", body = doc::Single<doc::ConnectionCompleted>),
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
    let key = api_key(given.api_key)?;
    let mut fingerprinted = map.clone();
    if let Some(key) = &key {
        fingerprinted.insert("apiKey".into(), json!(state.vault.tag(key)));
    }
    let request = json!({"op": "connection.reconnect", "name": name, "body": fingerprinted});
    idempotent::run(&state, &caller, &headers, request, || async {
        let (connection, secret) = account(&state, &caller, &name).await?;
        let (integration, key_check) = key_integration(&state, &connection.integration_id)
            .map_err(|_| ApiError::not_found("integration"))?;
        let key = key.ok_or_else(|| {
            ApiError::validation("apiKey", "is required to reconnect an api_key integration")
        })?;
        checked(&state, integration, key_check, &key).await?;
        let description = connection.description.clone();
        let stored = store_key(
            &state,
            &caller,
            &name,
            &key,
            integration,
            description.clone(),
            Some(secret.version),
        )
        .await?;
        let after = record(&state, &caller, &stored, integration, description).await?;
        Ok((StatusCode::OK, completed(&after, &stored)))
    })
    .await
}
