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

/// The most approvals one batch decides: the inbox's page.
const BATCH_DECISIONS_MAX: usize = 200;

/// Approve or deny the approvals selected in the inbox, with one note: each is its own
/// decision (`app::approvals::decide`, separation of duties checked for each), in the order
/// selected, and the overview then lists what each came to. One refused does not stop the
/// others.
pub async fn batch(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Form(form): Form<Vec<(String, String)>>,
) -> Response {
    let refused = |e| overview::render(&state, mode, &op, Notice::refused(e));
    let field = |name: &str| {
        form.iter()
            .find(|(k, v)| k == name && !v.trim().is_empty())
            .map(|(_, v)| v.clone())
    };
    let approve = match field("decision").as_deref() {
        Some("approve") => true,
        Some("deny") => false,
        _ => {
            return refused(ApiError::validation("decision", "must be approve or deny")).await;
        }
    };
    let ids: Vec<&str> = form
        .iter()
        .filter(|(k, _)| k == "ids")
        .map(|(_, v)| v.as_str())
        .collect();
    if ids.is_empty() {
        return refused(ApiError::validation("ids", "select at least one approval")).await;
    }
    if ids.len() > BATCH_DECISIONS_MAX {
        return refused(ApiError::validation(
            "ids",
            format!("at most {BATCH_DECISIONS_MAX} approvals at once"),
        ))
        .await;
    }
    let mut note = HashMap::new();
    if let Some(n) = field("note") {
        note.insert("note".to_string(), n);
    }
    let mut outcomes = Vec::with_capacity(ids.len());
    for id in ids {
        let decided = match decision(&op, id, &note, approve) {
            Ok(decide) => app::approvals::decide(&state, &op.caller, decide).await,
            Err(e) => Err(e),
        };
        let outcome = match decided {
            Ok(decided) => match (decided.unchanged, decided.invocation) {
                (Some(reason), _) => {
                    let e = reason.error();
                    format!("not counted: {} ({})", e.message, e.code)
                }
                (None, Some(inv)) => format!(
                    "{}; invocation {} is {}",
                    decided.approval.status.as_str(),
                    inv.id,
                    inv.state.invocation_status().as_str()
                ),
                (None, None) => decided.approval.status.as_str().to_string(),
            },
            Err(e) => format!("refused: {} ({})", e.message, e.code),
        };
        outcomes.push((id.to_string(), outcome));
    }
    let notice = Notice {
        batch: outcomes,
        ..Notice::default()
    };
    overview::render(&state, mode, &op, notice).await
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
