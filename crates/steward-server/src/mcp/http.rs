//! Streamable HTTP at `/mcp`: stateless (no sessions, a JSON answer per request), so any
//! replica answers any request. Before rmcp sees a request, [`guard`] checks, in this order:
//!
//! 1. `Host` (DNS rebinding): a loopback name (`localhost`, `127.0.0.0/8`, `::1`), the
//!    address the server listens on (when it is not the unspecified address), or a name the
//!    operator allowed (`steward serve --mcp-allowed-host`), any port; anything else, or no
//!    `Host`, is `403 host_not_allowed`.
//! 2. `Origin`, when present: its `host:port` must be the request's `Host`; otherwise
//!    `403 origin_not_allowed` (a browser page of another site may not drive the tools).
//! 3. The bearer: an agent key, or with `--mcp-oauth` an OAuth access token (`oauth.rs`).
//!    Missing, unknown, revoked, expired or invalid is `401`, with `WWW-Authenticate: Bearer`
//!    (naming the resource metadata when OAuth is configured).
//!
//! Then [`well_formed`] answers a POST whose body is not one JSON-RPC message rmcp can read
//! with the JSON-RPC error the specification names (`message.rs`). Only POST is served: a GET
//! (the optional server-to-client stream) or a DELETE is `405`, so no request on `/mcp` stays
//! open longer than a `tools/call`, which the dispatch deadline bounds.

use super::handler::Handler;
use super::message;
use super::oauth::OAuth;
use crate::error::ApiError;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::net::IpAddr;
use std::sync::Arc;

/// The path the MCP endpoint is served at.
pub const PATH: &str = "/mcp";

/// The host names `/mcp` answers to (see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct Hosts {
    listen: Option<IpAddr>,
    /// Further host names, lower case, as the operator allowed them.
    names: Vec<String>,
}

/// Why an allowed host name was refused at start-up.
#[derive(Debug, thiserror::Error)]
#[error("--mcp-allowed-host {0:?} must be a host name or an IPv4 address, without a port")]
pub struct InvalidHostName(pub String);

impl Hosts {
    /// `listen`: the address the server is bound to, if known; `names`: further host names
    /// (a public name behind which Steward is deployed).
    pub fn new(listen: Option<IpAddr>, names: &[String]) -> Result<Hosts, InvalidHostName> {
        let names = names
            .iter()
            .map(|n| {
                let valid = !n.is_empty()
                    && n.len() <= 253
                    && n.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
                if valid {
                    Ok(n.to_ascii_lowercase())
                } else {
                    Err(InvalidHostName(n.clone()))
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Hosts {
            listen: listen.filter(|ip| !ip.is_unspecified()),
            names,
        })
    }

    /// True when `authority` (a `Host` header value) names this server.
    pub fn allows(&self, authority: &str) -> bool {
        let name = host_name(authority);
        let named = self.names.iter().any(|n| n.eq_ignore_ascii_case(name));
        named
            || match name.parse::<IpAddr>() {
                Ok(ip) => ip.is_loopback() || Some(ip) == self.listen,
                Err(_) => name.eq_ignore_ascii_case("localhost"),
            }
    }
}

/// The host part of `host[:port]` or `[v6][:port]`.
fn host_name(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default();
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

/// The `/mcp` route, guarded.
pub fn route(state: AppState, settings: super::Settings) -> Router<AppState> {
    let super::Settings { hosts, keys, oauth } = settings;
    let mut config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    config.legacy_session_mode = false;
    config.json_response = true;
    config.max_request_body_bytes = crate::envelope::JSON_BODY_BYTES_MAX;
    let handler_state = state.clone();
    let service = StreamableHttpService::new(
        move || {
            Ok(Handler {
                state: handler_state.clone(),
                keys,
            })
        },
        Arc::new(NeverSessionManager::default()),
        config,
    );
    Router::new()
        .route_service(PATH, service)
        .route_layer(middleware::from_fn(well_formed))
        .route_layer(middleware::from_fn_with_state(
            (state, Arc::new(hosts), oauth.clone()),
            guard,
        ))
        .merge(super::oauth::routes(oauth))
}

fn forbidden(code: &'static str, message: &str) -> Response {
    ApiError::new(StatusCode::FORBIDDEN, code, message).into_response()
}

/// The checks the module documentation lists, then the request.
async fn guard(
    State((state, hosts, oauth)): State<(AppState, Arc<Hosts>, Option<Arc<OAuth>>)>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let Some(host) = host.filter(|h| hosts.allows(h)) else {
        return forbidden(
            "host_not_allowed",
            "this Host is not one this server answers MCP requests for",
        );
    };
    if let Some(origin) = headers.get(header::ORIGIN) {
        if !same_host(origin, host) {
            return forbidden(
                "origin_not_allowed",
                "the Origin is not this server; cross-site requests may not call tools",
            );
        }
    }
    let principal = match super::oauth::authenticate(&state, oauth.as_deref(), headers).await {
        Ok(principal) => principal,
        Err(refusal) => return refusal,
    };
    // The request's one authentication: the handler reads the principal from here
    // (`handler.rs`), and the invoke it makes does not authenticate again.
    let mut request = request;
    request.extensions_mut().insert(principal);
    next.run(request).await
}

/// A POST's body, checked as `message.rs` says before rmcp reads it; a refused one is answered
/// with its JSON-RPC error.
async fn well_formed(request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if let Some(refusal) = message::content_type(content_type) {
        return refused(&refusal);
    }
    let (parts, body) = request.into_parts();
    let bytes_max = crate::envelope::JSON_BODY_BYTES_MAX;
    let Ok(bytes) = axum::body::to_bytes(body, bytes_max).await else {
        return refused(&message::too_large(bytes_max));
    };
    if let Some(refusal) = message::check(&bytes) {
        return refused(&refusal);
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

fn refused(refusal: &message::Refusal) -> Response {
    let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::BAD_REQUEST);
    (status, axum::Json(refusal.body())).into_response()
}

/// True when `origin` (`scheme://host[:port]`) names the same `host[:port]` as `host`.
fn same_host(origin: &HeaderValue, host: &str) -> bool {
    origin
        .to_str()
        .ok()
        .and_then(|o| url::Url::parse(o).ok())
        .is_some_and(|url| {
            let authority = match (url.host_str(), url.port()) {
                (Some(h), Some(p)) => format!("{h}:{p}"),
                (Some(h), None) => h.to_string(),
                _ => return false,
            };
            authority.eq_ignore_ascii_case(host)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_the_listen_address_are_allowed_and_nothing_else() {
        let hosts = Hosts::new(Some("10.0.0.5".parse().unwrap()), &[]).unwrap();
        for ok in [
            "localhost",
            "LOCALHOST:8080",
            "127.0.0.1",
            "127.0.0.1:9",
            "[::1]:80",
            "10.0.0.5:8080",
        ] {
            assert!(hosts.allows(ok), "{ok}");
        }
        for refused in [
            "evil.example",
            "evil.example:8080",
            "10.0.0.6",
            "localhost.evil.example",
            "",
        ] {
            assert!(!hosts.allows(refused), "{refused}");
        }
    }

    #[test]
    fn an_unspecified_listen_address_allows_only_loopback() {
        let hosts = Hosts::new(Some("0.0.0.0".parse().unwrap()), &[]).unwrap();
        assert!(!hosts.allows("0.0.0.0"));
        assert!(hosts.allows("127.0.0.1"));
    }

    #[test]
    fn an_allowed_host_name_is_accepted_on_any_port_and_only_that_name() {
        let names = ["Steward.Example.com".to_string()];
        let hosts = Hosts::new(Some("0.0.0.0".parse().unwrap()), &names).unwrap();
        assert!(hosts.allows("steward.example.com"));
        assert!(hosts.allows("STEWARD.example.com:443"));
        assert!(!hosts.allows("evil.example.com"));
        assert!(!hosts.allows("steward.example.com.evil.test"));
        for bad in ["", "host:8080", "a/b", "[::1]"] {
            assert!(Hosts::new(None, &[bad.to_string()]).is_err(), "{bad}");
        }
    }

    #[test]
    fn origin_must_name_the_same_host_and_port() {
        let origin = |o: &str| HeaderValue::from_str(o).unwrap();
        assert!(same_host(
            &origin("http://127.0.0.1:8080"),
            "127.0.0.1:8080"
        ));
        assert!(!same_host(
            &origin("http://127.0.0.1:8081"),
            "127.0.0.1:8080"
        ));
        assert!(!same_host(
            &origin("https://evil.example"),
            "127.0.0.1:8080"
        ));
        assert!(!same_host(&origin("null"), "127.0.0.1:8080"));
    }
}
