//! The edge of the router: checks made before any handler runs, and the safety net that turns
//! every error answer that is not already the JSON envelope into one.
//!
//! The explicit checks answer with a precise code: a body over [`JSON_BODY_BYTES_MAX`] (by its
//! `Content-Length`, before a byte of it is read) is `413 PAYLOAD_TOO_LARGE`, and a path whose
//! percent-encoding is not UTF-8 is `400 VALIDATION_ERROR` naming `path`. Query strings are
//! refused by [`super::query::Query`]. What axum itself answers in plain text (a streamed body
//! past the limit, a method the route does not take, a path parameter it cannot decode) is
//! rewritten here by status, so no answer of the API is ever anything but the envelope.

use crate::envelope::JSON_BODY_BYTES_MAX;
use crate::error::ApiError;
use axum::extract::Request;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// How much of a plain-text rejection is kept as the envelope's message, in bytes: axum's
/// rejection texts are one sentence; anything longer is cut.
const REJECTION_TEXT_BYTES_MAX: usize = 512;

/// The 413 answer, the same whether the size was declared or found while reading.
pub fn payload_too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "PAYLOAD_TOO_LARGE",
        format!("the request body must be at most {JSON_BODY_BYTES_MAX} bytes"),
    )
    .with_details(json!({ "limitBytes": JSON_BODY_BYTES_MAX }))
}

/// The middleware: the explicit checks, then the handler, then the safety net.
pub async fn envelope(request: Request, next: Next) -> Response {
    if declared_length(request.headers()).is_some_and(|n| n > JSON_BODY_BYTES_MAX as u64) {
        return payload_too_large().into_response();
    }
    if percent_decoded_is_not_utf8(request.uri().path()) {
        return ApiError::validation("path", "is not valid percent-encoded UTF-8").into_response();
    }
    let method = request.method().clone();
    let response = next.run(request).await;
    if is_envelope_or_success(&response) {
        return response;
    }
    into_envelope(response, &method).await
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn percent_decoded_is_not_utf8(path: &str) -> bool {
    percent_decode(path).is_some_and(|bytes| std::str::from_utf8(&bytes).is_err())
}

/// The bytes a path decodes to, or `None` when it has no escape at all (the common case).
fn percent_decode(path: &str) -> Option<Vec<u8>> {
    if !path.contains('%') {
        return None;
    }
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    Some(out)
}

fn is_envelope_or_success(response: &Response) -> bool {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return true;
    }
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// Rewrites a plain error answer as the envelope, keeping its status and headers such as
/// `Allow`; axum's own text, when there is some, becomes the message.
async fn into_envelope(response: Response, method: &Method) -> Response {
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, REJECTION_TEXT_BYTES_MAX)
        .await
        .ok()
        .and_then(|bytes| String::from_utf8(bytes.to_vec()).ok())
        .map(|text| text.trim().to_string())
        .filter(|text| !text.is_empty());
    let error = error_for(parts.status, method, text);
    parts.headers.remove(header::CONTENT_TYPE);
    parts.headers.remove(header::CONTENT_LENGTH);
    let mut answer = error.into_response();
    for (name, value) in parts.headers.drain().filter_map(|(n, v)| Some((n?, v))) {
        answer.headers_mut().entry(name).or_insert(value);
    }
    answer
}

/// The code of a 404 for a path no endpoint serves, so that a caller can tell "no such route"
/// (a wrong base URL, an older server) from `NOT_FOUND`, "no such record".
pub const ROUTE_NOT_FOUND: &str = "ROUTE_NOT_FOUND";

/// The answer for a path no endpoint serves.
pub fn no_such_route(method: &Method, path: &str) -> ApiError {
    // The path is echoed cut and as given: it is the caller's own request, never a secret of
    // ours, but it is bounded like any text the server repeats.
    let shown: String = path.chars().take(200).collect();
    ApiError::new(
        StatusCode::NOT_FOUND,
        ROUTE_NOT_FOUND,
        format!("no endpoint serves {method} {shown}"),
    )
    .with_details(serde_json::json!({"method": method.as_str(), "path": shown}))
}

/// The envelope for a plain error answer of `status`.
fn error_for(status: StatusCode, method: &Method, text: Option<String>) -> ApiError {
    let message = |default: &str| text.clone().unwrap_or_else(|| default.to_string());
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => payload_too_large(),
        StatusCode::METHOD_NOT_ALLOWED => ApiError::new(
            status,
            "METHOD_NOT_ALLOWED",
            format!("this endpoint does not accept {method}"),
        ),
        StatusCode::NOT_FOUND => {
            ApiError::new(status, ROUTE_NOT_FOUND, message("no such endpoint"))
        }
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(
            status,
            "UNSUPPORTED_MEDIA_TYPE",
            message("unsupported content type"),
        ),
        StatusCode::REQUEST_TIMEOUT => ApiError::new(
            status,
            "REQUEST_TIMEOUT",
            message("the request took too long"),
        ),
        s if s.is_client_error() => ApiError::new(
            status,
            "BAD_REQUEST",
            message("the request could not be read"),
        ),
        _ => {
            tracing::error!(status = status.as_u16(), text = ?text, "plain error answer");
            ApiError::new(status, "INTERNAL_ERROR", "internal error")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_refused_only_when_its_escapes_are_not_utf8() {
        assert!(percent_decoded_is_not_utf8("/api/v2/actions/%FF"));
        assert!(percent_decoded_is_not_utf8("/%c3%28"));
        assert!(!percent_decoded_is_not_utf8("/api/v2/actions/caf%C3%A9"));
        assert!(!percent_decoded_is_not_utf8("/api/v2/actions/refund"));
        assert!(
            !percent_decoded_is_not_utf8("/100%"),
            "a lone % is left as it is"
        );
    }

    #[test]
    fn every_plain_status_maps_to_an_envelope_code() {
        let cases = [
            (StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE"),
            (StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED"),
            (StatusCode::NOT_FOUND, "ROUTE_NOT_FOUND"),
            (StatusCode::BAD_REQUEST, "BAD_REQUEST"),
            (StatusCode::UNPROCESSABLE_ENTITY, "BAD_REQUEST"),
            (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
        ];
        for (status, code) in cases {
            let error = error_for(status, &Method::GET, Some("text".into()));
            assert_eq!((error.status, error.code), (status, code));
        }
    }
}
