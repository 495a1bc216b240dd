//! Reading signed receipts (issue #29, item 3): an effect's receipts, an environment's chain
//! page by page, and the public keys that verify them. Receipts are written by the issuer
//! (`receipts/issuer.rs`), never here.

use super::{Error, Principal, Result};
use crate::error::codes;
use crate::state::AppState;
use serde_json::json;
use steward_core::{scopes, EffectId};
use steward_store::{ReceiptKeyRecord, ReceiptRecord, RECEIPT_PAGE_MAX};

/// How many receipts a chain page holds when the request names no `limit`.
pub const RECEIPT_PAGE_DEFAULT: u32 = 100;

/// Every receipt of the effect, one per settlement, oldest first; empty before its first
/// settlement's receipt is issued. 404 for an effect not in the caller's environment.
pub async fn effect_receipts(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<Vec<ReceiptRecord>> {
    principal.require(scopes::ACTIONS_READ)?;
    let id = EffectId::parse(id).map_err(|_| Error::not_found("effect"))?;
    let env = &principal.env.id;
    if state.store.effect(env, &id).await?.is_none() {
        return Err(Error::not_found("effect"));
    }
    Ok(state.store.effect_receipts(env, &id).await?)
}

/// The effect's latest receipt (of its latest settlement). 404 `NOT_FOUND` with
/// `details.receipt: "not_issued"` while it has none: it has not settled yet, or its receipt
/// is still being issued (shortly after the settlement).
pub async fn latest_receipt(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<ReceiptRecord> {
    effect_receipts(state, principal, id)
        .await?
        .pop()
        .ok_or_else(|| {
            Error::of(
                codes::NOT_FOUND,
                "this effect has no receipt yet: a receipt is issued shortly after each \
                 settlement (succeeded, failed, denied, expired, refused or unknown)",
            )
            .with_details(json!({"effectId": id, "receipt": "not_issued"}))
        })
}

/// A page of the environment's receipt chain: the receipts with sequence numbers past `after`,
/// in order, at most `limit` (1 to [`RECEIPT_PAGE_MAX`]). Answers the page and the cursor of
/// the next one (`None` at the end of the chain as it stands).
pub async fn chain(
    state: &AppState,
    principal: &Principal,
    after: Option<&str>,
    limit: Option<u32>,
) -> Result<(Vec<ReceiptRecord>, u32, Option<String>)> {
    principal.require(scopes::ACTIONS_READ)?;
    let after = match after {
        None => 0,
        Some(text) => text
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| Error::validation("cursor", "must be a sequence number (0 or more)"))?,
    };
    let limit = limit
        .unwrap_or(RECEIPT_PAGE_DEFAULT)
        .clamp(1, RECEIPT_PAGE_MAX);
    let page = state
        .store
        .receipts(&principal.env.id, after, limit + 1)
        .await?;
    let more = page.len() > limit as usize;
    let page: Vec<ReceiptRecord> = page.into_iter().take(limit as usize).collect();
    let next = more
        .then(|| page.last().map(|r| r.seq.to_string()))
        .flatten();
    Ok((page, limit, next))
}

/// Every receipt signing key's public half, oldest first (the last signs now). Public: the
/// well-known path serves them without a key.
pub async fn public_keys(state: &AppState) -> Result<Vec<ReceiptKeyRecord>> {
    Ok(state.store.receipt_keys().await?)
}
