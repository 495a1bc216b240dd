//! Start-up recovery: load every unfinished operation and drive it with the same decision a
//! first run uses (docs/INVARIANTS.md, the crash windows). Nothing is sent with a new key, nothing `unknown` is
//! resent, and no second approval is requested.

use crate::decide::RecoveryAction;
use crate::error::RunError;
use crate::operation::Operation;
use crate::operations::Operations;
use crate::state::LocalState;
use std::collections::BTreeMap;

/// What recovery did with one operation.
#[derive(Debug, Clone)]
pub struct Recovered {
    /// The local state found in the journal.
    pub state_before: LocalState,
    /// The operation as it rests now.
    pub operation: Operation,
    /// The decisions taken, in order.
    pub steps: Vec<RecoveryAction>,
    /// Why it could not be driven to a resting state (it keeps its saved state).
    pub error: Option<String>,
}

/// The outcome of [`Operations::recover`].
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    pub operations: Vec<Recovered>,
}

impl RecoveryReport {
    fn in_state(&self, states: &[LocalState]) -> Vec<&Operation> {
        self.operations
            .iter()
            .map(|r| &r.operation)
            .filter(|o| states.contains(&o.state))
            .collect()
    }

    /// Settled by the server and waiting for the application's `complete` (and, for failures,
    /// its decision, which may be a new operation with `retryOf`).
    pub fn to_complete(&self) -> Vec<&Operation> {
        self.in_state(&[
            LocalState::Succeeded,
            LocalState::Failed,
            LocalState::Denied,
            LocalState::Expired,
        ])
    }

    /// Completed; the application's idempotent continuation is still to run.
    pub fn to_continue(&self) -> Vec<&Operation> {
        self.in_state(&[LocalState::Completed])
    }

    /// Still waiting for a human decision: observed, not re-requested.
    pub fn pending_approval(&self) -> Vec<&Operation> {
        self.in_state(&[LocalState::PendingApproval])
    }

    /// Outcome unknown: assigned for reconciliation, not resent.
    pub fn unknown(&self) -> Vec<&Operation> {
        self.in_state(&[LocalState::Unknown])
    }

    /// Operations recovery could not bring to rest, with the reason.
    pub fn errors(&self) -> Vec<(&Operation, &str)> {
        self.operations
            .iter()
            .filter_map(|r| r.error.as_deref().map(|e| (&r.operation, e)))
            .collect()
    }

    /// `state=count` pairs, e.g. `continued=2 unknown=1`.
    pub fn summary(&self) -> String {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for r in &self.operations {
            *counts.entry(r.operation.state.as_str()).or_default() += 1;
        }
        if counts.is_empty() {
            return "nothing to recover".into();
        }
        counts
            .iter()
            .map(|(s, n)| format!("{s}={n}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl Operations {
    /// Loads every operation not yet `continued` and drives each per docs/INVARIANTS.md (the crash windows):
    /// a known invocation is read; one with no invocation id is resent with its saved keys
    /// (the server returns the original); a pending approval is observed; `unknown` is assigned
    /// for reconciliation; settled ones are handed back to the application in the report.
    ///
    /// Only a journal failure fails the whole call; an operation the server could not be asked
    /// about keeps its state and is listed with its error.
    pub async fn recover(&self) -> Result<RecoveryReport, RunError> {
        let mut report = RecoveryReport::default();
        for op in self.journal.unfinished().await? {
            let state_before = op.state;
            let id = op.id.clone();
            let recovered = match self.drive(op).await {
                Ok((operation, steps)) => Recovered {
                    state_before,
                    operation,
                    steps,
                    error: None,
                },
                Err(RunError::Journal(e)) => return Err(RunError::Journal(e)),
                Err(e) => {
                    let operation = self.journal.get(&id).await?.ok_or_else(|| {
                        RunError::Journal(crate::JournalError::NotFound { id: id.clone() })
                    })?;
                    Recovered {
                        state_before,
                        operation,
                        steps: vec![],
                        error: Some(e.to_string()),
                    }
                }
            };
            tracing::info!(
                op = %recovered.operation.id,
                before = %state_before,
                after = %recovered.operation.state,
                steps = ?recovered.steps,
                error = recovered.error.as_deref().unwrap_or(""),
                "recovered"
            );
            report.operations.push(recovered);
        }
        Ok(report)
    }
}
