//! The integrations an account can be connected for, and the check of an API key with its
//! provider.
//!
//! The catalog is built in ([`Integrations::builtin`]: Stripe and GitHub, both `api_key`) or read
//! at start-up from a JSON file (`steward serve --integrations FILE`), which replaces it. Each
//! integration names the hosts its credential may be sent to (they become the connected
//! secret's `allowedHosts`) and a read-only key-check request inside those hosts. A check is one
//! `GET` under the dispatcher's outbound rules (`dispatch/outbound.rs`: https unless insecure
//! destinations are allowed, no internal addresses, no redirects) with the key in one header;
//! the key never appears in an answer, an error, a log line or an audit record.

use crate::dispatch::outbound::OutboundPolicy;
use serde::Deserialize;
use std::path::Path;
use std::time::Duration;
use steward_core::{host_allowed, HostRule};

/// How long one key check may take, in milliseconds, before it counts as "could not be
/// checked": well under the SDK's 30 s client timeout, so the caller hears the answer.
pub const KEY_CHECK_TIMEOUT_MS: u64 = 5_000;

/// The most integrations a catalog file may list: a catalog is a short, hand-written list.
pub const INTEGRATIONS_MAX: usize = 200;

/// How an account of an integration is connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthKind {
    /// The user pastes a key made in the provider's settings; Steward checks and stores it.
    ApiKey,
    /// Sign-in at the provider (OAuth 2.1 authorization code with PKCE): connected through a
    /// consent session (`app/connection_sessions.rs`) when the entry has an `oauth` block; one
    /// without it is listed and cannot be connected (`VALIDATION_ERROR` naming `integrationId`).
    Oauth,
}

impl AuthKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthKind::ApiKey => "api_key",
            AuthKind::Oauth => "oauth",
        }
    }
}

/// The read-only request that tells whether a key works.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeyCheck {
    /// A `GET` URL inside the integration's `allowedHosts`.
    pub url: String,
    /// The header that carries the key (default `Authorization`).
    #[serde(default = "authorization")]
    pub header: String,
    /// Written before the key in that header, with a space (default `Bearer`; empty for none).
    #[serde(default = "bearer")]
    pub scheme: String,
}

fn authorization() -> String {
    "Authorization".into()
}

fn bearer() -> String {
    "Bearer".into()
}

/// How Steward signs a person in at an `oauth` integration's provider, as that provider's OAuth
/// client.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OauthSpec {
    /// The provider's authorization endpoint: the person's browser opens it (the session's
    /// `connectUrl`), so it need not be inside `allowedHosts`.
    pub authorize_url: String,
    /// The token endpoint (code exchange and refresh); inside `allowedHosts`.
    pub token_url: String,
    /// The revocation endpoint (RFC 7009), if the provider has one; inside `allowedHosts`.
    #[serde(default)]
    pub revoke_url: Option<String>,
    /// The scopes asked for, space-joined into `scope`.
    #[serde(default)]
    pub scopes: Vec<String>,
    pub client_id: String,
    /// The vault secret, in the environment that connects, holding the client secret.
    pub client_secret_name: String,
    /// The callback URL registered with the provider. Default: this server's
    /// `/api/v2/connections/callback` at the host the create-session request was sent to.
    #[serde(default)]
    pub redirect_uri: Option<String>,
}

/// One integration of the catalog.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Integration {
    pub id: String,
    pub name: String,
    pub auth_kind: AuthKind,
    /// Where the credential may be sent: the connected secret's `allowedHosts`.
    pub allowed_hosts: Vec<String>,
    /// For `api_key` integrations: how a key is checked.
    #[serde(default)]
    pub key_check: Option<KeyCheck>,
    /// For `oauth` integrations: how a person signs in.
    #[serde(default)]
    pub oauth: Option<OauthSpec>,
}

/// The catalog.
#[derive(Debug, Clone, Default)]
pub struct Integrations {
    list: Vec<Integration>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    integrations: Vec<Integration>,
}

impl Integrations {
    /// What a server offers without a catalog file.
    pub fn builtin() -> Integrations {
        let entry = |id: &str, name: &str, host: &str, url: &str| Integration {
            id: id.into(),
            name: name.into(),
            auth_kind: AuthKind::ApiKey,
            allowed_hosts: vec![host.into()],
            key_check: Some(KeyCheck {
                url: url.into(),
                header: authorization(),
                scheme: bearer(),
            }),
            oauth: None,
        };
        Integrations {
            list: vec![
                entry(
                    "github",
                    "GitHub",
                    "api.github.com",
                    "https://api.github.com/user",
                ),
                entry(
                    "stripe",
                    "Stripe",
                    "api.stripe.com",
                    "https://api.stripe.com/v1/account",
                ),
            ],
        }
    }

    /// Reads and checks a catalog file (`{"integrations": [...]}`).
    pub fn load(path: &Path) -> Result<Integrations, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let file: CatalogFile = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not an integrations catalog: {e}", path.display()))?;
        Integrations::checked(file.integrations)
    }

    /// A catalog from `list`, refused if an entry is inconsistent (a key check outside the
    /// integration's hosts would send the key elsewhere).
    pub fn checked(list: Vec<Integration>) -> Result<Integrations, String> {
        if list.len() > INTEGRATIONS_MAX {
            return Err(format!("more than {INTEGRATIONS_MAX} integrations"));
        }
        for (i, integration) in list.iter().enumerate() {
            if list[..i].iter().any(|other| other.id == integration.id) {
                return Err(format!("integration {} is listed twice", integration.id));
            }
            let valid_id = !integration.id.is_empty()
                && integration.id.len() <= 64
                && integration.id.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'
                });
            if !valid_id {
                return Err(format!(
                    "integration id {:?} must be 1 to 64 of [a-z0-9_-]",
                    integration.id
                ));
            }
            if integration.allowed_hosts.is_empty() {
                return Err(format!(
                    "integration {} names no allowedHosts",
                    integration.id
                ));
            }
            for host in &integration.allowed_hosts {
                HostRule::parse(host).map_err(|e| {
                    format!("integration {}: allowedHosts {host}: {e}", integration.id)
                })?;
            }
            match (integration.auth_kind, &integration.key_check) {
                (AuthKind::ApiKey, None) => {
                    return Err(format!(
                        "api_key integration {} has no keyCheck",
                        integration.id
                    ))
                }
                (_, Some(check)) => {
                    let url = url::Url::parse(&check.url).map_err(|e| {
                        format!("integration {}: keyCheck.url: {e}", integration.id)
                    })?;
                    let destination = url
                        .host_str()
                        .zip(url.port_or_known_default())
                        .and_then(|(host, port)| {
                            steward_core::Destination::new(
                                url.scheme(),
                                host.trim_matches(['[', ']']),
                                port,
                            )
                        })
                        .ok_or_else(|| {
                            format!("integration {}: keyCheck.url has no host", integration.id)
                        })?;
                    if !host_allowed(&integration.allowed_hosts, &destination) {
                        return Err(format!(
                            "integration {}: keyCheck.url is outside its allowedHosts",
                            integration.id
                        ));
                    }
                    reqwest::header::HeaderName::from_bytes(check.header.as_bytes()).map_err(
                        |_| {
                            format!(
                                "integration {}: keyCheck.header is not a header name",
                                integration.id
                            )
                        },
                    )?;
                }
                (AuthKind::Oauth, None) => {}
            }
            if let Some(oauth) = &integration.oauth {
                check_oauth(integration, oauth)?;
            }
        }
        Ok(Integrations { list })
    }

    pub fn all(&self) -> &[Integration] {
        &self.list
    }

    pub fn get(&self, id: &str) -> Option<&Integration> {
        self.list.iter().find(|i| i.id == id)
    }
}

/// An `oauth` block must sit on an `oauth` integration, name a well-formed client, and keep its
/// token and revocation endpoints inside the integration's hosts (the client secret and the
/// tokens go there).
fn check_oauth(integration: &Integration, oauth: &OauthSpec) -> Result<(), String> {
    let id = &integration.id;
    if integration.auth_kind != AuthKind::Oauth {
        return Err(format!(
            "integration {id}: an oauth block needs authKind oauth"
        ));
    }
    let inside = |field: &str, url: &str| -> Result<(), String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("integration {id}: {field}: {e}"))?;
        let destination = parsed
            .host_str()
            .zip(parsed.port_or_known_default())
            .and_then(|(host, port)| {
                steward_core::Destination::new(parsed.scheme(), host.trim_matches(['[', ']']), port)
            })
            .ok_or_else(|| format!("integration {id}: {field} has no host"))?;
        if host_allowed(&integration.allowed_hosts, &destination) {
            Ok(())
        } else {
            Err(format!(
                "integration {id}: {field} is outside its allowedHosts"
            ))
        }
    };
    inside("oauth.tokenUrl", &oauth.token_url)?;
    if let Some(revoke) = &oauth.revoke_url {
        inside("oauth.revokeUrl", revoke)?;
    }
    for (field, url) in [
        ("oauth.authorizeUrl", Some(&oauth.authorize_url)),
        ("oauth.redirectUri", oauth.redirect_uri.as_ref()),
    ] {
        let Some(url) = url else { continue };
        let parsed = url::Url::parse(url).map_err(|e| format!("integration {id}: {field}: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!("integration {id}: {field} must be an http(s) URL"));
        }
    }
    if oauth.client_id.is_empty() || oauth.client_id.len() > 256 {
        return Err(format!(
            "integration {id}: oauth.clientId must be 1 to 256 bytes"
        ));
    }
    if !steward_core::is_valid_secret_name(&oauth.client_secret_name) {
        return Err(format!(
            "integration {id}: oauth.clientSecretName must match ^[A-Z0-9_]+$"
        ));
    }
    if oauth.scopes.iter().any(|s| s.is_empty() || s.contains(' ')) {
        return Err(format!(
            "integration {id}: oauth.scopes must be words without spaces"
        ));
    }
    Ok(())
}

/// What the provider said of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyVerdict {
    /// It works.
    Accepted,
    /// The provider refused it (401 or 403): `reason` says so without the key.
    Rejected { reason: String },
    /// No answer either way (refused destination, network error, timeout, another status):
    /// `reason` says which.
    CheckFailed { reason: String },
}

/// Asks the provider whether `key` works, with the integration's key check.
pub async fn check_key(
    http: &reqwest::Client,
    outbound: OutboundPolicy,
    check: &KeyCheck,
    key: &str,
) -> KeyVerdict {
    let failed = |reason: String| KeyVerdict::CheckFailed { reason };
    if let Err(e) = outbound.check(&check.url).await {
        return failed(format!("the key check's destination was refused: {e}"));
    }
    let value = if check.scheme.is_empty() {
        key.to_string()
    } else {
        format!("{} {key}", check.scheme)
    };
    let Ok(mut value) = reqwest::header::HeaderValue::from_str(&value) else {
        return KeyVerdict::Rejected {
            reason: "the key holds characters no header can carry".into(),
        };
    };
    value.set_sensitive(true);
    let sent = http
        .get(&check.url)
        .header(check.header.as_str(), value)
        .timeout(Duration::from_millis(KEY_CHECK_TIMEOUT_MS))
        .send()
        .await;
    match sent {
        Ok(response) => match response.status().as_u16() {
            200..=299 => KeyVerdict::Accepted,
            status @ (401 | 403) => KeyVerdict::Rejected {
                reason: format!("the provider refused the key (HTTP {status})"),
            },
            status => failed(format!("the provider answered HTTP {status}")),
        },
        Err(e) if e.is_timeout() => failed(format!(
            "the provider did not answer within {KEY_CHECK_TIMEOUT_MS} ms"
        )),
        Err(_) => failed("the provider could not be reached".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(url: &str, hosts: &[&str]) -> Integration {
        Integration {
            id: "x".into(),
            name: "X".into(),
            auth_kind: AuthKind::ApiKey,
            allowed_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            key_check: Some(KeyCheck {
                url: url.into(),
                header: authorization(),
                scheme: bearer(),
            }),
            oauth: None,
        }
    }

    fn oauth_entry(token_url: &str) -> Integration {
        Integration {
            id: "o".into(),
            name: "O".into(),
            auth_kind: AuthKind::Oauth,
            allowed_hosts: vec!["a.test".into()],
            key_check: None,
            oauth: Some(OauthSpec {
                authorize_url: "https://login.test/authorize".into(),
                token_url: token_url.into(),
                revoke_url: None,
                scopes: vec!["write".into()],
                client_id: "client".into(),
                client_secret_name: "O_CLIENT_SECRET".into(),
                redirect_uri: None,
            }),
        }
    }

    #[test]
    fn an_oauth_token_endpoint_outside_the_integrations_hosts_is_refused() {
        assert!(Integrations::checked(vec![oauth_entry("https://a.test/token")]).is_ok());
        let err = Integrations::checked(vec![oauth_entry("https://b.test/token")]).unwrap_err();
        assert!(err.contains("oauth.tokenUrl is outside"), "{err}");
    }

    #[test]
    fn a_key_check_outside_the_integrations_hosts_is_refused() {
        assert!(Integrations::checked(vec![entry("https://a.test/me", &["a.test"])]).is_ok());
        let err = Integrations::checked(vec![entry("https://b.test/me", &["a.test"])]).unwrap_err();
        assert!(err.contains("outside"), "{err}");
        assert!(Integrations::builtin().get("stripe").is_some());
        Integrations::checked(Integrations::builtin().list).unwrap();
    }
}
