//! The one place that reads the wall clock and draws operation ids.

use steward_core::Millis;

/// Milliseconds since the Unix epoch, now.
#[allow(clippy::disallowed_methods)] // this module is the client's one clock
pub(crate) fn now() -> Millis {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Millis(i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
}

/// A fresh unique suffix for an operation id (a ULID, lower-cased).
#[allow(clippy::disallowed_methods)] // this module is the client's one id source
pub(crate) fn unique() -> String {
    ulid::Ulid::new().to_string().to_ascii_lowercase()
}
