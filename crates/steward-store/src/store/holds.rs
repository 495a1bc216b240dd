//! Holds: an operator's narrower kill switch, on one action or one operation key.

use crate::error::StoreResult;
use crate::records::{Actor, HoldRecord};
use async_trait::async_trait;
use steward_core::{EnvironmentId, HoldId};

/// Holding and releasing actions and operation keys. The hold itself is enforced by
/// `Effects::change_effect`, in the transaction that would record a first attempt (`ready ->
/// dispatching`), like the kill switch: an attempt already recorded is not disturbed.
#[async_trait]
pub trait Holds: Send + Sync {
    /// Records `hold`, with its audit event (`hold.created`). From its commit on,
    /// `change_effect` refuses every first attempt of an invocation the hold covers with
    /// `StoreError::Held`, so that work stays `ready`. `Duplicate { what: "hold" }` when the
    /// environment already holds the same action and operation key.
    async fn create_hold(&self, hold: &HoldRecord, actor: &Actor) -> StoreResult<()>;
    /// The environment's holds, oldest first.
    async fn list_holds(&self, env: &EnvironmentId) -> StoreResult<Vec<HoldRecord>>;
    /// Removes the hold, with its audit event (`hold.released`), and answers it as it was.
    /// `NotFound { what: "hold" }` when the environment has no such hold. The work it parked
    /// stays `ready` for the caller to dispatch (`KillSwitch::ready_invocations`).
    async fn release_hold(
        &self,
        env: &EnvironmentId,
        id: &HoldId,
        actor: &Actor,
    ) -> StoreResult<HoldRecord>;
}
