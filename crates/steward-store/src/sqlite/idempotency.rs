//! `Idempotency-Key` records: those of writes other than invoke, and the read of any of them
//! that answers a repeated invoke without writing (`earlier`).

use super::conn::{unavailable, CachedQuery};
use super::SqliteStore;
use crate::error::StoreResult;
use crate::records::{EarlierRequest, IdempotencyBegin};
use crate::store::{seen_before, Idempotency};
use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;
use steward_core::{EnvironmentId, IdempotencyKey, KeyId, Millis, ReplicaId};

/// The `key_id` of rows recorded before `Idempotency-Key` was scoped to the calling API key:
/// they still answer every key of their environment, as they did when they were written.
pub(crate) const LEGACY_SCOPE: &str = "";

/// The request `caller` recorded under `key` (or a legacy row of the environment), with the invocation it answered with: what `submit`
/// checks first, and what answers a resend without writing.
pub(crate) fn earlier(
    conn: &Connection,
    env: &EnvironmentId,
    caller: &KeyId,
    key: &IdempotencyKey,
) -> StoreResult<Option<EarlierRequest>> {
    let seen: Option<(String, String, Option<String>)> = conn
        .query_row_cached(
            "SELECT fingerprint, state, invocation_id FROM idempotency
             WHERE env_id = ?1 AND key = ?2 AND key_id IN (?3, ?4) ORDER BY key_id DESC",
            params![env.as_str(), key.as_str(), caller.as_str(), LEGACY_SCOPE],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()
        .map_err(unavailable)?;
    let Some((fingerprint, state, invocation)) = seen else {
        return Ok(None);
    };
    let invocation = invocation
        .map(|id| super::effects::must_invocation(conn, env, &id))
        .transpose()?;
    Ok(Some(EarlierRequest {
        fingerprint,
        answered: state != "in_progress",
        invocation,
    }))
}

#[async_trait]
impl Idempotency for SqliteStore {
    async fn idempotency_begin(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
        fingerprint: &str,
        now: Millis,
        owner: &ReplicaId,
    ) -> StoreResult<IdempotencyBegin> {
        let (env, caller, key, fingerprint, owner) = (
            env.clone(),
            caller.clone(),
            key.clone(),
            fingerprint.to_string(),
            owner.clone(),
        );
        self.write(move |tx| {
            let seen: Option<(String, String, Option<u16>, Option<String>)> = tx
                .query_row_cached(
                    "SELECT fingerprint, state, response_status, response_body FROM idempotency
             WHERE env_id = ?1 AND key = ?2 AND key_id IN (?3, ?4) ORDER BY key_id DESC",
                    params![env.as_str(), key.as_str(), caller.as_str(), LEGACY_SCOPE],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .optional()
                .map_err(unavailable)?;
            let Some((stored, state, status, body)) = seen else {
                super::conn::execute_cached(
                tx,
                    "INSERT INTO idempotency (env_id, key_id, key, fingerprint, kind, state, created_at, owner) VALUES (?1, ?6, ?2, ?3, 'generic', 'in_progress', ?4, ?5)",
                    params![env.as_str(), key.as_str(), fingerprint, now.0, owner.as_str(), caller.as_str()],
                )
                .map_err(unavailable)?;
                return Ok(IdempotencyBegin::Begun);
            };
            Ok(seen_before(
                &fingerprint,
                &stored,
                &state,
                status,
                body.as_deref(),
            ))
        })
        .await
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
        let (env, caller, key, body) = (env.clone(), caller.clone(), key.clone(), body.clone());
        self.write(move |tx| {
            super::conn::execute_cached(
                tx,
                "UPDATE idempotency SET state = 'done', response_status = ?1, response_body = ?2
         WHERE env_id = ?3 AND key_id = ?5 AND key = ?4 AND kind = 'generic'",
                params![
                    status,
                    body.to_string(),
                    env.as_str(),
                    key.as_str(),
                    caller.as_str()
                ],
            )
            .map_err(unavailable)?;
            Ok(())
        })
        .await
    }

    async fn idempotency_abandon(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
    ) -> StoreResult<()> {
        let (env, caller, key) = (env.clone(), caller.clone(), key.clone());
        self.write(move |tx| {
            super::conn::execute_cached(
                tx,
                "DELETE FROM idempotency WHERE env_id = ?1 AND key_id = ?3 AND key = ?2 AND kind = 'generic' AND state = 'in_progress'",
                params![env.as_str(), key.as_str(), caller.as_str()],
            )
            .map_err(unavailable)?;
            Ok(())
        })
        .await
    }
}
