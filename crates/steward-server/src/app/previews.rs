//! Execution-bound previews, and the binding an invoke with `previewId` must match.
//!
//! A preview renders the exact request an invoke would send, with the dispatcher's own code
//! (`dispatch::prepare::prepare_call`), reads the provider read-only (`Adapter::preview_reads`),
//! states the impact against every applicable limit, and records all of it with an expiry. It
//! sends nothing and reserves nothing. An invoke naming it must be of the same action version,
//! with the same input, render the same request, before expiry, be its first, and come from the
//! key that asked for the preview: otherwise it is refused, before anything is recorded, with a
//! code that says which. `api/previews.rs` is the HTTP door.

use super::{input, seam, Error, Principal, Result};
use crate::auth::Caller;
use crate::dispatch::prepare::{prepare_call, Call};
use crate::error::{codes, ApiError, ApiResult};
use crate::state::AppState;
use serde_json::{json, Value};
use steward_core::{fingerprint, scopes, EffectId, InvocationId, Millis, OperationKey, PreviewId};
use steward_store::{ActionRecord, Actor, PreviewRecord};

/// A preview's life when the request names none, in seconds.
pub const PREVIEW_TTL_DEFAULT_S: u64 = 600;
// The longest a preview may live is `steward_wire::PREVIEW_TTL_MAX_S`: the request bodies
// refuse more, so the bound is part of the wire contract and defined there.

/// The invocation id a preview's request carries where an invoke's would carry its own.
const PLACEHOLDER_INVOCATION: &str = "assigned_at_invoke";
/// The provider idempotency key a preview's request carries where an invoke's would carry the
/// key of its effect.
const PLACEHOLDER_PROVIDER_KEY: &str = "{provider idempotency key, chosen per effect at invoke}";

/// The action `reference` names, when `principal` may preview it with `input`: what a preview
/// checks before anything else (and before its `Idempotency-Key` is looked up, which covers
/// the action's id).
pub async fn previewable(
    state: &AppState,
    principal: &Principal,
    reference: &str,
    input: &Value,
) -> Result<ActionRecord> {
    principal.require(scopes::ACTIONS_INVOKE)?;
    let action = state
        .store
        .action(&principal.env.id, reference)
        .await?
        .ok_or_else(|| Error::not_found("action"))?;
    input::check(&action, input)?;
    Ok(action)
}

/// Previews `action` (from [`previewable`]) with `input`, and records the preview.
pub async fn create(
    state: &AppState,
    principal: &Principal,
    action: &ActionRecord,
    input: Value,
    ttl_s: u64,
    run_id: Option<String>,
) -> Result<PreviewRecord> {
    seam::reached(state, seam::UseCase::Preview);
    principal.require(scopes::ACTIONS_INVOKE)?;
    let preview = make(state, principal, action, input, ttl_s, run_id, None).await?;
    state
        .store
        .create_preview(&preview, &Actor::key(&principal.key.id, state.clock.now()))
        .await?;
    Ok(preview)
}

/// The preview `id` of the principal's environment.
pub async fn get(state: &AppState, principal: &Principal, id: &PreviewId) -> Result<PreviewRecord> {
    principal.require(scopes::ACTIONS_READ)?;
    state
        .store
        .preview(&principal.env.id, id)
        .await?
        .ok_or_else(|| Error::not_found("preview"))
}

/// A new preview of what preview `id` previewed, read again under the action's current
/// version; the old one is superseded. A bound preview may be refreshed (to review what the
/// provider holds now before an approval, say); the new one is unbound, and the invocation
/// keeps the old binding.
pub async fn refresh(
    state: &AppState,
    principal: &Principal,
    id: &PreviewId,
    ttl_s: u64,
) -> Result<PreviewRecord> {
    principal.require(scopes::ACTIONS_INVOKE)?;
    let old = state
        .store
        .preview(&principal.env.id, id)
        .await?
        .ok_or_else(|| Error::not_found("preview"))?;
    own(&old, principal)?;
    if let Some(newer) = &old.superseded_by {
        return Err(superseded(newer));
    }
    let action = state
        .store
        .action(&principal.env.id, old.action_id.as_str())
        .await?
        .ok_or_else(|| Error::not_found("action"))?;
    input::check(&action, &old.input)?;
    let new = make(
        state,
        principal,
        &action,
        old.input.clone(),
        ttl_s,
        old.run_id.clone(),
        Some(old.id.clone()),
    )
    .await?;
    let actor = Actor::key(&principal.key.id, state.clock.now());
    if !state.store.refresh_preview(&new, &actor).await? {
        return Err(Error::of(
            codes::PREVIEW_SUPERSEDED,
            "this preview was refreshed by another request first",
        ));
    }
    Ok(new)
}

/// Renders the request `action` would send for `input`, under the placeholders, and its digest.
async fn render(
    state: &AppState,
    caller: &Caller,
    action: &ActionRecord,
    input: &Value,
) -> ApiResult<(Value, String)> {
    let invocation = InvocationId::from_unique(PLACEHOLDER_INVOCATION);
    let call = Call {
        env: &caller.env.id,
        invocation: &invocation,
        input,
    };
    let key = action
        .definition
        .adapter
        .as_ref()
        .map(|_| PLACEHOLDER_PROVIDER_KEY);
    let prepared = prepare_call(state, call, &action.definition, key, None)
        .await
        .map_err(|blocked| {
            ApiError::of(
                codes::PREVIEW_BLOCKED,
                format!("this request would not be sent: {}", blocked.message),
            )
            .with_details(json!({"reason": blocked.code}))
        })?;
    let request = prepared.scrubbed_view();
    let digest = fingerprint(&request);
    Ok((request, digest))
}

/// Each applicable live limit: what this call would take, and what is left now.
async fn impact(
    state: &AppState,
    caller: &Caller,
    action: &ActionRecord,
    input: &Value,
) -> ApiResult<Value> {
    let quantities = crate::adapters::quantities(&action.definition, input);
    let resource = crate::adapters::resource(&action.definition, input);
    let limits = state
        .store
        .list_limits(&caller.env.id, false, state.clock.now())
        .await?;
    let mut out = Vec::new();
    for q in &quantities {
        for status in limits
            .iter()
            .filter(|l| l.limit.spec.applies(&action.name, resource.as_deref(), q))
        {
            let available = status.available();
            out.push(json!({
                "limitId": status.limit.id,
                "limitName": status.limit.spec.name,
                "dimension": q.dimension,
                "unit": q.unit,
                "amount": q.amount,
                "limit": status.limit.spec.amount,
                "used": status.usage.used(),
                "available": available,
                "fits": q.amount.is_some_and(|a| a <= available),
            }));
        }
    }
    Ok(Value::Array(out))
}

/// What Steward promises about the call this preview describes.
fn guarantees(action: &ActionRecord, expires_at: Millis) -> Value {
    let replay = crate::adapters::replay_window_ms(&action.definition);
    json!({
        "recordedBeforeSent": true,
        "providerIdempotency": replay.is_some(),
        "providerIdempotencyWindowSeconds": replay.map(|ms| ms / 1000),
        "unknownOutcomes": "recorded as unknown and settled by a read-only lookup, never re-sent silently",
        "binding": format!(
            "an invoke with this previewId must come from the key that asked for it, name action version {} with the same input and render the same request before {}",
            action.version,
            expires_at.to_rfc3339()
        ),
        "reserves": "nothing: limits are checked again, atomically, when the invoke is recorded",
    })
}

/// Builds a new preview of `action` with `input` (a refresh of `refreshes` when given).
async fn make(
    state: &AppState,
    caller: &Caller,
    action: &ActionRecord,
    input: Value,
    ttl_s: u64,
    run_id: Option<String>,
    refreshes: Option<PreviewId>,
) -> ApiResult<PreviewRecord> {
    let (request, digest) = render(state, caller, action, &input).await?;
    let reads =
        crate::adapters::preview_reads(state, &caller.env.id, &action.definition, &input).await;
    let now = state.clock.now();
    let expires_at = Millis(now.0 + (ttl_s as i64) * 1000);
    let body = json!({
        "request": request,
        "reads": reads.reads,
        "preconditions": reads.preconditions,
        "impact": impact(state, caller, action, &input).await?,
        "guarantees": guarantees(action, expires_at),
        "ttlSeconds": ttl_s,
    });
    Ok(PreviewRecord {
        id: PreviewId::from_unique(&crate::clock::unique()),
        env_id: caller.env.id.clone(),
        action_id: action.id.clone(),
        action_name: action.name.clone(),
        action_version: action.version,
        input_fingerprint: fingerprint(&input),
        input,
        request_digest: digest,
        body,
        run_id,
        created_by: caller.key.id.clone(),
        created_at: now,
        expires_at,
        refreshes,
        superseded_by: None,
        bound_effect: None,
    })
}

/// 403 unless `caller` is the key that asked for `preview`: what a preview shows was read for
/// that key, and an approval of it is an approval of that key's call, so another key of the
/// environment (a rotation's new key included) previews for itself.
fn own(preview: &PreviewRecord, caller: &Caller) -> ApiResult<()> {
    if preview.created_by == caller.key.id {
        return Ok(());
    }
    Err(ApiError::of(
        codes::PREVIEW_OTHER_KEY,
        "this preview was asked for by another key; preview with this key instead",
    ))
}

fn already_used(effect: &EffectId) -> ApiError {
    ApiError::of(
        codes::PREVIEW_ALREADY_USED,
        "this preview is already bound to an invocation; preview again for another call",
    )
    .with_details(json!({"effectId": effect}))
}

fn superseded(newer: &PreviewId) -> ApiError {
    ApiError::of(
        codes::PREVIEW_SUPERSEDED,
        "this preview was refreshed; bind the invoke to the new preview (and have it approved again)",
    )
    .with_details(json!({"supersededBy": newer}))
}

/// Checks that an invoke of `action` with `input` may bind to `id`; nothing is recorded when it
/// may not. An invoke under an operation key that already names an effect bound to this preview
/// passes (the submission answers with that effect); one bound to another preview, or to none,
/// is refused: a binding, and the approval that came with it, never carries over. Only the key
/// that asked for the preview may bind to it.
pub async fn check_binding(
    state: &AppState,
    caller: &Caller,
    action: &ActionRecord,
    input: &Value,
    operation_key: Option<&OperationKey>,
    id: &PreviewId,
) -> ApiResult<()> {
    let preview = state
        .store
        .preview(&caller.env.id, id)
        .await?
        .ok_or_else(|| ApiError::not_found("preview"))?;
    own(&preview, caller)?;
    if let Some(key) = operation_key {
        if let Some(existing) = state
            .store
            .invocation_by_operation_key(&caller.env.id, &action.id, key)
            .await?
        {
            if preview.bound_effect.as_ref() == Some(&existing.effect_id) {
                return Ok(());
            }
            return Err(ApiError::of(
                codes::PREVIEW_MISMATCH,
                "this operationKey already names an effect that is not bound to this preview",
            )
            .with_details(json!({"field": "operationKey", "effectId": existing.effect_id})));
        }
    }
    if let Some(effect) = &preview.bound_effect {
        return Err(already_used(effect));
    }
    if let Some(newer) = &preview.superseded_by {
        return Err(superseded(newer));
    }
    if state.clock.now() >= preview.expires_at {
        return Err(ApiError::of(
            codes::PREVIEW_EXPIRED,
            "this preview has expired; refresh it and bind the invoke to the new one",
        )
        .with_details(json!({"expiresAt": preview.expires_at.to_rfc3339()})));
    }
    if preview.action_id != action.id || preview.action_version != action.version {
        return Err(ApiError::of(
            codes::PREVIEW_ACTION_CHANGED,
            format!(
                "the preview is of action version {}; the action is now version {}",
                preview.action_version, action.version
            ),
        )
        .with_details(
            json!({"previewVersion": preview.action_version, "actionVersion": action.version}),
        ));
    }
    if preview.input_fingerprint != fingerprint(input) {
        return Err(ApiError::of(
            codes::PREVIEW_MISMATCH,
            "the input differs from the preview's",
        )
        .with_details(json!({"field": "input"})));
    }
    let (_, digest) = render(state, caller, action, input).await?;
    if digest != preview.request_digest {
        return Err(ApiError::of(
            codes::PREVIEW_MISMATCH,
            "the request this invoke would send differs from the preview's",
        )
        .with_details(json!({"field": "request"})));
    }
    Ok(())
}
