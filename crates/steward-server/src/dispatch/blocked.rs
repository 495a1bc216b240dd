//! What stops a request: its own file, so that what opens secrets for a request (`oauth/`) can
//! name it without importing `prepared.rs`, which calls it.

/// A reason not to send, recorded as evidence and as the invocation's error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    pub code: &'static str,
    pub message: String,
}

impl Blocked {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}
