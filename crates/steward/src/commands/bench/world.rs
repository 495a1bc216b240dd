//! The processes a bench run drives: the fixture, `steward serve` on one store, the keys and the
//! actions, and the fresh PostgreSQL databases it creates and drops.

use super::SERVER_READY_S;
use anyhow::{bail, Context};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use steward_client::StewardApi;
use steward_core::IdempotencyKey;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The environment every bench key lives in.
pub(super) const ENVIRONMENT: &str = "bench";
/// The governed `stripe.refund` action of workloads (a) and (b).
pub(super) const ACTION: &str = "bench-refund";
/// The same adapter behind `requiresApproval` (workload c).
pub(super) const GATED_ACTION: &str = "bench-refund-gated";
/// The vault entry holding the fixture's test key.
const SECRET: &str = "BENCH_STRIPE_KEY";
/// The fixture accepts any test-mode key; the floor sends the same one Steward holds.
pub(super) const SECRET_VALUE: &str = "sk_test_bench";

/// The provider fixture: a child this run started, or one it was pointed at.
pub(crate) struct Fixture {
    child: Option<Child>,
    pub(crate) url: String,
    /// Its process id, when known (a child of this run, or `--fixture-pid`), for its CPU.
    pub(super) pid: Option<u32>,
}

/// Reads a child's stdout until `listening on URL` (bounded), then keeps draining it so the
/// child never blocks on a full pipe.
async fn ready_line(child: &mut Child, limit: Duration) -> anyhow::Result<String> {
    let stdout = child.stdout.take().context("child stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let found = tokio::time::timeout(limit, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(url) = line.strip_prefix("listening on ") {
                return Some(url.trim().to_string());
            }
        }
        None
    })
    .await;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    match found {
        Ok(Some(url)) => Ok(url),
        Ok(None) => bail!("the process exited before it was ready"),
        Err(_) => bail!("not ready within {} s", limit.as_secs()),
    }
}

impl Fixture {
    pub(crate) async fn start(exe: &Path, dir: &Path) -> anyhow::Result<Fixture> {
        let mut command = Command::new(exe);
        command
            .args(["fixture", "--listen", "127.0.0.1:0"])
            .env("STEWARD_LOG", "warn");
        Fixture::spawn(command, &dir.join("fixture.log"), "steward fixture").await
    }

    /// `steward bench-proxy` in front of the fixture at `fixture_url`, its journal in `dir`:
    /// a child process with a URL and a pid, like the fixture, and stopped the same way.
    pub(super) async fn start_proxy(
        exe: &Path,
        dir: &Path,
        fixture_url: &str,
    ) -> anyhow::Result<Fixture> {
        let data = dir.join("proxy");
        std::fs::create_dir_all(&data)?;
        let mut command = Command::new(exe);
        command
            .args([
                "bench-proxy",
                "--listen",
                "127.0.0.1:0",
                "--fixture",
                fixture_url,
            ])
            .arg("--data")
            .arg(&data);
        Fixture::spawn(command, &dir.join("proxy.log"), "steward bench-proxy").await
    }

    /// Starts `command` (its stderr to `log`) and waits for its ready line.
    async fn spawn(mut command: Command, log: &Path, what: &str) -> anyhow::Result<Fixture> {
        let log = std::fs::File::create(log)?;
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {what}"))?;
        let url = ready_line(&mut child, Duration::from_secs(SERVER_READY_S))
            .await
            .context(what.to_string())?;
        Ok(Fixture {
            pid: child.id(),
            child: Some(child),
            url,
        })
    }

    pub(super) fn connect(url: &str, pid: Option<u32>) -> Fixture {
        Fixture {
            child: None,
            url: url.trim_end_matches('/').to_string(),
            pid,
        }
    }

    /// The fixture's count of committed refund writes.
    pub(super) async fn writes(&self, http: &reqwest::Client) -> anyhow::Result<u64> {
        let body: serde_json::Value = http
            .get(format!("{}/_fixture/writes", self.url))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        body["total"]
            .as_u64()
            .context("the fixture's /_fixture/writes has no total")
    }

    pub(crate) async fn stop(mut self) {
        if let Some(child) = self.child.as_mut() {
            terminate(child).await;
        }
    }
}

/// SIGTERM, a bounded wait, then SIGKILL.
pub(crate) async fn terminate(child: &mut Child) {
    #[cfg(unix)]
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        if tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .is_ok()
        {
            return;
        }
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
}

/// A `steward serve` child.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) url: String,
    /// How long it took from spawn to the ready line (recovery runs before it).
    pub(super) ready_after: Duration,
    pub(crate) log: PathBuf,
    /// The bearer token its `/metrics` answers to (random per server, passed in its environment).
    pub(super) metrics_token: String,
}

/// Starts `steward serve` on `data` (and `database`, when given) and waits for it to listen.
pub(crate) async fn start_server(
    exe: &Path,
    data: &Path,
    database: Option<&str>,
    extra: &[&str],
    ready_limit: Duration,
) -> anyhow::Result<Server> {
    std::fs::create_dir_all(data)?;
    let log = data.with_extension("log");
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)?;
    let metrics_token = format!("bench-{}", steward_server::unique());
    let mut command = Command::new(exe);
    command
        .arg("serve")
        .arg("--data")
        .arg(data)
        .args(["--listen", "127.0.0.1:0", "--allow-insecure-destinations"])
        .args(extra)
        .env_remove(steward_core::CRASH_AT_ENV)
        .env("STEWARD_METRICS_TOKEN", &metrics_token)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file))
        .kill_on_drop(true);
    if let Some(url) = database {
        command.args(["--database", url]);
    }
    let started = Instant::now();
    let mut child = command.spawn().context("starting steward serve")?;
    let url = ready_line(&mut child, ready_limit)
        .await
        .with_context(|| format!("steward serve (log: {})", log.display()))?;
    Ok(Server {
        child,
        url,
        ready_after: started.elapsed(),
        log,
        metrics_token,
    })
}

pub(crate) async fn create_key(
    exe: &Path,
    data: &Path,
    database: Option<&str>,
    name: &str,
) -> anyhow::Result<String> {
    let mut command = Command::new(exe);
    command
        .args(["keys", "create", "--data"])
        .arg(data)
        .args(["--env", ENVIRONMENT, "--name", name, "--role", "operator"])
        .stdin(Stdio::null());
    if let Some(url) = database {
        command.args(["--database", url]);
    }
    let out = command
        .output()
        .await
        .context("running steward keys create")?;
    if !out.status.success() {
        bail!(
            "keys create failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

fn key(text: &str) -> IdempotencyKey {
    IdempotencyKey::parse(text).expect("a short printable key")
}

/// One server under test (or several replicas of one, sharing a PostgreSQL database) with its
/// keys and actions.
pub(super) struct World {
    pub(super) servers: Vec<Server>,
    /// Every replica's base URL; one for an embedded or an external server.
    pub(super) urls: Vec<String>,
    /// Invokes (an operator key: it may also read and set up).
    pub(super) agent: String,
    /// Decides approvals: never the key that invoked.
    pub(super) approver: String,
    /// Action names, suffixed when the server was not started by this run.
    pub(super) action: String,
    pub(super) gated_action: String,
}

impl World {
    /// Starts `replicas` servers on a fresh data directory (and database: several replicas
    /// need one, and share it and the data directory's master key), makes the keys and actions.
    pub(super) async fn start(
        exe: &Path,
        data: &Path,
        database: Option<&str>,
        replicas: usize,
        fixture_url: &str,
    ) -> anyhow::Result<World> {
        anyhow::ensure!(
            replicas >= 1 && (replicas == 1 || database.is_some()),
            "several replicas need a PostgreSQL database"
        );
        let mut servers = Vec::with_capacity(replicas);
        for _ in 0..replicas {
            servers.push(
                start_server(
                    exe,
                    data,
                    database,
                    &[],
                    Duration::from_secs(SERVER_READY_S),
                )
                .await?,
            );
        }
        let agent = create_key(exe, data, database, "bench-agent").await?;
        let approver = create_key(exe, data, database, "bench-approver").await?;
        let urls = servers.iter().map(|s| s.url.clone()).collect();
        let mut world = World {
            servers,
            urls,
            agent,
            approver,
            action: ACTION.to_string(),
            gated_action: GATED_ACTION.to_string(),
        };
        world.set_up(fixture_url, "").await?;
        Ok(world)
    }

    /// A server this run did not start: the actions get the run id as a suffix.
    pub(super) async fn external(
        url: &str,
        operator_key: &str,
        approver_key: &str,
        fixture_url: &str,
        run_id: &str,
    ) -> anyhow::Result<World> {
        let mut world = World {
            servers: Vec::new(),
            urls: vec![url.trim_end_matches('/').to_string()],
            agent: operator_key.to_string(),
            approver: approver_key.to_string(),
            action: format!("{ACTION}-{run_id}"),
            gated_action: format!("{GATED_ACTION}-{run_id}"),
        };
        world.set_up(fixture_url, run_id).await?;
        Ok(world)
    }

    async fn set_up(&mut self, fixture_url: &str, suffix: &str) -> anyhow::Result<()> {
        let operator = StewardApi::new(&self.urls[0], &self.agent)?;
        // The fixture's host and port: an entry without a port allows only 80/443.
        let fixture = reqwest::Url::parse(fixture_url).context("the fixture URL")?;
        let fixture_host = format!(
            "{}:{}",
            fixture.host_str().unwrap_or_default(),
            fixture.port_or_known_default().unwrap_or_default()
        );
        operator
            .put_secret(
                SECRET,
                SECRET_VALUE,
                &[&fixture_host],
                &key(&format!("bench-secret-{suffix}")),
            )
            .await
            .context("storing the fixture key")?;
        for (name, gated) in [(&self.action, false), (&self.gated_action, true)] {
            let definition = json!({
                "name": name,
                "requiresApproval": gated,
                "adapter": {
                    "type": "stripe.refund",
                    "config": {"account": "acct_bench", "mode": "test", "currency": "usd",
                               "baseUrl": fixture_url},
                    "credentialSecret": SECRET,
                },
            });
            operator
                .create_action(&definition, &key(&format!("bench-action-{name}")))
                .await
                .with_context(|| format!("creating the action {name}"))?;
        }
        Ok(())
    }

    pub(super) async fn stop(&mut self) {
        for server in &mut self.servers {
            terminate(&mut server.child).await;
        }
    }
}

/// A fresh PostgreSQL database for one server, dropped at the end.
pub(crate) struct PgDatabase {
    admin_url: String,
    name: String,
    pub(crate) url: String,
}

async fn admin_client(admin_url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(admin_url, tokio_postgres::NoTls)
        .await
        .context("cannot connect to PostgreSQL (--database)")?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// `url` with its database name replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let root = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    match query {
        Some(q) => format!("{root}/{name}?{q}"),
        None => format!("{root}/{name}"),
    }
}

impl PgDatabase {
    pub(crate) async fn create(admin_url: &str, prefix: &str) -> anyhow::Result<PgDatabase> {
        let name = format!("{prefix}_{}", steward_server::unique().to_ascii_lowercase());
        admin_client(admin_url)
            .await?
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .with_context(|| format!("creating database {name}"))?;
        Ok(PgDatabase {
            admin_url: admin_url.to_string(),
            url: with_database(admin_url, &name),
            name,
        })
    }

    pub(crate) async fn drop_database(self) {
        let dropped = async {
            admin_client(&self.admin_url)
                .await?
                .batch_execute(&format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    self.name
                ))
                .await?;
            anyhow::Ok(())
        };
        if let Err(e) = dropped.await {
            eprintln!("bench: could not drop database {}: {e:#}", self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_name_is_replaced() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/postgres", "b1"),
            "postgres://postgres@127.0.0.1:5432/b1"
        );
        assert_eq!(
            with_database("postgres://u:p@h/db?sslmode=disable", "b2"),
            "postgres://u:p@h/b2?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://h:5432", "b3"),
            "postgres://h:5432/b3"
        );
    }
}
