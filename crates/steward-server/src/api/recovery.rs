//! Settling what Steward could not, over HTTP: reconcile (read-only), manual resolution, notes,
//! replay. The use cases are `app/recovery.rs`.

use super::body;
use super::openapi as doc;
use super::{idempotent, views};
use crate::app;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};
use steward_core::{scopes, EffectId, InvocationId, ManualOutcome};
use steward_store::ActualImpact;
use steward_wire as wire;

fn effect_id(id: &str) -> ApiResult<EffectId> {
    EffectId::parse(id).map_err(|_| ApiError::not_found("effect"))
}

/// Read-only and safe to repeat, so a resend simply looks again: it takes no idempotency record.
#[utoipa::path(
    post,
    path = "/actions/effects/{id}/reconcile",
    operation_id = "recovery_reconcile",
    tag = "effects",
    params(doc::IdPath),
    responses(
        (status = 200, description = "the effect after asking the provider what happened", body = doc::Single<doc::Effect>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Conflict,
    )
)]
pub async fn reconcile(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_INVOKE)?;
    let id = effect_id(&id)?;
    let effect = app::recovery::reconcile(&state, &caller, &id).await?;
    let names = views::KeyNames::of(&state, &caller.env.id).await?;
    Ok(crate::envelope::ok(views::effect_detail(&effect, &names)))
}

fn outcome(given: Option<wire::ManualOutcome>) -> ApiResult<ManualOutcome> {
    match given {
        Some(wire::ManualOutcome::Succeeded) => Ok(ManualOutcome::Succeeded),
        Some(wire::ManualOutcome::Failed) => Ok(ManualOutcome::Failed),
        None => Err(ApiError::validation(
            "outcome",
            "must be succeeded or failed",
        )),
    }
}

/// A text the body must carry, not blank.
fn required(given: Option<String>, field: &str) -> ApiResult<String> {
    match given {
        Some(t) if !t.trim().is_empty() => Ok(t),
        _ => Err(ApiError::validation(field, "is required")),
    }
}

#[utoipa::path(
    post,
    path = "/actions/effects/{id}/resolve",
    operation_id = "recovery_resolve_effect",
    tag = "effects",
    params(doc::IdPath, doc::IdempotencyHeader),
    request_body = doc::ResolveEffectBody,
    responses(
        (status = 200, description = "the effect, settled by hand", body = doc::Single<doc::Effect>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn resolve_effect(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_RESOLVE)?;
    let id = effect_id(&id)?;
    let map = body::object(&bytes)?;
    let given: wire::ResolveEffectBody = body::typed(&map)?;
    let outcome = outcome(given.outcome)?;
    let reason = required(given.reason.map(wire::Text::into_string), "reason")?;
    let partial = given.partial_effect.map(|p| p.as_str().to_string());
    let actual_impact = given.actual_impact.map_or(Value::Null, Value::Array);
    let actual = actual_amounts(&actual_impact)?;
    let partial_happened = matches!(partial.as_deref(), Some("possible" | "confirmed"));
    match (outcome, partial_happened, &actual) {
        (ManualOutcome::Failed, false, Some(list)) if list.iter().any(|a| a.amount > 0) => {
            return Err(ApiError::validation(
                "actualImpact",
                "an effect resolved failed with no partial effect changed nothing; set partialEffect or give amounts of 0",
            ))
        }
        (ManualOutcome::Failed, true, None) => {
            return Err(ApiError::validation(
                "actualImpact",
                "is required with a partial effect: say what it changed, so the limits count it",
            ))
        }
        _ => {}
    }
    let reference = given.external_reference.map(wire::Text::into_string);
    let request = json!({"op": "effect.resolve", "id": id, "body": map});
    idempotent::run(&state, &caller, &headers, request, || async {
        let resolve = app::recovery::ResolveEffect {
            effect: id.clone(),
            outcome,
            reason: reason.clone(),
            partial_effect: partial.clone(),
            actual_impact: actual_impact.clone(),
            actual: actual.clone(),
            external_reference: reference.clone(),
        };
        let effect = app::recovery::resolve_effect(&state, &caller, resolve).await?;
        let names = views::KeyNames::of(&state, &caller.env.id).await?;
        Ok((StatusCode::OK, views::effect_detail(&effect, &names)))
    })
    .await
}

#[utoipa::path(
    post,
    path = "/actions/invocations/{id}/resolve",
    operation_id = "recovery_resolve_invocation",
    tag = "invocations",
    params(doc::IdPath, doc::IdempotencyHeader),
    request_body = doc::ResolveInvocationBody,
    responses(
        (status = 200, description = "the invocation, settled by hand", body = doc::Single<doc::Invocation>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn resolve_invocation(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_RESOLVE)?;
    let id = InvocationId::parse(&id).map_err(|_| ApiError::not_found("invocation"))?;
    let map = body::object(&bytes)?;
    let given: wire::ResolveInvocationBody = body::typed(&map)?;
    let outcome = outcome(given.outcome)?;
    let text = required(given.evidence.map(wire::Text::into_string), "evidence")?;
    let reference = given.external_reference.map(wire::Text::into_string);
    let request = json!({"op": "invocation.resolve", "id": id, "body": map});
    idempotent::run(&state, &caller, &headers, request, || async {
        let resolve = app::recovery::ResolveInvocation {
            invocation: id.clone(),
            outcome,
            evidence: text.clone(),
            external_reference: reference.clone(),
        };
        let inv = app::recovery::resolve_invocation(&state, &caller, resolve).await?;
        Ok((StatusCode::OK, views::invocation(&inv)))
    })
    .await
}

#[utoipa::path(
    post,
    path = "/actions/effects/{id}/notes",
    operation_id = "recovery_note",
    tag = "effects",
    params(doc::IdPath, doc::IdempotencyHeader),
    request_body = steward_wire::NoteBody,
    responses(
        (status = 200, description = "the effect with the note appended to its evidence", body = doc::Single<doc::Effect>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn note(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_RESOLVE)?;
    let id = effect_id(&id)?;
    let steward_wire::NoteBody { note } = body::parse(&bytes)?;
    let text = match note.map(steward_wire::Text::into_string) {
        Some(t) if !t.trim().is_empty() => t,
        _ => return Err(ApiError::validation("note", "is required")),
    };
    let request = json!({"op": "effect.note", "id": id, "note": text});
    idempotent::run(&state, &caller, &headers, request, || async {
        let effect = app::recovery::note(&state, &caller, &id, &text).await?;
        let names = views::KeyNames::of(&state, &caller.env.id).await?;
        Ok((StatusCode::OK, views::effect_detail(&effect, &names)))
    })
    .await
}

#[utoipa::path(
    post,
    path = "/actions/effects/{id}/replay",
    operation_id = "recovery_replay",
    tag = "effects",
    params(doc::IdPath, doc::IdempotencyHeader),
    responses(
        (status = 200, description = "the effect after sending it again under the same provider idempotency key", body = doc::Single<doc::Effect>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::Conflict,
    )
)]
pub async fn replay(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_RESOLVE)?;
    let id = effect_id(&id)?;
    let d = app::recovery::detail(&state, &caller, &id).await?;
    let request = json!({"op": "effect.replay", "id": id, "attempts": d.effect.attempt_count});
    idempotent::run(&state, &caller, &headers, request, || async {
        let effect = app::recovery::replay(&state, &caller, &id).await?;
        let names = views::KeyNames::of(&state, &caller.env.id).await?;
        Ok((StatusCode::OK, views::effect_detail(&effect, &names)))
    })
    .await
}

/// The most quantities one resolution may report.
pub const ACTUAL_IMPACT_MAX: usize = 16;

/// `actualImpact` as the SDK sends it: `[{dimension, amount, currency?, unit?, bound?}]`, the
/// unit being the currency (lower case) for money and the dimension otherwise; `bound` `exact`
/// (the default) or `at_most`, which counts the bound. `None` for no list.
fn actual_amounts(value: &Value) -> ApiResult<Option<Vec<ActualImpact>>> {
    let Value::Array(items) = value else {
        return Ok(None);
    };
    if items.len() > ACTUAL_IMPACT_MAX {
        return Err(ApiError::validation(
            "actualImpact",
            format!("lists at most {ACTUAL_IMPACT_MAX} quantities"),
        ));
    }
    let mut out: Vec<ActualImpact> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = |f: &str| format!("actualImpact[{i}].{f}");
        let Value::Object(m) = item else {
            return Err(ApiError::validation(
                format!("actualImpact[{i}]"),
                "must be an object",
            ));
        };
        if let Some(extra) = m
            .keys()
            .find(|k| !["dimension", "amount", "currency", "unit", "bound"].contains(&k.as_str()))
        {
            return Err(ApiError::validation(at(extra), "is not a known field"));
        }
        let dimension = m
            .get("dimension")
            .and_then(Value::as_str)
            .filter(|d| steward_core::impact::is_valid_dimension(d))
            .ok_or_else(|| {
                ApiError::validation(
                    at("dimension"),
                    "must be money, resource_mutations or a declared unit",
                )
            })?
            .to_string();
        let amount = m
            .get("amount")
            .and_then(Value::as_i64)
            .filter(|a| (0..=steward_core::impact::LIMIT_AMOUNT_MAX).contains(a))
            .ok_or_else(|| ApiError::validation(at("amount"), "must be a whole number from 0"))?;
        let unit = if dimension == steward_core::impact::MONEY {
            m.get("currency")
                .and_then(Value::as_str)
                .filter(|c| c.len() == 3 && c.chars().all(|ch| ch.is_ascii_alphabetic()))
                .ok_or_else(|| {
                    ApiError::validation(
                        at("currency"),
                        "is required for money: a three-letter code",
                    )
                })?
                .to_ascii_lowercase()
        } else {
            match m.get("unit").and_then(Value::as_str) {
                Some(u) if u == dimension => u.to_string(),
                Some(_) => {
                    return Err(ApiError::validation(
                        at("unit"),
                        "is the dimension's name for every dimension but money",
                    ))
                }
                None => dimension.clone(),
            }
        };
        match m.get("bound").and_then(Value::as_str) {
            None | Some("exact" | "at_most") => {}
            Some(_) => {
                return Err(ApiError::validation(
                    at("bound"),
                    "must be exact or at_most",
                ))
            }
        }
        if out
            .iter()
            .any(|a| a.dimension == dimension && a.unit == unit)
        {
            return Err(ApiError::validation(at("dimension"), "is listed twice"));
        }
        out.push(ActualImpact {
            dimension,
            unit,
            amount,
        });
    }
    Ok(Some(out))
}
