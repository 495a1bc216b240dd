//! One fresh world for one chaos run: the fixture in-process, a `steward serve` child, keys,
//! actions, the tasks file, and the worker processes.

use super::{
    Point, ACTION, ENVIRONMENT, GATED_ACTION, LOG_TAIL_LINES, POLL_MS, SECRET, SECRET_VALUE,
    SERVER_READY_S, WORKER_APPROVAL_WAIT_S, WORKER_RUN_S,
};
use anyhow::{bail, Context};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};
use steward_client::StewardApi;
use steward_core::{ApprovalId, CrashPoint, IdempotencyKey, InvocationStatus, CRASH_AT_ENV};
use steward_fixture::{FixtureConfig, FixtureHandle};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A `steward serve` child.
pub(super) struct Server {
    pub(super) child: Child,
    pub(super) url: String,
}

/// One fresh world: fixture, server, keys, actions, tasks, and the worker's files.
pub(super) struct World {
    pub(super) exe: PathBuf,
    pub(super) dir: PathBuf,
    pub(super) data: PathBuf,
    pub(super) fixture: FixtureHandle,
    pub(super) server: Server,
    pub(super) operator: StewardApi,
    pub(super) approver: StewardApi,
    pub(super) operator_key: String,
    pub(super) approver_key: String,
    pub(super) agent_key: String,
    pub(super) journal: PathBuf,
    pub(super) tasks_file: PathBuf,
    pub(super) payment_intents: Vec<String>,
    pub(super) worker_runs: usize,
    pub(super) worker: Option<String>,
}

async fn start_server(
    exe: &Path,
    data: &Path,
    crash: Option<CrashPoint>,
) -> anyhow::Result<Server> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(data.with_extension("log"))?;
    let mut command = Command::new(exe);
    command
        .arg("serve")
        .arg("--data")
        .arg(data)
        .args(["--listen", "127.0.0.1:0", "--allow-insecure-destinations"])
        .env_remove(CRASH_AT_ENV)
        .env("STEWARD_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .kill_on_drop(true);
    if let Some(point) = crash {
        command.env(CRASH_AT_ENV, point.name());
    }
    let mut child = command.spawn().context("starting steward serve")?;
    let stdout = child.stdout.take().context("steward serve stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let ready = tokio::time::timeout(Duration::from_secs(SERVER_READY_S), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(url) = line.strip_prefix("listening on ") {
                return Some(url.to_string());
            }
        }
        None
    })
    .await;
    let Ok(Some(url)) = ready else {
        bail!(
            "steward serve did not become ready; see {}",
            data.with_extension("log").display()
        );
    };
    // Keep draining stdout so the child never blocks or dies on a full or closed pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(Server { child, url })
}

async fn create_key(exe: &Path, data: &Path, name: &str, role: &str) -> anyhow::Result<String> {
    let out = Command::new(exe)
        .args(["keys", "create", "--data"])
        .arg(data)
        .args(["--env", ENVIRONMENT, "--name", name, "--role", role])
        .stdin(Stdio::null())
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

/// Waits (bounded) for `probe` to hold.
pub(crate) async fn eventually(limit: Duration, mut probe: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if probe() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    probe()
}

/// Waits (bounded) for a child to exit; `None` if it is still running.
pub(super) async fn wait_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    tokio::time::timeout(limit, child.wait()).await.ok()?.ok()
}

/// SIGKILL, then reap.
pub(crate) async fn kill(child: &mut Child) {
    let _ = child.start_kill();
    let _ = child.wait().await;
}

/// SIGKILL a worker and everything it started, then reap it. A `--worker` command runs under
/// `sh -c`, which does not replace itself with the command (dash forks it), so killing the shell
/// alone would leave the real worker (a Python interpreter, say) running beside its restart.
/// Each worker leads a process group of its own (`spawn_worker`), and the group is killed.
pub(super) async fn kill_worker(child: &mut Child) {
    #[cfg(unix)]
    if let Some(group) = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    }
    kill(child).await;
}

#[cfg(unix)]
pub(super) fn aborted(status: &ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.signal() == Some(6) || status.code() == Some(134)
}

#[cfg(not(unix))]
pub(super) fn aborted(status: &ExitStatus) -> bool {
    !status.success()
}

impl World {
    pub(super) async fn new(
        exe: &Path,
        dir: &Path,
        point: Point,
        tasks: u32,
        worker: Option<String>,
    ) -> anyhow::Result<World> {
        let fixture = steward_fixture::spawn(FixtureConfig {
            listen: "127.0.0.1:0".parse()?,
            state_file: None,
        })
        .await?;
        let data = dir.join("data");
        let server_crash = match point {
            Point::Crash(p) if p.is_server() => Some(p),
            _ => None,
        };
        let server = start_server(exe, &data, server_crash).await?;
        let operator_key = create_key(exe, &data, "chaos-operator", "operator").await?;
        let approver_key = create_key(exe, &data, "chaos-approver", "operator").await?;
        let agent_key = create_key(exe, &data, "chaos-worker", "agent").await?;
        let operator = StewardApi::new(&server.url, &operator_key)?;
        operator
            .put_secret(
                SECRET,
                SECRET_VALUE,
                // The fixture's own port: an entry without one allows only 80/443.
                &[&fixture.addr().to_string()],
                &key("chaos-secret"),
            )
            .await?;
        for (name, gated) in [(ACTION, false), (GATED_ACTION, true)] {
            let definition = json!({
                "name": name,
                "requiresApproval": gated,
                "adapter": {
                    "type": "stripe.refund",
                    "config": {"account": "acct_chaos", "mode": "test", "currency": "usd",
                               "baseUrl": fixture.base_url()},
                    "credentialSecret": SECRET,
                },
            });
            operator
                .create_action(&definition, &key(&format!("chaos-action-{name}")))
                .await?;
        }
        let run = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("run")
            .replace('-', "_");
        let payment_intents: Vec<String> = (1..=tasks).map(|n| format!("pi_{run}_{n}")).collect();
        let task_list: Vec<_> = payment_intents
            .iter()
            .enumerate()
            .map(|(i, pi)| json!({"orderId": format!("order-{}", i + 1), "paymentIntent": pi, "amount": 1000 + i}))
            .collect();
        let tasks_file = dir.join("tasks.json");
        std::fs::write(&tasks_file, serde_json::to_vec_pretty(&task_list)?)?;
        Ok(World {
            exe: exe.to_path_buf(),
            dir: dir.to_path_buf(),
            approver: StewardApi::new(&server.url, &approver_key)?,
            data,
            fixture,
            server,
            operator,
            operator_key,
            approver_key,
            agent_key,
            journal: dir.join("worker.db"),
            tasks_file,
            payment_intents,
            worker_runs: 0,
            worker,
        })
    }

    pub(super) async fn restart_server(&mut self) -> anyhow::Result<()> {
        kill(&mut self.server.child).await;
        self.server = start_server(&self.exe, &self.data, None).await?;
        self.operator = StewardApi::new(&self.server.url, &self.operator_key)?;
        self.approver = StewardApi::new(&self.server.url, &self.approver_key)?;
        Ok(())
    }

    pub(super) fn spawn_worker(
        &mut self,
        crash: Option<CrashPoint>,
        action: &str,
    ) -> anyhow::Result<Child> {
        self.worker_runs += 1;
        let n = self.worker_runs;
        let mut command = match &self.worker {
            Some(cmd) => {
                let mut c = Command::new("sh");
                c.arg("-c").arg(cmd);
                c
            }
            None => {
                let mut c = Command::new(&self.exe);
                c.arg("refund-worker");
                c
            }
        };
        command
            .env("STEWARD_URL", &self.server.url)
            .env("STEWARD_API_KEY", &self.agent_key)
            .env("STEWARD_JOURNAL", &self.journal)
            .env("STEWARD_TASKS", &self.tasks_file)
            .env("STEWARD_ACTION", action)
            .env("STEWARD_ENVIRONMENT", ENVIRONMENT)
            .env(
                "STEWARD_APPROVAL_WAIT_S",
                WORKER_APPROVAL_WAIT_S.to_string(),
            )
            .env_remove(CRASH_AT_ENV)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(
                self.dir.join(format!("worker-{n}.out")),
            )?)
            .stderr(std::fs::File::create(
                self.dir.join(format!("worker-{n}.err")),
            )?)
            .kill_on_drop(true);
        if let Some(point) = crash {
            command.env(CRASH_AT_ENV, point.name());
        }
        command.spawn().context("starting the worker")
    }

    pub(super) fn worker_log(&self, n: usize) -> String {
        let text =
            std::fs::read_to_string(self.dir.join(format!("worker-{n}.err"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n    ")
    }

    /// Runs the worker to its end (bounded); a problem if it did not end as `want_crash` says.
    pub(super) async fn run_worker(
        &mut self,
        crash: Option<CrashPoint>,
        action: &str,
        problems: &mut Vec<String>,
    ) -> anyhow::Result<()> {
        let mut child = self.spawn_worker(crash, action)?;
        let n = self.worker_runs;
        let status = wait_exit(&mut child, Duration::from_secs(WORKER_RUN_S)).await;
        self.judge_worker(status, crash, n, problems);
        if status.is_none() {
            kill_worker(&mut child).await;
        }
        Ok(())
    }

    pub(super) fn judge_worker(
        &self,
        status: Option<ExitStatus>,
        crash: Option<CrashPoint>,
        n: usize,
        problems: &mut Vec<String>,
    ) {
        let what = match (status, crash) {
            (None, _) => format!("worker run {n} did not finish within {WORKER_RUN_S} s"),
            (Some(s), Some(p)) if !aborted(&s) => {
                format!(
                    "worker run {n} never reached crash point {} (exit {s})",
                    p.name()
                )
            }
            (Some(s), None) if !s.success() => format!("worker run {n} failed (exit {s})"),
            _ => return,
        };
        problems.push(format!("{what}; its stderr:\n    {}", self.worker_log(n)));
    }

    /// Approves every pending approval (with a key other than the requester's) until the
    /// worker exits; returns its exit status.
    pub(super) async fn approve_until_exit(
        &mut self,
        child: &mut Child,
        problems: &mut Vec<String>,
    ) -> anyhow::Result<Option<ExitStatus>> {
        let started = Instant::now();
        let mut approved: Vec<ApprovalId> = vec![];
        while started.elapsed() < Duration::from_secs(WORKER_RUN_S) {
            if let Some(status) = child.try_wait()? {
                return Ok(Some(status));
            }
            for inv in self
                .operator
                .invocations(Some(InvocationStatus::PendingApproval))
                .await?
            {
                let Some(id) = inv.approval_id else { continue };
                if approved.contains(&id) {
                    continue;
                }
                match self
                    .approver
                    .approve(
                        &id,
                        "approved by steward chaos",
                        &key(&format!("chaos-approve-{id}")),
                    )
                    .await
                {
                    Ok(_) => approved.push(id),
                    Err(e) => problems.push(format!("approving {id}: {e}")),
                }
            }
            tokio::time::sleep(Duration::from_millis(POLL_MS * 4)).await;
        }
        Ok(None)
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Whether `pid` is a live process (not gone, not a zombie waiting to be reaped).
    fn alive(pid: &str) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                let state = stat.rsplit_once(") ")?.1.chars().next()?;
                Some(state != 'Z' && state != 'X')
            })
            .unwrap_or(false)
    }

    #[tokio::test]
    async fn killing_a_worker_kills_what_its_shell_started() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("grandchild.pid");
        // What `sh -c "python worker.py"` does: the shell forks the command and waits for it.
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("sleep 60 & echo $! > {}; wait", pid_file.display()))
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        let written = eventually(Duration::from_secs(10), || {
            std::fs::read_to_string(&pid_file).is_ok_and(|t| t.ends_with('\n'))
        })
        .await;
        assert!(written, "the shell never started its command");
        let grandchild = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .to_string();
        assert!(alive(&grandchild), "{grandchild} should be running");
        kill_worker(&mut child).await;
        let gone = eventually(Duration::from_secs(5), || !alive(&grandchild)).await;
        assert!(
            gone,
            "the worker's own process {grandchild} outlived the kill"
        );
    }
}
