//! `steward sim`: the deterministic simulator (crates/steward-sim) outside CI. `--seeds N` runs
//! seeds 0..N and reports the first that breaks an invariant; `--seed S` replays one and prints
//! its event log, which is the same, byte for byte, every time.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;
use steward_sim::{Bug, Config, Run, Simulator, STEPS_DEFAULT};

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
    /// Break the simulated server on purpose, to see the checks catch it:
    /// replay-without-idempotency or skip-durable-attempt.
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

fn simulate(args: Args) -> anyhow::Result<ExitCode> {
    let sim = Simulator::new();
    let config = |seed| Config {
        seed,
        steps: args.steps,
        bug: args.bug,
    };
    if let Some(seed) = args.seed {
        let run = sim.run(&config(seed));
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
    let started = Instant::now();
    for seed in args.from..args.from.saturating_add(args.seeds) {
        let run = sim.run(&config(seed));
        if run.violation.is_some() {
            return Ok(report(&run, &args));
        }
    }
    let elapsed = started.elapsed();
    println!(
        "{} seeds passed in {:.1} s ({:.2} ms a seed)",
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
