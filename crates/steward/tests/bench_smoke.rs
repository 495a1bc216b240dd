//! `steward bench` runs end to end against its own fixture and server and prints its table.
//! Nothing is timed: no latency or throughput is asserted, only that the report has its rows,
//! that every request was answered as expected and that the fixture counted one write per
//! new operation and none for resubmissions (the bench exits non-zero otherwise).

use std::process::Command;

#[test]
fn bench_reports_the_rows_it_was_asked_for() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("results").join("smoke.md");
    let run = Command::new(env!("CARGO_BIN_EXE_steward"))
        .args([
            "bench",
            "--workloads",
            "a,b",
            "--concurrency",
            "1",
            "--requests",
            "20",
            "--duration-s",
            "120",
            "--out",
        ])
        .arg(&out)
        .output()
        .expect("steward bench runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "steward bench failed ({}):\n{stdout}\n{stderr}",
        run.status
    );
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
    let run = Command::new(env!("CARGO_BIN_EXE_steward"))
        .args([
            "bench",
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
        ])
        .output()
        .expect("steward bench runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "steward bench failed ({}):\n{stdout}\n{stderr}",
        run.status
    );
    for row in [
        "| a | postgres x2 | 2 | 10 | 0 | 10 |",
        "| c | postgres x2 | 2 | 10 | 0 | 10 |",
    ] {
        assert!(stdout.contains(row), "no row {row:?} in:\n{stdout}");
    }
}
