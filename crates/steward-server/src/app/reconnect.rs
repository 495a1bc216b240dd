//! Reconnecting an account: making it work again the way it was connected, under the same name,
//! as the SDK's `connections.reconnect` describes. An `api_key` account takes a new key, checked
//! with the provider before it replaces the old one (`connections.rs`), and answers `completed`.
//! A signed-in (`oauth`) account takes nothing: the answer is `pending` with a new consent
//! session under the account's `secretName` (`connection_sessions.rs`), to open and `complete`
//! exactly as for a first connect; the callback then replaces the account's tokens. Until then
//! the account stays as it was (a `needs_reauth` account keeps refusing requests).
//!
//! Its own file because it calls both: `connection_sessions.rs` already imports
//! `connections.rs`, and the import-cycle check holds the other direction shut.

use super::connection_sessions::{self, StartSession, Started};
use super::connections::{self, Account};
use super::{Error, Principal, Result};
use crate::integrations::AuthKind;
use crate::state::AppState;
use steward_core::scopes;

/// What a reconnect came to.
#[derive(Debug)]
pub enum Reconnected {
    /// The new key replaced the old one.
    Completed(Account),
    /// A consent session for the person to open; the account is replaced once it completes.
    Pending(Started),
}

/// Reconnects account `name`: with `key` for an `api_key` account (required), by a new consent
/// session for an `oauth` one (`key` refused: the person signs in instead). `callback_url` is
/// this server's callback as the caller reached it, as for [`connection_sessions::create`].
pub async fn reconnect(
    state: &AppState,
    principal: &Principal,
    name: &str,
    key: Option<String>,
    callback_url: &str,
) -> Result<Reconnected> {
    principal.require(scopes::SECRETS_WRITE)?;
    let account = connections::account(state, principal, name).await?;
    if account.connection.auth_kind != AuthKind::Oauth.as_str() {
        let account = connections::reconnect_with_key(state, principal, account, key).await?;
        return Ok(Reconnected::Completed(account));
    }
    if key.is_some() {
        return Err(Error::validation(
            "apiKey",
            "is not taken by a signed-in account: send no apiKey, and open the answer's session.connectUrl to sign in again",
        ));
    }
    let input = StartSession {
        integration_id: account.connection.integration_id.clone(),
        secret_name: account.connection.secret_name.clone(),
        // The callback keeps the secret's own description.
        description: None,
    };
    let started = connection_sessions::create(state, principal, &input, callback_url).await?;
    Ok(Reconnected::Pending(started))
}
