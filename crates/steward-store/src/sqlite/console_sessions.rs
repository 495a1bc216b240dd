//! Operator console sessions (`console_sessions`): a sign-in, its lookup with the key's checks,
//! and a sign-out.

use super::admin::{constraint, environment, key};
use super::audit_log::{append, Entry};
use super::conn::unavailable;
use super::rows::{col, query_one};
use crate::console_session::ConsoleSessionRecord;
use crate::error::{StoreError, StoreResult};
use crate::records::{Actor, ApiKeyRecord, Environment};
use rusqlite::{params, Connection, Row, Transaction};
use serde_json::json;
use steward_core::{EnvironmentId, KeyId, Millis};

const COLUMNS: &str = "id, token_hash, key_id, env_id, created_at, expires_at";

fn session(row: &Row<'_>) -> StoreResult<ConsoleSessionRecord> {
    let corrupt =
        |e: steward_core::IdError| StoreError::Corrupt(format!("console session id: {e}"));
    Ok(ConsoleSessionRecord {
        id: col(row, 0)?,
        token_hash: col(row, 1)?,
        key_id: KeyId::parse(&col::<String>(row, 2)?).map_err(corrupt)?,
        env_id: EnvironmentId::parse(&col::<String>(row, 3)?).map_err(corrupt)?,
        created_at: Millis(col(row, 4)?),
        expires_at: Millis(col(row, 5)?),
    })
}

fn by_hash(conn: &Connection, token_hash: &str) -> StoreResult<Option<ConsoleSessionRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM console_sessions WHERE token_hash = ?1");
    query_one(conn, &sql, &[&token_hash], session)
}

/// What the audit log says about a session: its id, key and expiry, never its hash.
fn audit_view(s: &ConsoleSessionRecord) -> serde_json::Value {
    json!({"key": s.key_id.as_str(), "expiresAt": s.expires_at.0})
}

pub(crate) fn create(
    tx: &Transaction<'_>,
    s: &ConsoleSessionRecord,
    actor: &Actor,
) -> StoreResult<()> {
    if key(tx, &s.key_id)?.is_none() {
        return Err(StoreError::NotFound { what: "key" });
    }
    tx.execute(
        &format!("INSERT INTO console_sessions ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"),
        params![
            s.id,
            s.token_hash,
            s.key_id.as_str(),
            s.env_id.as_str(),
            s.created_at.0,
            s.expires_at.0
        ],
    )
    .map_err(|e| constraint(e, "console session"))?;
    append(
        tx,
        actor,
        Entry {
            env: Some(s.env_id.as_str()),
            kind: "console.session.started",
            subject: &s.id,
            before: None,
            after: Some(audit_view(s)),
        },
    )
}

pub(crate) fn lookup(
    conn: &Connection,
    token_hash: &str,
    now: Millis,
) -> StoreResult<Option<(ConsoleSessionRecord, ApiKeyRecord, Environment)>> {
    let Some(s) = by_hash(conn, token_hash)?.filter(|s| s.live_at(now)) else {
        return Ok(None);
    };
    let Some(k) = key(conn, &s.key_id)?.filter(|k| k.usable_at(now)) else {
        return Ok(None);
    };
    Ok(environment(conn, &k.env_id)?.map(|env| (s, k, env)))
}

pub(crate) fn end(tx: &Transaction<'_>, token_hash: &str, actor: &Actor) -> StoreResult<bool> {
    let Some(s) = by_hash(tx, token_hash)? else {
        return Ok(false);
    };
    tx.execute(
        "DELETE FROM console_sessions WHERE token_hash = ?1",
        params![token_hash],
    )
    .map_err(unavailable)?;
    append(
        tx,
        actor,
        Entry {
            env: Some(s.env_id.as_str()),
            kind: "console.session.ended",
            subject: &s.id,
            before: Some(audit_view(&s)),
            after: None,
        },
    )?;
    Ok(true)
}
