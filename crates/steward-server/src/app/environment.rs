//! The kill switch: halting an environment (invokes are refused and nothing is sent) and
//! resuming it (the work parked meanwhile is dispatched once). `POST /environment/halt|resume`
//! (`api/environment.rs`) and the console's environment page (`console/environment.rs`) both
//! call these.

use super::{seam, Error, Principal, Result};
use crate::state::AppState;
use steward_core::{scopes, UnkeyedInvokes};
use steward_store::{Actor, Environment, HaltChange, UnkeyedChange};

/// The longest halt reason kept, in bytes.
pub const HALT_REASON_LEN_MAX: usize = 1_000;

/// What a resume came to: the environment, and how many parked effects it dispatched.
#[derive(Debug)]
pub struct Resumed {
    pub environment: Environment,
    pub released: usize,
}

/// Refuses a halt reason longer than [`HALT_REASON_LEN_MAX`], naming `reason`.
pub fn check_reason(reason: Option<&str>) -> Result<()> {
    if reason.is_some_and(|r| r.len() > HALT_REASON_LEN_MAX) {
        return Err(Error::validation(
            "reason",
            format!("must be at most {HALT_REASON_LEN_MAX} bytes"),
        ));
    }
    Ok(())
}

/// Halts the principal's environment, with `reason` if given.
pub async fn halt(
    state: &AppState,
    principal: &Principal,
    reason: Option<&str>,
) -> Result<Environment> {
    seam::reached(state, seam::UseCase::Halt);
    principal.require(scopes::ENVIRONMENTS_HALT)?;
    check_reason(reason)?;
    let actor = Actor::key(&principal.key.id, state.clock.now());
    let env = state
        .store
        .set_halted(HaltChange::halt(&principal.env.id, reason), &actor)
        .await?;
    tracing::warn!(environment = %env.id, "environment halted");
    Ok(env)
}

/// Sets what the principal's environment does with a governed invoke that carries neither an
/// operation key nor an `Idempotency-Key` (`app/invoke.rs` reads it with the caller's key, so
/// it holds from the next request on, on every replica).
pub async fn set_unkeyed_invokes(
    state: &AppState,
    principal: &Principal,
    setting: UnkeyedInvokes,
) -> Result<Environment> {
    principal.require(scopes::ENVIRONMENTS_HALT)?;
    let actor = Actor::key(&principal.key.id, state.clock.now());
    let env = state
        .store
        .set_unkeyed_invokes(
            UnkeyedChange {
                env: &principal.env.id,
                setting,
            },
            &actor,
        )
        .await?;
    tracing::info!(environment = %env.id, unkeyed_invokes = setting.as_str(), "environment setting changed");
    Ok(env)
}

/// Resumes the principal's environment and dispatches what was parked while it was halted.
pub async fn resume(state: &AppState, principal: &Principal) -> Result<Resumed> {
    seam::reached(state, seam::UseCase::Resume);
    principal.require(scopes::ENVIRONMENTS_HALT)?;
    let actor = Actor::key(&principal.key.id, state.clock.now());
    let env = state
        .store
        .set_halted(HaltChange::resume(&principal.env.id), &actor)
        .await?;
    let released = crate::dispatch::park::release(state, &env.id).await?;
    tracing::info!(environment = %env.id, released, "environment resumed");
    Ok(Resumed {
        environment: env,
        released,
    })
}
