//! Crash points. In a real process, `STEWARD_CRASH_AT=<point>` aborts it at that point (no
//! destructors, like SIGKILL); unarmed, a check is one atomic load. In-process simulations pass a
//! [`CrashHook`] instead: the dispatch stops right there and leaves the durable state exactly as
//! a process death would.

use crate::effect_error::EffectError;
use std::sync::{Arc, OnceLock};
use steward_core::{CrashPoint, CRASH_AT_ENV};

/// Decides, per crash point reached, whether the simulated process dies there.
pub type CrashHook = Arc<dyn Fn(CrashPoint) -> bool + Send + Sync>;

fn armed() -> Option<CrashPoint> {
    static ARMED: OnceLock<Option<CrashPoint>> = OnceLock::new();
    *ARMED.get_or_init(|| {
        std::env::var(CRASH_AT_ENV)
            .ok()
            .and_then(|v| CrashPoint::parse(v.trim()))
    })
}

/// What carries a simulation's [`CrashHook`]: the server's state (`state.rs`). A trait, so this
/// module does not import the state that holds its hook.
pub trait Hooked {
    fn crash_hook(&self) -> Option<&CrashHook>;
}

/// Passes `point`: aborts the process when it is armed; returns an error when a simulation's
/// hook decides to crash here.
pub fn reach(state: &impl Hooked, point: CrashPoint) -> Result<(), EffectError> {
    if armed() == Some(point) {
        eprintln!("steward: crash point {} reached; aborting", point.name());
        std::process::abort();
    }
    match state.crash_hook() {
        Some(hook) if hook(point) => Err(EffectError::SimulatedCrash { point }),
        _ => Ok(()),
    }
}
