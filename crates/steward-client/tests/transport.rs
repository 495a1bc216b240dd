//! The client's retries against a scripted fake server: every resend carries the same
//! `Idempotency-Key` and body, "not now" answers are retried, refusals are not.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use steward_client::{ApiError, InvokeRequest, RetryPolicy, StewardApi};
use steward_core::{IdempotencyKey, OperationKey};

/// What the fake answers, in order; the last answer repeats.
type Script = Vec<(u16, Value)>;

/// One request as the fake saw it: its `Idempotency-Key` and body.
type Request = (Option<String>, Value);

#[derive(Clone, Default)]
struct Seen {
    requests: Arc<Mutex<Vec<Request>>>,
}

async fn start(script: Script) -> (String, Seen) {
    let seen = Seen::default();
    let state = (Arc::new(script), seen.clone());
    let app = Router::new()
        .route(
            "/api/v2/actions/refund/invoke",
            post(
                |State((script, seen)): State<(Arc<Script>, Seen)>,
                 headers: HeaderMap,
                 Json(body): Json<Value>| async move {
                    let key = headers
                        .get("idempotency-key")
                        .map(|v| v.to_str().unwrap().to_string());
                    let n = {
                        let mut requests = seen.requests.lock().unwrap();
                        requests.push((key, body));
                        requests.len()
                    };
                    let (status, answer) = script[(n - 1).min(script.len() - 1)].clone();
                    (StatusCode::from_u16(status).unwrap(), Json(answer))
                },
            ),
        )
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

fn error(code: &str) -> Value {
    json!({"success": false, "error": {"code": code, "message": "scripted"}})
}

fn fast() -> RetryPolicy {
    RetryPolicy {
        attempts_max: 5,
        backoff_initial: Duration::from_millis(5),
        backoff_max: Duration::from_millis(20),
    }
}

async fn invoke(base: &str) -> Result<steward_client::Invocation, ApiError> {
    let api = StewardApi::new(base, "stw_test")
        .unwrap()
        .with_retry(fast());
    let input = json!({"paymentIntent": "pi_1", "amount": 5});
    let key = OperationKey::parse("order-1").unwrap();
    api.invoke(
        "refund",
        &InvokeRequest {
            input: &input,
            operation_key: Some(&key),
            retry_of: None,
        },
        &IdempotencyKey::parse("op_1:attempt-1").unwrap(),
    )
    .await
}

#[tokio::test]
async fn not_now_answers_are_resent_with_the_same_key_and_body() {
    let ok = json!({"success": true, "data": {"id": "inv_1", "status": "succeeded"}});
    let (base, seen) = start(vec![
        (503, error("STORAGE_UNAVAILABLE")),
        (409, error("idempotency_request_in_progress")),
        (502, json!("bad gateway")),
        (200, ok),
    ])
    .await;
    let inv = invoke(&base)
        .await
        .expect("the fourth answer is the invocation");
    assert_eq!(inv.id.as_str(), "inv_1");
    let requests = seen.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 4);
    for (key, body) in &requests {
        assert_eq!(key.as_deref(), Some("op_1:attempt-1"));
        assert_eq!(body, &requests[0].1);
    }
    assert_eq!(requests[0].1["operationKey"], "order-1");
}

#[tokio::test]
async fn retries_are_bounded() {
    let (base, seen) = start(vec![(503, error("STORAGE_UNAVAILABLE"))]).await;
    match invoke(&base).await {
        Err(ApiError::Exhausted { attempts: 5, .. }) => {}
        other => panic!("expected exhaustion after 5 attempts: {other:?}"),
    }
    assert_eq!(seen.requests.lock().unwrap().len(), 5);
}

#[tokio::test]
async fn refusals_are_not_retried() {
    let (base, seen) = start(vec![(409, error("operation_key_conflict"))]).await;
    let err = invoke(&base).await.unwrap_err();
    assert_eq!(err.code(), Some("operation_key_conflict"));
    assert_eq!(seen.requests.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_closed_port_is_retried_then_reported() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    assert!(matches!(
        invoke(&base).await,
        Err(ApiError::Exhausted { attempts: 5, .. })
    ));
}
