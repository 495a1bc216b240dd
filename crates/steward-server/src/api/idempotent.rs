//! `Idempotency-Key` for write endpoints other than invoke: the first answer is recorded; the same
//! key with the same request replays it; a different request is refused; a concurrent one waits
//! its turn with 409. Keys are scoped to the calling API key: another key's request with the
//! same header value is a separate request.

use super::body::idempotency_key;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::future::Future;
use steward_core::fingerprint;
use steward_store::IdempotencyBegin;
use steward_wire::Single;

pub const REPLAYED: &str = "idempotent-replayed";

pub fn replayed(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(REPLAYED, HeaderValue::from_static("true"));
    response
}

pub use crate::app::idempotency::{in_progress, reused};

/// Runs `work` at most once per idempotency key. `request` identifies the request (method, path
/// and body); only its fingerprint is stored.
pub async fn run<F, Fut, T>(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    request: Value,
    work: F,
) -> ApiResult<Response>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ApiResult<(StatusCode, T)>>,
    T: serde::Serialize,
{
    run_matching(state, caller, headers, request, &[], work).await
}

/// `run` for deleting the record `id` names: the request is `{"op": op, "id": id}`, `remove`
/// deletes it (or says why not), and the answer is `{"id", "deleted": true}`. The caller checks
/// the scope first, so that a key without it is refused before any replay.
pub async fn delete<F, Fut>(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    op: &str,
    id: &str,
    remove: F,
) -> ApiResult<Response>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = crate::app::Result<()>>,
{
    let request = json!({"op": op, "id": id});
    run(state, caller, headers, request, || async {
        remove().await?;
        Ok((StatusCode::OK, steward_wire::Deleted::new(id)))
    })
    .await
}

/// `run`, where the same request may also have been recorded as one of `earlier_forms` (by an
/// earlier Steward that described it differently, e.g. with an older `Vault::tag`): a resend
/// that matches one of them replays it instead of being refused. New records use `request`.
pub async fn run_matching<F, Fut, T>(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    request: Value,
    earlier_forms: &[Value],
    work: F,
) -> ApiResult<Response>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ApiResult<(StatusCode, T)>>,
    T: serde::Serialize,
{
    let work = || async {
        work()
            .await
            .map(|(status, data)| (status, Single::new(data)))
    };
    run_enveloped(state, caller, headers, request, earlier_forms, work).await
}

/// `run`, where the answer carries `warnings` beside its record (`Single::warned`); a replay
/// answers them again, as recorded.
pub async fn run_warned<F, Fut, T>(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    request: Value,
    work: F,
) -> ApiResult<Response>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ApiResult<(StatusCode, T, Vec<steward_wire::Warning>)>>,
    T: serde::Serialize,
{
    let work = || async {
        work()
            .await
            .map(|(status, data, warnings)| (status, Single::warned(data, warnings)))
    };
    run_enveloped(state, caller, headers, request, &[], work).await
}

/// `run_matching` over an answer already in its envelope.
async fn run_enveloped<F, Fut, T>(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    request: Value,
    earlier_forms: &[Value],
    work: F,
) -> ApiResult<Response>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ApiResult<(StatusCode, Single<T>)>>,
    T: serde::Serialize,
{
    let envelope =
        |status: StatusCode, answer: Single<T>| (status, axum::Json(answer)).into_response();
    let Some(key) = idempotency_key(headers)? else {
        return work()
            .await
            .map(|(status, answer)| envelope(status, answer));
    };
    let (env, sender) = (&caller.env.id, &caller.key.id);
    let now = state.clock.now();
    let mut begun = IdempotencyBegin::Mismatch;
    // A mismatch writes nothing, so trying the next form is safe; the first form that is not
    // a mismatch decides (with no record yet, the current form begins one).
    for form in std::iter::once(&request).chain(earlier_forms) {
        begun = state
            .store
            .idempotency_begin(env, sender, &key, &fingerprint(form), now, &state.replica)
            .await?;
        if !matches!(begun, IdempotencyBegin::Mismatch) {
            break;
        }
    }
    match begun {
        IdempotencyBegin::Begun => {}
        IdempotencyBegin::Replay { status, body } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            return Ok(replayed((status, axum::Json(body)).into_response()));
        }
        IdempotencyBegin::InProgress => return Err(in_progress()),
        IdempotencyBegin::Mismatch => return Err(reused()),
    }
    match work().await {
        Ok((status, answer)) => {
            // The answer as stored is the answer sent, so a replay is the same bytes.
            let body = serde_json::to_value(answer)
                .map_err(|e| ApiError::internal("an answer to record for replay", &e))?;
            // The work is committed (it may have sent something): its answer is the truth
            // even when its replay record could not be written; a storage error here would
            // tell the caller that nothing changed (or, with a lost COMMIT answer, that
            // nothing was sent), which is false.
            let finished = state
                .store
                .idempotency_finish(env, sender, &key, status.as_u16(), &body, now)
                .await;
            unrecorded_replay(finished);
            Ok((status, axum::Json(body)).into_response())
        }
        Err(err) if err.status.is_client_error() => {
            let finished = state
                .store
                .idempotency_finish(env, sender, &key, err.status.as_u16(), &err.body(), now)
                .await;
            unrecorded_replay(finished);
            Err(err)
        }
        Err(err) => {
            if let Err(e) = state.store.idempotency_abandon(env, sender, &key).await {
                tracing::error!(error = %e, "could not release an idempotency key after a failed request");
            }
            Err(err)
        }
    }
}

/// Logs a replay record that could not be written after the request's own work was done: the
/// answer still goes out, and a resend under the key is answered `in progress` (never run
/// again) until the record is released.
fn unrecorded_replay(finished: steward_store::StoreResult<()>) {
    if let Err(e) = finished {
        tracing::error!(error = %e, "the answer was not recorded for replay under its Idempotency-Key; it is answered anyway");
    }
}
