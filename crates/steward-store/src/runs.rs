//! Runs: an agent's trace, reported by its runtime. A run has a status, an input and an output,
//! a tree of spans (`parentSpanId`), and feedback. Invocations and approvals that name the run
//! (`runId`) join its timeline when it is read.
//!
//! The records keep the fields the API filters on as columns and the rest as one JSON document
//! ([`RunBody`], a span's or a feedback's document as received, after the server's checks).
//! [`RunRecord::ended`] is the pure rule for `PATCH /runs/{id}`: the backend reads the run, this
//! decides, the backend writes what it returns, in one transaction.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use steward_core::{EnvironmentId, FeedbackId, InvocationId, Millis, RunId};

/// Where a run stands. `running` until ended; the three others are terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub const ALL: [RunStatus; 4] = [
        RunStatus::Running,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(text: &str) -> Option<RunStatus> {
        RunStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }

    pub fn is_terminal(self) -> bool {
        match self {
            RunStatus::Running => false,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Cancelled => true,
        }
    }
}

/// What a run holds besides its columns, stored as one JSON document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// One run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub id: RunId,
    pub env_id: EnvironmentId,
    pub status: RunStatus,
    pub name: Option<String>,
    pub agent_id: Option<String>,
    pub user_id: Option<String>,
    /// The W3C trace id (32 lowercase hex digits) Steward's own spans for this run are exported
    /// under, fixed when the run starts.
    pub trace_id: String,
    pub body: RunBody,
    pub started_at: Millis,
    pub ended_at: Option<Millis>,
    pub updated_at: Millis,
}

/// A `PATCH /runs/{id}`: every field optional; what is given replaces what was there.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunEnd {
    pub status: Option<RunStatus>,
    pub output: Option<Value>,
    pub error: Option<Value>,
    pub tokens: Option<u64>,
    pub cost: Option<f64>,
    pub metadata: Option<Value>,
}

/// Why a run could not be ended or updated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEndRefusal {
    /// The run has already ended: a terminal status is final.
    AlreadyEnded { status: RunStatus },
}

impl RunRecord {
    /// The run after `change` at `now`. An ended run takes no further change (its status is
    /// final, and what it ended with is the record); a terminal status stamps `ended_at`. With
    /// no status, the run's status is kept: a PATCH may update a running run's metadata.
    pub fn ended(&self, change: &RunEnd, now: Millis) -> Result<RunRecord, RunEndRefusal> {
        if self.status.is_terminal() {
            return Err(RunEndRefusal::AlreadyEnded {
                status: self.status,
            });
        }
        let mut next = self.clone();
        let status = change.status.unwrap_or(self.status);
        next.status = status;
        if status.is_terminal() {
            next.ended_at = Some(now);
        }
        next.updated_at = now;
        let body = &mut next.body;
        if let Some(v) = &change.output {
            body.output = Some(v.clone());
        }
        if let Some(v) = &change.error {
            body.error = Some(v.clone());
        }
        if let Some(v) = change.tokens {
            body.tokens = Some(v);
        }
        if let Some(v) = change.cost {
            body.cost = Some(v);
        }
        if let Some(v) = &change.metadata {
            body.metadata = Some(v.clone());
        }
        Ok(next)
    }
}

/// One span of a run, identified within the run by `span_id`. Ingesting a span with an id the
/// run already holds replaces it (a retry, or the span's end after its start).
#[derive(Debug, Clone, PartialEq)]
pub struct SpanRecord {
    pub run_id: RunId,
    pub span_id: String,
    pub parent_span_id: Option<String>,
    /// The span as received, checked and normalized by the server (`id`, `parentSpanId`,
    /// `type`, `name`, times, input, output, attributes ...).
    pub document: Value,
    /// When it was first ingested; spans are listed in this order.
    pub created_at: Millis,
    pub updated_at: Millis,
}

/// What an ingest did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpansIngested {
    /// Every span was stored: `created` new ones, the rest replaced.
    Stored { created: usize, replaced: usize },
    /// Storing them would take the run past `spans_max`; nothing was stored.
    TooMany { existing: usize },
}

/// Feedback on a run, or on one of its spans.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedbackRecord {
    pub id: FeedbackId,
    pub env_id: EnvironmentId,
    pub run_id: RunId,
    pub span_id: Option<String>,
    /// `source`, `label`, `rating`, `comment`, `metadata`, as checked by the server.
    pub document: Value,
    pub created_at: Millis,
}

/// The filters of `GET /runs`, newest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    /// A case-insensitive substring of the run's name.
    pub search: Option<String>,
    pub status: Option<RunStatus>,
    pub agent_id: Option<String>,
    pub user_id: Option<String>,
    pub started_after: Option<Millis>,
    pub started_before: Option<Millis>,
    pub limit: u32,
    pub offset: u32,
}

/// An approval that names the run, as the run's timeline shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunApproval {
    pub id: String,
    pub status: String,
    pub title: String,
    pub invocation_id: Option<InvocationId>,
    pub created_at: Millis,
    pub decided_at: Option<Millis>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running() -> RunRecord {
        RunRecord {
            id: RunId::from_unique("r1"),
            env_id: EnvironmentId::from_unique("e1"),
            status: RunStatus::Running,
            name: Some("n".into()),
            agent_id: None,
            user_id: None,
            trace_id: "0".repeat(32),
            body: RunBody::default(),
            started_at: Millis(1),
            ended_at: None,
            updated_at: Millis(1),
        }
    }

    #[test]
    fn every_status_pair_of_end() {
        for from in RunStatus::ALL {
            for to in RunStatus::ALL.map(Some).into_iter().chain([None]) {
                let mut run = running();
                run.status = from;
                let change = RunEnd {
                    status: to,
                    output: Some(serde_json::json!({"ok": true})),
                    ..RunEnd::default()
                };
                let result = run.ended(&change, Millis(5));
                if from.is_terminal() {
                    assert_eq!(result, Err(RunEndRefusal::AlreadyEnded { status: from }));
                    continue;
                }
                let next = result.expect("a running run takes any change");
                let status = to.unwrap_or(from);
                assert_eq!(next.status, status);
                assert_eq!(next.ended_at.is_some(), status.is_terminal());
                assert_eq!(next.body.output, change.output);
                assert_eq!(next.updated_at, Millis(5));
            }
        }
    }
}
