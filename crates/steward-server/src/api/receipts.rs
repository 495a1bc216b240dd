//! Signed receipts over HTTP (`docs/RECEIPTS.md`): an effect's latest receipt and all of them,
//! the environment's chain page by page, and the public keys (with any key here, and without one
//! at `/.well-known/steward-receipt-keys.json`, see `router.rs`). The logic is `app/receipts.rs`.

use super::openapi as doc;
use super::query::Query;
use crate::app;
use crate::auth::Caller;
use crate::envelope::ok;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use steward_store::{ReceiptKeyRecord, ReceiptRecord};

/// The receipt as it was signed. A stored receipt that does not read as one, or has no
/// signature, is a corrupt store (500), never a receipt with members left out.
fn view(record: &ReceiptRecord) -> ApiResult<steward_wire::Receipt> {
    let corrupt = |e: serde_json::Error| {
        ApiError::internal("a stored receipt does not read as a receipt", &e)
    };
    let receipt: steward_wire::Receipt =
        serde_json::from_value(record.body.clone()).map_err(corrupt)?;
    if receipt.signature.is_none() {
        return Err(corrupt(serde::de::Error::missing_field("signature")));
    }
    Ok(receipt)
}

fn views(records: &[ReceiptRecord]) -> ApiResult<Vec<steward_wire::Receipt>> {
    records.iter().map(view).collect()
}

/// The public keys, the newest (the one signing now) marked `current`.
pub(crate) fn key_views(keys: &[ReceiptKeyRecord]) -> Vec<steward_wire::ReceiptKey> {
    let last = keys.len().saturating_sub(1);
    keys.iter()
        .enumerate()
        .map(|(i, k)| steward_wire::ReceiptKey {
            key_id: k.id.clone(),
            algorithm: "Ed25519".into(),
            public_key: k.public_key.clone(),
            created_at: k.created_at.to_rfc3339(),
            current: i == last,
        })
        .collect()
}

#[utoipa::path(
    get,
    path = "/actions/effects/{id}/receipt",
    operation_id = "receipts_effect_latest",
    tag = "receipts",
    params(doc::IdPath),
    responses(
        (status = 200, description = "the receipt of the effect's latest settlement, as signed", body = doc::Single<steward_wire::Receipt>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn effect_receipt(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let found = app::receipts::latest_receipt(&state, &caller, &id).await?;
    Ok(ok(view(&found)?))
}

#[utoipa::path(
    get,
    path = "/actions/effects/{id}/receipts",
    operation_id = "receipts_effect_all",
    tag = "receipts",
    params(doc::IdPath),
    responses(
        (status = 200, description = "every receipt of the effect, one per settlement, oldest first", body = doc::List<steward_wire::Receipt>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn effect_receipts(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let found = app::receipts::effect_receipts(&state, &caller, &id).await?;
    Ok(ok(views(&found)?))
}

#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ChainQuery {
    /// Where to start: the `pagination.nextCursor` of the page before (a sequence number; the
    /// first page starts after 0).
    #[param(max_length = 20)]
    cursor: Option<String>,
    /// Page size: 1 to 200 (default 100); out-of-range values are clamped.
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
}

#[utoipa::path(
    get,
    path = "/receipts",
    operation_id = "receipts_chain",
    tag = "receipts",
    params(ChainQuery),
    responses(
        (status = 200, description = "a page of the environment's receipt chain, in sequence order", body = doc::CursorPage<steward_wire::Receipt>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn chain(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<ChainQuery>,
) -> ApiResult<Response> {
    let (page, limit, next) =
        app::receipts::chain(&state, &caller, q.cursor.as_deref(), q.limit).await?;
    let page = steward_wire::CursorPage::new(views(&page)?, limit, next);
    Ok((StatusCode::OK, axum::Json(page)).into_response())
}

#[utoipa::path(
    get,
    path = "/receipts/public-keys",
    operation_id = "receipts_public_keys",
    tag = "receipts",
    responses(
        (status = 200, description = "every receipt signing key's public half, oldest first; the last signs now", body = doc::List<steward_wire::ReceiptKey>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn public_keys(State(state): State<AppState>, _caller: Caller) -> ApiResult<Response> {
    let keys = app::receipts::public_keys(&state).await?;
    Ok(ok(key_views(&keys)))
}

/// The same answer without a key, at `/.well-known/steward-receipt-keys.json` (outside
/// `/api/v2`, so it is not an operation of the API document): public keys are not secret, and a
/// verifier should not need an account to fetch them.
pub async fn well_known_public_keys(State(state): State<AppState>) -> ApiResult<Response> {
    let keys = app::receipts::public_keys(&state).await?;
    Ok(ok(key_views(&keys)))
}
