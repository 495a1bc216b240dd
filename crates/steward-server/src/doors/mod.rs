//! Every door reaches the same application function: an MCP `tools/call` and an HTTP invoke
//! both reach `app::invoke::invoke`, an HTTP decision and a console approve both reach
//! `app::approvals::decide`, and both halts and resumes reach `app::environment` (counted by
//! the seam, `app/seam.rs`), and one MCP request
//! authenticates once (counted by a store that counts `Store::caller` and
//! `Store::invoke_context`, `counting_store.rs`) and reads the action list once
//! (`Store::list_actions`), never a stale one; a decision that changed nothing is explained
//! the same way by the API and the console. The requests go through the real router, as a
//! client sends them.

mod counting_store;

use crate::app::seam::{self, UseCase};
use crate::state::AppState;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use counting_store::CountingStore;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use steward_core::{EnvironmentId, KeyId, Millis, Role};
use steward_store::{Actor, ApiKeyRecord, ConsoleSessionRecord, Identity, SqliteStore};
use tower::ServiceExt;

/// The key that invokes (and so requests every approval).
const INVOKER: &str = "stw_doors_invoker";
/// A second operator: a key never decides what it requested itself.
const DECIDER: &str = "stw_doors_decider";
/// The decider's console session token (`stc_` and 64 hex digits).
const SESSION: &str = "stc_00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// A router's state on a temporary SQLite store wrapped in a [`CountingStore`], with two
/// operator keys and a console session for the second. `replica` names this test's state to
/// the seam.
async fn world(dir: &tempfile::TempDir, replica: &str) -> (AppState, Arc<CountingStore>) {
    let sqlite = Arc::new(SqliteStore::open(&dir.path().join("steward.db")).unwrap());
    let now = crate::Clock::now(&crate::SystemClock);
    let env = sqlite
        .ensure_environment(
            steward_store::NewEnvironment {
                name: "test",
                id: &EnvironmentId::from_unique("test"),
            },
            &Actor::system(now),
        )
        .await
        .unwrap();
    for (id, token) in [("invoker", INVOKER), ("decider", DECIDER)] {
        let key = ApiKeyRecord {
            id: KeyId::from_unique(id),
            env_id: env.id.clone(),
            name: id.into(),
            scopes: Role::Operator.scopes(),
            token_hash: crate::hash_token(token),
            created_at: now,
            expires_at: None,
            revoked_at: None,
            last_used_at: None,
        };
        sqlite.insert_key(&key, &Actor::system(now)).await.unwrap();
    }
    let session = ConsoleSessionRecord {
        id: "ses_doors".into(),
        token_hash: crate::hash_token(SESSION),
        key_id: KeyId::from_unique("decider"),
        env_id: env.id.clone(),
        created_at: now,
        expires_at: Millis(now.0 + 3_600_000),
    };
    sqlite
        .create_console_session(&session, &Actor::system(now))
        .await
        .unwrap();
    let store = Arc::new(CountingStore::new(sqlite));
    let state = crate::test_state::on(store.clone(), replica);
    (state, store)
}

/// Sends `request` through the whole router; the status and the body (JSON, or the text).
async fn send(state: &AppState, request: Request<Body>) -> (StatusCode, Value) {
    let answer = crate::router::app(state.clone())
        .oneshot(request)
        .await
        .unwrap();
    let status = answer.status();
    let bytes = axum::body::to_bytes(answer.into_body(), usize::MAX)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn api(method: Method, path: &str, token: &str, body: &Value) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(format!("/api/v2{path}"))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn mcp(token: &str, body: &Value) -> Request<Body> {
    Request::builder()
        .method(Method::POST)
        .uri("/mcp")
        .header("host", "127.0.0.1")
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// The console's form POST, signed in with [`SESSION`], carrying its CSRF token.
fn console(path: &str) -> Request<Body> {
    console_form(path, "note=looks+right")
}

/// [`console`] with the form's own fields (`form`, URL-encoded).
fn console_form(path: &str, form: &str) -> Request<Body> {
    let mut hasher = Sha256::new();
    hasher.update(b"steward-console-csrf\0");
    hasher.update(SESSION.as_bytes());
    let csrf = hex::encode(hasher.finalize());
    Request::builder()
        .method(Method::POST)
        .uri(path)
        .header("host", "127.0.0.1")
        .header("cookie", format!("__Host-steward_console={SESSION}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(format!("csrf={csrf}&{form}")))
        .unwrap()
}

/// An action that waits for approval: an invoke parks it, and nothing is sent.
async fn gated_action(state: &AppState) {
    let definition = json!({
        "name": "ping", "method": "POST", "urlTemplate": "http://127.0.0.1:9/ping",
        "requiresApproval": true,
    });
    let (status, body) = send(state, api(Method::POST, "/actions", INVOKER, &definition)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test]
async fn an_mcp_call_and_an_http_invoke_reach_the_same_invoke_and_mcp_authenticates_once() {
    let dir = tempfile::tempdir().unwrap();
    let (state, store) = world(&dir, "doors-invoke").await;
    gated_action(&state).await;
    let replica = state.replica.as_str().to_string();
    assert_eq!(seam::count(&replica, UseCase::Invoke), 0);

    let before = store.authentications();
    let call = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "ping", "arguments": {"operationKey": "doors-mcp-1"}},
    });
    let (status, body) = send(&state, mcp(INVOKER, &call)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.to_string().contains("pending_approval"), "{body}");
    assert_eq!(seam::count(&replica, UseCase::Invoke), 1, "the MCP call");
    assert_eq!(
        store.authentications() - before,
        1,
        "one MCP request authenticates once"
    );

    let before = store.authentications();
    let invoke = json!({"input": {}, "operationKey": "doors-http-1"});
    let (status, body) = send(
        &state,
        api(Method::POST, "/actions/ping/invoke", INVOKER, &invoke),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(
        seam::count(&replica, UseCase::Invoke),
        2,
        "and the HTTP invoke"
    );
    assert_eq!(
        store.authentications() - before,
        1,
        "one HTTP invoke authenticates once, with the read of its context"
    );
}

/// A parked invoke is its own answer: its submission records it and marks its
/// `Idempotency-Key` done in one commit, and it is answered as recorded, with no second commit
/// (`finish_invoke_request`) and no read back (`invocation`). A resend of the key replays it.
#[tokio::test]
async fn a_parked_invoke_commits_once_and_its_resend_replays_it() {
    let dir = tempfile::tempdir().unwrap();
    let (state, store) = world(&dir, "doors-parked").await;
    gated_action(&state).await;
    let counts = |store: &CountingStore| {
        ["submit", "finish_invoke_request", "invocation"].map(|call| store.reads(call))
    };
    let invoke = || {
        api(
            Method::POST,
            "/actions/ping/invoke",
            INVOKER,
            &json!({"input": {}, "operationKey": "doors-parked-1"}),
        )
    };
    let keyed = |mut request: Request<Body>| {
        request
            .headers_mut()
            .insert("idempotency-key", "doors-parked-key".parse().unwrap());
        request
    };
    let before = counts(&store);
    let (status, body) = send(&state, keyed(invoke())).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["data"]["status"], "pending_approval", "{body}");
    let after = counts(&store);
    assert_eq!(
        [0, 1, 2].map(|i| after[i] - before[i]),
        [1, 0, 0],
        "submit, finish_invoke_request, invocation"
    );

    let (status, again) = send(&state, keyed(invoke())).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{again}");
    assert_eq!(again["data"]["id"], body["data"]["id"], "{again}");
    assert_eq!(
        counts(&store),
        after,
        "the resend is answered from the recorded request, writing nothing"
    );
}

#[tokio::test]
async fn an_http_decision_and_a_console_approve_reach_the_same_decide() {
    let dir = tempfile::tempdir().unwrap();
    let (state, _store) = world(&dir, "doors-decide").await;
    let replica = state.replica.as_str().to_string();
    let mut approvals = Vec::new();
    for title in ["by the API", "by the console"] {
        let request = json!({"title": title});
        let (status, body) = send(&state, api(Method::POST, "/approvals", INVOKER, &request)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        approvals.push(body["data"]["id"].as_str().unwrap().to_string());
    }
    assert_eq!(seam::count(&replica, UseCase::Decide), 0);

    let path = format!("/approvals/{}/approve", approvals[0]);
    let (status, body) = send(&state, api(Method::POST, &path, DECIDER, &json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["approval"]["status"], "approved", "{body}");
    assert_eq!(
        seam::count(&replica, UseCase::Decide),
        1,
        "the HTTP decision"
    );

    let path = format!("/console/approvals/{}/approve", approvals[1]);
    let (status, body) = send(&state, console(&path)).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    assert_eq!(
        seam::count(&replica, UseCase::Decide),
        2,
        "and the console's"
    );
    let path = format!("/approvals/{}", approvals[1]);
    let request = Request::builder()
        .uri(format!("/api/v2{path}"))
        .header("authorization", format!("Bearer {INVOKER}"))
        .body(Body::empty())
        .unwrap();
    let (_, body) = send(&state, request).await;
    assert_eq!(body["data"]["status"], "approved", "{body}");

    // Deciding again changes nothing: the console says why, with the reason the application
    // layer gives (`app::approvals::Unchanged`).
    let path = format!("/console/approvals/{}/approve", approvals[1]);
    let (status, body) = send(&state, console(&path)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.to_string().contains("already approved"), "{body}");
    assert_eq!(seam::count(&replica, UseCase::Decide), 3);
}

/// An MCP `tools/call` reads the action list once (the transport is stateless: one request is
/// one message, so once per request is once per call), and never a stale one: an action
/// disabled between two calls is not offered to the second, and enabled again it is.
#[tokio::test]
async fn an_mcp_call_reads_the_actions_once_and_sees_a_changed_action() {
    let dir = tempfile::tempdir().unwrap();
    let (state, store) = world(&dir, "doors-mcp-actions").await;
    gated_action(&state).await;
    let call = |key: &str| {
        json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "ping", "arguments": {"operationKey": key}},
        })
    };
    let before = store.reads("list_actions");
    let (status, body) = send(&state, mcp(INVOKER, &call("doors-actions-1"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.to_string().contains("pending_approval"), "{body}");
    assert_eq!(
        store.reads("list_actions") - before,
        1,
        "one read of the action list per tools/call"
    );

    let off = json!({"enabled": false});
    let (status, body) = send(&state, api(Method::PATCH, "/actions/ping", INVOKER, &off)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = send(&state, mcp(INVOKER, &call("doors-actions-2"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no tool named \"ping\"")),
        "the disabled action is not called: {body}"
    );

    let on = json!({"enabled": true});
    let (status, body) = send(&state, api(Method::PATCH, "/actions/ping", INVOKER, &on)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = send(&state, mcp(INVOKER, &call("doors-actions-3"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.to_string().contains("pending_approval"), "{body}");
}

/// A decision that changed nothing: the HTTP answer carries the reason (`unchanged`) the
/// console shows for the same case, both from `app::approvals::Unchanged`.
#[tokio::test]
async fn the_api_and_the_console_say_the_same_why_a_decision_changed_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (state, _store) = world(&dir, "doors-unchanged").await;
    let request = json!({"title": "decided twice"});
    let (status, body) = send(&state, api(Method::POST, "/approvals", INVOKER, &request)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["data"]["id"].as_str().unwrap().to_string();
    let path = format!("/approvals/{id}/deny");
    let (status, body) = send(&state, api(Method::POST, &path, DECIDER, &json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["unchanged"], Value::Null, "it counted: {body}");

    let path = format!("/approvals/{id}/approve");
    let (status, body) = send(&state, api(Method::POST, &path, DECIDER, &json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["approval"]["status"], "denied", "{body}");
    let unchanged = &body["data"]["unchanged"];
    assert_eq!(unchanged["code"], "approval_already_decided", "{body}");
    let message = unchanged["message"].as_str().unwrap();
    assert!(message.contains("already denied"), "{message}");

    let (status, page) = send(&state, console(&format!("/console{path}"))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{page}");
    let page = page.as_str().unwrap();
    assert!(
        page.contains(&format!("{message} (approval_already_decided)")),
        "the console shows the API's reason ({message}): {page}"
    );
}

#[tokio::test]
async fn an_http_halt_and_a_console_halt_reach_the_same_halt_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let (state, _store) = world(&dir, "doors-halt").await;
    let replica = state.replica.as_str().to_string();
    let halt = json!({"reason": "by the API"});
    let (status, body) = send(
        &state,
        api(Method::POST, "/environment/halt", INVOKER, &halt),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["halted"], true, "{body}");
    assert_eq!(seam::count(&replica, UseCase::Halt), 1, "the HTTP halt");

    let form = "confirm=yes";
    let (status, body) = send(&state, console_form("/console/environment/resume", form)).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    assert_eq!(
        seam::count(&replica, UseCase::Resume),
        1,
        "the console's resume"
    );
    let form = "confirm=yes&reason=by+the+console";
    let (status, body) = send(&state, console_form("/console/environment/halt", form)).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    assert_eq!(
        seam::count(&replica, UseCase::Halt),
        2,
        "and the console's halt"
    );
    let (status, body) = send(
        &state,
        api(Method::POST, "/environment/resume", INVOKER, &json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["released"], 0, "{body}");
    assert_eq!(
        seam::count(&replica, UseCase::Resume),
        2,
        "and the HTTP resume"
    );
}

/// A hold made in the console is the API's hold (`app::holds`), listed by `GET /holds` and
/// released from the console; the page lists it with its release button.
#[tokio::test]
async fn a_console_hold_is_the_apis_hold_and_the_console_releases_it() {
    let dir = tempfile::tempdir().unwrap();
    let (state, _store) = world(&dir, "doors-hold").await;
    let form = "operationKey=doors-held&reason=by+the+console";
    let (status, body) = send(&state, console_form("/console/holds", form)).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    let (status, body) = send(&state, api(Method::GET, "/holds", INVOKER, &json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let holds = body["data"].as_array().unwrap();
    assert_eq!(holds.len(), 1, "{body}");
    assert_eq!(holds[0]["operationKey"], "doors-held", "{body}");
    assert_eq!(holds[0]["reason"], "by the console", "{body}");
    let id = holds[0]["id"].as_str().unwrap().to_string();
    let read = Request::builder()
        .uri("/console/holds")
        .header("host", "127.0.0.1")
        .header("cookie", format!("__Host-steward_console={SESSION}"))
        .body(Body::empty())
        .unwrap();
    let (status, page) = send(&state, read).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let page = page.as_str().unwrap();
    assert!(
        page.contains(&format!("/console/holds/{id}/release")),
        "{page}"
    );
    let (status, page) = send(&state, console_form("/console/holds", "reason=nothing")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{page}");
    let path = format!("/console/holds/{id}/release");
    let (status, body) = send(&state, console_form(&path, "")).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    let (_, body) = send(&state, api(Method::GET, "/holds", INVOKER, &json!({}))).await;
    assert_eq!(body["data"], json!([]), "{body}");
}
