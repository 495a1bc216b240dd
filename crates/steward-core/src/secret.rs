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

/// True when `host` is allowed by one `pattern`: an exact host, or `.example.com` for the
/// domain's subdomains (and the domain itself).
pub fn host_matches(pattern: &str, host: &str) -> bool {
    let pattern = pattern.trim().to_ascii_lowercase();
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    match pattern.strip_prefix('.') {
        Some(domain) => host == domain || host.ends_with(&format!(".{domain}")),
        None => host == pattern,
    }
}

/// True when every host that `narrower` allows is allowed by `wider`. `None` means unrestricted.
pub fn hosts_within(narrower: Option<&[String]>, wider: Option<&[String]>) -> bool {
    match (narrower, wider) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(narrow), Some(wide)) => narrow.iter().all(|n| {
            let probe = n.trim_start_matches('.');
            wide.iter()
                .any(|w| host_matches(w, probe) && (!n.starts_with('.') || w.starts_with('.')))
        }),
    }
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
    fn host_patterns() {
        assert!(host_matches("api.stripe.com", "API.stripe.com"));
        assert!(!host_matches("api.stripe.com", "evil-api.stripe.com"));
        assert!(host_matches(".stripe.com", "api.stripe.com"));
        assert!(host_matches(".stripe.com", "stripe.com"));
        assert!(!host_matches(".stripe.com", "notstripe.com"));
    }

    #[test]
    fn narrowing_and_widening() {
        let wide = vec![".stripe.com".to_string()];
        let narrow = vec!["api.stripe.com".to_string()];
        assert!(hosts_within(Some(&narrow), Some(&wide)));
        assert!(!hosts_within(Some(&wide), Some(&narrow)));
        assert!(!hosts_within(None, Some(&narrow)));
        assert!(hosts_within(Some(&narrow), None));
    }

    #[test]
    fn redaction_removes_every_occurrence() {
        let out = redact("a sk_test_123 b sk_test_123", &["sk_test_123".into()]);
        assert_eq!(out, "a [REDACTED] b [REDACTED]");
        assert!(is_valid_secret_name("STRIPE_TEST_KEY"));
        assert!(!is_valid_secret_name("stripe"));
    }
}
