//! # steward-server
//!
//! The HTTP face of Steward: the Anlyon v2 governed-execution contract under `/api/v2`, the
//! write-only vault, the dispatcher with its adapters, and start-up recovery.
//!
//! [`serve`] opens the store in a data directory, runs recovery (every effect left
//! `dispatching` by a crash becomes `unknown`; nothing is re-sent), and only then listens. On a
//! shared PostgreSQL store each `serve` is one replica of several: it heartbeats, and takes over
//! the in-flight work of replicas whose lease expired (`replica.rs`).
//! [`app`] builds the router alone, for tests that drive it without a socket.
//!
//! The write path of one invoke is numbered in `dispatch/mod.rs` and in docs/ARCHITECTURE.md.

mod adapters;
mod api;
mod app;
mod audit_sealer;
mod auth;
mod clock;
mod console;
mod crash;
mod dispatch;
#[cfg(test)]
mod doors;
mod effect_error;
mod envelope;
mod error;
mod events;
#[cfg(test)]
mod import_cycles;
mod input_schema;
mod integrations;
mod key_usage;
mod keys;
mod lease;
mod listener;
mod mcp;
mod metrics;
mod oauth;
mod per_key;
mod progress;
mod receipts;
mod reconcile;
mod replica;
mod router;
mod selftest;
mod serve;
mod start_error;
mod state;
mod telemetry;
#[cfg(test)]
mod test_state;
mod vault;
mod webhooks;

/// The quantities one call of an action changes, as its adapter (or its template's `impact`)
/// declares them: what impact limits reserve. The simulator reserves with the same function.
pub use adapters::quantities as impact_quantities;
pub use api::metrics::{MetricsToken, MetricsTokenError, METRICS_TOKEN_CHARS_MIN};
pub use audit_sealer::AUDIT_SEAL_INTERVAL_MS;
pub use clock::{unique, Clock, IdSource, SystemClock, UlidIds};
pub use console::ConsoleMode;
pub use crash::CrashHook;
pub use dispatch::defect::Defect;
pub use dispatch::outbound::{http_client, OutboundPolicy};
pub use dispatch::transport::{Exchange, FailureKind, HttpTransport, Transport, TransportFailure};
/// The dispatcher and the reconciler, for the simulator to drive (`steward-sim`).
pub use dispatch::{replay, submit_and_dispatch, Submitted};
pub use effect_error::EffectError;
pub use integrations::{Integrations, INTEGRATIONS_MAX, KEY_CHECK_TIMEOUT_MS};
pub use keys::{generate_token, hash_token, KEY_PREFIX};
pub use listener::{
    ConnectionLimits, ACCEPT_ERROR_BACKOFF_MS, BODY_READ_TIMEOUT_MS_DEFAULT,
    CONNECTIONS_MAX_DEFAULT, HEADER_READ_TIMEOUT_MS_DEFAULT, IDLE_TIMEOUT_MS_DEFAULT,
};
pub use mcp::derive::{
    KeyPolicy as McpKeyPolicy, DERIVED_KEY_WINDOW_S_DEFAULT, DERIVED_KEY_WINDOW_S_MAX,
};
pub use mcp::oauth::{
    OAuth as McpOAuth, LEEWAY_S_DEFAULT as MCP_OAUTH_LEEWAY_S_DEFAULT,
    SCOPE_DEFAULT as MCP_OAUTH_SCOPE_DEFAULT,
};
pub use metrics::{ConnectionOpen, DispatchInFlight, Metrics};
pub use progress::Progress;
pub use receipts::issuer::{ISSUE_BATCH_EVENTS_MAX, RECEIPT_ISSUE_INTERVAL_MS};
pub use receipts::keys::{
    ensure as ensure_receipt_key, rotate as rotate_receipt_key, ReceiptKeyError,
};
pub use reconcile::{reconcile, Reconciled};
pub use replica::{
    heartbeat_every, lock_data_dir, Lease, LOCK_FILE, REPLICA_HEARTBEAT_MS,
    REPLICA_LEASE_MS_DEFAULT, REPLICA_LEASE_MS_MIN,
};
pub use router::app;
pub use serve::{
    open_existing_store, open_store, serve, ServerConfig, DATABASE_FILE, SHUTDOWN_GRACE_MS_DEFAULT,
};
pub use start_error::StartError;
pub use state::{
    AppState, ABSENCE_GRACE_MS_DEFAULT, DISPATCH_TIMEOUT_MS_DEFAULT, RECONCILE_INTERVAL_MS_DEFAULT,
};
pub use vault::{verify_master_key, Vault, MASTER_KEY_ENV, MASTER_KEY_FILE};
pub use webhooks::retry::{
    RetrySchedule, RetryScheduleError, WEBHOOK_RETRY_ATTEMPTS_DEFAULT,
    WEBHOOK_RETRY_FIRST_DELAY_MS_DEFAULT, WEBHOOK_RETRY_MAX_DELAY_MS_DEFAULT,
};
