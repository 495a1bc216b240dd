//! Signed receipts (`crate::receipts`) in the embedded store. Every write runs on the writer
//! thread, so issues serialize with each other and with every other write.

use super::audit_log::{append, AuditEntry, AuditKind};
use super::conn::{execute_cached, unavailable, CachedQuery};
use super::rows::{query_all, query_one};
use super::SqliteStore;
use crate::error::StoreResult;
use crate::receipts::{
    check_links, environments, IssueOutcome, ReceiptBatch, ReceiptKeyRecord, ReceiptRecord,
    RECEIPT_COLUMNS,
};
use crate::records::Actor;
use crate::store::Receipts;
use async_trait::async_trait;
use rusqlite::{params, Connection, Row};
use std::collections::HashMap;
use steward_core::{EffectId, EnvironmentId};

fn key(row: &Row<'_>) -> StoreResult<ReceiptKeyRecord> {
    ReceiptKeyRecord::read(row)
}

fn receipt(row: &Row<'_>) -> StoreResult<ReceiptRecord> {
    ReceiptRecord::read(row)
}

fn keys(c: &Connection) -> StoreResult<Vec<ReceiptKeyRecord>> {
    query_all(
        c,
        "SELECT id, public_key, nonce, sealed, created_at FROM receipt_keys
         ORDER BY created_at, id",
        &[],
        key,
    )
}

fn cursor(c: &Connection) -> StoreResult<i64> {
    c.query_row_cached(
        "SELECT audit_seq FROM receipt_cursor WHERE id = 1",
        [],
        |r| r.get(0),
    )
    .map_err(unavailable)
}

fn head(c: &Connection, env: &EnvironmentId) -> StoreResult<Option<(i64, String)>> {
    query_one(
        c,
        "SELECT seq, digest FROM receipts WHERE env_id = ?1 ORDER BY seq DESC LIMIT 1",
        &[&env.as_str()],
        |r| {
            Ok((
                r.get(0).map_err(unavailable)?,
                r.get(1).map_err(unavailable)?,
            ))
        },
    )
}

fn issue(tx: &rusqlite::Transaction<'_>, batch: &ReceiptBatch) -> StoreResult<IssueOutcome> {
    if cursor(tx)? != batch.after_audit_seq {
        return Ok(IssueOutcome::Moved);
    }
    let mut heads = HashMap::new();
    for env in environments(batch) {
        if let Some(h) = head(tx, &env)? {
            heads.insert(env, h);
        }
    }
    if !check_links(&heads, batch) {
        return Ok(IssueOutcome::Moved);
    }
    for r in &batch.receipts {
        execute_cached(
            tx,
            "INSERT INTO receipts (env_id, seq, effect_id, audit_seq, key_id, digest,
                previous_digest, body, issued_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                r.env_id.as_str(),
                r.seq,
                r.effect_id.as_str(),
                r.audit_seq,
                r.key_id,
                r.digest,
                r.previous_digest,
                r.stored_body(),
                r.issued_at.0
            ],
        )
        .map_err(|e| super::conn::constraint(e, "receipt"))?;
    }
    execute_cached(
        tx,
        "UPDATE receipt_cursor SET audit_seq = ?1 WHERE id = 1",
        params![batch.through_audit_seq],
    )
    .map_err(unavailable)?;
    Ok(IssueOutcome::Issued {
        receipts: batch.receipts.len(),
    })
}

#[async_trait]
impl Receipts for SqliteStore {
    async fn receipt_keys(&self) -> StoreResult<Vec<ReceiptKeyRecord>> {
        self.read(keys).await
    }

    async fn add_receipt_key(
        &self,
        new: &ReceiptKeyRecord,
        first_only: bool,
        actor: &Actor,
    ) -> StoreResult<bool> {
        let (new, actor) = (new.clone(), actor.clone());
        self.write(move |tx| {
            if first_only && !keys(tx)?.is_empty() {
                return Ok(false);
            }
            execute_cached(
                tx,
                "INSERT INTO receipt_keys (id, public_key, nonce, sealed, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    new.id,
                    new.public_key,
                    new.nonce,
                    new.sealed,
                    new.created_at.0
                ],
            )
            .map_err(|e| super::conn::constraint(e, "receipt key"))?;
            append(
                tx,
                &actor,
                AuditEntry::global(AuditKind::ReceiptKeyCreated, &new.id).after(new.audit_view()),
            )?;
            Ok(true)
        })
        .await
    }

    async fn receipt_cursor(&self) -> StoreResult<i64> {
        self.read(cursor).await
    }

    async fn receipt_head(&self, env: &EnvironmentId) -> StoreResult<Option<(i64, String)>> {
        let env = env.clone();
        self.read(move |c| head(c, &env)).await
    }

    async fn issue_receipts(&self, batch: &ReceiptBatch) -> StoreResult<IssueOutcome> {
        let batch = batch.clone();
        self.write(move |tx| issue(tx, &batch)).await
    }

    async fn effect_receipts(
        &self,
        env: &EnvironmentId,
        effect: &EffectId,
    ) -> StoreResult<Vec<ReceiptRecord>> {
        let (env, effect) = (env.clone(), effect.clone());
        self.read(move |c| {
            query_all(
                c,
                &format!(
                    "SELECT {RECEIPT_COLUMNS} FROM receipts WHERE env_id = ?1 AND effect_id = ?2
                     ORDER BY seq"
                ),
                &[&env.as_str(), &effect.as_str()],
                receipt,
            )
        })
        .await
    }

    async fn receipts(
        &self,
        env: &EnvironmentId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<ReceiptRecord>> {
        let env = env.clone();
        self.read(move |c| {
            query_all(
                c,
                &format!(
                    "SELECT {RECEIPT_COLUMNS} FROM receipts WHERE env_id = ?1 AND seq > ?2
                     ORDER BY seq LIMIT ?3"
                ),
                &[&env.as_str(), &after, &limit],
                receipt,
            )
        })
        .await
    }
}
