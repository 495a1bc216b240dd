//! Execution-bound previews: what an invoke would send, recorded before it, for an invoke to bind
//! to (`previewId`).

use crate::error::StoreResult;
use crate::records::{Actor, PreviewRecord};
use async_trait::async_trait;
use steward_core::{EnvironmentId, PreviewId};

/// Recording and reading previews. A preview is immutable once recorded, except that a refresh
/// marks it superseded; an invoke binds to one through its effect's links
/// (`EffectLinks::preview`), at most once ([`PREVIEW_BINDING`](crate::PREVIEW_BINDING)).
#[async_trait]
pub trait Previews: Send + Sync {
    /// Records a new preview and its audit event.
    async fn create_preview(&self, preview: &PreviewRecord, actor: &Actor) -> StoreResult<()>;
    /// The preview, with the effect bound to it, if any.
    async fn preview(
        &self,
        env: &EnvironmentId,
        id: &PreviewId,
    ) -> StoreResult<Option<PreviewRecord>>;
    /// In one transaction: marks the preview `new` refreshes (`new.refreshes`) superseded by
    /// `new` and records `new`. `Ok(false)`, and nothing written, when that preview was already
    /// superseded (by a concurrent refresh); `NotFound` when `new` refreshes none.
    async fn refresh_preview(&self, new: &PreviewRecord, actor: &Actor) -> StoreResult<bool>;
}
