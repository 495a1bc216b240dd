//! A connected OAuth account at use: the access token a request carries, refreshed when due
//! (or after the provider answered `401`), the rotation committed before use, and the account's
//! revocation at the provider when it is deleted.
//!
//! Refreshes of one account are serialized in this process (a lock per account), and across
//! replicas by the secret's version: the token set is replaced with `put_secret` expecting the
//! version that was read, so of two replicas refreshing at once one commits and the other reads
//! the winner's tokens instead of its own. Nothing is sent with a new access token before its
//! token set (with the rotated refresh token) is durable: a crash in between leaves the old
//! refresh token stored, which the provider then refuses, and the account asks for consent
//! again (`needs_reauth`) rather than acting with a token Steward would lose.

use super::provider::{self, Client, TokenFailure};
use super::TokenSet;
use crate::dispatch::blocked::Blocked;
use crate::dispatch::secret_value::read_and_open;
use crate::integrations::{AuthKind, OauthSpec};
use crate::state::AppState;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use steward_core::EnvironmentId;
use steward_store::{Actor, ConnectionHealth, HealthCheck, SecretRecord, StoreError};

/// The health an account is marked with when its grant is refused.
pub const NEEDS_REAUTH: &str = "needs_reauth";

/// One async lock per account (environment and secret name) of this process.
static REFRESHING: LazyLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> =
    LazyLock::new(Mutex::default);

fn lock_of(env: &EnvironmentId, name: &str) -> Arc<tokio::sync::Mutex<()>> {
    let mut locks = REFRESHING.lock().unwrap_or_else(|p| p.into_inner());
    locks
        .entry(format!("{}/{name}", env.as_str()))
        .or_default()
        .clone()
}

/// The access token to send for account `name` whose secret holds `set`: `set`'s own, or a
/// refreshed one when it is due. `Err` means nothing may be sent.
pub async fn access_token(
    state: &AppState,
    env: &EnvironmentId,
    name: &str,
    set: &TokenSet,
) -> Result<String, Blocked> {
    if set.due(state.clock.now()) {
        refreshed(state, env, name, &set.access_token).await
    } else {
        Ok(set.access_token.clone())
    }
}

/// A fresh access token for account `name`, in place of `stale` (one that is due, or that the
/// provider refused): refreshed with the stored refresh token, unless the stored tokens changed
/// since `stale` was read and are not due (another request refreshed them first).
pub async fn refreshed(
    state: &AppState,
    env: &EnvironmentId,
    name: &str,
    stale: &str,
) -> Result<String, Blocked> {
    let lock = lock_of(env, name);
    let _held = lock.lock().await;
    let (record, set) = stored(state, env, name).await?;
    if set.access_token != stale && !set.due(state.clock.now()) {
        return Ok(set.access_token);
    }
    let spec = account_spec(state, env, name).await?;
    let Some(refresh_token) = set.refresh_token.clone() else {
        let reason = "the provider gave no refresh token and the access token expired";
        mark_needs_reauth(state, env, name, reason).await;
        return Err(needs_reauth(name, reason));
    };
    let client_secret = client_secret(state, env, &spec).await?;
    let client = Client {
        http: &state.http,
        outbound: state.outbound,
        spec: &spec,
        secret: &client_secret,
    };
    let mut fresh = match provider::refresh(&client, &refresh_token, state.clock.now()).await {
        Ok(fresh) => fresh,
        Err(TokenFailure::Refused { reason }) => {
            // Another replica may have rotated the refresh token a moment ago: its tokens win.
            if let Ok((_, now_stored)) = stored(state, env, name).await {
                if now_stored.refresh_token.as_deref() != Some(refresh_token.as_str()) {
                    return Ok(now_stored.access_token);
                }
            }
            mark_needs_reauth(state, env, name, &reason).await;
            return Err(needs_reauth(name, &reason));
        }
        Err(TokenFailure::Unavailable { reason }) => {
            let message = format!(
                "account {name}'s access token could not be refreshed ({reason}); nothing was sent"
            );
            return Err(Blocked::new("connection_refresh_failed", message));
        }
    };
    if fresh.refresh_token.is_none() {
        fresh.refresh_token = Some(refresh_token);
    }
    match save(state, &record, &fresh).await {
        Ok(()) => Ok(fresh.access_token),
        Err(StoreError::VersionConflict { .. }) => stored(state, env, name)
            .await
            .map(|(_, set)| set.access_token),
        Err(e) => {
            tracing::error!(error = %e, account = name, "a refreshed token set could not be stored");
            Err(Blocked::new(
                "storage_unavailable",
                "the refreshed token could not be stored; nothing was sent",
            ))
        }
    }
}

/// Revokes account `name` at its provider (RFC 7009): the refresh token (which ends the grant)
/// and the access token. `Ok(false)` when the secret holds no token set or the integration has
/// no revocation endpoint; `Err` says why the provider did not confirm.
pub async fn revoke(state: &AppState, env: &EnvironmentId, name: &str) -> Result<bool, String> {
    let Ok((_, set)) = stored(state, env, name).await else {
        return Ok(false);
    };
    let spec = account_spec(state, env, name)
        .await
        .map_err(|b| b.message)?;
    if spec.revoke_url.is_none() {
        return Ok(false);
    }
    let secret = client_secret(state, env, &spec)
        .await
        .map_err(|b| b.message)?;
    let client = Client {
        http: &state.http,
        outbound: state.outbound,
        spec: &spec,
        secret: &secret,
    };
    if let Some(refresh) = &set.refresh_token {
        provider::revoke(&client, refresh, "refresh_token").await?;
    }
    provider::revoke(&client, &set.access_token, "access_token").await?;
    Ok(true)
}

/// The secret's record and the token set it holds.
async fn stored(
    state: &AppState,
    env: &EnvironmentId,
    name: &str,
) -> Result<(SecretRecord, TokenSet), Blocked> {
    let (record, value) = read_and_open(state, env, name, None).await?;
    let set = TokenSet::from_value(&value).ok_or_else(|| {
        Blocked::new(
            "secret_unreadable",
            format!("secret {name} no longer holds the account's tokens"),
        )
    })?;
    Ok((record, set))
}

/// The OAuth spec of the integration account `name` was connected for.
async fn account_spec(
    state: &AppState,
    env: &EnvironmentId,
    name: &str,
) -> Result<OauthSpec, Blocked> {
    let connection = state
        .store
        .connection(env, name)
        .await
        .map_err(|_| {
            Blocked::new(
                "storage_unavailable",
                "the account could not be read; nothing was sent",
            )
        })?
        .ok_or_else(|| {
            Blocked::new(
                "connection_missing",
                format!("secret {name} holds tokens but is no connected account"),
            )
        })?;
    state
        .integrations
        .get(&connection.integration_id)
        .filter(|i| i.auth_kind == AuthKind::Oauth)
        .and_then(|i| i.oauth.clone())
        .ok_or_else(|| {
            Blocked::new(
                "integration_missing",
                format!(
                    "integration {} is not an oauth integration of this server",
                    connection.integration_id
                ),
            )
        })
}

/// The integration's client secret, from the environment's vault.
pub async fn client_secret(
    state: &AppState,
    env: &EnvironmentId,
    spec: &OauthSpec,
) -> Result<String, Blocked> {
    let name = &spec.client_secret_name;
    let missing = || {
        Blocked::new(
            "oauth_client_secret_missing",
            format!("the integration's client secret {name} is not in this environment's vault"),
        )
    };
    let record = state
        .store
        .secret(env, name)
        .await
        .map_err(|_| Blocked::new("storage_unavailable", "the client secret could not be read"))?
        .ok_or_else(missing)?;
    state
        .vault
        .open(env, name, &record.nonce, &record.ciphertext)
        .map_err(|_| missing())
}

/// Seals `set` into the account's secret, replacing exactly the version `record` is.
pub async fn save(
    state: &AppState,
    record: &SecretRecord,
    set: &TokenSet,
) -> Result<(), StoreError> {
    let (nonce, ciphertext) = state
        .vault
        .seal(&record.env_id, &record.name, &set.to_value())
        .map_err(|e| StoreError::Unavailable {
            message: format!("the vault could not seal the tokens: {e}"),
            source: None,
        })?;
    let replaced = SecretRecord {
        nonce,
        ciphertext,
        ..record.clone()
    };
    state
        .store
        .put_secret(
            &replaced,
            Some(record.version),
            &Actor::system(state.clock.now()),
        )
        .await
        .map(|_| ())
}

/// Records that account `name` needs the person to consent again. A failure to record it is
/// logged: the request is refused either way.
async fn mark_needs_reauth(state: &AppState, env: &EnvironmentId, name: &str, reason: &str) {
    let now = state.clock.now();
    let check = HealthCheck {
        env_id: env.clone(),
        secret_name: name.to_string(),
        health: ConnectionHealth {
            status: NEEDS_REAUTH.into(),
            reason: Some(reason.to_string()),
            checked_at: now,
        },
    };
    if let Err(e) = state.store.record_health(&check, &Actor::system(now)).await {
        tracing::warn!(error = %e, account = name, "could not record that the account needs re-authorization");
    }
}

fn needs_reauth(name: &str, reason: &str) -> Blocked {
    Blocked::new(
        "connection_needs_reauth",
        format!("account {name} needs the person to connect it again ({reason}); nothing was sent"),
    )
}
