//! What an approval decision does to the effect it parked, the same in every backend: each
//! backend applies the change in the decision's own transaction.

use crate::error::{StoreError, StoreResult};
use crate::records::{Actor, ApprovalRecord, EffectChange, NewEvidence};
use serde_json::json;
use steward_core::{next, EffectEvent, EffectState};

/// Why the system cancels the approvals parked on an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cancellation {
    ActionDisabled,
    ActionDeleted,
}

impl Cancellation {
    /// The evidence written on each cancelled effect.
    pub(crate) fn message(self) -> &'static str {
        match self {
            Cancellation::ActionDisabled => {
                "the action was disabled while this invocation awaited approval; nothing was sent"
            }
            Cancellation::ActionDeleted => {
                "the action was deleted while this invocation awaited approval; nothing was sent"
            }
        }
    }

    /// The cancellation an action change implies, if any: disabling an enabled action, or
    /// deleting one. Re-enabling does not revive what was cancelled.
    pub(crate) fn of_update(before_enabled: bool, after_enabled: bool) -> Option<Self> {
        (before_enabled && !after_enabled).then_some(Cancellation::ActionDisabled)
    }
}

/// The parked effect's transition for `event` (`Approve`, `Deny`, `Expire`), with its evidence;
/// `None` for a custom request, which parks no effect.
pub(crate) fn effect_change(
    a: &ApprovalRecord,
    event: EffectEvent,
    message: String,
    actor: &Actor,
) -> StoreResult<Option<EffectChange>> {
    let Some(effect) = &a.effect_id else {
        return Ok(None);
    };
    let (to, _) = next(EffectState::AwaitingApproval, event)
        .map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let mut change = EffectChange::new(
        &a.env_id,
        effect,
        EffectState::AwaitingApproval,
        to,
        actor.clone(),
    );
    change.evidence = Some(
        NewEvidence::new("approval", "approval", message).with_data(json!({"approvalId": a.id})),
    );
    if to != EffectState::Ready {
        change.error = Some(json!({
            "code": format!("approval_{}", to.invocation_status().as_str()),
            "message": "the approval was not granted; nothing was sent",
        }));
    }
    Ok(Some(change))
}
