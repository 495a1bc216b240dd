//! How patient the driver is, and who reconciles.

use std::time::Duration;

/// How long `run` and `recover` observe a pending approval before leaving the operation
/// explicitly `pending_approval`, in seconds: two long polls. A human decision can take days;
/// the operation keeps its state and the next run observes the same approval again.
pub const APPROVAL_WAIT_S_DEFAULT: u64 = 110;
/// How long the driver waits for a `running` invocation to settle, in seconds: Steward's provider
/// deadline (10 s by default) plus a wide margin.
pub const SETTLE_WAIT_S_DEFAULT: u64 = 40;
/// The pause between reads of an invocation that is still running, in milliseconds.
pub const POLL_INTERVAL_MS_DEFAULT: u64 = 200;
/// Who an `unknown` outcome is assigned to unless the application says otherwise.
pub const ASSIGNEE_DEFAULT: &str = "reconciliation-queue";

#[derive(Debug, Clone)]
pub struct OperationsConfig {
    /// The Steward environment of the API key (part of each operation's identity).
    pub environment: String,
    /// Who reconciles `unknown` outcomes (a team, a queue, a person).
    pub assignee: String,
    pub approval_wait: Duration,
    pub settle_wait: Duration,
    pub poll_interval: Duration,
}

impl OperationsConfig {
    pub fn new(environment: &str) -> OperationsConfig {
        OperationsConfig {
            environment: environment.to_string(),
            assignee: ASSIGNEE_DEFAULT.to_string(),
            approval_wait: Duration::from_secs(APPROVAL_WAIT_S_DEFAULT),
            settle_wait: Duration::from_secs(SETTLE_WAIT_S_DEFAULT),
            poll_interval: Duration::from_millis(POLL_INTERVAL_MS_DEFAULT),
        }
    }
}
