//! Before an MCP call runs: whether the signed-in (OAuth) accounts its action acts through can
//! be used now. An account that cannot (its grant refused: `needs_reauth`; or its secret not
//! there) would make the invoke record the call `failed` (step 2 of the write path), and then
//! the operation key would answer that failure for ever, even after the person signs in again.
//! So the MCP door asks first and, for an unusable account, records nothing: it answers with a
//! URL elicitation to a new consent session's `connectUrl` (`mcp/elicit.rs`), and the call made
//! again with the same operation key after consent runs once.
//!
//! Which accounts: the secrets the action names (`secrets_named_by`) that are `oauth`
//! connections, or that do not exist while exactly one `oauth` integration of the catalog takes
//! the action's fixed destination (its `allowedHosts`), the account that would be connected
//! for it. A plain secret, an `api_key` account and a missing secret no integration claims are
//! left to the invoke, as before.
//!
//! A healthy account whose access token is due is refreshed here ([`usable`] calls
//! `oauth::account::access_token`), so a refresh the provider refuses marks it `needs_reauth`
//! before anything is recorded; the invoke then finds the fresh token (no second refresh).

use super::warnings::destination;
use super::{Principal, Result};
use crate::integrations::{AuthKind, Integration};
use crate::oauth::account::NEEDS_REAUTH;
use crate::state::AppState;
use steward_core::host_allowed;
use steward_store::{secrets_named_by, ActionRecord, SecretRecord};

/// An account the action acts through that a person must connect (again) first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unusable {
    /// The secret the action names.
    pub secret_name: String,
    /// The `oauth` integration it is (or would be) connected for.
    pub integration_id: String,
    pub why: Why,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// No secret of that name exists.
    Missing,
    /// The provider refused the account's grant (`needs_reauth`), with its reason.
    NeedsReauth(Option<String>),
}

impl Unusable {
    /// What the model is told: which account, and that nothing was done.
    pub fn message(&self) -> String {
        match &self.why {
            Why::Missing => format!(
                "account {} ({}) is not connected; nothing was done",
                self.secret_name, self.integration_id
            ),
            Why::NeedsReauth(reason) => format!(
                "account {} ({}) needs the person to sign in again ({}); nothing was done",
                self.secret_name,
                self.integration_id,
                reason
                    .as_deref()
                    .unwrap_or("the provider refused its grant")
            ),
        }
    }
}

/// The first account `action` acts through that cannot be used now, if any. `secrets` are the
/// action's secrets that exist, as the invoke's context read them. Reads the connection of
/// each (and opens a due token set to refresh it); a missing secret costs no read.
pub async fn unusable(
    state: &AppState,
    principal: &Principal,
    action: &ActionRecord,
    secrets: &[SecretRecord],
) -> Result<Option<Unusable>> {
    let env = &principal.env.id;
    for name in secrets_named_by(&action.definition) {
        if !secrets.iter().any(|s| s.name == name) {
            if let Some(integration) = claiming(state, action) {
                return Ok(Some(Unusable {
                    secret_name: name,
                    integration_id: integration.id.clone(),
                    why: Why::Missing,
                }));
            }
            continue;
        }
        let found = match state.store.connection(env, &name).await? {
            Some(c) if c.auth_kind == AuthKind::Oauth.as_str() => {
                let why = if c.health.status == NEEDS_REAUTH {
                    Some(Why::NeedsReauth(c.health.reason.clone()))
                } else {
                    refused_on_refresh(state, principal, &name, secrets).await
                };
                why.map(|why| Unusable {
                    secret_name: name.clone(),
                    integration_id: c.integration_id,
                    why,
                })
            }
            Some(_) | None => None,
        };
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(None)
}

/// Opens a healthy account's tokens as a request would, refreshing them when due: `Some` when
/// the provider refused the refresh (the account is now `needs_reauth`).
async fn refused_on_refresh(
    state: &AppState,
    principal: &Principal,
    name: &str,
    secrets: &[SecretRecord],
) -> Option<Why> {
    let env = &principal.env.id;
    let (_, value) = crate::dispatch::secret_value::read_and_open(state, env, name, Some(secrets))
        .await
        .ok()?;
    let set = crate::oauth::TokenSet::from_value(&value)?;
    match crate::oauth::account::access_token(state, env, name, &set).await {
        Err(blocked) if blocked.code == "connection_needs_reauth" => Some(Why::NeedsReauth(None)),
        // Usable, or a failure the invoke reports itself (a slow token endpoint, storage).
        _ => None,
    }
}

/// The one connectable `oauth` integration whose hosts take `action`'s fixed destination.
fn claiming<'a>(state: &'a AppState, action: &ActionRecord) -> Option<&'a Integration> {
    let (to, _) = destination(&action.definition)?;
    let mut claiming = state.integrations.all().iter().filter(|i| {
        i.auth_kind == AuthKind::Oauth && i.oauth.is_some() && host_allowed(&i.allowed_hosts, &to)
    });
    let one = claiming.next()?;
    claiming.next().is_none().then_some(one)
}
