//! The kill switch: halting an environment, and the work a halt parked.

use super::audit_log::{append, Entry};
use super::conn::Tx;
use super::identity::environment;
use super::rows;
use crate::error::{StoreError, StoreResult};
use crate::records::*;
use serde_json::json;
use steward_core::EnvironmentId;

/// Halts (`halted = true`, with a reason) or resumes an environment: the kill switch.
pub(crate) async fn set_halted(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    halted: bool,
    reason: Option<&str>,
    actor: &Actor,
) -> StoreResult<Environment> {
    let before = environment(tx, env).await?.ok_or(StoreError::NotFound {
        what: "environment",
    })?;
    let reason = if halted { reason } else { None };
    tx.execute(
        "UPDATE environments SET halted = $1, halt_reason = $2 WHERE id = $3",
        &[&halted, &reason, &env.as_str()],
    )
    .await?;
    append(
        tx,
        actor,
        Entry {
            env: Some(env.as_str()),
            kind: if halted {
                "environment.halted"
            } else {
                "environment.resumed"
            },
            subject: env.as_str(),
            before: Some(json!({"halted": before.halted, "reason": before.halt_reason})),
            after: Some(json!({"halted": halted, "reason": reason})),
        },
    )
    .await?;
    environment(tx, env).await?.ok_or(StoreError::NotFound {
        what: "environment",
    })
}

/// True while the environment is halted. Read inside the transaction that records an attempt,
/// behind the write lock, so no attempt committed after a halt can be sent.
pub(crate) async fn is_halted(tx: &Tx<'_>, env: &EnvironmentId) -> StoreResult<bool> {
    Ok(environment(tx, env).await?.is_some_and(|e| e.halted))
}

/// Every invocation in the environment whose effect is `ready` (allowed to run, not attempted):
/// the work a halt parked, dispatched once on resume.
pub(crate) async fn ready_invocations(
    tx: &Tx<'_>,
    env: &EnvironmentId,
) -> StoreResult<Vec<InvocationRecord>> {
    let sql = format!(
        "SELECT {} FROM invocations WHERE env_id = $1 AND state = 'ready' ORDER BY created_at, id",
        rows::INVOCATION_COLUMNS
    );
    tx.all(&sql, &[&env.as_str()], rows::invocation).await
}
