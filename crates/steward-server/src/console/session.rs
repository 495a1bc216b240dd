//! Console sessions: the token, the cookie that carries it, the CSRF token derived from it, and
//! the [`Operator`] extractor that every console page and write authenticates with.

use crate::auth::Caller;
use crate::error::ApiError;
use crate::keys::hash_token;
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue};
use rand::RngCore;
use sha2::{Digest, Sha256};
use steward_core::scopes;
use steward_store::{ApiKeyRecord, ConsoleSessionRecord, Environment};

/// The scope a key needs to sign in to the console, and to keep its session: the console is
/// where approvals are decided, so a key that cannot decide them (an agent's, a read-only
/// key) is refused at sign-in rather than shown buttons the API would refuse.
pub const CONSOLE_SCOPE: &str = scopes::APPROVALS_DECIDE;

/// The cookie's name. The `__Host-` prefix makes the browser refuse it unless it is `Secure`,
/// has `Path=/` and no `Domain`: no other host, and no page on plain http from another site,
/// can set or shadow it.
pub const COOKIE_NAME: &str = "__Host-steward_console";

/// How long a session lasts from sign-in, in seconds (8 hours: a working day). The key is
/// checked again on every request, so revoking it ends the session sooner.
pub const SESSION_LIFETIME_S: i64 = 8 * 3600;

/// Every session token starts with this (keys start with `stw_`), so one is easy to recognise.
pub const SESSION_TOKEN_PREFIX: &str = "stc_";

/// Random bytes in a session token: 256 bits, as in keys, so a plain SHA-256 is a safe hash.
const SESSION_TOKEN_RANDOM_BYTES: usize = 32;

/// Separates the CSRF token's hash input from the stored session hash, so that the database
/// (which holds `hash_token(token)`) never holds the CSRF token or a way to compute it.
const CSRF_DOMAIN: &[u8] = b"steward-console-csrf\0";

/// A new session token: the cookie's value, shown to nobody else and stored only hashed.
pub fn new_token() -> String {
    let mut bytes = [0u8; SESSION_TOKEN_RANDOM_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("{SESSION_TOKEN_PREFIX}{}", hex::encode(bytes))
}

/// The per-session CSRF token put in every form: derived from the session token, which only
/// the browser holding the cookie knows, so a page of another origin cannot produce it.
pub fn csrf_token(session_token: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(CSRF_DOMAIN);
    hasher.update(session_token.as_bytes());
    hex::encode(hasher.finalize())
}

/// The `Set-Cookie` value that signs a browser in for `max_age_s` seconds.
pub fn cookie(token: &str, max_age_s: i64) -> HeaderValue {
    let value = format!(
        "{COOKIE_NAME}={token}; Secure; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age_s}"
    );
    HeaderValue::from_str(&value).expect("a session token is ASCII hex")
}

/// The `Set-Cookie` value that removes the session cookie (sign-out).
pub fn cleared_cookie() -> HeaderValue {
    HeaderValue::from_str(&format!(
        "{COOKIE_NAME}=; Secure; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"
    ))
    .expect("ASCII")
}

/// The session token in the request's cookies, if there is one of the right shape.
pub fn token_from(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, value)| value.trim().to_string())
        .filter(|t| {
            t.strip_prefix(SESSION_TOKEN_PREFIX).is_some_and(|hex| {
                hex.len() == SESSION_TOKEN_RANDOM_BYTES * 2
                    && hex.bytes().all(|b| b.is_ascii_hexdigit())
            })
        })
}

/// A signed-in operator: the session, and the key it authenticates as, as the API's
/// [`Caller`]. Without a live session, or when the key lacks [`CONSOLE_SCOPE`], a page
/// answers with a redirect to sign-in.
#[derive(Debug, Clone)]
pub struct Operator {
    pub caller: Caller,
    pub session: ConsoleSessionRecord,
    /// The CSRF token to put in this page's forms.
    pub csrf: String,
    /// The session token's hash, as stored (what sign-out deletes).
    pub token_hash: String,
}

/// Why a request has no [`Operator`]: answered with a redirect to sign-in (clearing a cookie
/// that no longer signs in), or the page of a storage failure (`layout.rs` renders both).
#[derive(Debug)]
pub enum NotSignedIn {
    /// No session cookie: sign in.
    NoCookie,
    /// A cookie whose session is over, or whose key can no longer decide: sign in again.
    SessionOver,
    /// The session could not be read.
    Unreadable(ApiError),
}

/// A session, its key and its environment, as [`live`] finds them.
type LiveSession = (ConsoleSessionRecord, ApiKeyRecord, Environment);

/// The session whose token hashes to `token_hash`, when it is live: not expired or ended, its
/// key valid (not revoked or expired) and still holding [`CONSOLE_SCOPE`]. A session whose key
/// cannot decide approvals (signed in before sign-in required it) is no session either.
pub async fn live(state: &AppState, token_hash: &str) -> Result<Option<LiveSession>, ApiError> {
    let found = state
        .store
        .console_session(token_hash, state.clock.now())
        .await
        .map_err(ApiError::from)?;
    Ok(found.filter(|(_, key, _)| key.scopes.iter().any(|s| s == CONSOLE_SCOPE)))
}

/// Whether the session is still live ([`live`]); a session that cannot be read counts as over,
/// so a long-lived request ends rather than outlives a session nobody can check.
pub async fn is_live(state: &AppState, token_hash: &str) -> bool {
    matches!(live(state, token_hash).await, Ok(Some(_)))
}

impl FromRequestParts<AppState> for Operator {
    type Rejection = NotSignedIn;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, NotSignedIn> {
        let Some(token) = token_from(&parts.headers) else {
            return Err(NotSignedIn::NoCookie);
        };
        let token_hash = hash_token(&token);
        let found = live(state, &token_hash)
            .await
            .map_err(NotSignedIn::Unreadable)?;
        let Some((session, key, env)) = found else {
            return Err(NotSignedIn::SessionOver);
        };
        crate::auth::note_used(state, &key);
        Ok(Operator {
            caller: Caller { key, env },
            session,
            csrf: csrf_token(&token),
            token_hash,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_host_prefixed_secure_http_only_strict_and_site_wide() {
        let token = new_token();
        let value = cookie(&token, SESSION_LIFETIME_S);
        let text = value.to_str().unwrap();
        let mut parts = text.split("; ");
        assert_eq!(
            parts.next(),
            Some(format!("{COOKIE_NAME}={token}").as_str())
        );
        let attributes: Vec<&str> = parts.collect();
        assert_eq!(
            attributes,
            vec![
                "Secure",
                "HttpOnly",
                "SameSite=Strict",
                "Path=/",
                "Max-Age=28800"
            ]
        );
        assert!(COOKIE_NAME.starts_with("__Host-"));
        assert!(!text.contains("Domain"), "a __Host- cookie has no Domain");
        assert!(cleared_cookie().to_str().unwrap().ends_with("Max-Age=0"));
    }

    #[test]
    fn tokens_are_random_and_read_back_only_in_their_own_shape() {
        let (a, b) = (new_token(), new_token());
        assert_ne!(a, b);
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("other=1; {COOKIE_NAME}={a}; x=y")).unwrap(),
        );
        assert_eq!(token_from(&headers), Some(a.clone()));
        for bad in [
            format!("{COOKIE_NAME}=stw_{}", &a[4..]),
            format!("{COOKIE_NAME}={}", &a[..a.len() - 1]),
            format!("{COOKIE_NAME}={}Z", &a[..a.len() - 1]),
            format!("steward_console={a}"),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(header::COOKIE, HeaderValue::from_str(&bad).unwrap());
            assert_eq!(token_from(&headers), None, "{bad}");
        }
    }

    #[test]
    fn the_csrf_token_is_per_session_and_not_the_stored_hash() {
        let (a, b) = (new_token(), new_token());
        assert_ne!(csrf_token(&a), csrf_token(&b));
        assert_eq!(csrf_token(&a), csrf_token(&a));
        assert!(!hash_token(&a).contains(&csrf_token(&a)));
        assert!(!csrf_token(&a).contains(&a[SESSION_TOKEN_PREFIX.len()..]));
    }
}
