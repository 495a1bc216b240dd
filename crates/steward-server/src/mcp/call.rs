//! A `tools/call` turned into an invoke: the tool names the action, the arguments carry its
//! input (the arguments themselves, or their `input` when the action's input is not an
//! object: [`tools::Arguments`]), and the operation key comes from the `operationKey` argument
//! or the `_meta` key [`META_OPERATION_KEY`] (only `_meta` when the action's own input has an
//! `operationKey` property), never from the JSON-RPC id (a per-connection counter). The invoke
//! runs through `app::invoke::invoke`, the function `POST /actions/{ref}/invoke` calls, so
//! governance, operation keys, approvals, limits and the halt apply exactly as there. The
//! principal is the one the guard authenticated (`http.rs`): a call authenticates once, and the
//! action comes from the catalog the tool was found in.

use super::derive::{self, KeyPolicy};
use super::result::{Envelope, Status};
use super::task::TaskIdentity;
use super::tools::{self, Arguments, INPUT_ARGUMENT, OPERATION_KEY_ARGUMENT};
use crate::api::views;
use crate::app::account_gate::Unusable;
use crate::app::invoke::{Failure, Invoke};
use crate::app::{self, Principal};
use crate::error::{codes, ApiError};
use crate::progress::Progress;
use crate::state::AppState;
use rmcp::ErrorData;
use serde_json::{Map, Value};
use steward_core::{scopes, ApprovalId, EffectState, Millis, MissingOperationKey, OperationKey};
use steward_store::{ActionRecord, InvocationRecord, WITHDRAWN_ORIGIN};

pub use super::tools::META_OPERATION_KEY;

/// The code of a call refused, unrecorded, because an account it acts through must be
/// connected (again) by a person first.
pub const NEEDS_ACCOUNT_CODE: &str = "connection_required";

/// What the model is told then.
const NEEDS_ACCOUNT_INSTRUCTION: &str = "a person must connect this account before the call can run (the host shows them a sign-in link when it supports URL elicitation; otherwise an operator reconnects it); then call again with the same operationKey; nothing was done, and never ask the user for a password or token";

/// What the model is told when a governed tool is called without an operation key.
const OPERATION_KEY_REQUIRED: &str = "call again with an operationKey: a stable key you choose for this business operation (for example a short description plus a random suffix), and reuse the same key if you retry this same operation; nothing was done";

/// The tools `caller` may call: every enabled action of its environment when it may invoke
/// actions, none otherwise.
pub async fn list(state: &AppState, caller: &Principal) -> Result<Vec<Value>, ApiError> {
    if !caller.has(scopes::ACTIONS_INVOKE) {
        return Ok(Vec::new());
    }
    let actions = state.store.list_actions(&caller.env.id).await?;
    Ok(tools::catalog(&actions)
        .into_iter()
        .map(|(name, action)| tools::tool(&name, &action.definition))
        .collect())
}

/// A call's answer and, when it recorded a governed invocation, what names it as a task.
#[derive(Debug, Clone)]
pub struct Called {
    pub envelope: Envelope,
    pub recorded: Option<Recorded>,
    /// The account a person must connect before the call can run; nothing was recorded.
    pub needs_account: Option<Unusable>,
}

/// A governed invocation as a task sees it (`task.rs`).
#[derive(Debug, Clone)]
pub struct Recorded {
    pub identity: TaskIdentity,
    pub created: Millis,
    pub updated: Millis,
    /// Its approval, while it awaits one.
    pub pending_approval: Option<ApprovalId>,
    /// Denied because its caller withdrew it (`tasks/cancel` before anyone decided).
    pub withdrawn: bool,
}

impl Recorded {
    fn of(invocation: &InvocationRecord, withdrawn: bool) -> Option<Recorded> {
        if !invocation.governed {
            return None;
        }
        let identity = TaskIdentity {
            env: invocation.env_id.clone(),
            action: invocation.action_id.clone(),
            operation_key: invocation.operation_key.clone()?,
        };
        let pending_approval = match invocation.state {
            EffectState::AwaitingApproval => invocation
                .approval_id
                .as_deref()
                .and_then(|id| ApprovalId::parse(id).ok()),
            _ => None,
        };
        Some(Recorded {
            identity,
            created: invocation.created_at,
            updated: invocation.completed_at.unwrap_or(invocation.created_at),
            pending_approval,
            withdrawn,
        })
    }
}

/// The envelope of a recorded invocation, with the denial's note, and the task that names it.
async fn answer(state: &AppState, invocation: &InvocationRecord) -> Called {
    let view = serde_json::to_value(views::invocation(invocation)).expect("a view is plain JSON");
    let mut envelope = Envelope::of_invocation(&view);
    let mut withdrawn = false;
    if envelope.status == Status::Denied {
        let denial = denial(state, invocation).await;
        withdrawn = denial.withdrawn;
        envelope.note_denial(denial.note);
    }
    Called {
        envelope,
        recorded: Recorded::of(invocation, withdrawn),
        needs_account: None,
    }
}

/// The task `identity` names, as `caller` may see it: `None` when it names no invocation of
/// the caller's environment (another environment's task is not found, never refused).
pub async fn task(
    state: &AppState,
    caller: &Principal,
    identity: &TaskIdentity,
) -> Result<Option<Called>, ApiError> {
    caller.require(scopes::ACTIONS_INVOKE)?;
    if identity.env != caller.env.id {
        return Ok(None);
    }
    let found = state
        .store
        .invocation_by_operation_key(&identity.env, &identity.action, &identity.operation_key)
        .await?;
    Ok(match found {
        Some(invocation) => Some(answer(state, &invocation).await),
        None => None,
    })
}

/// What `tasks/cancel` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// The call awaited approval and is withdrawn: it never runs.
    Withdrawn,
    /// The call was past approval (dispatching or settled): it goes on; only the client stops
    /// waiting.
    TooLate,
}

/// Cancels the task `identity` names for `caller`: withdraws it while it awaits approval (only
/// the key that made the call may); otherwise nothing changes. `None` when there is no such task.
pub async fn cancel(
    state: &AppState,
    caller: &Principal,
    identity: &TaskIdentity,
) -> Result<Option<Cancelled>, ApiError> {
    let Some(called) = task(state, caller, identity).await? else {
        return Ok(None);
    };
    let Some(approval) = called.recorded.and_then(|r| r.pending_approval) else {
        return Ok(Some(Cancelled::TooLate));
    };
    Ok(Some(
        match app::approvals::withdraw(state, caller, &approval).await? {
            steward_store::Withdrawal::Withdrawn(_) => Cancelled::Withdrawn,
            // Decided or expired first: the decision stands.
            _ => Cancelled::TooLate,
        },
    ))
}

/// Runs one `tools/call`. An unknown tool is a protocol error (`invalid_params`); everything
/// else, refusals included, is an [`Envelope`].
pub async fn call(
    state: &AppState,
    keys: &KeyPolicy,
    caller: &Principal,
    tool: &str,
    arguments: Option<Map<String, Value>>,
    meta_key: Option<&Value>,
    progress: Progress,
) -> Result<Called, ErrorData> {
    let unrecorded = |envelope: Envelope| {
        Ok(Called {
            envelope,
            recorded: None,
            needs_account: None,
        })
    };
    if let Err(e) = caller.require(scopes::ACTIONS_INVOKE) {
        return unrecorded(Envelope::of_error(&e, None));
    }
    let actions = match state.store.list_actions(&caller.env.id).await {
        Ok(actions) => actions,
        Err(e) => return unrecorded(Envelope::of_error(&e.into(), None)),
    };
    let catalog = tools::catalog(&actions);
    let Some(action) = catalog.get(tool) else {
        return Err(ErrorData::invalid_params(
            format!("no tool named {tool:?} is offered to this key"),
            None,
        ));
    };
    let shape = tools::arguments(&action.definition);
    let mut arguments = arguments.unwrap_or_default();
    let argument_key = match shape {
        Arguments::InputOwningOperationKey => None,
        Arguments::Input | Arguments::Wrapped => arguments.remove(OPERATION_KEY_ARGUMENT),
    };
    let input = match shape {
        Arguments::Wrapped => match unwrapped(arguments) {
            Ok(input) => input,
            Err(e) => return unrecorded(Envelope::of_error(&e, None)),
        },
        Arguments::Input | Arguments::InputOwningOperationKey => Value::Object(arguments),
    };
    let operation_key = match operation_key(argument_key.as_ref(), meta_key) {
        Ok(key) => key,
        Err(e) => return unrecorded(Envelope::of_error(&e, None)),
    };
    let mut derived = false;
    let operation_key = match operation_key {
        Some(key) => Some(key),
        None if !action.definition.is_governed() => None,
        None => match keys.for_action(action.definition.mcp_missing_operation_key) {
            MissingOperationKey::Refuse => {
                return unrecorded(Envelope::rejected(
                    "operation_key_required",
                    "operationKey: is required for this tool",
                    OPERATION_KEY_REQUIRED,
                ))
            }
            MissingOperationKey::Derive => {
                let key = match derived_key(state, keys, caller, action, &input).await {
                    Ok(key) => key,
                    Err(e) => return unrecorded(Envelope::of_error(&e, None)),
                };
                derived = true;
                Some(key.as_str().to_string())
            }
        },
    };
    let sent_key = operation_key.as_deref();
    let operation_key = match sent_key.map(OperationKey::parse).transpose() {
        Ok(key) => key,
        Err(e) => {
            let refused = ApiError::validation("operationKey", e.to_string());
            return unrecorded(Envelope::of_error(&refused, sent_key));
        }
    };
    let invoked = match app::invoke::context(state, caller, (*action).clone()).await {
        Ok(context) => {
            let key = operation_key.as_ref();
            if let Some(needed) = account_needed(state, caller, action, &context, key).await {
                return Ok(refused_for_account(needed));
            }
            let request = Invoke {
                input,
                operation_key,
                ..Invoke::default()
            };
            app::invoke::invoke(state, caller, context, request, progress).await
        }
        Err(e) => Err(Failure::of(e)),
    };
    let mut called = match invoked {
        Ok(invoked) => answer(state, &invoked.invocation).await,
        // The answer of a provider call could not be recorded: the error says so itself.
        Err(Failure::OutcomeUnknown(e)) if e.code == codes::OUTCOME_UNKNOWN.code => Called {
            envelope: Envelope::of_error(&e, sent_key),
            recorded: None,
            needs_account: None,
        },
        Err(Failure::OutcomeUnknown(_)) => {
            // The invoke may have been recorded before the failure: the same key finds it.
            let unknown = ApiError::of(
                codes::OUTCOME_UNKNOWN,
                "the server could not answer; call again with the same operationKey to see what was recorded",
            );
            Called {
                envelope: Envelope::of_error(&unknown, sent_key),
                recorded: None,
                needs_account: None,
            }
        }
        Err(Failure::Refused(e)) => Called {
            envelope: Envelope::of_error(&e, sent_key),
            recorded: None,
            needs_account: None,
        },
    };
    if derived {
        called.envelope.note_derived_key(keys.window);
    }
    Ok(called)
}

/// The account a person must connect before this call may run (`app/account_gate.rs`), unless
/// the operation key already names an invocation (then the call answers what was recorded).
/// A read that fails stops nothing: the invoke reports what it finds.
async fn account_needed(
    state: &AppState,
    caller: &Principal,
    action: &ActionRecord,
    context: &app::invoke::Context,
    operation_key: Option<&OperationKey>,
) -> Option<Unusable> {
    let needed = app::account_gate::unusable(state, caller, action, &context.secrets)
        .await
        .ok()??;
    if let Some(key) = operation_key {
        let recorded = state
            .store
            .invocation_by_operation_key(&caller.env.id, &action.id, key)
            .await;
        if !matches!(recorded, Ok(None)) {
            return None;
        }
    }
    Some(needed)
}

/// The answer of a call refused, with nothing recorded, for want of `needed`.
fn refused_for_account(needed: Unusable) -> Called {
    let envelope = Envelope::rejected(
        NEEDS_ACCOUNT_CODE,
        &needed.message(),
        NEEDS_ACCOUNT_INSTRUCTION,
    );
    Called {
        envelope,
        recorded: None,
        needs_account: Some(needed),
    }
}

/// The operation key derived for a call without one (`derive.rs`): the previous bucket's key
/// when it already names a recent invocation, else the current bucket's.
async fn derived_key(
    state: &AppState,
    keys: &KeyPolicy,
    caller: &Principal,
    action: &ActionRecord,
    input: &Value,
) -> Result<OperationKey, ApiError> {
    let now = state.clock.now();
    let basis = derive::Basis {
        key: &caller.key.id,
        action: &action.id,
        version: action.version,
        input,
    };
    let [current, previous] = derive::candidates(&basis, keys, now);
    let earlier = state
        .store
        .invocation_by_operation_key(&caller.env.id, &action.id, &previous)
        .await?;
    Ok(match earlier {
        Some(found) if derive::within_window(keys, found.created_at, now) => previous,
        _ => current,
    })
}

/// How a denial came about, as its approval says.
struct Denial {
    /// The note the person who denied it left, if any.
    note: Option<String>,
    /// Its caller withdrew it before anyone decided (`tasks/cancel`).
    withdrawn: bool,
}

/// The denial that rejected `invocation`. A failure to read the approval only leaves the note
/// out: the status is already settled.
async fn denial(state: &AppState, invocation: &InvocationRecord) -> Denial {
    let none = Denial {
        note: None,
        withdrawn: false,
    };
    let Some(id) = invocation.approval_id.as_deref() else {
        return none;
    };
    let Ok(id) = ApprovalId::parse(id) else {
        return none;
    };
    let Ok(Some(approval)) = state.store.approval(&invocation.env_id, &id).await else {
        return none;
    };
    Denial {
        note: views::decision_note(&approval).map(str::to_string),
        withdrawn: approval.decision_origin.as_deref() == Some(WITHDRAWN_ORIGIN),
    }
}

/// The input of a wrapped tool: its `input` argument, which must be there and alone (beside
/// the operation key, already taken out).
fn unwrapped(mut arguments: Map<String, Value>) -> Result<Value, ApiError> {
    if let Some(other) = arguments.keys().find(|k| *k != INPUT_ARGUMENT) {
        return Err(ApiError::validation(
            other.clone(),
            format!(
                "is not an argument of this tool: pass the action's input as `{INPUT_ARGUMENT}`"
            ),
        ));
    }
    arguments.remove(INPUT_ARGUMENT).ok_or_else(|| {
        ApiError::validation(
            INPUT_ARGUMENT,
            "is required: this action's input is not an object, so the tool takes it whole as `input`",
        )
    })
}

/// The operation key from the argument or `_meta`; both given must agree.
fn operation_key(
    argument: Option<&Value>,
    meta: Option<&Value>,
) -> Result<Option<String>, ApiError> {
    let as_key = |v: &Value, field: &str| match v {
        Value::String(s) => Ok(Some(s.clone())),
        Value::Null => Ok(None),
        _ => Err(ApiError::validation(field, "must be a string")),
    };
    let argument = argument
        .map(|v| as_key(v, OPERATION_KEY_ARGUMENT))
        .transpose()?
        .flatten();
    let meta = meta
        .map(|v| as_key(v, &format!("_meta.{META_OPERATION_KEY}")))
        .transpose()?
        .flatten();
    match (argument, meta) {
        (Some(a), Some(m)) if a != m => Err(ApiError::validation(
            OPERATION_KEY_ARGUMENT,
            format!("differs from _meta.{META_OPERATION_KEY}; send one key"),
        )),
        (a, m) => Ok(a.or(m)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_operation_key_comes_from_the_argument_or_meta_and_both_must_agree() {
        let k = json!("op-1");
        assert_eq!(
            operation_key(Some(&k), None).unwrap().as_deref(),
            Some("op-1")
        );
        assert_eq!(
            operation_key(None, Some(&k)).unwrap().as_deref(),
            Some("op-1")
        );
        assert_eq!(
            operation_key(Some(&k), Some(&k)).unwrap().as_deref(),
            Some("op-1")
        );
        assert_eq!(operation_key(None, None).unwrap(), None);
        let err = operation_key(Some(&k), Some(&json!("op-2"))).unwrap_err();
        assert!(err.message.contains("operationKey"));
        let err = operation_key(Some(&json!(7)), None).unwrap_err();
        assert!(err.message.contains("operationKey: must be a string"));
    }

    #[test]
    fn a_wrapped_input_is_the_input_argument_alone() {
        let args = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(
            unwrapped(args(json!({"input": [1, 2]}))).unwrap(),
            json!([1, 2])
        );
        assert_eq!(
            unwrapped(args(json!({"input": null}))).unwrap(),
            Value::Null
        );
        let err = unwrapped(args(json!({}))).unwrap_err();
        assert_eq!(err.details.as_ref().unwrap()["field"], "input");
        let err = unwrapped(args(json!({"input": "x", "extra": 1}))).unwrap_err();
        assert_eq!(err.details.as_ref().unwrap()["field"], "extra");
    }
}
