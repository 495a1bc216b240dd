//! The write guard: a middleware in front of every console POST. A write is let through only
//! when it comes from a page of this origin, carries the session's CSRF token, and the console
//! is not read-only; anything else is 403 before the handler runs, so nothing changes.
//!
//! `SameSite=Strict` keeps the cookie off requests started by other *sites*, but a page on
//! another port of the same host is the same site: it gets the cookie. `Origin` and
//! `Sec-Fetch-Site` tell the origin (scheme, host and port) apart, and the CSRF token, which
//! such a page cannot read, is the second check.

use super::session::{csrf_token, token_from};
use super::{layout, ConsoleMode, FORM_BODY_BYTES_MAX};
use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

/// The sign-in form: checked for its origin, but there is no session (and no token) yet.
const LOGIN_PATH: &str = "/console/login";
/// Sign-out is allowed in a read-only console: it only ends the caller's own session.
const LOGOUT_PATH: &str = "/console/logout";

/// Why a write was refused. Each is a 403; none names a secret.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error("this request came from another site or another port (Sec-Fetch-Site: {0})")]
    CrossSite(String),
    #[error("this request came from another origin ({origin}); the console is at {host}")]
    ForeignOrigin { origin: String, host: String },
    #[error("this request names an origin but no host")]
    NoHost,
    #[error("this console is read-only (steward serve --console-read-only)")]
    ReadOnly,
    #[error("not signed in")]
    NoSession,
    #[error("the form's CSRF token is missing or does not match this session; reload the page")]
    BadCsrf,
}

/// Checks that a write comes from this origin. A browser sends `Sec-Fetch-Site` and `Origin`
/// with every form POST; both are checked when present. A client that sends neither is not a
/// browser acting for a page of another origin, and still needs the CSRF token.
pub fn same_origin(headers: &HeaderMap) -> Result<(), Refusal> {
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = String::from_utf8_lossy(site.as_bytes()).into_owned();
        // `none`: the user started it (typed, bookmarked), never another page.
        if site != "same-origin" && site != "none" {
            return Err(Refusal::CrossSite(site));
        }
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
    let host = headers
        .get(header::HOST)
        .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
        .ok_or(Refusal::NoHost)?;
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    match authority {
        // Host and port both: `Host` carries the port the browser connected to.
        Some(authority) if authority.eq_ignore_ascii_case(&host) => Ok(()),
        _ => Err(Refusal::ForeignOrigin { origin, host }),
    }
}

/// Checks the form's `csrf` field against the session token's, in constant time.
pub fn csrf_matches(session_token: &str, form: &[u8]) -> Result<(), Refusal> {
    let expected = csrf_token(session_token);
    let given = form_urlencoded::parse(form)
        .find(|(name, _)| name == "csrf")
        .map(|(_, value)| value.into_owned())
        .ok_or(Refusal::BadCsrf)?;
    if bool::from(given.as_bytes().ct_eq(expected.as_bytes())) {
        Ok(())
    } else {
        Err(Refusal::BadCsrf)
    }
}

/// The middleware (see the module documentation).
pub async fn writes(mode: ConsoleMode, request: Request, next: Next) -> Response {
    if matches!(*request.method(), Method::GET | Method::HEAD) {
        return next.run(request).await;
    }
    if let Err(refusal) = same_origin(request.headers()) {
        return refused(refusal);
    }
    let path = request.uri().path();
    if path == LOGIN_PATH {
        return next.run(request).await;
    }
    if !mode.writable() && path != LOGOUT_PATH {
        return refused(Refusal::ReadOnly);
    }
    let Some(token) = token_from(request.headers()) else {
        return refused(Refusal::NoSession);
    };
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, FORM_BODY_BYTES_MAX).await else {
        return layout::message_page(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Too large",
            &format!("a console form is at most {FORM_BODY_BYTES_MAX} bytes"),
        )
        .into_response();
    };
    if let Err(refusal) = csrf_matches(&token, &bytes) {
        return refused(refusal);
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

fn refused(refusal: Refusal) -> Response {
    tracing::warn!(reason = %refusal, "console write refused");
    layout::message_page(StatusCode::FORBIDDEN, "Refused", &refusal.to_string()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::session::new_token;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn writes_from_this_origin_pass() {
        for pairs in [
            vec![
                ("host", "127.0.0.1:8080"),
                ("origin", "http://127.0.0.1:8080"),
                ("sec-fetch-site", "same-origin"),
            ],
            vec![
                ("host", "localhost:8080"),
                ("origin", "http://LOCALHOST:8080"),
            ],
            vec![
                ("host", "steward.example"),
                ("origin", "https://steward.example"),
            ],
            vec![("host", "127.0.0.1:8080"), ("sec-fetch-site", "none")],
            // Not a browser: no page of another origin is involved; the CSRF token still is.
            vec![("host", "127.0.0.1:8080")],
        ] {
            assert_eq!(same_origin(&headers(&pairs)), Ok(()), "{pairs:?}");
        }
    }

    #[test]
    fn other_sites_and_other_localhost_ports_are_refused() {
        let cases: Vec<(Vec<(&'static str, &str)>, Refusal)> = vec![
            (
                vec![
                    ("host", "127.0.0.1:8080"),
                    ("origin", "http://127.0.0.1:9999"),
                    ("sec-fetch-site", "same-site"),
                ],
                Refusal::CrossSite("same-site".into()),
            ),
            (
                vec![("host", "127.0.0.1:8080"), ("sec-fetch-site", "cross-site")],
                Refusal::CrossSite("cross-site".into()),
            ),
            (
                // An older browser without Fetch Metadata: Origin alone tells the port apart.
                vec![
                    ("host", "127.0.0.1:8080"),
                    ("origin", "http://127.0.0.1:9999"),
                ],
                Refusal::ForeignOrigin {
                    origin: "http://127.0.0.1:9999".into(),
                    host: "127.0.0.1:8080".into(),
                },
            ),
            (
                vec![
                    ("host", "127.0.0.1:8080"),
                    ("origin", "http://evil.example"),
                ],
                Refusal::ForeignOrigin {
                    origin: "http://evil.example".into(),
                    host: "127.0.0.1:8080".into(),
                },
            ),
            (
                vec![("host", "127.0.0.1:8080"), ("origin", "null")],
                Refusal::ForeignOrigin {
                    origin: "null".into(),
                    host: "127.0.0.1:8080".into(),
                },
            ),
            (vec![("origin", "http://127.0.0.1:8080")], Refusal::NoHost),
        ];
        for (pairs, refusal) in cases {
            assert_eq!(same_origin(&headers(&pairs)), Err(refusal), "{pairs:?}");
        }
    }

    #[test]
    fn the_csrf_field_must_be_this_sessions_token() {
        let (mine, other) = (new_token(), new_token());
        let form = |csrf: &str| format!("note=hi&csrf={csrf}&x=1");
        assert_eq!(
            csrf_matches(&mine, form(&csrf_token(&mine)).as_bytes()),
            Ok(())
        );
        assert_eq!(
            csrf_matches(&mine, form(&csrf_token(&other)).as_bytes()),
            Err(Refusal::BadCsrf)
        );
        assert_eq!(csrf_matches(&mine, b"note=hi"), Err(Refusal::BadCsrf));
        assert_eq!(
            csrf_matches(&mine, form("").as_bytes()),
            Err(Refusal::BadCsrf)
        );
        let truncated = &csrf_token(&mine)[..10];
        assert_eq!(
            csrf_matches(&mine, form(truncated).as_bytes()),
            Err(Refusal::BadCsrf)
        );
    }
}
