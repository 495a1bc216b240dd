//! In-process harness: the real router, dispatcher and SQLite store, a fixture, an injectable
//! clock and crash hook. No sockets to Steward itself; the fixture is real HTTP on loopback.

use axum::body::Body;
use axum::http::Request;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use steward_core::{EnvironmentId, KeyId, Millis, Role};
use steward_fixture::{FixtureConfig, FixtureHandle};
use steward_server::{
    app, hash_token, http_client, AppState, Clock, CrashHook, Metrics, OutboundPolicy, SystemClock,
    Vault,
};
use steward_store::{Actor, ApiKeyRecord, Identity, SqliteStore};
use tower::ServiceExt;

/// An operator key, and a second one (a different key may resolve and replay).
pub const TOKEN: &str = "stw_in_process_key";
pub const SECOND_TOKEN: &str = "stw_in_process_second";

/// The wall clock plus an offset a test can move forward.
#[derive(Default)]
pub struct ShiftedClock(AtomicI64);

impl ShiftedClock {
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_millis() as i64, Ordering::SeqCst);
    }
}

impl Clock for ShiftedClock {
    fn now(&self) -> Millis {
        SystemClock.now().plus_ms(self.0.load(Ordering::SeqCst))
    }
}

pub struct World {
    pub state: AppState,
    pub store: Arc<SqliteStore>,
    pub fixture: FixtureHandle,
    pub clock: Arc<ShiftedClock>,
    _dir: tempfile::TempDir,
}

pub async fn call(
    state: &AppState,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let request = Request::builder()
        .method(method)
        .uri(format!("/api/v2{path}"))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(body.map_or(Body::empty(), |b| Body::from(b.to_string())))
        .unwrap();
    let response = app(state.clone()).oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A store with two operator keys, the Stripe test key, and an `adapter` refund action.
pub async fn world(dispatch_timeout: Duration, crash_hook: Option<CrashHook>) -> World {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("steward.db")).unwrap());
    let fixture = steward_fixture::spawn(FixtureConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        state_file: None,
    })
    .await
    .unwrap();
    let clock = Arc::new(ShiftedClock::default());
    let outbound = OutboundPolicy {
        allow_insecure: true,
    };
    let state = AppState {
        store: store.clone(),
        vault: Vault::from_key([9; 32]),
        clock: clock.clone(),
        http: http_client(outbound).unwrap(),
        transport: Arc::new(steward_server::HttpTransport::new(
            http_client(outbound).unwrap(),
        )),
        ids: Arc::new(steward_server::UlidIds),
        outbound,
        dispatch_timeout,
        approval_events: Arc::new(tokio::sync::Notify::new()),
        absence_grace: Duration::ZERO,
        metrics: Arc::new(Metrics::default()),
        crash_hook,
        defect: None,
        replica: steward_core::ReplicaId::from_unique(&steward_server::unique()),
        lease: std::sync::Arc::new(steward_server::Lease::unlimited()),
        key_usage: Arc::default(),
        integrations: Arc::default(),
        stream_slots: Arc::default(),
        heavy_reads: Arc::default(),
        pending: Arc::default(),
    };
    let now = SystemClock.now();
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
    for (i, token) in [TOKEN, SECOND_TOKEN].into_iter().enumerate() {
        let key = ApiKeyRecord {
            id: KeyId::from_unique(&format!("k{i}")),
            env_id: env.id.clone(),
            name: "test".into(),
            scopes: Role::Operator.scopes(),
            token_hash: hash_token(token),
            created_at: now,
            expires_at: None,
            revoked_at: None,
            last_used_at: None,
        };
        store.insert_key(&key, &Actor::system(now)).await.unwrap();
    }
    let w = World {
        state,
        store,
        fixture,
        clock,
        _dir: dir,
    };
    let base = w.fixture.base_url();
    w.ok(
        "PUT",
        "/secrets/STRIPE_TEST_KEY",
        json!({"value": "sk_test_inprocess"}),
    )
    .await;
    w.ok("POST", "/actions", json!({"name": "adapter", "adapter": {"type": "stripe.refund", "config": {"mode": "test", "baseUrl": base}, "credentialSecret": "STRIPE_TEST_KEY"}})).await;
    w
}

impl World {
    /// The store's database file.
    pub fn database(&self) -> std::path::PathBuf {
        self._dir.path().join("steward.db")
    }

    pub async fn ok(&self, method: &str, path: &str, body: Value) -> Value {
        let (status, reply) = call(&self.state, TOKEN, method, path, Some(body)).await;
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {reply}"
        );
        reply
    }
}
