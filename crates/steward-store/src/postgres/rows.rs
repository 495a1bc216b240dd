//! Row decoding. A row that does not decode is `Corrupt`: a bug or tampering, never user input.
//! Column lists are shared with the queries that select them, so positions cannot drift.

use crate::error::{StoreError, StoreResult};
use crate::records::*;
use serde_json::Value;
use steward_core::*;
use tokio_postgres::types::FromSql;
use tokio_postgres::Row;

pub(crate) fn corrupt(what: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {detail}"))
}

impl crate::columns::Columns for Row {
    fn get<T: crate::columns::Column>(&self, i: usize) -> StoreResult<T> {
        col(self, i)
    }
}

/// Reads column `i` as `T`, mapping a type mismatch or an unexpected NULL to `Corrupt`.
pub(crate) fn col<'a, T: FromSql<'a>>(row: &'a Row, i: usize) -> StoreResult<T> {
    row.try_get(i).map_err(|e| corrupt("column", e))
}

/// Reads a `BIGINT` column into a narrower integer (a version, a count, an HTTP status).
pub(crate) fn int<T: TryFrom<i64>>(row: &Row, i: usize) -> StoreResult<T> {
    let raw: i64 = col(row, i)?;
    T::try_from(raw).map_err(|_| corrupt("integer out of range", raw))
}

pub(crate) fn int_opt<T: TryFrom<i64>>(row: &Row, i: usize) -> StoreResult<Option<T>> {
    col::<Option<i64>>(row, i)?
        .map(|raw| T::try_from(raw).map_err(|_| corrupt("integer out of range", raw)))
        .transpose()
}

pub(crate) fn millis(row: &Row, i: usize) -> StoreResult<Millis> {
    Ok(Millis(col(row, i)?))
}

pub(crate) fn millis_opt(row: &Row, i: usize) -> StoreResult<Option<Millis>> {
    Ok(col::<Option<i64>>(row, i)?.map(Millis))
}

pub(crate) fn json(row: &Row, i: usize, what: &str) -> StoreResult<Value> {
    let raw: &str = col(row, i)?;
    serde_json::from_str(raw).map_err(|e| corrupt(what, e))
}

pub(crate) fn json_opt(row: &Row, i: usize, what: &str) -> StoreResult<Option<Value>> {
    col::<Option<&str>>(row, i)?
        .map(|s| serde_json::from_str(s).map_err(|e| corrupt(what, e)))
        .transpose()
}

fn list_opt(row: &Row, i: usize, what: &str) -> StoreResult<Option<Vec<String>>> {
    col::<Option<&str>>(row, i)?
        .map(|s| serde_json::from_str(s).map_err(|e| corrupt(what, e)))
        .transpose()
}

pub(crate) fn state(raw: &str) -> StoreResult<EffectState> {
    EffectState::from_name(raw).ok_or_else(|| corrupt("effect state", raw))
}

/// Reads an id column with its type's parser.
pub(crate) fn id<T>(row: &Row, i: usize, parse: fn(&str) -> Result<T, IdError>) -> StoreResult<T> {
    parse(col(row, i)?).map_err(|e| corrupt("id", e))
}

/// A value of a closed vocabulary stored by its name (`EvidenceKind`, `EvidenceSource`).
fn named<T>(row: &Row, i: usize, what: &str, parse: fn(&str) -> Option<T>) -> StoreResult<T> {
    let raw: &str = col(row, i)?;
    parse(raw).ok_or_else(|| corrupt(what, format!("unknown name {raw:?}")))
}

pub(crate) fn id_opt<T>(
    row: &Row,
    i: usize,
    parse: fn(&str) -> Result<T, IdError>,
) -> StoreResult<Option<T>> {
    col::<Option<&str>>(row, i)?
        .map(|raw| parse(raw).map_err(|e| corrupt("id", e)))
        .transpose()
}

fn op_key(row: &Row, i: usize) -> StoreResult<Option<OperationKey>> {
    col::<Option<&str>>(row, i)?
        .map(|k| OperationKey::parse(k).map_err(|e| corrupt("operation key", e)))
        .transpose()
}

pub(crate) const ENVIRONMENT_COLUMNS: &str =
    "id, name, halted, halt_reason, created_at, unkeyed_invokes";

pub(crate) fn environment(row: &Row) -> StoreResult<Environment> {
    Ok(Environment {
        id: id(row, 0, EnvironmentId::parse)?,
        name: col(row, 1)?,
        halted: col(row, 2)?,
        halt_reason: col(row, 3)?,
        created_at: millis(row, 4)?,
        unkeyed_invokes: crate::records::unkeyed_invokes(col(row, 5)?)?,
    })
}

pub(crate) const KEY_COLUMNS: &str =
    "id, env_id, name, scopes, token_hash, created_at, expires_at, revoked_at, last_used_at";

pub(crate) fn api_key(row: &Row) -> StoreResult<ApiKeyRecord> {
    Ok(ApiKeyRecord {
        id: id(row, 0, KeyId::parse)?,
        env_id: id(row, 1, EnvironmentId::parse)?,
        name: col(row, 2)?,
        scopes: serde_json::from_str(col(row, 3)?).map_err(|e| corrupt("scopes", e))?,
        token_hash: col(row, 4)?,
        created_at: millis(row, 5)?,
        expires_at: millis_opt(row, 6)?,
        revoked_at: millis_opt(row, 7)?,
        last_used_at: millis_opt(row, 8)?,
    })
}

pub(crate) const SECRET_COLUMNS: &str = "env_id, name, nonce, ciphertext, description, allowed_hosts, allowed_placements, version, created_at, updated_at";

pub(crate) fn secret(row: &Row) -> StoreResult<SecretRecord> {
    Ok(SecretRecord {
        env_id: id(row, 0, EnvironmentId::parse)?,
        name: col(row, 1)?,
        nonce: col(row, 2)?,
        ciphertext: col(row, 3)?,
        description: col(row, 4)?,
        allowed_hosts: list_opt(row, 5, "allowed hosts")?,
        allowed_placements: list_opt(row, 6, "allowed placements")?,
        version: int(row, 7)?,
        created_at: millis(row, 8)?,
        updated_at: millis(row, 9)?,
    })
}

pub(crate) const ACTION_COLUMNS: &str =
    "a.id, a.env_id, a.name, a.version, v.definition, a.created_at, a.updated_at";
pub(crate) const ACTION_FROM: &str =
    "actions a JOIN action_versions v ON v.action_id = a.id AND v.version = a.version";

pub(crate) fn definition(row: &Row, i: usize) -> StoreResult<ActionDefinition> {
    serde_json::from_str(col(row, i)?).map_err(|e| corrupt("action definition", e))
}

pub(crate) fn action(row: &Row) -> StoreResult<ActionRecord> {
    Ok(ActionRecord {
        id: id(row, 0, ActionId::parse)?,
        env_id: id(row, 1, EnvironmentId::parse)?,
        name: col(row, 2)?,
        version: int(row, 3)?,
        definition: definition(row, 4)?,
        created_at: millis(row, 5)?,
        updated_at: millis(row, 6)?,
    })
}

pub(crate) const INVOCATION_COLUMNS: &str = "id, env_id, action_id, action_name, action_version, effect_id, governed, state, input, input_fingerprint, operation_key, run_id, retry_of, response_status, response_body, error, decision, approval_id, created_by, created_at, completed_at, parent_span_id, edited_input, input_edit, shadow_decisions";

/// [`INVOCATION_COLUMNS`] for a list, large fields elided (`elide::listed_columns`). Decoded by
/// [`invocation`] like the whole row.
pub(crate) fn invocation_listed_columns() -> String {
    crate::elide::listed_columns(INVOCATION_COLUMNS, |c| format!("octet_length({c})"))
}

pub(crate) fn invocation(row: &Row) -> StoreResult<InvocationRecord> {
    Ok(InvocationRecord {
        id: id(row, 0, InvocationId::parse)?,
        env_id: id(row, 1, EnvironmentId::parse)?,
        action_id: id(row, 2, ActionId::parse)?,
        action_name: col(row, 3)?,
        action_version: int(row, 4)?,
        effect_id: id(row, 5, EffectId::parse)?,
        governed: col(row, 6)?,
        state: state(col(row, 7)?)?,
        input: json(row, 8, "input")?,
        input_fingerprint: col(row, 9)?,
        operation_key: op_key(row, 10)?,
        run_id: col(row, 11)?,
        retry_of: id_opt(row, 12, InvocationId::parse)?,
        response_status: int_opt(row, 13)?,
        response_body: json_opt(row, 14, "response body")?,
        error: json_opt(row, 15, "error")?,
        decision: json_opt(row, 16, "decision")?,
        approval_id: col(row, 17)?,
        created_by: id(row, 18, KeyId::parse)?,
        created_at: millis(row, 19)?,
        completed_at: millis_opt(row, 20)?,
        parent_span_id: col(row, 21)?,
        edit: crate::input_edit::decode_invocation_edit(
            json_opt(row, 22, "edited input")?,
            col::<Option<&str>>(row, 23)?,
        )
        .map_err(|e| corrupt("input edit", e))?,
        shadow_decisions: json_opt(row, 24, "shadow decisions")?,
    })
}

pub(crate) const EFFECT_COLUMNS: &str = "id, env_id, invocation_id, action_id, action_name, operation_key, state, attempt_count, external_reference, provider_idempotency_key, created_by, created_at, updated_at";

pub(crate) fn effect(row: &Row) -> StoreResult<EffectRecord> {
    Ok(EffectRecord {
        id: id(row, 0, EffectId::parse)?,
        env_id: id(row, 1, EnvironmentId::parse)?,
        invocation_id: id(row, 2, InvocationId::parse)?,
        action_id: id(row, 3, ActionId::parse)?,
        action_name: col(row, 4)?,
        operation_key: op_key(row, 5)?,
        state: state(col(row, 6)?)?,
        attempt_count: int(row, 7)?,
        external_reference: col(row, 8)?,
        provider_idempotency_key: col(row, 9)?,
        created_by: id(row, 10, KeyId::parse)?,
        created_at: millis(row, 11)?,
        updated_at: millis(row, 12)?,
    })
}

pub(crate) const ATTEMPT_COLUMNS: &str =
    "number, started_at, deadline_at, finished_at, status, response_status, error, owner";

pub(crate) fn attempt(row: &Row) -> StoreResult<AttemptRecord> {
    Ok(AttemptRecord {
        number: int(row, 0)?,
        started_at: millis(row, 1)?,
        deadline_at: millis(row, 2)?,
        finished_at: millis_opt(row, 3)?,
        status: col(row, 4)?,
        response_status: int_opt(row, 5)?,
        error: col(row, 6)?,
        owner: id_opt(row, 7, ReplicaId::parse)?,
    })
}

pub(crate) const EVIDENCE_COLUMNS: &str = "seq, at, kind, source, message, data, actor";

pub(crate) fn evidence(row: &Row) -> StoreResult<EvidenceRecord> {
    Ok(EvidenceRecord {
        seq: int(row, 0)?,
        at: millis(row, 1)?,
        kind: named(row, 2, "evidence kind", EvidenceKind::parse)?,
        source: named(row, 3, "evidence source", EvidenceSource::parse)?,
        message: col(row, 4)?,
        data: json_opt(row, 5, "evidence data")?,
        actor: id_opt(row, 6, KeyId::parse)?,
    })
}
