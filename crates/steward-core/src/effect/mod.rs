//! The effect: the external side effect of one invocation, as a pure state machine.
//!
//! [`next`] maps `(state, event)` to the new state plus the work the driver must do, as data. The
//! server commits the new state and that work's records in one transaction, then performs the
//! work and feeds the result back as the next event. Recovery after a crash uses the same function.

mod event;
mod evidence;
mod grade;
pub mod link;
mod state;
mod transition;

pub use event::{EffectEvent, ManualOutcome};
pub use evidence::{EvidenceKind, EvidenceSource};
pub use grade::Grade;
pub use state::{EffectState, Outcome, Rejection, Stage};
pub use transition::{is_legal, next, settlement, IllegalTransition, Work};
