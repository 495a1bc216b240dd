//! `steward sim`: the deterministic simulator (crates/steward-sim) outside CI. `--seeds N` runs
//! seeds 0..N (on `--jobs` threads) and reports a seed that breaks an invariant; `--seed S` replays one and prints
//! its event log, which is the same, byte for byte, every time. How many seeds have run shows on
//! standard error (a bar on a terminal, a line per tenth otherwise); standard output has only the
//! result.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use steward_sim::{Bug, Config, Run, Simulator, STEPS_DEFAULT};

use super::progress::Progress;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Run seeds 0..N (or FROM..FROM+N with --from).
    #[arg(long, default_value_t = 1_000, conflicts_with = "seed")]
    seeds: u64,
    /// The first seed of --seeds.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Replay one seed and print its event log.
    #[arg(long)]
    seed: Option<u64>,
    /// Steps of random work per seed before the final phase.
    #[arg(long, default_value_t = STEPS_DEFAULT)]
    steps: u32,
    /// Seeds run at once, each job on its own thread with its own store (a seed's run does not
    /// depend on which job runs it). Default: the number of CPUs.
    #[arg(long)]
    jobs: Option<usize>,
    /// Run a broken build of the dispatcher on purpose, to see the checks catch it:
    /// replay-without-idempotency, skip-durable-attempt or resend-after-unknown.
    #[arg(long, value_parser = parse_bug)]
    bug: Option<Bug>,
}

fn parse_bug(name: &str) -> Result<Bug, String> {
    Bug::parse(name).ok_or_else(|| {
        let names: Vec<&str> = Bug::ALL.iter().map(|b| b.name()).collect();
        format!("expected one of {}", names.join(", "))
    })
}

/// Runs on a thread of its own: the simulator drives its own single-threaded runtime, which
/// cannot start inside the CLI's.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    std::thread::spawn(move || simulate(args))
        .join()
        .map_err(|_| anyhow::anyhow!("the simulator panicked"))?
}

fn config(args: &Args, seed: u64) -> Config {
    Config {
        seed,
        steps: args.steps,
        bug: args.bug,
    }
}

fn simulate(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(seed) = args.seed {
        let run = Simulator::new().run(&config(&args, seed));
        let mut out = std::io::stdout().lock();
        for line in &run.log {
            // A closed pipe (`| head`) ends the listing, not the program.
            if writeln!(out, "{line}").is_err() {
                break;
            }
        }
        drop(out);
        return Ok(report(&run, &args));
    }
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1) as u64;
    let started = Instant::now();
    let broken = AtomicBool::new(false);
    let progress = Progress::new("sim", "seeds", args.seeds);
    let end = args.from.saturating_add(args.seeds);
    // Job j runs seeds from+j, from+j+jobs, ...; every job stops once one finds a violation.
    let found: Vec<Run> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs)
            .map(|job| {
                let (args, broken, progress) = (&args, &broken, &progress);
                scope.spawn(move || {
                    let sim = Simulator::new();
                    let mut seed = args.from + job;
                    while seed < end && !broken.load(Ordering::Relaxed) {
                        let run = sim.run(&config(args, seed));
                        if run.violation.is_some() {
                            broken.store(true, Ordering::Relaxed);
                            return Some(run);
                        }
                        progress.advance(1);
                        seed += jobs;
                    }
                    None
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| h.join().expect("a simulator job panicked"))
            .collect()
    });
    progress.finish();
    if let Some(run) = found.into_iter().min_by_key(|r| r.seed) {
        return Ok(report(&run, &args));
    }
    let elapsed = started.elapsed();
    println!(
        "{} seeds passed in {:.1} s ({:.2} ms a seed; jobs: {jobs})",
        args.seeds,
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1_000.0 / args.seeds.max(1) as f64
    );
    Ok(ExitCode::SUCCESS)
}

fn report(run: &Run, args: &Args) -> ExitCode {
    match &run.violation {
        None => {
            println!("seed {}: every invariant held", run.seed);
            ExitCode::SUCCESS
        }
        Some(violation) => {
            let mut replay = format!("steward sim --seed {}", run.seed);
            if args.steps != STEPS_DEFAULT {
                replay.push_str(&format!(" --steps {}", args.steps));
            }
            if let Some(bug) = args.bug {
                replay.push_str(&format!(" --bug {}", bug.name()));
            }
            println!(
                "seed {} broke an invariant: {violation}\nreplay: {replay}",
                run.seed
            );
            ExitCode::FAILURE
        }
    }
}
