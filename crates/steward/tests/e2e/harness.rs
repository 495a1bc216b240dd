//! Real processes on loopback: a `steward serve` child per test, an in-process fixture, and a
//! small JSON client. Every wait is bounded.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use steward_fixture::{FixtureConfig, FixtureHandle};

/// How long a child gets to print its ready line.
const READY_WAIT: Duration = Duration::from_secs(30);

pub fn steward_bin() -> &'static str {
    env!("CARGO_BIN_EXE_steward")
}

pub async fn fixture() -> FixtureHandle {
    steward_fixture::spawn(FixtureConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        state_file: None,
    })
    .await
    .expect("fixture starts")
}

/// A running `steward serve`.
pub struct Server {
    pub data: PathBuf,
    pub url: String,
    child: Child,
    log: PathBuf,
    args: Vec<String>,
    envs: Vec<(String, String)>,
}

impl Server {
    pub fn start(data: &Path, args: &[&str]) -> Server {
        Self::start_with_env(data, args, &[])
    }

    pub fn start_with_env(data: &Path, args: &[&str], envs: &[(&str, &str)]) -> Server {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let envs: Vec<(String, String)> = envs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Self::spawn(data, args, envs)
    }

    fn spawn(data: &Path, args: Vec<String>, envs: Vec<(String, String)>) -> Server {
        let log = data.with_extension(format!("log.{}", std::process::id()));
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file");
        let mut command = Command::new(steward_bin());
        command
            .arg("serve")
            .arg("--data")
            .arg(data)
            .args(["--listen", "127.0.0.1:0"])
            .args(&args)
            // Tests see `unknown` as it is; the ones about the reconciler turn it on.
            .args(if args.iter().any(|a| a == "--reconcile-interval-ms") {
                vec![]
            } else {
                vec!["--reconcile-interval-ms", "0"]
            })
            .env_remove("STEWARD_CRASH_AT")
            .env("STEWARD_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file));
        for (k, v) in &envs {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("steward serve starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("listening on ") {
                    let _ = tx.send(url.to_string());
                }
            }
        });
        let url = rx.recv_timeout(READY_WAIT).unwrap_or_else(|_| {
            let _ = child.kill();
            panic!(
                "steward serve did not become ready; log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
        Server {
            data: data.to_path_buf(),
            url,
            child,
            log,
            args,
            envs,
        }
    }

    /// SIGKILL: no shutdown code runs, like a power cut for the process.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait (bounded) for a clean exit; returns whether it exited successfully.
    pub fn terminate(&mut self) -> bool {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(15) {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        false
    }

    /// Sends `signal` (`STOP`, `CONT`, ...) to the process: `STOP` freezes it as a long GC
    /// pause or a frozen VM would, sockets open and nothing run, until `CONT`.
    pub fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs");
        assert!(sent.success(), "kill -{signal} failed");
    }

    /// Waits (bounded) for the process to exit on its own, e.g. at an armed crash point.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let started = Instant::now();
        while started.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// Starts the server again on the same data directory, without any crash point armed.
    pub fn restart(&mut self) {
        self.kill();
        let envs: Vec<(String, String)> = self
            .envs
            .iter()
            .filter(|(k, _)| k != "STEWARD_CRASH_AT")
            .cloned()
            .collect();
        let fresh = Self::spawn(&self.data, self.args.clone(), envs);
        drop(std::mem::replace(self, fresh));
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Creates a key in the server's store (its `--database`, when it was given one).
    pub fn keys(&self, env: &str, role: &str) -> String {
        let mut extra = vec!["--role", role];
        if let Some(i) = self.args.iter().position(|a| a == "--database") {
            extra.extend(["--database", self.args[i + 1].as_str()]);
        }
        create_key(&self.data, env, &extra)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn create_key(data: &Path, env: &str, extra: &[&str]) -> String {
    let out = Command::new(steward_bin())
        .args(["keys", "create", "--data"])
        .arg(data)
        .args(["--env", env, "--name", "test"])
        .args(extra)
        .output()
        .expect("keys create runs");
    assert!(
        out.status.success(),
        "keys create failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A JSON client for one key, recording every response body it sees (for leak checks).
#[derive(Clone)]
pub struct Api {
    base: String,
    key: String,
    http: reqwest::Client,
    pub seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// A response: status, headers we care about, body.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub replayed: bool,
    pub request_id: Option<String>,
    pub retry_after: Option<String>,
}

impl Reply {
    pub fn data(&self) -> &Value {
        &self.body["data"]
    }
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
}

impl Api {
    pub fn new(server: &Server, key: &str) -> Api {
        Api {
            base: format!("{}/api/v2", server.url),
            key: key.to_string(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(40))
                .build()
                .unwrap(),
            seen: Default::default(),
        }
    }

    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        idempotency_key: Option<&str>,
    ) -> Reply {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self
            .http
            .request(method, format!("{}{}", self.base, path))
            .bearer_auth(&self.key);
        if let Some(k) = idempotency_key {
            request = request.header("Idempotency-Key", k);
        }
        if let Some(b) = body {
            request = request.json(&b);
        }
        let response = request.send().await.expect("steward answers");
        let status = response.status().as_u16();
        let replayed = response.headers().get("idempotent-replayed").is_some();
        let request_id = response
            .headers()
            .get("x-request-id")
            .map(|v| v.to_str().unwrap().to_string());
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        let text = response.text().await.unwrap();
        self.seen.lock().unwrap().push(text.clone());
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Reply {
            status,
            body,
            replayed,
            request_id,
            retry_after,
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.call("GET", path, None, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.call("POST", path, Some(body), None).await
    }

    pub async fn invoke(
        &self,
        action: &str,
        input: Value,
        operation_key: Option<&str>,
        idempotency_key: Option<&str>,
    ) -> Reply {
        let mut body = json!({ "input": input });
        if let Some(k) = operation_key {
            body["operationKey"] = json!(k);
        }
        self.call(
            "POST",
            &format!("/actions/{action}/invoke"),
            Some(body),
            idempotency_key,
        )
        .await
    }
}

/// The secret every test stores; checked for leaks.
pub const STRIPE_SECRET: &str = "sk_test_e2eSECRETvalue0123456789";

/// The `host:port` of a URL such as the fixture's base URL, as an `allowedHosts` entry names it
/// (an entry without a port allows only the scheme's default port).
pub fn host_port(url: &str) -> String {
    let parsed = reqwest::Url::parse(url).expect("a URL");
    format!(
        "{}:{}",
        parsed.host_str().expect("a host"),
        parsed.port_or_known_default().expect("a port")
    )
}

/// Puts the Stripe test key and creates a `refund` adapter action pointing at the fixture.
pub async fn refund_action(operator: &Api, fixture_url: &str, name: &str) {
    let put = operator
        .call(
            "PUT",
            "/secrets/STRIPE_TEST_KEY",
            Some(json!({"value": STRIPE_SECRET, "allowedHosts": [host_port(fixture_url)]})),
            None,
        )
        .await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    let created = operator
        .post(
            "/actions",
            json!({
                "name": name,
                "adapter": {
                    "type": "stripe.refund",
                    "config": {"account": "acct_1", "mode": "test", "currency": "usd", "baseUrl": fixture_url},
                    "credentialSecret": "STRIPE_TEST_KEY"
                }
            }),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
}

pub fn refund_input(n: u32) -> Value {
    json!({"paymentIntent": format!("pi_{n}"), "amount": 1000 + n})
}

/// A running server with a fixture, an operator and an agent key, and a `refund` action.
pub struct World {
    pub server: Server,
    pub fixture: FixtureHandle,
    pub operator: Api,
    pub agent: Api,
    pub _dir: tempfile::TempDir,
}

pub async fn world(args: &[&str]) -> World {
    let dir = tempfile::tempdir().unwrap();
    let fixture = fixture().await;
    let mut all = vec!["--allow-insecure-destinations"];
    all.extend_from_slice(args);
    let server = Server::start(&dir.path().join("data"), &all);
    let operator = Api::new(&server, &server.keys("test", "operator"));
    let agent = Api::new(&server, &server.keys("test", "agent"));
    refund_action(&operator, &fixture.base_url(), "refund").await;
    World {
        server,
        fixture,
        operator,
        agent,
        _dir: dir,
    }
}

/// Polls `probe` until it returns true or `limit` passes.
pub async fn eventually(limit: Duration, mut probe: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if probe() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    probe()
}

/// How long `steward serve` may take to refuse to start.
pub const REFUSAL_WAIT: Duration = Duration::from_secs(30);

/// `steward serve` that must refuse to start: its exit status and stderr. Fails the test if it
/// is still running after [`REFUSAL_WAIT`] (the process must end on its own).
pub fn serve_refused(data: &Path, args: &[&str], envs: &[(&str, &str)]) -> (bool, String) {
    let log = data.with_extension("refused.log");
    let mut command = Command::new(steward_bin());
    command
        .arg("serve")
        .arg("--data")
        .arg(data)
        .args(["--listen", "127.0.0.1:0", "--reconcile-interval-ms", "0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"));
    for (k, v) in envs {
        command.env(k, v);
    }
    let mut child = command.spawn().expect("steward serve runs");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if started.elapsed() > REFUSAL_WAIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "steward serve is still running; it should have refused to start; log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (
        status.success(),
        std::fs::read_to_string(&log).unwrap_or_default(),
    )
}
