//! Sign-in with an operator key, and sign-out. The key is checked as a bearer key is
//! (`Store::caller`: unknown, revoked or expired keys are refused), must hold
//! [`CONSOLE_SCOPE`] (an agent's or a read-only key is refused with a page that says so), and is
//! never stored, shown or logged; the browser gets a session token in a cookie, the store its
//! hash.

use super::layout;
use super::session::{self, Operator, CONSOLE_SCOPE, SESSION_LIFETIME_S};
use super::ConsoleMode;
use crate::error::ApiError;
use crate::keys::hash_token;
use crate::state::AppState;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Form};
use maud::html;
use std::collections::HashMap;
use steward_store::{Actor, ConsoleSessionRecord};

fn form(status: StatusCode, mode: ConsoleMode, refusal: Option<&str>) -> Response {
    let body = html! {
        @if let Some(refusal) = refusal { div.banner.error role="alert" { (refusal) } }
        form method="post" action="/console/login" {
            label { "Operator key " input type="password" name="key" autocomplete="off" size="70" required; }
            " " button type="submit" { "Sign in" }
        }
        p.muted { "Sign in with an operator key (" code { "steward keys create --role operator" } "). The key is checked on every page: revoking it ends the session." }
    };
    layout::html(status, layout::page("Sign in", None, mode, body))
}

pub async fn page(Extension(mode): Extension<ConsoleMode>) -> Response {
    form(StatusCode::OK, mode, None)
}

pub async fn sign_in(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    Form(fields): Form<HashMap<String, String>>,
) -> Response {
    let key = fields.get("key").map(|k| k.trim()).unwrap_or_default();
    let now = state.clock.now();
    let found = if key.is_empty() {
        Ok(None)
    } else {
        state.store.caller(&hash_token(key), now).await
    };
    let (key, env) = match found {
        Ok(Some(found)) => found,
        Ok(None) => {
            tracing::warn!("console sign-in refused: unknown, revoked or expired key");
            return form(
                StatusCode::UNAUTHORIZED,
                mode,
                Some("That key is not valid: it is unknown, revoked or expired."),
            );
        }
        Err(e) => return layout::error_page(&ApiError::from(e)),
    };
    if !key.scopes.iter().any(|s| s == CONSOLE_SCOPE) {
        tracing::warn!(key = %key.id, "console sign-in refused: the key cannot decide approvals");
        let refusal = format!(
            "This key cannot sign in to the console: it lacks the {CONSOLE_SCOPE} scope (agent and read-only keys do not hold it). Sign in with an operator key."
        );
        return form(StatusCode::FORBIDDEN, mode, Some(&refusal));
    }
    let token = session::new_token();
    let record = ConsoleSessionRecord {
        id: format!("ses_{}", crate::clock::unique().to_ascii_lowercase()),
        token_hash: hash_token(&token),
        key_id: key.id.clone(),
        env_id: env.id.clone(),
        created_at: now,
        expires_at: now.plus_ms(SESSION_LIFETIME_S * 1000),
    };
    if let Err(e) = state
        .store
        .create_console_session(&record, &Actor::key(&key.id, now))
        .await
    {
        return layout::error_page(&ApiError::from(e));
    }
    tracing::info!(key = %key.id, session = %record.id, "console session started");
    let mut answer = layout::see_other("/console/");
    answer.headers_mut().insert(
        header::SET_COOKIE,
        session::cookie(&token, SESSION_LIFETIME_S),
    );
    answer
}

pub async fn sign_out(State(state): State<AppState>, op: Operator) -> Response {
    let actor = Actor::key(&op.caller.key.id, state.clock.now());
    if let Err(e) = state
        .store
        .end_console_session(&op.token_hash, &actor)
        .await
    {
        return layout::error_page(&ApiError::from(e)).into_response();
    }
    tracing::info!(session = %op.session.id, "console session ended");
    let mut answer = layout::see_other("/console/login");
    answer
        .headers_mut()
        .insert(header::SET_COOKIE, session::cleared_cookie());
    answer
}
