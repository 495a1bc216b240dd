//! An OAuth 2.1 authorization server and a protected API, for tests of connected accounts that
//! act for a person (Steward's OAuth connections).
//!
//! * `GET /oauth/authorize?response_type=code&client_id&redirect_uri&state&code_challenge&
//!   code_challenge_method=S256[&scope]` checks the request and answers `200` JSON with a
//!   `consentUrl`: the consent step a test drives in place of a person.
//! * `POST /oauth/consent/{id}` with `{"user": "alice"}` (or `{"user": .., "approve": false}`)
//!   consents as that user and answers `303` to `redirect_uri?code=..&state=..` (or
//!   `?error=access_denied&state=..`). A consent is used once.
//! * `POST /oauth/token` (form, client authenticated by HTTP Basic or `client_id` and
//!   `client_secret` in the form): `grant_type=authorization_code` with `code`, `redirect_uri`
//!   and `code_verifier` (checked against the S256 challenge; a code is used once), or
//!   `grant_type=refresh_token` with rotation: every refresh returns a new refresh token and the
//!   old one is refused from then on (`invalid_grant`).
//! * `POST /oauth/revoke` (RFC 7009, form `token` and optional `token_type_hint`, client
//!   authenticated): the token (and, for a refresh token, every token of its grant) stops
//!   working; the revocation is counted. Answers `200` even for an unknown token, as the RFC says.
//! * `POST /oauth/api/writes` with `Authorization: Bearer <access token>`, a JSON object body and
//!   the `X-Idempotency-Key` header: one write per key, attributed to the token's user (the same
//!   key and body replays the saved answer, another body is `422`). A missing, unknown, expired
//!   or revoked token is `401` with `WWW-Authenticate: Bearer error="invalid_token"`, and counted.
//!
//! Control (loopback, no authentication):
//! * `GET /_fixture/oauth` → writes (with their user), writes per user, revocations, token
//!   requests by grant, refused refreshes, `401`s, and the fault switches.
//! * `GET /_fixture/oauth/tokens` → every access and refresh token ever issued, so a test can
//!   look for them where they must not be.
//! * `POST /_fixture/oauth/faults` with any of `{"expireAccessTokensNow": true, "refuseRefresh":
//!   bool, "tokenDelayMs": N, "accessTokenTtlS": N}`.
//! * `POST /_fixture/oauth/clients` `{"clientId", "clientSecret"}` registers a client (the client
//!   [`DEFAULT_CLIENT_ID`] with [`DEFAULT_CLIENT_SECRET`] always exists).
//! * `POST /_fixture/oauth/reset` forgets everything but the default client.
//!
//! State is in memory only: a restarted fixture has forgotten every token.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use base64::Engine as _;
use rand::distributions::Alphanumeric;
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::error::json_response;

/// The client every fixture knows.
pub const DEFAULT_CLIENT_ID: &str = "fixture-client";
/// Its secret (a test value; never a real credential).
pub const DEFAULT_CLIENT_SECRET: &str = "fixture-client-secret-7c1f0e94a2";
/// How long an access token lives unless `accessTokenTtlS` says otherwise, in seconds.
pub const ACCESS_TOKEN_TTL_S_DEFAULT: u64 = 3_600;
/// How long a consent's authorization code may be exchanged, in seconds (OAuth 2.1 asks for
/// short-lived codes).
const CODE_TTL_S: u64 = 60;
/// The longest idempotency key accepted, in bytes.
const KEY_LEN_MAX: usize = 255;
/// The longest token delay the fault switch accepts, in milliseconds.
const TOKEN_DELAY_MS_MAX: u64 = 60_000;

/// A write made through the protected API, attributed to the user whose token made it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct OauthWrite {
    pub id: String,
    pub user: String,
    pub key: String,
    pub body: Value,
}

#[derive(Clone, Debug, Serialize)]
struct Revocation {
    /// `access_token`, `refresh_token`, or `unknown` for a token this provider never issued.
    kind: String,
    user: Option<String>,
}

#[derive(Clone, Debug, Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Faults {
    refuse_refresh: bool,
    token_delay_ms: u64,
    access_token_ttl_s: Option<u64>,
}

struct Consent {
    client_id: String,
    redirect_uri: String,
    state: String,
    challenge: String,
    scope: String,
}

struct Code {
    user: String,
    client_id: String,
    redirect_uri: String,
    challenge: String,
    scope: String,
    expires_at: u64,
}

struct Access {
    user: String,
    grant: String,
    expires_at: u64,
    revoked: bool,
}

struct Refresh {
    user: String,
    client_id: String,
    grant: String,
    scope: String,
    spent: bool,
    revoked: bool,
}

#[derive(Default)]
struct Inner {
    clients: BTreeMap<String, String>,
    consents: HashMap<String, Consent>,
    codes: HashMap<String, Code>,
    access: HashMap<String, Access>,
    refresh: HashMap<String, Refresh>,
    issued_access: Vec<String>,
    issued_refresh: Vec<String>,
    writes: Vec<OauthWrite>,
    saved: HashMap<String, (String, Value)>,
    revocations: Vec<Revocation>,
    token_requests: BTreeMap<String, u64>,
    refused_refreshes: u64,
    unauthorized: u64,
    faults: Faults,
}

impl Inner {
    fn fresh() -> Inner {
        let mut inner = Inner::default();
        inner
            .clients
            .insert(DEFAULT_CLIENT_ID.into(), DEFAULT_CLIENT_SECRET.into());
        inner
    }

    /// A new access and refresh token for `user` in `grant`.
    fn issue(&mut self, user: &str, client_id: &str, grant: &str, scope: &str) -> Value {
        let ttl = self
            .faults
            .access_token_ttl_s
            .unwrap_or(ACCESS_TOKEN_TTL_S_DEFAULT);
        let access = format!("fxat_{}", random(40));
        let refresh = format!("fxrt_{}", random(40));
        self.access.insert(
            access.clone(),
            Access {
                user: user.into(),
                grant: grant.into(),
                expires_at: now_s() + ttl,
                revoked: false,
            },
        );
        self.refresh.insert(
            refresh.clone(),
            Refresh {
                user: user.into(),
                client_id: client_id.into(),
                grant: grant.into(),
                scope: scope.into(),
                spent: false,
                revoked: false,
            },
        );
        self.issued_access.push(access.clone());
        self.issued_refresh.push(refresh.clone());
        json!({
            "access_token": access, "token_type": "Bearer", "expires_in": ttl,
            "refresh_token": refresh, "scope": scope,
        })
    }
}

/// The provider's state, shared by its routes.
pub(crate) struct Provider {
    inner: Mutex<Inner>,
}

impl Provider {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent maps (every change is one insert or
        // flag), so a poisoned lock is used as is.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The provider's routes, with their own state: mergeable into the fixture's router.
pub(crate) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let provider = Arc::new(Provider {
        inner: Mutex::new(Inner::fresh()),
    });
    Router::new()
        .route("/oauth/authorize", get(authorize))
        .route("/oauth/consent/{id}", post(consent))
        .route("/oauth/token", post(token))
        .route("/oauth/revoke", post(revoke))
        .route("/oauth/api/writes", post(write))
        .route("/_fixture/oauth", get(status))
        .route("/_fixture/oauth/tokens", get(tokens))
        .route("/_fixture/oauth/faults", post(set_faults))
        .route("/_fixture/oauth/clients", post(register_client))
        .route("/_fixture/oauth/reset", post(reset))
        .with_state(provider)
}

type Shared = State<Arc<Provider>>;

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn random(n: usize) -> String {
    rand::thread_rng()
        .sample_iter(&Alphanumeric)
        .take(n)
        .map(char::from)
        .collect()
}

/// An OAuth error answer (`{"error", "error_description"}`).
fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    json_response(
        status,
        &json!({"error": error, "error_description": description}),
    )
}

fn form(bytes: &[u8]) -> HashMap<String, String> {
    serde_html_form::from_bytes(bytes).unwrap_or_default()
}

/// `base64url(sha256(verifier))`, the S256 challenge of a verifier (RFC 7636).
pub fn s256(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// `GET /oauth/authorize`.
async fn authorize(State(p): Shared, headers: HeaderMap, RawQuery(query): RawQuery) -> Response {
    let q = form(query.unwrap_or_default().as_bytes());
    let field = |name: &str| q.get(name).filter(|v| !v.is_empty()).cloned();
    let bad = |d: &str| oauth_error(StatusCode::BAD_REQUEST, "invalid_request", d);
    if field("response_type").as_deref() != Some("code") {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "unsupported_response_type",
            "response_type must be code",
        );
    }
    let Some(client_id) = field("client_id") else {
        return bad("client_id is required");
    };
    if !p.lock().clients.contains_key(&client_id) {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_client",
            "unknown client_id",
        );
    }
    let Some(redirect_uri) =
        field("redirect_uri").filter(|u| u.starts_with("http://") || u.starts_with("https://"))
    else {
        return bad("redirect_uri must be an absolute http(s) URL");
    };
    let Some(state) = field("state") else {
        return bad("state is required");
    };
    let Some(challenge) = field("code_challenge") else {
        return bad("code_challenge is required (PKCE)");
    };
    if field("code_challenge_method").as_deref() != Some("S256") {
        return bad("code_challenge_method must be S256");
    }
    let scope = field("scope").unwrap_or_default();
    let id = random(24);
    p.lock().consents.insert(
        id.clone(),
        Consent {
            client_id: client_id.clone(),
            redirect_uri,
            state,
            challenge,
            scope: scope.clone(),
        },
    );
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    json_response(
        StatusCode::OK,
        &json!({
            "consentUrl": format!("http://{host}/oauth/consent/{id}"),
            "clientId": client_id, "scope": scope,
            "how": "POST {\"user\": NAME} (and \"approve\": false to refuse) to consentUrl",
        }),
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsentBody {
    user: String,
    #[serde(default = "yes")]
    approve: bool,
}

fn yes() -> bool {
    true
}

/// `POST /oauth/consent/{id}`.
async fn consent(State(p): Shared, Path(id): Path<String>, body: Bytes) -> Response {
    let Ok(given) = serde_json::from_slice::<ConsentBody>(&body) else {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "expected {\"user\": NAME, \"approve\": bool}",
        );
    };
    if given.user.is_empty() || given.user.len() > 64 {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "user: 1 to 64 bytes",
        );
    }
    let mut inner = p.lock();
    let Some(c) = inner.consents.remove(&id) else {
        return oauth_error(
            StatusCode::NOT_FOUND,
            "invalid_request",
            "no such consent (each is used once)",
        );
    };
    let state = urlencode(&c.state);
    let location = if given.approve {
        let code = random(32);
        inner.codes.insert(
            code.clone(),
            Code {
                user: given.user,
                client_id: c.client_id,
                redirect_uri: c.redirect_uri.clone(),
                challenge: c.challenge,
                scope: c.scope,
                expires_at: now_s() + CODE_TTL_S,
            },
        );
        format!(
            "{}{}code={code}&state={state}",
            c.redirect_uri,
            sep(&c.redirect_uri)
        )
    } else {
        format!(
            "{}{}error=access_denied&state={state}",
            c.redirect_uri,
            sep(&c.redirect_uri)
        )
    };
    drop(inner);
    let mut response = json_response(StatusCode::SEE_OTHER, &json!({"redirect": location}));
    if let Ok(value) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

fn sep(uri: &str) -> char {
    if uri.contains('?') {
        '&'
    } else {
        '?'
    }
}

fn urlencode(text: &str) -> String {
    serde_html_form::to_string([("v", text)])
        .map(|s| s.trim_start_matches("v=").to_string())
        .unwrap_or_default()
}

/// The client a token or revoke request authenticates as, if its credentials are right.
fn client(inner: &Inner, headers: &HeaderMap, f: &HashMap<String, String>) -> Option<String> {
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .and_then(|raw| String::from_utf8(raw).ok())
        .and_then(|pair| {
            let (id, secret) = pair.split_once(':')?;
            Some((decode_form(id), decode_form(secret)))
        });
    let (id, secret) = match basic {
        Some(pair) => pair,
        None => (f.get("client_id")?.clone(), f.get("client_secret")?.clone()),
    };
    (inner.clients.get(&id) == Some(&secret)).then_some(id)
}

/// RFC 6749 §2.3.1 form-encodes the Basic credentials.
fn decode_form(text: &str) -> String {
    serde_html_form::from_str::<HashMap<String, String>>(&format!("v={text}"))
        .ok()
        .and_then(|mut m| m.remove("v"))
        .unwrap_or_else(|| text.to_string())
}

/// `POST /oauth/token`.
async fn token(State(p): Shared, headers: HeaderMap, body: Bytes) -> Response {
    let delay = p.lock().faults.token_delay_ms;
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let f = form(&body);
    let mut inner = p.lock();
    let Some(client_id) = client(&inner, &headers, &f) else {
        return oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "client authentication failed",
        );
    };
    let grant_type = f.get("grant_type").cloned().unwrap_or_default();
    *inner.token_requests.entry(grant_type.clone()).or_default() += 1;
    let invalid = |d: &str| oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", d);
    match grant_type.as_str() {
        "authorization_code" => {
            let code = f.get("code").cloned().unwrap_or_default();
            let Some(c) = inner.codes.remove(&code) else {
                return invalid("unknown or already used code");
            };
            if c.client_id != client_id || c.expires_at < now_s() {
                return invalid("the code is expired or was issued to another client");
            }
            if f.get("redirect_uri") != Some(&c.redirect_uri) {
                return invalid("redirect_uri differs from the authorization request's");
            }
            let verifier = f.get("code_verifier").cloned().unwrap_or_default();
            if verifier.len() < 43 || verifier.len() > 128 || s256(&verifier) != c.challenge {
                return invalid("code_verifier does not match the code_challenge");
            }
            let grant = random(16);
            let answer = inner.issue(&c.user, &client_id, &grant, &c.scope);
            json_response(StatusCode::OK, &answer)
        }
        "refresh_token" => {
            if inner.faults.refuse_refresh {
                inner.refused_refreshes += 1;
                return invalid("refresh refused (fault switch refuseRefresh)");
            }
            let presented = f.get("refresh_token").cloned().unwrap_or_default();
            let Some(r) = inner.refresh.get_mut(&presented) else {
                inner.refused_refreshes += 1;
                return invalid("unknown refresh token");
            };
            if r.spent || r.revoked || r.client_id != client_id {
                inner.refused_refreshes += 1;
                return invalid("the refresh token was already used, or revoked");
            }
            r.spent = true;
            let (user, grant, scope) = (r.user.clone(), r.grant.clone(), r.scope.clone());
            let answer = inner.issue(&user, &client_id, &grant, &scope);
            json_response(StatusCode::OK, &answer)
        }
        _ => oauth_error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            "grant_type must be authorization_code or refresh_token",
        ),
    }
}

/// `POST /oauth/revoke`.
async fn revoke(State(p): Shared, headers: HeaderMap, body: Bytes) -> Response {
    let f = form(&body);
    let mut inner = p.lock();
    if client(&inner, &headers, &f).is_none() {
        return oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "client authentication failed",
        );
    }
    let token = f.get("token").cloned().unwrap_or_default();
    let revocation = if let Some(a) = inner.access.get_mut(&token) {
        a.revoked = true;
        Revocation {
            kind: "access_token".into(),
            user: Some(a.user.clone()),
        }
    } else if let Some(r) = inner.refresh.get_mut(&token) {
        r.revoked = true;
        let (grant, user) = (r.grant.clone(), r.user.clone());
        for a in inner.access.values_mut().filter(|a| a.grant == grant) {
            a.revoked = true;
        }
        for r in inner.refresh.values_mut().filter(|r| r.grant == grant) {
            r.revoked = true;
        }
        Revocation {
            kind: "refresh_token".into(),
            user: Some(user),
        }
    } else {
        Revocation {
            kind: "unknown".into(),
            user: None,
        }
    };
    inner.revocations.push(revocation);
    json_response(StatusCode::OK, &json!({}))
}

/// `POST /oauth/api/writes`.
async fn write(State(p): Shared, headers: HeaderMap, body: Bytes) -> Response {
    let mut inner = p.lock();
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    let user = match inner.access.get(presented) {
        Some(a) if !a.revoked && a.expires_at > now_s() => a.user.clone(),
        _ => {
            inner.unauthorized += 1;
            let mut response = oauth_error(
                StatusCode::UNAUTHORIZED,
                "invalid_token",
                "the access token is missing, unknown, expired or revoked",
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer error=\"invalid_token\""),
            );
            return response;
        }
    };
    let key = headers
        .get(crate::generic::IDEMPOTENCY_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|k| !k.is_empty() && k.len() <= KEY_LEN_MAX)
        .map(str::to_string);
    let Some(key) = key else {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "idempotency_key_required",
            "X-Idempotency-Key is required",
        );
    };
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(&body) else {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_body",
            "the body must be a JSON object",
        );
    };
    let body = Value::Object(fields);
    let fingerprint = format!("{user}\n{body}");
    if let Some((saved, answer)) = inner.saved.get(&key) {
        if *saved != fingerprint {
            return oauth_error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_mismatch",
                "this key was used with another body or user",
            );
        }
        let mut response = json_response(StatusCode::OK, answer);
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
        return response;
    }
    let written = OauthWrite {
        id: format!("owr_{}", random(20)),
        user,
        key: key.clone(),
        body,
    };
    let answer = serde_json::to_value(&written).unwrap_or_else(|_| json!({}));
    inner.saved.insert(key, (fingerprint, answer.clone()));
    tracing::info!(write = %written.id, user = %written.user, "committed oauth write");
    inner.writes.push(written);
    json_response(StatusCode::OK, &answer)
}

/// `GET /_fixture/oauth`.
async fn status(State(p): Shared) -> Response {
    let inner = p.lock();
    let mut per_user: BTreeMap<&str, u64> = BTreeMap::new();
    for w in &inner.writes {
        *per_user.entry(w.user.as_str()).or_default() += 1;
    }
    json_response(
        StatusCode::OK,
        &json!({
            "writes": inner.writes, "writesByUser": per_user,
            "revocations": inner.revocations, "tokenRequests": inner.token_requests,
            "refusedRefreshes": inner.refused_refreshes, "unauthorized": inner.unauthorized,
            "faults": inner.faults,
        }),
    )
}

/// `GET /_fixture/oauth/tokens`.
async fn tokens(State(p): Shared) -> Response {
    let inner = p.lock();
    json_response(
        StatusCode::OK,
        &json!({"access": inner.issued_access, "refresh": inner.issued_refresh}),
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FaultsBody {
    #[serde(default)]
    expire_access_tokens_now: bool,
    refuse_refresh: Option<bool>,
    token_delay_ms: Option<u64>,
    access_token_ttl_s: Option<u64>,
}

/// `POST /_fixture/oauth/faults`.
async fn set_faults(State(p): Shared, body: Bytes) -> Response {
    let given: FaultsBody = match serde_json::from_slice(&body) {
        Ok(given) => given,
        Err(e) => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                &format!("{e}; expected {{\"expireAccessTokensNow\", \"refuseRefresh\", \"tokenDelayMs\", \"accessTokenTtlS\"}}"),
            )
        }
    };
    let mut inner = p.lock();
    if given.expire_access_tokens_now {
        for a in inner.access.values_mut() {
            a.expires_at = 0;
        }
    }
    if let Some(refuse) = given.refuse_refresh {
        inner.faults.refuse_refresh = refuse;
    }
    if let Some(ms) = given.token_delay_ms {
        inner.faults.token_delay_ms = ms.min(TOKEN_DELAY_MS_MAX);
    }
    if let Some(ttl) = given.access_token_ttl_s {
        inner.faults.access_token_ttl_s = Some(ttl);
    }
    json_response(StatusCode::OK, &json!({"faults": inner.faults}))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ClientBody {
    client_id: String,
    client_secret: String,
}

/// `POST /_fixture/oauth/clients`.
async fn register_client(State(p): Shared, body: Bytes) -> Response {
    match serde_json::from_slice::<ClientBody>(&body) {
        Ok(c) if !c.client_id.is_empty() && !c.client_secret.is_empty() => {
            p.lock()
                .clients
                .insert(c.client_id.clone(), c.client_secret);
            json_response(StatusCode::OK, &json!({"clientId": c.client_id}))
        }
        _ => oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "expected {\"clientId\", \"clientSecret\"}, both non-empty",
        ),
    }
}

/// `POST /_fixture/oauth/reset`.
async fn reset(State(p): Shared) -> impl IntoResponse {
    *p.lock() = Inner::fresh();
    json_response(StatusCode::OK, &json!({"reset": true}))
}

#[cfg(test)]
mod tests {
    use super::s256;

    /// The value computed apart with Python's `hashlib` and `base64.urlsafe_b64encode`.
    #[test]
    fn the_s256_challenge_is_base64url_of_the_sha256() {
        assert_eq!(
            s256("dBjftJeZ4CVP-mB92K27uhbUpU1p1r_W7gFWFxnF1oE"),
            "k3J43bBkkm-oIBa14oRWmQSB5WKosuV8j6Ba9w-NJZ0"
        );
    }
}
