//! Previews on SQLite.

use super::audit_log::{append, AuditEntry, AuditKind};
use super::conn::{constraint, unavailable};
use super::rows::query_one;
use super::SqliteStore;
use crate::error::StoreResult;
use crate::previews::{audited, record, refreshed, Raw, COLUMNS};
use crate::records::{Actor, PreviewRecord};
use crate::store::Previews;
use async_trait::async_trait;
use rusqlite::{params, Row};
use steward_core::{EnvironmentId, PreviewId};

fn raw(row: &Row<'_>) -> StoreResult<Raw> {
    Raw::read(row)
}

fn insert(tx: &rusqlite::Transaction<'_>, p: &PreviewRecord, actor: &Actor) -> StoreResult<()> {
    tx.execute(
        "INSERT INTO previews (id, env_id, action_id, action_name, action_version, input,
            input_fingerprint, request_digest, body, run_id, created_by, created_at, expires_at,
            refreshes)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        params![
            p.id.as_str(),
            p.env_id.as_str(),
            p.action_id.as_str(),
            p.action_name,
            p.action_version,
            p.input.to_string(),
            p.input_fingerprint,
            p.request_digest,
            p.body.to_string(),
            p.run_id,
            p.created_by.as_str(),
            p.created_at.0,
            p.expires_at.0,
            p.refreshes.as_ref().map(|r| r.as_str())
        ],
    )
    .map_err(|e| constraint(e, "preview"))?;
    append(
        tx,
        actor,
        AuditEntry::new(AuditKind::PreviewCreated, p.env_id.as_str(), p.id.as_str())
            .after(audited(p)),
    )
}

/// The preview `id`, of any environment (the caller read an effect of its own that names it).
pub(crate) fn by_id(
    conn: &rusqlite::Connection,
    id: &PreviewId,
) -> StoreResult<Option<PreviewRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM previews p WHERE p.id = ?1");
    query_one(conn, &sql, &[&id.as_str()], raw)?
        .map(record)
        .transpose()
}

#[async_trait]
impl Previews for SqliteStore {
    async fn create_preview(&self, preview: &PreviewRecord, actor: &Actor) -> StoreResult<()> {
        let (preview, actor) = (preview.clone(), actor.clone());
        self.write(move |tx| insert(tx, &preview, &actor)).await
    }

    async fn preview(
        &self,
        env: &EnvironmentId,
        id: &PreviewId,
    ) -> StoreResult<Option<PreviewRecord>> {
        let (env, id) = (env.clone(), id.clone());
        self.read(move |conn| {
            let sql = format!("SELECT {COLUMNS} FROM previews p WHERE p.env_id = ?1 AND p.id = ?2");
            query_one(conn, &sql, &[&env.as_str(), &id.as_str()], raw)?
                .map(record)
                .transpose()
        })
        .await
    }

    async fn refresh_preview(&self, new: &PreviewRecord, actor: &Actor) -> StoreResult<bool> {
        let old = refreshed(new)?.clone();
        let (new, actor) = (new.clone(), actor.clone());
        self.write(move |tx| {
            let marked = tx
                .execute(
                    "UPDATE previews SET superseded_by = ?1
                     WHERE id = ?2 AND env_id = ?3 AND superseded_by IS NULL",
                    params![new.id.as_str(), old.as_str(), new.env_id.as_str()],
                )
                .map_err(unavailable)?;
            if marked == 0 {
                return Ok(false);
            }
            insert(tx, &new, &actor)?;
            Ok(true)
        })
        .await
    }
}
