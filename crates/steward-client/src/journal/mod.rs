//! The durable operation journal: one record per business operation, in the application's own
//! database. Recovery trusts only what is here, so every method states its crash contract.
//!
//! Two backends, one table (`steward_operations`, also the Python package's): [`SqliteJournal`]
//! and [`PostgresJournal`], both run through [`conformance::run_all`].

pub mod conformance;
mod postgres;
mod row;
mod sqlite;

pub use postgres::PostgresJournal;
pub use sqlite::SqliteJournal;

use crate::operation::{Operation, OperationId};
use async_trait::async_trait;

/// Why a journal call failed.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The operation key already names an operation with a different input.
    #[error("operation key `{key}` of action `{action}` already names {existing} with a different input")]
    KeyConflict {
        action: String,
        key: String,
        existing: OperationId,
    },
    /// Someone saved the operation since it was read; read it again.
    #[error("{id} changed since it was read (expected version {expected})")]
    Stale { id: OperationId, expected: u64 },
    /// No such operation.
    #[error("{id} is not in the journal")]
    NotFound { id: OperationId },
    /// The database failed; nothing of this call is durable.
    #[error("journal storage failed while {context}")]
    Storage {
        context: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A stored record cannot be read back.
    #[error("journal record {id} is corrupt: {reason}")]
    Corrupt { id: String, reason: String },
}

/// What [`Journal::begin`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum Begun {
    /// The operation is new and now durable.
    Created(Operation),
    /// The same key and input were begun before: that operation, as it stands.
    Existing(Operation),
}

impl Begun {
    pub fn into_operation(self) -> Operation {
        match self {
            Begun::Created(op) | Begun::Existing(op) => op,
        }
    }
}

/// Durable storage of business operations.
#[async_trait]
pub trait Journal: Send + Sync {
    /// Records `intended` (state `intended`, version 0) unless its `(environment, action,
    /// operation_key)` is already recorded: then the existing operation is returned when the
    /// input fingerprint matches, and [`JournalError::KeyConflict`] when it does not.
    ///
    /// Crash contract: once this returns `Created`, the record is on disk (fsync'd) and
    /// [`Journal::unfinished`] finds it after any crash.
    async fn begin(&self, intended: &Operation) -> Result<Begun, JournalError>;

    /// Saves every mutable field of `op` if the stored version is still `op.version`; returns
    /// the operation with its version bumped. [`JournalError::Stale`] otherwise.
    ///
    /// Crash contract: once this returns, the new state is on disk (fsync'd).
    async fn save(&self, op: &Operation) -> Result<Operation, JournalError>;

    async fn get(&self, id: &OperationId) -> Result<Option<Operation>, JournalError>;

    /// Every operation not yet `continued`, oldest first: what recovery loads on start-up.
    async fn unfinished(&self) -> Result<Vec<Operation>, JournalError>;

    /// Every operation, oldest first.
    async fn all(&self) -> Result<Vec<Operation>, JournalError>;
}
