//! Previews on PostgreSQL.

use super::audit_log::{append, AuditEntry, AuditKind};
use super::conn::{in_transaction, Mode, Tx};
use super::PostgresStore;
use crate::error::StoreResult;
use crate::previews::{audited, record, refreshed, Raw, COLUMNS};
use crate::records::{Actor, PreviewRecord};
use crate::store::Previews;
use async_trait::async_trait;
use steward_core::{EnvironmentId, PreviewId};
use tokio_postgres::Row;

fn raw(row: &Row) -> StoreResult<Raw> {
    Raw::read(row)
}

async fn insert(tx: &Tx<'_>, p: &PreviewRecord, actor: &Actor) -> StoreResult<()> {
    let (version, input, body) = (
        i64::from(p.action_version),
        p.input.to_string(),
        p.body.to_string(),
    );
    let refreshes = p.refreshes.as_ref().map(|r| r.as_str());
    tx.execute_unique(
        "preview",
        "INSERT INTO previews (id, env_id, action_id, action_name, action_version, input,
            input_fingerprint, request_digest, body, run_id, created_by, created_at, expires_at,
            refreshes)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        &[
            &p.id.as_str(),
            &p.env_id.as_str(),
            &p.action_id.as_str(),
            &p.action_name,
            &version,
            &input,
            &p.input_fingerprint,
            &p.request_digest,
            &body,
            &p.run_id,
            &p.created_by.as_str(),
            &p.created_at.0,
            &p.expires_at.0,
            &refreshes,
        ],
    )
    .await?;
    append(
        tx,
        actor,
        AuditEntry::new(AuditKind::PreviewCreated, p.env_id.as_str(), p.id.as_str())
            .after(audited(p)),
    )
    .await
}

/// The preview `id`, of any environment (the caller read an effect of its own that names it).
pub(crate) async fn by_id(tx: &Tx<'_>, id: &PreviewId) -> StoreResult<Option<PreviewRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM previews p WHERE p.id = $1");
    let rows = tx.query(&sql, &[&id.as_str()]).await?;
    rows.first()
        .map(|row| raw(row).and_then(record))
        .transpose()
}

#[async_trait]
impl Previews for PostgresStore {
    async fn create_preview(&self, preview: &PreviewRecord, actor: &Actor) -> StoreResult<()> {
        in_transaction!(self, Mode::WriteConcurrent, |tx| async {
            insert(&tx, preview, actor).await
        })
    }

    async fn preview(
        &self,
        env: &EnvironmentId,
        id: &PreviewId,
    ) -> StoreResult<Option<PreviewRecord>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let sql = format!("SELECT {COLUMNS} FROM previews p WHERE p.env_id = $1 AND p.id = $2");
            let rows = tx.query(&sql, &[&env.as_str(), &id.as_str()]).await?;
            rows.first()
                .map(|row| raw(row).and_then(record))
                .transpose()
        })
    }

    async fn refresh_preview(&self, new: &PreviewRecord, actor: &Actor) -> StoreResult<bool> {
        let old = refreshed(new)?;
        in_transaction!(self, Mode::WriteConcurrent, |tx| async {
            let marked = tx
                .execute(
                    "UPDATE previews SET superseded_by = $1
                     WHERE id = $2 AND env_id = $3 AND superseded_by IS NULL",
                    &[&new.id.as_str(), &old.as_str(), &new.env_id.as_str()],
                )
                .await?;
            if marked == 0 {
                return Ok(false);
            }
            insert(&tx, new, actor).await?;
            Ok(true)
        })
    }
}
