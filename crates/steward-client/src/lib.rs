//! # steward-client
//!
//! The agent application's side of Steward: a typed client for `/api/v2`, and a durable
//! **operation journal** that makes a crash anywhere (before sending, after sending, after the
//! answer, while an approval is pending, after the final save) recoverable without repeating
//! the action.
//!
//! A business operation is recorded *before* anything is sent, under the application's stable
//! operation key, with its input, its fingerprint and the `Idempotency-Key` every send will
//! carry. Running it sends that request (or observes what the server already has); restarting
//! loads every unfinished operation and drives it with the same pure decision ([`decide`]).
//!
//! ```no_run
//! use serde_json::json;
//! use std::sync::Arc;
//! use steward_client::{Operations, OperationsConfig, SqliteJournal, StewardApi, LocalState};
//! use steward_core::OperationKey;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let api = StewardApi::new("http://127.0.0.1:4000", "stw_...")?;
//! let journal = Arc::new(SqliteJournal::open("app.db".as_ref())?);
//! let ops = Operations::new(api, journal, OperationsConfig::new("test"));
//!
//! // On start-up: finish what a previous run left (it never resends with a new key).
//! let report = ops.recover().await?;
//! for op in report.to_complete() { /* complete and continue, as below */ }
//!
//! // Durable intent first, then the call.
//! let key = OperationKey::parse("refund:order-42")?;
//! let op = ops.begin("refund-order", &key, json!({"paymentIntent": "pi_1", "amount": 1250})).await?;
//! let op = ops.run(&op).await?;
//! if op.state == LocalState::Succeeded {
//!     let op = ops.complete(&op, json!({"refunded": true})).await?; // final local save
//!     // ... the idempotent continuation (mark the order, notify) ...
//!     ops.mark_continued(&op).await?;
//! }
//! # Ok(()) }
//! ```
//!
//! The journal lives in the application's own database: [`SqliteJournal`] (a file), or
//! [`PostgresJournal`] on the application's pool, whose [`PostgresJournal::begin_in`] records the
//! intent inside the application's own transaction ([`Operations::intent`] builds it), so the
//! application's rows and the intent commit together. The Python package
//! `python/steward-recovery` keeps the same table and the same decision.
//!
//! An operator's tools (the `steward` CLI's `approvals`, `effects`, `invocations`, ...) use
//! [`Operator`] instead: one typed call per command, answering the server's own `steward_wire`
//! views, sent once, with errors worded for a person at a terminal ([`OperatorError`]).
//!
//! Crash points (`STEWARD_CRASH_AT=before_dispatch|after_dispatch|after_response|
//! awaiting_approval|after_save`) abort the process inside each window, for tests like
//! `steward chaos`. Unset, they cost one atomic load.

mod api;
mod clock;
mod config;
mod crash;
mod decide;
mod drive;
mod error;
mod journal;
mod operation;
mod operations;
mod recover;
mod state;

pub use api::{
    Answer, ApiError, Approval, ApprovalStatus, EffectFilter, Invocation, InvocationFilter,
    InvokeRequest, Operator, OperatorError, Reconcile, Resolution, RetryPolicy, StewardApi,
    Unreachable, BACKOFF_INITIAL_MS, BACKOFF_MAX_MS, LONG_POLL_WAIT_S_MAX,
    OPERATOR_REQUEST_TIMEOUT_S, REQUEST_TIMEOUT_S, SERVER_DEFAULT, TRANSPORT_ATTEMPTS_MAX,
};
pub use config::{
    OperationsConfig, APPROVAL_WAIT_S_DEFAULT, ASSIGNEE_DEFAULT, POLL_INTERVAL_MS_DEFAULT,
    SETTLE_WAIT_S_DEFAULT,
};
pub use decide::{decide, Contradiction, RecoveryAction, ServerView};
pub use error::RunError;
pub use journal::{conformance, Begun, Journal, JournalError, PostgresJournal, SqliteJournal};
pub use operation::{Operation, OperationId};
pub use operations::Operations;
pub use recover::{Recovered, RecoveryReport};
pub use state::LocalState;
