//! The calls Steward makes to a provider's OAuth endpoints: the code exchange and the refresh
//! (token endpoint) and the revocation (RFC 7009). Each is one `POST` under the dispatcher's
//! outbound rules, authenticated as the integration's client with HTTP Basic (RFC 6749 §2.3.1),
//! with a deadline of [`OAUTH_TOKEN_TIMEOUT_MS`]. No token, code, verifier or client secret
//! appears in an error, a log line or a span: a failure says what happened with the provider's
//! `error` code at most.

use super::{TokenSet, OAUTH_TOKEN_TIMEOUT_MS, TOKEN_ANSWER_BYTES_MAX};
use crate::dispatch::outbound::OutboundPolicy;
use crate::integrations::OauthSpec;
use serde::Deserialize;
use std::time::Duration;
use steward_core::Millis;

/// Why the token endpoint gave no tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenFailure {
    /// The provider answered and refused (`invalid_grant`, a revoked grant, a bad client):
    /// asking again will not help; the person must consent again.
    Refused { reason: String },
    /// No usable answer (unreachable, timeout, a 5xx, a malformed answer): the grant may still
    /// be good.
    Unavailable { reason: String },
}

impl TokenFailure {
    pub fn reason(&self) -> &str {
        match self {
            TokenFailure::Refused { reason } | TokenFailure::Unavailable { reason } => reason,
        }
    }
}

/// The client's credentials for one call.
pub struct Client<'a> {
    pub http: &'a reqwest::Client,
    pub outbound: OutboundPolicy,
    pub spec: &'a OauthSpec,
    /// Opened from the vault for this call only.
    pub secret: &'a str,
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    refresh_token: Option<String>,
    #[serde(default)]
    expires_in: Option<i64>,
}

#[derive(Deserialize)]
struct ErrorAnswer {
    error: String,
}

/// Trades an authorization code for tokens (with the PKCE verifier and the redirect URI of the
/// authorization request).
pub async fn exchange(
    client: &Client<'_>,
    code: &str,
    verifier: &str,
    redirect_uri: &str,
    now: Millis,
) -> Result<TokenSet, TokenFailure> {
    let form = [
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", redirect_uri),
        ("code_verifier", verifier),
        ("client_id", client.spec.client_id.as_str()),
    ];
    token_request(client, &form, now).await
}

/// Trades a refresh token for a new token set. A provider that rotates refresh tokens answers a
/// new one; one that does not leaves `refresh_token` `None` (the caller keeps the old one).
pub async fn refresh(
    client: &Client<'_>,
    refresh_token: &str,
    now: Millis,
) -> Result<TokenSet, TokenFailure> {
    let form = [
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh_token),
        ("client_id", client.spec.client_id.as_str()),
    ];
    token_request(client, &form, now).await
}

/// Asks the provider to revoke `token` (RFC 7009); `hint` is `refresh_token` or `access_token`.
/// `Err` says why it could not be confirmed.
pub async fn revoke(client: &Client<'_>, token: &str, hint: &str) -> Result<(), String> {
    let Some(url) = &client.spec.revoke_url else {
        return Err("the integration names no revocation endpoint".into());
    };
    client
        .outbound
        .check(url)
        .await
        .map_err(|e| format!("the revocation endpoint was refused: {e}"))?;
    let form = [("token", token), ("token_type_hint", hint)];
    let answer = post(client, url, &form).await?;
    match answer.status().as_u16() {
        200..=299 => Ok(()),
        status => Err(format!("the revocation endpoint answered HTTP {status}")),
    }
}

async fn post(
    client: &Client<'_>,
    url: &str,
    form: &[(&str, &str)],
) -> Result<reqwest::Response, String> {
    let encode = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    client
        .http
        .post(url)
        .basic_auth(encode(&client.spec.client_id), Some(encode(client.secret)))
        .form(form)
        .timeout(Duration::from_millis(OAUTH_TOKEN_TIMEOUT_MS))
        .send()
        .await
        .map_err(|e| {
            if e.is_timeout() {
                format!("the provider did not answer within {OAUTH_TOKEN_TIMEOUT_MS} ms")
            } else {
                "the provider could not be reached".to_string()
            }
        })
}

async fn token_request(
    client: &Client<'_>,
    form: &[(&str, &str)],
    now: Millis,
) -> Result<TokenSet, TokenFailure> {
    let unavailable = |reason: String| TokenFailure::Unavailable { reason };
    let url = &client.spec.token_url;
    client
        .outbound
        .check(url)
        .await
        .map_err(|e| unavailable(format!("the token endpoint was refused: {e}")))?;
    let answer = post(client, url, form).await.map_err(unavailable)?;
    let status = answer.status().as_u16();
    let bytes = read_bounded(answer)
        .await
        .map_err(|reason| unavailable(reason.to_string()))?;
    match status {
        200..=299 => {
            let tokens: TokenAnswer = serde_json::from_slice(&bytes).map_err(|_| {
                unavailable("the token endpoint's answer is not a token answer".into())
            })?;
            if tokens.access_token.is_empty() {
                return Err(unavailable(
                    "the token endpoint gave an empty access token".into(),
                ));
            }
            let expires_at = tokens
                .expires_in
                .filter(|s| *s >= 0)
                .map(|s| now.0.saturating_add(s.saturating_mul(1000)));
            Ok(TokenSet::new(
                tokens.access_token,
                tokens.refresh_token.filter(|t| !t.is_empty()),
                expires_at,
            ))
        }
        400 | 401 => {
            // Only the error code, and only if it is a plain word: a provider's free text is
            // never repeated.
            let code = serde_json::from_slice::<ErrorAnswer>(&bytes)
                .ok()
                .map(|e| e.error)
                .filter(|e| {
                    e.len() <= 64 && e.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                })
                .unwrap_or_else(|| "refused".into());
            Err(TokenFailure::Refused {
                reason: format!("the provider refused the grant (HTTP {status}, {code})"),
            })
        }
        status => Err(unavailable(format!(
            "the token endpoint answered HTTP {status}"
        ))),
    }
}

async fn read_bounded(mut answer: reqwest::Response) -> Result<Vec<u8>, &'static str> {
    let mut bytes = Vec::new();
    while let Some(chunk) = answer
        .chunk()
        .await
        .map_err(|_| "the token endpoint's answer was cut off")?
    {
        if bytes.len() + chunk.len() > TOKEN_ANSWER_BYTES_MAX {
            return Err("the token endpoint's answer is too large");
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}
