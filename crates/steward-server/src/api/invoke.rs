//! `actions/{ref}/invoke` over HTTP: authenticate and read in one (`app::invoke::authenticate`),
//! parse the body, invoke (`app::invoke::invoke`), and answer with the invocation as it stands.

use super::body;
use super::openapi as doc;
use super::{idempotent, views};
use crate::app::warnings::Warning;
use crate::app::{self, invoke::Invoke};
use crate::error::{ApiError, ApiResult};
use crate::progress::Progress;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Map, Value};
use steward_core::{EffectState, IdempotencyKey, InvocationId, OperationKey, PreviewId};
use steward_store::{EffectLinks, HoldRecord, InvocationRecord};
use steward_wire::Text;

/// The invoke request in `bytes`, as `POST /actions/{reference}/invoke` takes it.
fn parse(idempotency_key: Option<IdempotencyKey>, bytes: &Bytes) -> ApiResult<Invoke> {
    let given: doc::InvokeBody = body::parse(bytes)?;
    let text = |t: Option<Text>| t.map(Text::into_string);
    let retry_of = text(given.retry_of)
        .map(|r| {
            InvocationId::parse(&r)
                .map_err(|_| ApiError::validation("retryOf", "must be an invocation id (inv_...)"))
        })
        .transpose()?;
    let operation_key = text(given.operation_key)
        .map(|k| {
            OperationKey::parse(&k).map_err(|e| ApiError::validation("operationKey", e.to_string()))
        })
        .transpose()?;
    let run_id = text(given.run_id);
    let parent_span_id = parent_span_id(text(given.parent_span_id), run_id.is_some())?;
    let preview = text(given.preview_id)
        .map(|id| {
            PreviewId::parse(&id)
                .map_err(|_| ApiError::validation("previewId", "must be a preview id (prv_...)"))
        })
        .transpose()?;
    Ok(Invoke {
        // Any JSON value: whether it must be an object depends on the action (`check`).
        input: given.input.unwrap_or_else(|| Value::Object(Map::new())),
        run_id,
        parent_span_id,
        retry_of,
        operation_key,
        idempotency_key,
        links: EffectLinks {
            preview,
            ..super::links::parse(given.depends_on, text(given.compensates))?
        },
    })
}

/// `parentSpanId`: the span of the run the invocation is made under, shaped as a span id.
/// It needs a `runId`, and is kept for the run's timeline only: it is not part of the request's
/// fingerprint and decides nothing.
fn parent_span_id(id: Option<String>, has_run: bool) -> ApiResult<Option<String>> {
    let Some(id) = id else {
        return Ok(None);
    };
    if !has_run {
        return Err(ApiError::validation("parentSpanId", "needs a runId"));
    }
    let max = super::runs::parse::SPAN_ID_BYTES_MAX;
    let fits = !id.is_empty()
        && id.len() <= max
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if !fits {
        return Err(ApiError::validation(
            "parentSpanId",
            format!("must be 1 to {max} letters, digits, `_`, `-`, `.` or `:`"),
        ));
    }
    Ok(Some(id))
}

/// The invoke's answer: 202 while the invocation waits (for approval, or parked by a hold, with
/// `held`), 200 otherwise.
fn answer(
    inv: &InvocationRecord,
    hold: Option<&HoldRecord>,
    replayed: bool,
    warnings: &[Warning],
) -> Response {
    let status = if inv.state == EffectState::AwaitingApproval || hold.is_some() {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    let response = crate::envelope::warned(
        status,
        views::with_hold(views::invocation(inv), hold),
        super::warnings::wire(warnings),
    );
    if replayed {
        idempotent::replayed(response)
    } else {
        response
    }
}

#[utoipa::path(
    post,
    path = "/actions/{reference}/invoke",
    operation_id = "invoke_invoke",
    tag = "invocations",
    params(doc::ActionPath, doc::IdempotencyHeader),
    request_body = doc::InvokeBody,
    responses(
        (status = 200, description = "the invocation as it stands after dispatch", body = doc::Single<doc::Invocation>),
        (status = 202, description = "the invocation, waiting for approval, or parked by an operator's hold (`held`)", body = doc::Single<doc::Invocation>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
        doc::BudgetRefused,
    )
)]
pub async fn invoke(
    State(state): State<AppState>,
    Path(doc::ActionPath { reference }): Path<doc::ActionPath>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    let token_hash = crate::auth::token_hash(&headers)?;
    let idempotency_key = body::idempotency_key(&headers);
    let valid_key = idempotency_key.as_ref().ok().and_then(Option::as_ref);
    let (caller, context) =
        app::invoke::authenticate(&state, &token_hash, &reference, valid_key).await?;
    let request = parse(idempotency_key?, &bytes)?;
    if let Some(fake) = crate::selftest::acknowledgement_without_commit() {
        return Ok(fake);
    }
    let invoked = app::invoke::invoke(&state, &caller, context, request, Progress::none()).await?;
    let warnings: &[Warning] = if invoked.unkeyed {
        &[Warning::NoRequestKey]
    } else {
        &[]
    };
    // The invocation is recorded: a failed read of the holds leaves `held` out rather than
    // answering an error for a recorded invoke.
    let hold = app::holds::holding(&state, &invoked.invocation)
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e.message, "could not read the holds for the answer");
            None
        });
    Ok(answer(
        &invoked.invocation,
        hold.as_ref(),
        invoked.replayed,
        warnings,
    ))
}
