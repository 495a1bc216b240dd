//! `Idempotency-Key` records: those of writes other than invoke, and the read of any of them
//! that answers a repeated invoke without writing (`earlier`).

use super::conn::Tx;
use super::conn::{in_transaction, Mode};
use super::rows::{col, int_opt};
use super::PostgresStore;
use crate::error::StoreResult;
use crate::records::{EarlierRequest, IdempotencyBegin};
use crate::store::{seen_before, Idempotency};
use async_trait::async_trait;
use serde_json::Value;
use steward_core::{EnvironmentId, IdempotencyKey, KeyId, Millis, ReplicaId};

/// The `key_id` of rows recorded before `Idempotency-Key` was scoped to the calling API key:
/// they still answer every key of their environment, as they did when they were written.
pub(crate) const LEGACY_SCOPE: &str = "";

/// The request `caller` recorded under `key` (or a legacy row of the environment), with the invocation it answered with: what `submit`
/// checks first, and what answers a resend without writing.
pub(crate) async fn earlier(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    caller: &KeyId,
    key: &IdempotencyKey,
) -> StoreResult<Option<EarlierRequest>> {
    let Some(row) = tx
        .query_first(
            "SELECT fingerprint, state, invocation_id FROM idempotency
             WHERE env_id = $1 AND key = $2 AND key_id IN ($3, $4) ORDER BY key_id DESC",
            &[
                &env.as_str(),
                &key.as_str(),
                &caller.as_str(),
                &LEGACY_SCOPE,
            ],
        )
        .await?
    else {
        return Ok(None);
    };
    let fingerprint: String = col(&row, 0)?;
    let state: &str = col(&row, 1)?;
    let invocation = match col::<Option<&str>>(&row, 2)? {
        Some(id) => Some(super::effects::must_invocation(tx, env, id).await?),
        None => None,
    };
    Ok(Some(EarlierRequest {
        fingerprint,
        answered: state != "in_progress",
        invocation,
    }))
}

#[async_trait]
impl Idempotency for PostgresStore {
    async fn idempotency_begin(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
        fingerprint: &str,
        now: Millis,
        owner: &ReplicaId,
    ) -> StoreResult<IdempotencyBegin> {
        // No write lock: the primary key on `(env_id, key_id, key)` decides between concurrent
        // first sends of one key. The loser's insert waits for the winner's commit and fails,
        // and its transaction runs again (`Mode::WriteConcurrent`) and finds the key in progress (or
        // answered).
        in_transaction!(self, Mode::WriteConcurrent, |tx| async {
            let seen = tx
                .query_first(
                    "SELECT fingerprint, state, response_status, response_body FROM idempotency
             WHERE env_id = $1 AND key = $2 AND key_id IN ($3, $4) ORDER BY key_id DESC",
                    &[
                        &env.as_str(),
                        &key.as_str(),
                        &caller.as_str(),
                        &LEGACY_SCOPE,
                    ],
                )
                .await?;
            let Some(row) = seen else {
                tx.execute(
                    "INSERT INTO idempotency (env_id, key_id, key, fingerprint, kind, state, created_at, owner) VALUES ($1, $6, $2, $3, 'generic', 'in_progress', $4, $5)",
                    &[&env.as_str(), &key.as_str(), &fingerprint, &now.0, &owner.as_str(), &caller.as_str()],
                )
                .await?;
                return Ok(IdempotencyBegin::Begun);
            };
            Ok(seen_before(
                fingerprint,
                col(&row, 0)?,
                col(&row, 1)?,
                int_opt(&row, 2)?,
                col(&row, 3)?,
            ))
        })
    }

    async fn idempotency_finish(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
        status: u16,
        body: &Value,
        _now: Millis,
    ) -> StoreResult<()> {
        // One row, by its primary key: its row lock is all the order it needs.
        in_transaction!(self, Mode::WriteConcurrent, |tx| async {
            tx.execute(
                "UPDATE idempotency SET state = 'done', response_status = $1, response_body = $2
         WHERE env_id = $3 AND key_id = $5 AND key = $4 AND kind = 'generic'",
                &[
                    &i64::from(status),
                    &body.to_string(),
                    &env.as_str(),
                    &key.as_str(),
                    &caller.as_str(),
                ],
            )
            .await?;
            Ok(())
        })
    }

    async fn idempotency_abandon(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
    ) -> StoreResult<()> {
        // One row, by its primary key: its row lock is all the order it needs.
        in_transaction!(self, Mode::WriteConcurrent, |tx| async {
            tx.execute(
                "DELETE FROM idempotency WHERE env_id = $1 AND key_id = $3 AND key = $2 AND kind = 'generic' AND state = 'in_progress'",
                &[&env.as_str(), &key.as_str(), &caller.as_str()],
            )
            .await?;
            Ok(())
        })
    }
}
