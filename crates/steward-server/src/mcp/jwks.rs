//! An OAuth issuer's signing keys (its JWKS), fetched over HTTP and cached, for `oauth.rs`.
//!
//! The keys are read from the configured `jwksUri`, or found through the issuer's metadata
//! (RFC 8414 at `/.well-known/oauth-authorization-server{path}`, then OpenID Connect discovery
//! at `{issuer}/.well-known/openid-configuration`; the document must name the same issuer).
//! A key set is used for [`JWKS_MAX_AGE_S`]; a token naming a key the set lacks (the issuer
//! rotated) fetches again, at most once per [`JWKS_REFETCH_INTERVAL_S`], so a stream of tokens
//! with made-up key ids costs the issuer one request per interval. When a fetch fails, the keys
//! last fetched keep verifying; with none, the request is answered `503 issuer_unavailable`.
//!
//! Only `https` URLs are fetched, or `http` to a loopback host (a local issuer, as in tests).
//! Redirects are not followed, each fetch is bounded in time ([`FETCH_TIMEOUT_MS`]) and size
//! ([`DOCUMENT_BYTES_MAX`]). Tokens are never sent anywhere: only these public documents are
//! read.

use jsonwebtoken::jwk::{Jwk, JwkSet};
use std::time::Duration;
use steward_core::Millis;
use tokio::sync::Mutex;
use url::Url;

/// How long a fetched key set is used before it is fetched again, in seconds: an issuer's
/// removed key stops verifying within this long.
pub const JWKS_MAX_AGE_S: i64 = 300;

/// The shortest time between two fetches of one issuer's keys, in seconds: what an unknown key
/// id (or a failing issuer) can cost it.
pub const JWKS_REFETCH_INTERVAL_S: i64 = 30;

/// How long one fetch of a metadata document or a key set may take, in milliseconds: a request
/// waiting on it waits at most this long.
pub const FETCH_TIMEOUT_MS: u64 = 5_000;

/// The largest metadata document or key set read, in bytes: real ones are a few KiB.
pub const DOCUMENT_BYTES_MAX: usize = 256 * 1024;

/// Why an issuer's keys could not be had.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{url}: {message}")]
    Http { url: String, message: String },
    #[error("{0}: not https, nor http to a loopback host")]
    NotAllowed(String),
    #[error("{url}: the metadata names issuer {named:?}, not this one")]
    OtherIssuer { url: String, named: String },
    #[error("no metadata document of the issuer names a jwks_uri")]
    NoMetadata,
}

/// True for the URLs this module fetches (and the configuration accepts): `https`, or `http`
/// to a loopback host.
pub fn allowed(url: &Url) -> bool {
    match url.scheme() {
        "https" => true,
        "http" => match url.host() {
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        },
        _ => false,
    }
}

struct Cached {
    set: Option<JwkSet>,
    fetched_at: Millis,
    attempted_at: Option<Millis>,
}

/// One issuer's keys.
pub struct Keys {
    issuer: String,
    jwks_uri: Option<Url>,
    http: reqwest::Client,
    cached: Mutex<Cached>,
}

impl Keys {
    /// The keys of `issuer`, read from `jwks_uri` or, without one, found through its metadata.
    pub fn new(issuer: &str, jwks_uri: Option<Url>) -> Result<Keys, reqwest::Error> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_millis(FETCH_TIMEOUT_MS))
            .build()?;
        Ok(Keys {
            issuer: issuer.to_string(),
            jwks_uri,
            http,
            cached: Mutex::new(Cached {
                set: None,
                fetched_at: Millis(0),
                attempted_at: None,
            }),
        })
    }

    /// The key `kid` names, or (when the token names none) the set's only key; `Ok(None)` when
    /// there is no such key.
    pub async fn find(&self, kid: Option<&str>, now: Millis) -> Result<Option<Jwk>, FetchError> {
        // Held across a fetch: concurrent requests wait for the one fetch instead of each
        // making their own.
        let mut cached = self.cached.lock().await;
        let age_s = |at: Millis| (now.0 - at.0) / 1_000;
        if let Some(set) = &cached.set {
            let found = pick(set, kid);
            if age_s(cached.fetched_at) < JWKS_MAX_AGE_S && found.is_some() {
                return Ok(found);
            }
        }
        let recently = cached
            .attempted_at
            .is_some_and(|at| age_s(at) < JWKS_REFETCH_INTERVAL_S);
        if !recently {
            cached.attempted_at = Some(now);
            match self.fetch().await {
                Ok(set) => {
                    cached.set = Some(set);
                    cached.fetched_at = now;
                }
                Err(e) if cached.set.is_some() => {
                    tracing::warn!(error = %e, issuer = %self.issuer, "could not fetch the issuer's keys again; the keys fetched before still verify");
                }
                Err(e) => return Err(e),
            }
        }
        match &cached.set {
            Some(set) => Ok(pick(set, kid)),
            None => Err(FetchError::Http {
                url: self.issuer.clone(),
                message: format!(
                    "no keys yet; the next fetch is at most {JWKS_REFETCH_INTERVAL_S} s away"
                ),
            }),
        }
    }

    async fn fetch(&self) -> Result<JwkSet, FetchError> {
        let uri = match &self.jwks_uri {
            Some(uri) => uri.clone(),
            None => self.discover().await?,
        };
        let body = self.get(&uri).await?;
        serde_json::from_slice(&body).map_err(|e| FetchError::Http {
            url: uri.to_string(),
            message: format!("not a JWK set: {e}"),
        })
    }

    /// The `jwks_uri` the issuer's metadata names.
    async fn discover(&self) -> Result<Url, FetchError> {
        #[derive(serde::Deserialize)]
        struct Metadata {
            issuer: String,
            jwks_uri: Option<String>,
        }
        for url in metadata_urls(&self.issuer) {
            let Ok(body) = self.get(&url).await else {
                continue;
            };
            let Ok(metadata) = serde_json::from_slice::<Metadata>(&body) else {
                continue;
            };
            if metadata.issuer != self.issuer {
                return Err(FetchError::OtherIssuer {
                    url: url.to_string(),
                    named: metadata.issuer,
                });
            }
            let Some(jwks_uri) = metadata.jwks_uri.and_then(|u| Url::parse(&u).ok()) else {
                continue;
            };
            if !allowed(&jwks_uri) {
                return Err(FetchError::NotAllowed(jwks_uri.to_string()));
            }
            return Ok(jwks_uri);
        }
        Err(FetchError::NoMetadata)
    }

    /// A bounded GET of a public document.
    async fn get(&self, url: &Url) -> Result<Vec<u8>, FetchError> {
        if !allowed(url) {
            return Err(FetchError::NotAllowed(url.to_string()));
        }
        let failed = |message: String| FetchError::Http {
            url: url.to_string(),
            message,
        };
        let mut response = self
            .http
            .get(url.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| failed(e.to_string()))?;
        if !response.status().is_success() {
            return Err(failed(format!("answered {}", response.status())));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| failed(e.to_string()))? {
            if body.len() + chunk.len() > DOCUMENT_BYTES_MAX {
                return Err(failed(format!("larger than {DOCUMENT_BYTES_MAX} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// Where an issuer's metadata may be: RFC 8414's path-inserted well-known URL, then OpenID
/// Connect's appended one.
fn metadata_urls(issuer: &str) -> Vec<Url> {
    let Ok(url) = Url::parse(issuer) else {
        return Vec::new();
    };
    let path = url.path().trim_end_matches('/');
    let mut rfc8414 = url.clone();
    rfc8414.set_path(&format!("/.well-known/oauth-authorization-server{path}"));
    let mut oidc = url.clone();
    oidc.set_path(&format!("{path}/.well-known/openid-configuration"));
    vec![rfc8414, oidc]
}

/// The key `kid` names; without a `kid`, the only key of the set.
fn pick(set: &JwkSet, kid: Option<&str>) -> Option<Jwk> {
    match kid {
        Some(kid) => set.find(kid).cloned(),
        None if set.keys.len() == 1 => set.keys.first().cloned(),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn fetches(fixture: &steward_fixture::FixtureHandle) -> u64 {
        let control: serde_json::Value =
            reqwest::get(format!("{}/issuer/_control", fixture.base_url()))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
        control["jwksFetches"].as_u64().unwrap()
    }

    #[tokio::test]
    async fn keys_are_discovered_cached_and_refetched_at_most_once_per_interval() {
        let fixture = steward_fixture::spawn(steward_fixture::FixtureConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            state_file: None,
        })
        .await
        .unwrap();
        let issuer = format!("{}/issuer", fixture.base_url());
        let keys = Keys::new(&issuer, None).unwrap();
        let at = |s: i64| Millis(1_000_000_000 + s * 1_000);
        // Found through the RFC 8414 metadata; the only key serves a token naming none.
        let key = keys
            .find(None, at(0))
            .await
            .unwrap()
            .expect("the issuer's key");
        let kid = key.common.key_id.clone().expect("a kid");
        assert_eq!(fetches(&fixture).await, 1);
        // A known key within the age is served from the cache.
        assert!(keys.find(Some(&kid), at(1)).await.unwrap().is_some());
        // An unknown key id fetches again, but not within the refetch interval of the last.
        assert!(keys.find(Some("made-up"), at(2)).await.unwrap().is_none());
        assert_eq!(fetches(&fixture).await, 1);
        let later = JWKS_REFETCH_INTERVAL_S + 1;
        assert!(keys
            .find(Some("made-up"), at(later))
            .await
            .unwrap()
            .is_none());
        assert!(keys
            .find(Some("made-up"), at(later + 1))
            .await
            .unwrap()
            .is_none());
        assert_eq!(fetches(&fixture).await, 2);
        // Past the age, a known key is fetched again.
        let stale = later + JWKS_MAX_AGE_S;
        assert!(keys.find(Some(&kid), at(stale)).await.unwrap().is_some());
        assert_eq!(fetches(&fixture).await, 3);
        // An issuer that publishes no metadata has no keys: an error, not an empty set.
        let nobody = Keys::new(&format!("{}/nobody", fixture.base_url()), None).unwrap();
        assert!(nobody.find(None, at(0)).await.is_err());
        fixture.shutdown().await;
    }

    #[test]
    fn only_https_or_loopback_http_is_fetched() {
        for ok in [
            "https://issuer.example/jwks",
            "http://127.0.0.1:9/jwks",
            "http://localhost/jwks",
            "http://[::1]:8/jwks",
        ] {
            assert!(allowed(&Url::parse(ok).unwrap()), "{ok}");
        }
        for refused in [
            "http://issuer.example/jwks",
            "http://10.0.0.1/jwks",
            "file:///etc/passwd",
        ] {
            assert!(!allowed(&Url::parse(refused).unwrap()), "{refused}");
        }
    }

    #[test]
    fn metadata_is_looked_for_path_inserted_then_appended() {
        let urls: Vec<String> = metadata_urls("http://127.0.0.1:9/issuer")
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            urls,
            [
                "http://127.0.0.1:9/.well-known/oauth-authorization-server/issuer",
                "http://127.0.0.1:9/issuer/.well-known/openid-configuration",
            ]
        );
        let root: Vec<String> = metadata_urls("https://as.example")
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            root,
            [
                "https://as.example/.well-known/oauth-authorization-server",
                "https://as.example/.well-known/openid-configuration",
            ]
        );
    }
}
