//! `/mcp` as an OAuth 2.1 resource server (MCP authorization, revisions 2025-06-18 and later):
//! beside agent keys, the endpoint accepts JWT access tokens from the issuers the operator
//! configured (`steward serve --mcp-oauth FILE`).
//!
//! - The resource publishes its Protected Resource Metadata (RFC 9728) at
//!   `/.well-known/oauth-protected-resource` and at the path-suffixed form for its path
//!   (`/.well-known/oauth-protected-resource/mcp`): its `resource` URL, its issuers as
//!   `authorization_servers`, the scopes it requires.
//! - A request without a bearer, or with one that does not authenticate, is `401` with
//!   `WWW-Authenticate: Bearer resource_metadata="...", scope="..."` (and
//!   `error="invalid_token"` when a bearer was sent), so an MCP client can discover the issuer
//!   and authorize.
//! - A bearer shaped like a JWT is an access token: its `iss` must be a configured issuer, its
//!   signature verify with that issuer's published keys (`jwks.rs`), its `aud` name this
//!   resource exactly (RFC 8707), `exp`/`nbf` hold within the leeway, and it must hold every
//!   required scope (else `403 insufficient_scope` with the challenge). `access_token.rs` does
//!   those checks. Any other bearer is an agent key, checked as before.
//! - The token's subject (the `sub` claim, or the issuer's `subjectClaim`) is mapped by the
//!   configuration to an environment and a role (`agent` or `operator`, the scopes of
//!   `steward keys create --role`): the request acts as a principal of that environment with
//!   those scopes, whose key id is derived from (issuer, subject), so audit records, approvals
//!   and idempotency scopes tell people apart. An unmapped subject is `403
//!   subject_not_mapped`.
//!
//! The token itself goes nowhere: it is not stored, not logged, not put in a principal, and no
//! provider call carries it (dispatch sends only an action's own vaulted credentials).

use super::access_token::{self, Expected, Rejection, Verified};
use super::jwks::{self, Keys};
use crate::app::Principal;
use crate::error::{codes, ApiError};
use crate::state::AppState;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use steward_core::{EnvironmentId, KeyId, Millis, Role};
use steward_store::{Actor, ApiKeyRecord, NewEnvironment, StoreResult};
use url::Url;

/// How far a token's `exp` and `nbf` may be off unless the configuration says, in seconds: the
/// clock difference between an issuer and Steward tolerated (RFC 7519 suggests "a few minutes"
/// at most).
pub const LEEWAY_S_DEFAULT: u64 = 60;

/// The largest leeway the configuration may set, in seconds: more would keep expired tokens
/// working for long.
pub const LEEWAY_S_MAX: u64 = 300;

/// The scope a token must hold unless the configuration lists others (`"scopes": []` requires
/// none).
pub const SCOPE_DEFAULT: &str = "steward:mcp";

/// The issuers one configuration may list: each is a key set fetched and cached.
pub const ISSUERS_MAX: usize = 16;

/// The subjects one issuer may map, each to an environment and a role.
pub const SUBJECTS_MAX: usize = 10_000;

/// The largest configuration file read, in bytes.
pub const CONFIG_BYTES_MAX: u64 = 1024 * 1024;

/// The longest bearer token checked as an access token, in bytes: real JWTs are a few hundred
/// bytes to a few KiB; a longer one is refused unread.
pub const TOKEN_BYTES_MAX: usize = 16 * 1024;

/// The subject entry that maps every subject of an issuer the others do not name.
pub const ANY_SUBJECT: &str = "*";

/// The configuration file, as written (`docs/DECISIONS.md`, "MCP authorization").
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConfigFile {
    resource: String,
    #[serde(default)]
    scopes: Option<Vec<String>>,
    #[serde(default)]
    leeway_s: Option<u64>,
    issuers: Vec<IssuerFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct IssuerFile {
    issuer: String,
    #[serde(default)]
    jwks_uri: Option<String>,
    #[serde(default)]
    subject_claim: Option<String>,
    subjects: BTreeMap<String, GrantFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantFile {
    environment: String,
    role: String,
}

/// What a mapped subject may do: act in an environment with a role's scopes.
struct Grant {
    environment: String,
    role: Role,
    /// The environment's id, resolved once at start ([`OAuth::resolve`]).
    id: OnceLock<EnvironmentId>,
}

struct Issuer {
    id: String,
    subject_claim: String,
    subjects: BTreeMap<String, Grant>,
    keys: Keys,
}

/// The resource server's configuration and its issuers' cached keys.
pub struct OAuth {
    resource: String,
    metadata_url: String,
    /// The path-suffixed metadata route (`/.well-known/oauth-protected-resource/mcp`).
    metadata_path: String,
    scopes: Vec<String>,
    leeway_s: i64,
    issuers: Vec<Issuer>,
}

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let issuers: Vec<&str> = self.issuers.iter().map(|i| i.id.as_str()).collect();
        f.debug_struct("OAuth")
            .field("resource", &self.resource)
            .field("issuers", &issuers)
            .finish_non_exhaustive()
    }
}

/// Why the configuration was refused at start; names the field.
#[derive(Debug, thiserror::Error)]
#[error("--mcp-oauth: {0}")]
pub struct ConfigError(String);

fn invalid(message: impl Into<String>) -> ConfigError {
    ConfigError(message.into())
}

/// A URL the configuration may name: absolute, without a fragment, `https` or loopback `http`.
fn url(field: &str, value: &str) -> Result<Url, ConfigError> {
    let url = Url::parse(value).map_err(|e| invalid(format!("{field}: {value:?}: {e}")))?;
    if url.fragment().is_some() || url.query().is_some() || !jwks::allowed(&url) {
        return Err(invalid(format!(
            "{field}: {value:?} must be an https URL (or http to a loopback host) without a query or fragment"
        )));
    }
    Ok(url)
}

/// A scope token (RFC 6749 §3.3), so it can be written in a challenge unquoted-safe.
fn scope_token(scope: &str) -> bool {
    !scope.is_empty()
        && scope
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
}

fn environment_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl OAuth {
    /// Reads and checks the configuration file at `path`.
    pub fn load(path: &Path) -> Result<OAuth, ConfigError> {
        let size = std::fs::metadata(path)
            .map_err(|e| invalid(format!("{}: {e}", path.display())))?
            .len();
        if size > CONFIG_BYTES_MAX {
            return Err(invalid(format!(
                "{}: larger than {CONFIG_BYTES_MAX} bytes",
                path.display()
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
        OAuth::parse(&text)
    }

    /// Checks a configuration given as JSON text.
    pub fn parse(text: &str) -> Result<OAuth, ConfigError> {
        let file: ConfigFile = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let resource = url("resource", &file.resource)?;
        let scopes = file
            .scopes
            .unwrap_or_else(|| vec![SCOPE_DEFAULT.to_string()]);
        if let Some(bad) = scopes.iter().find(|s| !scope_token(s)) {
            return Err(invalid(format!("scopes: {bad:?} is not a scope token")));
        }
        let leeway_s = file.leeway_s.unwrap_or(LEEWAY_S_DEFAULT);
        if leeway_s > LEEWAY_S_MAX {
            return Err(invalid(format!("leewayS: at most {LEEWAY_S_MAX}")));
        }
        if file.issuers.is_empty() || file.issuers.len() > ISSUERS_MAX {
            return Err(invalid(format!("issuers: 1 to {ISSUERS_MAX}")));
        }
        let issuers = file
            .issuers
            .into_iter()
            .enumerate()
            .map(|(at, issuer)| Self::issuer(at, issuer))
            .collect::<Result<Vec<_>, _>>()?;
        let path = resource.path().trim_end_matches('/');
        let metadata_path = format!("/.well-known/oauth-protected-resource{path}");
        let mut metadata_url = resource.clone();
        metadata_url.set_path(&metadata_path);
        Ok(OAuth {
            resource: file.resource,
            metadata_url: metadata_url.to_string(),
            metadata_path,
            scopes,
            leeway_s: leeway_s as i64,
            issuers,
        })
    }

    fn issuer(at: usize, file: IssuerFile) -> Result<Issuer, ConfigError> {
        let field = |name: &str| format!("issuers[{at}].{name}");
        url(&field("issuer"), &file.issuer)?;
        let jwks_uri = file
            .jwks_uri
            .map(|u| url(&field("jwksUri"), &u))
            .transpose()?;
        if file.subjects.is_empty() || file.subjects.len() > SUBJECTS_MAX {
            return Err(invalid(format!(
                "{}: 1 to {SUBJECTS_MAX} subjects",
                field("subjects")
            )));
        }
        let mut subjects = BTreeMap::new();
        for (subject, grant) in file.subjects {
            let here = field(&format!("subjects[{subject:?}]"));
            if !environment_name(&grant.environment) {
                return Err(invalid(format!(
                    "{here}.environment: 1-64 characters of A-Z a-z 0-9 - _ ."
                )));
            }
            let role = Role::parse(&grant.role)
                .ok_or_else(|| invalid(format!("{here}.role: agent or operator")))?;
            let grant = Grant {
                environment: grant.environment,
                role,
                id: OnceLock::new(),
            };
            subjects.insert(subject, grant);
        }
        let keys = Keys::new(&file.issuer, jwks_uri)
            .map_err(|e| invalid(format!("{}: an HTTP client: {e}", field("issuer"))))?;
        Ok(Issuer {
            keys,
            id: file.issuer,
            subject_claim: file.subject_claim.unwrap_or_else(|| "sub".into()),
            subjects,
        })
    }

    /// Finds (or creates, like `steward keys create`) the environments the subjects are mapped
    /// to, once, at start: a request then reads its environment by id.
    pub async fn resolve(&self, state: &AppState) -> StoreResult<()> {
        let actor = Actor::system(state.clock.now());
        for grant in self.issuers.iter().flat_map(|i| i.subjects.values()) {
            if grant.id.get().is_some() {
                continue;
            }
            let id = EnvironmentId::from_unique(&crate::clock::unique());
            let new = NewEnvironment {
                name: &grant.environment,
                id: &id,
            };
            let environment = state.store.ensure_environment(new, &actor).await?;
            let _ = grant.id.set(environment.id);
        }
        Ok(())
    }

    /// The Protected Resource Metadata document (RFC 9728).
    fn metadata(&self) -> serde_json::Value {
        let issuers: Vec<&str> = self.issuers.iter().map(|i| i.id.as_str()).collect();
        json!({
            "resource": self.resource,
            "authorization_servers": issuers,
            "scopes_supported": self.scopes,
            "bearer_methods_supported": ["header"],
            "resource_name": "Steward",
        })
    }

    /// The challenge of a refusal: `error` is `invalid_token` or `insufficient_scope` (none
    /// when no bearer was sent).
    fn challenge(&self, error: Option<(&str, &str)>) -> HeaderValue {
        let mut value = String::from("Bearer ");
        if let Some((error, description)) = error {
            value.push_str(&format!(
                "error=\"{error}\", error_description=\"{description}\", "
            ));
        }
        value.push_str(&format!("resource_metadata=\"{}\"", self.metadata_url));
        if !self.scopes.is_empty() {
            value.push_str(&format!(", scope=\"{}\"", self.scopes.join(" ")));
        }
        HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
    }

    fn refused(&self, error: ApiError, challenge: Option<(&str, &str)>) -> Response {
        let mut response = error.into_response();
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, self.challenge(challenge));
        response
    }

    /// The principal an access token authenticates, or the whole refusal.
    async fn principal(&self, state: &AppState, token: &str) -> Result<Principal, Response> {
        let now = state.clock.now();
        let (issuer, verified) = match self.verify(token, now).await {
            Ok(found) => found,
            Err(Refusal::Token(rejection)) => {
                tracing::debug!(
                    reason = rejection.description(),
                    "an MCP access token was refused"
                );
                return Err(self.rejected(rejection));
            }
            Err(Refusal::Keys(e)) => {
                tracing::warn!(error = %e, "an issuer's keys could not be fetched; an MCP access token could not be checked");
                return Err(ApiError::of(
                    codes::ISSUER_UNAVAILABLE,
                    "the token's issuer could not be reached to check it; nothing was done, try again",
                )
                .into_response());
            }
        };
        let grant = issuer
            .subjects
            .get(&verified.subject)
            .or_else(|| issuer.subjects.get(ANY_SUBJECT));
        let Some(grant) = grant else {
            return Err(ApiError::of(
                codes::SUBJECT_NOT_MAPPED,
                "the access token is valid, but its subject is mapped to no environment here",
            )
            .into_response());
        };
        let Some(env_id) = grant.id.get() else {
            // `serve` resolves every grant before it listens.
            tracing::error!(environment = %grant.environment, "an MCP OAuth grant's environment was never resolved");
            return Err(ApiError::unauthenticated().into_response());
        };
        let env = match state.store.environment(env_id).await {
            Ok(Some(env)) => env,
            Ok(None) => return Err(ApiError::unauthenticated().into_response()),
            Err(e) => return Err(ApiError::from(e).into_response()),
        };
        let key = ApiKeyRecord {
            id: subject_key_id(&issuer.id, &verified.subject),
            env_id: env.id.clone(),
            name: format!("oauth:{}", verified.subject),
            scopes: grant.role.scopes(),
            // Never the token, nor its hash: nothing about it outlives the request.
            token_hash: String::new(),
            created_at: now,
            expires_at: Some(verified.expires_at),
            revoked_at: None,
            last_used_at: None,
        };
        Ok(Principal { key, env })
    }

    fn rejected(&self, rejection: Rejection) -> Response {
        if rejection == Rejection::InsufficientScope {
            let error = ApiError::of(
                codes::INSUFFICIENT_SCOPE,
                format!(
                    "the access token lacks a required scope ({})",
                    self.scopes.join(" ")
                ),
            )
            .with_details(json!({"requiredScopes": self.scopes}));
            return self.refused(error, Some(("insufficient_scope", rejection.description())));
        }
        let error = ApiError::of(codes::AUTHENTICATION_FAILED, rejection.description())
            .with_details(json!({"reason": "invalid_token"}));
        self.refused(error, Some(("invalid_token", rejection.description())))
    }

    /// The issuer and the checked claims of `token`.
    async fn verify(&self, token: &str, now: Millis) -> Result<(&Issuer, Verified), Refusal> {
        if token.len() > TOKEN_BYTES_MAX {
            return Err(Refusal::Token(Rejection::Malformed));
        }
        let claimed = access_token::claimed_issuer(token).map_err(Refusal::Token)?;
        let issuer = self
            .issuers
            .iter()
            .find(|i| i.id == claimed)
            .ok_or(Refusal::Token(Rejection::UnknownIssuer))?;
        let kid = access_token::key_id(token).map_err(Refusal::Token)?;
        let key = issuer
            .keys
            .find(kid.as_deref(), now)
            .await
            .map_err(Refusal::Keys)?
            .ok_or(Refusal::Token(Rejection::UnknownKey))?;
        let expected = Expected {
            issuer: &issuer.id,
            audience: &self.resource,
            scopes: &self.scopes,
            leeway_s: self.leeway_s,
            subject_claim: &issuer.subject_claim,
        };
        let verified = access_token::verify(token, &key, &expected, now).map_err(Refusal::Token)?;
        Ok((issuer, verified))
    }
}

enum Refusal {
    Token(Rejection),
    Keys(jwks::FetchError),
}

/// The key id a subject of an issuer acts under: the same for every token of that subject, and
/// another for every other (issuer, subject).
fn subject_key_id(issuer: &str, subject: &str) -> KeyId {
    let digest = Sha256::digest(format!("{issuer}\n{subject}").as_bytes());
    KeyId::from_unique(&format!("oauth_{}", hex::encode(&digest[..16])))
}

/// The bearer token of a request, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// The principal of a request at `/mcp`, or the whole refusal: an access token when `oauth`
/// is configured and the bearer is shaped like a JWT, an agent key otherwise. A `401` carries
/// the challenge (`WWW-Authenticate`) the module documentation describes.
///
/// A refusal also says `Connection: close`: it is answered before the request's body is read,
/// and a connection whose body was left unread is one the server may close under the client's
/// next request on it (the client then sees a disconnect instead of an answer). An OAuth client
/// retries right after a 401, so it is told to open a new connection instead.
pub async fn authenticate(
    state: &AppState,
    oauth: Option<&OAuth>,
    headers: &HeaderMap,
) -> Result<Principal, Response> {
    principal_of(state, oauth, headers)
        .await
        .map_err(|mut refusal| {
            refusal
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            refusal
        })
}

async fn principal_of(
    state: &AppState,
    oauth: Option<&OAuth>,
    headers: &HeaderMap,
) -> Result<Principal, Response> {
    let bearer = bearer(headers);
    if let (Some(oauth), Some(token)) = (oauth, bearer) {
        if access_token::looks_like_jwt(token) {
            return oauth.principal(state, token).await;
        }
    }
    let authenticated = match crate::auth::token_hash(headers) {
        Ok(hash) => crate::app::authenticate(state, &hash).await,
        Err(e) => Err(e),
    };
    authenticated.map_err(|e| {
        if e.status != StatusCode::UNAUTHORIZED {
            return e.into_response();
        }
        match oauth {
            Some(oauth) => {
                let invalid = bearer.map(|_| ("invalid_token", "the bearer token is not valid"));
                oauth.refused(e, invalid)
            }
            None => {
                let mut response = e.into_response();
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                response
            }
        }
    })
}

/// The Protected Resource Metadata routes (none without `oauth`).
pub fn routes<S: Clone + Send + Sync + 'static>(oauth: Option<Arc<OAuth>>) -> Router<S> {
    let Some(oauth) = oauth else {
        return Router::new();
    };
    let document = Json(oauth.metadata());
    let serve = move || {
        let document = document.clone();
        async move { document }
    };
    let mut router =
        Router::new().route("/.well-known/oauth-protected-resource", get(serve.clone()));
    if oauth.metadata_path != "/.well-known/oauth-protected-resource" {
        router = router.route(&oauth.metadata_path, get(serve));
    }
    router
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: serde_json::Value) -> serde_json::Value {
        let mut config = json!({
            "resource": "http://127.0.0.1:4000/mcp",
            "issuers": [{
                "issuer": "http://127.0.0.1:9000/issuer",
                "subjects": {"alice": {"environment": "test", "role": "agent"}},
            }],
        });
        if let (Some(c), Some(e)) = (config.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
        config
    }

    #[test]
    fn the_metadata_names_the_resource_its_issuers_and_scopes_at_both_paths() {
        let oauth = OAuth::parse(&config(json!({})).to_string()).unwrap();
        assert_eq!(
            oauth.metadata_url,
            "http://127.0.0.1:4000/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            oauth.metadata_path,
            "/.well-known/oauth-protected-resource/mcp"
        );
        let metadata = oauth.metadata();
        assert_eq!(metadata["resource"], "http://127.0.0.1:4000/mcp");
        assert_eq!(
            metadata["authorization_servers"],
            json!(["http://127.0.0.1:9000/issuer"])
        );
        assert_eq!(metadata["scopes_supported"], json!([SCOPE_DEFAULT]));
        let challenge = oauth.challenge(None);
        assert_eq!(
            challenge.to_str().unwrap(),
            "Bearer resource_metadata=\"http://127.0.0.1:4000/.well-known/oauth-protected-resource/mcp\", scope=\"steward:mcp\""
        );
        let invalid = oauth.challenge(Some(("invalid_token", "expired")));
        assert!(invalid.to_str().unwrap().starts_with(
            "Bearer error=\"invalid_token\", error_description=\"expired\", resource_metadata="
        ));
    }

    #[test]
    fn a_bad_configuration_names_its_field() {
        let cases = [
            (
                json!({"resource": "http://steward.example/mcp"}),
                "resource",
            ),
            (
                json!({"resource": "https://steward.example/mcp#x"}),
                "resource",
            ),
            (json!({"leewayS": 301}), "leewayS"),
            (json!({"scopes": ["a b"]}), "scopes"),
            (json!({"issuers": []}), "issuers"),
            (
                json!({"issuers": [{"issuer": "http://as.example", "subjects": {"a": {"environment": "t", "role": "agent"}}}]}),
                "issuers[0].issuer",
            ),
            (
                json!({"issuers": [{"issuer": "https://as.example", "subjects": {"a": {"environment": "t", "role": "admin"}}}]}),
                "role",
            ),
            (
                json!({"issuers": [{"issuer": "https://as.example", "subjects": {"a": {"environment": "a b", "role": "agent"}}}]}),
                "environment",
            ),
            (json!({"unknown": 1}), "unknown"),
        ];
        for (extra, field) in cases {
            let error = OAuth::parse(&config(extra.clone()).to_string()).unwrap_err();
            assert!(error.to_string().contains(field), "{extra}: {error}");
        }
    }

    #[test]
    fn each_issuer_and_subject_acts_under_its_own_key_id() {
        let a = subject_key_id("https://as.example", "alice");
        assert_eq!(a, subject_key_id("https://as.example", "alice"));
        assert_ne!(a, subject_key_id("https://as.example", "bob"));
        assert_ne!(a, subject_key_id("https://other.example", "alice"));
        assert!(KeyId::parse(a.as_str()).is_ok(), "{a}");
    }
}
