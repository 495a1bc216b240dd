//! Operator console sign-ins: one row per session, holding only a hash of the session token.

use crate::audit_entry::{AuditEntry, AuditKind};
use serde_json::{json, Value};
use steward_core::{EnvironmentId, KeyId, Millis};

/// A console session. The browser holds the token in a cookie; the store holds its hash, so a
/// copy of the database signs nobody in. The session authenticates as its key: every lookup
/// checks the key again ([`crate::ApiKeyRecord::usable_at`]), so revoking or expiring the key
/// ends its sessions at once, on every replica.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsoleSessionRecord {
    /// `ses_<ulid>`: names the session in audit events (the token hash never leaves the store).
    pub id: String,
    /// `sha256:<hex>` of the session token, as key tokens are hashed.
    pub token_hash: String,
    /// The operator key that signed in.
    pub key_id: KeyId,
    pub env_id: EnvironmentId,
    pub created_at: Millis,
    /// From this time on the session no longer authenticates.
    pub expires_at: Millis,
}

impl ConsoleSessionRecord {
    /// True when the session itself (not its key) still authenticates at `now`.
    pub fn live_at(&self, now: Millis) -> bool {
        now < self.expires_at
    }

    /// What the audit log keeps of a session: its key and expiry, never the token's hash.
    fn audit_view(&self) -> Value {
        json!({"key": self.key_id.as_str(), "expiresAt": self.expires_at.0})
    }

    /// The `console.session.started` event.
    pub(crate) fn started_entry(&self) -> AuditEntry {
        AuditEntry::new(
            AuditKind::ConsoleSessionStarted,
            self.env_id.as_str(),
            &self.id,
        )
        .after(self.audit_view())
    }

    /// The `console.session.ended` event.
    pub(crate) fn ended_entry(&self) -> AuditEntry {
        AuditEntry::new(
            AuditKind::ConsoleSessionEnded,
            self.env_id.as_str(),
            &self.id,
        )
        .before(self.audit_view())
    }
}
