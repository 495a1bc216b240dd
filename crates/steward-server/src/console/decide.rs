//! Approve or deny from the inbox, with a note: `app::approvals::decide`, as `POST
//! /api/v2/approvals/{id}/approve|deny` decides. A decision that changed nothing shows the
//! overview with the reason; one that counted leads back to the overview, which then says what
//! the dispatch of the released invocation did.

use super::bridge::optional;
use super::layout;
use super::overview::{self, Notice};
use super::session::Operator;
use super::ConsoleMode;
use crate::app;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::{Extension, Form};
use std::collections::HashMap;
use steward_core::{scopes, ApprovalId, Decision};

pub async fn approve(
    state: State<AppState>,
    mode: Extension<ConsoleMode>,
    op: Operator,
    id: Path<String>,
    form: Form<HashMap<String, String>>,
) -> Response {
    decide(state, mode, op, id, form, true).await
}

pub async fn deny(
    state: State<AppState>,
    mode: Extension<ConsoleMode>,
    op: Operator,
    id: Path<String>,
    form: Form<HashMap<String, String>>,
) -> Response {
    decide(state, mode, op, id, form, false).await
}

async fn decide(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Path(id): Path<String>,
    Form(form): Form<HashMap<String, String>>,
    approve: bool,
) -> Response {
    let refused = |e| overview::render(&state, mode, &op, Notice::refused(e));
    let decide = match decision(&op, &id, &form, approve) {
        Ok(decide) => decide,
        Err(e) => return refused(e).await,
    };
    let decided = match app::approvals::decide(&state, &op.caller, decide).await {
        Ok(decided) => decided,
        Err(e) => return refused(e).await,
    };
    if let Some(reason) = decided.unchanged {
        return refused(reason.error()).await;
    }
    // The overview then reads the invocation the decision released (or ended) and says what
    // its dispatch did.
    let done = if approve { "approved" } else { "denied" };
    match &decided.invocation {
        Some(invocation) => layout::see_other(&format!(
            "/console/?done={done}&invocation={}",
            invocation.id
        )),
        None => layout::see_other(&format!("/console/?done={done}")),
    }
}

/// The decision the form asks for. The operator must be able to read approvals as well as
/// decide them, as on the page the form is on.
fn decision(
    op: &Operator,
    id: &str,
    form: &HashMap<String, String>,
    approve: bool,
) -> Result<app::approvals::Decide, ApiError> {
    op.caller.require(scopes::APPROVALS_READ)?;
    let approval = ApprovalId::parse(id).map_err(|_| ApiError::not_found("approval"))?;
    Ok(app::approvals::Decide {
        approval,
        decision: if approve {
            Decision::Approve
        } else {
            Decision::Deny
        },
        note: optional(form, "note").map(str::to_string),
        // The inbox's form carries the input fingerprint the operator was shown: an approval
        // whose input an approver edited since is refused, not approved unseen.
        seen: optional(form, "inputFingerprint").map(str::to_string),
    })
}
