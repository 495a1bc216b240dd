//! A safe, Stripe-shaped refunds provider for Steward's tests.
//!
//! Steward must prove that a governed `stripe.refund` never refunds twice,
//! even when the provider times out, drops the connection or answers 500
//! after it already moved the money. Counting HTTP 200s cannot prove that;
//! counting *provider writes* can. This crate is that provider: a real HTTP
//! server on loopback that speaks enough of Stripe's refunds API, counts
//! every committed refund, and injects faults on demand.
//!
//! # A tour
//!
//! Start one in-process on an ephemeral port:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use steward_fixture::{spawn, FaultMode, FaultPlan, FixtureConfig};
//!
//! let fixture = spawn(FixtureConfig {
//!     listen: "127.0.0.1:0".parse()?,
//!     state_file: None,
//! })
//! .await?;
//! let base = fixture.base_url(); // "http://127.0.0.1:PORT"
//! # let _ = base;
//! # Ok(()) }
//! ```
//!
//! Point a Stripe client at `base`. It must authenticate with a test-mode key
//! (`Authorization: Bearer sk_test_...` or `rk_test_...`) and can then
//!
//! * `POST /v1/refunds` with `payment_intent`, `amount`, optional `currency`,
//!   `metadata[key]=value` and `reason` (form-encoded like Stripe, or JSON);
//! * `GET /v1/refunds/{id}` and `GET /v1/refunds?payment_intent=..&limit=..`.
//!
//! Send an `Idempotency-Key` and the fixture behaves like Stripe: the first
//! definitive answer is saved and replayed (with `Idempotent-Replayed: true`)
//! to every later request with that key and the same parameters, without a
//! new write. Different parameters get a 400 `idempotency_error`; a request
//! whose key is still in flight gets a 409 `idempotency_key_in_use`.
//!
//! Then break things, and count:
//!
//! ```no_run
//! # use steward_fixture::{FaultMode, FaultPlan, FixtureHandle};
//! # async fn demo(fixture: FixtureHandle) {
//! // The next refund write commits, then the connection dies unanswered.
//! fixture.set_faults(FaultPlan::new(FaultMode::DropAfterCommit));
//! // ... drive Steward: it sees a transport error, must reconcile or replay
//! // with the same key, and must never write again:
//! assert_eq!(fixture.write_count(), 1);
//! fixture.shutdown().await;
//! # }
//! ```
//!
//! The same controls exist over HTTP for out-of-process use (`steward
//! fixture`, which calls [`serve`]): `POST /_fixture/faults`,
//! `GET /_fixture/writes`, `POST /_fixture/reset`, `GET /_fixture/healthz`.
//! See [`faults`] for what each [`FaultMode`] does.
//!
//! # Durability
//!
//! With [`FixtureConfig::state_file`], refunds *and* saved idempotent results
//! are written durably (temp file, fsync, rename, fsync of the directory)
//! before any response, and loaded on start, so both the write count and
//! replays survive a restart of the fixture itself. Use one state file per
//! running fixture.
//!
//! # Modules
//!
//! * [`refunds`]: the `/v1` API and [`Refund`].
//! * [`generic`]: a generic idempotent provider (`/generic/writes`, a key header and a lookup
//!   by key) for adapters that know no provider's API.
//! * [`oauth`]: an OAuth 2.1 authorization server (consent a test drives, PKCE, refresh with
//!   rotation, revocation, fault switches) and a protected API that counts writes per user.
//! * [`faults`]: [`FaultPlan`] and [`FaultMode`].
//! * `control`: the `/_fixture` endpoints.
//! * [`issuer`]: a local OAuth 2.1 authorization server issuing JWT access tokens (for `/mcp`).
//! * `state`: the store, idempotency bookkeeping and persistence.
//! * `params`: form/JSON decoding and validation.
//! * `conn`: connections a handler can cut without answering.

// The fixture is a stand-in provider, not part of Steward: it keeps its own wall clock for the
// records it makes, as a real provider would (clippy.toml forbids that inside Steward).
#![allow(clippy::disallowed_methods)]

mod account;
mod conn;
mod control;
mod error;
pub mod faults;
pub mod generic;
pub mod issuer;
pub mod oauth;
mod params;
pub mod payment_intents;
pub mod refunds;
mod state;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use faults::{FaultMode, FaultPlan};
pub use generic::GenericWrite;
pub use refunds::Refund;
pub use state::FixtureError;

use conn::{ConnKill, KillableListener};
use state::Store;

/// How long [`FixtureHandle::shutdown`] waits for in-flight requests.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Where to listen and (optionally) where to keep state across restarts.
#[derive(Clone, Debug)]
pub struct FixtureConfig {
    /// Address to bind; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Durable state (refunds and saved idempotent results); memory only if `None`.
    pub state_file: Option<PathBuf>,
}

/// Binds, then serves until `shutdown` resolves. Used by the CLI `steward fixture`.
pub async fn serve(
    config: FixtureConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), FixtureError> {
    let (listener, store) = bind(&config).await?;
    let addr = local_addr(&listener, &config)?;
    // The same ready line as `steward serve`, so scripts can wait for it and learn the port.
    println!("listening on http://{addr}");
    tracing::info!(%addr, "steward fixture listening");
    run(listener, store, shutdown).await
}

/// Binds (port 0 allowed) and serves in a background tokio task; for
/// in-process tests. Dropping the handle also stops the server.
pub async fn spawn(config: FixtureConfig) -> Result<FixtureHandle, FixtureError> {
    let (listener, store) = bind(&config).await?;
    let addr = local_addr(&listener, &config)?;
    tracing::debug!(%addr, "steward fixture spawned");
    let (tx, rx) = oneshot::channel::<()>();
    let shutdown = async move {
        // Resolves on an explicit shutdown and when the handle is dropped.
        let _ = rx.await;
    };
    let server_store = Arc::clone(&store);
    let task = tokio::spawn(async move {
        if let Err(e) = run(listener, server_store, shutdown).await {
            tracing::error!(error = %e, "steward fixture stopped with an error");
        }
    });
    Ok(FixtureHandle {
        addr,
        store,
        shutdown: tx,
        task,
    })
}

async fn bind(config: &FixtureConfig) -> Result<(TcpListener, Arc<Store>), FixtureError> {
    let store = Store::open(config.state_file.clone())?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| FixtureError::Bind {
            addr: config.listen,
            source,
        })?;
    Ok((listener, store))
}

fn local_addr(listener: &TcpListener, config: &FixtureConfig) -> Result<SocketAddr, FixtureError> {
    listener.local_addr().map_err(|source| FixtureError::Bind {
        addr: config.listen,
        source,
    })
}

async fn run(
    listener: TcpListener,
    store: Arc<Store>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), FixtureError> {
    let app = app(store).into_make_service_with_connect_info::<ConnKill>();
    axum::serve(KillableListener(listener), app)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(FixtureError::Serve)
}

fn app(store: Arc<Store>) -> Router {
    refunds::router()
        .merge(generic::router())
        .merge(control::router())
        .merge(payment_intents::control_router())
        .merge(account::router())
        .merge(issuer::router())
        .merge(oauth::router())
        .fallback(not_found)
        .with_state(store)
}

async fn not_found(method: axum::http::Method, uri: axum::http::Uri) -> axum::response::Response {
    use axum::response::IntoResponse;
    let message = format!("Unrecognized request URL ({method}: {}).", uri.path());
    error::ApiError::not_found(None, message).into_response()
}

/// A fixture running in a background task (from [`spawn`]).
pub struct FixtureHandle {
    addr: SocketAddr,
    store: Arc<Store>,
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for FixtureHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FixtureHandle")
            .field("addr", &self.addr)
            .field("write_count", &self.write_count())
            .finish_non_exhaustive()
    }
}

impl FixtureHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://HOST:PORT`, with an unspecified bind address shown as loopback.
    pub fn base_url(&self) -> String {
        let ip = match self.addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        format!("http://{}", SocketAddr::new(ip, self.addr.port()))
    }

    /// Number of committed writes: refunds and generic writes (`generic`).
    pub fn write_count(&self) -> u64 {
        self.store.write_count()
    }

    /// Committed generic writes, in commit order.
    pub fn generic_writes(&self) -> Vec<GenericWrite> {
        self.store.generic_writes()
    }

    /// Committed refunds, in commit order.
    pub fn refunds(&self) -> Vec<Refund> {
        self.store.refunds()
    }

    /// Arms a fault for the next `faults.count` refund writes.
    pub fn set_faults(&self, faults: FaultPlan) {
        self.store.set_faults(faults);
    }

    /// Clears refunds, idempotency keys, faults and the state file.
    /// Does blocking file IO when a state file is configured.
    pub fn reset(&self) {
        if let Err(e) = self.store.reset() {
            tracing::error!(error = %e, "fixture reset could not remove the state file");
        }
    }

    /// Stops accepting connections, lets in-flight requests finish (up to
    /// 10 s), and waits for the server task.
    pub async fn shutdown(self) {
        let FixtureHandle {
            shutdown, mut task, ..
        } = self;
        let _ = shutdown.send(());
        if tokio::time::timeout(SHUTDOWN_GRACE, &mut task)
            .await
            .is_err()
        {
            tracing::warn!("fixture did not stop within the grace period; aborting it");
            task.abort();
        }
    }
}
