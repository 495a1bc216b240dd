//! Accounts that act for a person: OAuth 2.1 as a client of the provider.
//!
//! An `oauth` integration (`integrations.rs`, [`OauthSpec`](crate::integrations::OauthSpec))
//! connects an account through a consent session (`app/connection_sessions.rs`): Steward sends
//! the person to the provider with a `state` bound to the session and a PKCE S256 challenge, and
//! the provider sends them back to Steward's callback with a code, which [`provider::exchange`]
//! trades for tokens. The tokens are a [`TokenSet`] sealed by the vault as the value of the
//! account's secret: nowhere else, in clear or not.
//!
//! A request that names the secret (`{{secret:NAME}}`, or an adapter's `credentialSecret`) is
//! given the access token ([`account::access_token`], called by the dispatcher when it opens the
//! secret): refreshed first when it expires within [`ACCESS_TOKEN_REFRESH_MARGIN_MS`], with the
//! new token set (the rotated refresh token included) committed before the access token is used.
//! A refresh the provider refuses marks the account `needs_reauth` and the request is not sent.
//! A provider that answers `401` to the request itself gets one more try after one refresh
//! ([`account::refreshed`], from `dispatch`), within the same attempt.

pub mod account;
pub mod provider;

use serde::{Deserialize, Serialize};
use steward_core::Millis;

/// How long a consent session's `connectUrl` can be used, in milliseconds: 15 minutes, the
/// SDK's documented lifetime; time enough to sign in, short enough that a leaked link dies.
pub const CONNECT_SESSION_TTL_MS: i64 = 15 * 60 * 1000;

/// How long one call to the provider's token or revocation endpoint may take, in milliseconds:
/// a refresh runs inside an invoke, so it must leave room under the SDK's 30 s timeout for the
/// request itself.
pub const OAUTH_TOKEN_TIMEOUT_MS: u64 = 10_000;

/// An access token that expires within this many milliseconds is refreshed before use: a
/// minute covers clock skew and the time the request takes to reach the provider.
pub const ACCESS_TOKEN_REFRESH_MARGIN_MS: i64 = 60_000;

/// The largest token endpoint answer read, in bytes: a token answer is a few hundred bytes.
pub const TOKEN_ANSWER_BYTES_MAX: usize = 64 * 1024;

/// What an account's secret holds: the tokens, as one JSON document sealed by the vault. The
/// `stewardOauth` marker tells it from a plain secret's value.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenSet {
    steward_oauth: u8,
    pub access_token: String,
    #[serde(default)]
    pub refresh_token: Option<String>,
    /// When the access token expires (milliseconds), if the provider said.
    #[serde(default)]
    pub expires_at: Option<i64>,
}

/// Never shows a token.
impl std::fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSet")
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

const MARKER: &str = "{\"stewardOauth\":1,";

impl TokenSet {
    pub fn new(
        access_token: String,
        refresh_token: Option<String>,
        expires_at: Option<i64>,
    ) -> Self {
        TokenSet {
            steward_oauth: 1,
            access_token,
            refresh_token,
            expires_at,
        }
    }

    /// The value sealed into the account's secret.
    pub fn to_value(&self) -> String {
        serde_json::to_string(self).expect("a token set serializes")
    }

    /// The token set a secret's value holds, if it is one (a plain secret's value is `None`).
    pub fn from_value(value: &str) -> Option<TokenSet> {
        if !value.starts_with(MARKER) {
            return None;
        }
        serde_json::from_str(value).ok()
    }

    /// True when the access token must be refreshed before it is used at `now`.
    pub fn due(&self, now: Millis) -> bool {
        self.expires_at
            .is_some_and(|at| at <= now.0 + ACCESS_TOKEN_REFRESH_MARGIN_MS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_set_round_trips_and_a_plain_value_is_not_one() {
        let set = TokenSet::new("at".into(), Some("rt".into()), Some(100_000));
        assert_eq!(TokenSet::from_value(&set.to_value()), Some(set.clone()));
        assert_eq!(TokenSet::from_value("sk_test_plain"), None);
        assert_eq!(TokenSet::from_value("{\"accessToken\":\"x\"}"), None);
        assert!(!format!("{set:?}").contains("at\""), "Debug shows no token");
        assert!(set.due(Millis(100_000 - ACCESS_TOKEN_REFRESH_MARGIN_MS)));
        assert!(!set.due(Millis(100_000 - ACCESS_TOKEN_REFRESH_MARGIN_MS - 1)));
        assert!(!TokenSet::new("at".into(), None, None).due(Millis(i64::MAX / 2)));
    }
}
