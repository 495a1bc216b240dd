//! `steward bench`: a load generator and report for Steward's governed write path.
//!
//! It builds its own world on loopback: a `steward fixture` child (the Stripe-shaped provider
//! that counts writes), then, for each store, a `steward serve` child of this same binary on a
//! fresh data directory (the embedded store) or a fresh PostgreSQL database (`--database`),
//! with keys made by `steward keys create` and the actions made over the API. Each workload runs
//! at each concurrency for a bounded time or request count:
//!
//! | workload | one request |
//! | --- | --- |
//! | `floor` | `POST /v1/refunds` straight to the fixture: no durability, the lower bound |
//! | `proxy` | the same through `steward bench-proxy`: recorded durably before and after, nothing else |
//! | `a` | governed invoke of the `stripe.refund` action under a new operation key |
//! | `b` | the same invoke sent again under an operation key that already exists |
//! | `c` | invoke of a gated action, then approve with another key (the approve dispatches) |
//! | `d` | start-up recovery: `steward serve` on a store holding N effects left `dispatching` |
//!
//! Latencies go into HDR histograms. The report is a Markdown table (printed, and written to
//! `--out`), the same rows as JSON and an SVG plot beside it. Every row also counts the
//! provider writes the fixture committed during it, so a fast but wrong run shows.
//!
//! Nothing here is a timed test: `tests/bench_smoke.rs` checks only that the table has its rows.

mod load;
mod pgwaits;
mod procfs;
pub(crate) mod proxy;
mod recovery;
mod report;
mod scrape;
mod split;
pub(crate) mod world;

use anyhow::{bail, Context};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use super::progress::Progress;
use load::{Limit, Target};
use report::{Report, Row};
use split::Watched;
use world::{Fixture, PgDatabase, World};

/// How long a `steward serve` child gets to print its ready line, in seconds, outside
/// workload (d). Start-up runs recovery first, and a store left by an earlier run may be big.
pub(crate) const SERVER_READY_S: u64 = 120;
/// How long workload (d)'s server gets to recover and print its ready line, in seconds: far
/// above the 5 s target, so a miss is measured rather than cut off.
const RECOVERY_READY_S: u64 = 900;
/// Operation keys seeded for workload (b); its requests cycle through them.
const RESUBMIT_KEYS: u64 = 100;

/// One workload of the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Workload {
    Floor,
    Proxy,
    Invoke,
    Resubmit,
    Approve,
    Recovery,
}

impl Workload {
    /// The name used on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Floor => "floor",
            Workload::Proxy => "proxy",
            Workload::Invoke => "a",
            Workload::Resubmit => "b",
            Workload::Approve => "c",
            Workload::Recovery => "d",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Workload::Floor => "the fixture called directly, no durability",
            Workload::Proxy => {
                "the fixture through a minimal durable proxy (two group commits, nothing else)"
            }
            Workload::Invoke => "governed invoke, a new operation key each",
            Workload::Resubmit => "resubmission of an existing operation key",
            Workload::Approve => "invoke of a gated action + approve",
            Workload::Recovery => "start-up recovery with N unfinished effects",
        }
    }

    fn parse(text: &str) -> Result<Workload, String> {
        [
            Workload::Floor,
            Workload::Proxy,
            Workload::Invoke,
            Workload::Resubmit,
            Workload::Approve,
            Workload::Recovery,
        ]
        .into_iter()
        .find(|w| w.name() == text.trim())
        .ok_or_else(|| format!("unknown workload {text:?}: use floor, proxy, a, b, c or d"))
    }
}

/// Where the server under test keeps its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreKind {
    Embedded,
    /// A fresh database is created on this server (the URL names an administrative database
    /// to connect to) and dropped at the end.
    Postgres {
        admin_url: String,
        /// `steward serve` processes sharing the database; the load is spread over them.
        replicas: usize,
    },
    /// As `Postgres` with one replica, on a cluster with a synchronous standby
    /// (`--ha-database`, e.g. `scripts/ha-cluster`): every commit waits for a second node.
    PostgresHa {
        admin_url: String,
    },
    /// A server this run did not start (`--server`).
    External,
}

impl StoreKind {
    pub fn label(&self) -> String {
        match self {
            StoreKind::Embedded => "embedded".into(),
            StoreKind::Postgres { replicas: 1, .. } => "postgres".into(),
            StoreKind::Postgres { replicas, .. } => format!("postgres x{replicas}"),
            StoreKind::PostgresHa { .. } => "postgres-ha".into(),
            StoreKind::External => "external".into(),
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// Seconds per (workload, store, concurrency) run; a run ends at this or at --requests.
    #[arg(long, default_value_t = 10)]
    duration_s: u64,
    /// At most this many requests per run (no limit when absent).
    #[arg(long)]
    requests: Option<u64>,
    /// Concurrency levels (requests in flight at once).
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    concurrency: Vec<usize>,
    /// Workloads: floor, proxy, a, b, c, d.
    #[arg(long, value_delimiter = ',', default_value = "floor,proxy,a,b,c,d", value_parser = Workload::parse)]
    workloads: Vec<Workload>,
    /// Also measure the PostgreSQL store on this server (postgres://user@host:port/db; the
    /// bench creates a fresh database there for each server and drops it afterwards).
    #[arg(long)]
    database: Option<String>,
    /// With --database: measure the PostgreSQL store with each of these numbers of replicas
    /// (`steward serve` processes on one database, the same total load spread over them).
    /// Workload (d) runs once, on one replica.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    replicas: Vec<usize>,
    /// Also measure one replica on a PostgreSQL cluster with a synchronous standby (an
    /// administrative multi-host URL with `target_session_attrs=read-write`, as
    /// `scripts/ha-cluster up` prints it); its rows carry their ratio to the single server's.
    #[arg(long)]
    ha_database: Option<String>,
    /// Use this running fixture (http://ADDR) instead of starting one.
    #[arg(long)]
    fixture: Option<String>,
    /// With --fixture: its process id, so each row counts its CPU too.
    #[arg(long, requires = "fixture")]
    fixture_pid: Option<u32>,
    /// Use this running server instead of starting one (workload d is skipped for it).
    #[arg(long, requires_all = ["operator_key", "approver_key"])]
    server: Option<String>,
    /// With --server: an operator key (sets up the actions and invokes).
    #[arg(long, env = "STEWARD_BENCH_OPERATOR_KEY")]
    operator_key: Option<String>,
    /// With --server: a second operator key (decides approvals in workload c).
    #[arg(long, env = "STEWARD_BENCH_APPROVER_KEY")]
    approver_key: Option<String>,
    /// Unfinished effects to recover in workload (d).
    #[arg(long, default_value_t = 100_000)]
    recovery_effects: u64,
    /// Write the Markdown table here; the JSON rows and the SVG plot go beside it
    /// (same name, .json and .svg).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Keep the working directory (data, server logs) instead of deleting it.
    #[arg(long)]
    keep: bool,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.concurrency.is_empty() || args.concurrency.contains(&0) {
        bail!("--concurrency needs levels of at least 1");
    }
    if args.replicas.is_empty() || args.replicas.contains(&0) {
        bail!("--replicas needs counts of at least 1");
    }
    if args.requests == Some(0) || args.duration_s == 0 {
        bail!("--requests and --duration-s must be at least 1");
    }
    let exe = std::env::current_exe().context("finding the steward binary")?;
    let dir = tempfile::Builder::new()
        .prefix("steward-bench-")
        .tempdir()
        .context("creating the working directory")?;
    let run_id = steward_server::unique().to_ascii_lowercase();
    let limit = Limit {
        duration: Duration::from_secs(args.duration_s),
        requests: args.requests,
    };
    let fixture = match &args.fixture {
        Some(url) => Fixture::connect(url, args.fixture_pid),
        None => Fixture::start(&exe, dir.path()).await?,
    };
    let mut report = Report::new(&args, &run_id);
    let mut stores = vec![];
    if args.server.is_some() {
        stores.push(StoreKind::External);
    } else {
        stores.push(StoreKind::Embedded);
        match &args.database {
            Some(url) => {
                for &replicas in &args.replicas {
                    stores.push(StoreKind::Postgres {
                        admin_url: url.clone(),
                        replicas,
                    });
                }
            }
            None => report.note(
                "PostgreSQL store: not measured in this run (pass --database postgres://...).",
            ),
        }
        if let Some(url) = &args.ha_database {
            stores.push(StoreKind::PostgresHa {
                admin_url: url.clone(),
            });
        }
    }
    let http = load::http_client(args.concurrency.iter().copied().max().unwrap_or(1))?;
    let progress = Progress::new("bench", "cells", cells(&args, &stores));

    if args.workloads.contains(&Workload::Floor) {
        let target = Target::floor(&http, &fixture.url, &run_id);
        let floor = Workload::Floor;
        run_floor(
            &args,
            &target,
            floor,
            limit,
            &fixture,
            None,
            &mut report,
            &progress,
        )
        .await?;
    }
    if args.workloads.contains(&Workload::Proxy) {
        let proxy = Fixture::start_proxy(&exe, dir.path(), &fixture.url).await?;
        let target = Target::proxy(&http, &proxy.url, &run_id);
        let ran = run_floor(
            &args,
            &target,
            Workload::Proxy,
            limit,
            &fixture,
            Some(&proxy),
            &mut report,
            &progress,
        )
        .await;
        proxy.stop().await;
        ran?;
    }
    let http_workloads: Vec<Workload> = args
        .workloads
        .iter()
        .copied()
        .filter(|w| matches!(w, Workload::Invoke | Workload::Resubmit | Workload::Approve))
        .collect();
    if !http_workloads.is_empty() {
        for store in &stores {
            if let Err(e) = run_store(
                &args,
                &exe,
                dir.path(),
                &run_id,
                store,
                &fixture,
                &http,
                &http_workloads,
                limit,
                &mut report,
                &progress,
            )
            .await
            {
                progress.line(&format!("bench: {} store: {e:#}", store.label()));
                report.note(&format!("{} store: not measured: {e:#}", store.label()));
            }
        }
    }
    if args.workloads.contains(&Workload::Recovery) {
        let recovered = stores.iter().filter(|s| recovers(s));
        for store in recovered {
            progress.set_message(&format!("d {}", store.label()));
            let row = recovery::run(&exe, dir.path(), store, args.recovery_effects, &progress);
            match row.await {
                Ok(row) => report.push_recovery(row),
                Err(e) => {
                    progress.line(&format!("bench: recovery on {}: {e:#}", store.label()));
                    report.note(&format!(
                        "recovery on {}: not measured: {e:#}",
                        store.label()
                    ));
                }
            }
            progress.advance(1);
        }
    }
    progress.finish();
    fixture.stop().await;

    let markdown = report.markdown();
    println!("{markdown}");
    if let Some(out) = &args.out {
        report.write(out)?;
        eprintln!(
            "bench: wrote {}, {} and {}",
            out.display(),
            out.with_extension("json").display(),
            out.with_extension("svg").display()
        );
    }
    if args.keep {
        let kept = dir.keep();
        eprintln!("bench: kept {}", kept.display());
    }
    Ok(if report.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// One of the floors at each concurrency: `floor` (the fixture called directly) or `proxy` (the
/// fixture through `steward bench-proxy`, whose CPU is counted where Steward's is). Each row
/// carries its ratio to the floor measured before it (none for the floor itself).
#[allow(clippy::too_many_arguments)] // two call sites; a struct would only rename these
async fn run_floor(
    args: &Args,
    target: &Target,
    workload: Workload,
    limit: Limit,
    fixture: &Fixture,
    proxy: Option<&Fixture>,
    report: &mut Report,
    progress: &Progress,
) -> anyhow::Result<()> {
    let watched = Watched {
        fixture_pid: fixture.pid,
        server_pids: proxy.and_then(|p| p.pid).into_iter().collect(),
        ..Watched::default()
    };
    for &c in &args.concurrency {
        progress.set_message(&format!("{} c={c}", workload.name()));
        let cell = load::run_cell(target, workload, c, limit, fixture, &watched, progress).await?;
        let ratio = report.ratio_to_floor(c, cell.throughput());
        report.push(Row::from_cell(&cell, &ratio));
        progress.advance(1);
    }
    Ok(())
}

/// The cells a run measures, for its progress: the floor at each concurrency, each HTTP
/// workload at each concurrency on each store, and recovery on each store that has it.
fn cells(args: &Args, stores: &[StoreKind]) -> u64 {
    let levels = args.concurrency.len() as u64;
    let floor = u64::from(args.workloads.contains(&Workload::Floor)) * levels
        + u64::from(args.workloads.contains(&Workload::Proxy)) * levels;
    let http = args
        .workloads
        .iter()
        .filter(|w| matches!(w, Workload::Invoke | Workload::Resubmit | Workload::Approve))
        .count() as u64;
    let recovered = if args.workloads.contains(&Workload::Recovery) {
        stores.iter().filter(|s| recovers(s)).count() as u64
    } else {
        0
    };
    floor + http * levels * stores.len() as u64 + recovered
}

/// Whether workload (d) runs on `store`: a store this run starts, on one server.
fn recovers(store: &StoreKind) -> bool {
    match store {
        StoreKind::Embedded => true,
        StoreKind::Postgres { replicas, .. } => *replicas == 1,
        StoreKind::PostgresHa { .. } | StoreKind::External => false,
    }
}

/// Runs workloads (a), (b) and (c) against one store's server.
#[allow(clippy::too_many_arguments)] // one call site; a struct would only rename these
async fn run_store(
    args: &Args,
    exe: &std::path::Path,
    dir: &std::path::Path,
    run_id: &str,
    store: &StoreKind,
    fixture: &Fixture,
    http: &reqwest::Client,
    workloads: &[Workload],
    limit: Limit,
    report: &mut Report,
    progress: &Progress,
) -> anyhow::Result<()> {
    let mut database = None;
    let mut world = match store {
        StoreKind::Embedded => {
            World::start(exe, &dir.join("embedded"), None, 1, &fixture.url).await?
        }
        StoreKind::Postgres {
            admin_url,
            replicas,
        } => {
            let db = PgDatabase::create(admin_url, "steward_bench").await?;
            let data = dir.join(format!("postgres-{replicas}"));
            let world = World::start(exe, &data, Some(&db.url), *replicas, &fixture.url).await;
            database = Some(db);
            world?
        }
        StoreKind::PostgresHa { admin_url } => {
            let db = PgDatabase::create(admin_url, "steward_bench").await?;
            let data = dir.join("postgres-ha");
            let world = World::start(exe, &data, Some(&db.url), 1, &fixture.url).await;
            database = Some(db);
            world?
        }
        StoreKind::External => {
            let url = args.server.as_deref().context("--server")?;
            World::external(
                url,
                args.operator_key.as_deref().context("--operator-key")?,
                args.approver_key.as_deref().context("--approver-key")?,
                &fixture.url,
                run_id,
            )
            .await?
        }
    };
    let target = Target::steward(http, &world, &store.label(), run_id);
    let watched = Watched {
        fixture_pid: fixture.pid,
        server_pids: world.servers.iter().filter_map(|s| s.child.id()).collect(),
        // Servers this run started answer `/metrics`, each to its own token; replicas are summed.
        metrics: world
            .servers
            .iter()
            .map(|s| (s.url.clone(), s.metrics_token.clone()))
            .collect(),
        database_url: database.as_ref().map(|db: &PgDatabase| db.url.clone()),
    };
    let mut invoke_throughput = std::collections::BTreeMap::new();
    for &workload in workloads {
        if workload == Workload::Resubmit {
            load::seed_resubmit(&target, RESUBMIT_KEYS).await?;
        }
        for &c in &args.concurrency {
            progress.set_message(&format!("{} {} c={c}", workload.name(), store.label()));
            let cell =
                load::run_cell(&target, workload, c, limit, fixture, &watched, progress).await?;
            let ratio = match workload {
                _ if matches!(store, StoreKind::PostgresHa { .. }) => {
                    report.ratio_to_store("postgres", workload, c, cell.throughput())
                }
                Workload::Invoke => {
                    invoke_throughput.insert(c, cell.throughput());
                    report.ratio_to_floor(c, cell.throughput())
                }
                Workload::Resubmit => match invoke_throughput.get(&c) {
                    Some(a) if *a > 0.0 => format!("{:.1}x (a)", cell.throughput() / a),
                    _ => "-".to_string(),
                },
                _ => report.ratio_to_floor(c, cell.throughput()),
            };
            report.push(Row::from_cell(&cell, &ratio));
            progress.advance(1);
        }
    }
    world.stop().await;
    if let Some(db) = database {
        db.drop_database().await;
    }
    Ok(())
}
