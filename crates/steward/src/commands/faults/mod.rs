//! `steward faults`: the fault suite (issue #26). It runs M Steward replicas on one store (the
//! HA cluster, a single PostgreSQL, or the embedded store) with the provider fixture as a real
//! process, drives K agents that invoke with stable operation keys (plain and approval-gated,
//! with approvals decided concurrently) and retry as real agents do, and injects a seeded
//! schedule of faults: SIGKILL of the PostgreSQL primary, SIGKILL and SIGSTOP/SIGCONT of
//! replicas past their lease, partitions between a replica and the database (through a fault
//! proxy per replica, `proxy.rs`), and provider faults from the fixture. Then it heals
//! everything, lets recovery finish, and checks the promises (`check.rs`) against the provider's
//! write count, the store and the audit chain. Its last line is `faults: ok, ...` or
//! `faults: FAILED <first violation>, seed S, event log at PATH`.
//!
//! The pieces: `deployment.rs` (the store and how its primary dies), `fleet.rs` (the
//! replicas), `clients.rs` (agents and approvers), `schedule.rs` (the seeded faults),
//! `nemesis.rs` (injecting them), `events.rs` (the log), `inspect.rs` (the final state),
//! `check.rs` (the checks), `report.rs` (the figures, RPO and RTO).

mod check;
mod clients;
mod deployment;
mod events;
mod fleet;
mod inspect;
mod nemesis;
mod proxy;
mod report;
mod schedule;

use super::bench::world::{create_key, Fixture};
use anyhow::{bail, Context};
use check::Violation;
use clients::Shared;
use deployment::{Deployment, StoreKind};
use events::EventLog;
use fleet::{Fleet, ServeSettings};
use inspect::Reader;
use nemesis::{Nemesis, Pacing};
use schedule::Mix;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use steward_client::StewardApi;
use steward_core::IdempotencyKey;

/// The provider deadline the replicas run with, in milliseconds: short, so that a held provider
/// write turns `unknown` (and reconciles) within a run.
const DISPATCH_TIMEOUT_MS: u64 = 3_000;
/// The replicas' reconciler tick, in milliseconds.
const RECONCILE_INTERVAL_MS: u64 = 500;
/// How long "not found at the provider" stays inconclusive after an attempt's deadline, in
/// milliseconds (the fixture commits at once; the default waits longer than a run needs).
const ABSENCE_GRACE_MS: u64 = 2_000;
/// How long the agents get, once every fault has healed, to bring their operations to an
/// outcome, in seconds (`--drain-s`): room for a reconciliation and a Patroni failover.
const DRAIN_S_DEFAULT: u64 = 120;
/// How long recovery gets after the drain (nothing `dispatching`, nothing unresolved) before the
/// final state is read anyway, in seconds (`--recovery-s`): past any lease and deadline.
const RECOVERY_S_DEFAULT: u64 = 120;
/// Concurrent approvers (one operator key, racing on the same approvals).
const APPROVERS: usize = 2;
/// The impact limit every refund counts against: large enough never to refuse one.
const LIMIT_NAME: &str = "faults-refunds";
const LIMIT_AMOUNT_CENTS: i64 = 1_000_000_000_000;
const SECRET: &str = "FAULTS_STRIPE_KEY";
const SECRET_VALUE: &str = "sk_test_faults";
const ACTION: &str = "faults-refund";
const GATED_ACTION: &str = "faults-refund-gated";

#[derive(clap::Args)]
pub struct Args {
    /// The store: `ha` (3 PostgreSQL nodes under Patroni, by scripts/ha-cluster), `postgres`
    /// (one node, by the same script, or a fresh database on --database), or `embedded`.
    #[arg(long, value_enum, default_value_t = StoreKind::Ha)]
    store: StoreKind,
    /// A PostgreSQL server to make a fresh database on instead of starting one (its primary is
    /// not killed: --primary-kills must be 0).
    #[arg(long)]
    database: Option<String>,
    /// The seed of the fault schedule and of the agents' choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How long the faults run, in seconds (then heal, drain and check).
    #[arg(long, default_value_t = 120)]
    duration_s: u64,
    /// Run until this many operations are settled instead of for --duration-s, placing the
    /// faults by operations done: a bounded run that does not depend on the machine's speed.
    #[arg(long)]
    operations: Option<u64>,
    /// Steward replicas (the embedded store runs one).
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// Agents invoking concurrently.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// SIGKILLs of the PostgreSQL primary (embedded: of the Steward process). Default: one per
    /// 30 s of --duration-s, at least 3.
    #[arg(long)]
    primary_kills: Option<u32>,
    /// SIGKILLs of a replica, each restarted.
    #[arg(long, default_value_t = 2)]
    replica_kills: u32,
    /// SIGSTOPs of a replica past its lease, each then resumed.
    #[arg(long, default_value_t = 3)]
    pauses: u32,
    /// Partitions between a replica and the database, past its lease, each healed.
    #[arg(long, default_value_t = 2)]
    partitions: u32,
    /// Provider faults armed at the fixture (hold, drop or error after commit, error before
    /// commit, reject), one write each.
    #[arg(long, default_value_t = 4)]
    provider_faults: u32,
    /// The share of operations that need an approval, in percent.
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u32).range(0..=100))]
    gated_percent: u32,
    /// The replicas' lease, in milliseconds.
    #[arg(long, default_value_t = 2_000)]
    lease_ms: u64,
    /// The first port of the HA cluster (it takes three from there).
    #[arg(long, default_value_t = 5433)]
    cluster_port: u16,
    /// The cluster script (default: scripts/ha-cluster of this repository).
    #[arg(long)]
    cluster_script: Option<PathBuf>,
    /// Append this run's RPO and RTO to a Markdown table in FILE.
    #[arg(long)]
    report: Option<PathBuf>,
    /// How long the agents get, once every fault has healed, to bring their operations to an
    /// outcome, in seconds.
    #[arg(long, default_value_t = DRAIN_S_DEFAULT)]
    drain_s: u64,
    /// How long recovery gets after the drain (nothing dispatching, nothing unresolved) before
    /// the final state is read anyway, in seconds.
    #[arg(long, default_value_t = RECOVERY_S_DEFAULT)]
    recovery_s: u64,
    /// Keep the run's directory (logs, data, event log) even when it passes.
    #[arg(long)]
    keep: bool,
}

impl Args {
    fn mix(&self) -> Mix {
        let default_kills = (self.duration_s / 30).max(3) as u32;
        Mix {
            primary_kills: self.primary_kills.unwrap_or(default_kills),
            replica_kills: self.replica_kills,
            pauses: self.pauses,
            partitions: self.partitions,
            provider_faults: self.provider_faults,
        }
    }

    fn replicas(&self) -> usize {
        match self.store {
            StoreKind::Embedded => 1,
            _ => self.replicas,
        }
    }

    fn cluster_script(&self) -> PathBuf {
        self.cluster_script.clone().unwrap_or_else(|| {
            let here = Path::new("scripts/ha-cluster");
            if here.exists() {
                here.to_path_buf()
            } else {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/ha-cluster")
            }
        })
    }
}

fn key(text: &str) -> IdempotencyKey {
    IdempotencyKey::parse(text).expect("a short printable key")
}

/// The secret, the two actions and the limit, through replica 0.
async fn set_up(url: &str, operator_key: &str, fixture_url: &str) -> anyhow::Result<()> {
    let operator = StewardApi::new(url, operator_key)?;
    let fixture = reqwest::Url::parse(fixture_url).context("the fixture URL")?;
    let host = format!(
        "{}:{}",
        fixture.host_str().unwrap_or_default(),
        fixture.port_or_known_default().unwrap_or_default()
    );
    operator
        .put_secret(SECRET, SECRET_VALUE, &[&host], &key("faults-secret"))
        .await
        .context("storing the fixture key")?;
    for (name, gated) in [(ACTION, false), (GATED_ACTION, true)] {
        let definition = json!({
            "name": name,
            "requiresApproval": gated,
            "adapter": {
                "type": "stripe.refund",
                "config": {"account": "acct_faults", "mode": "test", "currency": "usd",
                           "baseUrl": fixture_url},
                "credentialSecret": SECRET,
            },
        });
        operator
            .create_action(&definition, &key(&format!("faults-action-{name}")))
            .await
            .with_context(|| format!("creating the action {name}"))?;
    }
    let limit = json!({
        "name": LIMIT_NAME, "dimension": "money", "period": "total",
        "amount": LIMIT_AMOUNT_CENTS, "currency": "usd",
    });
    reqwest::Client::new()
        .post(format!("{url}/api/v2/impact-limits"))
        .bearer_auth(operator_key)
        .header("Idempotency-Key", "faults-limit")
        .json(&limit)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .context("creating the impact limit")?;
    Ok(())
}

/// What a run came to.
struct Outcome {
    figures: report::Figures,
    violations: Vec<Violation>,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mix = args.mix();
    if args.database.is_some() && args.store != StoreKind::Embedded && mix.primary_kills > 0 {
        bail!("--database names a server this run must not kill: add --primary-kills 0");
    }
    if args.clients == 0 || args.replicas() == 0 {
        bail!("--clients and --replicas must be at least 1");
    }
    let exe = std::env::current_exe().context("locating the steward binary")?;
    let root = tempfile::Builder::new()
        .prefix("steward-faults-")
        .tempdir()?;
    let log = EventLog::create(&root.path().join("events.log"))?;
    let deployment = Deployment::up(
        args.store,
        args.database.as_deref(),
        &args.cluster_script(),
        args.cluster_port,
        root.path(),
    )
    .await?;
    let outcome = drive(&args, mix, &exe, root.path(), &deployment, &log).await;
    deployment.down().await;
    log.flush();
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            let kept = root.keep();
            println!(
                "faults: FAILED the run could not go on: {e:#}, seed {}, event log at {}",
                args.seed,
                kept.join("events.log").display()
            );
            return Ok(ExitCode::FAILURE);
        }
    };
    let figures = &outcome.figures;
    println!("{}", figures.recovery_line());
    if let Some(path) = &args.report {
        let bound = match args.operations {
            Some(n) => format!("--operations {n}"),
            None => format!("--duration-s {}", args.duration_s),
        };
        let command = format!(
            "steward faults --store {} --seed {} {bound}",
            match args.store {
                StoreKind::Ha => "ha",
                StoreKind::Postgres => "postgres",
                StoreKind::Embedded => "embedded",
            },
            args.seed,
        );
        report::write_row(path, args.store.label(), &command, figures)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    for violation in outcome.violations.iter().skip(1).take(20) {
        println!("also: {violation}");
    }
    match outcome.violations.first() {
        None => {
            if args.keep {
                println!("run kept in {}", root.keep().display());
            }
            println!("faults: ok, {}", figures.line());
            Ok(ExitCode::SUCCESS)
        }
        Some(first) => {
            let kept = root.keep();
            println!(
                "faults: FAILED {first}, seed {}, event log at {}",
                args.seed,
                kept.join("events.log").display()
            );
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Everything between the store's start and its stop.
async fn drive(
    args: &Args,
    mix: Mix,
    exe: &Path,
    dir: &Path,
    deployment: &Deployment,
    log: &EventLog,
) -> anyhow::Result<Outcome> {
    let data = dir.join("data");
    let settings = ServeSettings {
        lease_ms: args.lease_ms,
        dispatch_timeout_ms: DISPATCH_TIMEOUT_MS,
        reconcile_interval_ms: RECONCILE_INTERVAL_MS,
        absence_grace_ms: ABSENCE_GRACE_MS,
    };
    let fixture = Fixture::start(exe, dir).await?;
    let database = deployment.url.as_deref();
    let mut fleet = Fleet::start(exe, &data, database, args.replicas(), &settings).await?;
    let result =
        faults_and_checks(args, mix, exe, &data, deployment, &fixture, &mut fleet, log).await;
    fleet.stop().await;
    fixture.stop().await;
    result
}

#[allow(clippy::too_many_arguments)]
async fn faults_and_checks(
    args: &Args,
    mix: Mix,
    exe: &Path,
    data: &Path,
    deployment: &Deployment,
    fixture: &Fixture,
    fleet: &mut Fleet,
    log: &EventLog,
) -> anyhow::Result<Outcome> {
    let database = deployment.url.as_deref();
    let agent_key = create_key(exe, data, database, "faults-agent").await?;
    let operator_key = create_key(exe, data, database, "faults-operator").await?;
    let first = fleet.urls.read().unwrap_or_else(|e| e.into_inner())[0].clone();
    set_up(&first, &operator_key, &fixture.url).await?;
    let shared = Arc::new(Shared {
        log: log.clone(),
        urls: fleet.urls.clone(),
        http: reqwest::Client::new(),
        agent_key,
        approver_key: operator_key.clone(),
        action: ACTION.to_string(),
        gated_action: GATED_ACTION.to_string(),
        gated_percent: args.gated_percent,
        seed: args.seed,
        stop_starting: Default::default(),
        stop_all: Default::default(),
        settled: Default::default(),
        operations: Default::default(),
        abandoned: Default::default(),
    });
    log.note(format!(
        "start: store {:?}, {} replicas, {} clients, seed {}",
        args.store,
        fleet.len(),
        args.clients,
        args.seed
    ));
    let agents: Vec<_> = (0..args.clients)
        .map(|c| tokio::spawn(clients::agent(shared.clone(), c)))
        .collect();
    let mut approvers: Vec<_> = (0..APPROVERS)
        .map(|a| tokio::spawn(clients::approver(shared.clone(), a)))
        .collect();

    let schedule = schedule::plan(args.seed, mix, fleet.len());
    let pacing = match args.operations {
        Some(n) => Pacing::Operations(n),
        None => Pacing::Time(Duration::from_secs(args.duration_s)),
    };
    let mut nemesis = Nemesis {
        fleet,
        deployment,
        shared: shared.clone(),
        fixture_url: fixture.url.clone(),
        lease_ms: args.lease_ms,
        dispatch_timeout_ms: DISPATCH_TIMEOUT_MS,
    };
    let injected = nemesis.run(&schedule, pacing).await;

    // Heal everything, then let the agents bring their operations to an outcome.
    log.note("heal: every route, every replica, the provider");
    shared.stop_starting.store(true, Ordering::Relaxed);
    nemesis.fleet.heal_all();
    let _ = shared
        .http
        .post(format!("{}/_fixture/faults", fixture.url))
        .json(&json!({"mode": "none"}))
        .send()
        .await;
    let injected = injected?;
    // The racing approvers go on; a sweep also makes sure every approval still pending (both
    // approvers' decisions lost to an outage) is decided, so its agent can settle.
    approvers.push(tokio::spawn(clients::sweeper(shared.clone(), APPROVERS)));
    drain(
        &shared,
        agents,
        approvers,
        Duration::from_secs(args.drain_s),
    )
    .await;

    let reader = Reader {
        http: &shared.http,
        base: fleet_url(&shared),
        key: &operator_key,
    };
    let left = reader
        .wait_for_recovery(Duration::from_secs(args.recovery_s))
        .await;
    log.note(format!(
        "recovery: {} dispatching, {} unresolved",
        left.0, left.1
    ));
    let events = log.events();
    let operations = shared
        .operations
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let state = inspect::final_state(
        &reader,
        &fixture.url,
        LIMIT_NAME,
        &events,
        exe,
        data,
        database,
    )
    .await?;
    let mut violations = check::check(&operations, &events, &state);
    violations.extend(unanswered(&shared, args.drain_s));
    let mut figures = report::Figures {
        operations: operations.len(),
        writes: state.writes.values().sum(),
        unknown: state
            .invocations
            .values()
            .filter(|i| i.status == "unknown")
            .count(),
        injected,
        ..report::Figures::default()
    };
    figures.count(&violations, &events);
    log.note(format!("end: {} violations", violations.len()));
    Ok(Outcome {
        figures,
        violations,
    })
}

/// Lets the agents bring their operations to an outcome (bounded by `limit`), then stops them
/// and the approvers; an agent still busy gives up at its next call.
async fn drain(
    shared: &Shared,
    mut agents: Vec<tokio::task::JoinHandle<()>>,
    approvers: Vec<tokio::task::JoinHandle<()>>,
    limit: Duration,
) {
    let end = std::time::Instant::now() + limit;
    let mut drained = true;
    for agent in agents.iter_mut() {
        let left = end.saturating_duration_since(std::time::Instant::now());
        if tokio::time::timeout(left, agent).await.is_err() {
            drained = false;
            break;
        }
    }
    shared.stop_all.store(true, Ordering::Relaxed);
    if !drained {
        shared.log.note(format!(
            "drain: agents still busy after {} s",
            limit.as_secs()
        ));
    }
    // Each gives up at its next call: within one request's deadline.
    for agent in agents.into_iter().filter(|a| !a.is_finished()) {
        let _ = tokio::time::timeout(Duration::from_millis(clients::INVOKE_TIMEOUT_MS * 2), agent)
            .await;
    }
    for approver in approvers {
        let _ = approver.await;
    }
}

/// The operations the agents gave up when the drain ended: no outcome after the heal.
fn unanswered(shared: &Shared, drain_s: u64) -> Vec<Violation> {
    let abandoned = shared.abandoned.lock().unwrap_or_else(|e| e.into_inner());
    abandoned
        .iter()
        .map(|operation| Violation::NoOutcome {
            operation: operation.clone(),
            status: format!("without an outcome {drain_s} s after the heal"),
        })
        .collect()
}

/// The first replica's URL (every route is healed by now).
fn fleet_url(shared: &Shared) -> String {
    shared.urls.read().unwrap_or_else(|e| e.into_inner())[0].clone()
}
