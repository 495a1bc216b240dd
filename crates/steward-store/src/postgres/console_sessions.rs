//! Operator console sessions (`console_sessions`): a sign-in, its lookup with the key's checks,
//! and a sign-out. The same rules as `sqlite/console_sessions.rs`.

use super::admin::{environment, key};
use super::audit_log::{append, Entry};
use super::conn::Tx;
use super::rows::col;
use crate::console_session::ConsoleSessionRecord;
use crate::error::{StoreError, StoreResult};
use crate::records::{Actor, ApiKeyRecord, Environment};
use serde_json::json;
use steward_core::{EnvironmentId, KeyId, Millis};
use tokio_postgres::Row;

const COLUMNS: &str = "id, token_hash, key_id, env_id, created_at, expires_at";

fn session(row: &Row) -> StoreResult<ConsoleSessionRecord> {
    let corrupt =
        |e: steward_core::IdError| StoreError::Corrupt(format!("console session id: {e}"));
    Ok(ConsoleSessionRecord {
        id: col(row, 0)?,
        token_hash: col(row, 1)?,
        key_id: KeyId::parse(col::<&str>(row, 2)?).map_err(corrupt)?,
        env_id: EnvironmentId::parse(col::<&str>(row, 3)?).map_err(corrupt)?,
        created_at: Millis(col(row, 4)?),
        expires_at: Millis(col(row, 5)?),
    })
}

async fn by_hash(tx: &Tx<'_>, token_hash: &str) -> StoreResult<Option<ConsoleSessionRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM console_sessions WHERE token_hash = $1");
    tx.one(&sql, &[&token_hash], session).await
}

/// What the audit log says about a session: its key and expiry, never its hash.
fn audit_view(s: &ConsoleSessionRecord) -> serde_json::Value {
    json!({"key": s.key_id.as_str(), "expiresAt": s.expires_at.0})
}

pub(crate) async fn create(
    tx: &Tx<'_>,
    s: &ConsoleSessionRecord,
    actor: &Actor,
) -> StoreResult<()> {
    if key(tx, &s.key_id).await?.is_none() {
        return Err(StoreError::NotFound { what: "key" });
    }
    tx.execute_unique(
        "console session",
        &format!("INSERT INTO console_sessions ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)"),
        &[
            &s.id,
            &s.token_hash,
            &s.key_id.as_str(),
            &s.env_id.as_str(),
            &s.created_at.0,
            &s.expires_at.0,
        ],
    )
    .await?;
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
    .await
}

pub(crate) async fn lookup(
    tx: &Tx<'_>,
    token_hash: &str,
    now: Millis,
) -> StoreResult<Option<(ConsoleSessionRecord, ApiKeyRecord, Environment)>> {
    let Some(s) = by_hash(tx, token_hash).await?.filter(|s| s.live_at(now)) else {
        return Ok(None);
    };
    let Some(k) = key(tx, &s.key_id).await?.filter(|k| k.usable_at(now)) else {
        return Ok(None);
    };
    Ok(environment(tx, &k.env_id).await?.map(|env| (s, k, env)))
}

pub(crate) async fn end(tx: &Tx<'_>, token_hash: &str, actor: &Actor) -> StoreResult<bool> {
    let Some(s) = by_hash(tx, token_hash).await? else {
        return Ok(false);
    };
    tx.execute(
        "DELETE FROM console_sessions WHERE token_hash = $1",
        &[&token_hash],
    )
    .await?;
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
    )
    .await?;
    Ok(true)
}
