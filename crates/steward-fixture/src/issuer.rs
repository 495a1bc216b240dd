//! A local OAuth 2.1 authorization server, so Steward's `/mcp` can be tested as a resource
//! server with a real client (the official Python `mcp` client's OAuth support) and nothing
//! outside loopback.
//!
//! It is the issuer `http://HOST:PORT/issuer` (the fixture's own address, read from `Host`):
//!
//! * `GET /.well-known/oauth-authorization-server/issuer`: its metadata (RFC 8414, the
//!   path-inserted form a path issuer is discovered at).
//! * `POST /issuer/register`: dynamic client registration (RFC 7591); public clients only
//!   (`token_endpoint_auth_method` `none`), so PKCE is what binds a code to its client.
//! * `GET /issuer/authorize`: consents at once as the test user (`alice` unless the control
//!   says otherwise) and redirects to the client's `redirect_uri` with a code (and `iss`,
//!   RFC 9207). S256 PKCE is required.
//! * `POST /issuer/token`: the code (single-use, [`CODE_LIFETIME_S`]) and its verifier for a
//!   JWT access token signed with EdDSA, whose `aud` is the `resource` (RFC 8707) the client
//!   sent. No refresh token is issued.
//! * `GET /issuer/jwks`: the public key (a fresh Ed25519 key per fixture process).
//!
//! Switches for tests, at `/issuer/_control` (`GET` shows them, how many tokens were issued
//! and how often the keys were fetched; `POST` sets them): `audience` (issue tokens for another audience than the one
//! asked), `lifetimeS` (a negative lifetime issues tokens already expired) and `subject` (whom
//! the consent is for). `POST /issuer/_mint` signs a token with the claims a test names,
//! without the flow, to probe the resource server's checks directly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Where the issuer's endpoints live; the issuer identifier is the fixture's origin plus this.
pub const PATH: &str = "/issuer";

/// How long an authorization code waits for its exchange, in seconds (OAuth 2.1 advises
/// minutes at most; a test exchanges it at once).
pub const CODE_LIFETIME_S: u64 = 60;

/// An access token's lifetime unless `/issuer/_control` sets another, in seconds.
pub const TOKEN_LIFETIME_S_DEFAULT: i64 = 3_600;

/// The user the authorize endpoint consents as unless `/issuer/_control` names another.
pub const TEST_USER: &str = "alice";

/// Registered clients and outstanding codes kept at most, each: past it the oldest-first
/// bookkeeping is not worth it for a test tool, so a new one is refused.
const ENTRIES_MAX: usize = 10_000;

/// The PKCS#8 v1 prefix of an Ed25519 private key (RFC 8410): the 32-byte seed follows it.
const ED25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// The switches a test sets.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Control {
    /// Whom the consent is for (the token's `sub`).
    #[serde(default = "test_user")]
    pub subject: String,
    /// When set, tokens name this audience instead of the `resource` the client asked for.
    #[serde(default)]
    pub audience: Option<String>,
    /// Seconds from issue to expiry; negative issues tokens that are already expired.
    #[serde(default = "token_lifetime")]
    pub lifetime_s: i64,
}

fn test_user() -> String {
    TEST_USER.to_string()
}

fn token_lifetime() -> i64 {
    TOKEN_LIFETIME_S_DEFAULT
}

impl Default for Control {
    fn default() -> Self {
        Control {
            subject: test_user(),
            audience: None,
            lifetime_s: TOKEN_LIFETIME_S_DEFAULT,
        }
    }
}

/// One issued authorization code, waiting for its exchange.
struct Code {
    client_id: String,
    redirect_uri: String,
    challenge: String,
    resource: Option<String>,
    scope: Option<String>,
    subject: String,
    expires_at_s: u64,
}

#[derive(Default)]
struct Book {
    /// client id -> its registered redirect URIs.
    clients: HashMap<String, Vec<String>>,
    codes: HashMap<String, Code>,
    control: Control,
    issued: u64,
    /// `GET /issuer/jwks` answered: how often a resource server fetched the keys.
    jwks_fetches: u64,
}

/// The issuer's key and bookkeeping (memory only: a restarted fixture is a new issuer key).
pub struct Issuer {
    signing: EncodingKey,
    kid: String,
    /// The public key, base64url, as the JWK's `x`.
    public_x: String,
    book: Mutex<Book>,
}

impl Issuer {
    /// A new issuer with a fresh Ed25519 key.
    pub fn new() -> Issuer {
        let seed: [u8; 32] = rand::random();
        let public = ed25519_dalek::SigningKey::from_bytes(&seed)
            .verifying_key()
            .to_bytes();
        let mut pkcs8 = ED25519_PKCS8_PREFIX.to_vec();
        pkcs8.extend_from_slice(&seed);
        let public_x = URL_SAFE_NO_PAD.encode(public);
        let kid = hex_prefix(&Sha256::digest(public));
        Issuer {
            signing: EncodingKey::from_ed_der(&pkcs8),
            kid,
            public_x,
            book: Mutex::new(Book::default()),
        }
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Signs `claims` with the issuer's key.
    fn sign(&self, claims: &Value) -> Result<String, jsonwebtoken::errors::Error> {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(self.kid.clone());
        header.typ = Some("at+jwt".into());
        jsonwebtoken::encode(&header, claims, &self.signing)
    }
}

impl Default for Issuer {
    fn default() -> Self {
        Issuer::new()
    }
}

fn hex_prefix(bytes: &[u8]) -> String {
    bytes.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The issuer's routes, with their own state, for any fixture router.
pub(crate) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/.well-known/oauth-authorization-server/issuer",
            get(metadata),
        )
        .route("/issuer/jwks", get(jwks))
        .route("/issuer/register", post(register))
        .route("/issuer/authorize", get(authorize))
        .route("/issuer/token", post(token))
        .route("/issuer/_control", get(control).post(set_control))
        .route("/issuer/_mint", post(mint))
        .with_state(Arc::new(Issuer::new()))
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// `http://HOST:PORT/issuer`, as the request reached the fixture.
fn issuer_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    format!("http://{host}{PATH}")
}

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    let body = json!({"error": error, "error_description": description});
    (status, [(header::CACHE_CONTROL, "no-store")], Json(body)).into_response()
}

fn server_error(e: &jsonwebtoken::errors::Error) -> Response {
    oauth_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "server_error",
        &e.to_string(),
    )
}

fn bad_request(error: &str, description: &str) -> Response {
    oauth_error(StatusCode::BAD_REQUEST, error, description)
}

async fn metadata(headers: HeaderMap) -> Json<Value> {
    let issuer = issuer_url(&headers);
    Json(json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/authorize"),
        "token_endpoint": format!("{issuer}/token"),
        "registration_endpoint": format!("{issuer}/register"),
        "jwks_uri": format!("{issuer}/jwks"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none"],
        "authorization_response_iss_parameter_supported": true,
    }))
}

async fn jwks(State(issuer): State<Arc<Issuer>>) -> Json<Value> {
    issuer.book().jwks_fetches += 1;
    Json(json!({"keys": [{
        "kty": "OKP",
        "crv": "Ed25519",
        "x": issuer.public_x,
        "kid": issuer.kid,
        "alg": "EdDSA",
        "use": "sig",
    }]}))
}

async fn register(State(issuer): State<Arc<Issuer>>, Json(mut body): Json<Value>) -> Response {
    let redirect_uris: Vec<String> = body
        .get("redirect_uris")
        .and_then(Value::as_array)
        .map(|uris| {
            uris.iter()
                .filter_map(|u| u.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if redirect_uris.is_empty() {
        return bad_request(
            "invalid_redirect_uri",
            "redirect_uris: at least one is required",
        );
    }
    let client_id = format!("client_{}", hex_prefix(&rand::random::<[u8; 16]>()));
    {
        let mut book = issuer.book();
        if book.clients.len() >= ENTRIES_MAX {
            return bad_request("invalid_client_metadata", "too many clients registered");
        }
        book.clients.insert(client_id.clone(), redirect_uris);
    }
    if let Some(fields) = body.as_object_mut() {
        fields.insert("client_id".into(), json!(client_id));
        fields.insert("client_id_issued_at".into(), json!(now_s()));
        fields.insert("token_endpoint_auth_method".into(), json!("none"));
        fields.remove("client_secret");
    }
    (StatusCode::CREATED, Json(body)).into_response()
}

#[derive(Deserialize)]
struct AuthorizeQuery {
    response_type: Option<String>,
    client_id: Option<String>,
    redirect_uri: Option<String>,
    state: Option<String>,
    code_challenge: Option<String>,
    code_challenge_method: Option<String>,
    resource: Option<String>,
    scope: Option<String>,
}

async fn authorize(
    State(issuer): State<Arc<Issuer>>,
    headers: HeaderMap,
    Query(query): Query<AuthorizeQuery>,
) -> Response {
    let mut book = issuer.book();
    let (Some(client_id), Some(redirect_uri)) = (query.client_id, query.redirect_uri) else {
        return bad_request("invalid_request", "client_id and redirect_uri are required");
    };
    let registered = book.clients.get(&client_id);
    if !registered.is_some_and(|uris| uris.contains(&redirect_uri)) {
        // Never redirect to a URI the client did not register.
        return bad_request(
            "invalid_request",
            "unknown client_id, or a redirect_uri it did not register",
        );
    }
    if query.response_type.as_deref() != Some("code") {
        return bad_request("unsupported_response_type", "response_type must be code");
    }
    let challenge = match (query.code_challenge, query.code_challenge_method.as_deref()) {
        (Some(c), Some("S256")) if !c.is_empty() => c,
        _ => return bad_request("invalid_request", "PKCE with S256 is required"),
    };
    if book.codes.len() >= ENTRIES_MAX {
        let now = now_s();
        book.codes.retain(|_, c| c.expires_at_s > now);
    }
    if book.codes.len() >= ENTRIES_MAX {
        return bad_request("temporarily_unavailable", "too many outstanding codes");
    }
    let code = hex_prefix(&rand::random::<[u8; 16]>()) + &hex_prefix(&rand::random::<[u8; 16]>());
    let subject = book.control.subject.clone();
    book.codes.insert(
        code.clone(),
        Code {
            client_id,
            redirect_uri: redirect_uri.clone(),
            challenge,
            resource: query.resource,
            scope: query.scope,
            subject,
            expires_at_s: now_s() + CODE_LIFETIME_S,
        },
    );
    let mut answer = vec![("code", code), ("iss", issuer_url(&headers))];
    if let Some(state) = query.state {
        answer.push(("state", state));
    }
    let query = serde_html_form::to_string(&answer).unwrap_or_default();
    let separator = if redirect_uri.contains('?') { '&' } else { '?' };
    let location = format!("{redirect_uri}{separator}{query}");
    (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
}

#[derive(Deserialize)]
struct TokenForm {
    grant_type: Option<String>,
    code: Option<String>,
    redirect_uri: Option<String>,
    client_id: Option<String>,
    code_verifier: Option<String>,
    resource: Option<String>,
}

async fn token(
    State(issuer): State<Arc<Issuer>>,
    headers: HeaderMap,
    Form(form): Form<TokenForm>,
) -> Response {
    if form.grant_type.as_deref() != Some("authorization_code") {
        return bad_request(
            "unsupported_grant_type",
            "only authorization_code is supported",
        );
    }
    let (code, control) = {
        let mut book = issuer.book();
        // Single use: the code is gone whatever the outcome.
        let code = form.code.as_ref().and_then(|c| book.codes.remove(c));
        (code, book.control.clone())
    };
    let Some(code) = code.filter(|c| c.expires_at_s > now_s()) else {
        return bad_request("invalid_grant", "unknown, used or expired code");
    };
    if form.client_id.as_deref() != Some(code.client_id.as_str())
        || form.redirect_uri.as_deref() != Some(code.redirect_uri.as_str())
    {
        return bad_request(
            "invalid_grant",
            "client_id or redirect_uri differ from the authorization request",
        );
    }
    let verifier = form.code_verifier.unwrap_or_default();
    if URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes())) != code.challenge {
        return bad_request(
            "invalid_grant",
            "code_verifier does not match the challenge",
        );
    }
    let resource = match (code.resource, form.resource) {
        (Some(a), Some(b)) if a != b => {
            return bad_request(
                "invalid_target",
                "resource differs from the authorization request",
            )
        }
        (a, b) => a.or(b),
    };
    let Some(resource) = resource else {
        return bad_request("invalid_target", "resource (RFC 8707) is required");
    };
    let audience = control.audience.unwrap_or(resource);
    let now = now_s() as i64;
    let claims = json!({
        "iss": issuer_url(&headers),
        "sub": code.subject,
        "aud": audience,
        "iat": now,
        "nbf": now,
        "exp": now + control.lifetime_s,
        "scope": code.scope.clone().unwrap_or_default(),
        "client_id": code.client_id,
        "jti": hex_prefix(&rand::random::<[u8; 16]>()),
    });
    let access_token = match issuer.sign(&claims) {
        Ok(token) => token,
        Err(e) => return server_error(&e),
    };
    issuer.book().issued += 1;
    let mut body = json!({
        "access_token": access_token,
        "token_type": "Bearer",
        "expires_in": control.lifetime_s.max(1),
    });
    if let Some(scope) = code.scope {
        body["scope"] = json!(scope);
    }
    (
        StatusCode::OK,
        [(header::CACHE_CONTROL, "no-store")],
        Json(body),
    )
        .into_response()
}

async fn control(State(issuer): State<Arc<Issuer>>) -> Json<Value> {
    let book = issuer.book();
    Json(json!({
        "control": book.control,
        "issued": book.issued,
        "jwksFetches": book.jwks_fetches,
    }))
}

async fn set_control(State(issuer): State<Arc<Issuer>>, Json(control): Json<Control>) -> Response {
    issuer.book().control = control.clone();
    Json(json!({"control": control})).into_response()
}

/// What `POST /issuer/_mint` signs: each claim as given, defaults for the rest.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Mint {
    audience: String,
    #[serde(default = "test_user")]
    subject: String,
    #[serde(default)]
    scope: String,
    #[serde(default = "token_lifetime")]
    lifetime_s: i64,
    /// Another issuer to name (the key is still this issuer's).
    #[serde(default)]
    issuer: Option<String>,
}

async fn mint(
    State(issuer): State<Arc<Issuer>>,
    headers: HeaderMap,
    Json(mint): Json<Mint>,
) -> Response {
    let now = now_s() as i64;
    let claims = json!({
        "iss": mint.issuer.unwrap_or_else(|| issuer_url(&headers)),
        "sub": mint.subject,
        "aud": mint.audience,
        "iat": now,
        "nbf": now,
        "exp": now + mint.lifetime_s,
        "scope": mint.scope,
    });
    match issuer.sign(&claims) {
        Ok(token) => Json(json!({"accessToken": token})).into_response(),
        Err(e) => server_error(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{DecodingKey, Validation};

    #[test]
    fn a_signed_token_verifies_with_the_published_key_and_names_its_kid() {
        let issuer = Issuer::new();
        let token = issuer
            .sign(&json!({"sub": "alice", "aud": "http://r/mcp", "exp": now_s() + 60}))
            .unwrap();
        let header = jsonwebtoken::decode_header(&token).unwrap();
        assert_eq!(header.kid.as_deref(), Some(issuer.kid.as_str()));
        let key = DecodingKey::from_ed_components(&issuer.public_x).unwrap();
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.set_audience(&["http://r/mcp"]);
        let data = jsonwebtoken::decode::<Value>(&token, &key, &validation).unwrap();
        assert_eq!(data.claims["sub"], "alice");
        // Another issuer's key does not verify it.
        let other = DecodingKey::from_ed_components(&Issuer::new().public_x).unwrap();
        assert!(jsonwebtoken::decode::<Value>(&token, &other, &validation).is_err());
    }
}
