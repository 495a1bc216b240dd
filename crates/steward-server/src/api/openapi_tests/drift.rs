//! Tests that the OpenAPI document and the code cannot drift apart: the router serves exactly the
//! documented operations, each hand-parsed body's known fields are its schema's properties, the
//! bounds in the document are the named constants, and every error status is the envelope.

use super::super::openapi::*;
use crate::state::AppState;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;
use steward_core::{EnvironmentId, KeyId, Role};
use steward_store::{Actor, ApiKeyRecord, Identity, SqliteStore};
use tower::ServiceExt;

pub(super) const TOKEN: &str = "stw_openapi_drift";
/// A second operator: a key never decides or resolves what it requested itself.
pub(super) const SECOND_TOKEN: &str = "stw_openapi_drift_second";
const METHODS: [Method; 5] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
];

/// A real router on a temporary SQLite store with one operator key.
pub(super) async fn state(dir: &tempfile::TempDir) -> AppState {
    let store = Arc::new(SqliteStore::open(&dir.path().join("steward.db")).unwrap());
    let now = crate::Clock::now(&crate::SystemClock);
    let env = store
        .ensure_environment(
            steward_store::NewEnvironment {
                name: "test",
                id: &EnvironmentId::from_unique("test"),
            },
            &Actor::system(now),
        )
        .await
        .unwrap();
    let key = ApiKeyRecord {
        id: KeyId::from_unique("drift"),
        env_id: env.id,
        name: "drift".into(),
        scopes: Role::Operator.scopes(),
        token_hash: crate::hash_token(TOKEN),
        created_at: now,
        expires_at: None,
        revoked_at: None,
        last_used_at: None,
    };
    store.insert_key(&key, &Actor::system(now)).await.unwrap();
    let second = ApiKeyRecord {
        id: KeyId::from_unique("drift2"),
        token_hash: crate::hash_token(SECOND_TOKEN),
        ..key
    };
    store
        .insert_key(&second, &Actor::system(now))
        .await
        .unwrap();
    crate::test_state::on(store, "drift")
}

async fn send(
    state: &AppState,
    method: Method,
    path: &str,
    token: Option<&str>,
) -> (StatusCode, String, Value) {
    send_body(state, method, path, token, None).await
}

pub(super) async fn send_body(
    state: &AppState,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, String, Value) {
    let mut request = Request::builder().method(method).uri(path);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let body = match body {
        Some(b) => {
            request = request.header("content-type", "application/json");
            Body::from(b.to_string())
        }
        None => Body::empty(),
    };
    let response = crate::app(state.clone())
        .oneshot(request.body(body).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        content_type,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

pub(super) fn document_json() -> Value {
    serde_json::to_value(document()).unwrap()
}

/// `(path, method)` of every documented operation, the method upper-case.
pub(super) fn operations(doc: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if METHODS
                .iter()
                .any(|m| m.as_str().eq_ignore_ascii_case(method))
            {
                out.push((path.clone(), method.to_ascii_uppercase()));
            }
        }
    }
    out
}

/// A concrete path for a documented template: every parameter becomes a value that names no
/// record (a number where the parameter is one).
fn concrete(template: &str) -> String {
    template
        .replace("{version}", "1")
        .replace("{name}", "NO_SUCH_SECRET")
        .replace("{id}", "nothing")
        .replace("{reference}", "nothing")
        .replace("{apiKeyId}", "nothing")
        .replace("{secretName}", "NO_SUCH_SECRET")
        .replace("{ref}", "nothing")
        .replace("{spanId}", "nothing")
}

#[tokio::test]
async fn every_documented_operation_is_served_and_the_router_serves_no_undocumented_method() {
    let dir = tempfile::tempdir().unwrap();
    let state = state(&dir).await;
    let doc = document_json();
    let documented = operations(&doc);
    assert!(
        documented.len() >= 40,
        "only {} operations documented",
        documented.len()
    );
    let paths: BTreeSet<&String> = documented.iter().map(|(p, _)| p).collect();
    for path in paths {
        let uri = concrete(path);
        assert!(
            !uri.contains('{'),
            "{path} has a parameter this test does not fill"
        );
        for method in METHODS {
            let is_documented = documented
                .iter()
                .any(|(p, m)| p == path && m == method.as_str());
            let (status, _, body) = send(&state, method.clone(), &uri, None).await;
            if is_documented {
                // Served: the handler answered (401 without a key, or the open document), not
                // the fallback's 404 or the router's 405.
                // The sign-in callback needs no key: its `state` is the proof, and this one
                // names no session.
                let served = status == StatusCode::UNAUTHORIZED
                    || (path == "/api/v2/openapi.json" && status == StatusCode::OK)
                    || (path == "/api/v2/connections/callback"
                        && status == StatusCode::BAD_REQUEST
                        && body["error"]["code"] == "CONNECTION_SESSION_INVALID");
                assert!(
                    served,
                    "{method} {path} is documented but answered {status}: {body}"
                );
            } else {
                assert_eq!(
                    status,
                    StatusCode::METHOD_NOT_ALLOWED,
                    "{method} {path} is not documented but answered {status}: {body}"
                );
            }
        }
    }
}

/// The other direction: a route added to `v2_routes` without `routes!` would be served and not
/// documented. `v2_routes` is the only place `/api/v2` routes are registered.
#[test]
fn v2_routes_registers_every_route_through_the_documenting_macro() {
    let source = include_str!("../mod.rs");
    let start = source.find("fn v2_routes()").expect("v2_routes exists");
    let body = &source[start..];
    let body = &body[..body.find("\n}\n").expect("v2_routes ends")];
    let registrations = body.matches(".route").count();
    let documented = body.matches("routes!(").count();
    assert!(documented > 0);
    assert_eq!(
        registrations, documented,
        "every route in v2_routes must be registered through routes!(...)"
    );
}

/// Every body schema in the document refuses unknown fields, as every handler does.
#[test]
fn every_documented_body_schema_refuses_unknown_fields() {
    let doc = document_json();
    for (path, method) in operations(&doc) {
        let body = &doc["paths"][&path][method.to_ascii_lowercase()]["requestBody"];
        if body.is_null() {
            continue;
        }
        let reference = body["content"]["application/json"]["schema"]["$ref"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path}: the body is not a named schema"));
        let schema =
            &doc["components"]["schemas"][reference.trim_start_matches("#/components/schemas/")];
        assert_eq!(
            schema["additionalProperties"],
            json!(false),
            "{method} {path}: unknown fields are refused, so the schema must say so"
        );
    }
}

fn at<'a>(doc: &'a Value, pointer: &str) -> &'a Value {
    doc.pointer(pointer)
        .unwrap_or_else(|| panic!("nothing at {pointer}"))
}

/// `utoipa` takes only literal bounds; each must be the constant the code enforces.
#[test]
fn bounds_in_the_document_are_the_named_constants() {
    use steward_core::policy::{
        MATCH_TAGS_MAX, POLICY_NAME_LEN_MAX, PRIORITY_ABS_MAX, REQUIRED_APPROVALS_MAX,
    };
    let doc = document_json();
    let schemas = "/components/schemas";
    let checks: Vec<(String, i64)> = vec![
        (
            format!("{schemas}/HaltBody/properties/reason/maxLength"),
            crate::api::environment::HALT_REASON_LEN_MAX as i64,
        ),
        (
            format!("{schemas}/HoldBody/properties/reason/maxLength"),
            crate::app::holds::HOLD_REASON_LEN_MAX as i64,
        ),
        (
            format!("{schemas}/HoldBody/properties/actionName/maxLength"),
            crate::app::holds::HOLD_ACTION_NAME_LEN_MAX as i64,
        ),
        (
            format!("{schemas}/HoldBody/properties/operationKey/maxLength"),
            steward_core::CLIENT_KEY_LEN_MAX as i64,
        ),
        (
            format!("{schemas}/InvokeBody/properties/operationKey/maxLength"),
            steward_core::CLIENT_KEY_LEN_MAX as i64,
        ),
        (
            format!("{schemas}/PolicyBody/properties/name/maxLength"),
            POLICY_NAME_LEN_MAX as i64,
        ),
        (
            format!("{schemas}/PolicyBody/properties/condition/maxLength"),
            steward_core::policy::CONDITION_LEN_MAX as i64,
        ),
        (
            format!("{schemas}/PolicyBody/properties/matchTags/maxItems"),
            MATCH_TAGS_MAX as i64,
        ),
        (
            format!("{schemas}/PolicyBody/properties/requiredApprovals/maximum"),
            i64::from(REQUIRED_APPROVALS_MAX),
        ),
        (
            format!("{schemas}/PolicyBody/properties/priority/maximum"),
            PRIORITY_ABS_MAX,
        ),
        (
            format!("{schemas}/PolicyBody/properties/priority/minimum"),
            -PRIORITY_ABS_MAX,
        ),
        (
            format!("{schemas}/ApprovalRequestBody/properties/expiresInSeconds/maximum"),
            crate::api::approvals::APPROVAL_EXPIRY_S_MAX,
        ),
        (
            format!("{schemas}/ImportBody/properties/only/maxItems"),
            crate::api::import::ONLY_MAX as i64,
        ),
        (
            format!("{schemas}/ImportAuth/properties/valueTemplate/maxLength"),
            crate::api::import::AUTH_TEMPLATE_BYTES_MAX as i64,
        ),
        (
            format!("{schemas}/Page_Approval/properties/pagination/properties/limit/maximum"),
            i64::from(crate::envelope::PAGE_LIMIT_MAX),
        ),
        (
            format!("{schemas}/VersionPage_PolicyVersion/properties/pagination/properties/limit/maximum"),
            i64::from(crate::envelope::PAGE_LIMIT_MAX),
        ),
    ];
    for (pointer, expected) in checks {
        assert_eq!(at(&doc, &pointer).as_i64(), Some(expected), "{pointer}");
    }
    use steward_core::impact::{LIMIT_AMOUNT_MAX, LIMIT_NAME_LEN_MAX};
    for body in ["LimitBody", "LimitUpdateBody"] {
        let name = at(&doc, &format!("{schemas}/{body}/properties/name/maxLength"));
        assert_eq!(name.as_u64(), Some(LIMIT_NAME_LEN_MAX as u64), "{body}");
        let amount = at(&doc, &format!("{schemas}/{body}/properties/amount/maximum"));
        assert_eq!(amount.as_i64(), Some(LIMIT_AMOUNT_MAX), "{body}");
    }
    let longest = at(
        &doc,
        &format!("{schemas}/ActionBody/properties/name/maxLength"),
    );
    let longest = longest.as_u64().unwrap() as usize;
    assert!(steward_core::validate_name(&"a".repeat(longest)).is_ok());
    assert!(steward_core::validate_name(&"a".repeat(longest + 1)).is_err());
    let mut limits = 0;
    for (path, method) in operations(&doc) {
        let op = &doc["paths"][&path][method.to_ascii_lowercase()];
        for parameter in op["parameters"].as_array().into_iter().flatten() {
            let schema = &parameter["schema"];
            match (parameter["in"].as_str(), parameter["name"].as_str()) {
                (Some("query"), Some("limit")) => {
                    limits += 1;
                    assert_eq!(schema["minimum"], json!(1), "{method} {path} limit");
                    assert_eq!(
                        schema["maximum"],
                        json!(crate::envelope::PAGE_LIMIT_MAX),
                        "{method} {path} limit"
                    );
                }
                (Some("query"), Some("waitSeconds")) => {
                    assert_eq!(
                        schema["maximum"],
                        json!(crate::app::reads::LONG_POLL_WAIT_S_MAX)
                    );
                }
                (Some("header"), Some("Idempotency-Key")) => {
                    assert_eq!(schema["maxLength"], json!(steward_core::CLIENT_KEY_LEN_MAX));
                    assert!(steward_core::IdempotencyKey::parse(
                        &"k".repeat(steward_core::CLIENT_KEY_LEN_MAX)
                    )
                    .is_ok());
                }
                (Some("path"), Some("name")) => {
                    let longest = schema["maxLength"].as_u64().unwrap() as usize;
                    assert!(steward_core::is_valid_secret_name(&"A".repeat(longest)));
                    assert!(!steward_core::is_valid_secret_name(
                        &"A".repeat(longest + 1)
                    ));
                }
                _ => {}
            }
        }
    }
    assert_eq!(limits, 8, "every paged listing documents its limit");
}

#[test]
fn every_operation_documents_its_error_statuses_with_the_envelope() {
    let doc = document_json();
    for (path, method) in operations(&doc) {
        let op = &doc["paths"][&path][method.to_ascii_lowercase()];
        let responses = op["responses"].as_object().unwrap();
        let has = |status: &str| responses.contains_key(status);
        if path == "/api/v2/openapi.json" {
            assert_eq!(op["security"], json!([{}]), "the document needs no key");
            continue;
        }
        if path == "/api/v2/connections/callback" {
            assert_eq!(op["security"], json!([{}]), "the callback needs no key");
            for status in ["400", "422"] {
                assert!(has(status), "{method} {path} does not document {status}");
            }
            continue;
        }
        for status in ["400", "401", "403", "503"] {
            assert!(has(status), "{method} {path} does not document {status}");
        }
        let parameters = op["parameters"].as_array().cloned().unwrap_or_default();
        let in_path = parameters.iter().any(|p| p["in"] == "path");
        // Only PUT creates what its path names; every other operation on a named record can miss.
        if in_path && method != "PUT" {
            assert!(has("404"), "{method} {path} does not document 404");
        }
        if !op["requestBody"].is_null() {
            assert!(
                has("413"),
                "{method} {path} takes a body but does not document 413"
            );
        }
        if parameters.iter().any(|p| p["name"] == "Idempotency-Key") {
            for status in ["409", "422"] {
                assert!(
                    has(status),
                    "{method} {path} takes Idempotency-Key but does not document {status}"
                );
            }
        }
        for (status, response) in responses {
            // A Server-Sent Events answer (`GET /stream`) is a stream of frames, not an envelope.
            let event_stream = response["content"]
                .as_object()
                .is_some_and(|c| c.len() == 1 && c.contains_key("text/event-stream"));
            if status.starts_with('2') && event_stream {
                continue;
            }
            let schema = &response["content"]["application/json"]["schema"]["$ref"];
            let expected = if status.starts_with('2') {
                ["Single_", "List_", "Page_", "VersionPage_", "CursorPage_"]
                    .iter()
                    .any(|envelope| {
                        schema.as_str().is_some_and(|s| {
                            s.starts_with(&format!("#/components/schemas/{envelope}"))
                        })
                    })
            } else {
                *schema == json!("#/components/schemas/ErrorEnvelope")
            };
            assert!(
                expected,
                "{method} {path} {status} is not an envelope: {schema}"
            );
        }
    }
}

#[tokio::test]
async fn the_document_is_served_without_a_key_as_openapi_3_1() {
    let dir = tempfile::tempdir().unwrap();
    let state = state(&dir).await;
    let (status, content_type, body) =
        send(&state, Method::GET, "/api/v2/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(content_type, "application/json");
    assert_eq!(body["openapi"], json!("3.1.0"));
    assert_eq!(body, document_json());
}

/// The version segment was parsed by the extractor, whose refusal was a plain-text 400.
#[tokio::test]
async fn a_policy_version_that_is_not_a_number_is_the_json_404() {
    let dir = tempfile::tempdir().unwrap();
    let state = state(&dir).await;
    for version in ["-1", "x", "99999999999"] {
        let path = format!("/api/v2/approval-policies/pol_01abc/versions/{version}");
        let (status, content_type, body) = send(&state, Method::GET, &path, Some(TOKEN)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{version}: {body}");
        assert_eq!(content_type, "application/json", "{version}");
        assert_eq!(body["success"], json!(false));
        assert_eq!(body["error"]["code"], json!("NOT_FOUND"));
    }
}
