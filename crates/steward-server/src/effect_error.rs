//! What can go wrong while Steward drives an effect: the dispatcher, a replay, a reconcile, a
//! replica's takeover, a crash point. These errors know nothing of HTTP; the API turns them into
//! its envelope in one place (`From<EffectError> for ApiError` in `error/mod.rs`), where an
//! internal error is logged with its ids and source chain and never sent to the client.

use steward_core::{CrashPoint, EffectId};
use steward_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum EffectError {
    /// Storage refused or failed; nothing further was recorded or sent. A move the effect's
    /// rules do not allow arrives here too (`StoreError::IllegalTransition`, from
    /// `EffectChange::of` or the store's own check): a bug, never the client's doing.
    #[error("storage: {source}")]
    Store {
        #[from]
        source: StoreError,
    },
    /// The provider call was made (or may have been) and the commit of its answer failed: the
    /// effect is still `dispatching` in the store. The answer is kept in memory to be recorded
    /// once the database is back (`dispatch/pending.rs`); never "nothing was sent".
    #[error("the answer of effect {effect} could not be recorded: {source}")]
    AnswerNotRecorded {
        effect: EffectId,
        #[source]
        source: StoreError,
    },
    /// The commit of an invoke's intent and attempt (`submit_and_begin`) lost its answer: it may
    /// be recorded or not. Nothing was sent; if it was recorded, the attempt is settled `failed`
    /// as not sent once the database is back (`dispatch/pending.rs`).
    #[error("the invoke's intent may or may not be recorded: {source}")]
    IntentNotKnown {
        #[source]
        source: StoreError,
    },
    /// The commit recording a parked invocation (awaiting approval) lost its answer: it may be
    /// recorded or not. Nothing was sent; if it was recorded it waits for its approval, and is
    /// sent once approved, like any parked invocation (the fault suite found this, issue #26).
    #[error("the parked invocation may or may not be recorded: {source}")]
    ParkedNotKnown {
        #[source]
        source: StoreError,
    },
    /// A record the effect needs is not in its environment (an action version, an effect).
    #[error("{what} {id} not found")]
    Missing { what: &'static str, id: String },
    /// A replay was refused before anything was sent; the effect stays `unknown`.
    #[error("the replay of effect {effect} was not sent ({code}): {message}")]
    ReplayBlocked {
        effect: EffectId,
        code: &'static str,
        message: String,
    },
    /// An in-process simulation's crash hook stopped the dispatch at `point`.
    #[error("simulated crash at {}", point.name())]
    SimulatedCrash { point: CrashPoint },
}

impl EffectError {
    pub fn missing(what: &'static str, id: impl std::fmt::Display) -> Self {
        EffectError::Missing {
            what,
            id: id.to_string(),
        }
    }
}

pub type EffectResult<T> = Result<T, EffectError>;
