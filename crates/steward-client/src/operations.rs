//! The application's entry point: `begin` an operation (durably, before anything is sent),
//! `run` it, `complete` it, mark its continuation done, and `recover` everything unfinished
//! after a restart.

use crate::api::StewardApi;
use crate::clock;
use crate::config::OperationsConfig;
use crate::crash;
use crate::error::RunError;
use crate::journal::Journal;
use crate::operation::{Operation, OperationId};
use crate::state::LocalState;
use serde_json::Value;
use std::sync::Arc;
use steward_core::{CrashPoint, InvocationStatus, OperationKey};

/// Business operations against one Steward server, journaled in the application's database.
#[derive(Clone)]
pub struct Operations {
    pub(crate) api: StewardApi,
    pub(crate) journal: Arc<dyn Journal>,
    pub(crate) config: OperationsConfig,
}

impl Operations {
    pub fn new(api: StewardApi, journal: Arc<dyn Journal>, config: OperationsConfig) -> Operations {
        Operations {
            api,
            journal,
            config,
        }
    }

    pub fn api(&self) -> &StewardApi {
        &self.api
    }

    pub fn journal(&self) -> &Arc<dyn Journal> {
        &self.journal
    }

    /// Records the intent to invoke `action` with `input` under the stable `operation_key`,
    /// durably (fsync'd) and before anything is sent. Calling it again with the same key and
    /// input returns the same operation, in whatever state it has reached; with a different
    /// input it fails with [`JournalError::KeyConflict`](crate::JournalError::KeyConflict).
    pub async fn begin(
        &self,
        action: &str,
        operation_key: &OperationKey,
        input: Value,
    ) -> Result<Operation, RunError> {
        let op = self.intent(action, operation_key, input);
        Ok(self.journal.begin(&op).await?.into_operation())
    }

    /// The operation [`begin`](Self::begin) would record (a fresh id, state `intended`), not yet
    /// in any journal: for recording it inside the application's own transaction, e.g. with
    /// [`PostgresJournal::begin_in`](crate::PostgresJournal::begin_in), then running it once
    /// that transaction has committed.
    pub fn intent(&self, action: &str, operation_key: &OperationKey, input: Value) -> Operation {
        Operation::intended(
            OperationId::from_unique(&clock::unique()),
            &self.config.environment,
            action,
            operation_key.clone(),
            input,
            None,
            clock::now(),
        )
    }

    /// Begins a new operation that retries `failed` (a settled-failed invocation) through the
    /// server's `retryOf`. The retry needs its own operation key: the old key names the failed
    /// effect forever.
    pub async fn begin_retry(
        &self,
        failed: &Operation,
        operation_key: &OperationKey,
        input: Value,
    ) -> Result<Operation, RunError> {
        let current = self.current(failed).await?;
        let is_failed = current.server_status == Some(InvocationStatus::Failed)
            && matches!(
                current.state,
                LocalState::Failed | LocalState::Completed | LocalState::Continued
            );
        let Some(prior) = current.invocation_id.clone().filter(|_| is_failed) else {
            return Err(RunError::WrongState {
                op: current.id,
                state: current.state,
                what: "be retried (only a settled-failed invocation can be)",
            });
        };
        let op = Operation::intended(
            OperationId::from_unique(&clock::unique()),
            &self.config.environment,
            &current.action,
            operation_key.clone(),
            input,
            Some(prior),
            clock::now(),
        );
        Ok(self.journal.begin(&op).await?.into_operation())
    }

    /// Dispatches the operation or observes it, per its saved state, until it rests: settled,
    /// `unknown` (assigned for reconciliation), or still pending approval / running after the
    /// configured waits. A timeout or a lost connection leaves the saved state and keys as
    /// they are: running it again resends the same request, never a new one.
    pub async fn run(&self, op: &Operation) -> Result<Operation, RunError> {
        let current = self.current(op).await?;
        Ok(self.drive(current).await?.0)
    }

    /// The final local save: records the application's `result` for a settled operation.
    /// Idempotent on an operation already completed.
    pub async fn complete(&self, op: &Operation, result: Value) -> Result<Operation, RunError> {
        let current = self.current(op).await?;
        match current.state {
            LocalState::Completed | LocalState::Continued => return Ok(current),
            s if s.is_settled() => {}
            other => {
                return Err(RunError::WrongState {
                    op: current.id,
                    state: other,
                    what: "complete (it is not settled)",
                })
            }
        }
        let mut next = current;
        next.state = LocalState::Completed;
        next.result = Some(result);
        next.updated_at = clock::now();
        let saved = self.journal.save(&next).await?;
        crash::reach(CrashPoint::AfterSave);
        Ok(saved)
    }

    /// Records that the application's (idempotent) continuation of a completed operation is
    /// done. Idempotent.
    pub async fn mark_continued(&self, op: &Operation) -> Result<Operation, RunError> {
        let current = self.current(op).await?;
        match current.state {
            LocalState::Continued => Ok(current),
            LocalState::Completed => {
                let mut next = current;
                next.state = LocalState::Continued;
                next.updated_at = clock::now();
                Ok(self.journal.save(&next).await?)
            }
            other => Err(RunError::WrongState {
                op: current.id,
                state: other,
                what: "mark the continuation done (it is not completed)",
            }),
        }
    }

    /// The operation as the journal has it now.
    pub(crate) async fn current(&self, op: &Operation) -> Result<Operation, RunError> {
        self.journal
            .get(&op.id)
            .await?
            .ok_or_else(|| RunError::Journal(crate::JournalError::NotFound { id: op.id.clone() }))
    }
}
