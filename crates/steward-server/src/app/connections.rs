//! Connected accounts: a vault secret holding an integration's credential
//! (`integrations.rs`), usable by actions as `{{secret:NAME}}` and never read back. Listing
//! needs `secrets:read`; connecting, checking and reconnecting need `secrets:write`.
//! `api/connections.rs` is the HTTP door. Signed-in (OAuth) accounts are connected through a
//! consent session (`connection_sessions.rs`); their secret holds a token set (`oauth/`).
//! `reconnect.rs` makes either kind work again the way it was connected.
//!
//! An API key is checked with the provider before anything is stored: a key the provider
//! refuses is `CONNECTION_KEY_REJECTED`, one that could not be checked is
//! `CONNECTION_KEY_CHECK_FAILED`, and in both cases nothing is written. [`check`] asks again for
//! a stored key; a refusal then is an answer (health `needs_reauth`), not an error.

use super::{Error, Principal, Result};
use crate::error::codes;
use crate::integrations::{check_key, AuthKind, Integration, KeyCheck, KeyVerdict};
use crate::state::AppState;
use serde_json::json;
use steward_core::{is_valid_secret_name, scopes, EnvironmentId};
use steward_store::{
    Actor, ConnectionHealth, ConnectionRecord, HealthCheck, SecretRecord, StoreError,
};
use steward_wire::{self as wire, Text};

/// The longest API key accepted, in bytes: provider keys are well under 1 KiB.
pub const CONNECTION_API_KEY_BYTES_MAX: usize = 4096;

const HEALTHY: &str = "healthy";
const NEEDS_REAUTH: &str = "needs_reauth";

/// A connected account: its connection record and the secret holding its key (whose value is
/// never read back).
#[derive(Debug)]
pub struct Account {
    pub connection: ConnectionRecord,
    pub secret: SecretRecord,
}

/// A connect with an API key, checked: every field present and well formed.
#[derive(Debug)]
pub struct ConnectKey {
    pub integration_id: String,
    pub secret_name: String,
    /// The key, trimmed. Never echoed in an error or a log.
    pub api_key: String,
    pub description: Option<String>,
}

impl ConnectKey {
    /// The body's fields, each required one named when it is missing.
    pub fn from_body(given: wire::ConnectKeyBody) -> Result<ConnectKey> {
        let (integration_id, secret_name) =
            account_fields(given.integration_id, given.secret_name)?;
        let api_key =
            api_key(given.api_key)?.ok_or_else(|| Error::validation("apiKey", "is required"))?;
        Ok(ConnectKey {
            integration_id,
            secret_name,
            api_key,
            description: given.description.map(Text::into_string),
        })
    }
}

/// The integrations an account can be connected for.
pub fn integrations<'a>(state: &'a AppState, principal: &Principal) -> Result<&'a [Integration]> {
    principal.require(scopes::SECRETS_READ)?;
    Ok(state.integrations.all())
}

/// The connected accounts of the principal's environment.
pub async fn list(state: &AppState, principal: &Principal) -> Result<Vec<Account>> {
    principal.require(scopes::SECRETS_READ)?;
    let env = &principal.env.id;
    let connections = state.store.list_connections(env).await?;
    let secrets = state.store.list_secrets(env).await?;
    // `list_connections` lists only accounts whose secret exists; one deleted in between is left
    // out.
    Ok(connections
        .into_iter()
        .filter_map(|connection| {
            let secret = secrets
                .iter()
                .find(|s| s.name == connection.secret_name)?
                .clone();
            Some(Account { connection, secret })
        })
        .collect())
}

/// Connects an account: the key is checked with the provider, then sealed into the secret
/// (created, or rotated when it already holds this integration's account).
pub async fn connect_with_api_key(
    state: &AppState,
    principal: &Principal,
    input: &ConnectKey,
) -> Result<Account> {
    principal.require(scopes::SECRETS_WRITE)?;
    let (integration, check) = key_integration(state, &input.integration_id)?;
    let env = &principal.env.id;
    let name = &input.secret_name;
    let expected = match slot(state, env, name, integration).await? {
        Slot::Taken => return Err(taken()),
        slot => slot.expected(),
    };
    checked(state, integration, check, &input.api_key).await?;
    let secret = store_key(
        state,
        principal,
        name,
        &input.api_key,
        integration,
        input.description.clone(),
        expected,
    )
    .await?;
    let connection = record(
        state,
        principal,
        &secret,
        integration,
        input.description.clone(),
    )
    .await?;
    Ok(Account { connection, secret })
}

/// Asks the provider again about the key of account `name` and records its answer as the
/// account's health.
pub async fn check(state: &AppState, principal: &Principal, name: &str) -> Result<Account> {
    principal.require(scopes::SECRETS_WRITE)?;
    let Account { connection, secret } = account(state, principal, name).await?;
    if connection.auth_kind == AuthKind::Oauth.as_str() {
        return check_oauth(state, principal, name, &secret).await;
    }
    let (_, key_check) = key_integration(state, &connection.integration_id)
        .map_err(|_| Error::not_found("integration"))?;
    let key = state
        .vault
        .open(&principal.env.id, name, &secret.nonce, &secret.ciphertext)
        .map_err(|e| Error::internal("vault", &e))?;
    let health = match check_key(&state.http, state.outbound, key_check, &key).await {
        KeyVerdict::Accepted => (HEALTHY, None),
        KeyVerdict::Rejected { reason } => (NEEDS_REAUTH, Some(reason)),
        KeyVerdict::CheckFailed { reason } => {
            return Err(Error::of(
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
            &HealthCheck {
                env_id: principal.env.id.clone(),
                secret_name: name.to_string(),
                health,
            },
            &Actor::key(&principal.key.id, now),
        )
        .await?;
    Ok(Account {
        connection: after,
        secret,
    })
}

/// Checks a signed-in account by refreshing its tokens: a grant the provider refuses leaves it
/// `needs_reauth` (recorded by the refresh itself), one it honours leaves it `healthy`.
async fn check_oauth(
    state: &AppState,
    principal: &Principal,
    name: &str,
    secret: &SecretRecord,
) -> Result<Account> {
    let env = &principal.env.id;
    let value = state
        .vault
        .open(env, name, &secret.nonce, &secret.ciphertext)
        .map_err(|e| Error::internal("vault", &e))?;
    let set = crate::oauth::TokenSet::from_value(&value).ok_or_else(|| {
        Error::conflict(
            "concurrent_modification",
            "the account's secret no longer holds its tokens; connect it again",
        )
    })?;
    match crate::oauth::account::refreshed(state, env, name, &set.access_token).await {
        Ok(_) => {
            let now = state.clock.now();
            let health = ConnectionHealth {
                status: HEALTHY.into(),
                reason: None,
                checked_at: now,
            };
            let check = HealthCheck {
                env_id: env.clone(),
                secret_name: name.to_string(),
                health,
            };
            state
                .store
                .record_health(&check, &Actor::key(&principal.key.id, now))
                .await?;
        }
        Err(blocked) if blocked.code == "connection_needs_reauth" => {}
        Err(blocked) => {
            return Err(Error::of(
                codes::CONNECTION_KEY_CHECK_FAILED,
                format!(
                    "the account could not be checked ({}); its health is unchanged",
                    blocked.message
                ),
            ))
        }
    }
    account(state, principal, name).await
}

/// Replaces the key of the `api_key` account `account` with `key` (checked by [`api_key`];
/// required), once the provider accepts it. `reconnect.rs` decides which accounts come here.
pub(crate) async fn reconnect_with_key(
    state: &AppState,
    principal: &Principal,
    account: Account,
    key: Option<String>,
) -> Result<Account> {
    principal.require(scopes::SECRETS_WRITE)?;
    let Account { connection, secret } = account;
    let name = connection.secret_name.as_str();
    let (integration, key_check) = key_integration(state, &connection.integration_id)
        .map_err(|_| Error::not_found("integration"))?;
    let key = key.ok_or_else(|| {
        Error::validation("apiKey", "is required to reconnect an api_key integration")
    })?;
    checked(state, integration, key_check, &key).await?;
    let description = connection.description.clone();
    let stored = store_key(
        state,
        principal,
        name,
        &key,
        integration,
        description.clone(),
        Some(secret.version),
    )
    .await?;
    let after = record(state, principal, &stored, integration, description).await?;
    Ok(Account {
        connection: after,
        secret: stored,
    })
}

/// The two fields every connect names, `integrationId` and `secretName`: each required (the
/// missing one named), the name a secret name.
pub(crate) fn account_fields(
    integration_id: Option<String>,
    secret_name: Option<String>,
) -> Result<(String, String)> {
    let integration_id =
        integration_id.ok_or_else(|| Error::validation("integrationId", "is required"))?;
    let secret_name = secret_name.ok_or_else(|| Error::validation("secretName", "is required"))?;
    check_secret_name(&secret_name, "secretName")?;
    Ok((integration_id, secret_name))
}

/// What secret `name` holds, for a connect of `integration` under that name.
#[derive(Debug)]
pub(crate) enum Slot {
    /// Nothing: the account's secret is created.
    Free,
    /// This integration's account, whose secret (as read) the connect rotates.
    Account(SecretRecord),
    /// Something else (a plain secret, another integration's account): not to be replaced.
    Taken,
}

impl Slot {
    /// The secret version a connect expects to replace (`None`: it creates the secret).
    pub(crate) fn expected(&self) -> Option<u32> {
        match self {
            Slot::Account(secret) => Some(secret.version),
            Slot::Free | Slot::Taken => None,
        }
    }
}

/// Reads what secret `name` of `env` holds, for a connect of `integration`.
pub(crate) async fn slot(
    state: &AppState,
    env: &EnvironmentId,
    name: &str,
    integration: &Integration,
) -> std::result::Result<Slot, StoreError> {
    let existing = state.store.secret(env, name).await?;
    let connected = state.store.connection(env, name).await?;
    Ok(match (existing, connected) {
        (None, _) => Slot::Free,
        (Some(secret), Some(c)) if c.integration_id == integration.id => Slot::Account(secret),
        (Some(_), _) => Slot::Taken,
    })
}

/// The refusal of a connect whose name is [`Slot::Taken`].
pub(crate) fn taken() -> Error {
    Error::conflict(
        "already_exists",
        "a secret with this name exists and is not this integration's account; choose another secretName",
    )
}

/// The integration named `id` in this server's catalog, whatever its kind.
pub(crate) fn integration<'a>(state: &'a AppState, id: &str) -> Result<&'a Integration> {
    state
        .integrations
        .get(id)
        .ok_or_else(|| Error::validation("integrationId", "names no integration of this server"))
}

fn check_secret_name(name: &str, field: &str) -> Result<()> {
    if is_valid_secret_name(name) {
        Ok(())
    } else {
        Err(Error::validation(field, "must match ^[A-Z0-9_]+$"))
    }
}

/// A key as given, trimmed, if it is one [`CONNECTION_API_KEY_BYTES_MAX`] allows; the error
/// names `apiKey` and never quotes it.
pub fn api_key(given: Option<wire::Credential>) -> Result<Option<String>> {
    match given.map(wire::Credential::into_string) {
        None => Ok(None),
        Some(k)
            if !k.trim().is_empty()
                && k.len() <= CONNECTION_API_KEY_BYTES_MAX
                && !k.chars().any(char::is_control) =>
        {
            Ok(Some(k.trim().to_string()))
        }
        Some(_) => Err(Error::validation(
            "apiKey",
            format!("must be a non-empty string of at most {CONNECTION_API_KEY_BYTES_MAX} bytes without control characters"),
        )),
    }
}

/// The `api_key` integration named `id`, with its key check.
fn key_integration<'a>(state: &'a AppState, id: &str) -> Result<(&'a Integration, &'a KeyCheck)> {
    let integration = integration(state, id)?;
    match (integration.auth_kind, &integration.key_check) {
        (AuthKind::ApiKey, Some(check)) => Ok((integration, check)),
        _ => Err(Error::validation(
            "integrationId",
            "is connected by signing in: start a consent session (POST /connections/sessions)",
        )),
    }
}

/// The key check's answer as an error when the key may not be stored.
async fn checked(
    state: &AppState,
    integration: &Integration,
    check: &KeyCheck,
    key: &str,
) -> Result<()> {
    match check_key(&state.http, state.outbound, check, key).await {
        KeyVerdict::Accepted => Ok(()),
        KeyVerdict::Rejected { reason } => Err(Error::of(
            codes::CONNECTION_KEY_REJECTED,
            format!("not stored: {reason}"),
        )
        .with_details(json!({"integrationId": integration.id}))),
        KeyVerdict::CheckFailed { reason } => Err(Error::of(
            codes::CONNECTION_KEY_CHECK_FAILED,
            format!("not stored: the key could not be checked ({reason})"),
        )
        .with_details(json!({"integrationId": integration.id}))),
    }
}

/// Seals `key` into secret `name`, creating it or rotating the version `expected`.
async fn store_key(
    state: &AppState,
    principal: &Principal,
    name: &str,
    key: &str,
    integration: &Integration,
    description: Option<String>,
    expected: Option<u32>,
) -> Result<SecretRecord> {
    let actor = Actor::key(&principal.key.id, state.clock.now());
    seal_account(
        state,
        &principal.env.id,
        name,
        key,
        integration,
        description,
        expected,
        &actor,
    )
    .await
    .map_err(|e| match e {
        StoreError::VersionConflict { .. } => Error::conflict(
            "concurrent_modification",
            "the secret changed while this request ran; send it again",
        ),
        other => other.into(),
    })
}

/// Seals `value` (an API key, or an OAuth account's token set) into secret `name` of `env`,
/// allowed to the integration's hosts: created, or rotating the version `expected`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn seal_account(
    state: &AppState,
    env: &EnvironmentId,
    name: &str,
    value: &str,
    integration: &Integration,
    description: Option<String>,
    expected: Option<u32>,
    actor: &Actor,
) -> std::result::Result<SecretRecord, StoreError> {
    let (nonce, ciphertext) =
        state
            .vault
            .seal(env, name, value)
            .map_err(|e| StoreError::Unavailable {
                message: format!("the vault could not seal the credential: {e}"),
                source: None,
            })?;
    let record = SecretRecord {
        env_id: env.clone(),
        name: name.to_string(),
        nonce,
        ciphertext,
        description,
        allowed_hosts: Some(integration.allowed_hosts.clone()),
        allowed_placements: None,
        version: 0,
        created_at: actor.now,
        updated_at: actor.now,
    };
    state.store.put_secret(&record, expected, actor).await
}

async fn record(
    state: &AppState,
    principal: &Principal,
    secret: &SecretRecord,
    integration: &Integration,
    description: Option<String>,
) -> Result<ConnectionRecord> {
    let actor = Actor::key(&principal.key.id, state.clock.now());
    Ok(record_account(
        state,
        &principal.env.id,
        secret,
        integration,
        description,
        &actor,
    )
    .await?)
}

/// Records the account held by `secret`, healthy.
pub(crate) async fn record_account(
    state: &AppState,
    env: &EnvironmentId,
    secret: &SecretRecord,
    integration: &Integration,
    description: Option<String>,
    actor: &Actor,
) -> std::result::Result<ConnectionRecord, StoreError> {
    let connection = ConnectionRecord {
        env_id: env.clone(),
        secret_name: secret.name.clone(),
        integration_id: integration.id.clone(),
        auth_kind: integration.auth_kind.as_str().to_string(),
        description,
        health: ConnectionHealth {
            status: HEALTHY.into(),
            reason: None,
            checked_at: actor.now,
        },
        secret_created_at: secret.created_at,
        created_at: actor.now,
        updated_at: actor.now,
    };
    state.store.record_connection(&connection, actor).await
}

/// The account held by secret `name`, with its secret; 404 if there is none.
pub(crate) async fn account(
    state: &AppState,
    principal: &Principal,
    name: &str,
) -> Result<Account> {
    let missing = || Error::not_found("connected account");
    check_secret_name(name, "secretName").map_err(|_| missing())?;
    let connection = state
        .store
        .connection(&principal.env.id, name)
        .await?
        .ok_or_else(missing)?;
    let secret = state
        .store
        .secret(&principal.env.id, name)
        .await?
        .ok_or_else(missing)?;
    Ok(Account { connection, secret })
}
