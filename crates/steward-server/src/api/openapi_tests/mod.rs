//! The OpenAPI document's checks against the running router: `drift.rs` (every documented
//! operation is served and nothing else, the bodies' known fields, the bounds are the named
//! constants, every error is the envelope) and `flow.rs` (one real flow through every operation,
//! each answer validated against the document). They live outside `openapi/`, which holds only
//! what builds the document.

mod drift;
mod flow;
