//! Approvals: requests, decisions, expiry. A decision and the parked effect's transition commit
//! together, so an approval can release its invocation exactly once. Decisions run behind the
//! write lock, so concurrent decisions on one approval are tallied one after the other.

use super::audit_log::{append, Entry};
use super::conn::Tx;
use super::conn::{in_transaction, Mode};
use super::effects::{change_effect, invocation};
use super::rows::{self, col, id, id_opt, int, int_opt, millis, millis_opt};
use super::PostgresStore;
use crate::approval_change::DecisionPlan;
use crate::error::{StoreError, StoreResult};
use crate::records::*;
use crate::store::Approvals;
use async_trait::async_trait;
use serde_json::json;
use steward_core::*;
use tokio::sync::broadcast;
use tokio_postgres::Row;

const COLUMNS: &str = "id, env_id, status, title, description, payload, invocation_id, effect_id, action_id, action_version, input_fingerprint, requested_by, required_approvals, decision_origin, decided_at, expires_at, run_id, created_at";

fn decode(row: &Row) -> StoreResult<ApprovalRecord> {
    let status: &str = col(row, 2)?;
    Ok(ApprovalRecord {
        id: id(row, 0, ApprovalId::parse)?,
        env_id: id(row, 1, EnvironmentId::parse)?,
        status: ApprovalStatus::parse(status)
            .ok_or_else(|| rows::corrupt("approval status", status))?,
        title: col(row, 3)?,
        description: col(row, 4)?,
        payload: rows::json(row, 5, "payload")?,
        invocation_id: id_opt(row, 6, InvocationId::parse)?,
        effect_id: id_opt(row, 7, EffectId::parse)?,
        action_id: id_opt(row, 8, ActionId::parse)?,
        action_version: int_opt(row, 9)?,
        input_fingerprint: col(row, 10)?,
        requested_by: id(row, 11, KeyId::parse)?,
        required_approvals: int(row, 12)?,
        decision_origin: col(row, 13)?,
        decided_at: millis_opt(row, 14)?,
        expires_at: millis_opt(row, 15)?,
        run_id: col(row, 16)?,
        created_at: millis(row, 17)?,
        decisions: Vec::new(),
    })
}

fn decode_decision(row: &Row) -> StoreResult<DecisionRecord> {
    let decision: &str = col(row, 1)?;
    Ok(DecisionRecord {
        key: id(row, 0, KeyId::parse)?,
        decision: match decision {
            "approve" => Decision::Approve,
            "deny" => Decision::Deny,
            other => return Err(rows::corrupt("decision", other)),
        },
        note: col(row, 2)?,
        at: millis(row, 3)?,
    })
}

async fn with_decisions(tx: &Tx<'_>, mut a: ApprovalRecord) -> StoreResult<ApprovalRecord> {
    a.decisions = tx
        .all(
            "SELECT key_id, decision, note, at FROM approval_decisions WHERE approval_id = $1 ORDER BY at, key_id",
            &[&a.id.as_str()],
            decode_decision,
        )
        .await?;
    Ok(a)
}

pub(crate) async fn approval(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    id: &ApprovalId,
) -> StoreResult<Option<ApprovalRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM approvals WHERE env_id = $1 AND id = $2");
    match tx.one(&sql, &[&env.as_str(), &id.as_str()], decode).await? {
        Some(a) => Ok(Some(with_decisions(tx, a).await?)),
        None => Ok(None),
    }
}

/// What a gated invocation's approval is bound to: what the approver sees is what runs.
pub(crate) struct Binding<'a> {
    pub invocation: &'a InvocationId,
    pub effect: &'a EffectId,
    pub action: &'a ActionId,
    pub version: u32,
    pub input_fingerprint: &'a str,
}

pub(crate) async fn insert(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    a: &NewApproval,
    requested_by: &KeyId,
    binding: Option<Binding<'_>>,
    now: Millis,
) -> StoreResult<()> {
    let required = a.required_approvals.max(1);
    tx.execute_unique(
        "approval",
        &format!("INSERT INTO approvals ({COLUMNS}) VALUES ($1, $2, 'pending', $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, NULL, NULL, $13, $14, $15)"),
        &[
            &a.id.as_str(), &env.as_str(), &a.title, &a.description, &a.payload.to_string(),
            &binding.as_ref().map(|b| b.invocation.as_str()), &binding.as_ref().map(|b| b.effect.as_str()),
            &binding.as_ref().map(|b| b.action.as_str()), &binding.as_ref().map(|b| i64::from(b.version)),
            &binding.as_ref().map(|b| b.input_fingerprint), &requested_by.as_str(), &i64::from(required),
            &a.expires_at.map(|t| t.0), &a.run_id, &now.0,
        ],
    )
    .await?;
    append(
        tx,
        &Actor::key(requested_by, now),
        Entry {
            env: Some(env.as_str()),
            kind: "approval.requested",
            subject: a.id.as_str(),
            before: None,
            after: Some(
                json!({"title": a.title, "requiredApprovals": required, "invocationId": binding.as_ref().map(|b| b.invocation.as_str())}),
            ),
        },
    )
    .await
}

/// Moves a parked effect with `event`, recording why.
async fn move_effect(
    tx: &Tx<'_>,
    a: &ApprovalRecord,
    event: EffectEvent,
    message: String,
    actor: &Actor,
) -> StoreResult<()> {
    match crate::approval_change::effect_change(a, event, message, actor)? {
        Some(change) => change_effect(tx, &change).await,
        None => Ok(()),
    }
}

async fn settle(
    tx: &Tx<'_>,
    a: &ApprovalRecord,
    status: ApprovalStatus,
    origin: &str,
    actor: &Actor,
) -> StoreResult<()> {
    tx.execute(
        "UPDATE approvals SET status = $1, decision_origin = $2, decided_at = $3 WHERE id = $4 AND status = 'pending'",
        &[&status.as_str(), &origin, &actor.now.0, &a.id.as_str()],
    )
    .await?;
    append(
        tx,
        actor,
        Entry {
            env: Some(a.env_id.as_str()),
            kind: "approval.settled",
            subject: a.id.as_str(),
            before: Some(json!({"status": "pending"})),
            after: Some(json!({"status": status.as_str(), "origin": origin})),
        },
    )
    .await
}

async fn expire_one(tx: &Tx<'_>, a: &ApprovalRecord, now: Millis) -> StoreResult<()> {
    let actor = Actor::system(now);
    settle(tx, a, ApprovalStatus::Expired, "system", &actor).await?;
    announce(tx, &a.id).await?;
    move_effect(
        tx,
        a,
        EffectEvent::Expire,
        "the approval expired before anyone decided; nothing was sent".into(),
        &actor,
    )
    .await
}

/// Announces a change of the approval to every replica listening
/// ([`super::notify::APPROVALS_CHANNEL`]). PostgreSQL delivers the notification when this
/// transaction commits, and never if it rolls back.
async fn announce(tx: &Tx<'_>, id: &ApprovalId) -> StoreResult<()> {
    tx.execute(
        "SELECT pg_notify($1, $2)",
        &[&super::notify::APPROVALS_CHANNEL, &id.as_str()],
    )
    .await?;
    Ok(())
}

/// Denies, as the system, every pending approval parking an invocation of `action`: called in
/// the transaction that disables or deletes the action, so approving later cannot run it.
pub(crate) async fn cancel_for_action(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    action: &ActionId,
    why: crate::approval_change::Cancellation,
    now: Millis,
) -> StoreResult<Vec<ApprovalId>> {
    let parked = tx
        .all(
            &format!("SELECT {COLUMNS} FROM approvals WHERE env_id = $1 AND action_id = $2 AND status = 'pending' FOR UPDATE"),
            &[&env.as_str(), &action.as_str()],
            decode,
        )
        .await?;
    let actor = Actor::system(now);
    for a in &parked {
        settle(tx, a, ApprovalStatus::Denied, "system", &actor).await?;
        announce(tx, &a.id).await?;
        move_effect(tx, a, EffectEvent::Deny, why.message().into(), &actor).await?;
    }
    Ok(parked.into_iter().map(|a| a.id).collect())
}

#[async_trait]
impl Approvals for PostgresStore {
    async fn create_approval(
        &self,
        env: &EnvironmentId,
        request: &NewApproval,
        requested_by: &KeyId,
        now: Millis,
    ) -> StoreResult<ApprovalRecord> {
        in_transaction!(self, Mode::Write, |tx| async {
            let a = request;
            insert(&tx, env, a, requested_by, None, now).await?;
            approval(&tx, env, &a.id)
                .await?
                .ok_or(StoreError::NotFound { what: "approval" })
        })
    }

    async fn approval(
        &self,
        env: &EnvironmentId,
        id: &ApprovalId,
    ) -> StoreResult<Option<ApprovalRecord>> {
        in_transaction!(self, Mode::Read, |tx| approval(&tx, env, id))
    }

    async fn list_approvals(
        &self,
        env: &EnvironmentId,
        filter: &ApprovalFilter,
    ) -> StoreResult<Page<ApprovalRecord>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let f = filter;
            let status = f.status.map(|s| s.as_str());
            let origins: Option<Vec<&str>> = f
                .origins
                .as_ref()
                .map(|list| list.iter().map(String::as_str).collect());
            let filter = "env_id = $1 AND ($2::text IS NULL OR status = $2)
                  AND ($3::text[] IS NULL OR decision_origin = ANY($3))";
            let total = tx
                .count(
                    &format!("SELECT COUNT(*) FROM approvals WHERE {filter}"),
                    &[&env.as_str(), &status, &origins],
                )
                .await?;
            let sql = format!("SELECT {COLUMNS} FROM approvals WHERE {filter} ORDER BY created_at DESC, id DESC LIMIT $4 OFFSET $5");
            let found = tx
                .all(
                    &sql,
                    &[
                        &env.as_str(),
                        &status,
                        &origins,
                        &i64::from(f.limit),
                        &i64::from(f.offset),
                    ],
                    decode,
                )
                .await?;
            let mut items = Vec::with_capacity(found.len());
            for a in found {
                items.push(with_decisions(&tx, a).await?);
            }
            Ok(Page {
                items,
                total: total as u64,
            })
        })
    }

    async fn decide_approval(
        &self,
        env: &EnvironmentId,
        id: &ApprovalId,
        key: &KeyId,
        decision: Decision,
        note: Option<&str>,
        now: Millis,
        replica: &ReplicaId,
    ) -> StoreResult<DecideOutcome> {
        in_transaction!(self, Mode::Write, |tx| async {
            let a = approval(&tx, env, id)
                .await?
                .ok_or(StoreError::NotFound { what: "approval" })?;
            let (word, audit, status, effect, releases) =
                match crate::approval_change::plan_decision(&a, key, decision, note, now) {
                    DecisionPlan::SelfDecision => return Ok(DecideOutcome::SelfDecision),
                    DecisionPlan::Unchanged => return Ok(DecideOutcome::Unchanged(a)),
                    DecisionPlan::Expire => {
                        expire_one(&tx, &a, now).await?;
                        return Ok(DecideOutcome::Expired(
                            approval(&tx, env, id)
                                .await?
                                .ok_or(StoreError::NotFound { what: "approval" })?,
                        ));
                    }
                    DecisionPlan::Record {
                        word,
                        audit,
                        status,
                        effect,
                        releases,
                    } => (word, audit, status, effect, releases),
                };
            tx.execute(
                "INSERT INTO approval_decisions (approval_id, key_id, decision, note, at) VALUES ($1, $2, $3, $4, $5)",
                &[&id.as_str(), &key.as_str(), &word, &note, &now.0],
            )
            .await?;
            let actor = Actor::key(key, now);
            append(
                &tx,
                &actor,
                Entry {
                    env: Some(env.as_str()),
                    kind: "approval.decision",
                    subject: id.as_str(),
                    before: None,
                    after: Some(audit),
                },
            )
            .await?;
            let mut ready = None;
            if status != ApprovalStatus::Pending {
                settle(&tx, &a, status, "human", &actor).await?;
            }
            if let Some((event, message)) = effect {
                move_effect(&tx, &a, event, message, &actor).await?;
            }
            if releases {
                if let Some(effect) = &a.effect_id {
                    // The deciding replica dispatches the released effect: it owns it now.
                    tx.execute(
                        "UPDATE effects SET owner = $1 WHERE id = $2",
                        &[&replica.as_str(), &effect.as_str()],
                    )
                    .await?;
                }
                if let Some(inv) = &a.invocation_id {
                    ready = invocation(&tx, env, inv).await?.map(Box::new);
                }
            }
            announce(&tx, id).await?;
            let approval = approval(&tx, env, id)
                .await?
                .ok_or(StoreError::NotFound { what: "approval" })?;
            Ok(DecideOutcome::Recorded { approval, ready })
        })
    }

    async fn expire_approvals(&self, now: Millis) -> StoreResult<Vec<ApprovalId>> {
        in_transaction!(self, Mode::Write, |tx| async {
            let due = tx
                .all(
                    &format!("SELECT {COLUMNS} FROM approvals WHERE status = 'pending' AND expires_at IS NOT NULL AND expires_at <= $1"),
                    &[&now.0],
                    decode,
                )
                .await?;
            for a in &due {
                expire_one(&tx, a, now).await?;
            }
            Ok(due.into_iter().map(|a| a.id).collect())
        })
    }

    fn approval_events(&self) -> Option<broadcast::Receiver<ApprovalEvent>> {
        Some(self.announcements.subscribe())
    }
}
