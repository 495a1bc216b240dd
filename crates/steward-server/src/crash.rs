//! Arms the server's crash points from `STEWARD_CRASH_AT`. Reaching an armed point aborts the
//! process at once (no destructors, like SIGKILL). Unarmed, a check is one atomic load.

use std::sync::OnceLock;
use steward_core::{CrashPoint, CRASH_AT_ENV};

fn armed() -> Option<CrashPoint> {
    static ARMED: OnceLock<Option<CrashPoint>> = OnceLock::new();
    *ARMED.get_or_init(|| {
        std::env::var(CRASH_AT_ENV)
            .ok()
            .and_then(|v| CrashPoint::parse(v.trim()))
    })
}

pub fn reach(point: CrashPoint) {
    if armed() == Some(point) {
        eprintln!("steward: crash point {} reached; aborting", point.name());
        std::process::abort();
    }
}
