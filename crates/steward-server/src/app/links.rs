//! `dependsOn` and `compensates` on invoke (`steward_core::link`): checked against the
//! environment's effects, and handed to the submission, which records them with the new effect.
//! The HTTP body's fields are read by `api/links.rs`.
//!
//! The check runs before the submit transaction. That is safe because what it checks only ever
//! becomes true for good: an effect that holds a settled outcome keeps it, so a dependency that
//! holds here still holds at commit. A dependency that does not hold yet is refused, and a
//! resend after it settles proceeds.

use crate::error::{codes, ApiError, ApiResult};
use crate::state::AppState;
use serde_json::{json, Value};
use steward_core::link::{compensable, holds};
use steward_core::EnvironmentId;
use steward_store::EffectLinks;

/// The links as the request fingerprint covers them: nothing when there are none, so requests
/// without links fingerprint as they always did.
pub fn fingerprinted(links: &EffectLinks) -> Option<Value> {
    (!links.is_empty()).then(|| {
        json!({
            "dependsOn": links.depends_on.iter()
                .map(|d| json!({"effect": d.effect, "outcome": d.outcome.as_str()}))
                .collect::<Vec<_>>(),
            "compensates": links.compensates,
            "preview": links.preview,
        })
    })
}

/// Refuses the invoke unless every dependency holds its outcome and the compensated effect has
/// settled. An effect of another environment is one that does not exist.
pub async fn check(state: &AppState, env: &EnvironmentId, links: &EffectLinks) -> ApiResult<()> {
    let mut unmet = Vec::new();
    for (i, dependency) in links.depends_on.iter().enumerate() {
        let Some(found) = state.store.effect(env, &dependency.effect).await? else {
            return Err(ApiError::validation(
                format!("dependsOn[{i}].effect"),
                "names no effect in this environment",
            ));
        };
        let now = found.effect.state;
        if !holds(now, dependency.outcome) {
            unmet.push(json!({
                "effect": dependency.effect,
                "wanted": dependency.outcome.as_str(),
                "outcome": now.outcome(),
                "stage": now.stage(),
            }));
        }
    }
    if !unmet.is_empty() {
        return Err(ApiError::of(
            codes::DEPENDENCY_NOT_SATISFIED,
            "an effect this invoke depends on does not hold the outcome asked for; nothing was invoked",
        )
        .with_details(json!({ "unmet": unmet })));
    }
    if let Some(target) = &links.compensates {
        let Some(found) = state.store.effect(env, target).await? else {
            return Err(ApiError::validation(
                "compensates",
                "names no effect in this environment",
            ));
        };
        if !compensable(found.effect.state) {
            return Err(ApiError::of(
                codes::COMPENSATION_TARGET_NOT_SETTLED,
                format!(
                    "the effect to compensate is {}, not settled; nothing was invoked",
                    found.effect.state.invocation_status().as_str()
                ),
            )
            .with_details(json!({"effect": target, "outcome": found.effect.state.outcome(), "stage": found.effect.state.stage()})));
        }
    }
    Ok(())
}
