//! The catalog, the same in every backend: what the audit log records of secrets and actions,
//! and which column an action reference names. The backends keep only their SQL
//! (`sqlite/catalog.rs`, `postgres/catalog.rs`).

use crate::audit_entry::{AuditEntry, AuditKind};
use crate::error::{StoreError, StoreResult};
use crate::records::{ActionRecord, SecretRecord};
use serde_json::{json, Value};
use steward_core::{ActionDefinition, ActionId, EnvironmentId};

/// What the audit log may say about a secret: metadata only, never the value or ciphertext.
fn secret_audit(s: &SecretRecord) -> Value {
    json!({
        "name": s.name,
        "version": s.version,
        "description": s.description,
        "allowedHosts": s.allowed_hosts,
        "allowedPlacements": s.allowed_placements,
    })
}

/// A secret stored as `stored`: created, or rotated from `existing`.
pub(crate) fn secret_put(existing: Option<&SecretRecord>, stored: &SecretRecord) -> AuditEntry {
    let kind = if existing.is_some() {
        AuditKind::SecretRotated
    } else {
        AuditKind::SecretCreated
    };
    AuditEntry::new(kind, stored.env_id.as_str(), &stored.name)
        .before(existing.map(secret_audit))
        .after(secret_audit(stored))
}

/// The secret `existing` deleted.
pub(crate) fn secret_deleted(existing: &SecretRecord) -> AuditEntry {
    AuditEntry::new(
        AuditKind::SecretDeleted,
        existing.env_id.as_str(),
        &existing.name,
    )
    .before(secret_audit(existing))
}

/// An action created at version 1.
pub(crate) fn action_created(a: &ActionRecord) -> AuditEntry {
    AuditEntry::new(AuditKind::ActionCreated, a.env_id.as_str(), a.id.as_str())
        .after(json!({"version": 1, "definition": a.definition}))
}

/// Action `current` moved to `version` with `definition`.
pub(crate) fn action_updated(
    current: &ActionRecord,
    version: u32,
    definition: &ActionDefinition,
) -> AuditEntry {
    AuditEntry::new(
        AuditKind::ActionUpdated,
        current.env_id.as_str(),
        current.id.as_str(),
    )
    .before(json!({"version": current.version, "definition": current.definition}))
    .after(json!({"version": version, "definition": definition}))
}

/// Action `id` deleted.
pub(crate) fn action_deleted(env: &EnvironmentId, id: &ActionId) -> AuditEntry {
    AuditEntry::new(AuditKind::ActionDeleted, env.as_str(), id.as_str())
}

/// The column an action reference names: its id when it has the id's prefix, else its name.
pub(crate) fn reference_column(reference: &str) -> &'static str {
    if reference.starts_with(ActionId::PREFIX) {
        "a.id"
    } else {
        "a.name"
    }
}

/// The version an edit that expects `expected` writes over a record at `current`: the next one,
/// or `VersionConflict` when the record moved.
pub(crate) fn next_version(current: u32, expected: u32) -> StoreResult<u32> {
    if current != expected {
        return Err(StoreError::VersionConflict {
            expected,
            found: current,
        });
    }
    Ok(expected + 1)
}
