//! Deliberate defects of the dispatcher, for the simulator to prove that its checks can fail.
//!
//! A server process never sets one (`AppState::defect` is `None` in `serve.rs`); the simulator
//! (`steward-sim`) sets one to run a broken build of the real dispatcher and to show that some
//! seed catches it. Each is a mistake a plausible change could make.

/// One deliberate defect of the dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Defect {
    /// A replay is sent under a fresh provider idempotency key instead of the effect's own: a
    /// write that landed unseen is made again.
    ReplayWithoutIdempotency,
    /// The first attempt's request leaves before its `dispatching` attempt is committed (write
    /// path step 4 before step 3): a crash in between loses the record of a write that happened.
    SendBeforeAttemptIsDurable,
    /// A send whose outcome is unknown (a timeout, a broken connection, a 5xx that does not say
    /// nothing happened) is sent again at once, as a retrying HTTP client would: without a new
    /// attempt on record, and without the provider's idempotency to make it harmless.
    ResendAfterUnknown,
}

/// The provider key a replay is sent under: the effect's own, except under
/// [`Defect::ReplayWithoutIdempotency`].
pub(crate) fn replay_key(
    defect: Option<Defect>,
    key: Option<String>,
    number: u32,
) -> Option<String> {
    match defect {
        Some(Defect::ReplayWithoutIdempotency) => key.map(|k| format!("{k}-replay{number}")),
        _ => key,
    }
}
