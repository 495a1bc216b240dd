//! The issuer through the router, on a real SQLite store: settlements get one receipt each,
//! chained, served exactly as signed, and verified with the public keys the API publishes.

use super::issuer::{issue_once, Round};
use crate::state::AppState;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::{json, Value};
use std::sync::Arc;
use steward_core::receipt::{verify_chain, PublicKeys};
use steward_core::{EnvironmentId, KeyId, Role};
use steward_store::{
    Actor, ApiKeyRecord, AuditSeal, Identity, NewEnvironment, SqliteStore, Store,
    SEAL_BATCH_EVENTS_MAX,
};
use tower::ServiceExt;

const AGENT: &str = "stw_receipts_agent";
const OPERATOR: &str = "stw_receipts_operator";

async fn key(store: &SqliteStore, id: &str, name: &str, token: &str, role: Role) {
    let now = crate::Clock::now(&crate::SystemClock);
    let env = store
        .ensure_environment(
            NewEnvironment {
                name: "receipts",
                id: &EnvironmentId::from_unique("receipts"),
            },
            &Actor::system(now),
        )
        .await
        .unwrap();
    let record = ApiKeyRecord {
        id: KeyId::from_unique(id),
        env_id: env.id,
        name: name.into(),
        scopes: role.scopes(),
        token_hash: crate::hash_token(token),
        created_at: now,
        expires_at: None,
        revoked_at: None,
        last_used_at: None,
    };
    store
        .insert_key(&record, &Actor::system(now))
        .await
        .unwrap();
}

async fn send(
    state: &AppState,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Value,
) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method.clone()).uri(path);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let body = if method == Method::GET {
        Body::empty()
    } else {
        request = request.header("content-type", "application/json");
        Body::from(body.to_string())
    };
    let response = crate::app(state.clone())
        .oneshot(request.body(body).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, serde_json::from_slice(&bytes).unwrap())
}

/// Seals and issues everything committed so far, as the background tasks do.
async fn issue_all(state: &AppState) {
    let seal = AuditSeal {
        sealer: state.replica.clone(),
        now: crate::Clock::now(&crate::SystemClock),
        lease_ms: 1_000,
        events_max: SEAL_BATCH_EVENTS_MAX,
        epoch: None,
    };
    state.store.seal_audit(&seal).await.unwrap();
    while issue_once(state).await.unwrap() == Round::More {}
}

#[tokio::test]
async fn each_settlement_gets_one_receipt_served_as_signed_and_verified_by_the_published_keys() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("steward.db")).unwrap());
    key(&store, "agent", "night-agent", AGENT, Role::Agent).await;
    key(&store, "operator", "night-ops", OPERATOR, Role::Operator).await;
    let state = crate::test_state::on(store.clone() as Arc<dyn Store>, "receipts");
    let now = crate::Clock::now(&crate::SystemClock);
    crate::receipts::keys::ensure(state.store.as_ref(), &state.vault, now)
        .await
        .unwrap();

    let action = json!({"name": "ping", "method": "POST",
                        "urlTemplate": "http://127.0.0.1:9/ping", "requiresApproval": true});
    let (status, body) = send(
        &state,
        Method::POST,
        "/api/v2/actions",
        Some(OPERATOR),
        action,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, parked) = send(
        &state,
        Method::POST,
        "/api/v2/actions/ping/invoke",
        Some(AGENT),
        json!({"input": {}}),
    )
    .await;
    let parked = &parked["data"];
    // An ungoverned action's invocation view names no effect; the store knows it.
    let invocation = steward_core::InvocationId::parse(parked["id"].as_str().unwrap()).unwrap();
    let effect = state
        .store
        .invocation(&EnvironmentId::from_unique("receipts"), &invocation)
        .await
        .unwrap()
        .expect("the invocation")
        .effect_id
        .to_string();
    let approval = parked["approvalId"].as_str().unwrap();

    issue_all(&state).await;
    let (status, missing) = send(
        &state,
        Method::GET,
        &format!("/api/v2/actions/effects/{effect}/receipt"),
        Some(AGENT),
        Value::Null,
    )
    .await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "a parked effect has not settled: {missing}"
    );
    assert_eq!(missing["error"]["details"]["receipt"], "not_issued");

    let (status, _) = send(
        &state,
        Method::POST,
        &format!("/api/v2/approvals/{approval}/deny"),
        Some(OPERATOR),
        json!({"note": "not today"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    issue_all(&state).await;
    issue_all(&state).await;
    let (_, all) = send(
        &state,
        Method::GET,
        &format!("/api/v2/actions/effects/{effect}/receipts"),
        Some(AGENT),
        Value::Null,
    )
    .await;
    let all = all["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{all}"))
        .clone();
    assert_eq!(
        all.len(),
        1,
        "one settlement, one receipt, however often the issuer runs"
    );
    let receipt = &all[0];
    assert_eq!(receipt["settlement"]["state"], "denied");
    assert_eq!(receipt["settlement"]["from"], "awaiting_approval");
    assert_eq!(receipt["request"], Value::Null, "nothing was sent");
    assert_eq!(receipt["approval"]["decisions"][0]["keyName"], "night-ops");
    assert_eq!(receipt["approval"]["decisions"][0]["decision"], "deny");
    assert_eq!(receipt["sequence"], 1);

    // The stored receipt and the served one are the same object, signature and all.
    let stored = state
        .store
        .effect_receipts(
            &EnvironmentId::from_unique("receipts"),
            &steward_core::EffectId::parse(&effect).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(&stored[0].body, receipt);

    let (status, published) = send(
        &state,
        Method::GET,
        "/.well-known/steward-receipt-keys.json",
        None,
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "public keys need no key");
    let mut keys = PublicKeys::default();
    for k in published["data"].as_array().unwrap() {
        keys.add_hex(k["publicKey"].as_str().unwrap()).unwrap();
    }
    let (_, chain) = send(
        &state,
        Method::GET,
        "/api/v2/receipts?limit=200",
        Some(AGENT),
        Value::Null,
    )
    .await;
    let chain = chain["data"].as_array().unwrap().clone();
    let report = verify_chain(&chain, &keys).unwrap();
    assert!(report.from_genesis && report.receipts == 1);

    let mut forged = chain.clone();
    forged[0]["approval"]["decisions"][0]["keyName"] = json!("someone-else");
    assert!(verify_chain(&forged, &keys).is_err());
}
