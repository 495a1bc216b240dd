//! `steward faults`, bounded for CI: the suite passes a count-bounded schedule on PostgreSQL
//! (replica kills, pauses past the lease, partitions through the fault proxy, provider faults)
//! and on the embedded store (the Steward process killed as the "primary"); and a server broken on
//! purpose (`STEWARD_FAULTS_SELFTEST`) makes it fail naming the violation.
//!
//! The runs are bounded by operations settled (`--operations`), not by time, so a slow machine
//! makes them slower, never flaky.

use crate::harness::steward_bin;
use std::process::Command;

/// The PostgreSQL server the suite makes its fresh database on (never killed: `--primary-kills
/// 0`).
fn admin_url() -> String {
    std::env::var("STEWARD_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

/// Runs `steward faults ARGS` (with `env` set for the replicas it starts); its exit success
/// and its standard output.
fn faults(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut command = Command::new(steward_bin());
    command.arg("faults").args(args);
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().expect("steward faults runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    (out.status.success(), stdout)
}

fn last_line(stdout: &str) -> &str {
    stdout.lines().last().unwrap_or("")
}

#[test]
fn a_bounded_schedule_on_postgres_loses_nothing_and_repeats_nothing() {
    let admin = admin_url();
    let (ok, out) = faults(
        &[
            "--store=postgres",
            &format!("--database={admin}"),
            "--seed=26",
            "--operations=60",
            "--replicas=2",
            "--clients=4",
            "--primary-kills=0",
            "--replica-kills=1",
            "--pauses=1",
            "--partitions=1",
            "--provider-faults=2",
            "--lease-ms=2000",
        ],
        &[],
    );
    let last = last_line(&out);
    assert!(ok && last.starts_with("faults: ok, "), "{out}");
    assert!(
        last.contains(
            " 0 duplicates, 0 lost, 0 primary failovers, 1 replica kills, 1 pauses, 1 partitions"
        ),
        "{last}"
    );
}

#[test]
fn a_bounded_schedule_on_the_embedded_store_survives_process_kills() {
    let (ok, out) = faults(
        &[
            "--store=embedded",
            "--seed=7",
            "--operations=40",
            "--clients=3",
            "--primary-kills=2",
            "--replica-kills=0",
            "--pauses=1",
            "--partitions=0",
            "--provider-faults=1",
        ],
        &[],
    );
    let last = last_line(&out);
    assert!(ok && last.starts_with("faults: ok, "), "{out}");
    assert!(last.contains(" 2 primary failovers,"), "{last}");
    assert!(out.contains("RTO: median"), "{out}");
}

/// A run (bounded by `bound`) on a server broken by `STEWARD_FAULTS_SELFTEST=<break>`: it must
/// fail, and some line must name `violation`.
fn broken_run_names(selftest: &str, bound: &str, violation: &str) {
    let (ok, out) = faults(
        &[
            "--store=embedded",
            "--seed=3",
            bound,
            "--clients=2",
            "--gated-percent=0",
            "--primary-kills=0",
            "--replica-kills=0",
            "--pauses=0",
            "--partitions=0",
            "--provider-faults=0",
            "--drain-s=20",
            "--recovery-s=5",
        ],
        &[("STEWARD_FAULTS_SELFTEST", selftest)],
    );
    assert!(!ok, "a broken build passed: {out}");
    let last = last_line(&out);
    assert!(last.starts_with("faults: FAILED "), "{out}");
    // A failed run keeps its directory for a person to read; this one was expected.
    if let Some(log) = last.split(", event log at ").nth(1) {
        if let Some(dir) = std::path::Path::new(log.trim()).parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    assert!(
        out.lines()
            .any(|l| l.contains(&format!("{violation}: ")) && !l.starts_with("RPO")),
        "no line names {violation:?}: {out}"
    );
}

#[test]
fn a_build_that_sends_twice_fails_with_duplicates() {
    broken_run_names("duplicate_send", "--operations=12", "duplicate");
}

#[test]
fn a_build_that_acknowledges_without_committing_fails_with_lost() {
    broken_run_names("ack_without_commit", "--operations=12", "lost");
}

#[test]
fn a_build_that_leaves_attempts_hanging_fails_with_left_dispatching() {
    // Bounded by time: every agent ends up waiting on a hung write, so a count would never be
    // reached (the failure, not the pass, is what this run is for).
    broken_run_names("hang_dispatch", "--duration-s=8", "left dispatching");
}
