//! Generic request idempotency: the `Idempotency-Key` of every write but invoke.

use crate::error::StoreResult;
use crate::records::IdempotencyBegin;
use async_trait::async_trait;
use serde_json::Value;
use steward_core::{EnvironmentId, IdempotencyKey, KeyId, Millis, ReplicaId};

/// The requests recorded under an `Idempotency-Key`, for writes other than invoke (an invoke
/// records its key in `Effects::submit`).
///
/// An `Idempotency-Key` is scoped to the API key that sent it (`caller`), within its
/// environment: another API key's request with the same header value is a separate request,
/// which neither replays nor is refused by this one. Rows written before keys were scoped
/// (`key_id = ''`) still answer any key of their environment.
#[async_trait]
pub trait Idempotency: Send + Sync {
    /// Records the key as in flight, owned by `owner`, or answers what it found. A recovery
    /// sweep forgets an in-flight marker once its owner is dead, so the request may be sent
    /// again; never while the owner lives.
    async fn idempotency_begin(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
        fingerprint: &str,
        now: Millis,
        owner: &ReplicaId,
    ) -> StoreResult<IdempotencyBegin>;
    async fn idempotency_finish(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
        status: u16,
        body: &Value,
        now: Millis,
    ) -> StoreResult<()>;
    /// Forgets a begun key whose request failed without a recordable answer (a storage error).
    async fn idempotency_abandon(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
    ) -> StoreResult<()>;
}

/// What `Idempotency::idempotency_begin` answers when the key was seen before: the request it
/// recorded (`stored` fingerprint, `state`, and the answer's `status` and `body` once done)
/// against this request's `fingerprint`. The same in every backend; each reads the row its own
/// way.
pub(crate) fn seen_before(
    fingerprint: &str,
    stored: &str,
    state: &str,
    status: Option<u16>,
    body: Option<&str>,
) -> IdempotencyBegin {
    if stored != fingerprint {
        return IdempotencyBegin::Mismatch;
    }
    match (state, status, body) {
        ("done", Some(status), Some(body)) => IdempotencyBegin::Replay {
            status,
            body: serde_json::from_str(body).unwrap_or(Value::Null),
        },
        ("in_progress", _, _) => IdempotencyBegin::InProgress,
        // A key first used for an invoke, now sent with another endpoint's request.
        _ => IdempotencyBegin::Mismatch,
    }
}
