//! The read views: actions and policies with their version history, impact limits with their
//! current usage and exposure, and the environment's keys. Everything but the keys comes from
//! the API's own handlers; no view shows a secret value (the API never returns one) or a key's
//! hash.

use super::bridge::{data, items, query};
use super::layout::{self, json_text, text};
use super::session::Operator;
use super::ConsoleMode;
use crate::api::{actions, limits, policies};
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use maud::{html, Markup};
use serde_json::Value;

fn shown(
    title: &str,
    op: &Operator,
    mode: ConsoleMode,
    answer: Result<Markup, ApiError>,
) -> Response {
    match answer {
        Ok(body) => layout::html(StatusCode::OK, layout::page(title, Some(op), mode, body)),
        Err(e) => layout::error_page(&e),
    }
}

/// A record's full JSON, folded away under its summary row.
fn raw(value: &Value) -> Markup {
    html! { details { summary { "record" } pre { (json_text(value)) } } }
}

fn field(value: &Value, name: &str) -> String {
    match value.get(name) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

pub async fn actions(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
) -> Response {
    let answer = data(actions::list(State(state.clone()), op.caller.clone()).await).await;
    let body = answer.map(|list| {
        html! {
            table #actions {
                tr { th { "Action" } th { "Description" } th { "Version" } th { "Enabled" } th { "Requires approval" } th { "" } }
                @for a in items(&list) {
                    tr {
                        td { a href={ "/console/actions/" (text(a, "id")) } { (text(a, "name")) } }
                        td.description { (text(a, "description")) }
                        td { (field(a, "version")) }
                        td { (field(a, "enabled")) }
                        td { (field(a, "requiresApproval")) }
                        td { (raw(a)) }
                    }
                }
            }
        }
    });
    shown("Actions", &op, mode, body)
}

pub async fn action(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Path(id): Path<String>,
) -> Response {
    let current =
        data(actions::get(State(state.clone()), op.caller.clone(), Path(id.clone())).await).await;
    let versions =
        data(actions::versions(State(state.clone()), op.caller.clone(), Path(id)).await).await;
    let body = current.and_then(|a| {
        let versions = versions?;
        Ok(html! {
            p.description { (text(&a, "description")) }
            pre { (json_text(&a)) }
            (version_history(&versions))
        })
    });
    shown("Action", &op, mode, body)
}

/// The version history of an action or a policy, newest first as the API lists it.
fn version_history(versions: &Value) -> Markup {
    html! {
        h2 { "Version history" }
        table #versions {
            tr { th { "Version" } th { "Recorded" } th { "Record" } }
            @for v in items(versions) {
                tr { td { (field(v, "version")) } td { (field(v, "createdAt")) } td { (raw(v)) } }
            }
        }
    }
}

pub async fn policies(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
) -> Response {
    let answer = match query("") {
        Ok(q) => data(policies::list(State(state.clone()), op.caller.clone(), q).await).await,
        Err(e) => Err(e),
    };
    let body = answer.map(|list| {
        html! {
            table #policies {
                tr { th { "Policy" } th { "Effect" } th { "Priority" } th { "Enabled" } th { "Version" } th { "" } }
                @for p in items(&list) {
                    tr {
                        td { a href={ "/console/policies/" (text(p, "id")) } { (text(p, "name")) } }
                        td { (field(p, "effect")) }
                        td { (field(p, "priority")) }
                        td { (field(p, "enabled")) }
                        td { (field(p, "version")) }
                        td { (raw(p)) }
                    }
                }
            }
        }
    });
    shown("Approval policies", &op, mode, body)
}

pub async fn policy(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Path(id): Path<String>,
) -> Response {
    let current =
        data(policies::get(State(state.clone()), op.caller.clone(), Path(id.clone())).await).await;
    let versions = match query("") {
        Ok(q) => {
            data(policies::versions(State(state.clone()), op.caller.clone(), Path(id), q).await)
                .await
        }
        Err(e) => Err(e),
    };
    let body = current.and_then(|p| {
        let versions = versions?;
        Ok(html! {
            pre { (json_text(&p)) }
            (version_history(&versions))
        })
    });
    shown("Approval policy", &op, mode, body)
}

pub async fn limits(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
) -> Response {
    let answer = match query("") {
        Ok(q) => data(limits::list(State(state.clone()), op.caller.clone(), q).await).await,
        Err(e) => Err(e),
    };
    let body = answer.map(|list| {
        html! {
            table #limits {
                tr { th { "Limit" } th { "Window" } th { "Max" } th { "Consumed" } th { "Reserved" } th { "Unknown exposure" } th { "Available" } th { "" } }
                @for l in items(&list) {
                    tr {
                        td { (text(l, "name")) }
                        td { (field(l, "window")) " from " (field(l, "windowStart")) }
                        td { (field(l, "max")) }
                        td { (field(l, "consumed")) }
                        td { (field(l, "reserved")) }
                        td { (field(l, "unknownExposure")) }
                        td { (field(l, "available")) }
                        td { (raw(l)) }
                    }
                }
            }
        }
    });
    shown("Impact limits", &op, mode, body)
}

/// The environment's keys (`app::keys::list`): names, ids, scopes and lifecycle, never a
/// hash. Needs `audit:read`: the audit log already names every key with its scopes.
/// Revocation stays with `steward keys revoke`: the API has no key-administration scope to
/// hand to a browser.
pub async fn keys(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
) -> Response {
    let answer = crate::app::keys::list(&state, &op.caller).await;
    let body = answer.map(|keys| {
        html! {
            p.muted { "Keys are created, rotated and revoked with " code { "steward keys" } "; revoking a key ends its console sessions at once." }
            table #keys {
                tr { th { "Key" } th { "Scopes" } th { "Created" } th { "Expires" } th { "Revoked" } th { "Last used" } th { "Usable" } }
                @for k in &keys {
                    tr {
                        td { (k.name) br; span.muted { (k.id) } }
                        td { (k.scopes.join(", ")) }
                        td { (k.created_at.to_rfc3339()) }
                        td { (k.expires_at.map(|t| t.to_rfc3339()).unwrap_or_default()) }
                        td { (k.revoked_at.map(|t| t.to_rfc3339()).unwrap_or_default()) }
                        td { (k.last_used_at.map(|t| t.to_rfc3339()).unwrap_or_default()) }
                        td { (if k.usable { "yes" } else { "no" }) }
                    }
                }
            }
        }
    });
    shown("Keys", &op, mode, body)
}
