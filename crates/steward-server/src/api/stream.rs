//! `GET /stream`: the live event stream of the key's environment, as Server-Sent Events.
//!
//! Events are the environment's public events in the sealed audit log (`events/`), in `seq`
//! order; each frame's `id:` is the event id (`evt_<seq>`). A client that reconnects with
//! `Last-Event-ID` gets every event after it exactly once, on any replica and after a restart,
//! because the ids are the log's own durable, gap-free sequence. Without `Last-Event-ID` the
//! stream starts at the log's head: only what is sealed from then on.
//!
//! Frames: `event: ready` first (its id the starting position), then one frame per event
//! (`event: <type>`, `data:` the event as JSON), and `event: heartbeat` every
//! [`STREAM_HEARTBEAT_INTERVAL_MS`] carrying the position scanned so far as its id, so a resume
//! skips what was already filtered out.
//!
//! The key is checked at connect and then again for as long as the stream is open
//! ([`KeyWatch`]): before every batch of events is sent, and at least every
//! [`KEY_RECHECK_INTERVAL_MS`] while none arrive. When it no longer authenticates (revoked,
//! expired, or rotated out at the end of the overlap), the stream sends one last frame,
//! `event: closed` with `data: {"type": "closed", "reason": "key_revoked" | "key_expired" |
//! "key_missing" | "key_unverified", "message": ...}` and no `id:`, and ends. No event read after the key
//! stopped authenticating is sent, so nothing committed after a revocation reaches the client.

use super::openapi as doc;
use crate::auth::{Caller, KeyEnd, KeyWatch, KEY_RECHECK_INTERVAL_MS};
use crate::error::{codes, ApiError, ApiResult};
use crate::events::{event_id, parse_event_id, Feed};
use crate::state::AppState;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::convert::Infallible;
use std::time::Duration;
use steward_core::scopes;
use tokio::sync::mpsc;
use utoipa::IntoParams;

/// How often a caught-up stream reads the sealed log again, in milliseconds. The sealer seals
/// every 200 ms (`AUDIT_SEAL_INTERVAL_MS`), so an event reaches a client within about half a
/// second of its commit; polling the store works alike on SQLite and across replicas.
pub const STREAM_POLL_INTERVAL_MS: u64 = 250;

/// How often a stream sends a heartbeat frame, in milliseconds: well under the idle timeouts of
/// common proxies (60 s), so they keep the connection open.
pub const STREAM_HEARTBEAT_INTERVAL_MS: u64 = 15_000;

pub use crate::per_key::STREAM_CONNECTIONS_PER_KEY_MAX;

/// How many frames wait for a slow client before the stream stops reading the log, in frames.
const STREAM_BUFFER_FRAMES: usize = 64;

/// One open stream's place in [`crate::per_key::StreamSlots`], given back when the stream ends.
type Slot = crate::per_key::PerKeySlot<STREAM_CONNECTIONS_PER_KEY_MAX>;

/// The resume point of a reconnecting stream.
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // Documents the header; the handler reads it from the map.
pub struct LastEventIdHeader {
    /// The id of the last event received (`evt_<seq>`, or the `id:` of any frame); the stream
    /// resumes right after it.
    #[param(rename = "Last-Event-ID", max_length = 64)]
    last_event_id: Option<String>,
}

#[utoipa::path(
    get,
    path = "/stream",
    operation_id = "stream",
    tag = "events",
    params(LastEventIdHeader),
    responses(
        (status = 200, description = "Server-Sent Events: `ready`, then one frame per event of the key's environment (`id: evt_<seq>`, `event: <type>`, `data: <event JSON>`), and heartbeats. The key is checked again every second while the stream is open: within about two seconds of it being revoked, expiring or being rotated out, the stream sends `event: closed` (no `id:`) with `data: {\"type\": \"closed\", \"reason\": \"key_revoked\" | \"key_expired\" | \"key_missing\" | \"key_unverified\", \"message\": ...}` and ends; nothing committed after the revocation is sent", content_type = "text/event-stream", body = String),
        doc::Guarded,
        doc::Invalid,
        (status = 429, description = "the key already holds the most streams a key may (`RATE_LIMIT_EXCEEDED`)", body = doc::ErrorEnvelope),
    )
)]
pub async fn stream(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_READ)?;
    let head = state.store.audit_head().await?.seq;
    let cursor = match headers.get("last-event-id") {
        None => head,
        Some(value) => {
            let seq = value
                .to_str()
                .ok()
                .and_then(parse_event_id)
                .ok_or_else(|| {
                    ApiError::validation("Last-Event-ID", "must be an event id (evt_<number>)")
                })?;
            if seq > head {
                return Err(ApiError::validation(
                    "Last-Event-ID",
                    format!("names no event yet: the newest is {}", event_id(head)),
                ));
            }
            seq
        }
    };
    let slot = state
        .stream_slots
        .take(caller.key.id.as_str())
        .ok_or_else(|| {
            ApiError::of(
                codes::RATE_LIMIT_EXCEEDED,
                format!("this key already holds {STREAM_CONNECTIONS_PER_KEY_MAX} open streams"),
            )
        })?;
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(STREAM_BUFFER_FRAMES);
    let feed = Feed {
        env: caller.env.id.to_string(),
        cursor,
    };
    let watch = KeyWatch::new(&state, &caller);
    tokio::spawn(pump(state, feed, watch, tx, slot));
    let body = Body::from_stream(Frames(rx));
    let mut response = (StatusCode::OK, body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}

/// Reads the log and sends frames until the client goes away or the key stops authenticating;
/// then gives the slot back.
async fn pump(
    state: AppState,
    mut feed: Feed,
    watch: KeyWatch,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
    _slot: Slot,
) {
    let ready = json!({"cursor": event_id(feed.cursor), "environmentId": feed.env});
    // With the starting position as its id, so a client that reconnects before its first
    // event resumes from here, not from a later head.
    let start = Some(feed.cursor);
    if tx
        .send(Ok(frame(start, "ready", &ready.to_string())))
        .await
        .is_err()
    {
        return;
    }
    let heartbeat = Duration::from_millis(STREAM_HEARTBEAT_INTERVAL_MS);
    let recheck = Duration::from_millis(KEY_RECHECK_INTERVAL_MS);
    let mut last_frame = tokio::time::Instant::now();
    let mut last_check = tokio::time::Instant::now();
    loop {
        let before = feed.cursor;
        match feed.next(&*state.store).await {
            Ok(events) => {
                // Read after the events: a key revoked before they were committed is seen
                // revoked here, and they are not sent.
                if !events.is_empty() || last_check.elapsed() >= recheck {
                    last_check = tokio::time::Instant::now();
                    if let Some(end) = watch.check().await {
                        // The client may be gone already; the stream ends either way.
                        let _ = tx.send(Ok(closed(end))).await;
                        return;
                    }
                }
                for (seq, event) in events {
                    let kind = event["type"].as_str().unwrap_or("event").to_string();
                    let text = frame(Some(seq), &kind, &event.to_string());
                    if tx.send(Ok(text)).await.is_err() {
                        return;
                    }
                    last_frame = tokio::time::Instant::now();
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "the event stream could not read the log; retrying")
            }
        }
        if last_frame.elapsed() >= heartbeat {
            let beat = frame(Some(feed.cursor), "heartbeat", "{}");
            if tx.send(Ok(beat)).await.is_err() {
                return;
            }
            last_frame = tokio::time::Instant::now();
        }
        if feed.cursor == before {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(STREAM_POLL_INTERVAL_MS)) => {}
                _ = tx.closed() => return,
            }
        }
    }
}

/// One SSE frame. `data` is one line of JSON (serde_json escapes newlines).
fn frame(seq: Option<i64>, event: &str, data: &str) -> Bytes {
    let id = seq
        .map(|s| format!("id: {}\n", event_id(s)))
        .unwrap_or_default();
    Bytes::from(format!("{id}event: {event}\ndata: {data}\n\n"))
}

/// The last frame of a stream whose key stopped authenticating: no `id:`, so a client that
/// reconnects (with another key) resumes after the last event it was sent. Its data carries
/// `type` as every event's does, for clients (the SDK) that yield the data and read its type.
fn closed(end: KeyEnd) -> Bytes {
    let data = json!({"type": "closed", "reason": end.reason(), "message": end.message()});
    frame(None, "closed", &data.to_string())
}

/// The frames as the body's stream (the console's change stream sends its own through it too).
pub(crate) struct Frames(pub(crate) mpsc::Receiver<Result<Bytes, Infallible>>);

impl futures_core::Stream for Frames {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_at_most_its_streams_and_gets_them_back() {
        let slots = std::sync::Arc::new(crate::per_key::StreamSlots::default());
        let held: Vec<Slot> = (0..STREAM_CONNECTIONS_PER_KEY_MAX)
            .map(|_| slots.take("key_a").expect("a free slot"))
            .collect();
        assert!(slots.take("key_a").is_none());
        assert!(slots.take("key_b").is_some());
        drop(held);
        assert!(slots.take("key_a").is_some());
    }

    #[test]
    fn a_frame_is_an_sse_block() {
        let f = frame(Some(3), "run.started", "{\"a\":1}");
        assert_eq!(
            &f[..],
            b"id: evt_3\nevent: run.started\ndata: {\"a\":1}\n\n"
        );
        let f = frame(None, "ready", "{}");
        assert_eq!(&f[..], b"event: ready\ndata: {}\n\n");
    }

    #[test]
    fn the_closing_frame_names_the_reason_and_carries_no_id() {
        let f = String::from_utf8(closed(KeyEnd::Revoked).to_vec()).unwrap();
        let data = f
            .strip_prefix("event: closed\ndata: ")
            .and_then(|rest| rest.strip_suffix("\n\n"))
            .expect("one closed frame without an id");
        let data: serde_json::Value = serde_json::from_str(data).unwrap();
        assert_eq!(data["reason"], "key_revoked");
        assert_eq!(data["type"], "closed");
    }
}
