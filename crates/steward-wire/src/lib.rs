//! The wire model of Steward's `/api/v2` surface: what each answer's `data` holds, and the
//! envelopes around it, as plain typed views.
//!
//! Every view is `Serialize + ToSchema`: the server builds one from a store record and writes
//! it, and the OpenAPI document describes the same type, so the document cannot drift from
//! what is sent. A client (the CLI through `steward-client`) can read the same types.
//!
//! ```
//! use steward_wire::Single;
//! let answer = Single::new(serde_json::json!({"id": "inv_1"}));
//! assert_eq!(serde_json::to_value(&answer).unwrap()["success"], true);
//! ```
//!
//! Conventions, kept from the Anlyon v2 contract the SDKs read:
//! - fields are camelCase; timestamps are RFC 3339 strings;
//! - a field that has no value is `null`, not absent, unless its doc says it is only present
//!   in some answers (those are `Option`s skipped when `None`, `required = false` in the
//!   schema);
//! - every view refuses unknown fields in its schema (`deny_unknown_fields` gives
//!   `additionalProperties: false`), so the document's checks notice a field sent but not
//!   described.

mod action;
mod approval;
mod effect;
mod envelope;
mod environment;
mod invocation;
mod limit;
mod note;
mod policy;
mod policy_body;
mod preview;
mod request;
mod secret;

pub use action::Action;
pub use approval::{Approval, ApprovalDecision, Decided};
pub use effect::{Attempt, Dependency, Effect, Evidence, Reservation};
pub use envelope::{List, Page, Pagination, Single, Warning};
pub use environment::{Environment, Identity, UnkeyedInvokes};
pub use invocation::{Elided, Governed, Invocation};
pub use limit::{Deleted, Limit, SecretDeleted};
pub use note::NoteBody;
pub use policy::{
    Considered, DecidingPolicy, Evaluation, MatchKind, MatchResult, Policy, PolicyDecision,
    PolicyEffect, PolicyFileApplied, PolicyFileCase, PolicyFileChange, PolicyFileOp,
    PolicyFilePlan, PolicyFileProblem, PolicyFileSummary, PolicyFileTest, PolicyMatch,
    PolicyVersion, VersionPage, VersionPagination,
};
pub use policy_body::{
    EvaluateBody, PolicyBody, PolicyDeleteBody, PolicyFileApplyBody, PolicyFilePlanBody,
    PolicyFileTestBody, RequestKind,
};
pub use preview::{Preview, PreviewBody, PreviewRefreshBody, PREVIEW_TTL_MAX_S};
pub use request::{DecisionBody, EnvironmentBody, HaltBody, ResumeBody, Text};
pub use secret::Secret;
