//! The receipt issuer: follows the sealed audit log and signs one receipt per settlement
//! (`steward_store::Receipts` has the scheme), in the background, off the write path.
//!
//! Every server process runs it. Each round reads the cursor, the sealed events after it (at
//! most [`ISSUE_BATCH_EVENTS_MAX`]), the records each settlement names, and each environment's
//! chain head; signs the batch; and commits it with the cursor's new place. A round that loses
//! a race with another replica's commits nothing and starts over from the new cursor; a round
//! that fails is retried at the next tick. Either way no settlement is skipped or receipted
//! twice.

use super::build::{receipt, settlement_of, Facts, Place, Settlement};
use super::keys;
use crate::api::key_names::KeyNames;
use crate::state::AppState;
use std::collections::HashMap;
use std::time::Duration;
use steward_core::receipt::{sign, GENESIS_DIGEST};
use steward_core::EnvironmentId;
use steward_store::{IssueOutcome, ReceiptBatch, ReceiptRecord, StoreError};

/// How often the issuer looks for new sealed settlements, in milliseconds: with the audit
/// sealer's interval, about how long a settlement waits for its receipt while both keep up.
pub const RECEIPT_ISSUE_INTERVAL_MS: u64 = 250;

/// The most sealed audit events one round reads (of every kind; only settlements get receipts):
/// a round of this many reads and signs in well under a second, and a backlog drains round
/// after round.
pub const ISSUE_BATCH_EVENTS_MAX: u32 = 200;

/// Issues forever, every [`RECEIPT_ISSUE_INTERVAL_MS`].
pub(crate) async fn run(state: AppState) {
    let mut tick = tokio::time::interval(Duration::from_millis(RECEIPT_ISSUE_INTERVAL_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        loop {
            match issue_once(&state).await {
                Ok(Round::More) => {}
                Ok(Round::Done) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "issuing receipts failed; retrying");
                    break;
                }
            }
        }
    }
}

/// What one round left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Round {
    /// It read a full batch, or lost a race: go again at once.
    More,
    /// Nothing more is sealed past the cursor.
    Done,
}

/// Why a round failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IssueError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Key(#[from] keys::ReceiptKeyError),
    #[error("settlement at audit seq {audit_seq} names {what} that is not stored")]
    Missing { audit_seq: i64, what: &'static str },
}

/// One round: read, sign, commit. Public to the crate so tests can drive it without a timer.
pub(crate) async fn issue_once(state: &AppState) -> Result<Round, IssueError> {
    let store = &state.store;
    let cursor = store.receipt_cursor().await?;
    let events = store.audit_events(cursor, ISSUE_BATCH_EVENTS_MAX).await?;
    let Some(through) = events.last().and_then(|e| e.seq()) else {
        return Ok(Round::Done);
    };
    let settlements: Vec<Settlement> = events.iter().filter_map(settlement_of).collect();
    let receipts = if settlements.is_empty() {
        Vec::new()
    } else {
        sign_all(state, &settlements).await?
    };
    let batch = ReceiptBatch {
        after_audit_seq: cursor,
        through_audit_seq: through,
        receipts,
    };
    Ok(match store.issue_receipts(&batch).await? {
        IssueOutcome::Issued { .. } if events.len() < ISSUE_BATCH_EVENTS_MAX as usize => {
            Round::Done
        }
        IssueOutcome::Issued { .. } | IssueOutcome::Moved => Round::More,
    })
}

/// Signs the receipts of `settlements`, in order, each after its environment's last.
async fn sign_all(
    state: &AppState,
    settlements: &[Settlement],
) -> Result<Vec<ReceiptRecord>, IssueError> {
    let (key_record, key) = keys::current(state.store.as_ref(), &state.vault).await?;
    let mut heads: HashMap<EnvironmentId, (i64, String)> = HashMap::new();
    let mut names: HashMap<EnvironmentId, KeyNames> = HashMap::new();
    let mut out = Vec::with_capacity(settlements.len());
    for s in settlements {
        if !heads.contains_key(&s.env) {
            let head = state.store.receipt_head(&s.env).await?;
            heads.insert(
                s.env.clone(),
                head.unwrap_or((0, GENESIS_DIGEST.to_string())),
            );
        }
        if !names.contains_key(&s.env) {
            let of = KeyNames::of(state, &s.env)
                .await
                .map_err(|_| IssueError::Missing {
                    audit_seq: s.audit_seq,
                    what: "the environment's keys",
                })?;
            names.insert(s.env.clone(), of);
        }
        let (seq, previous) = heads[&s.env].clone();
        let built =
            facts_and_build(state, s, &names[&s.env], seq + 1, &previous, &key_record.id).await?;
        let signed = sign(&built.0, &key);
        out.push(ReceiptRecord {
            env_id: s.env.clone(),
            seq: seq + 1,
            effect_id: built.1,
            audit_seq: s.audit_seq,
            key_id: key_record.id.clone(),
            digest: signed.digest.clone(),
            previous_digest: previous,
            body: signed.receipt,
            issued_at: state.clock.now(),
        });
        heads.insert(s.env.clone(), (seq + 1, signed.digest));
    }
    Ok(out)
}

/// Reads what settlement `s` names and builds its receipt at `sequence` after `previous`.
async fn facts_and_build(
    state: &AppState,
    s: &Settlement,
    names: &KeyNames,
    sequence: i64,
    previous: &str,
    key_id: &str,
) -> Result<(steward_core::receipt::Receipt, steward_core::EffectId), IssueError> {
    let missing = |what| IssueError::Missing {
        audit_seq: s.audit_seq,
        what,
    };
    let effect_id = match (&s.effect, &s.invocation) {
        (Some(effect), _) => effect.clone(),
        (None, Some(inv)) => {
            state
                .store
                .invocation(&s.env, inv)
                .await?
                .ok_or_else(|| missing("an invocation"))?
                .effect_id
        }
        (None, None) => return Err(missing("an effect")),
    };
    let detail = state
        .store
        .effect(&s.env, &effect_id)
        .await?
        .ok_or_else(|| missing("an effect"))?;
    let invocation = state
        .store
        .invocation(&s.env, &detail.effect.invocation_id)
        .await?
        .ok_or_else(|| missing("an invocation"))?;
    let approval = match invocation
        .approval_id
        .as_deref()
        .map(steward_core::ApprovalId::parse)
    {
        Some(Ok(id)) => state.store.approval(&s.env, &id).await?,
        _ => None,
    };
    let facts = Facts {
        settlement: s,
        detail: &detail,
        invocation: &invocation,
        approval: approval.as_ref(),
        names,
    };
    let place = Place {
        sequence: sequence as u64,
        previous_digest: previous,
        issued_at: state.clock.now().0,
        key_id,
    };
    Ok((receipt(&facts, &place), effect_id))
}
