//! Impact limits and the reservations effects hold against them.

use crate::error::StoreResult;
use crate::governance::{ImpactRequest, LimitRecord, LimitStatus, ReserveOutcome};
use crate::records::Actor;
use async_trait::async_trait;
use steward_core::{EnvironmentId, LimitId, Millis};

/// Impact limits: how much an environment's effects may move per window, and the reservations
/// that keep concurrent effects under it (`Effects::change_effect` settles them).
#[async_trait]
pub trait Limits: Send + Sync {
    async fn create_limit(&self, limit: &LimitRecord, actor: &Actor) -> StoreResult<()>;
    /// Renames a limit or changes its amount (`None` keeps the field). Lowering it releases no
    /// reservation, consumption or exposure. Works on archived limits too.
    async fn update_limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        name: Option<&str>,
        amount: Option<i64>,
        actor: &Actor,
    ) -> StoreResult<LimitRecord>;
    /// Archives a limit: new effects no longer reserve against it; existing reservations still
    /// settle. `false` if it was already archived or does not exist.
    async fn archive_limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        actor: &Actor,
    ) -> StoreResult<bool>;
    /// A limit with its usage (consumed, reserved, exposure) in the window containing `now`.
    async fn limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        now: Millis,
    ) -> StoreResult<Option<LimitStatus>>;
    async fn list_limits(
        &self,
        env: &EnvironmentId,
        include_archived: bool,
        now: Millis,
    ) -> StoreResult<Vec<LimitStatus>>;
    /// Reserves, in one transaction, every live limit of the environment that applies to one of
    /// the effect's quantities (`LimitSpec::applies`), in the window containing `actor.now`; or,
    /// when any of them lacks room or the quantity is missing, reserves nothing and answers
    /// `Refused`. Concurrent reservations serialize: their sum never passes a limit. Idempotent
    /// per effect: an effect that already holds reservations gets `AlreadyReserved`. Once
    /// `Reserved` returns, the reservations are durable; `change_effect` settles them (success
    /// consumes, failure or rejection releases, unknown keeps them as exposure), and recovery's
    /// `ready -> failed` releases those of an effect that never got its attempt.
    async fn reserve_impact(&self, request: &ImpactRequest) -> StoreResult<ReserveOutcome>;
}
