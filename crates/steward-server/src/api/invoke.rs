//! `actions/{ref}/invoke` over HTTP: authenticate and read in one (`app::invoke::authenticate`),
//! parse the body, invoke (`app::invoke::invoke`), and answer with the invocation as it stands.

use super::body::{self, only_known, optional_string};
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
use serde_json::{json, Value};
use steward_core::{EffectState, IdempotencyKey, InvocationId, OperationKey, PreviewId};
use steward_store::{EffectLinks, InvocationRecord};

pub(super) const FIELDS: [&str; 8] = [
    "input",
    "runId",
    "parentSpanId",
    "retryOf",
    "operationKey",
    "previewId",
    "dependsOn",
    "compensates",
];
/// The invoke request in `bytes`, as `POST /actions/{reference}/invoke` takes it.
fn parse(idempotency_key: Option<IdempotencyKey>, bytes: &Bytes) -> ApiResult<Invoke> {
    let map = body::object(bytes)?;
    only_known(&map, &FIELDS)?;
    // Any JSON value: whether it must be an object depends on the action (`check`).
    let input = match map.get("input") {
        None | Some(Value::Null) => json!({}),
        Some(v) => v.clone(),
    };
    let retry_of = optional_string(&map, "retryOf")?
        .map(|r| {
            InvocationId::parse(&r)
                .map_err(|_| ApiError::validation("retryOf", "must be an invocation id (inv_...)"))
        })
        .transpose()?;
    let operation_key = optional_string(&map, "operationKey")?
        .map(|k| {
            OperationKey::parse(&k).map_err(|e| ApiError::validation("operationKey", e.to_string()))
        })
        .transpose()?;
    Ok(Invoke {
        input,
        run_id: optional_string(&map, "runId")?,
        parent_span_id: parent_span_id(&map)?,
        retry_of,
        operation_key,
        idempotency_key,
        links: EffectLinks {
            preview: optional_string(&map, "previewId")?
                .map(|id| {
                    PreviewId::parse(&id).map_err(|_| {
                        ApiError::validation("previewId", "must be a preview id (prv_...)")
                    })
                })
                .transpose()?,
            ..super::links::parse(&map)?
        },
    })
}

/// `parentSpanId`: the span of the run the invocation is made under, shaped as a span id.
/// It needs a `runId`, and is kept for the run's timeline only: it is not part of the request's
/// fingerprint and decides nothing.
fn parent_span_id(map: &serde_json::Map<String, Value>) -> ApiResult<Option<String>> {
    let Some(id) = optional_string(map, "parentSpanId")? else {
        return Ok(None);
    };
    if map.get("runId").is_none_or(Value::is_null) {
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

fn answer(inv: &InvocationRecord, replayed: bool, warnings: &[Warning]) -> Response {
    let status = if inv.state == EffectState::AwaitingApproval {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    let response = crate::envelope::warned(
        status,
        views::invocation(inv),
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
        (status = 202, description = "the invocation, waiting for approval", body = doc::Single<doc::Invocation>),
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
    Path(reference): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    let token_hash = crate::auth::token_hash(&headers)?;
    let idempotency_key = body::idempotency_key(&headers);
    let valid_key = idempotency_key.as_ref().ok().and_then(Option::as_ref);
    let (caller, context) =
        app::invoke::authenticate(&state, &token_hash, &reference, valid_key).await?;
    let request = parse(idempotency_key?, &bytes)?;
    let invoked = app::invoke::invoke(&state, &caller, context, request, Progress::none()).await?;
    let warnings: &[Warning] = if invoked.unkeyed {
        &[Warning::NoRequestKey]
    } else {
        &[]
    };
    Ok(answer(&invoked.invocation, invoked.replayed, warnings))
}
