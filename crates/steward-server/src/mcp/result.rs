//! The one result envelope every `tools/call` answers with, in `structuredContent` and, the
//! same JSON, as text content: `status`, `operationKey`, `invocationId`, `effectId`,
//! `approvalId`, the provider `result` or `error`, the approval `decision` when there is one,
//! and an `instruction` in plain words for the model.

use crate::error::ApiError;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{json, Value};

/// Where a call stands. The first seven are an invocation's statuses (`running` is
/// `in_progress`); `conflict` and `rejected` are calls that created nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Succeeded,
    Failed,
    Unknown,
    PendingApproval,
    Denied,
    Expired,
    InProgress,
    /// The operation key already names an operation with other arguments.
    Conflict,
    /// Refused before anything was recorded: invalid arguments, no operation key, a halted
    /// environment, a missing scope.
    Rejected,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Unknown => "unknown",
            Status::PendingApproval => "pending_approval",
            Status::Denied => "denied",
            Status::Expired => "expired",
            Status::InProgress => "in_progress",
            Status::Conflict => "conflict",
            Status::Rejected => "rejected",
        }
    }

    /// From an invocation's status as the API reports it.
    fn of_invocation(status: &str) -> Status {
        match status {
            "succeeded" => Status::Succeeded,
            "failed" => Status::Failed,
            "pending_approval" => Status::PendingApproval,
            "denied" => Status::Denied,
            "expired" => Status::Expired,
            "running" => Status::InProgress,
            // Anything this version does not know is treated as the cautious case.
            _ => Status::Unknown,
        }
    }

    /// `isError`: everything but a success, a pending approval and a call still running.
    pub fn is_error(self) -> bool {
        !matches!(
            self,
            Status::Succeeded | Status::PendingApproval | Status::InProgress
        )
    }

    fn instruction(self) -> &'static str {
        match self {
            Status::Succeeded => "done: the action succeeded; do not call it again for this operation",
            Status::Failed => "the action failed and was not applied; do not retry with the same operationKey: fix the cause and use a new operationKey for a new attempt",
            Status::Unknown => "do not retry: the outcome is unknown and is being reconciled; call again with the same operationKey to see the settled result",
            Status::PendingApproval => "a person must approve this; call again with the same operationKey to observe the decision",
            Status::Denied => "a person denied this operation and it was not run; do not retry it (see decisionNote for their reason)",
            Status::Expired => "no one decided in time and the operation was not run; use a new operationKey to ask again",
            Status::InProgress => "the operation is still running; call again with the same operationKey to see the settled result",
            Status::Conflict => "this operationKey already names an operation with other arguments; nothing was done: resend the original arguments, or use a new operationKey for a new operation",
            Status::Rejected => "nothing was done; fix what the error names and call again",
        }
    }
}

/// One call's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub status: Status,
    body: Value,
}

impl Envelope {
    /// From an invocation as `views::invocation` renders it.
    pub fn of_invocation(view: &Value) -> Envelope {
        let status = Status::of_invocation(view["status"].as_str().unwrap_or_default());
        let mut body = json!({
            "status": status.as_str(),
            "operationKey": view["operationKey"],
            "invocationId": view["id"],
            "effectId": view.get("effectId").cloned().unwrap_or(Value::Null),
            "approvalId": view["approvalId"],
            "instruction": status.instruction(),
        });
        if status == Status::Failed || !view["error"].is_null() {
            body["error"] = view["error"].clone();
        } else if !view["body"].is_null() {
            body["result"] = view["body"].clone();
        }
        if !view["decision"].is_null() {
            body["decision"] = view["decision"].clone();
        }
        Envelope { status, body }
    }

    /// Adds the note the person who denied the operation left (`decisionNote`).
    pub fn note_denial(&mut self, note: Option<String>) {
        if let Some(note) = note {
            self.body["decisionNote"] = json!(note);
        }
    }

    /// Says that Steward chose the operation key (the call carried none) and for how long an
    /// identical call is taken for a retry of this one.
    pub fn note_derived_key(&mut self, window: std::time::Duration) {
        self.body["operationKeyDerived"] = json!(true);
        let instruction = self.body["instruction"].as_str().unwrap_or_default();
        self.body["instruction"] = json!(format!(
            "{instruction} (no operationKey was given, so Steward derived one from your key, this tool's version and these exact arguments: an identical call within {} s is taken for a retry of this one; pass an operationKey to choose yourself)",
            window.as_secs()
        ));
    }

    /// A call the API refused (nothing recorded, or a conflict with what is recorded).
    pub fn of_error(error: &ApiError, operation_key: Option<&str>) -> Envelope {
        let status = if error.code == "operation_key_conflict" {
            Status::Conflict
        } else if error.code == crate::error::codes::OUTCOME_UNKNOWN.code {
            // Never "nothing was done": the call may have reached the provider.
            Status::Unknown
        } else {
            Status::Rejected
        };
        let mut body = error.body();
        let error = body
            .get_mut("error")
            .map(Value::take)
            .unwrap_or(Value::Null);
        let details = error.get("details").cloned().unwrap_or(Value::Null);
        Envelope {
            status,
            body: json!({
                "status": status.as_str(),
                "operationKey": operation_key,
                "invocationId": details.get("invocationId").cloned().unwrap_or(Value::Null),
                "effectId": details.get("effectId").cloned().unwrap_or(Value::Null),
                "approvalId": Value::Null,
                "error": error,
                "instruction": status.instruction(),
            }),
        }
    }

    /// A refusal with its own instruction (e.g. the missing operation key).
    pub fn rejected(code: &str, message: &str, instruction: &str) -> Envelope {
        Envelope {
            status: Status::Rejected,
            body: json!({
                "status": Status::Rejected.as_str(),
                "operationKey": Value::Null,
                "invocationId": Value::Null,
                "effectId": Value::Null,
                "approvalId": Value::Null,
                "error": {"code": code, "message": message},
                "instruction": instruction,
            }),
        }
    }

    #[cfg(test)]
    pub fn body(&self) -> &Value {
        &self.body
    }

    /// The MCP result: the envelope as structured content and as text, `isError` per status.
    pub fn into_call_result(self) -> CallToolResult {
        let text = self.body.to_string();
        let mut result = if self.status.is_error() {
            CallToolResult::error(vec![ContentBlock::text(text)])
        } else {
            CallToolResult::success(vec![ContentBlock::text(text)])
        };
        result.structured_content = Some(self.body);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(status: &str) -> Value {
        json!({
            "id": "inv_1", "status": status, "operationKey": "op-1", "effectId": "eff_1",
            "approvalId": null, "body": {"id": "re_1"}, "error": null, "decision": null,
        })
    }

    #[test]
    fn a_success_carries_the_ids_and_the_provider_result_and_is_no_error() {
        let e = Envelope::of_invocation(&view("succeeded"));
        assert_eq!(e.body()["status"], "succeeded");
        assert_eq!(e.body()["operationKey"], "op-1");
        assert_eq!(e.body()["invocationId"], "inv_1");
        assert_eq!(e.body()["effectId"], "eff_1");
        assert_eq!(e.body()["result"]["id"], "re_1");
        let r = e.into_call_result();
        assert_eq!(r.is_error, Some(false));
        assert_eq!(
            r.structured_content.as_ref().unwrap()["status"],
            "succeeded"
        );
    }

    #[test]
    fn unknown_tells_the_model_not_to_retry_and_is_an_error() {
        let e = Envelope::of_invocation(&view("unknown"));
        assert!(e.body()["instruction"]
            .as_str()
            .unwrap()
            .starts_with("do not retry"));
        assert_eq!(e.into_call_result().is_error, Some(true));
    }

    #[test]
    fn running_is_in_progress_and_pending_approval_is_no_error() {
        assert_eq!(
            Envelope::of_invocation(&view("running")).status,
            Status::InProgress
        );
        for s in ["running", "pending_approval"] {
            assert!(!Envelope::of_invocation(&view(s)).status.is_error(), "{s}");
        }
        for s in ["failed", "denied", "expired", "unknown"] {
            assert!(Envelope::of_invocation(&view(s)).status.is_error(), "{s}");
        }
    }

    #[test]
    fn an_operation_key_conflict_is_a_conflict_error_with_the_recorded_ids() {
        let err = ApiError::conflict("operation_key_conflict", "other input")
            .with_details(json!({"effectId": "eff_9", "invocationId": "inv_9"}));
        let e = Envelope::of_error(&err, Some("op-1"));
        assert_eq!(e.status, Status::Conflict);
        assert_eq!(e.body()["invocationId"], "inv_9");
        assert_eq!(e.body()["error"]["code"], "operation_key_conflict");
        assert_eq!(e.into_call_result().is_error, Some(true));
    }

    /// The MCP door's side of an answer that could not be recorded after the provider call:
    /// it must not tell the model "nothing was done".
    #[test]
    fn an_outcome_unknown_error_is_unknown_never_rejected() {
        let err = ApiError::of(
            crate::error::codes::OUTCOME_UNKNOWN,
            "the call may have reached the provider",
        )
        .with_details(json!({"effectId": "eff_7", "mayHaveBeenSent": true}));
        let e = Envelope::of_error(&err, Some("op-7"));
        assert_eq!(e.status, Status::Unknown);
        let instruction = e.body()["instruction"].as_str().unwrap();
        assert!(instruction.starts_with("do not retry"), "{instruction}");
        assert!(!instruction.contains("nothing was done"), "{instruction}");
        assert_eq!(e.body()["effectId"], "eff_7");
        assert_eq!(e.body()["operationKey"], "op-7");
        assert_eq!(e.into_call_result().is_error, Some(true));
    }

    #[test]
    fn a_validation_error_names_the_field() {
        let err = ApiError::validation("input.amount", "must be positive");
        let e = Envelope::of_error(&err, None);
        assert_eq!(e.status, Status::Rejected);
        assert!(e.body()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("input.amount"));
    }
}
