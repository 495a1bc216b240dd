//! Approval policies: listing, reading, creating, editing (PATCH semantics: a new immutable
//! version when anything changed) and deleting them (a tombstone version), their version
//! history, and `evaluate`, which says which policy would decide a described request and
//! records nothing. Reading needs `policies:read`, changing needs `policies:write`.
//! `api/policies.rs` is the HTTP door; the console's policy pages read through it. Whole policy
//! sets from a file are `policy_files`.

use super::{Error, Principal, Result};
use crate::adapters::money_amount;
use crate::state::AppState;
use serde_json::{Map, Value};
use steward_core::policy::{
    decide, matches, order, Facts, Match, MatchKind, Policy, PolicyDecision, PolicySpec,
    RequestKind,
};
use steward_core::{scopes, FieldError, PolicyId};
use steward_store::{ActionRecord, Actor, PolicyRecord, PolicyVersion, StoreError};

pub use crate::envelope::{PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};

/// A create or an edit of one policy, as the front end read it.
#[derive(Debug, Clone, Default)]
pub struct PolicyEdit {
    /// The definition fields sent, keyed as the API names them; on an edit a field left out is
    /// unchanged and one sent as `null` is cleared.
    pub fields: Map<String, Value>,
    /// Recorded on the version the change creates.
    pub change_note: Option<String>,
}

/// A request described to [`evaluate`].
#[derive(Debug, Clone)]
pub struct Described {
    pub kind: RequestKind,
    pub action_name: Option<String>,
    pub agent_id: Option<String>,
    pub user_id: Option<String>,
    /// The request's input: a JSON object.
    pub payload: Value,
}

/// What [`evaluate`] found: each policy that matched or could not tell, in evaluation order,
/// and the decision (`None`: no policy applies).
#[derive(Debug)]
pub struct Evaluation {
    pub considered: Vec<(Policy, Match)>,
    pub decision: Option<PolicyDecision>,
}

/// A page of a policy's retained versions, newest first.
#[derive(Debug)]
pub struct VersionsPage {
    pub versions: Vec<PolicyVersion>,
    /// How many versions are retained in all.
    pub total: usize,
    pub limit: u32,
    /// The `before` of the next page.
    pub next_before: Option<u32>,
}

fn invalid(e: FieldError) -> Error {
    Error::validation(e.field, e.message)
}

fn conflict_or(e: StoreError) -> Error {
    match e {
        StoreError::Duplicate { .. } => {
            Error::conflict("already_exists", "a policy with this name already exists")
        }
        other => other.into(),
    }
}

/// Could a policy govern invocations of `action`? The ones naming it, plus the broad ones.
fn could_govern(spec: &PolicySpec, action: &str) -> bool {
    match spec.match_kind {
        MatchKind::Custom => false,
        MatchKind::Any => true,
        MatchKind::Action => spec
            .match_action_name
            .as_deref()
            .is_none_or(|name| name == action),
    }
}

/// The environment's policies in evaluation order; with `action_name`, only those that could
/// govern that action (the ones naming it and the broad ones).
pub async fn list(
    state: &AppState,
    principal: &Principal,
    action_name: Option<&str>,
) -> Result<Vec<PolicyRecord>> {
    principal.require(scopes::POLICIES_READ)?;
    let mut records = state.store.list_policies(&principal.env.id).await?;
    records.retain(|r| action_name.is_none_or(|a| could_govern(&r.spec, a)));
    let mut policies: Vec<Policy> = records.iter().map(PolicyRecord::policy).collect();
    order(&mut policies);
    Ok(policies
        .iter()
        .filter_map(|p| records.iter().find(|r| r.id == p.id).cloned())
        .collect())
}

/// The policy `id` of the principal's environment.
pub async fn get(state: &AppState, principal: &Principal, id: &PolicyId) -> Result<PolicyRecord> {
    principal.require(scopes::POLICIES_READ)?;
    find(state, principal, id).await
}

async fn find(state: &AppState, principal: &Principal, id: &PolicyId) -> Result<PolicyRecord> {
    state
        .store
        .policy(&principal.env.id, id)
        .await?
        .ok_or_else(|| Error::not_found("policy"))
}

/// Refuses a `matchActionName` that names no action of the principal's environment.
pub(crate) async fn check_action(
    state: &AppState,
    principal: &Principal,
    spec: &PolicySpec,
) -> Result<()> {
    if let Some(name) = &spec.match_action_name {
        if state.store.action(&principal.env.id, name).await?.is_none() {
            return Err(Error::validation(
                "matchActionName",
                format!("names no action called `{name}` in this environment"),
            ));
        }
    }
    Ok(())
}

/// Creates a policy at version 1.
pub async fn create(
    state: &AppState,
    principal: &Principal,
    edit: &PolicyEdit,
) -> Result<PolicyRecord> {
    principal.require(scopes::POLICIES_WRITE)?;
    let spec = PolicySpec::from_create(&edit.fields).map_err(invalid)?;
    check_action(state, principal, &spec).await?;
    let now = state.clock.now();
    let record = PolicyRecord {
        id: PolicyId::from_unique(&crate::clock::unique()),
        env_id: principal.env.id.clone(),
        version: 1,
        spec,
        created_at: now,
        updated_at: now,
    };
    state
        .store
        .create_policy(
            &record,
            edit.change_note.as_deref(),
            &Actor::key(&principal.key.id, now),
        )
        .await
        .map_err(conflict_or)?;
    Ok(record)
}

/// Edits policy `id`: a new version when anything changed, the policy as it was otherwise.
pub async fn update(
    state: &AppState,
    principal: &Principal,
    id: &PolicyId,
    edit: &PolicyEdit,
) -> Result<PolicyRecord> {
    principal.require(scopes::POLICIES_WRITE)?;
    let current = find(state, principal, id).await?;
    let spec = current.spec.patched(&edit.fields).map_err(invalid)?;
    if spec == current.spec {
        return Ok(current);
    }
    if spec.match_action_name != current.spec.match_action_name {
        check_action(state, principal, &spec).await?;
    }
    let actor = Actor::key(&principal.key.id, state.clock.now());
    state
        .store
        .update_policy(
            &principal.env.id,
            id,
            current.version,
            &spec,
            edit.change_note.as_deref(),
            &actor,
        )
        .await
        .map_err(conflict_or)
}

/// Deletes policy `id`, leaving a tombstone version with `change_note`.
pub async fn delete(
    state: &AppState,
    principal: &Principal,
    id: &PolicyId,
    change_note: Option<&str>,
) -> Result<()> {
    principal.require(scopes::POLICIES_WRITE)?;
    let actor = Actor::key(&principal.key.id, state.clock.now());
    if state
        .store
        .delete_policy(&principal.env.id, id, change_note, &actor)
        .await?
    {
        Ok(())
    } else {
        Err(Error::not_found("policy"))
    }
}

async fn versions_of(
    state: &AppState,
    principal: &Principal,
    id: &PolicyId,
) -> Result<Vec<PolicyVersion>> {
    let versions = state.store.policy_versions(&principal.env.id, id).await?;
    if versions.is_empty() {
        return Err(Error::not_found("policy"));
    }
    Ok(versions)
}

/// Policy `id`'s retained versions, newest first: `limit` of them (clamped to 1 to
/// [`PAGE_LIMIT_MAX`], [`PAGE_LIMIT_DEFAULT`] when `None`), older than `before` if given.
pub async fn versions(
    state: &AppState,
    principal: &Principal,
    id: &PolicyId,
    limit: Option<u32>,
    before: Option<u32>,
) -> Result<VersionsPage> {
    principal.require(scopes::POLICIES_READ)?;
    let all = versions_of(state, principal, id).await?;
    let limit = limit.unwrap_or(PAGE_LIMIT_DEFAULT).clamp(1, PAGE_LIMIT_MAX);
    let total = all.len();
    let mut newest_first: Vec<PolicyVersion> = all
        .into_iter()
        .rev()
        .filter(|v| before.is_none_or(|b| v.version < b))
        .collect();
    let has_more = newest_first.len() > limit as usize;
    newest_first.truncate(limit as usize);
    let next_before = has_more
        .then(|| newest_first.last().map(|v| v.version))
        .flatten();
    Ok(VersionsPage {
        versions: newest_first,
        total,
        limit,
        next_before,
    })
}

/// Version `version` of policy `id` (a tombstone after deletion).
pub async fn version(
    state: &AppState,
    principal: &Principal,
    id: &PolicyId,
    version: u32,
) -> Result<PolicyVersion> {
    principal.require(scopes::POLICIES_READ)?;
    versions_of(state, principal, id)
        .await?
        .into_iter()
        .find(|v| v.version == version)
        .ok_or_else(|| Error::not_found("policy version"))
}

/// The action a described request of `kind` names, when it names one of the environment.
pub(crate) async fn described_action(
    state: &AppState,
    principal: &Principal,
    kind: RequestKind,
    action_name: Option<&str>,
) -> Result<Option<ActionRecord>> {
    match (kind, action_name) {
        (RequestKind::Action, Some(name)) => {
            Ok(state.store.action(&principal.env.id, name).await?)
        }
        _ => Ok(None),
    }
}

/// The amount policies see: the action's money amount for `payload`, or, without an action,
/// the payload's own `amount`.
pub(crate) fn described_amount(action: Option<&ActionRecord>, payload: &Value) -> Option<f64> {
    match action {
        Some(a) => money_amount(&a.definition, payload).map(|n| n as f64),
        None => payload.get("amount").and_then(Value::as_f64),
    }
}

/// Which policy would decide the described request, and how. Records nothing, and is not an
/// authorization: limits, halts and scopes still apply at invoke.
pub async fn evaluate(
    state: &AppState,
    principal: &Principal,
    request: &Described,
) -> Result<Evaluation> {
    principal.require(scopes::POLICIES_READ)?;
    let action = described_action(
        state,
        principal,
        request.kind,
        request.action_name.as_deref(),
    )
    .await?;
    let facts = Facts {
        kind: request.kind,
        action_name: request.action_name.as_deref(),
        agent_id: request.agent_id.as_deref(),
        user_id: request.user_id.as_deref(),
        tags: &[],
        amount: described_amount(action.as_ref(), &request.payload),
        input: &request.payload,
    };
    let mut policies: Vec<Policy> = state
        .store
        .list_policies(&principal.env.id)
        .await?
        .iter()
        .map(PolicyRecord::policy)
        .collect();
    order(&mut policies);
    let decision = decide(&policies, &facts);
    let considered = policies
        .into_iter()
        .filter_map(|p| match matches(&p.spec, &facts) {
            Match::No => None,
            result => Some((p, result)),
        })
        .collect();
    Ok(Evaluation {
        considered,
        decision,
    })
}
