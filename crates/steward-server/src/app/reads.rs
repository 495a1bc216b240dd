//! Reading invocations, effects and approvals: typed filters in, records and pages out.
//!
//! The filters carry the wire's words, not parsed values, on purpose: a filter is checked here,
//! after the scope and the heavy-read admission, in the order the API has always checked them,
//! so a request with two faults is refused for the same one through every door.
//!
//! The HTTP reads (`api/reads.rs`, `api/approvals.rs`) and the console's pages call these, so a
//! filter means the same thing, and is refused with the same error naming the same field,
//! through either door. The filters carry the wire's words (`status=unknown`,
//! `decisionOrigin=automated`).

use super::{Error, Principal, Result};
use crate::auth::KeyWatch;
use crate::envelope::{PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};
use crate::state::AppState;
use std::time::Duration;
use steward_core::{
    scopes, ActionId, ApprovalId, ApprovalStatus, EffectId, EffectState, Grade, InvocationId,
    InvocationStatus,
};
use steward_store::{ApprovalFilter, ApprovalRecord, EffectDetail, EffectRecord, InvocationRecord};

/// The longest a read may wait for a decision, in seconds; the SDK asks for at most this.
pub const LONG_POLL_WAIT_S_MAX: u64 = 55;

/// The items from `offset`, at most `limit` of them, and how many the filter selects in all.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub total: u64,
    pub limit: u32,
    pub offset: u32,
}

impl<T> Page<T> {
    fn of(found: steward_store::Page<T>, limit: u32, offset: u32) -> Self {
        Page {
            items: found.items,
            total: found.total,
            limit,
            offset,
        }
    }

    fn empty(limit: u32, offset: u32) -> Self {
        Page {
            items: Vec::new(),
            total: 0,
            limit,
            offset,
        }
    }
}

/// Which page of a list, as asked: every list's filters carry one.
#[derive(Debug, Clone, Copy, Default)]
pub struct PageRequest {
    /// Page size, clamped to 1..=200 (default 50).
    pub limit: Option<u32>,
    pub offset: Option<u32>,
}

impl PageRequest {
    /// The page size, clamped to 1..=[`PAGE_LIMIT_MAX`] ([`PAGE_LIMIT_DEFAULT`] when not
    /// given), and the offset (0 when not given).
    fn window(self) -> (u32, u32) {
        (
            self.limit
                .unwrap_or(PAGE_LIMIT_DEFAULT)
                .clamp(1, PAGE_LIMIT_MAX),
            self.offset.unwrap_or(0),
        )
    }
}

/// Which invocations to list.
#[derive(Debug, Clone, Default)]
pub struct InvocationFilters {
    /// Only this action's invocations (name or id).
    pub action: Option<String>,
    /// An invocation status as the wire spells it.
    pub status: Option<String>,
    pub page: PageRequest,
    /// Where to start: a cursor the server gave (`o<offset>`); it takes the place of the page's
    /// `offset`.
    pub cursor: Option<String>,
}

/// Which effects to list.
#[derive(Debug, Clone, Default)]
pub struct EffectFilters {
    /// Only this action's effects (name or id).
    pub action: Option<String>,
    /// An outcome, a stage and a grade as the wire spells them.
    pub outcome: Option<String>,
    pub stage: Option<String>,
    pub grade: Option<String>,
    /// `true`: only effects that still need someone; `false`: only those that do not.
    pub unresolved: Option<String>,
    pub page: PageRequest,
}

/// Which approvals to list.
#[derive(Debug, Clone, Default)]
pub struct ApprovalFilters {
    /// An approval status as the wire spells it.
    pub status: Option<String>,
    /// `human`, `policy`, `system`, `assistant`, or `automated` (the last three).
    pub decision_origin: Option<String>,
    pub page: PageRequest,
}

/// A page of the invocations `filters` selects, newest first (large fields as the store's
/// elision markers). A heavy read: it holds one of the key's places while it runs.
pub async fn list_invocations(
    state: &AppState,
    principal: &Principal,
    filters: &InvocationFilters,
) -> Result<Page<InvocationRecord>> {
    principal.require(scopes::ACTIONS_READ)?;
    let _read = state.heavy_reads.admit(principal.key.id.as_str())?;
    let page = match filters.cursor.as_deref() {
        Some(c) => PageRequest {
            offset: Some(cursor_offset(c)?),
            ..filters.page
        },
        None => filters.page,
    };
    let (limit, offset) = page.window();
    let states = match filters.status.as_deref() {
        None => None,
        Some(s) => {
            let status = InvocationStatus::parse(s).ok_or_else(|| {
                Error::validation("status", format!("`{s}` is not a known status"))
            })?;
            Some(
                EffectState::ALL
                    .into_iter()
                    .filter(|e| e.invocation_status() == status)
                    .collect(),
            )
        }
    };
    let Some(action_id) = action_filter(state, principal, filters.action.as_deref()).await? else {
        return Ok(Page::empty(limit, offset));
    };
    let filter = steward_store::InvocationFilter {
        action_id,
        states,
        limit,
        offset,
    };
    let found = state
        .store
        .list_invocations(&principal.env.id, &filter)
        .await?;
    Ok(Page::of(found, limit, offset))
}

/// A page of one action's invocations; 404 when the environment has no such action.
pub async fn invocations_for_action(
    state: &AppState,
    principal: &Principal,
    action: &str,
    filters: InvocationFilters,
) -> Result<Page<InvocationRecord>> {
    if state
        .store
        .action(&principal.env.id, action)
        .await?
        .is_none()
    {
        return Err(Error::not_found("action"));
    }
    let filters = InvocationFilters {
        action: Some(action.to_string()),
        ..filters
    };
    list_invocations(state, principal, &filters).await
}

/// One invocation, whole; 404 for an id that is not one or names none here.
pub async fn invocation(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<InvocationRecord> {
    principal.require(scopes::ACTIONS_READ)?;
    let id = InvocationId::parse(id).map_err(|_| Error::not_found("invocation"))?;
    state
        .store
        .invocation(&principal.env.id, &id)
        .await?
        .ok_or_else(|| Error::not_found("invocation"))
}

/// A page of the effects `filters` selects, newest first.
pub async fn list_effects(
    state: &AppState,
    principal: &Principal,
    filters: &EffectFilters,
) -> Result<Page<EffectRecord>> {
    principal.require(scopes::ACTIONS_READ)?;
    let (limit, offset) = filters.page.window();
    let mut states = narrow(
        None,
        "outcome",
        filters.outcome.as_deref(),
        EffectState::outcome,
    )?;
    states = narrow(
        states,
        "stage",
        filters.stage.as_deref(),
        EffectState::stage,
    )?;
    states = narrow(states, "grade", filters.grade.as_deref(), Grade::of)?;
    states = match filters.unresolved.as_deref() {
        None => states,
        Some(flag @ ("true" | "false")) => {
            let want = flag == "true";
            let base = states.unwrap_or_else(|| EffectState::ALL.to_vec());
            Some(
                base.into_iter()
                    .filter(|s| s.is_unresolved() == want)
                    .collect(),
            )
        }
        Some(_) => return Err(Error::validation("unresolved", "must be true or false")),
    };
    let Some(action_id) = action_filter(state, principal, filters.action.as_deref()).await? else {
        return Ok(Page::empty(limit, offset));
    };
    let filter = steward_store::EffectFilter {
        action_id,
        states,
        limit,
        offset,
    };
    let found = state.store.list_effects(&principal.env.id, &filter).await?;
    Ok(Page::of(found, limit, offset))
}

/// One effect with its attempts and evidence; 404 for an id that is not one or names none here.
pub async fn effect(state: &AppState, principal: &Principal, id: &str) -> Result<EffectDetail> {
    principal.require(scopes::ACTIONS_READ)?;
    let id = EffectId::parse(id).map_err(|_| Error::not_found("effect"))?;
    state
        .store
        .effect(&principal.env.id, &id)
        .await?
        .ok_or_else(|| Error::not_found("effect"))
}

/// A page of the approvals `filters` selects.
pub async fn list_approvals(
    state: &AppState,
    principal: &Principal,
    filters: &ApprovalFilters,
) -> Result<Page<ApprovalRecord>> {
    principal.require(scopes::APPROVALS_READ)?;
    let status = filters
        .status
        .as_deref()
        .map(|s| {
            ApprovalStatus::parse(s)
                .ok_or_else(|| Error::validation("status", format!("`{s}` is not a known status")))
        })
        .transpose()?;
    let origins = match filters.decision_origin.as_deref() {
        None => None,
        Some("automated") => Some(vec![
            "policy".to_string(),
            "system".to_string(),
            "assistant".to_string(),
        ]),
        Some(o @ ("human" | "policy" | "system" | "assistant")) => Some(vec![o.to_string()]),
        Some(other) => {
            return Err(Error::validation(
                "decisionOrigin",
                format!("`{other}` is not a known origin"),
            ))
        }
    };
    let (limit, offset) = filters.page.window();
    let found = state
        .store
        .list_approvals(
            &principal.env.id,
            &ApprovalFilter {
                status,
                origins,
                limit,
                offset,
            },
        )
        .await?;
    Ok(Page::of(found, limit, offset))
}

/// One approval, once decided or after waiting up to `wait_s` seconds (at most
/// [`LONG_POLL_WAIT_S_MAX`]) for a pending one to be decided. The key is read again every
/// second of the wait, and once more before an answer that waited, so a key revoked, expired
/// or rotated out mid-wait gets a 401 naming why, not the approval.
pub async fn approval(
    state: &AppState,
    principal: &Principal,
    id: &str,
    wait_s: u64,
) -> Result<ApprovalRecord> {
    principal.require(scopes::APPROVALS_READ)?;
    let id = ApprovalId::parse(id).map_err(|_| Error::not_found("approval"))?;
    let wait = Duration::from_secs(wait_s.min(LONG_POLL_WAIT_S_MAX));
    let deadline = tokio::time::Instant::now() + wait;
    let watch = KeyWatch::new(state, principal);
    let key_ended = watch.ended();
    tokio::pin!(key_ended);
    let mut waited = false;
    loop {
        // Register for the wake-up before reading, so a decision between the read and the wait
        // is not missed.
        let notified = state.approval_events.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let approval = state
            .store
            .approval(&principal.env.id, &id)
            .await?
            .ok_or_else(|| Error::not_found("approval"))?;
        if approval.status != ApprovalStatus::Pending || tokio::time::Instant::now() >= deadline {
            if waited {
                if let Some(end) = watch.check().await {
                    return Err(end.error());
                }
            }
            return Ok(approval);
        }
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep_until(deadline) => {}
            end = &mut key_ended => return Err(end.error()),
        }
        waited = true;
    }
}

/// Narrows a set of states by a wire value of one of their derived properties.
fn narrow<T: serde::Serialize>(
    states: Option<Vec<EffectState>>,
    field: &str,
    value: Option<&str>,
    property: impl Fn(EffectState) -> T,
) -> Result<Option<Vec<EffectState>>> {
    let Some(value) = value else {
        return Ok(states);
    };
    let wire = |s: EffectState| {
        serde_json::to_value(property(s))
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
    };
    if !EffectState::ALL
        .iter()
        .any(|s| wire(*s).as_deref() == Some(value))
    {
        return Err(Error::validation(
            field,
            format!("`{value}` is not a known value"),
        ));
    }
    let base = states.unwrap_or_else(|| EffectState::ALL.to_vec());
    Ok(Some(
        base.into_iter()
            .filter(|s| wire(*s).as_deref() == Some(value))
            .collect(),
    ))
}

/// The action a reference names (`Some(Some(id))`), no filter (`Some(None)`), or `None` when
/// the reference names nothing and the answer is an empty page.
async fn action_filter(
    state: &AppState,
    principal: &Principal,
    reference: Option<&str>,
) -> Result<Option<Option<ActionId>>> {
    let Some(reference) = reference else {
        return Ok(Some(None));
    };
    Ok(state
        .store
        .action(&principal.env.id, reference)
        .await?
        .map(|a| Some(a.id))
        .or_else(|| ActionId::parse(reference).ok().map(Some)))
}

/// The offset a list cursor (`o<offset>`, `api/bounded.rs::cursor`) stands for, or a
/// validation error naming `cursor`.
pub fn cursor_offset(cursor: &str) -> Result<u32> {
    cursor
        .strip_prefix('o')
        .and_then(|n| n.parse::<u32>().ok())
        .ok_or_else(|| Error::validation("cursor", "is not a cursor this server gave"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_request_is_clamped_and_defaults_to_the_first_page() {
        let asked = |limit, offset| PageRequest { limit, offset }.window();
        assert_eq!(asked(None, None), (PAGE_LIMIT_DEFAULT, 0));
        assert_eq!(asked(Some(0), Some(7)), (1, 7));
        assert_eq!(asked(Some(PAGE_LIMIT_MAX + 1), None), (PAGE_LIMIT_MAX, 0));
    }
}
