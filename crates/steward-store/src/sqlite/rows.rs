//! Row decoding. A row that does not decode is `Corrupt`: a bug or tampering, never user input.

use crate::error::{StoreError, StoreResult};
use crate::records::*;
use rusqlite::Row;
use serde_json::Value;
use steward_core::*;

pub(crate) fn corrupt(what: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {detail}"))
}

pub(crate) fn json_opt(raw: Option<String>, what: &str) -> StoreResult<Option<Value>> {
    raw.map(|s| serde_json::from_str(&s).map_err(|e| corrupt(what, e)))
        .transpose()
}

pub(crate) fn list_opt(raw: Option<String>, what: &str) -> StoreResult<Option<Vec<String>>> {
    raw.map(|s| serde_json::from_str(&s).map_err(|e| corrupt(what, e)))
        .transpose()
}

pub(crate) fn state(raw: &str) -> StoreResult<EffectState> {
    EffectState::from_name(raw).ok_or_else(|| corrupt("effect state", raw))
}

fn id<T>(raw: String, parse: fn(&str) -> Result<T, IdError>) -> StoreResult<T> {
    parse(&raw).map_err(|e| corrupt("id", e))
}

/// A value of a closed vocabulary stored by its name (`EvidenceKind`, `EvidenceSource`).
fn named<T>(raw: String, what: &str, parse: fn(&str) -> Option<T>) -> StoreResult<T> {
    parse(&raw).ok_or_else(|| corrupt(what, format!("unknown name {raw:?}")))
}

fn op_key(raw: Option<String>) -> StoreResult<Option<OperationKey>> {
    raw.map(|k| OperationKey::parse(&k).map_err(|e| corrupt("operation key", e)))
        .transpose()
}

impl crate::columns::Columns for Row<'_> {
    fn get<T: crate::columns::Column>(&self, i: usize) -> StoreResult<T> {
        col(self, i)
    }
}

/// Reads column `i` as T, mapping SQLite errors to `Corrupt`.
pub(crate) fn col<T: rusqlite::types::FromSql>(row: &Row<'_>, i: usize) -> StoreResult<T> {
    row.get(i).map_err(|e| corrupt("column", e))
}

pub(crate) const ENVIRONMENT_COLUMNS: &str =
    "id, name, halted, halt_reason, created_at, unkeyed_invokes";

pub(crate) fn environment(row: &Row<'_>) -> StoreResult<Environment> {
    Ok(Environment {
        id: id(col(row, 0)?, EnvironmentId::parse)?,
        name: col(row, 1)?,
        halted: col::<i64>(row, 2)? != 0,
        halt_reason: col(row, 3)?,
        created_at: Millis(col(row, 4)?),
        unkeyed_invokes: crate::records::unkeyed_invokes(col(row, 5)?)?,
    })
}

pub(crate) const KEY_COLUMNS: &str =
    "id, env_id, name, scopes, token_hash, created_at, expires_at, revoked_at, last_used_at";

pub(crate) fn api_key(row: &Row<'_>) -> StoreResult<ApiKeyRecord> {
    let scopes: String = col(row, 3)?;
    Ok(ApiKeyRecord {
        id: id(col(row, 0)?, KeyId::parse)?,
        env_id: id(col(row, 1)?, EnvironmentId::parse)?,
        name: col(row, 2)?,
        scopes: serde_json::from_str(&scopes).map_err(|e| corrupt("scopes", e))?,
        token_hash: col(row, 4)?,
        created_at: Millis(col(row, 5)?),
        expires_at: col::<Option<i64>>(row, 6)?.map(Millis),
        revoked_at: col::<Option<i64>>(row, 7)?.map(Millis),
        last_used_at: col::<Option<i64>>(row, 8)?.map(Millis),
    })
}

pub(crate) const SECRET_COLUMNS: &str = "env_id, name, nonce, ciphertext, description, allowed_hosts, allowed_placements, version, created_at, updated_at";

pub(crate) fn secret(row: &Row<'_>) -> StoreResult<SecretRecord> {
    Ok(SecretRecord {
        env_id: id(col(row, 0)?, EnvironmentId::parse)?,
        name: col(row, 1)?,
        nonce: col(row, 2)?,
        ciphertext: col(row, 3)?,
        description: col(row, 4)?,
        allowed_hosts: list_opt(col(row, 5)?, "allowed hosts")?,
        allowed_placements: list_opt(col(row, 6)?, "allowed placements")?,
        version: col(row, 7)?,
        created_at: Millis(col(row, 8)?),
        updated_at: Millis(col(row, 9)?),
    })
}

pub(crate) const ACTION_COLUMNS: &str =
    "a.id, a.env_id, a.name, a.version, v.definition, a.created_at, a.updated_at";
pub(crate) const ACTION_FROM: &str =
    "actions a JOIN action_versions v ON v.action_id = a.id AND v.version = a.version";

pub(crate) fn definition(raw: &str) -> StoreResult<ActionDefinition> {
    serde_json::from_str(raw).map_err(|e| corrupt("action definition", e))
}

pub(crate) fn action(row: &Row<'_>) -> StoreResult<ActionRecord> {
    let raw: String = col(row, 4)?;
    Ok(ActionRecord {
        id: id(col(row, 0)?, ActionId::parse)?,
        env_id: id(col(row, 1)?, EnvironmentId::parse)?,
        name: col(row, 2)?,
        version: col(row, 3)?,
        definition: definition(&raw)?,
        created_at: Millis(col(row, 5)?),
        updated_at: Millis(col(row, 6)?),
    })
}

pub(crate) const INVOCATION_COLUMNS: &str = "id, env_id, action_id, action_name, action_version, effect_id, governed, state, input, input_fingerprint, operation_key, run_id, retry_of, response_status, response_body, error, decision, approval_id, created_by, created_at, completed_at, parent_span_id, edited_input, input_edit, shadow_decisions";

/// [`INVOCATION_COLUMNS`] for a list, large fields elided (`elide::listed_columns`). Decoded by
/// [`invocation`] like the whole row.
pub(crate) fn invocation_listed_columns() -> String {
    crate::elide::listed_columns(INVOCATION_COLUMNS, |c| format!("length(CAST({c} AS BLOB))"))
}

pub(crate) fn invocation(row: &Row<'_>) -> StoreResult<InvocationRecord> {
    let input: String = col(row, 8)?;
    Ok(InvocationRecord {
        id: id(col(row, 0)?, InvocationId::parse)?,
        env_id: id(col(row, 1)?, EnvironmentId::parse)?,
        action_id: id(col(row, 2)?, ActionId::parse)?,
        action_name: col(row, 3)?,
        action_version: col(row, 4)?,
        effect_id: id(col(row, 5)?, EffectId::parse)?,
        governed: col::<i64>(row, 6)? != 0,
        state: state(&col::<String>(row, 7)?)?,
        input: serde_json::from_str(&input).map_err(|e| corrupt("input", e))?,
        input_fingerprint: col(row, 9)?,
        operation_key: op_key(col(row, 10)?)?,
        run_id: col(row, 11)?,
        retry_of: col::<Option<String>>(row, 12)?
            .map(|r| id(r, InvocationId::parse))
            .transpose()?,
        response_status: col(row, 13)?,
        response_body: json_opt(col(row, 14)?, "response body")?,
        error: json_opt(col(row, 15)?, "error")?,
        decision: json_opt(col(row, 16)?, "decision")?,
        approval_id: col(row, 17)?,
        created_by: id(col(row, 18)?, KeyId::parse)?,
        created_at: Millis(col(row, 19)?),
        completed_at: col::<Option<i64>>(row, 20)?.map(Millis),
        parent_span_id: col(row, 21)?,
        edit: crate::input_edit::decode_invocation_edit(
            json_opt(col(row, 22)?, "edited input")?,
            col::<Option<String>>(row, 23)?.as_deref(),
        )
        .map_err(|e| corrupt("input edit", e))?,
        shadow_decisions: json_opt(col(row, 24)?, "shadow decisions")?,
    })
}

pub(crate) const EFFECT_COLUMNS: &str = "id, env_id, invocation_id, action_id, action_name, operation_key, state, attempt_count, external_reference, provider_idempotency_key, created_by, created_at, updated_at";

pub(crate) fn effect(row: &Row<'_>) -> StoreResult<EffectRecord> {
    Ok(EffectRecord {
        id: id(col(row, 0)?, EffectId::parse)?,
        env_id: id(col(row, 1)?, EnvironmentId::parse)?,
        invocation_id: id(col(row, 2)?, InvocationId::parse)?,
        action_id: id(col(row, 3)?, ActionId::parse)?,
        action_name: col(row, 4)?,
        operation_key: op_key(col(row, 5)?)?,
        state: state(&col::<String>(row, 6)?)?,
        attempt_count: col(row, 7)?,
        external_reference: col(row, 8)?,
        provider_idempotency_key: col(row, 9)?,
        created_by: id(col(row, 10)?, KeyId::parse)?,
        created_at: Millis(col(row, 11)?),
        updated_at: Millis(col(row, 12)?),
    })
}

pub(crate) fn attempt(row: &Row<'_>) -> StoreResult<AttemptRecord> {
    Ok(AttemptRecord {
        number: col(row, 0)?,
        started_at: Millis(col(row, 1)?),
        deadline_at: Millis(col(row, 2)?),
        finished_at: col::<Option<i64>>(row, 3)?.map(Millis),
        status: col(row, 4)?,
        response_status: col(row, 5)?,
        error: col(row, 6)?,
        owner: col::<Option<String>>(row, 7)?
            .map(|raw| id(raw, ReplicaId::parse))
            .transpose()?,
    })
}

pub(crate) fn evidence(row: &Row<'_>) -> StoreResult<EvidenceRecord> {
    Ok(EvidenceRecord {
        seq: col(row, 0)?,
        at: Millis(col(row, 1)?),
        kind: named(col(row, 2)?, "evidence kind", EvidenceKind::parse)?,
        source: named(col(row, 3)?, "evidence source", EvidenceSource::parse)?,
        message: col(row, 4)?,
        data: json_opt(col(row, 5)?, "evidence data")?,
        actor: col::<Option<String>>(row, 6)?
            .map(|k| id(k, KeyId::parse))
            .transpose()?,
    })
}

/// Runs a query and decodes every row.
pub(crate) fn query_all<T>(
    conn: &rusqlite::Connection,
    sql: &str,
    params: &[&dyn rusqlite::ToSql],
    decode: fn(&Row<'_>) -> StoreResult<T>,
) -> StoreResult<Vec<T>> {
    let mut stmt = conn.prepare_cached(sql).map_err(super::conn::unavailable)?;
    let mut rows = stmt.query(params).map_err(super::conn::unavailable)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(super::conn::unavailable)? {
        out.push(decode(row)?);
    }
    Ok(out)
}

/// Runs a query expected to return at most one row.
pub(crate) fn query_one<T>(
    conn: &rusqlite::Connection,
    sql: &str,
    params: &[&dyn rusqlite::ToSql],
    decode: fn(&Row<'_>) -> StoreResult<T>,
) -> StoreResult<Option<T>> {
    Ok(query_all(conn, sql, params, decode)?.into_iter().next())
}
