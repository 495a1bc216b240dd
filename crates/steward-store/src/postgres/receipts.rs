//! Signed receipts (`crate::receipts`) in the shared store.
//!
//! A key is added under the write lock, so replicas starting together on a new database make one
//! first key. An issue takes the cursor's row `FOR UPDATE`: that row lock serializes issuers,
//! whichever replica they run on, and a batch whose cursor or chain moved meanwhile writes
//! nothing (`IssueOutcome::Moved`).

use super::audit_log::{append, AuditEntry, AuditKind};
use super::conn::{in_transaction, Mode, Tx};
use super::rows::col;
use super::PostgresStore;
use crate::error::StoreResult;
use crate::receipts::{
    check_links, environments, IssueOutcome, ReceiptBatch, ReceiptKeyRecord, ReceiptRecord,
    RECEIPT_COLUMNS,
};
use crate::records::Actor;
use crate::store::Receipts;
use async_trait::async_trait;
use std::collections::HashMap;
use steward_core::{EffectId, EnvironmentId};
use tokio_postgres::Row;

fn key(row: &Row) -> StoreResult<ReceiptKeyRecord> {
    ReceiptKeyRecord::read(row)
}

fn receipt(row: &Row) -> StoreResult<ReceiptRecord> {
    ReceiptRecord::read(row)
}

fn head_row(row: &Row) -> StoreResult<(i64, String)> {
    Ok((col(row, 0)?, col(row, 1)?))
}

async fn keys(tx: &Tx<'_>) -> StoreResult<Vec<ReceiptKeyRecord>> {
    tx.all(
        "SELECT id, public_key, nonce, sealed, created_at FROM receipt_keys
         ORDER BY created_at, id",
        &[],
        key,
    )
    .await
}

async fn head(tx: &Tx<'_>, env: &EnvironmentId) -> StoreResult<Option<(i64, String)>> {
    tx.one(
        "SELECT seq, digest FROM receipts WHERE env_id = $1 ORDER BY seq DESC LIMIT 1",
        &[&env.as_str()],
        head_row,
    )
    .await
}

async fn issue(tx: &Tx<'_>, batch: &ReceiptBatch) -> StoreResult<IssueOutcome> {
    let cursor = tx
        .count(
            "SELECT audit_seq FROM receipt_cursor WHERE id = 1 FOR UPDATE",
            &[],
        )
        .await?;
    if cursor != batch.after_audit_seq {
        return Ok(IssueOutcome::Moved);
    }
    let mut heads = HashMap::new();
    for env in environments(batch) {
        if let Some(h) = head(tx, &env).await? {
            heads.insert(env, h);
        }
    }
    if !check_links(&heads, batch) {
        return Ok(IssueOutcome::Moved);
    }
    for r in &batch.receipts {
        tx.execute_unique(
            "receipt",
            "INSERT INTO receipts (env_id, seq, effect_id, audit_seq, key_id, digest,
                previous_digest, body, issued_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            &[
                &r.env_id.as_str(),
                &r.seq,
                &r.effect_id.as_str(),
                &r.audit_seq,
                &r.key_id,
                &r.digest,
                &r.previous_digest,
                &r.stored_body(),
                &r.issued_at.0,
            ],
        )
        .await?;
    }
    tx.execute(
        "UPDATE receipt_cursor SET audit_seq = $1 WHERE id = 1",
        &[&batch.through_audit_seq],
    )
    .await?;
    Ok(IssueOutcome::Issued {
        receipts: batch.receipts.len(),
    })
}

#[async_trait]
impl Receipts for PostgresStore {
    async fn receipt_keys(&self) -> StoreResult<Vec<ReceiptKeyRecord>> {
        in_transaction!(self, Mode::Read, |tx| async { keys(&tx).await })
    }

    async fn add_receipt_key(
        &self,
        new: &ReceiptKeyRecord,
        first_only: bool,
        actor: &Actor,
    ) -> StoreResult<bool> {
        in_transaction!(self, Mode::Write, |tx| async {
            if first_only && !keys(&tx).await?.is_empty() {
                return Ok(false);
            }
            tx.execute_unique(
                "receipt key",
                "INSERT INTO receipt_keys (id, public_key, nonce, sealed, created_at)
                 VALUES ($1, $2, $3, $4, $5)",
                &[
                    &new.id,
                    &new.public_key,
                    &new.nonce,
                    &new.sealed,
                    &new.created_at.0,
                ],
            )
            .await?;
            append(
                &tx,
                actor,
                AuditEntry::global(AuditKind::ReceiptKeyCreated, &new.id).after(new.audit_view()),
            )
            .await?;
            Ok(true)
        })
    }

    async fn receipt_cursor(&self) -> StoreResult<i64> {
        in_transaction!(self, Mode::Read, |tx| async {
            tx.count("SELECT audit_seq FROM receipt_cursor WHERE id = 1", &[])
                .await
        })
    }

    async fn receipt_head(&self, env: &EnvironmentId) -> StoreResult<Option<(i64, String)>> {
        in_transaction!(self, Mode::Read, |tx| async { head(&tx, env).await })
    }

    async fn issue_receipts(&self, batch: &ReceiptBatch) -> StoreResult<IssueOutcome> {
        in_transaction!(self, Mode::WriteConcurrent, |tx| async {
            issue(&tx, batch).await
        })
    }

    async fn effect_receipts(
        &self,
        env: &EnvironmentId,
        effect: &EffectId,
    ) -> StoreResult<Vec<ReceiptRecord>> {
        in_transaction!(self, Mode::Read, |tx| async {
            tx.all(
                &format!(
                    "SELECT {RECEIPT_COLUMNS} FROM receipts WHERE env_id = $1 AND effect_id = $2
                     ORDER BY seq"
                ),
                &[&env.as_str(), &effect.as_str()],
                receipt,
            )
            .await
        })
    }

    async fn receipts(
        &self,
        env: &EnvironmentId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<ReceiptRecord>> {
        let limit = i64::from(limit);
        in_transaction!(self, Mode::Read, |tx| async {
            tx.all(
                &format!(
                    "SELECT {RECEIPT_COLUMNS} FROM receipts WHERE env_id = $1 AND seq > $2
                     ORDER BY seq LIMIT $3"
                ),
                &[&env.as_str(), &after, &limit],
                receipt,
            )
            .await
        })
    }
}
