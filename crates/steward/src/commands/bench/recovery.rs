//! Workload (d): how long `steward serve` takes to start on a store holding N effects left
//! `dispatching` (recovery makes each `unknown` before the server listens).
//!
//! The effects are written through the store API exactly as the dispatcher leaves them after
//! write path step 3 (`Store::submit`, then `Store::change_effect` with `AttemptChange::Begin`),
//! which is what a crash between recording an attempt and its answer leaves behind. For the
//! embedded store they are written on a memory file system when one exists (`/dev/shm`: the
//! fsyncs cost nothing there) and the files are then copied into the data directory, so that
//! generating 100,000 takes seconds rather than minutes; the timed start-up runs on the real
//! disk.

use super::world::{start_server, terminate, PgDatabase};
use super::{StoreKind, RECOVERY_READY_S};
use crate::commands::progress::Progress;
use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use steward_core::{
    fingerprint, ActionDefinition, ActionId, EffectId, EffectState, EnvironmentId, InvocationId,
    KeyId, OperationKey,
};
use steward_core::{EffectEvent, EvidenceKind, EvidenceSource};
use steward_server::{open_store, Clock, SystemClock, DATABASE_FILE};
use steward_store::{
    ActionRecord, Actor, ApiKeyRecord, AttemptChange, EffectChange, NewEvidence, Store, Submission,
    SubmitOutcome,
};

/// Writers generating effects at once: enough for PostgreSQL to group their commits; the
/// embedded store serializes them on its one writer anyway.
const GENERATORS: u64 = 16;
/// The attempt deadline recorded on each generated effect, in milliseconds (the default).
const ATTEMPT_DEADLINE_MS: i64 = 10_000;
/// Where generated embedded stores are written first, when it exists.
const MEMORY_DIR: &str = "/dev/shm";

/// What workload (d) measured on one store.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RecoveryRow {
    pub(crate) store: String,
    pub(crate) effects: u64,
    /// Start-up to the ready line on an empty store: process start, open, bind.
    pub(crate) baseline_s: f64,
    /// Start-up to the ready line with `effects` unfinished effects.
    pub(crate) ready_s: f64,
    /// The server's log reported exactly `effects` effects made `unknown`.
    pub(crate) verified: bool,
    pub(crate) generate_s: f64,
}

impl RecoveryRow {
    /// Time attributable to recovery: start-up minus the empty store's start-up.
    pub(crate) fn recovery_s(&self) -> f64 {
        (self.ready_s - self.baseline_s).max(0.0)
    }
}

pub(super) async fn run(
    exe: &Path,
    dir: &Path,
    store: &StoreKind,
    effects: u64,
    progress: &Progress,
) -> anyhow::Result<RecoveryRow> {
    let label = store.label();
    let extra = ["--reconcile-interval-ms", "0"];
    let limit = Duration::from_secs(RECOVERY_READY_S);
    let data = dir.join(format!("recovery-{label}"));
    let (database, baseline, generate) = match store {
        StoreKind::Embedded => {
            let empty = dir.join("recovery-embedded-empty");
            let mut server = start_server(exe, &empty, None, &extra, limit).await?;
            terminate(&mut server.child).await;
            let generate = generate_embedded(dir, &data, effects, progress).await?;
            (None, server.ready_after, generate)
        }
        StoreKind::Postgres { admin_url, .. } => {
            let db = PgDatabase::create(admin_url, "steward_bench_recovery").await?;
            // Migrates the fresh database, so the baseline start-up does not pay for it.
            drop(open_store(&data, Some(&db.url)).await?);
            let mut server = start_server(exe, &data, Some(&db.url), &extra, limit).await?;
            terminate(&mut server.child).await;
            let started = Instant::now();
            let store = open_store(&data, Some(&db.url)).await?;
            generate(store, effects, progress).await?;
            (Some(db), server.ready_after, started.elapsed())
        }
        StoreKind::PostgresHa { .. } | StoreKind::External => {
            bail!("recovery is measured on a store this run starts on one server")
        }
    };
    progress.line(&format!(
        "bench: d     {label:<8} starting on {effects} unfinished effects"
    ));
    let url = database.as_ref().map(|db| db.url.clone());
    let measured = start_server(exe, &data, url.as_deref(), &extra, limit).await;
    let result = match measured {
        Ok(mut server) => {
            terminate(&mut server.child).await;
            let log = strip_ansi(&std::fs::read_to_string(&server.log).unwrap_or_default());
            Ok(RecoveryRow {
                store: label.to_string(),
                effects,
                baseline_s: baseline.as_secs_f64(),
                ready_s: server.ready_after.as_secs_f64(),
                verified: log.contains(&format!("unknown={effects} ")),
                generate_s: generate.as_secs_f64(),
            })
        }
        Err(e) => Err(e),
    };
    if let Some(db) = database {
        db.drop_database().await;
    }
    let row = result?;
    progress.line(&format!(
        "bench: d     {label:<8} ready after {:.3} s (empty store {:.3} s), verified {}",
        row.ready_s, row.baseline_s, row.verified
    ));
    Ok(row)
}

/// The log without terminal colour sequences (`ESC [ ... m`), so its fields can be matched.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_escape = false;
    for c in text.chars() {
        match (in_escape, c) {
            (false, '\u{1b}') => in_escape = true,
            (false, c) => out.push(c),
            (true, 'm') => in_escape = false,
            (true, _) => {}
        }
    }
    out
}

/// Generates the embedded store on a memory file system, then copies it into `data`.
async fn generate_embedded(
    dir: &Path,
    data: &Path,
    effects: u64,
    progress: &Progress,
) -> anyhow::Result<Duration> {
    let scratch = if Path::new(MEMORY_DIR).is_dir() {
        tempfile::Builder::new()
            .prefix("steward-bench-")
            .tempdir_in(MEMORY_DIR)?
    } else {
        tempfile::Builder::new()
            .prefix("generate-")
            .tempdir_in(dir)?
    };
    let started = Instant::now();
    let store = open_store(scratch.path(), None).await?;
    generate(store, effects, progress).await?;
    let took = started.elapsed();
    std::fs::create_dir_all(data)?;
    for suffix in ["", "-wal"] {
        let from = scratch.path().join(format!("{DATABASE_FILE}{suffix}"));
        if from.exists() {
            let to = data.join(format!("{DATABASE_FILE}{suffix}"));
            std::fs::copy(&from, &to).with_context(|| format!("copying {}", from.display()))?;
            std::fs::File::open(&to)?.sync_all()?;
        }
    }
    Ok(took)
}

/// Writes `effects` effects left `dispatching`, with one environment, key and action.
async fn generate(store: Arc<dyn Store>, effects: u64, progress: &Progress) -> anyhow::Result<()> {
    let now = SystemClock.now();
    let system = Actor::system(now);
    let env = store
        .ensure_environment(
            steward_store::NewEnvironment {
                name: "bench",
                id: &EnvironmentId::from_unique(&steward_server::unique()),
            },
            &system,
        )
        .await?;
    let key = ApiKeyRecord {
        id: KeyId::from_unique(&steward_server::unique()),
        env_id: env.id.clone(),
        name: "bench-recovery".into(),
        scopes: steward_core::Role::Operator.scopes(),
        token_hash: steward_server::hash_token(&steward_server::generate_token()),
        created_at: now,
        expires_at: None,
        revoked_at: None,
        last_used_at: None,
    };
    store.insert_key(&key, &system).await?;
    let definition: ActionDefinition = serde_json::from_value(json!({
        "name": "bench-recovery",
        "adapter": {"type": "stripe.refund",
                    "config": {"account": "acct_bench", "mode": "test", "currency": "usd",
                               "baseUrl": "http://127.0.0.1:9"},
                    "credentialSecret": "BENCH_STRIPE_KEY"},
    }))?;
    let action = ActionRecord {
        id: ActionId::from_unique(&steward_server::unique()),
        env_id: env.id.clone(),
        name: definition.name.clone(),
        version: 1,
        definition,
        created_at: now,
        updated_at: now,
    };
    store.create_action(&action, &system).await?;
    let mut tasks = vec![];
    for g in 0..GENERATORS {
        let (store, action, key_id) = (store.clone(), action.clone(), key.id.clone());
        let progress = progress.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = g;
            while n < effects {
                leave_dispatching(store.as_ref(), &action, &key_id, n).await?;
                if n > 0 && n % 10_000 == 0 {
                    progress.line(&format!("bench: d     generated {n} of {effects}"));
                }
                n += GENERATORS;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await.context("a generator panicked")??;
    }
    Ok(())
}

/// One effect as a crash after write path step 3 leaves it: accepted, attempt recorded.
async fn leave_dispatching(
    store: &dyn Store,
    action: &ActionRecord,
    key: &KeyId,
    n: u64,
) -> anyhow::Result<()> {
    let now = SystemClock.now();
    let effect_id = EffectId::from_unique(&steward_server::unique());
    let input = json!({"paymentIntent": format!("pi_recovery_{n}"), "amount": 100 + n % 900});
    let operation_key = OperationKey::parse(&format!("bench-recovery-{n}"))?;
    // A replica that never heartbeats: dead to every recovery sweep, as a crashed server is.
    let owner = steward_core::ReplicaId::from_unique("bench-crashed");
    let submission = Submission {
        env_id: action.env_id.clone(),
        invocation_id: InvocationId::from_unique(&steward_server::unique()),
        provider_idempotency_key: Some(format!("steward-{effect_id}")),
        effect_id: effect_id.clone(),
        action: action.clone(),
        input_fingerprint: fingerprint(&input),
        request_fingerprint: fingerprint(&json!({"action": action.id, "input": input,
                                                 "operationKey": operation_key})),
        input,
        operation_key: Some(operation_key),
        idempotency_key: None,
        run_id: None,
        retry_of: None,
        initial: EffectState::Ready,
        approval: None,
        decision: None,
        evidence: NewEvidence::new(
            EvidenceKind::Accepted,
            EvidenceSource::Steward,
            "accepted by steward bench",
        ),
        actor: key.clone(),
        now,
        owner: owner.clone(),
        links: Default::default(),
        parent_span_id: None,
    };
    match store.submit(&submission).await? {
        SubmitOutcome::Created(_) => {}
        other => bail!("generating effect {n}: unexpected {other:?}"),
    }
    let evidence = NewEvidence::new(
        EvidenceKind::Attempt,
        EvidenceSource::Steward,
        "attempt 1 recorded by steward bench; never sent",
    );
    let mut begin = EffectChange::of(
        &action.env_id,
        &effect_id,
        EffectState::Ready,
        EffectEvent::BeginAttempt,
        evidence,
        Actor::key(key, now),
    )?;
    begin.attempt = Some(AttemptChange::Begin {
        number: 1,
        deadline_at: now.plus_ms(ATTEMPT_DEADLINE_MS),
        owner,
    });
    store.change_effect(&begin).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn colour_sequences_are_stripped() {
        assert_eq!(
            super::strip_ansi("\u{1b}[3munknown\u{1b}[0m\u{1b}[2m=\u{1b}[0m2000 x"),
            "unknown=2000 x"
        );
    }
}
