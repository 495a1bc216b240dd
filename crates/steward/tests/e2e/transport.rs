//! The connection edge of a real `steward serve`: slow and idle clients, the connection cap, a
//! lowered file limit, and who may read `/metrics`. Raw sockets, so nothing between the test
//! and the server pools, retries or times out on its own; every wait is bounded.

use crate::harness::{create_key, steward_bin};
use serde_json::Value;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a `/healthz` probe may take: the bound under test.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long past its timeout the server may take to close a connection (scheduling slack on a
/// loaded two-core machine).
const CLOSE_SLACK: Duration = Duration::from_secs(3);
/// The partial request a slow client sends: no blank line, so the head never ends.
const PARTIAL_HEAD: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: x\r\n";

/// A `steward serve` under `ulimit -n`, killed on drop.
struct Limited {
    child: Child,
    addr: SocketAddr,
    /// The separate metrics listener, when started with one.
    metrics: Option<SocketAddr>,
    log: std::path::PathBuf,
}

impl Limited {
    fn start(data: &Path, open_files_max: u32, args: &[&str]) -> Limited {
        let log = data.with_extension("log");
        let log_file = std::fs::File::create(&log).expect("log file");
        let mut child = Command::new("bash")
            .args(["-c", r#"ulimit -n "$1" && shift && exec "$@""#, "bash"])
            .arg(open_files_max.to_string())
            .arg(steward_bin())
            .arg("serve")
            .arg("--data")
            .arg(data)
            .args(["--listen", "127.0.0.1:0", "--reconcile-interval-ms", "0"])
            .args(args)
            .env_remove("STEWARD_METRICS_TOKEN")
            .env("STEWARD_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .spawn()
            .expect("steward serve starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let started = Instant::now();
        let mut metrics = None;
        loop {
            let left = Duration::from_secs(30).saturating_sub(started.elapsed());
            let Ok(line) = rx.recv_timeout(left) else {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "steward serve did not become ready; log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            };
            if let Some(url) = line.strip_prefix("metrics on http://") {
                metrics = Some(url.trim_end_matches("/metrics").parse().unwrap());
            }
            if let Some(url) = line.strip_prefix("listening on http://") {
                return Limited {
                    child,
                    addr: url.parse().unwrap(),
                    metrics,
                    log,
                };
            }
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request on a fresh connection with `Connection: close`: the status and the body.
fn request(addr: SocketAddr, head: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT)?;
    stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
    stream.set_write_timeout(Some(PROBE_TIMEOUT))?;
    stream.write_all(format!("{head}Host: x\r\nConnection: close\r\n\r\n").as_bytes())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let answer = String::from_utf8_lossy(&answer).to_string();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

fn get(addr: SocketAddr, path: &str, authorization: Option<&str>) -> (u16, String) {
    let auth = authorization.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    request(addr, &format!("GET {path} HTTP/1.1\r\n{auth}")).expect("an answer")
}

/// `/healthz` answers 200 within [`PROBE_TIMEOUT`] (the socket timeouts enforce it).
fn assert_healthz_answers(server: &Limited, when: &str) {
    match request(server.addr, "GET /healthz HTTP/1.1\r\n") {
        Ok((200, body)) => assert!(body.contains("ok"), "{when}: {body}"),
        other => panic!(
            "{when}: /healthz did not answer within {PROBE_TIMEOUT:?}: {other:?}\nlog:\n{}",
            server.log()
        ),
    }
}

/// Opens `count` connections that send a partial head, probing `/healthz` every tenth.
fn open_half_open(server: &Limited, count: usize) -> Vec<(TcpStream, Instant)> {
    let mut sockets = Vec::with_capacity(count);
    for n in 0..count {
        let mut stream = TcpStream::connect_timeout(&server.addr, PROBE_TIMEOUT)
            .unwrap_or_else(|e| panic!("connection {n}: {e}"));
        stream.write_all(PARTIAL_HEAD).unwrap();
        sockets.push((stream, Instant::now()));
        if n % 10 == 9 {
            assert_healthz_answers(server, &format!("with {} half-open sockets", n + 1));
        }
    }
    sockets
}

/// Every socket is closed by the server (EOF or reset) within `timeout` plus slack of when it
/// was opened.
fn assert_closed_within(sockets: Vec<(TcpStream, Instant)>, timeout: Duration, server: &Limited) {
    let mut still_open = 0;
    for (mut stream, opened) in sockets {
        let deadline = opened + timeout + CLOSE_SLACK;
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(10));
        stream.set_read_timeout(Some(left)).unwrap();
        let mut buf = [0u8; 512];
        match stream.read(&mut buf) {
            Ok(0) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
                ) => {}
            Ok(_) | Err(_) => still_open += 1,
        }
    }
    assert_eq!(
        still_open,
        0,
        "sockets still open {:?} past the timeout; log:\n{}",
        CLOSE_SLACK,
        server.log()
    );
}

#[test]
fn slow_clients_with_partial_headers_neither_starve_healthz_nor_stay_open() {
    let dir = tempfile::tempdir().unwrap();
    let header_timeout = Duration::from_secs(2);
    let server = Limited::start(
        &dir.path().join("data"),
        256,
        &[
            "--connections-max",
            "64",
            "--header-read-timeout-ms",
            "2000",
        ],
    );
    // More slow clients than the cap: each new connection at the cap closes the oldest one
    // still waiting for its head.
    let sockets = open_half_open(&server, 150);
    for n in 0..5 {
        assert_healthz_answers(&server, &format!("probe {n} after all were opened"));
    }
    assert_closed_within(sockets, header_timeout, &server);
    assert_healthz_answers(&server, "after the slow clients were closed");
}

#[test]
fn out_of_file_descriptors_the_accept_loop_frees_a_waiting_connection_and_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    // The cap is far above what the file limit allows: accept itself fails (EMFILE).
    let server = Limited::start(
        &dir.path().join("data"),
        64,
        &[
            "--connections-max",
            "1000",
            "--header-read-timeout-ms",
            "2000",
        ],
    );
    let sockets = open_half_open(&server, 150);
    for n in 0..5 {
        assert_healthz_answers(&server, &format!("probe {n} after all were opened"));
    }
    assert_closed_within(sockets, Duration::from_secs(2), &server);
    assert_healthz_answers(&server, "after the slow clients were closed");
}

#[test]
fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    // The header timer is long: only the idle timer can close the connection in time.
    let server = Limited::start(
        &dir.path().join("data"),
        256,
        &[
            "--idle-timeout-ms",
            "1000",
            "--header-read-timeout-ms",
            "60000",
        ],
    );
    let mut stream = TcpStream::connect_timeout(&server.addr, PROBE_TIMEOUT).unwrap();
    stream.set_read_timeout(Some(PROBE_TIMEOUT)).unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = [0u8; 1024];
    let n = stream.read(&mut answer).unwrap();
    assert!(
        answer[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        &answer[..n]
    );
    let answered = Instant::now();
    assert_closed_within(vec![(stream, answered)], Duration::from_secs(1), &server);
}

#[test]
fn a_dribbled_request_body_is_cut_off_after_the_body_read_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Limited::start(
        &data,
        256,
        &["--connections-max", "8", "--body-read-timeout-ms", "1000"],
    );
    let key = create_key(&data, "test", &["--role", "operator"]);
    // Authenticated requests whose bodies never finish keep their connections busy, out of
    // reach of eviction: as many as the cap.
    let mut sockets = Vec::new();
    for _ in 0..8 {
        let mut stream = TcpStream::connect_timeout(&server.addr, PROBE_TIMEOUT).unwrap();
        stream
            .write_all(
                format!(
                    "POST /api/v2/actions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\
                     Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"name\""
                )
                .as_bytes(),
            )
            .unwrap();
        sockets.push(stream);
    }
    let sent = Instant::now();
    for mut stream in sockets {
        let left = (sent + Duration::from_secs(1) + CLOSE_SLACK)
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(10));
        stream.set_read_timeout(Some(left)).unwrap();
        let mut answer = Vec::new();
        let read = stream.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            read.is_ok() && answer.starts_with("HTTP/1.1 400"),
            "{read:?}: {answer}\nlog:\n{}",
            server.log()
        );
        assert!(answer.contains("\"success\":false"), "{answer}");
    }
    assert_healthz_answers(&server, "after the slow bodies were cut off");
}

#[test]
fn metrics_are_not_served_on_the_main_listener_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = Limited::start(&dir.path().join("data"), 1024, &[]);
    let (status, body) = get(server.addr, "/metrics", None);
    assert_eq!(status, 404, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["success"], false);
    assert_eq!(body["error"]["code"], "ROUTE_NOT_FOUND");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("--metrics-token") && message.contains("--metrics-listen"),
        "says how to turn it on: {message}"
    );
}

#[test]
fn metrics_with_a_token_answer_only_the_right_bearer() {
    let dir = tempfile::tempdir().unwrap();
    let token = "a-metrics-token-of-some-length";
    let server = Limited::start(&dir.path().join("data"), 1024, &["--metrics-token", token]);
    for authorization in [None, Some("Bearer wrong-token-wrong-token"), Some(token)] {
        let (status, body) = get(server.addr, "/metrics", authorization);
        assert_eq!(status, 401, "{authorization:?}: {body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["code"], "AUTHENTICATION_FAILED");
    }
    let (status, body) = get(server.addr, "/metrics", Some(&format!("Bearer {token}")));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("steward_unknown_effects"), "{body}");
}

#[test]
fn metrics_listen_serves_metrics_alone_on_its_own_address() {
    let dir = tempfile::tempdir().unwrap();
    let server = Limited::start(
        &dir.path().join("data"),
        1024,
        &["--metrics-listen", "127.0.0.1:0"],
    );
    let metrics = server.metrics.expect("the metrics address is printed");
    let (status, body) = get(metrics, "/metrics", None);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("steward_unknown_effects"), "{body}");
    assert_eq!(
        get(server.addr, "/metrics", None).0,
        404,
        "not on the main one"
    );
    let (status, body) = get(metrics, "/healthz", None);
    assert_eq!(status, 404, "only /metrics there: {body}");
    assert!(body.contains("ROUTE_NOT_FOUND"), "{body}");
}

#[test]
fn a_non_loopback_metrics_listener_needs_a_token() {
    let dir = tempfile::tempdir().unwrap();
    // A documentation address (RFC 5737) no interface has: should the check ever go, binding
    // it fails instead of opening a port, and the message below is missing.
    let out = Command::new(steward_bin())
        .arg("serve")
        .arg("--data")
        .arg(dir.path().join("data"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "192.0.2.1:9100",
        ])
        .env_remove("STEWARD_METRICS_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--metrics-token"), "{stderr}");
}
