//! Secret names, destination policy and redaction. Values never pass through here except to be
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

/// The text that replaces a secret value wherever it would otherwise be stored or shown.
pub const REDACTED: &str = "[REDACTED]";

/// Replaces every occurrence of every secret value in `text`.
pub fn redact(text: &str, secret_values: &[String]) -> String {
    let mut out = text.to_string();
    for value in secret_values.iter().filter(|v| !v.is_empty()) {
        if out.contains(value.as_str()) {
            out = out.replace(value.as_str(), REDACTED);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_removes_every_occurrence() {
        let out = redact("a sk_test_123 b sk_test_123", &["sk_test_123".into()]);
        assert_eq!(out, "a [REDACTED] b [REDACTED]");
        assert!(is_valid_secret_name("STRIPE_TEST_KEY"));
        assert!(!is_valid_secret_name("stripe"));
    }
}
