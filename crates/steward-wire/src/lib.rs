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
mod billing;
mod budget;
mod channel;
mod connection;
mod connection_session;
mod effect;
mod envelope;
mod environment;
mod hold;
mod import;
mod input_edit;
mod invocation;
mod limit;
mod note;
mod nullable;
mod policy;
mod policy_body;
mod preview;
mod receipt;
mod request;
mod resolve;
mod run;
mod run_request;
mod secret;
mod shadow;
mod webhook;

pub use action::{Action, ActionBody, MissingOperationKeyChoice};
pub use approval::{Approval, ApprovalDecision, ApprovalRequestBody, Decided, Unchanged};
pub use billing::{BillingQuota, BillingUsage, WorkspaceBudget};
pub use budget::{Budget, BudgetBody, BudgetDeleted, BudgetUsage};
pub use channel::{ApprovalChannel, ApprovalChannelBody};
pub use connection::{
    CheckBody, ConnectKeyBody, Connection, ConnectionCompleted, ConnectionHealth, Credential,
    Integration, IntegrationAuth, ReconnectBody,
};
pub use connection_session::{
    CallbackDone, CompleteBody, ConnectionPending, ConnectionSession, Reconnected, SessionBody,
};
pub use effect::{Attempt, Dependency, Effect, Evidence, Reservation};
pub use envelope::{
    CursorPage, CursorPagination, List, Page, Pagination, Single, VersionPage, VersionPagination,
    Warning,
};
pub use environment::{Environment, Identity, UnkeyedInvokes};
pub use hold::{Hold, HoldBody, HoldReleaseBody, InvocationHeld};
pub use import::{ImportAuth, ImportBody, ImportResult, ImportedAction, SkippedOperation};
pub use input_edit::{ApprovalEdit, InputChange, InvocationEdit};
pub use invocation::{Elided, Governed, Invocation, InvokeBody};
pub use limit::{Deleted, Limit, LimitBody, LimitUpdateBody, Period, SecretDeleted};
pub use note::NoteBody;
pub use policy::{
    Considered, DecidingPolicy, Evaluation, MatchKind, MatchResult, Policy, PolicyDecision,
    PolicyEffect, PolicyFileApplied, PolicyFileCase, PolicyFileChange, PolicyFileOp,
    PolicyFilePlan, PolicyFileProblem, PolicyFileSummary, PolicyFileTest, PolicyMatch,
    PolicyVersion,
};
pub use policy_body::{
    EvaluateBody, PolicyBody, PolicyDeleteBody, PolicyFileApplyBody, PolicyFilePlanBody,
    PolicyFileTestBody, RequestKind,
};
pub use preview::{Preview, PreviewBody, PreviewRefreshBody, PREVIEW_TTL_MAX_S};
pub use receipt::{
    Receipt, ReceiptApproval, ReceiptDecision, ReceiptKey, ReceiptPolicy, ReceiptProvider,
    ReceiptRequest, ReceiptSettlement,
};
pub use request::{
    Amount, Count, DecisionBody, EnvironmentBody, HaltBody, Number, Object, ResumeBody, Text,
};
pub use resolve::{ManualOutcome, PartialEffect, ResolveEffectBody, ResolveInvocationBody};
pub use run::{Feedback, Run, RunApproval, RunDetail, Span, SpanNode, SpansIngested, Trace};
pub use run_request::{FeedbackBody, RunEndBody, RunStartBody, SpansBody, TraceBody};
pub use secret::{Secret, SecretBody};
pub use shadow::ShadowDecision;
pub use webhook::{
    DeadLetter, RedeliveryRequested, Subscription, SubscriptionBody, SubscriptionPatch, Topic,
};
