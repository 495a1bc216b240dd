//! Secret names and placements (`hosts.rs` has where a secret may go, `redact.rs` how it is
//! scrubbed). Values never pass through here except to be
//! placed into an outgoing request or scrubbed from text.

use serde::{Deserialize, Serialize};

/// Where in a request a secret may appear.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    Url,
    Header,
    Body,
}

impl Placement {
    pub fn parse(value: &str) -> Option<Placement> {
        match value {
            "url" => Some(Placement::Url),
            "header" => Some(Placement::Header),
            "body" => Some(Placement::Body),
            _ => None,
        }
    }
}

/// The longest secret name, in bytes.
pub const SECRET_NAME_LEN_MAX: usize = 128;

pub fn is_valid_secret_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= SECRET_NAME_LEN_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names() {
        assert!(is_valid_secret_name("STRIPE_TEST_KEY"));
        assert!(!is_valid_secret_name("stripe"));
    }
}
