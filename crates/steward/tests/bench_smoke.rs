//! `steward bench` runs end to end against its own fixture and server and prints its table.
//! Nothing is timed: no latency or throughput is asserted, only that the report has its rows,
//! that every request was answered as expected and that the fixture counted one write per
//! new operation and none for resubmissions (the bench exits non-zero otherwise).

use std::process::Command;

/// Runs `steward bench` with `args` and returns its stdout and stderr, once it has exited 0 (it
/// exits non-zero on an error or a wrong provider write count).
fn bench(args: &[&str]) -> (String, String) {
    let run = Command::new(env!("CARGO_BIN_EXE_steward"))
        .arg("bench")
        .args(args)
        .output()
        .expect("steward bench runs");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(
        run.status.success(),
        "steward bench failed ({}):\n{stdout}\n{stderr}",
        run.status
    );
    (stdout, stderr)
}

#[test]
fn bench_reports_the_rows_it_was_asked_for() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("results").join("smoke.md");
    let (stdout, _) = bench(&[
        "--workloads",
        "a,b",
        "--concurrency",
        "1",
        "--requests",
        "20",
        "--duration-s",
        "120",
        "--out",
        out.to_str().expect("a UTF-8 path"),
    ]);
    for row in [
        "| a | embedded | 1 | 20 | 0 | 20 |",
        "| b | embedded | 1 | 20 | 0 | 0 |",
    ] {
        assert!(stdout.contains(row), "no row {row:?} in:\n{stdout}");
    }
    assert!(
        !stdout.contains("| floor |") && !stdout.contains("| c |"),
        "rows for workloads that were not asked for:\n{stdout}"
    );
    let written = std::fs::read_to_string(&out).expect("the Markdown file");
    assert_eq!(written.trim(), stdout.trim());
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.with_extension("json")).expect("the JSON file"))
            .expect("valid JSON");
    assert_eq!(json["rows"].as_array().map(Vec::len), Some(2));
    assert!(
        stdout.contains("Where the time goes") && stdout.contains("| a | embedded | 1 | "),
        "no \"Where the time goes\" table in:\n{stdout}"
    );
    // Where the time goes: every figure of a Linux run is measured, and the CPU is not zero.
    #[cfg(target_os = "linux")]
    for row in json["rows"].as_array().expect("rows") {
        let split = &row["split"];
        let figure = |pointer: &str| {
            split
                .pointer(pointer)
                .and_then(serde_json::Value::as_f64)
                .unwrap_or_else(|| panic!("no {pointer} in {split}"))
        };
        let cpu = figure("/cpuUs/client") + figure("/cpuUs/fixture") + figure("/cpuUs/steward");
        assert!(cpu > 0.0, "no CPU counted: {split}");
        assert!(figure("/machineBusyPct") > 0.0, "an idle machine: {split}");
        assert!(figure("/serverMs") > 0.0, "no server time scraped: {split}");
        assert!(split["pgWaits"].is_null(), "no PostgreSQL here: {split}");
        match row["workload"].as_str() {
            // A new invoke: the intent and attempt committed before the call, the answer after.
            Some("a") => {
                assert!(figure("/commitsPerRequest") >= 2.0, "{split}");
                assert!(figure("/dispatchMs") > 0.0, "{split}");
            }
            // A resubmission writes nothing and calls no provider.
            _ => {
                assert_eq!(figure("/commitsPerRequest"), 0.0, "{split}");
                assert_eq!(figure("/dispatchMs"), 0.0, "{split}");
            }
        }
    }
    let svg = std::fs::read_to_string(out.with_extension("svg")).expect("the SVG file");
    assert!(svg.starts_with("<svg") && svg.contains("polyline"));
}

/// Two replicas on one PostgreSQL database share the load: every request answered as expected
/// and one provider write per new operation, whichever replica took the invoke and whichever
/// took the approval (workload (c) approves on the other replica).
#[test]
fn bench_spreads_the_load_over_postgres_replicas() {
    let admin_url = std::env::var("STEWARD_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string());
    let (stdout, _) = bench(&[
        "--workloads",
        "a,c",
        "--concurrency",
        "2",
        "--requests",
        "10",
        "--duration-s",
        "120",
        "--replicas",
        "2",
        "--database",
        &admin_url,
    ]);
    for row in [
        "| a | postgres x2 | 2 | 10 | 0 | 10 |",
        "| c | postgres x2 | 2 | 10 | 0 | 10 |",
    ] {
        assert!(stdout.contains(row), "no row {row:?} in:\n{stdout}");
    }
    // Both replicas' commits are scraped, and the database's backends were sampled.
    let table = stdout
        .split("Where the time goes")
        .nth(1)
        .expect("a \"Where the time goes\" table");
    let line = table
        .lines()
        .find(|l| l.starts_with("| a | postgres x2 | 2 |"))
        .expect("workload (a)'s line");
    let cells: Vec<&str> = line.split('|').map(str::trim).collect();
    // | a | store | c | requests/s | busy | client | fixture | steward | postgres | waits |
    //   server | commits/req | ...
    let commits: f64 = cells[12].parse().expect("commits per request");
    assert!(commits >= 2.0, "commits per request {commits} in {line}");
    assert_ne!(cells[15], "-", "no PostgreSQL backends sampled: {line}");
}

/// The durable-proxy floor: every request it forwarded is in its journal with the fixture's
/// answer, and the fixture counted one write per request (the bench exits non-zero otherwise).
#[test]
fn bench_measures_the_durable_proxy_floor_and_its_journal_holds_every_call() {
    let (stdout, stderr) = bench(&[
        "--workloads",
        "floor,proxy",
        "--concurrency",
        "4",
        "--requests",
        "40",
        "--duration-s",
        "120",
        "--keep",
    ]);
    for row in [
        "| floor | - | 4 | 40 | 0 | 40 |",
        "| proxy | embedded | 4 | 40 | 0 | 40 |",
    ] {
        assert!(stdout.contains(row), "no row {row:?} in:\n{stdout}");
    }
    let kept = stderr
        .lines()
        .find_map(|l| l.strip_prefix("bench: kept "))
        .expect("the kept working directory");
    let kept = std::path::Path::new(kept.trim());
    let journal = rusqlite::Connection::open(kept.join("proxy").join("proxy.db")).expect("journal");
    let (calls, answered): (i64, i64) = journal
        .query_row(
            "SELECT COUNT(*), COUNT(*) FILTER (WHERE status = 200 AND answer IS NOT NULL) FROM calls",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("the journal's calls");
    // The 40 measured requests and the warm-up's one per worker, which the table leaves out.
    assert_eq!(
        (calls, answered),
        (44, 44),
        "every call recorded and answered"
    );
    // The proxy's CPU is counted where Steward's is.
    let line = stdout
        .split("Where the time goes")
        .nth(1)
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("| proxy | embedded | 4 |"))
        })
        .expect("the proxy's line");
    let cells: Vec<&str> = line.split('|').map(str::trim).collect();
    let cpu: f64 = cells[8].parse().expect("the proxy's CPU per request");
    assert!(cpu > 0.0, "no CPU counted for the proxy: {line}");
    let _ = std::fs::remove_dir_all(kept);
}
