//! The one place that reads the wall clock and draws random ids. Everything else receives time
//! and ids from here, so tests and the simulator can substitute their own.

use steward_core::Millis;

/// A source of "now".
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Millis;
}

/// The real wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)]
    fn now(&self) -> Millis {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Millis(since.as_millis() as i64)
    }
}

/// A fresh unique id suffix (a ULID, lower-cased by the id types).
#[allow(clippy::disallowed_methods)] // this module is the server's one id source
pub fn unique() -> String {
    ulid::Ulid::new().to_string()
}

/// A source of fresh unique id suffixes: [`UlidIds`] in a server process; the simulator passes
/// one that numbers them, so that a seed fixes every id.
pub trait IdSource: Send + Sync + 'static {
    fn next(&self) -> String;
}

/// The real id source: [`unique`].
pub struct UlidIds;

impl IdSource for UlidIds {
    fn next(&self) -> String {
        unique()
    }
}
