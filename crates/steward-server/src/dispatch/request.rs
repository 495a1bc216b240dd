//! The outgoing HTTP request, built whole from a [`Prepared`] request.
//!
//! It is built once when the request is checked (write path step 2, before any attempt exists)
//! and again to send it. A URL, method, header name, header value or body that HTTP cannot carry
//! (a CR, LF or NUL in a header value from the input or from a secret, an invalid header name,
//! a URL that is no HTTP request target) is therefore refused before anything is recorded: the
//! invocation is `failed`, provably not sent, and holds no impact reservation. Were a build to
//! fail after the attempt is recorded all the same, nothing was sent either: the attempt is
//! classified as never sent (`AttemptReport::NotBuilt`), never `unknown`.

use super::prepared::{Blocked, Prepared, PreparedBody};
use axum::http::Uri;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use std::time::Duration;

/// The code of a request that HTTP cannot carry.
pub const REQUEST_INVALID: &str = "request_invalid";

/// Builds the request `prepared` describes, with the dispatch deadline. `Err` says, without any
/// secret value or URL, why it cannot be sent.
pub fn build(
    client: &reqwest::Client,
    prepared: &Prepared,
    timeout: Duration,
) -> Result<reqwest::Request, Blocked> {
    let url = reqwest::Url::parse(&prepared.url)
        .map_err(|_| Blocked::new(REQUEST_INVALID, "the request URL is not a valid URL"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Blocked::new(
            REQUEST_INVALID,
            "the request URL is not an http or https URL",
        ));
    }
    // What the HTTP client does with the URL when it sends (reqwest's `try_uri`).
    if url.as_str().parse::<Uri>().is_err() {
        return Err(Blocked::new(
            REQUEST_INVALID,
            "the request URL cannot be sent as an HTTP request target (too long or malformed)",
        ));
    }
    let secrets = prepared.secret_values();
    let mut headers = HeaderMap::new();
    for (name, value) in &prepared.headers {
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            Blocked::new(
                REQUEST_INVALID,
                format!("the request header name {name:?} is not a valid HTTP header name"),
            )
        })?;
        let mut header_value = HeaderValue::from_bytes(value.as_bytes()).map_err(|_| {
            Blocked::new(
                REQUEST_INVALID,
                format!(
                    "the value of request header {header} has a character HTTP forbids in a \
                     header (CR, LF, NUL or another control character), from the input or a \
                     secret"
                ),
            )
        })?;
        if secrets
            .iter()
            .any(|s| !s.is_empty() && value.contains(s.as_str()))
        {
            // Kept out of the client's own debug output.
            header_value.set_sensitive(true);
        }
        headers.append(header, header_value);
    }
    let builder = client
        .request(prepared.method.clone(), url)
        .timeout(timeout)
        .headers(headers);
    let builder = match &prepared.body {
        Some(PreparedBody::Json(v)) => builder.json(v),
        Some(PreparedBody::Form(f)) => builder
            .header(
                CONTENT_TYPE,
                HeaderValue::from_static("application/x-www-form-urlencoded"),
            )
            .body(f.clone()),
        None => builder,
    };
    builder.build().map_err(|e| {
        let why = steward_core::redact(&super::transport::describe(e), &secrets);
        Blocked::new(
            REQUEST_INVALID,
            format!("the request could not be built: {why}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared(url: &str, headers: &[(&str, &str)]) -> Prepared {
        Prepared {
            method: reqwest::Method::POST,
            url: url.to_string(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: Some(PreparedBody::Json(serde_json::json!({"a": 1}))),
            secrets: Vec::new(),
            adapter: None,
        }
    }

    fn built(p: &Prepared) -> Result<reqwest::Request, Blocked> {
        build(&reqwest::Client::new(), p, Duration::from_secs(1))
    }

    #[test]
    fn a_header_value_with_cr_lf_or_nul_is_refused_before_anything_is_recorded() {
        for value in ["a\r\nX-Evil: 1", "a\nb", "a\rb", "a\0b", "a\u{7f}b"] {
            let refused =
                built(&prepared("https://a.example/x", &[("X-Note", value)])).expect_err(value);
            assert_eq!(refused.code, REQUEST_INVALID);
            assert!(!refused.message.contains(value), "{}", refused.message);
        }
        for name in ["X Note", "X-Note:", "", "X\r\nY"] {
            let refused = built(&prepared("https://a.example/x", &[(name, "v")])).expect_err(name);
            assert_eq!(refused.code, REQUEST_INVALID);
        }
        assert!(built(&prepared("ftp://a.example/x", &[])).is_err());
        assert!(built(&prepared("not a url", &[])).is_err());
    }

    #[test]
    fn a_request_http_can_carry_is_built_whole() {
        let request = built(&prepared(
            "https://a.example/x?q=%20",
            &[("X-Note", "tab\tand ünïcode"), ("X-Note", "twice")],
        ))
        .unwrap();
        assert_eq!(request.headers().get_all("x-note").iter().count(), 2);
        assert_eq!(request.url().as_str(), "https://a.example/x?q=%20");
        assert!(request.body().is_some());
    }
}
