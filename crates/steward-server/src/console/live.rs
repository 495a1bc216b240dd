//! Live pages: a page marked live (`layout::live_page`) refreshes its `main` in place when
//! something happens in the environment, without a reload and without losing what the
//! operator is typing.
//!
//! Two routes. `GET /console/live.js` (`layout::LIVE_SCRIPT_PATH`) is the console's one script
//! (a static file; the `Content-Security-Policy` allows scripts from this origin only, never
//! inline). `GET /console/events` is a Server-Sent Events stream for the signed-in session: one
//! `event: change` frame (its data the public event types, nothing else of the events) whenever
//! the environment's sealed log gains public events, read as `GET /api/v2/stream` reads them
//! (`events::Feed`). The script answers a change by fetching the same page again and putting its
//! `main` in place of the old one.
//!
//! The stream is a long-lived request, so the session is checked again for as long as it is
//! open: before every change is sent, and at least every [`SESSION_RECHECK_INTERVAL_MS`]. When
//! the session is over (signed out, expired, its key revoked or expired or no longer able to
//! decide approvals), the stream sends `event: closed` and ends; the script then reloads the
//! page, which asks for sign-in. Each open stream takes one of the key's stream slots
//! (`STREAM_CONNECTIONS_PER_KEY_MAX`, shared with the API's stream).

use super::layout;
use super::session::{self, Operator};
use crate::events::Feed;
use crate::state::AppState;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::convert::Infallible;
use std::time::Duration;
use steward_core::scopes;
use tokio::sync::mpsc;

/// How often an open console stream re-reads its session, in milliseconds: as often as the
/// API's stream re-reads its key (`KEY_RECHECK_INTERVAL_MS`), so signing out or revoking the
/// key ends it within a second or two.
pub const SESSION_RECHECK_INTERVAL_MS: u64 = crate::auth::KEY_RECHECK_INTERVAL_MS;

/// How often a caught-up console stream reads the sealed log again, in milliseconds: the API
/// stream's own interval, so a change shows within about half a second of its commit.
const POLL_INTERVAL_MS: u64 = crate::api::stream::STREAM_POLL_INTERVAL_MS;

/// How often an idle stream sends a comment line, in milliseconds: under common proxies' idle
/// timeouts, and often enough that a stream whose browser went away is noticed (its write
/// fails) and its slot given back within seconds.
const HEARTBEAT_INTERVAL_MS: u64 = 5_000;

/// How many distinct event types one change frame names at most.
const CHANGE_TYPES_MAX: usize = 16;

/// Frames waiting for a slow browser, at most.
const BUFFER_FRAMES: usize = 16;

/// The script, as served. It is plain text in this file, so the binary carries it.
const SCRIPT: &str = include_str!("live.js");

type Slot = crate::per_key::PerKeySlot<{ crate::per_key::STREAM_CONNECTIONS_PER_KEY_MAX }>;

/// `GET /console/live.js`.
pub async fn script() -> Response {
    let mut response = (StatusCode::OK, SCRIPT).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/javascript; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// `GET /console/events` (see the module documentation).
pub async fn events(State(state): State<AppState>, op: Operator) -> Response {
    if let Err(e) = op.caller.require(scopes::ACTIONS_READ) {
        return layout::error_page(&e);
    }
    let head = match state.store.audit_head().await {
        Ok(head) => head.seq,
        Err(e) => return layout::error_page(&crate::error::ApiError::from(e)),
    };
    let Some(slot) = state.stream_slots.take(op.caller.key.id.as_str()) else {
        return layout::message_page(
            StatusCode::TOO_MANY_REQUESTS,
            "Too many live pages",
            "this key already holds the most open streams a key may; close a console tab",
        );
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(BUFFER_FRAMES);
    let feed = Feed {
        env: op.caller.env.id.to_string(),
        cursor: head,
    };
    tokio::spawn(pump(state, op.token_hash, feed, tx, slot));
    let mut response = (
        StatusCode::OK,
        Body::from_stream(crate::api::stream::Frames(rx)),
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Reads the log and sends change frames until the browser goes away or the session is over;
/// then gives the slot back.
async fn pump(
    state: AppState,
    token_hash: String,
    mut feed: Feed,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
    _slot: Slot,
) {
    if tx.send(Ok(frame("ready", &json!({})))).await.is_err() {
        return;
    }
    let heartbeat = Duration::from_millis(HEARTBEAT_INTERVAL_MS);
    let recheck = Duration::from_millis(SESSION_RECHECK_INTERVAL_MS);
    let mut last_frame = tokio::time::Instant::now();
    let mut last_check = tokio::time::Instant::now();
    loop {
        let before = feed.cursor;
        match feed.next(&*state.store).await {
            Ok(events) => {
                // Read after the events: a session over before they were committed is seen
                // over here, and they are not announced.
                if !events.is_empty() || last_check.elapsed() >= recheck {
                    last_check = tokio::time::Instant::now();
                    if !session::is_live(&state, &token_hash).await {
                        let _ = tx
                            .send(Ok(frame("closed", &json!({"reason": "session_over"}))))
                            .await;
                        return;
                    }
                }
                if !events.is_empty() {
                    let types = change_types(events.iter().map(|(_, e)| &e["type"]));
                    if tx
                        .send(Ok(frame("change", &json!({ "types": types }))))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    last_frame = tokio::time::Instant::now();
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "the console stream could not read the log; retrying")
            }
        }
        if last_frame.elapsed() >= heartbeat {
            if tx
                .send(Ok(Bytes::from_static(b": heartbeat\n\n")))
                .await
                .is_err()
            {
                return;
            }
            last_frame = tokio::time::Instant::now();
        }
        if feed.cursor == before {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(POLL_INTERVAL_MS)) => {}
                _ = tx.closed() => return,
            }
        }
    }
}

/// The distinct event types of a batch, in order, at most [`CHANGE_TYPES_MAX`].
fn change_types<'a>(types: impl Iterator<Item = &'a serde_json::Value>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in types.filter_map(serde_json::Value::as_str) {
        if out.len() == CHANGE_TYPES_MAX {
            break;
        }
        if !out.iter().any(|seen| seen == t) {
            out.push(t.to_string());
        }
    }
    out
}

/// One SSE frame without an id (a reconnecting page refreshes once instead of resuming).
fn frame(event: &str, data: &serde_json::Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_names_each_type_once_and_at_most_the_bound() {
        let events: Vec<serde_json::Value> =
            ["a", "b", "a", "c"].iter().map(|t| json!(t)).collect();
        assert_eq!(change_types(events.iter()), vec!["a", "b", "c"]);
        let many: Vec<serde_json::Value> = (0..100).map(|i| json!(format!("t{i}"))).collect();
        assert_eq!(change_types(many.iter()).len(), CHANGE_TYPES_MAX);
    }

    #[test]
    fn a_frame_is_an_sse_block_without_an_id() {
        let f = frame("change", &json!({"types": ["approval.requested"]}));
        assert_eq!(
            &f[..],
            b"event: change\ndata: {\"types\":[\"approval.requested\"]}\n\n"
        );
    }

    #[test]
    fn the_script_uses_no_inline_handlers_eval_or_inner_html() {
        for forbidden in [
            "eval(",
            "innerHTML",
            "new Function",
            "document.write",
            "onclick",
        ] {
            assert!(!SCRIPT.contains(forbidden), "{forbidden}");
        }
        assert!(SCRIPT.contains("/console/events"));
    }
}
