//! Tasks: the `io.modelcontextprotocol/tasks` extension (SEP-2663, the 2026-07-28 revision's
//! official extension) over governed tool calls.
//!
//! A governed call that recorded an invocation answers, to a client that declared the extension
//! on that request, a `CreateTaskResult` whose `taskId` is a pure function of the effect's
//! identity: (environment, action, operation key), the triple that names at most one effect
//! ever (invariant 2). So the task is created in the very transaction that records the intent
//! (no table of its own), a `tools/call` retried with the same key after a lost answer finds the
//! same invocation and so answers the same task, and `tasks/get` reads the invocation back from
//! the id alone. The id is readable by whoever holds it (it names nothing secret: the caller
//! chose the key, and the environment and action ids are on every view); what guards it is that
//! every task request authenticates and only finds tasks of the caller's own environment.
//!
//! The task's status is the invocation's, mapped by [`Polled::of`]:
//!
//! | invocation | task `status` | `statusMessage` | payload |
//! | --- | --- | --- | --- |
//! | `pending_approval` | `working` | `awaiting approval` | |
//! | `running` | `working` | `running` | |
//! | `succeeded` | `completed` | `succeeded` | the call's result, `isError: false` |
//! | `failed`, `denied`, `expired`, `unknown` | `completed` | the status | the call's result, `isError: true` |
//! | `denied` by a `tasks/cancel` before dispatch | `cancelled` | `withdrawn before approval` | |
//!
//! The extension keeps `failed` for a JSON-RPC error in the call (a tool result with `isError`
//! is `completed`, "exactly what the underlying request would have returned"), and a Steward
//! call never ends in one once recorded, so a recorded call's task is never `failed`.

use super::result::{Envelope, Status};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rmcp::model::{DetailedTask, JsonObject, Task, TaskPayload, TaskStatus};
use serde_json::Value;
use steward_core::{ActionId, EnvironmentId, Millis, OperationKey};

/// The prefix of every task id Steward makes.
pub const TASK_ID_PREFIX: &str = "tsk_";

/// How often a client is asked to poll a task that is still working, in milliseconds: a person
/// deciding takes seconds to hours, a dispatch at most the provider deadline; once a second
/// keeps the wait short without loading the server.
pub const POLL_INTERVAL_MS: u64 = 1000;

/// What a `tasks/cancel` of a parked call records as the reason, and the cancelled task's
/// status message.
pub const WITHDRAWN_MESSAGE: &str = "withdrawn before approval";

/// The identity a task id encodes: the effect's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskIdentity {
    pub env: EnvironmentId,
    pub action: ActionId,
    pub operation_key: OperationKey,
}

impl TaskIdentity {
    /// The task id: [`TASK_ID_PREFIX`] and the three parts, newline-separated (no id and no
    /// operation key holds a line feed), in unpadded URL-safe base64, so it travels in an
    /// `Mcp-Name` header unchanged.
    pub fn task_id(&self) -> String {
        let joined = format!(
            "{}\n{}\n{}",
            self.env.as_str(),
            self.action.as_str(),
            self.operation_key.as_str()
        );
        format!("{TASK_ID_PREFIX}{}", URL_SAFE_NO_PAD.encode(joined))
    }

    /// The identity `task_id` encodes; `None` for anything [`TaskIdentity::task_id`] did not
    /// write.
    pub fn parse(task_id: &str) -> Option<TaskIdentity> {
        let encoded = task_id.strip_prefix(TASK_ID_PREFIX)?;
        let joined = String::from_utf8(URL_SAFE_NO_PAD.decode(encoded).ok()?).ok()?;
        let mut parts = joined.splitn(3, '\n');
        let identity = TaskIdentity {
            env: EnvironmentId::parse(parts.next()?).ok()?,
            action: ActionId::parse(parts.next()?).ok()?,
            operation_key: OperationKey::parse(parts.next()?).ok()?,
        };
        // Only the canonical spelling names the task: one task, one id.
        (identity.task_id() == task_id).then_some(identity)
    }
}

/// A task's state as `tasks/get` reports it, from the call's envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct Polled {
    pub status: TaskStatus,
    pub message: String,
    /// The call's result (`CallToolResult` JSON) once `completed`.
    pub result: Option<JsonObject>,
}

impl Polled {
    /// The task state of a recorded call whose envelope is `envelope`; `withdrawn` when it was
    /// denied because its caller cancelled the task before anyone decided.
    pub fn of(envelope: Envelope, withdrawn: bool) -> Polled {
        let status = envelope.status;
        match status {
            Status::PendingApproval => Polled::working("awaiting approval"),
            Status::InProgress => Polled::working("running"),
            Status::Denied if withdrawn => Polled {
                status: TaskStatus::Cancelled,
                message: WITHDRAWN_MESSAGE.to_string(),
                result: None,
            },
            Status::Succeeded
            | Status::Failed
            | Status::Unknown
            | Status::Denied
            | Status::Expired
            | Status::Conflict
            | Status::Rejected => Polled {
                status: TaskStatus::Completed,
                message: status.as_str().to_string(),
                result: Some(call_result(envelope)),
            },
        }
    }

    fn working(message: &str) -> Polled {
        Polled {
            status: TaskStatus::Working,
            message: message.to_string(),
            result: None,
        }
    }

    /// The task (without its payload), as `CreateTaskResult` carries it.
    pub fn task(&self, task_id: &str, created: Millis, updated: Millis) -> Task {
        let task = Task::new(
            task_id,
            self.status,
            created.to_rfc3339(),
            updated.to_rfc3339(),
        )
        .with_status_message(self.message.clone());
        // `ttlMs: null`: a task lives as long as its invocation is kept.
        if self.status.is_terminal() {
            task
        } else {
            task.with_poll_interval_ms(POLL_INTERVAL_MS)
        }
    }

    /// The task with its payload, as `tasks/get` answers it.
    pub fn detailed(self, task_id: &str, created: Millis, updated: Millis) -> DetailedTask {
        let task = self.task(task_id, created, updated);
        let payload = match (self.status, self.result) {
            (TaskStatus::Completed, Some(result)) => TaskPayload::Completed { result },
            (TaskStatus::Cancelled, _) => TaskPayload::Cancelled,
            _ => TaskPayload::Working,
        };
        DetailedTask::new(task, payload)
    }
}

/// The `CallToolResult` a synchronous call would have answered, as a JSON object.
fn call_result(envelope: Envelope) -> JsonObject {
    match serde_json::to_value(envelope.into_call_result()) {
        Ok(Value::Object(result)) => result,
        // A CallToolResult always serializes to an object.
        other => unreachable!("a CallToolResult serialized as {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn identity(key: &str) -> TaskIdentity {
        TaskIdentity {
            env: EnvironmentId::parse("env_01hx").unwrap(),
            action: ActionId::parse("act_01hy").unwrap(),
            operation_key: OperationKey::parse(key).unwrap(),
        }
    }

    #[test]
    fn the_task_id_is_a_pure_function_of_the_effect_identity_and_reads_back() {
        let a = identity("refund-42/attempt:1");
        assert_eq!(a.task_id(), identity("refund-42/attempt:1").task_id());
        assert!(a.task_id().starts_with(TASK_ID_PREFIX));
        assert_eq!(TaskIdentity::parse(&a.task_id()), Some(a.clone()));
        assert_ne!(a.task_id(), identity("refund-43").task_id());
        let mut other_env = a.clone();
        other_env.env = EnvironmentId::parse("env_01hz").unwrap();
        assert_ne!(a.task_id(), other_env.task_id());
        let mut other_action = a.clone();
        other_action.action = ActionId::parse("act_01hz").unwrap();
        assert_ne!(a.task_id(), other_action.task_id());
        // Only URL-safe characters: it travels in the Mcp-Name header.
        assert!(a
            .task_id()
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'));
    }

    #[test]
    fn anything_not_written_by_task_id_names_no_task() {
        let encode = |s: &str| format!("{TASK_ID_PREFIX}{}", URL_SAFE_NO_PAD.encode(s));
        for bad in [
            String::new(),
            "tsk_".to_string(),
            "tsk_!!!".to_string(),
            "inv_01hx".to_string(),
            encode("env_01hx\nact_01hy"),
            encode("act_01hy\nenv_01hx\nkey"),
            encode("env_01hx\nact_01hy\n"),
            format!("{}=", identity("k").task_id()),
        ] {
            assert_eq!(TaskIdentity::parse(&bad), None, "{bad:?}");
        }
    }

    fn envelope(status: &str) -> Envelope {
        Envelope::of_invocation(&json!({
            "id": "inv_1", "status": status, "operationKey": "op-1", "effectId": "eff_1",
            "approvalId": null, "body": null, "error": null, "decision": null,
        }))
    }

    #[test]
    fn each_invocation_status_maps_to_its_task_status() {
        for (invocation, status, message, is_error) in [
            (
                "pending_approval",
                TaskStatus::Working,
                "awaiting approval",
                None,
            ),
            ("running", TaskStatus::Working, "running", None),
            ("succeeded", TaskStatus::Completed, "succeeded", Some(false)),
            ("failed", TaskStatus::Completed, "failed", Some(true)),
            ("denied", TaskStatus::Completed, "denied", Some(true)),
            ("expired", TaskStatus::Completed, "expired", Some(true)),
            ("unknown", TaskStatus::Completed, "unknown", Some(true)),
        ] {
            let polled = Polled::of(envelope(invocation), false);
            assert_eq!(polled.status, status, "{invocation}");
            assert_eq!(polled.message, message, "{invocation}");
            let result = polled.result.as_ref();
            assert_eq!(
                result.map(|r| r["isError"].as_bool().unwrap()),
                is_error,
                "{invocation}"
            );
            if let Some(result) = result {
                assert_eq!(result["structuredContent"]["status"], invocation);
            }
        }
    }

    #[test]
    fn a_withdrawn_denial_is_cancelled_and_any_other_denial_completed() {
        let withdrawn = Polled::of(envelope("denied"), true);
        assert_eq!(withdrawn.status, TaskStatus::Cancelled);
        assert_eq!(withdrawn.message, WITHDRAWN_MESSAGE);
        assert_eq!(withdrawn.result, None);
        // Withdrawal only ever explains a denial.
        let pending = Polled::of(envelope("pending_approval"), true);
        assert_eq!(pending.status, TaskStatus::Working);
    }

    #[test]
    fn the_wire_shapes_are_the_extensions() {
        let (t0, t1) = (Millis(1_780_000_000_000), Millis(1_780_000_001_000));
        let working = Polled::of(envelope("pending_approval"), false);
        let task = serde_json::to_value(working.task("tsk_x", t0, t1)).unwrap();
        assert_eq!(task["taskId"], "tsk_x");
        assert_eq!(task["status"], "working");
        assert_eq!(task["statusMessage"], "awaiting approval");
        assert_eq!(task["ttlMs"], Value::Null);
        assert_eq!(task["pollIntervalMs"], POLL_INTERVAL_MS);
        assert_eq!(task["createdAt"], t0.to_rfc3339());
        assert_eq!(task["lastUpdatedAt"], t1.to_rfc3339());
        let done = Polled::of(envelope("unknown"), false).detailed("tsk_x", t0, t1);
        let done = serde_json::to_value(done).unwrap();
        assert_eq!(done["status"], "completed");
        assert_eq!(done["result"]["isError"], true);
        assert_eq!(done["result"]["structuredContent"]["status"], "unknown");
        assert!(done.get("pollIntervalMs").is_none());
        let cancelled = Polled::of(envelope("denied"), true).detailed("tsk_x", t0, t1);
        let cancelled = serde_json::to_value(cancelled).unwrap();
        assert_eq!(cancelled["status"], "cancelled");
        assert!(cancelled.get("result").is_none());
    }
}
