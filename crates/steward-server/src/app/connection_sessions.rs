//! Consent sessions: connecting an `oauth` integration's account by having the person sign in
//! at the provider (OAuth 2.1 authorization code with PKCE S256). `oauth/` holds the provider
//! calls and the tokens at use; `api/connections.rs` is the HTTP door.
//!
//! 1. [`create`] (`secrets:write`) records a `pending` session holding the SHA-256 of a fresh
//!    random `state` and the PKCE verifier sealed by the vault, and answers the provider's
//!    authorization URL with that `state` and the verifier's challenge: the `connectUrl`, valid
//!    [`CONNECT_SESSION_TTL_MS`].
//! 2. The provider sends the person's browser to [`callback`] with a code and the `state`. The
//!    store spends the `state` ([`Connections::claim_session`](steward_store::Connections)):
//!    once, and only before the session expires; a replay finds nothing. The code is exchanged
//!    with the verifier, the tokens sealed into the account's secret, the account recorded, the
//!    session settled `completed` (or `failed`, with a reason and nothing stored).
//! 3. [`complete`] reads the session: `pending` until then, the account once `completed`.

use super::account_gate::Unusable;
use super::connections::{self, Account, Slot};
use super::{Error, Principal, Result};
use crate::error::codes;
use crate::integrations::{AuthKind, Integration, OauthSpec};
use crate::oauth::provider::{self, Client};
use crate::oauth::{TokenSet, CONNECT_SESSION_TTL_MS, OAUTH_TOKEN_TIMEOUT_MS};
use crate::state::AppState;
use base64::Engine as _;
use rand::RngCore;
use serde_json::json;
use sha2::{Digest, Sha256};
use steward_core::{scopes, KeyId, Millis};
use steward_store::{Actor, ConnectionSession, SessionStatus, StoreError};
use steward_wire::{self as wire, Text};

/// The path of the callback under the server's address; a catalog's `oauth.redirectUri`
/// overrides the URL built from it.
pub const CALLBACK_PATH: &str = "/api/v2/connections/callback";

/// A session start, checked: every field present and well formed.
#[derive(Debug)]
pub struct StartSession {
    pub integration_id: String,
    pub secret_name: String,
    pub description: Option<String>,
}

impl StartSession {
    /// The body's fields, each required one named when it is missing.
    pub fn from_body(given: wire::SessionBody) -> Result<StartSession> {
        let (integration_id, secret_name) =
            connections::account_fields(given.integration_id, given.secret_name)?;
        Ok(StartSession {
            integration_id,
            secret_name,
            description: given.description.map(Text::into_string),
        })
    }
}

/// A new session and the URL the person opens. The URL is answered once and not stored (only
/// its `state`'s digest is).
#[derive(Debug)]
pub struct Started {
    pub session: ConnectionSession,
    pub connect_url: String,
}

/// Where a session stands, as `complete` reports it.
#[derive(Debug)]
pub enum Completion {
    Pending(ConnectionSession),
    Completed(ConnectionSession, Box<Account>),
}

/// What the provider's redirect carried.
#[derive(Debug, Default)]
pub struct CallbackQuery {
    pub state: Option<String>,
    pub code: Option<String>,
    pub error: Option<String>,
}

/// Starts a consent session for an `oauth` integration. `callback_url` is this server's
/// callback as the caller reached it, used when the catalog names no `redirectUri`.
pub async fn create(
    state: &AppState,
    principal: &Principal,
    input: &StartSession,
    callback_url: &str,
) -> Result<Started> {
    principal.require(scopes::SECRETS_WRITE)?;
    start(state, principal, input, callback_url).await
}

/// Starts a consent session for the account an MCP call needs (`account_gate.rs`), on behalf
/// of the calling key. It takes `actions:invoke`, not `secrets:write`: the caller chooses
/// nothing (the account is one its action names, the integration the one it is connected for)
/// and receives only a link for a person; the person's consent at the provider is what
/// connects the account, and the session is audited as the key's.
pub async fn start_for_call(
    state: &AppState,
    principal: &Principal,
    needed: &Unusable,
    callback_url: &str,
) -> Result<Started> {
    principal.require(scopes::ACTIONS_INVOKE)?;
    let input = StartSession {
        integration_id: needed.integration_id.clone(),
        secret_name: needed.secret_name.clone(),
        description: None,
    };
    start(state, principal, &input, callback_url).await
}

/// [`create`] once the caller may.
async fn start(
    state: &AppState,
    principal: &Principal,
    input: &StartSession,
    callback_url: &str,
) -> Result<Started> {
    let (integration, spec) = oauth_integration(state, &input.integration_id)?;
    let env = &principal.env.id;
    // The account's secret must be free, or already this integration's account (a reconnect).
    if let Slot::Taken = connections::slot(state, env, &input.secret_name, integration).await? {
        return Err(connections::taken());
    }
    if state
        .store
        .secret(env, &spec.client_secret_name)
        .await?
        .is_none()
    {
        return Err(Error::validation(
            "integrationId",
            format!(
                "the integration's client secret {} is not in this environment's vault; put it first",
                spec.client_secret_name
            ),
        ));
    }
    let id = format!("cs_{}", state.ids.next().to_ascii_lowercase());
    let secret_state = random_token();
    let verifier = random_token();
    let (nonce, sealed) = state
        .vault
        .seal(env, &verifier_name(&id), &verifier)
        .map_err(|e| Error::internal("vault", &e))?;
    let redirect_uri = spec
        .redirect_uri
        .clone()
        .unwrap_or_else(|| callback_url.to_string());
    let now = state.clock.now();
    let session = ConnectionSession {
        id: id.clone(),
        env_id: env.clone(),
        integration_id: integration.id.clone(),
        secret_name: input.secret_name.clone(),
        description: input.description.clone(),
        state_digest: digest(&secret_state),
        verifier_sealed: format!("{}:{}", hex::encode(nonce), hex::encode(sealed)),
        redirect_uri: redirect_uri.clone(),
        status: SessionStatus::Pending,
        reason: None,
        created_by: principal.key.id.as_str().to_string(),
        created_at: now,
        expires_at: now.plus_ms(CONNECT_SESSION_TTL_MS),
        updated_at: now,
    };
    let connect_url = connect_url(spec, &redirect_uri, &secret_state, &verifier)?;
    let session = state
        .store
        .create_session(&session, &Actor::key(&principal.key.id, now))
        .await?;
    Ok(Started {
        session,
        connect_url,
    })
}

/// The session `id` of the principal's environment: `pending` until the callback connected
/// the account, then `completed` with it. Reads only, so calling it again is harmless.
pub async fn complete(state: &AppState, principal: &Principal, id: &str) -> Result<Completion> {
    principal.require(scopes::SECRETS_WRITE)?;
    let missing = || Error::not_found("connection session");
    if id.len() > 64 {
        return Err(missing());
    }
    let session = state
        .store
        .session(&principal.env.id, id)
        .await?
        .ok_or_else(missing)?;
    let now = state.clock.now();
    match session.status {
        SessionStatus::Completed => {
            let account = connections::account(state, principal, &session.secret_name).await?;
            Ok(Completion::Completed(session, Box::new(account)))
        }
        SessionStatus::Failed => Err(failed(&session, session.reason.as_deref())),
        // An exchange Steward did not finish (it stopped mid-way) is over once the token
        // request's deadline has passed too.
        SessionStatus::Pending if now >= session.expires_at => Err(expired(&session)),
        SessionStatus::Exchanging
            if now >= session.expires_at.plus_ms(OAUTH_TOKEN_TIMEOUT_MS as i64) =>
        {
            Err(expired(&session))
        }
        SessionStatus::Pending | SessionStatus::Exchanging => Ok(Completion::Pending(session)),
    }
}

/// The provider's redirect: spends the session's `state`, exchanges the code, and connects the
/// account. Needs no key: the `state` is the proof, and it works once.
pub async fn callback(state: &AppState, query: &CallbackQuery) -> Result<ConnectionSession> {
    let invalid = || {
        Error::of(
            codes::CONNECTION_SESSION_INVALID,
            "this sign-in link names no session waiting for it: it was already used, it expired, or it never existed",
        )
    };
    let secret_state = query
        .state
        .as_deref()
        .filter(|s| !s.is_empty() && s.len() <= 512)
        .ok_or_else(invalid)?;
    let now = state.clock.now();
    let session = state
        .store
        .claim_session(&digest(secret_state), now)
        .await?
        .ok_or_else(invalid)?;
    match connect(state, &session, query).await {
        Ok(()) => {
            let actor = actor_of(&session, state.clock.now());
            Ok(state
                .store
                .finish_session(
                    &session.env_id,
                    &session.id,
                    SessionStatus::Completed,
                    None,
                    &actor,
                )
                .await?)
        }
        Err(reason) => {
            let actor = actor_of(&session, state.clock.now());
            let failed_session = state
                .store
                .finish_session(
                    &session.env_id,
                    &session.id,
                    SessionStatus::Failed,
                    Some(&reason),
                    &actor,
                )
                .await?;
            Err(failed(&failed_session, Some(&reason)))
        }
    }
}

/// Exchanges the code and stores the account; `Err` is the session's failure reason (never a
/// token or the code).
async fn connect(
    state: &AppState,
    session: &ConnectionSession,
    query: &CallbackQuery,
) -> std::result::Result<(), String> {
    if let Some(error) = &query.error {
        let code: String = error
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(64)
            .collect();
        return Err(format!(
            "the provider answered {code}: consent was not given"
        ));
    }
    let code = query
        .code
        .as_deref()
        .filter(|c| !c.is_empty() && c.len() <= 2048)
        .ok_or("the provider's redirect carried no code")?;
    let (integration, spec) = oauth_integration(state, &session.integration_id).map_err(|_| {
        "the integration is no longer an oauth integration of this server".to_string()
    })?;
    let env = &session.env_id;
    let verifier = open_verifier(state, session)?;
    let client_secret = crate::oauth::account::client_secret(state, env, spec)
        .await
        .map_err(|b| b.message)?;
    let client = Client {
        http: &state.http,
        outbound: state.outbound,
        spec,
        secret: &client_secret,
    };
    let tokens = provider::exchange(
        &client,
        code,
        &verifier,
        &session.redirect_uri,
        state.clock.now(),
    )
    .await
    .map_err(|f| f.reason().to_string())?;
    store_tokens(state, session, integration, &tokens)
        .await
        .map_err(|e| format!("the tokens could not be stored: {e}"))
}

/// Seals `tokens` into the session's secret (created, or rotated when it already holds this
/// integration's account) and records the account, healthy.
async fn store_tokens(
    state: &AppState,
    session: &ConnectionSession,
    integration: &Integration,
    tokens: &TokenSet,
) -> std::result::Result<(), String> {
    let env = &session.env_id;
    let name = &session.secret_name;
    let slot = connections::slot(state, env, name, integration)
        .await
        .map_err(|e| e.to_string())?;
    let description = match &slot {
        Slot::Taken => {
            return Err(
                "a secret with this name was created meanwhile and is not this account".into(),
            )
        }
        Slot::Free => session.description.clone(),
        Slot::Account(secret) => session
            .description
            .clone()
            .or_else(|| secret.description.clone()),
    };
    let expected = slot.expected();
    let now = state.clock.now();
    let actor = actor_of(session, now);
    let secret = connections::seal_account(
        state,
        env,
        name,
        &tokens.to_value(),
        integration,
        description.clone(),
        expected,
        &actor,
    )
    .await
    .map_err(|e| match e {
        StoreError::VersionConflict { .. } => {
            "the secret changed while the account was being connected".to_string()
        }
        other => other.to_string(),
    })?;
    connections::record_account(state, env, &secret, integration, description, &actor)
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// The `oauth` integration named `id`, with its sign-in spec.
fn oauth_integration<'a>(
    state: &'a AppState,
    id: &str,
) -> Result<(&'a Integration, &'a OauthSpec)> {
    let integration = connections::integration(state, id)?;
    match (integration.auth_kind, &integration.oauth) {
        (AuthKind::Oauth, Some(spec)) => Ok((integration, spec)),
        (AuthKind::Oauth, None) => Err(Error::validation(
            "integrationId",
            "is an oauth integration this server's catalog gives no oauth block, so it cannot be connected",
        )),
        (AuthKind::ApiKey, _) => Err(Error::validation(
            "integrationId",
            "is connected with an API key (POST /connections/keys), not by signing in",
        )),
    }
}

/// The provider's authorization URL for this session.
fn connect_url(
    spec: &OauthSpec,
    redirect_uri: &str,
    secret_state: &str,
    verifier: &str,
) -> Result<String> {
    let mut url = url::Url::parse(&spec.authorize_url)
        .map_err(|e| Error::internal("the catalog's oauth.authorizeUrl", &e))?;
    {
        let mut query = url.query_pairs_mut();
        query
            .append_pair("response_type", "code")
            .append_pair("client_id", &spec.client_id)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("state", secret_state)
            .append_pair("code_challenge", &challenge(verifier))
            .append_pair("code_challenge_method", "S256");
        if !spec.scopes.is_empty() {
            query.append_pair("scope", &spec.scopes.join(" "));
        }
    }
    Ok(url.into())
}

fn open_verifier(
    state: &AppState,
    session: &ConnectionSession,
) -> std::result::Result<String, String> {
    let unreadable = || "the session's PKCE verifier could not be opened".to_string();
    let (nonce, sealed) = session
        .verifier_sealed
        .split_once(':')
        .ok_or_else(unreadable)?;
    let nonce = hex::decode(nonce).map_err(|_| unreadable())?;
    let sealed = hex::decode(sealed).map_err(|_| unreadable())?;
    state
        .vault
        .open(
            &session.env_id,
            &verifier_name(&session.id),
            &nonce,
            &sealed,
        )
        .map_err(|_| unreadable())
}

/// The name the verifier is sealed under (the vault binds a value to its name).
fn verifier_name(id: &str) -> String {
    format!("session/{id}")
}

/// 32 random bytes, base64url: a `state` or a PKCE verifier (43 characters, RFC 7636's minimum).
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The S256 challenge of a verifier (RFC 7636 §4.2).
fn challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// What the store keeps of a `state`.
fn digest(secret_state: &str) -> String {
    hex::encode(Sha256::digest(secret_state.as_bytes()))
}

/// The session's changes are made on behalf of the key that started it.
fn actor_of(session: &ConnectionSession, now: Millis) -> Actor {
    match KeyId::parse(&session.created_by) {
        Ok(key) => Actor::key(&key, now),
        Err(_) => Actor::system(now),
    }
}

fn failed(session: &ConnectionSession, reason: Option<&str>) -> Error {
    Error::of(
        codes::CONNECTION_SESSION_FAILED,
        format!(
            "the consent session failed: {}; nothing was stored",
            reason.unwrap_or("no reason recorded")
        ),
    )
    .with_details(json!({"sessionId": session.id, "reason": reason}))
}

fn expired(session: &ConnectionSession) -> Error {
    Error::of(
        codes::CONNECTION_SESSION_EXPIRED,
        "the consent session was not completed within its 15 minutes; start a new one",
    )
    .with_details(json!({"sessionId": session.id}))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `base64url(sha256(verifier))` without padding, the value computed apart with Python's
    /// `hashlib` and `base64.urlsafe_b64encode`.
    #[test]
    fn the_challenge_is_the_s256_of_the_verifier() {
        assert_eq!(
            challenge("dBjftJeZ4CVP-mB92K27uhbUpU1p1r_W7gFWFxnF1oE"),
            "k3J43bBkkm-oIBa14oRWmQSB5WKosuV8j6Ba9w-NJZ0"
        );
        let token = random_token();
        assert_eq!(token.len(), 43);
        assert_ne!(token, random_token());
    }
}
