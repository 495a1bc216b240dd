//! Reading the final state once everything has healed: the provider's writes (the fixture), the
//! store's invocations, effects, approvals and limit (through the API of a healthy replica),
//! and the audit chain (`steward audit verify`).

use super::check::{FinalState, LimitUsage, StoredEffect, StoredInvocation};
use super::events::{Answer, Event, Stamped};
use anyhow::{bail, Context};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

/// The page size of the effect listing (the API's largest).
const PAGE_LIMIT: usize = 200;
/// Attempts at one read before the run gives up on reading the final state.
const READ_ATTEMPTS_MAX: u32 = 10;
/// The pause between attempts at one read, in milliseconds.
const READ_RETRY_MS: u64 = 500;
/// The pause between looks while waiting for recovery, in milliseconds.
const RECOVERY_POLL_MS: u64 = 250;

/// Reads through one replica with the operator's key.
pub(crate) struct Reader<'a> {
    pub(crate) http: &'a reqwest::Client,
    pub(crate) base: String,
    pub(crate) key: &'a str,
}

impl Reader<'_> {
    /// `GET path` (under `/api/v2`), retried a few times on anything but an answer; `None` on a
    /// 404.
    async fn get(&self, path: &str) -> anyhow::Result<Option<Value>> {
        let mut last = String::new();
        for _ in 0..READ_ATTEMPTS_MAX {
            let sent = self
                .http
                .get(format!("{}/api/v2{path}", self.base))
                .bearer_auth(self.key)
                .send()
                .await;
            match sent {
                Ok(r) if r.status() == 404 => return Ok(None),
                Ok(r) if r.status().is_success() => return Ok(Some(r.json().await?)),
                Ok(r) => last = format!("{} {}", r.status(), r.text().await.unwrap_or_default()),
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(READ_RETRY_MS)).await;
        }
        bail!("reading {path}: {last}")
    }

    async fn data(&self, path: &str) -> anyhow::Result<Value> {
        let body = self
            .get(path)
            .await?
            .with_context(|| format!("{path}: not found"))?;
        Ok(body["data"].clone())
    }

    /// How many effects are still `dispatching`, and how many are unresolved.
    async fn in_flight(&self) -> anyhow::Result<(usize, usize)> {
        let count = |v: Value| v.as_array().map(Vec::len).unwrap_or(0);
        let dispatching = self
            .data("/actions/effects?stage=dispatching&limit=200")
            .await?;
        let unresolved = self
            .data("/actions/effects?unresolved=true&limit=200")
            .await?;
        Ok((count(dispatching), count(unresolved)))
    }

    /// Waits (bounded) until no effect is dispatching or unresolved; the last counts seen.
    pub(crate) async fn wait_for_recovery(&self, limit: Duration) -> (usize, usize) {
        let started = Instant::now();
        let mut last = (usize::MAX, usize::MAX);
        while started.elapsed() < limit {
            if let Ok(seen) = self.in_flight().await {
                last = seen;
                if seen == (0, 0) {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(RECOVERY_POLL_MS)).await;
        }
        last
    }

    async fn effects(&self) -> anyhow::Result<Vec<StoredEffect>> {
        let mut all = vec![];
        loop {
            let page = self
                .data(&format!(
                    "/actions/effects?limit={PAGE_LIMIT}&offset={}",
                    all.len()
                ))
                .await?;
            let items = page.as_array().cloned().unwrap_or_default();
            let n = items.len();
            all.extend(items.iter().map(|e| StoredEffect {
                id: text(&e["id"]),
                operation_key: e["operationKey"].as_str().map(str::to_string),
                outcome: text(&e["outcome"]),
                stage: text(&e["stage"]),
            }));
            if n < PAGE_LIMIT {
                return Ok(all);
            }
        }
    }

    async fn limit(&self, name: &str) -> anyhow::Result<Option<LimitUsage>> {
        let limits = self.data("/impact-limits").await?;
        Ok(limits
            .as_array()
            .into_iter()
            .flatten()
            .find(|l| l["name"] == name)
            .map(|l| LimitUsage {
                consumed: l["consumed"].as_i64().unwrap_or(-1),
                reserved: l["reserved"].as_i64().unwrap_or(-1),
                unknown_exposure: l["unknownExposure"].as_i64().unwrap_or(-1),
            }))
    }
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// Every invocation id an answer acknowledged.
fn acknowledged(events: &[Stamped]) -> BTreeSet<String> {
    events
        .iter()
        .filter_map(|s| match &s.event {
            Event::Answer {
                answer: Answer::Acknowledged { invocation, .. },
                ..
            } => Some(invocation.clone()),
            _ => None,
        })
        .collect()
}

/// Provider writes per payment intent, from the fixture.
async fn writes(http: &reqwest::Client, fixture: &str) -> anyhow::Result<HashMap<String, usize>> {
    let body: Value = http
        .get(format!("{fixture}/_fixture/writes"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let mut counts = HashMap::new();
    for write in body["writes"].as_array().into_iter().flatten() {
        if let Some(pi) = write["payment_intent"].as_str() {
            *counts.entry(pi.to_string()).or_default() += 1;
        }
    }
    Ok(counts)
}

/// `steward audit verify` on the store: its output when it fails, `None` when it passes.
async fn audit(exe: &Path, data: &Path, database: Option<&str>) -> anyhow::Result<Option<String>> {
    let mut command = tokio::process::Command::new(exe);
    command
        .args(["audit", "verify", "--data"])
        .arg(data)
        .stdin(std::process::Stdio::null());
    if let Some(url) = database {
        command.args(["--database", url]);
    }
    let out = command
        .output()
        .await
        .context("running steward audit verify")?;
    Ok((!out.status.success()).then(|| {
        format!(
            "{} {}",
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        )
    }))
}

/// Everything the checks compare, read after recovery.
pub(crate) async fn final_state(
    reader: &Reader<'_>,
    fixture: &str,
    limit_name: &str,
    events: &[Stamped],
    exe: &Path,
    data: &Path,
    database: Option<&str>,
) -> anyhow::Result<FinalState> {
    let mut state = FinalState {
        writes: writes(reader.http, fixture).await?,
        ..FinalState::default()
    };
    for id in acknowledged(events) {
        let Some(body) = reader.get(&format!("/actions/invocations/{id}")).await? else {
            continue;
        };
        let data = &body["data"];
        state.invocations.insert(
            id,
            StoredInvocation {
                status: text(&data["status"]),
            },
        );
        if let Some(approval) = data["approvalId"].as_str() {
            let view = reader.data(&format!("/approvals/{approval}")).await?;
            let decisions = view["decisions"].as_array().map(Vec::len).unwrap_or(0);
            state
                .approval_decisions
                .insert(approval.to_string(), decisions);
        }
    }
    state.effects = reader.effects().await?;
    state.limit = reader.limit(limit_name).await?;
    state.audit_failure = audit(exe, data, database).await?;
    Ok(state)
}
