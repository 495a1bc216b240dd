//! `steward chaos`: the controlled-termination kit (docs/INVARIANTS.md, the crash windows).
//!
//! For each crash point and iteration it builds a fresh world on loopback (the provider fixture
//! in-process, a `steward serve` child on a fresh data directory, keys, a `stripe.refund` action
//! and a gated copy), runs the worker, stops the worker or the server inside the window (by the
//! armed crash point, or by SIGKILL while the fixture holds a committed write), restarts it
//! without the fault and lets the worker recover. Then it counts **provider writes in the
//! fixture** per business operation, never HTTP answers, and reads the worker's journal for the
//! final states.
//!
//! The worker contract (for `--worker CMD`, run with `sh -c`): configuration arrives in the
//! environment (`STEWARD_URL`, `STEWARD_API_KEY`, `STEWARD_JOURNAL`, `STEWARD_TASKS`,
//! `STEWARD_ACTION`, `STEWARD_ENVIRONMENT`, and `STEWARD_CRASH_AT` when a client point is armed);
//! the worker journals its operations with `steward-client` (or the Python `steward-recovery`,
//! which keeps the same table; `examples/python-refund-worker`) in the SQLite file
//! `STEWARD_JOURNAL`, with each task's `paymentIntent` in the operation input; it exits 0 once
//! every task rests (done, or explicitly pending approval or unknown).

mod audit;
pub(crate) mod world;

use super::progress::Progress;
use anyhow::{bail, Context};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;
use steward_client::{Journal, SqliteJournal};
use steward_core::{ApprovalId, CrashPoint};
use steward_fixture::{FaultMode, FaultPlan};
use world::{aborted, eventually, kill, kill_worker, wait_exit, World};

/// How long a `steward serve` child gets to print its ready line, in seconds.
pub(super) const SERVER_READY_S: u64 = 30;
/// How long one worker run may take before it is killed and reported, in seconds. A healthy
/// run of a few tasks takes about a second; an approval wait is cut short by chaos approving.
pub(super) const WORKER_RUN_S: u64 = 120;
/// How long to wait for a process to reach its armed crash point, in seconds.
pub(super) const CRASH_WAIT_S: u64 = 30;
/// How long the fixture holds a committed write in the SIGKILL points, in milliseconds: long
/// enough to kill a process inside the hold, short enough to keep a run quick.
pub(super) const HOLD_MS: u64 = 3_000;
/// The pause between checks while waiting for a process or a write, in milliseconds.
pub(super) const POLL_MS: u64 = 50;
/// How long the restarted worker observes an approval before giving up, in seconds.
pub(super) const WORKER_APPROVAL_WAIT_S: u64 = 60;
/// Lines of a worker's stderr shown with a problem.
pub(super) const LOG_TAIL_LINES: usize = 15;

pub(super) const ENVIRONMENT: &str = "test";
pub(super) const ACTION: &str = "refund-order";
pub(super) const GATED_ACTION: &str = "refund-order-gated";
pub(super) const SECRET: &str = "STRIPE_TEST_KEY";
pub(super) const SECRET_VALUE: &str = "sk_test_chaosKit0123456789";

#[derive(clap::Args)]
pub struct Args {
    /// Runs per crash point, each in a fresh world.
    #[arg(long, default_value_t = 3)]
    iterations: u32,
    /// Comma-separated points to exercise (default: all). The crash points of
    /// docs/INVARIANTS.md, plus `sigkill_hold` (SIGKILL the server while the provider holds a
    /// committed write) and `sigkill_worker` (SIGKILL the worker in the same window).
    #[arg(long, value_delimiter = ',')]
    points: Option<Vec<String>>,
    /// The worker to drive, run with `sh -c` (default: the bundled refund worker).
    #[arg(long)]
    worker: Option<String>,
    /// Refund tasks per run.
    #[arg(long, default_value_t = 3)]
    tasks: u32,
    /// Keep each run's directory (data, journal, logs) and print where it is.
    #[arg(long)]
    keep: bool,
}

/// One window to stop a process in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Point {
    Crash(CrashPoint),
    /// SIGKILL the server while the fixture holds a committed write.
    SigkillHold,
    /// SIGKILL the worker while the fixture holds a committed write.
    SigkillWorker,
}

impl Point {
    fn all() -> Vec<Point> {
        let mut all: Vec<Point> = CrashPoint::ALL.into_iter().map(Point::Crash).collect();
        all.extend([Point::SigkillHold, Point::SigkillWorker]);
        all
    }

    fn name(self) -> &'static str {
        match self {
            Point::Crash(p) => p.name(),
            Point::SigkillHold => "sigkill_hold",
            Point::SigkillWorker => "sigkill_worker",
        }
    }

    fn parse(name: &str) -> Option<Point> {
        Self::all().into_iter().find(|p| p.name() == name)
    }

    /// Provider writes expected for an operation that ends `unknown` at this point: after
    /// `server_after_record` nothing was sent; in every other server window the provider
    /// committed before Steward died.
    pub(super) fn unknown_writes(self) -> usize {
        match self {
            Point::Crash(CrashPoint::ServerAfterRecord) => 0,
            _ => 1,
        }
    }
}

/// What one or more runs of a point found.
#[derive(Debug, Default)]
pub(super) struct Tally {
    pub(super) runs: usize,
    pub(super) operations: usize,
    pub(super) expected: usize,
    pub(super) seen: usize,
    pub(super) duplicates: usize,
    pub(super) lost: usize,
    pub(super) states: BTreeMap<String, usize>,
    pub(super) problems: Vec<String>,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.runs += other.runs;
        self.operations += other.operations;
        self.expected += other.expected;
        self.seen += other.seen;
        self.duplicates += other.duplicates;
        self.lost += other.lost;
        for (state, n) in other.states {
            *self.states.entry(state).or_default() += n;
        }
        self.problems.extend(other.problems);
    }

    fn failed(&self) -> bool {
        self.duplicates > 0
            || self.lost > 0
            || self.expected != self.seen
            || !self.problems.is_empty()
    }
}

/// Runs one point once, in `dir`.
async fn run_point(exe: &Path, dir: &Path, point: Point, args: &Args) -> anyhow::Result<Tally> {
    let mut world = World::new(exe, dir, point, args.tasks, args.worker.clone()).await?;
    let mut problems = vec![];
    let mut approvals_at_crash: HashMap<String, Option<ApprovalId>> = HashMap::new();
    match point {
        Point::Crash(CrashPoint::AwaitingApproval) => {
            world
                .run_worker(
                    Some(CrashPoint::AwaitingApproval),
                    GATED_ACTION,
                    &mut problems,
                )
                .await?;
            for op in SqliteJournal::open(&world.journal)?.all().await? {
                approvals_at_crash.insert(op.id.to_string(), op.approval_id.clone());
            }
            if approvals_at_crash.values().all(Option::is_none) {
                problems.push("no operation was pending approval when the worker died".into());
            }
            let mut child = world.spawn_worker(None, GATED_ACTION)?;
            let n = world.worker_runs;
            let status = world.approve_until_exit(&mut child, &mut problems).await?;
            world.judge_worker(status, None, n, &mut problems);
            if status.is_none() {
                kill_worker(&mut child).await;
            }
        }
        Point::Crash(p) if p.is_server() => {
            let mut child = world.spawn_worker(None, ACTION)?;
            let n = world.worker_runs;
            match wait_exit(&mut world.server.child, Duration::from_secs(CRASH_WAIT_S)).await {
                Some(s) if aborted(&s) => {}
                other => problems.push(format!(
                    "the server never reached {} ({other:?}); worker stderr:\n    {}",
                    p.name(),
                    world.worker_log(n)
                )),
            }
            kill_worker(&mut child).await;
            world.restart_server().await?;
            world.run_worker(None, ACTION, &mut problems).await?;
        }
        Point::Crash(p) => {
            world.run_worker(Some(p), ACTION, &mut problems).await?;
            world.run_worker(None, ACTION, &mut problems).await?;
        }
        Point::SigkillHold | Point::SigkillWorker => {
            world
                .fixture
                .set_faults(FaultPlan::new(FaultMode::HoldAfterCommit).hold_ms(HOLD_MS));
            let mut child = world.spawn_worker(None, ACTION)?;
            let fixture = &world.fixture;
            let held = eventually(Duration::from_secs(CRASH_WAIT_S), || {
                fixture.write_count() >= 1
            })
            .await;
            if !held {
                problems.push("the provider never committed the held write".into());
            }
            if point == Point::SigkillHold {
                kill(&mut world.server.child).await;
                kill_worker(&mut child).await;
                world.restart_server().await?;
            } else {
                kill_worker(&mut child).await;
            }
            world.run_worker(None, ACTION, &mut problems).await?;
        }
    }
    let mut tally = audit::audit(&world, point, &approvals_at_crash).await?;
    tally.runs = world.worker_runs;
    tally.problems.extend(problems);
    kill(&mut world.server.child).await;
    world.fixture.shutdown().await;
    Ok(tally)
}

fn print_table(rows: &[(Point, Tally)]) {
    println!(
        "{:<22} {:>4} {:>4} {:>9} {:>6} {:>10} {:>4}  final states",
        "crash point", "runs", "ops", "expected", "seen", "duplicates", "lost"
    );
    for (point, t) in rows {
        let states = t
            .states
            .iter()
            .map(|(s, n)| format!("{s}={n}"))
            .collect::<Vec<_>>()
            .join(" ");
        println!(
            "{:<22} {:>4} {:>4} {:>9} {:>6} {:>10} {:>4}  {}{}",
            point.name(),
            t.runs,
            t.operations,
            t.expected,
            t.seen,
            t.duplicates,
            t.lost,
            states,
            if t.failed() { "  FAIL" } else { "" }
        );
    }
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let points = match &args.points {
        None => Point::all(),
        Some(names) => names
            .iter()
            .map(|n| {
                Point::parse(n.trim()).with_context(|| {
                    let all: Vec<&str> = Point::all().into_iter().map(Point::name).collect();
                    format!("unknown point {n:?}; known: {}", all.join(","))
                })
            })
            .collect::<anyhow::Result<_>>()?,
    };
    if args.iterations == 0 || args.tasks == 0 {
        bail!("--iterations and --tasks must be at least 1");
    }
    let exe = std::env::current_exe().context("locating the steward binary")?;
    let root = tempfile::Builder::new()
        .prefix("steward-chaos-")
        .tempdir()?;
    let mut rows = vec![];
    let runs = points.len() as u64 * u64::from(args.iterations);
    let progress = Progress::new("chaos", "runs", runs);
    for point in points {
        let mut tally = Tally::default();
        for i in 1..=args.iterations {
            let dir = root.path().join(format!("{}-{i}", point.name()));
            std::fs::create_dir_all(&dir)?;
            progress.now_doing(&format!(
                "{} iteration {i}/{}",
                point.name(),
                args.iterations
            ));
            match run_point(&exe, &dir, point, &args).await {
                Ok(t) => tally.add(t),
                Err(e) => tally
                    .problems
                    .push(format!("iteration {i} could not run: {e:#}")),
            }
            progress.advance(1);
        }
        rows.push((point, tally));
    }
    progress.finish();
    print_table(&rows);
    let mut failed = false;
    for (point, t) in &rows {
        failed |= t.failed();
        for problem in &t.problems {
            println!("{}: {problem}", point.name());
        }
    }
    if args.keep {
        println!("runs kept in {}", root.keep().display());
    }
    println!("{}", if failed { "chaos: FAILED" } else { "chaos: ok" });
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
