//! Every error the router answers is the JSON envelope with a code: bodies past the one limit,
//! undecodable paths, bad query strings and wrong methods included.

use crate::harness::{world, TOKEN};
use axum::body::Body;
use axum::http::Request;
use serde_json::Value;
use std::time::Duration;
use steward_server::app;
use tower::ServiceExt;

/// The one body limit, in bytes (`JSON_BODY_BYTES_MAX`).
const BODY_BYTES_MAX: usize = 1024 * 1024;

async fn send(state: &steward_server::AppState, request: Request<Body>) -> (u16, Value, String) {
    let response = app(state.clone()).oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).to_string()));
    (status, body, content_type)
}

fn authorized(method: &str, uri: &str) -> axum::http::request::Builder {
    Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {TOKEN}"))
}

/// The envelope with `code`; returns the error object.
fn envelope(answer: &(u16, Value, String), status: u16, code: &str) -> Value {
    let (got, body, content_type) = answer;
    assert_eq!(*got, status, "{body}");
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}: {body}"
    );
    assert_eq!(body["success"], false, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(body["error"]["message"].is_string(), "{body}");
    body["error"].clone()
}

#[tokio::test]
async fn bodies_over_the_limit_answer_the_413_envelope_declared_or_streamed() {
    let w = world(Duration::from_secs(5), None).await;
    for size in [BODY_BYTES_MAX + BODY_BYTES_MAX / 2, 3 * BODY_BYTES_MAX] {
        let body = format!("\"{}\"", "x".repeat(size));
        for declared in [true, false] {
            let mut request =
                authorized("POST", "/api/v2/actions").header("content-type", "application/json");
            if declared {
                request = request.header("content-length", body.len());
            }
            let answer = send(&w.state, request.body(Body::from(body.clone())).unwrap()).await;
            let error = envelope(&answer, 413, "PAYLOAD_TOO_LARGE");
            assert_eq!(
                error["details"]["limitBytes"], BODY_BYTES_MAX,
                "{size} {declared}"
            );
        }
    }
    // The limit is the router's, not one handler's: a route that reads no body refuses too.
    let request = authorized("GET", "/api/v2/secrets")
        .header("content-length", 3 * BODY_BYTES_MAX)
        .body(Body::from(vec![b' '; 3 * BODY_BYTES_MAX]))
        .unwrap();
    envelope(&send(&w.state, request).await, 413, "PAYLOAD_TOO_LARGE");
}

#[tokio::test]
async fn a_path_with_invalid_percent_encoding_answers_the_envelope() {
    let w = world(Duration::from_secs(5), None).await;
    for uri in ["/api/v2/actions/%FF", "/api/v2/secrets/%C3%28", "/%FF"] {
        let request = authorized("GET", uri).body(Body::empty()).unwrap();
        let error = envelope(&send(&w.state, request).await, 400, "VALIDATION_ERROR");
        assert_eq!(error["details"]["field"], "path", "{uri}");
    }
}

#[tokio::test]
async fn malformed_unknown_and_repeated_query_parameters_answer_400_naming_them() {
    let w = world(Duration::from_secs(5), None).await;
    let cases = [
        ("/api/v2/actions/invocations?limit=abc", "limit"),
        ("/api/v2/actions/invocations?limit=1&limit=2", "limit"),
        ("/api/v2/actions/invocations?bogus=1", "bogus"),
        ("/api/v2/actions/effects?offset=-1", "offset"),
        ("/api/v2/actions/effects?bogus=1", "bogus"),
        ("/api/v2/approvals?limit=x", "limit"),
        ("/api/v2/approval-policies?bogus=1", "bogus"),
        (
            "/api/v2/impact-limits?includeArchived=1&includeArchived=2",
            "includeArchived",
        ),
        (
            "/api/v2/actions/adapter/invocations?status=a&status=b",
            "status",
        ),
        // Endpoints that take no parameters refuse any.
        ("/api/v2/actions?bogus=1", "bogus"),
        ("/api/v2/secrets?bogus=1", "bogus"),
        ("/api/v2/actions?limit=x", "limit"),
        ("/api/v2/environment?limit=1", "limit"),
        ("/api/v2/auth/identity?x=1", "x"),
    ];
    for (uri, field) in cases {
        let request = authorized("GET", uri).body(Body::empty()).unwrap();
        let error = envelope(&send(&w.state, request).await, 400, "VALIDATION_ERROR");
        assert_eq!(error["details"]["field"], field, "{uri}");
    }
    // Known parameters still work, the SDK's `limit` on the unpaged lists included.
    for uri in [
        "/api/v2/actions/invocations?limit=5&offset=0",
        "/api/v2/actions?limit=100",
        "/api/v2/secrets?limit=100",
    ] {
        let request = authorized("GET", uri).body(Body::empty()).unwrap();
        let answer = send(&w.state, request).await;
        assert_eq!(answer.0, 200, "{uri}: {}", answer.1);
    }
}

#[tokio::test]
async fn a_wrong_method_answers_the_405_envelope() {
    let w = world(Duration::from_secs(5), None).await;
    for (method, uri) in [
        ("DELETE", "/api/v2/actions"),
        ("PUT", "/api/v2/actions/invocations"),
        ("POST", "/healthz"),
    ] {
        let request = authorized(method, uri).body(Body::empty()).unwrap();
        envelope(&send(&w.state, request).await, 405, "METHOD_NOT_ALLOWED");
    }
}

#[tokio::test]
async fn an_unknown_path_says_no_such_route_and_a_missing_record_says_not_found() {
    let w = world(Duration::from_secs(5), None).await;
    let request = authorized("GET", "/api/v2/no-such-thing")
        .body(Body::empty())
        .unwrap();
    let route = send(&w.state, request).await;
    envelope(&route, 404, "ROUTE_NOT_FOUND");
    let request = authorized("GET", "/api/v2/actions/no-such-action")
        .body(Body::empty())
        .unwrap();
    envelope(&send(&w.state, request).await, 404, "NOT_FOUND");
}

#[tokio::test]
async fn metrics_are_not_part_of_the_app_router() {
    let w = world(Duration::from_secs(5), None).await;
    let request = authorized("GET", "/metrics").body(Body::empty()).unwrap();
    envelope(&send(&w.state, request).await, 404, "ROUTE_NOT_FOUND");
}

#[tokio::test]
async fn every_endpoint_checks_its_query_before_authentication() {
    let w = world(Duration::from_secs(5), None).await;
    for uri in [
        "/api/v2/actions/invocations?bogus=1",
        "/api/v2/approvals/apr_x?waitSeconds=soon",
        "/api/v2/actions?bogus=1",
        "/api/v2/auth/identity?bogus=1",
    ] {
        let request = Request::builder()
            .uri(uri)
            .header("authorization", "Bearer stw_not_a_key")
            .body(Body::empty())
            .unwrap();
        envelope(&send(&w.state, request).await, 400, "VALIDATION_ERROR");
    }
}
