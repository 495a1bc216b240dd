//! The store a run stands on, and how its primary dies: the HA cluster (`scripts/ha-cluster`,
//! three PostgreSQL nodes under Patroni with a synchronous standby), a single PostgreSQL (the
//! same script with `--nodes 1`, or a fresh database on a server given with `--database`), or
//! the embedded store (SQLite, where the "primary" is the Steward process itself).

use super::super::bench::world::PgDatabase;
use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::Command;

/// How long `scripts/ha-cluster up` may take, in seconds: etcd, initdb of up to three nodes and
/// a Patroni leader election on a loaded CI machine.
const CLUSTER_UP_S: u64 = 300;
/// How long `kill-primary` and `down` may take, in seconds.
const CLUSTER_STEP_S: u64 = 120;

/// Which deployment a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum StoreKind {
    /// PostgreSQL with a synchronous standby and automatic failover (Patroni + etcd).
    Ha,
    /// One PostgreSQL server.
    Postgres,
    /// The embedded store (SQLite): one Steward process, whose death is the primary's.
    Embedded,
}

impl StoreKind {
    pub(crate) fn label(self) -> &'static str {
        match self {
            StoreKind::Ha => "PostgreSQL with a synchronous standby (Patroni)",
            StoreKind::Postgres => "single PostgreSQL",
            StoreKind::Embedded => "embedded (SQLite)",
        }
    }
}

/// A cluster this run brought up with `scripts/ha-cluster`.
struct Cluster {
    script: PathBuf,
    dir: PathBuf,
}

/// Runs the cluster script with `args`, bounded; its standard output.
async fn script(script: &Path, args: &[&str], limit_s: u64) -> anyhow::Result<String> {
    let run = Command::new("bash")
        .arg(script)
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(limit_s), run)
        .await
        .with_context(|| format!("{} {} took over {limit_s} s", script.display(), args[0]))?
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} {} failed ({}): {}",
            script.display(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The database URL in the script's last `url=` line.
fn url_line(output: &str) -> Option<String> {
    output
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("url="))
        .map(str::to_string)
}

/// The store under a run.
pub(crate) struct Deployment {
    pub(crate) kind: StoreKind,
    cluster: Option<Cluster>,
    database: Option<PgDatabase>,
    /// What Steward connects to; `None` for the embedded store.
    pub(crate) url: Option<String>,
}

impl Deployment {
    /// Brings the store up under `dir`. With `database` (a PostgreSQL server's URL) a fresh
    /// database is made there instead of a cluster, and its primary cannot be killed.
    pub(crate) async fn up(
        kind: StoreKind,
        database: Option<&str>,
        cluster_script: &Path,
        port: u16,
        dir: &Path,
    ) -> anyhow::Result<Deployment> {
        let (cluster, db, url) = match (kind, database) {
            (StoreKind::Embedded, _) => (None, None, None),
            (_, Some(admin)) => {
                let db = PgDatabase::create(admin, "steward_faults").await?;
                let url = db.url.clone();
                (None, Some(db), Some(url))
            }
            (StoreKind::Ha | StoreKind::Postgres, None) => {
                let nodes = if kind == StoreKind::Ha { "3" } else { "1" };
                // Run as root, the script hands the cluster's directory to the `postgres` user,
                // who must be able to reach it through the run's directory.
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
                }
                let dir = dir.join("cluster");
                let dir_arg = dir.to_string_lossy().into_owned();
                let port = port.to_string();
                let out = script(
                    cluster_script,
                    &["up", "--dir", &dir_arg, "--nodes", nodes, "--port", &port],
                    CLUSTER_UP_S,
                )
                .await?;
                let url = url_line(&out).with_context(|| {
                    format!("{} up printed no url= line", cluster_script.display())
                })?;
                let cluster = Cluster {
                    script: cluster_script.to_path_buf(),
                    dir,
                };
                (Some(cluster), None, Some(url))
            }
        };
        Ok(Deployment {
            kind,
            cluster,
            database: db,
            url,
        })
    }

    /// Waits (bounded) until every node of the cluster runs, one leads and one is its
    /// synchronous standby: a primary is killed in a healthy cluster, not in one still
    /// rejoining its last victim (strict synchronous mode stops writes while no standby is in
    /// sync, which would measure the previous failure's recovery, not this one's). `false` when
    /// it did not get there in time.
    pub(crate) async fn wait_healthy(&self, limit: Duration) -> bool {
        let Some(cluster) = &self.cluster else {
            return true;
        };
        let dir = cluster.dir.to_string_lossy().into_owned();
        let started = std::time::Instant::now();
        while started.elapsed() < limit {
            if let Ok(out) =
                script(&cluster.script, &["status", "--dir", &dir], CLUSTER_STEP_S).await
            {
                if healthy(&out) {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        false
    }

    /// SIGKILLs the PostgreSQL primary's postmaster (the script picks it and, with one node,
    /// restarts it as systemd would); returns the node it named. The embedded store's
    /// "primary" is the Steward process: the caller kills and restarts that.
    pub(crate) async fn kill_primary(&self) -> anyhow::Result<String> {
        let Some(cluster) = &self.cluster else {
            bail!("this deployment has no primary to kill");
        };
        let dir = cluster.dir.to_string_lossy().into_owned();
        let out = script(
            &cluster.script,
            &["kill-primary", "--dir", &dir],
            CLUSTER_STEP_S,
        )
        .await?;
        Ok(out.trim().lines().last().unwrap_or("").to_string())
    }

    /// Stops what `up` started (or drops the database it made).
    pub(crate) async fn down(self) {
        if let Some(cluster) = &self.cluster {
            let dir = cluster.dir.to_string_lossy().into_owned();
            if let Err(e) = script(&cluster.script, &["down", "--dir", &dir], CLUSTER_STEP_S).await
            {
                eprintln!("faults: {e:#}");
            }
        }
        if let Some(db) = self.database {
            db.drop_database().await;
        }
    }
}

/// Whether `scripts/ha-cluster status` (`name port role pid` per node) shows every node
/// running, one leader, and a synchronous standby (a single node: its leader alone).
fn healthy(status: &str) -> bool {
    let roles: Vec<&str> = status
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    let leaders = roles.iter().filter(|r| **r == "leader").count();
    let running = roles
        .iter()
        .all(|r| matches!(*r, "leader" | "sync_standby" | "replica"));
    running && leaders == 1 && (roles.len() == 1 || roles.contains(&"sync_standby"))
}

/// `url` with each `host:port` of its host list replaced by the address `map` gives it: how a
/// replica's database URL is routed through its fault proxies. A host without a port is on
/// 5432.
pub(crate) fn route(
    url: &str,
    mut map: impl FnMut(&str) -> anyhow::Result<String>,
) -> anyhow::Result<String> {
    let (scheme, rest) = url
        .split_once("://")
        .context("the database URL has no scheme")?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let routed = hosts
        .split(',')
        .map(|host| {
            let host = if host.contains(':') {
                host.to_string()
            } else {
                format!("{host}:5432")
            };
            map(&host)
        })
        .collect::<anyhow::Result<Vec<_>>>()?
        .join(",");
    Ok(match userinfo {
        Some(u) => format!("{scheme}://{u}@{routed}{tail}"),
        None => format!("{scheme}://{routed}{tail}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_host_of_a_multi_host_url_is_routed() {
        let mut seen = vec![];
        let url = "postgres://postgres@127.0.0.1:5433,127.0.0.1:5434,127.0.0.1:5435/steward?target_session_attrs=read-write";
        let routed = route(url, |h| {
            seen.push(h.to_string());
            Ok(format!("127.0.0.1:{}", 7000 + seen.len()))
        })
        .unwrap();
        assert_eq!(
            routed,
            "postgres://postgres@127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003/steward?target_session_attrs=read-write"
        );
        assert_eq!(seen, ["127.0.0.1:5433", "127.0.0.1:5434", "127.0.0.1:5435"]);
        assert_eq!(
            route("postgres://localhost/db", |_| Ok("127.0.0.1:9".into())).unwrap(),
            "postgres://127.0.0.1:9/db"
        );
    }

    #[test]
    fn a_healthy_cluster_runs_every_node_with_a_leader_and_a_sync_standby() {
        let ok = "node1 5433 leader 10\nnode2 5434 sync_standby 11\nnode3 5435 replica 12\n";
        assert!(healthy(ok));
        assert!(!healthy(
            "node1 5433 stopped -\nnode2 5434 leader 11\nnode3 5435 sync_standby 12\n"
        ));
        assert!(!healthy(
            "node1 5433 replica 10\nnode2 5434 leader 11\nnode3 5435 replica 12\n"
        ));
        assert!(healthy("node1 5433 leader 10\n"));
        assert!(!healthy(""));
    }

    #[test]
    fn the_url_is_the_scripts_last_url_line() {
        let out = "etcd up\nurl=postgres://a:1/x\nnode1 5433 leader\nurl=postgres://b:2/y\n";
        assert_eq!(url_line(out).as_deref(), Some("postgres://b:2/y"));
        assert_eq!(url_line("nothing"), None);
    }
}
