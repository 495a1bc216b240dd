//! # steward-core
//!
//! Steward's pure domain. Nothing here does IO, reads a clock or draws a random number; the
//! `Cargo.toml` has no tokio, no database and no RNG to prove it.
//!
//! The central piece is the effect state machine. An effect starts `Ready` (or
//! `AwaitingApproval`), and [`next`] says what each event does:
//!
//! ```
//! use steward_core::{next, EffectEvent, EffectState, Grade, Work};
//!
//! let (state, work) = next(EffectState::Ready, EffectEvent::BeginAttempt).unwrap();
//! assert_eq!(state, EffectState::Dispatching);
//! // The attempt record is committed before anything is sent.
//! assert_eq!(work, vec![Work::RecordAttempt, Work::Send]);
//!
//! // A timeout is ambiguous: the effect becomes unknown and is queued for a read-only
//! // reconcile. It is never sent again on its own.
//! let (state, work) = next(state, EffectEvent::Ambiguous).unwrap();
//! assert_eq!(Grade::of(state), Grade::Unknown);
//! assert!(!work.contains(&Work::Send));
//! ```
//!
//! [`classify`] turns what the transport saw into the event, honestly: `failed` only when the
//! request provably never left or the provider definitively said no.
//!
//! The other modules are small: typed ids ([`EffectId`], ...), canonical JSON fingerprints
//! ([`fingerprint`]), action definitions and their templates, secret host policy and redaction,
//! scopes and roles, and timestamps ([`Millis`]).
//!
//! Governance lives in two public modules: [`policy`] (approval policies: matching, ordering,
//! CEL conditions, the decision for one request) and [`impact`] (impact declarations, amount
//! expressions, limits and the arithmetic of reserving against them).

mod action;
mod approval;
mod canonical;
mod classify;
mod crash;
mod effect;
mod hosts;
mod ids;
pub mod impact;
mod input_diff;
mod invocation;
mod jcs;
pub mod policy;
pub mod receipt;
mod redact;
mod schema_bounds;
mod scope;
mod secret;
mod template;
mod text;
mod time;

pub use action::{
    validate_name, ActionDefinition, AdapterSpec, FieldError, MissingOperationKey, UnkeyedInvokes,
    ACTION_NAME_LEN_MAX,
};
pub use approval::{cast, ApprovalStatus, Ballot, Decision, Tally, Verdict};
pub use canonical::{canonical_json, fingerprint, fingerprint_str};
pub use classify::{classify, AttemptReport, Classified};
pub use crash::{CrashPoint, CRASH_AT_ENV};
pub use effect::{
    is_legal, link, next, settlement, EffectEvent, EffectState, EvidenceKind, EvidenceSource,
    Grade, IllegalTransition, ManualOutcome, Outcome, Rejection, Stage, Work,
};
pub use hosts::{host_allowed, hosts_within, Destination, HostRule, HostRuleError, Scheme};
pub use ids::{
    ActionId, ApprovalId, ClientKeyError, EffectId, EnvironmentId, FeedbackId, HoldId, IdError,
    IdempotencyKey, InvocationId, KeyId, LimitId, OperationKey, PolicyId, PreviewId, ReplicaId,
    RunId, CLIENT_KEY_LEN_MAX,
};
pub use input_diff::{input_changes, InputChange};
pub use invocation::InvocationStatus;
pub use jcs::jcs;
pub use redact::{redact, redact_json, Redactor, BASE64_FORM_CHARS_MIN, REDACTED};
pub use schema_bounds::{
    check_schema_bounds, SCHEMA_DEPTH_MAX, SCHEMA_IN_PLACE_CHECKS_MAX, SCHEMA_NODES_MAX,
};
pub use scope::{scopes, Role, PRIVILEGED};
pub use secret::{is_valid_secret_name, Placement};
pub use template::{
    check_input, check_placeholders, lookup, percent_encode, render, secret_references,
    RenderedRequest, TemplateError,
};
pub use text::{check_text, refused_char, TextKind};
pub use time::Millis;
