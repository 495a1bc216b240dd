//! Start-up and shutdown.

use crate::api::metrics::MetricsToken;
use crate::clock::{Clock, SystemClock, UlidIds};
use crate::dispatch::outbound::{http_client, OutboundPolicy};
use crate::dispatch::transport::HttpTransport;
use crate::listener::ConnectionLimits;
use crate::start_error::StartError;
use crate::state::AppState;
use crate::vault::Vault;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use steward_store::{PostgresStore, SqliteStore, Store, StoreError, Sweep};

pub use steward_store::DATABASE_FILE;

/// How long a stopping server lets requests and dispatches in flight finish, in milliseconds:
/// the default dispatch deadline (`DISPATCH_TIMEOUT_MS_DEFAULT`, 10 s) and five more to record
/// the answer, so a provider call sent just before the signal still ends recorded. Keep the
/// supervisor's stop timeout above it (systemd `TimeoutStopSec`, compose `stop_grace_period`).
pub const SHUTDOWN_GRACE_MS_DEFAULT: u64 = 15_000;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub data_dir: PathBuf,
    /// A PostgreSQL connection string to use instead of the embedded store in `data_dir` (which
    /// still holds the vault's master key).
    pub database: Option<String>,
    pub listen: SocketAddr,
    /// The console's base URL as people reach it (`--public-url`), for the links approval
    /// channels send; `None`: `http://` and the listen address.
    pub public_url: Option<String>,
    pub allow_insecure_destinations: bool,
    pub dispatch_timeout: Duration,
    /// See [`AppState::absence_grace`].
    pub absence_grace: Duration,
    /// The background reconciler's tick; `None` turns it off.
    pub reconcile_interval: Option<Duration>,
    /// With `database`: how long a replica may go without a heartbeat before the others take
    /// over its in-flight work (`replica::REPLICA_LEASE_MS_DEFAULT`). Also how long the audit
    /// sealer's lease runs from each seal (`audit_sealer.rs`).
    pub lease: Duration,
    /// Header read timeout, idle timeout and connection cap of every listener (`listener.rs`).
    pub connection_limits: ConnectionLimits,
    /// Opens `/metrics` on the main listener to `Authorization: Bearer <token>`, and is
    /// required on the metrics listener too (`api/metrics.rs`).
    pub metrics_token: Option<MetricsToken>,
    /// A second listener serving `/metrics` alone. Off a loopback address it needs
    /// `metrics_token`.
    pub metrics_listen: Option<SocketAddr>,
    /// Host names `/mcp` answers besides loopback names and the listen address
    /// (`mcp/http.rs`): the public name of a deployment behind a proxy.
    pub mcp_allowed_hosts: Vec<String>,
    /// What a governed MCP call without an operation key does (`mcp/derive.rs`).
    pub mcp_keys: crate::mcp::derive::KeyPolicy,
    /// OAuth access tokens `/mcp` accepts beside agent keys, and the issuers it trusts
    /// (`--mcp-oauth`; `mcp/oauth.rs`). `None`: agent keys only.
    pub mcp_oauth: Option<Arc<crate::mcp::oauth::OAuth>>,
    /// Whether the operator console at `/console/` may change anything
    /// (`--console-read-only` makes it [`crate::ConsoleMode::ReadOnly`]).
    pub console: crate::ConsoleMode,
    /// The integrations accounts can be connected for (`--integrations`, else the built-in
    /// catalog).
    pub integrations: crate::integrations::Integrations,
    /// How often and how long webhook deliveries are retried before an event is dead-lettered
    /// (`--webhook-retry-*`; `webhooks/retry.rs`).
    pub webhook_retry: crate::RetrySchedule,
    /// How long, once `shutdown` resolves, requests and dispatches in flight have to finish
    /// ([`SHUTDOWN_GRACE_MS_DEFAULT`]).
    pub shutdown_grace: Duration,
}

/// Opens the store: the PostgreSQL database at `database` when given (applying its schema
/// migrations), else the embedded store of the data directory.
pub async fn open_store(
    data_dir: &Path,
    database: Option<&str>,
) -> Result<Arc<dyn Store>, StartError> {
    match database {
        // The connection string may hold a password: it is not repeated in the error.
        Some(url) => Ok(Arc::new(
            PostgresStore::connect(url)
                .await
                .map_err(StartError::OpenPostgres)?,
        )),
        None => Ok(Arc::new(
            SqliteStore::open(&data_dir.join(DATABASE_FILE)).map_err(|source| {
                StartError::OpenEmbedded {
                    data_dir: data_dir.to_path_buf(),
                    source,
                }
            })?,
        )),
    }
}

/// Opens the store a server made, for every command but `serve`: the embedded store only when
/// the data directory holds one, the PostgreSQL database only when it holds a Steward schema.
/// It never creates one, so a key made by `steward keys` outside the server's data directory is
/// refused rather than written to a new store no server reads. An existing store is migrated as
/// by [`open_store`].
pub async fn open_existing_store(
    data_dir: &Path,
    database: Option<&str>,
) -> Result<Arc<dyn Store>, StartError> {
    match database {
        Some(url) => match PostgresStore::connect_existing(url).await {
            Ok(store) => Ok(Arc::new(store)),
            Err(StoreError::NotFound { .. }) => Err(StartError::NoSharedStore),
            Err(e) => Err(StartError::OpenPostgres(e)),
        },
        None if !data_dir.join(DATABASE_FILE).is_file() => Err(StartError::NoEmbeddedStore {
            data_dir: data_dir.to_path_buf(),
        }),
        None => open_store(data_dir, None).await,
    }
}

/// Recovers, listens, and serves until `shutdown` resolves. Prints `listening on http://ADDR`
/// on stdout once ready (the port is the real one when `listen` asked for port 0).
///
/// With the embedded store, the data directory's lock file is taken first (a second `serve`
/// fails), and start-up recovery takes over everything the previous process left in flight.
/// With `database`, this process is one replica of several: it registers, takes over only the
/// work of replicas whose lease expired, then heartbeats and sweeps in the background
/// (`replica.rs`). Either way it seals the audit log in the background (`audit_sealer.rs`; on a
/// shared store, while it holds the sealer's lease).
pub async fn serve(
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let mcp = crate::mcp::Settings {
        hosts: crate::mcp::http::Hosts::new(Some(config.listen.ip()), &config.mcp_allowed_hosts)?,
        keys: config.mcp_keys,
        oauth: config.mcp_oauth.clone(),
    };
    if let Some(addr) = config.metrics_listen {
        if !addr.ip().is_loopback() && config.metrics_token.is_none() {
            return Err(StartError::MetricsListenNotLoopback(addr));
        }
    }
    let shared = config.database.is_some();
    // Held until `serve` returns; the operating system releases it however the process ends.
    let _lock = if shared {
        None
    } else {
        Some(crate::replica::lock_data_dir(&config.data_dir)?)
    };
    let state = start(&config, shared).await?;
    if let Some(oauth) = &mcp.oauth {
        oauth
            .resolve(&state)
            .await
            .map_err(|source| StartError::Store {
                step: "finding the environments --mcp-oauth maps subjects to",
                source,
            })?;
    }
    spawn_background(&state, &config, shared);
    listen(state, config, mcp, shutdown).await
}

/// Opens the store and the vault, registers this replica, takes over what the previous process
/// (or an expired replica) left in flight, and builds the state every request shares.
async fn start(config: &ServerConfig, shared: bool) -> Result<AppState, StartError> {
    let store = open_store(&config.data_dir, config.database.as_deref()).await?;
    let vault = Vault::open_or_create(&config.data_dir)?;
    let clock = Arc::new(SystemClock);
    crate::vault::verify_master_key(store.as_ref(), &vault, clock.now()).await?;
    // The receipt signing key: made here at first start, sealed by the vault just opened.
    crate::receipts::keys::ensure(store.as_ref(), &vault, clock.now()).await?;
    let replica = crate::replica::new_id();
    let registered = std::time::Instant::now();
    let sweep = if shared {
        store
            .heartbeat(&replica, clock.now())
            .await
            .map_err(|source| StartError::Store {
                step: "registering this replica",
                source,
            })?;
        Sweep::lease(&replica, clock.now(), config.lease.as_millis() as i64)
    } else {
        Sweep::sole(&replica, clock.now())
    };
    let report = store
        .recover(&sweep)
        .await
        .map_err(|source| StartError::Store {
            step: "start-up recovery",
            source,
        })?;
    tracing::info!(%replica, shared, "replica registered");
    let outbound = OutboundPolicy {
        allow_insecure: config.allow_insecure_destinations,
    };
    let http = http_client(outbound).map_err(StartError::HttpClient)?;
    let state = AppState {
        store,
        vault,
        clock,
        transport: transport(&http),
        http,
        ids: Arc::new(UlidIds),
        outbound,
        dispatch_timeout: config.dispatch_timeout,
        approval_events: Arc::new(tokio::sync::Notify::new()),
        absence_grace: config.absence_grace,
        metrics: Arc::new(crate::metrics::Metrics::default()),
        crash_hook: None,
        defect: None,
        replica,
        lease: Arc::new(if shared {
            crate::replica::Lease::shared(config.lease, registered)
        } else {
            crate::replica::Lease::unlimited()
        }),
        key_usage: Arc::default(),
        integrations: Arc::new(config.integrations.clone()),
        stream_slots: Arc::default(),
        heavy_reads: Arc::default(),
        pending: Arc::default(),
    };
    crate::replica::took_over(&state, &report);
    Ok(state)
}

/// The work a server does besides answering: heartbeats and takeover sweeps (replicas),
/// approval events from other replicas, approval expiry, audit sealing, receipt issuing, webhook
/// delivery and the reconciler.
fn spawn_background(state: &AppState, config: &ServerConfig, shared: bool) {
    if shared {
        tokio::spawn(crate::replica::heartbeat(state.clone(), config.lease));
        tokio::spawn(crate::replica::sweep(state.clone(), config.lease));
    }
    if let Some(events) = state.store.approval_events() {
        tokio::spawn(crate::replica::forward_approval_events(
            state.clone(),
            events,
        ));
    }
    tokio::spawn(expire_approvals(state.clone()));
    tokio::spawn(crate::dispatch::settle_kept::run(state.clone()));
    tokio::spawn(crate::audit_sealer::run(state.clone(), config.lease));
    tokio::spawn(crate::receipts::issuer::run(state.clone()));
    tokio::spawn(crate::webhooks::deliver::run(
        state.clone(),
        crate::webhooks::deliver::DeliverySettings {
            retry: config.webhook_retry,
            public_url: config
                .public_url
                .clone()
                .unwrap_or_else(|| format!("http://{}", config.listen))
                .trim_end_matches('/')
                .into(),
            shared,
            replica_lease: config.lease,
        },
    ));
    if let Some(interval) = config.reconcile_interval {
        tokio::spawn(crate::reconcile::background::run(state.clone(), interval));
    }
}

/// Serves until `shutdown`, then stops taking work and gives requests and dispatches in flight
/// the grace to finish.
async fn listen(
    state: AppState,
    config: ServerConfig,
    mcp: crate::mcp::Settings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let (listener, addr) = bind(config.listen, "").await?;
    let metrics_listener = match config.metrics_listen {
        Some(metrics_addr) => Some(bind(metrics_addr, " for metrics").await?),
        None => None,
    };
    let grace = config.shutdown_grace;
    let metrics = state.metrics.clone();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let signalled = Arc::new(std::sync::OnceLock::new());
    tokio::spawn({
        let (signalled, metrics) = (signalled.clone(), metrics.clone());
        async move {
            shutdown.await;
            let _ = signalled.set(tokio::time::Instant::now());
            tracing::info!(
                grace_ms = grace.as_millis() as u64,
                dispatches_in_flight = metrics.dispatches_in_flight(),
                "shutting down: new connections are refused; requests and dispatches in flight \
                 have the grace to finish"
            );
            let _ = stop.send(true);
        }
    });
    let limits = config.connection_limits;
    let metrics_served = metrics_listener.map(|(metrics_listener, metrics_addr)| {
        println!("metrics on http://{metrics_addr}/metrics");
        tracing::info!(%metrics_addr, "metrics listener is ready");
        tokio::spawn(crate::listener::run(
            metrics_listener,
            crate::api::metrics_router(state.clone(), config.metrics_token.clone()),
            limits,
            grace,
            metrics.clone(),
            stopped.clone(),
        ))
    });
    println!("listening on http://{addr}");
    tracing::info!(%addr, "steward is ready");
    let kept = state.clone();
    let connections_left = crate::listener::run(
        listener,
        crate::router::router(state, config.metrics_token, mcp, config.console),
        limits,
        grace,
        metrics.clone(),
        stopped,
    )
    .await;
    // A dispatch whose client went away runs on in its own task, outside any connection.
    let since = signalled
        .get()
        .copied()
        .unwrap_or_else(tokio::time::Instant::now);
    let dispatches_left = metrics.dispatches_settled(since + grace).await;
    // Answers still waiting for the database get one last try; what is left is marked unknown
    // by the next start's sweep, or by another replica's.
    if !kept.pending.is_empty() {
        crate::dispatch::settle_kept::settle_all(&kept).await;
        if !kept.pending.is_empty() {
            tracing::warn!(
                answers_left = kept.pending.len(),
                "stopping with answers the database did not take: their attempts are marked \
                 unknown by the next sweep and settled by the reconciler"
            );
        }
    }
    if let Some(metrics_served) = metrics_served {
        metrics_served.await.map_err(StartError::MetricsListener)?;
    }
    stopped_log(connections_left, dispatches_left, since.elapsed());
    Ok(())
}

/// The last line a stopping server logs: whether everything in flight finished.
fn stopped_log(connections_left: usize, dispatches_left: u64, took: Duration) {
    let took_ms = took.as_millis() as u64;
    if connections_left == 0 && dispatches_left == 0 {
        tracing::info!(
            took_ms,
            "shutdown complete: every request answered, every dispatch recorded"
        );
    } else {
        tracing::warn!(
            took_ms,
            connections_left,
            dispatches_left,
            "shutdown grace ran out: what was still in flight is cut; an attempt whose answer \
             was not recorded is taken over as unknown at the next start and settled by the \
             reconciler"
        );
    }
}

/// Binds `addr` and answers the address it got (the real port when `addr` asked for port 0).
async fn bind(
    addr: SocketAddr,
    purpose: &'static str,
) -> Result<(tokio::net::TcpListener, SocketAddr), StartError> {
    let listen_error = |source| StartError::Listen {
        addr,
        purpose,
        source,
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(listen_error)?;
    let bound = listener.local_addr().map_err(listen_error)?;
    Ok((listener, bound))
}

/// How often pending approvals are checked for expiry, in milliseconds.
const EXPIRY_SWEEP_MS: u64 = 1_000;

/// Expires approvals whose time ran out, and wakes their long polls.
async fn expire_approvals(state: AppState) {
    let mut tick = tokio::time::interval(Duration::from_millis(EXPIRY_SWEEP_MS));
    loop {
        tick.tick().await;
        match state.store.expire_approvals(state.clock.now()).await {
            Ok(expired) if !expired.is_empty() => {
                tracing::info!(count = expired.len(), "approvals expired");
                state.metrics.approvals_expired(expired.len() as u64);
                state.approval_events.notify_waiters();
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "approval expiry sweep failed; retrying"),
        }
    }
}

/// The server's transport: the guarded HTTP client (broken on purpose only when
/// `STEWARD_FAULTS_SELFTEST` is set, `selftest.rs`).
fn transport(http: &reqwest::Client) -> Arc<dyn crate::Transport> {
    crate::selftest::transport(Arc::new(HttpTransport::new(http.clone())))
}
