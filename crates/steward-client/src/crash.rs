//! The client's crash points (docs/INVARIANTS.md, the crash windows), armed by `STEWARD_CRASH_AT=<name>`.
//!
//! Reaching the armed point aborts the process at once: no destructors, no flush, like SIGKILL.
//! Unarmed (the normal case), a check is one load of an initialised `OnceLock`. Server points
//! (`server_*`) are ignored here; the server arms its own.

use std::sync::OnceLock;
use steward_core::{CrashPoint, CRASH_AT_ENV};

fn armed() -> Option<CrashPoint> {
    static ARMED: OnceLock<Option<CrashPoint>> = OnceLock::new();
    *ARMED.get_or_init(|| {
        std::env::var(CRASH_AT_ENV)
            .ok()
            .and_then(|v| CrashPoint::parse(v.trim()))
            .filter(|p| !p.is_server())
    })
}

/// Aborts the process if `point` is the armed crash point.
pub(crate) fn reach(point: CrashPoint) {
    debug_assert!(!point.is_server(), "the client only reaches client points");
    if armed() == Some(point) {
        eprintln!(
            "steward-client: crash point {} reached; aborting",
            point.name()
        );
        std::process::abort();
    }
}
