//! Log lines written to a file carry no terminal colour codes, and `--log-format json` writes one
//! JSON object per line (what log shippers read).

use crate::harness::*;

#[tokio::test]
async fn a_log_file_gets_plain_text_without_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let log = server.log();
    assert!(log.contains("INFO"), "no log lines written: {log}");
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a log file: {log:?}"
    );
}

#[tokio::test]
async fn log_format_json_writes_one_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &["--log-format", "json"]);
    let log = server.log();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "no log lines written");
    for line in lines {
        let event: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not one JSON object per line ({e}): {line}"));
        assert!(event["level"].is_string(), "no level: {line}");
        assert!(event["fields"].is_object(), "no fields: {line}");
    }
}
