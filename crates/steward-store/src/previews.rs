//! Previews, the same in every backend: the columns read, how a row becomes a
//! [`PreviewRecord`], and what the audit log records. The backends keep only their SQL
//! (`sqlite/previews.rs`, `postgres/previews.rs`).

use crate::error::{StoreError, StoreResult};
use crate::records::PreviewRecord;
use serde_json::{json, Value};
use steward_core::{ActionId, EffectId, EnvironmentId, KeyId, Millis, PreviewId};

/// The columns [`Raw`] is read from, in its order; the last is the effect bound to the preview.
pub(crate) const COLUMNS: &str = "p.id, p.env_id, p.action_id, p.action_name, p.action_version,
    p.input, p.input_fingerprint, p.request_digest, p.body, p.run_id, p.created_by, p.created_at,
    p.expires_at, p.refreshes, p.superseded_by,
    (SELECT l.effect_id FROM effect_links l WHERE l.target_id = p.id AND l.kind = 'preview')";

/// One row of [`COLUMNS`], as both drivers read it.
pub(crate) struct Raw {
    pub id: String,
    pub env_id: String,
    pub action_id: String,
    pub action_name: String,
    pub action_version: i64,
    pub input: String,
    pub input_fingerprint: String,
    pub request_digest: String,
    pub body: String,
    pub run_id: Option<String>,
    pub created_by: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub refreshes: Option<String>,
    pub superseded_by: Option<String>,
    pub bound_effect: Option<String>,
}

impl Raw {
    /// One row of [`COLUMNS`].
    pub(crate) fn read(row: &impl crate::columns::Columns) -> StoreResult<Raw> {
        Ok(Raw {
            id: row.get(0)?,
            env_id: row.get(1)?,
            action_id: row.get(2)?,
            action_name: row.get(3)?,
            action_version: row.get(4)?,
            input: row.get(5)?,
            input_fingerprint: row.get(6)?,
            request_digest: row.get(7)?,
            body: row.get(8)?,
            run_id: row.get(9)?,
            created_by: row.get(10)?,
            created_at: row.get(11)?,
            expires_at: row.get(12)?,
            refreshes: row.get(13)?,
            superseded_by: row.get(14)?,
            bound_effect: row.get(15)?,
        })
    }
}

fn corrupt(what: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("preview {what}: {detail}"))
}

fn json(what: &str, text: &str) -> StoreResult<Value> {
    serde_json::from_str(text).map_err(|e| corrupt(what, e))
}

fn preview_id(text: &str) -> StoreResult<PreviewId> {
    PreviewId::parse(text).map_err(|e| corrupt("id", e))
}

pub(crate) fn record(raw: Raw) -> StoreResult<PreviewRecord> {
    Ok(PreviewRecord {
        id: preview_id(&raw.id)?,
        env_id: EnvironmentId::parse(&raw.env_id).map_err(|e| corrupt("environment", e))?,
        action_id: ActionId::parse(&raw.action_id).map_err(|e| corrupt("action", e))?,
        action_name: raw.action_name,
        action_version: u32::try_from(raw.action_version)
            .map_err(|e| corrupt("action version", e))?,
        input: json("input", &raw.input)?,
        input_fingerprint: raw.input_fingerprint,
        request_digest: raw.request_digest,
        body: json("body", &raw.body)?,
        run_id: raw.run_id,
        created_by: KeyId::parse(&raw.created_by).map_err(|e| corrupt("creator", e))?,
        created_at: Millis(raw.created_at),
        expires_at: Millis(raw.expires_at),
        refreshes: raw.refreshes.as_deref().map(preview_id).transpose()?,
        superseded_by: raw.superseded_by.as_deref().map(preview_id).transpose()?,
        bound_effect: raw
            .bound_effect
            .as_deref()
            .map(|e| EffectId::parse(e).map_err(|e| corrupt("bound effect", e)))
            .transpose()?,
    })
}

/// The `preview.created` audit event's record: what binds an invoke, not the provider's data.
pub(crate) fn audited(p: &PreviewRecord) -> Value {
    json!({
        "actionId": p.action_id, "actionVersion": p.action_version,
        "inputFingerprint": p.input_fingerprint, "requestDigest": p.request_digest,
        "expiresAt": p.expires_at.0, "refreshes": p.refreshes,
    })
}

/// The preview a refresh `new` supersedes (`new.refreshes`); `NotFound` when it names none.
pub(crate) fn refreshed(new: &PreviewRecord) -> StoreResult<&PreviewId> {
    new.refreshes.as_ref().ok_or(StoreError::NotFound {
        what: "refreshed preview",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(refreshes: Option<PreviewId>) -> PreviewRecord {
        PreviewRecord {
            id: PreviewId::from_unique("new"),
            env_id: EnvironmentId::from_unique("env"),
            action_id: ActionId::from_unique("act"),
            action_name: "refund".into(),
            action_version: 1,
            input: json!({}),
            input_fingerprint: "fp".into(),
            request_digest: "digest".into(),
            body: json!({}),
            run_id: None,
            created_by: KeyId::from_unique("key"),
            created_at: Millis(1),
            expires_at: Millis(2),
            refreshes,
            superseded_by: None,
            bound_effect: None,
        }
    }

    #[test]
    fn a_refresh_supersedes_the_preview_its_record_names_and_needs_one() {
        let old = PreviewId::from_unique("old");
        assert_eq!(refreshed(&record(Some(old.clone()))).ok(), Some(&old));
        assert!(matches!(
            refreshed(&record(None)),
            Err(StoreError::NotFound {
                what: "refreshed preview"
            })
        ));
    }
}
