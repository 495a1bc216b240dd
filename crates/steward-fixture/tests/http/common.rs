//! Helpers shared by the HTTP tests.

use std::time::Duration;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};
use serde_json::Value;
use steward_fixture::{spawn, FixtureConfig, FixtureHandle};

pub const API_KEY: &str = "sk_test_fixtureTESTkey123";

pub async fn start() -> FixtureHandle {
    start_with(None).await
}

pub async fn start_with(state_file: Option<std::path::PathBuf>) -> FixtureHandle {
    spawn(FixtureConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        state_file,
    })
    .await
    .expect("fixture starts")
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// `POST /v1/refunds` with a form body and an optional idempotency key.
pub async fn post_form(
    fx: &FixtureHandle,
    body: &str,
    key: Option<&str>,
) -> reqwest::Result<reqwest::Response> {
    let mut req = client()
        .post(format!("{}/v1/refunds", fx.base_url()))
        .header(AUTHORIZATION, format!("Bearer {API_KEY}"))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(body.to_string());
    if let Some(key) = key {
        req = req.header("Idempotency-Key", key);
    }
    req.send().await
}

/// `POST /v1/refunds` with a JSON body.
pub async fn post_json(fx: &FixtureHandle, body: &Value, key: Option<&str>) -> reqwest::Response {
    let mut req = client()
        .post(format!("{}/v1/refunds", fx.base_url()))
        .header(AUTHORIZATION, format!("Bearer {API_KEY}"))
        .json(body);
    if let Some(key) = key {
        req = req.header("Idempotency-Key", key);
    }
    req.send().await.expect("response")
}

/// An authenticated GET.
pub async fn get(fx: &FixtureHandle, path: &str) -> reqwest::Response {
    client()
        .get(format!("{}{path}", fx.base_url()))
        .header(AUTHORIZATION, format!("Bearer {API_KEY}"))
        .send()
        .await
        .expect("response")
}

/// `POST /_fixture/faults` over HTTP.
pub async fn arm(fx: &FixtureHandle, plan: Value) {
    let resp = client()
        .post(format!("{}/_fixture/faults", fx.base_url()))
        .json(&plan)
        .send()
        .await
        .expect("response");
    assert_eq!(resp.status(), 200, "arming {plan}");
}

pub async fn body(resp: reqwest::Response) -> Value {
    resp.json().await.expect("JSON body")
}

pub fn replayed(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

pub const BASIC: &str = "payment_intent=pi_basic&amount=500";
