//! The counting seam: in a test build, each use case notes that it was reached, under the
//! replica of the state it ran with (each test's state names its own replica, so tests running
//! side by side do not see each other's calls). Tests use it to show that every door reaches
//! the same application function (`app/tests.rs`); in other builds [`reached`] does nothing.

use crate::state::AppState;

/// A use case the seam counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum UseCase {
    Invoke,
    Decide,
    Preview,
    Halt,
    Resume,
}

/// Notes that `use_case` was reached with `state`.
pub fn reached(state: &AppState, use_case: UseCase) {
    #[cfg(test)]
    counted::note(state.replica.as_str(), use_case);
    #[cfg(not(test))]
    let _ = (state, use_case);
}

#[cfg(test)]
pub use counted::count;

#[cfg(test)]
mod counted {
    use super::UseCase;
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    static REACHED: Mutex<BTreeMap<(String, UseCase), u32>> = Mutex::new(BTreeMap::new());

    pub(super) fn note(replica: &str, use_case: UseCase) {
        let mut reached = REACHED.lock().unwrap_or_else(|e| e.into_inner());
        *reached.entry((replica.to_string(), use_case)).or_default() += 1;
    }

    /// How many times `use_case` was reached with the state of `replica`.
    pub fn count(replica: &str, use_case: UseCase) -> u32 {
        let reached = REACHED.lock().unwrap_or_else(|e| e.into_inner());
        reached
            .get(&(replica.to_string(), use_case))
            .copied()
            .unwrap_or(0)
    }
}
