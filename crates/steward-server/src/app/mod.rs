//! The application layer: one typed function per use case, behind every door.
//!
//! Each function takes the [`Principal`] a front end authenticated (or, for the invoke, the
//! token the invoke's own read authenticates: [`invoke::authenticate`]) and a typed input, and
//! returns a typed output (store records, outcome enums) or an [`Error`]. The front ends are
//! adapters over it: `api/` (HTTP) parses a body, calls, and renders a view; `mcp/` turns a
//! `tools/call` into the same typed input; `console/` turns a form into it. None of them holds a
//! rule of its own, so an invoke from a `tools/call` and one from `POST .../invoke` cannot
//! drift apart.
//!
//! The dependency runs one way: `api/`, `mcp/` and `console/` import `app/`, and `app/` imports
//! none of them (`import_cycles.rs` holds it). What the HTTP edge alone needs (the
//! `Idempotency-Key` record of a whole response, the JSON views, status codes) stays there.
//!
//! The model is omicron's `nexus/src/app/` under its thin `http_entrypoints.rs`.

pub mod account_gate;
pub mod actions;
pub mod approvals;
pub mod billing;
pub mod budgets;
pub mod channels;
pub mod connection_sessions;
pub mod connections;
pub mod environment;
pub mod gate;
pub mod holds;
pub mod idempotency;
pub mod import;
pub mod input;
pub mod invoke;
pub mod keys;
pub mod limits;
pub mod links;
pub mod policies;
pub mod policy_files;
pub mod previews;
pub mod reads;
pub mod receipts;
pub mod reconnect;
pub mod recovery;
pub mod runs;
pub mod seam;
pub mod secrets;
pub mod warnings;
pub mod webhooks;

/// Who is acting: an API key and its environment, authenticated by a front end.
pub use crate::auth::Caller as Principal;

/// The principal whose bearer token hashes to a hash (`Store::caller`); 401 when none.
pub use crate::auth::authenticate;

/// A use case's refusal or failure: a stable code from `error/codes.rs`, a message, and
/// details. It is the error every front end already renders (HTTP as its status and body, MCP
/// as a refused envelope, the console as a page), so it is kept rather than wrapped.
pub use crate::error::ApiError as Error;

/// The result of a use case.
pub type Result<T> = std::result::Result<T, Error>;
