//! The worker's loop: recover what a previous run left, then run each task as a business
//! operation, and after each settles, complete it and run the continuation.

use crate::orders::{Orders, Outcome};
use crate::tasks::{self, order_of, Task};
use anyhow::Context;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use steward_client::{
    Journal, LocalState, Operation, OperationId, Operations, OperationsConfig, SqliteJournal,
    StewardApi, APPROVAL_WAIT_S_DEFAULT, ASSIGNEE_DEFAULT,
};

/// The command line. Every flag can also come from the environment, which is how
/// `steward chaos` configures any worker it drives.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Steward's base URL.
    #[arg(long, env = "STEWARD_URL")]
    pub server: String,
    /// An API key with `actions:invoke` and `approvals:read` (the `agent` role).
    #[arg(long, env = "STEWARD_API_KEY", hide_env_values = true)]
    pub key: String,
    /// The worker's SQLite database: the operation journal and the worker's own tables.
    #[arg(long, env = "STEWARD_JOURNAL")]
    pub journal: PathBuf,
    /// The refund tasks: a JSON list of {"orderId", "paymentIntent", "amount"}.
    #[arg(long, env = "STEWARD_TASKS")]
    pub tasks: PathBuf,
    /// The `stripe.refund` action to invoke.
    #[arg(long, env = "STEWARD_ACTION", default_value = "refund-order")]
    pub action: String,
    /// The Steward environment of the key (part of each operation's identity).
    #[arg(long, env = "STEWARD_ENVIRONMENT", default_value = "test")]
    pub environment: String,
    /// Who reconciles refunds whose outcome is unknown.
    #[arg(long, env = "STEWARD_ASSIGNEE", default_value = ASSIGNEE_DEFAULT)]
    pub assignee: String,
    /// How long to observe a pending approval before leaving it pending, in seconds.
    #[arg(long, env = "STEWARD_APPROVAL_WAIT_S", default_value_t = APPROVAL_WAIT_S_DEFAULT)]
    pub approval_wait_s: u64,
}

struct Worker {
    ops: Operations,
    orders: Orders,
    /// Operations that could not be brought to rest in this run.
    failures: usize,
}

fn order_id(op: &Operation) -> String {
    order_of(&op.operation_key)
        .unwrap_or(op.operation_key.as_str())
        .to_string()
}

impl Worker {
    /// Settled → complete (the final local save) → continuation → continued. Completed →
    /// continuation → continued. Anything else is left as it rests.
    async fn finish(&mut self, op: Operation) -> anyhow::Result<Operation> {
        let op = if op.state.is_settled() {
            let result = match op.state {
                LocalState::Succeeded => json!({
                    "refunded": true,
                    "refundId": refund_id(&op),
                }),
                other => json!({ "refunded": false, "reason": other.as_str() }),
            };
            self.ops.complete(&op, result).await?
        } else {
            op
        };
        if op.state != LocalState::Completed {
            return Ok(op);
        }
        let order = order_id(&op);
        let refunded = op.result.as_ref().and_then(|r| r["refunded"].as_bool()) == Some(true);
        let reason = op
            .result
            .as_ref()
            .and_then(|r| r["reason"].as_str())
            .unwrap_or("failed")
            .to_string();
        self.orders.record(&Outcome {
            order_id: &order,
            operation_id: op.id.as_str(),
            status: if refunded { "refunded" } else { &reason },
            refund_id: refund_id(&op).as_deref(),
        })?;
        Ok(self.ops.mark_continued(&op).await?)
    }

    async fn run_task(
        &mut self,
        task: &Task,
        done: &HashSet<OperationId>,
        action: &str,
    ) -> anyhow::Result<()> {
        let op = self
            .ops
            .begin(action, &task.operation_key()?, task.input())
            .await?;
        if done.contains(&op.id) || op.state == LocalState::Continued {
            return Ok(());
        }
        let op = if op.state.is_settled() || op.state == LocalState::Completed {
            op
        } else {
            self.ops.run(&op).await?
        };
        self.finish(op).await?;
        Ok(())
    }
}

fn refund_id(op: &Operation) -> Option<String> {
    op.server_record
        .as_ref()
        .and_then(|r| r["body"]["id"].as_str())
        .map(str::to_string)
}

/// One line per task on stdout: `{"orderId", "operationId", "state", "invocationId"}`.
fn summary_line(task: &Task, op: Option<&Operation>) -> Value {
    json!({
        "orderId": task.order_id,
        "operationId": op.map(|o| o.id.to_string()),
        "state": op.map(|o| o.state.as_str()),
        "invocationId": op.and_then(|o| o.invocation_id.as_ref().map(|i| i.to_string())),
        "approvalId": op.and_then(|o| o.approval_id.as_ref().map(|i| i.to_string())),
        "assignee": op.and_then(|o| o.assignee.clone()),
    })
}

/// Runs the worker once over its tasks. Exit 0 when every task's operation rests: continued,
/// or explicitly pending approval or unknown (assigned); 1 otherwise.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let tasks = tasks::load(&args.tasks)?;
    let journal = Arc::new(SqliteJournal::open(&args.journal).context("opening the journal")?);
    let orders = Orders::open(&args.journal)?;
    let api = StewardApi::new(&args.server, &args.key)?;
    let mut config = OperationsConfig::new(&args.environment);
    config.assignee = args.assignee.clone();
    config.approval_wait = Duration::from_secs(args.approval_wait_s);
    let mut worker = Worker {
        ops: Operations::new(api, journal.clone(), config),
        orders,
        failures: 0,
    };

    // 1. Recover before any new work: nothing is resent with a new key.
    let report = worker.ops.recover().await?;
    eprintln!("refund-worker: recovered {}", report.summary());
    let mut done = HashSet::new();
    for recovered in report.operations {
        done.insert(recovered.operation.id.clone());
        if let Some(error) = recovered.error {
            eprintln!("refund-worker: {}: {error}", recovered.operation.id);
            worker.failures += 1;
            continue;
        }
        if let Err(e) = worker.finish(recovered.operation).await {
            eprintln!("refund-worker: {e:#}");
            worker.failures += 1;
        }
    }

    // 2. The tasks: begin is idempotent, so a task already journaled is the same operation.
    for task in &tasks {
        if let Err(e) = worker.run_task(task, &done, &args.action).await {
            eprintln!("refund-worker: order {}: {e:#}", task.order_id);
            worker.failures += 1;
        }
    }

    // 3. Say where every task rests.
    let all = journal.all().await?;
    let mut resting = true;
    for task in &tasks {
        let op = all.iter().find(|o| {
            order_of(&o.operation_key) == Some(task.order_id.as_str()) && o.action == args.action
        });
        resting &= op.is_some_and(|o| {
            matches!(
                o.state,
                LocalState::Continued | LocalState::PendingApproval | LocalState::Unknown
            )
        });
        println!("{}", summary_line(task, op));
    }
    Ok(if resting && worker.failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
