//! Typed identifiers. Each id is a prefix plus an opaque unique suffix; parsing checks the prefix in
//! one place so that an `EffectId` can never be confused with an `InvocationId`.
//!
//! The suffix is produced outside the core (the core has no randomness): callers pass a fresh ULID.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// An id string that does not carry the expected prefix, or carries nothing after it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{value}` is not a valid {kind} id (expected the prefix `{prefix}`)")]
pub struct IdError {
    pub kind: &'static str,
    pub prefix: &'static str,
    pub value: String,
}

/// The longest id suffix accepted from a client; anything longer is not ours.
const ID_SUFFIX_LEN_MAX: usize = 64;

macro_rules! define_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            /// Builds an id from a fresh unique suffix (a ULID in production).
            pub fn from_unique(suffix: &str) -> Self {
                Self(format!("{}{}", $prefix, suffix.to_ascii_lowercase()))
            }

            /// Parses an id received from outside, checking its prefix and characters.
            pub fn parse(value: &str) -> Result<Self, IdError> {
                let valid = value
                    .strip_prefix($prefix)
                    .map(|rest| {
                        !rest.is_empty()
                            && rest.len() <= ID_SUFFIX_LEN_MAX
                            && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                    })
                    .unwrap_or(false);
                if valid {
                    Ok(Self(value.to_string()))
                } else {
                    Err(IdError { kind: $kind, prefix: $prefix, value: value.chars().take(80).collect() })
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = String::deserialize(d)?;
                Self::parse(&raw).map_err(serde::de::Error::custom)
            }
        }
    };
}

define_id!(
    /// An isolation unit (`test`, `live`, ...).
    EnvironmentId, "env_", "environment");
define_id!(
    /// A bearer credential's public id (never the credential itself).
    KeyId, "key_", "key");
define_id!(
    /// A named hosted tool.
    ActionId, "act_", "action");
define_id!(
    /// One accepted call of an action.
    InvocationId, "inv_", "invocation");
define_id!(
    /// The external side effect of an invocation.
    EffectId, "eff_", "effect");
define_id!(
    /// A human decision request.
    ApprovalId, "apr_", "approval");
define_id!(
    /// An approval policy: a rule deciding require_approval, auto_approve or auto_deny.
    PolicyId, "pol_", "policy");
define_id!(
    /// A shared impact limit on one dimension.
    LimitId, "lim_", "impact limit");
define_id!(
    /// An execution-bound preview: the exact request an invoke would send, read before it.
    PreviewId, "prv_", "preview");
define_id!(
    /// An agent run: the root of a trace of spans, reported by the agent's runtime.
    RunId, "run_", "run");
define_id!(
    /// Feedback on a run or one of its spans.
    FeedbackId, "fb_", "feedback");
define_id!(
    /// An operator's hold on an action or an operation key: new work under it is parked until
    /// the hold is released.
    HoldId, "hold_", "hold");
define_id!(
    /// One running Steward server process (a replica), chosen fresh at each start. In-flight
    /// work records the replica that owns it, so that another replica can take it over once the
    /// owner's lease (its heartbeat) has expired.
    ReplicaId, "rep_", "replica");

/// A caller-chosen stable identity for one business operation. At most one effect per
/// `(environment, action, operation key)`, ever.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OperationKey(String);

/// The longest operation or idempotency key accepted, in bytes. Long enough for a composed
/// business key (`tenant:order:refund:attempt`), short enough to index cheaply.
pub const CLIENT_KEY_LEN_MAX: usize = 255;

/// Why a client-chosen key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientKeyError {
    #[error("must not be empty")]
    Empty,
    #[error("must be at most {CLIENT_KEY_LEN_MAX} bytes")]
    TooLong,
    #[error("must contain only printable ASCII characters")]
    NotPrintable,
}

fn check_client_key(value: &str) -> Result<(), ClientKeyError> {
    if value.is_empty() {
        return Err(ClientKeyError::Empty);
    }
    if value.len() > CLIENT_KEY_LEN_MAX {
        return Err(ClientKeyError::TooLong);
    }
    if !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(ClientKeyError::NotPrintable);
    }
    Ok(())
}

impl OperationKey {
    pub fn parse(value: &str) -> Result<Self, ClientKeyError> {
        check_client_key(value).map(|()| Self(value.to_string()))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The `Idempotency-Key` of one HTTP request, scoped to the API key that sent it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn parse(value: &str) -> Result<Self, ClientKeyError> {
        check_client_key(value).map(|()| Self(value.to_string()))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_checked() {
        assert!(EffectId::parse("eff_01hx").is_ok());
        assert!(EffectId::parse("inv_01hx").is_err());
        assert!(EffectId::parse("eff_").is_err());
        assert!(EffectId::parse("eff_a/b").is_err());
        assert_eq!(InvocationId::from_unique("01HX").as_str(), "inv_01hx");
    }

    #[test]
    fn client_keys_are_bounded_and_printable() {
        assert!(OperationKey::parse("order-42:refund").is_ok());
        assert_eq!(OperationKey::parse(""), Err(ClientKeyError::Empty));
        assert_eq!(
            OperationKey::parse(&"k".repeat(256)),
            Err(ClientKeyError::TooLong)
        );
        assert_eq!(
            IdempotencyKey::parse("a\nb"),
            Err(ClientKeyError::NotPrintable)
        );
    }
}
