//! A `steward serve` child on loopback with keys, the fixture in-process, and the refund
//! actions, for tests of the client library. Every wait is bounded.

use serde_json::json;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use steward_client::{Operations, OperationsConfig, SqliteJournal, StewardApi};
use steward_core::IdempotencyKey;
use steward_fixture::{FixtureConfig, FixtureHandle};

/// How long `steward serve` gets to print its ready line.
const READY_WAIT: Duration = Duration::from_secs(30);

pub fn steward_bin() -> &'static str {
    env!("CARGO_BIN_EXE_steward")
}

pub fn key(text: &str) -> IdempotencyKey {
    IdempotencyKey::parse(text).unwrap()
}

/// A server, a fixture, an operator, an agent and the `refund` (and gated `refund-gated`)
/// actions, in a fresh directory.
pub struct World {
    pub dir: tempfile::TempDir,
    pub fixture: FixtureHandle,
    pub url: String,
    pub operator: StewardApi,
    pub agent_key: String,
    child: Child,
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn create_key(data: &Path, role: &str) -> String {
    let out = Command::new(steward_bin())
        .args(["keys", "create", "--data"])
        .arg(data)
        .args(["--env", "test", "--name", role, "--role", role])
        .output()
        .expect("keys create runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

pub async fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let fixture = steward_fixture::spawn(FixtureConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        state_file: None,
    })
    .await
    .unwrap();
    let data = dir.path().join("data");
    let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
    let mut child = Command::new(steward_bin())
        .arg("serve")
        .arg("--data")
        .arg(&data)
        .args(["--listen", "127.0.0.1:0", "--allow-insecure-destinations"])
        .env_remove("STEWARD_CRASH_AT")
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("steward serve starts");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("listening on ") {
                let _ = tx.send(url.to_string());
            }
        }
    });
    let url = rx.recv_timeout(READY_WAIT).expect("steward serve is ready");
    let operator = StewardApi::new(&url, &create_key(&data, "operator")).unwrap();
    let agent_key = create_key(&data, "agent");
    operator
        .put_secret(
            "STRIPE_TEST_KEY",
            "sk_test_clientTests01",
            &[&fixture.addr().to_string()],
            &key("s"),
        )
        .await
        .unwrap();
    for (name, gated) in [("refund", false), ("refund-gated", true)] {
        operator
            .create_action(
                &json!({
                    "name": name,
                    "requiresApproval": gated,
                    "adapter": {
                        "type": "stripe.refund",
                        "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                                   "baseUrl": fixture.base_url()},
                        "credentialSecret": "STRIPE_TEST_KEY"
                    }
                }),
                &key(&format!("create-{name}")),
            )
            .await
            .unwrap();
    }
    World {
        dir,
        fixture,
        url,
        operator,
        agent_key,
        child,
    }
}

impl World {
    /// The agent application: operations journaled in `name` inside the test directory.
    pub fn operations(&self, name: &str, approval_wait: Duration) -> Operations {
        let journal = SqliteJournal::open(&self.dir.path().join(name)).unwrap();
        let mut config = OperationsConfig::new("test");
        config.approval_wait = approval_wait;
        Operations::new(
            StewardApi::new(&self.url, &self.agent_key).unwrap(),
            Arc::new(journal),
            config,
        )
    }
}
