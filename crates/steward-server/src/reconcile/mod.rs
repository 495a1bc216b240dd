//! Unknown is a queue, not a dead end: read-only reconciliation of `unknown` effects.
//!
//! [`reconcile`] asks the provider what happened (an adapter looks the write up by the provider
//! key Steward sent, `Adapter::look_up`; a template action with `verify` reads the write back) and settles the effect only on a conclusive answer. "Not found" is conclusive only once
//! no attempt can still be in flight: its deadline plus a grace period has passed. Every lookup
//! appends evidence; nothing is overwritten and nothing is ever sent again from here.

pub mod background;
pub(crate) mod lookup;
pub(crate) mod verify;

use crate::effect_error::{EffectError, EffectResult};
use crate::state::AppState;
use lookup::Finding;
use serde_json::json;
use steward_core::{
    EffectEvent, EffectId, EffectState, EnvironmentId, EvidenceKind, EvidenceSource,
};
use steward_store::{
    Actor, EffectChange, EffectDetail, Effects, InvocationRecord, NewEvidence, StoreError,
};

/// What one reconcile did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reconciled {
    /// The effect is now settled.
    Settled,
    /// Still unknown (or still in flight); evidence says why.
    StillOpen,
    /// Nothing to do: already settled or never sent.
    NotOpen,
    /// No read-only lookup exists for this action; it needs a manual resolution.
    NoLookup,
}

/// True when Steward can look this effect up without writing anything.
pub fn can_look_up(def: &steward_core::ActionDefinition) -> bool {
    def.adapter.is_some() || def.verify.is_some()
}

/// The effect, with its attempts and evidence, and its invocation.
async fn load(
    effects: &dyn Effects,
    env: &EnvironmentId,
    effect: &EffectId,
) -> EffectResult<(EffectDetail, InvocationRecord)> {
    let detail = effects
        .effect(env, effect)
        .await?
        .ok_or_else(|| EffectError::missing("effect", effect))?;
    let inv = effects
        .invocation(env, &detail.effect.invocation_id)
        .await?
        .ok_or_else(|| EffectError::missing("invocation", &detail.effect.invocation_id))?;
    Ok((detail, inv))
}

async fn find(
    state: &AppState,
    detail: &EffectDetail,
    inv: &InvocationRecord,
    def: &steward_core::ActionDefinition,
) -> Option<Finding> {
    if let (Some(spec), Some(key)) = (&def.adapter, &detail.effect.provider_idempotency_key) {
        return Some(match crate::adapters::find(&spec.kind) {
            Some(adapter) => adapter.look_up(state, inv, spec, key).await,
            None => Finding::Inconclusive {
                detail: format!("this server has no {} adapter to look it up", spec.kind),
            },
        });
    }
    let spec = match def
        .verify
        .as_ref()
        .map(|v| verify::parse(v, state.outbound.allow_insecure))
    {
        Some(Ok(spec)) => spec,
        Some(Err((field, message))) => {
            return Some(Finding::Inconclusive {
                detail: format!("{field} {message}"),
            })
        }
        None => return None,
    };
    let action_url = def.url_template.as_deref().unwrap_or_default();
    let response = inv.response_body.clone().unwrap_or(serde_json::Value::Null);
    Some(
        match verify::read_back(state, inv, &spec, action_url, &response).await {
            Ok(()) => Finding::Found {
                confirmed: true,
                reference: None,
                detail: "the read-back matched".into(),
            },
            // A read-back that does not match cannot prove the write never happened.
            Err(why) => Finding::Inconclusive {
                detail: format!("the read-back did not confirm the write: {why}"),
            },
        },
    )
}

/// Reconciles one effect, read-only. `source` names who asked (`Api` or `Reconciler`).
pub async fn reconcile(
    state: &AppState,
    env: &EnvironmentId,
    effect: &EffectId,
    source: EvidenceSource,
    actor: Actor,
) -> EffectResult<Reconciled> {
    let (detail, inv) = load(&*state.store, env, effect).await?;
    let def = crate::dispatch::definition_of(&*state.store, &inv).await?;
    let current = detail.effect.state;
    if !current.is_unresolved() {
        return Ok(Reconciled::NotOpen);
    }
    let Some(finding) = find(state, &detail, &inv, &def).await else {
        let note = NewEvidence::new(
            EvidenceKind::Reconcile,
            source,
            "no read-only lookup exists for this action; resolve it manually",
        );
        state
            .store
            .append_evidence(env, effect, &note, &actor)
            .await?;
        state.metrics.reconcile("no_lookup");
        return Ok(Reconciled::NoLookup);
    };
    let in_flight_until = detail.attempts.last().map(|a| {
        a.deadline_at
            .plus_ms(state.absence_grace.as_millis() as i64)
    });
    let settled_in_flight = in_flight_until.is_some_and(|t| t > actor.now);
    let (event, message, reference) = match (&finding, current) {
        (_, EffectState::Dispatching) => (
            EffectEvent::ReconcileInconclusive,
            format!("an attempt is in flight; {}", describe(&finding)),
            None,
        ),
        (
            Finding::Found {
                confirmed,
                reference,
                detail,
            },
            _,
        ) => (
            EffectEvent::ReconcileFound {
                confirmed: *confirmed,
            },
            detail.clone(),
            reference.clone(),
        ),
        (Finding::ProviderFailed { reference, detail }, _) => (
            EffectEvent::ReconcileAbsent,
            detail.clone(),
            reference.clone(),
        ),
        (Finding::Absent { detail }, _) if !settled_in_flight => (
            EffectEvent::ReconcileAbsent,
            format!("{detail}; no attempt can still be in flight"),
            None,
        ),
        (Finding::Absent { detail }, _) => (
            EffectEvent::ReconcileInconclusive,
            format!(
                "{detail}, but an attempt may still land until {}",
                in_flight_until.map(|t| t.to_rfc3339()).unwrap_or_default()
            ),
            None,
        ),
        (Finding::Inconclusive { detail }, _) => {
            (EffectEvent::ReconcileInconclusive, detail.clone(), None)
        }
    };
    let evidence = NewEvidence::new(EvidenceKind::Reconcile, source, message)
        .with_data(json!({"externalReference": reference}));
    let mut change = EffectChange::of(env, effect, current, event, evidence, actor)?;
    let to = change.to;
    if to == current {
        let evidence = change
            .evidence
            .take()
            .expect("EffectChange::of attaches the evidence");
        state
            .store
            .append_evidence(env, effect, &evidence, &change.actor)
            .await?;
        state.metrics.reconcile("inconclusive");
        return Ok(Reconciled::StillOpen);
    }
    change.external_reference = reference;
    if to == EffectState::Failed {
        change.error = Some(
            json!({"code": "provider_has_no_record", "message": "reconciled: the provider has no completed record of this write"}),
        );
    }
    match state.store.change_effect(&change).await {
        Ok(()) => {
            state.metrics.reconcile(if to == EffectState::Failed {
                "absent"
            } else {
                "found"
            });
            Ok(Reconciled::Settled)
        }
        // Someone else settled it first (a manual resolution, another reconcile).
        Err(StoreError::StateConflict { .. }) => Ok(Reconciled::NotOpen),
        Err(e) => Err(e.into()),
    }
}

fn describe(finding: &Finding) -> String {
    match finding {
        Finding::Found { detail, .. }
        | Finding::Absent { detail }
        | Finding::ProviderFailed { detail, .. }
        | Finding::Inconclusive { detail } => detail.clone(),
    }
}
