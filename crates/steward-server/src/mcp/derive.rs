//! Operation keys derived for MCP calls that carry none, for actions (or a server) that chose
//! `derive` over `refuse` (`MissingOperationKey`).
//!
//! A derived key is a fingerprint of (agent key, action, action version, canonical input, time
//! bucket): the same agent calling the same version with the same arguments within the window
//! names the same operation, so a host's retry after a timeout or a reconnect observes the first
//! call instead of repeating it. Never the JSON-RPC id, which restarts with every connection.
//!
//! Time is cut into buckets of one window. A call looks at the key of the bucket before its own
//! too, and takes it when that key already names an invocation created within one window of
//! now, so a retry that crosses a bucket boundary still finds its operation. What it cannot see
//! is a first call that has not yet committed while its retry crosses the boundary; that
//! narrow case is written down in docs/DECISIONS.md.

use serde_json::{json, Value};
use std::time::Duration;
use steward_core::{
    canonical_json, fingerprint_str, ActionId, KeyId, Millis, MissingOperationKey, OperationKey,
};

/// How long an identical call is taken for a retry of the first, in seconds, by default: ten
/// minutes spans a host's timeout-and-retry loop and a reconnect, and is short enough that a
/// deliberate repeat of the same call later is new work.
pub const DERIVED_KEY_WINDOW_S_DEFAULT: u64 = 600;
/// The longest window `--mcp-derived-key-window-s` accepts, in seconds (one day).
pub const DERIVED_KEY_WINDOW_S_MAX: u64 = 86_400;
/// Every derived key starts with this, so a person reading an effect can tell it from a key a
/// model or an application chose.
pub const DERIVED_KEY_PREFIX: &str = "mcp-derived:";

/// What a governed call without an operation key does on this server, and the window of a
/// derived key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyPolicy {
    /// For actions that do not say (`mcpMissingOperationKey` left out).
    pub default: MissingOperationKey,
    pub window: Duration,
}

impl Default for KeyPolicy {
    fn default() -> Self {
        KeyPolicy {
            default: MissingOperationKey::Refuse,
            window: Duration::from_secs(DERIVED_KEY_WINDOW_S_DEFAULT),
        }
    }
}

impl KeyPolicy {
    /// The choice for an action: its own, else the server's.
    pub fn for_action(&self, declared: Option<MissingOperationKey>) -> MissingOperationKey {
        declared.unwrap_or(self.default)
    }

    fn window_ms(&self) -> i64 {
        (self.window.as_millis() as i64).max(1)
    }
}

/// What one derivation is made of.
pub struct Basis<'a> {
    pub key: &'a KeyId,
    pub action: &'a ActionId,
    pub version: u32,
    pub input: &'a Value,
}

/// The key of the bucket `now` falls in, and of the bucket before it.
pub fn candidates(basis: &Basis<'_>, policy: &KeyPolicy, now: Millis) -> [OperationKey; 2] {
    let bucket = now.0.div_euclid(policy.window_ms());
    [key_for(basis, bucket), key_for(basis, bucket - 1)]
}

/// True when an invocation created at `created_at` is recent enough for a call at `now` to be
/// its retry.
pub fn within_window(policy: &KeyPolicy, created_at: Millis, now: Millis) -> bool {
    now.0.saturating_sub(created_at.0) < policy.window_ms()
}

fn key_for(basis: &Basis<'_>, bucket: i64) -> OperationKey {
    let material = json!([
        basis.key.as_str(),
        basis.action.as_str(),
        basis.version,
        basis.input,
        bucket
    ]);
    let digest = fingerprint_str(&canonical_json(&material));
    let hex = digest.strip_prefix("sha256:").unwrap_or(&digest);
    let key = format!("{DERIVED_KEY_PREFIX}{}", &hex[..40]);
    OperationKey::parse(&key).expect("a derived key is printable ASCII well under the length cap")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(window_s: u64) -> KeyPolicy {
        KeyPolicy {
            default: MissingOperationKey::Derive,
            window: Duration::from_secs(window_s),
        }
    }

    #[test]
    fn the_same_call_in_one_bucket_derives_one_key_and_anything_else_another() {
        let (key, other_key) = (KeyId::from_unique("a"), KeyId::from_unique("b"));
        let action = ActionId::from_unique("act");
        let input = json!({"amount": 5, "payment": "pi_1"});
        let reordered = json!({"payment": "pi_1", "amount": 5});
        let basis = |key, version, input| Basis {
            key,
            action: &action,
            version,
            input,
        };
        let p = policy(600);
        let at = Millis(1_000_000);
        let first = candidates(&basis(&key, 1, &input), &p, at);
        assert_eq!(
            first,
            candidates(&basis(&key, 1, &reordered), &p, at.plus_ms(5))
        );
        assert!(first[0].as_str().starts_with(DERIVED_KEY_PREFIX));
        for changed in [
            candidates(&basis(&other_key, 1, &input), &p, at),
            candidates(&basis(&key, 2, &input), &p, at),
            candidates(
                &basis(&key, 1, &json!({"amount": 6, "payment": "pi_1"})),
                &p,
                at,
            ),
        ] {
            assert_ne!(first[0], changed[0]);
        }
    }

    #[test]
    fn a_call_just_past_a_bucket_boundary_still_names_the_previous_bucket() {
        let (key, action) = (KeyId::from_unique("a"), ActionId::from_unique("act"));
        let input = json!({});
        let basis = Basis {
            key: &key,
            action: &action,
            version: 1,
            input: &input,
        };
        let p = policy(600);
        let before = Millis(600_000 * 7 - 1);
        let after = Millis(600_000 * 7 + 1);
        let [current_before, _] = candidates(&basis, &p, before);
        let [current_after, previous_after] = candidates(&basis, &p, after);
        assert_ne!(current_before, current_after);
        assert_eq!(current_before, previous_after);
        assert!(within_window(&p, before, after));
        assert!(!within_window(&p, before, before.plus_ms(600_000)));
    }

    #[test]
    fn an_action_that_says_nothing_takes_the_server_default() {
        let p = KeyPolicy::default();
        assert_eq!(p.for_action(None), MissingOperationKey::Refuse);
        assert_eq!(
            p.for_action(Some(MissingOperationKey::Derive)),
            MissingOperationKey::Derive
        );
        assert_eq!(
            policy(1).for_action(Some(MissingOperationKey::Refuse)),
            MissingOperationKey::Refuse
        );
    }
}
