//! # steward-store
//!
//! Durable storage behind one trait, [`Store`], made of one trait per concern ([`Identity`],
//! [`Catalog`], [`Effects`], [`Idempotency`], [`Approvals`], [`Policies`], [`Limits`],
//! [`KillSwitch`], [`Holds`], [`Replicas`], [`AuditLog`], [`Budgets`], [`Connections`]). Each method is a single transaction with a crash
//! contract in its doc: what is durable once it returns, and what recovery relies on. Calling a
//! method on a backend (rather than on `dyn Store`) needs its trait in scope:
//! `use steward_store::prelude::*;` brings them all.
//!
//! The embedded default is [`SqliteStore`]: one file on disk in WAL mode with
//! `synchronous=FULL`, so a commit is fsync'd before the call returns. Past one machine,
//! [`PostgresStore`] keeps the same semantics in one PostgreSQL database shared by several
//! replicas (`PostgresStore::connect("postgres://steward@db/steward").await?`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), steward_store::StoreError> {
//! use steward_core::{Millis, ReplicaId};
//! use steward_store::prelude::*;
//! use steward_store::{SqliteStore, Sweep};
//! let store = SqliteStore::open(std::path::Path::new("./steward-data/steward.db"))?;
//! // This process, starting: the only one serving the file, so every other replica is dead.
//! let me = ReplicaId::from_unique("01hx0000000000000000000000");
//! let report = store.recover(&Sweep::sole(&me, Millis(0))).await?;
//! println!("{} effects became unknown", report.dispatching_to_unknown.len());
//! # Ok(()) }
//! ```
//!
//! Uniqueness (one effect per operation key, one live action per name) and state transitions
//! (compare-and-set on the effect's state) are enforced by the database, never by process
//! memory, so any number of connections or processes can share one store safely. In-flight
//! work records the replica (server process) that owns it; a replica that stops heartbeating
//! ([`Replicas::heartbeat`]) for longer than the lease is dead, and the recovery sweep
//! ([`Replicas::recover`]) of another replica takes its work over exactly once.

mod approval_change;
mod audit;
mod audit_entry;
mod budget;
mod catalog_entries;
mod change_plan;
mod columns;
mod connection;
mod console_session;
mod elide;
mod error;
mod governance;
mod hold_rows;
mod input_edit;
mod limit_rows;
mod links;
mod policy_plan;
mod postgres;
mod previews;
mod receipts;
mod records;
mod recovery;
mod run_rows;
mod runs;
mod sqlite;
mod store;
mod submit;
mod tally;
mod webhooks;

pub use approval_change::WITHDRAWN_ORIGIN;
pub use audit::{
    content_hash, expected_hash, legacy_event_hash, link_hash, verify_chain, verify_log,
    verify_unsealed, AuditHead, AuditSeal, ChainError, LogReport, SealOutcome, GENESIS_HASH,
    SEAL_BATCH_EVENTS_MAX,
};
pub use audit_entry::AuditKind;
pub use budget::{
    admit as admit_budget, BudgetRecord, BudgetRefusal, BudgetSpec, BudgetStatus,
    BUDGET_DIMENSION_INVOCATIONS, BUDGET_INVOCATION_UNITS, BUDGET_UNCAPPED_UNITS,
};
pub use connection::{
    ConnectionHealth, ConnectionRecord, ConnectionSession, HealthCheck, SessionStatus,
};
pub use console_session::ConsoleSessionRecord;
pub use elide::{
    elide_document, elide_fields, elided_bytes, json_len, marker as elision_marker, SpanOutline,
    ELIDED_KEY, LISTED_FIELD_BYTES_MAX, RUN_ELIDED_FIELDS,
};
pub use error::{StoreError, StoreResult};
pub use governance::{
    ImpactRequest, LimitRecord, LimitStatus, PolicyChange, PolicyRecord, PolicySetChange,
    PolicyVersion, ReserveOutcome,
};
pub use input_edit::{ApprovalEdit, EditOutcome, EditRequest, InputEdit};
pub use postgres::PostgresStore;
pub use receipts::{IssueOutcome, ReceiptBatch, ReceiptKeyRecord, ReceiptRecord, RECEIPT_PAGE_MAX};
pub use records::*;
pub use recovery::SWEEP_CHUNK_EFFECTS;
pub use runs::{
    FeedbackRecord, RunApproval, RunBody, RunEnd, RunEndRefusal, RunFilter, RunRecord, RunStatus,
    SpanRecord, SpansIngested,
};
pub use sqlite::{
    BackupReport, SqliteStore, COMMIT_UNKNOWN_FAULT, DATABASE_FILE, FAIL_WRITES_WHILE_FILE_ENV,
};
pub use store::Approvals;
pub use store::AuditLog;
pub use store::Budgets;
pub use store::Catalog;
pub use store::Connections;
pub use store::Effects;
pub use store::Holds;
pub use store::Idempotency;
pub use store::Identity;
pub use store::Limits;
pub use store::Policies;
pub use store::Previews;
pub use store::Receipts;
pub use store::Runs;
pub use store::Store;
pub use store::{
    DeadLetter, DeliveryOutcome, Redelivery, RedeliveryTarget, SealedSecret, WebhookBacklog,
    WebhookSubscription, Webhooks, WEBHOOK_BACKLOG_SCAN_EVENTS_MAX,
};
pub use store::{Figures, OperatingFigures, PoolUse, DEAD_LETTERS_COUNTED_MAX};
pub use store::{HaltChange, KillSwitch, UnkeyedChange};
pub use store::{Heartbeat, Replicas};

/// The store's traits, to call store methods on a backend or on one part:
/// `use steward_store::prelude::*;`. (Methods called on `dyn Store` need none of them.)
pub mod prelude {
    pub use crate::store::Approvals;
    pub use crate::store::AuditLog;
    pub use crate::store::Budgets;
    pub use crate::store::Catalog;
    pub use crate::store::Connections;
    pub use crate::store::Effects;
    pub use crate::store::Figures;
    pub use crate::store::Holds;
    pub use crate::store::Idempotency;
    pub use crate::store::Identity;
    pub use crate::store::KillSwitch;
    pub use crate::store::Limits;
    pub use crate::store::Policies;
    pub use crate::store::Previews;
    pub use crate::store::Receipts;
    pub use crate::store::Replicas;
    pub use crate::store::Store;
    pub use crate::store::Webhooks;
}
