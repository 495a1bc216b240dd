//! One journal record as stored: the columns every SQL journal shares (SQLite and PostgreSQL,
//! and the Python package's journals, which keep the same table), and their decoding.

use super::JournalError;
use crate::operation::{Operation, OperationId};
use crate::state::LocalState;
use serde_json::Value;
use steward_core::{
    ApprovalId, EffectId, IdempotencyKey, InvocationId, InvocationStatus, Millis, OperationKey,
};

/// The columns of `steward_operations`, in the order every journal reads and writes them.
pub(super) const COLUMNS: &str =
    "id, environment, action, operation_key, input, input_fingerprint, \
    idempotency_key, retry_of, state, invocation_id, effect_id, approval_id, server_status, \
    server_record, result, last_error, assignee, attempt_count, version, created_at, updated_at";

pub(super) fn json_text(value: &Option<Value>) -> Option<String> {
    value.as_ref().map(Value::to_string)
}

pub(super) fn corrupt(id: &str, reason: impl std::fmt::Display) -> JournalError {
    JournalError::Corrupt {
        id: id.to_string(),
        reason: reason.to_string(),
    }
}

/// The raw columns of one row, read without interpretation.
pub(super) struct RawRow {
    pub(super) text: [Option<String>; 17],
    pub(super) attempt_count: i64,
    pub(super) version: i64,
    pub(super) created_at: i64,
    pub(super) updated_at: i64,
}

pub(super) fn decode(r: RawRow) -> Result<Operation, JournalError> {
    let [id, environment, action, operation_key, input, input_fingerprint, idempotency_key, retry_of, state, invocation_id, effect_id, approval_id, server_status, server_record, result, last_error, assignee] =
        r.text;
    let id_text = id.unwrap_or_default();
    let bad = |what: &str| corrupt(&id_text, what);
    let json = |text: Option<String>, what: &str| -> Result<Option<Value>, JournalError> {
        text.map(|t| {
            serde_json::from_str(&t).map_err(|e| corrupt(&id_text, format!("{what}: {e}")))
        })
        .transpose()
    };
    Ok(Operation {
        id: OperationId::parse(&id_text).ok_or_else(|| bad("id"))?,
        environment: environment.ok_or_else(|| bad("environment"))?,
        action: action.ok_or_else(|| bad("action"))?,
        operation_key: OperationKey::parse(&operation_key.unwrap_or_default())
            .map_err(|e| corrupt(&id_text, format!("operation_key: {e}")))?,
        input: json(input, "input")?.ok_or_else(|| bad("input"))?,
        input_fingerprint: input_fingerprint.ok_or_else(|| bad("input_fingerprint"))?,
        idempotency_key: IdempotencyKey::parse(&idempotency_key.unwrap_or_default())
            .map_err(|e| corrupt(&id_text, format!("idempotency_key: {e}")))?,
        retry_of: retry_of
            .map(|v| InvocationId::parse(&v).map_err(|e| corrupt(&id_text, e)))
            .transpose()?,
        state: LocalState::parse(&state.unwrap_or_default()).ok_or_else(|| bad("state"))?,
        invocation_id: invocation_id
            .map(|v| InvocationId::parse(&v).map_err(|e| corrupt(&id_text, e)))
            .transpose()?,
        effect_id: effect_id
            .map(|v| EffectId::parse(&v).map_err(|e| corrupt(&id_text, e)))
            .transpose()?,
        approval_id: approval_id
            .map(|v| ApprovalId::parse(&v).map_err(|e| corrupt(&id_text, e)))
            .transpose()?,
        server_status: server_status
            .map(|v| InvocationStatus::parse(&v).ok_or_else(|| bad("server_status")))
            .transpose()?,
        server_record: json(server_record, "server_record")?,
        result: json(result, "result")?,
        last_error,
        assignee,
        attempt_count: u32::try_from(r.attempt_count).map_err(|_| bad("attempt_count"))?,
        version: u64::try_from(r.version).map_err(|_| bad("version"))?,
        created_at: Millis(r.created_at),
        updated_at: Millis(r.updated_at),
    })
}
