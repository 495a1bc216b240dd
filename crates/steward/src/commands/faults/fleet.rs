//! The Steward replicas under test: `steward serve` processes on one store, each reaching the
//! database through fault proxies of its own (one per database port), so each can be killed,
//! paused or cut off from the database alone.

use super::super::bench::world::{start_server, terminate, Server};
use super::super::chaos::world::kill;
use super::deployment::route;
use super::proxy::Proxy;
use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// How long a replica gets to print its ready line, in seconds (migrations on a cold
/// cluster, or recovery of the embedded store after a SIGKILL, on a loaded machine).
const REPLICA_READY_S: u64 = 120;

/// Every replica's base URL, as the clients see it (a restart changes the port).
pub(crate) type Urls = Arc<RwLock<Vec<String>>>;

/// What each replica is started with.
#[derive(Debug, Clone)]
pub(crate) struct ServeSettings {
    pub(crate) lease_ms: u64,
    pub(crate) dispatch_timeout_ms: u64,
    pub(crate) reconcile_interval_ms: u64,
    pub(crate) absence_grace_ms: u64,
}

struct Replica {
    server: Option<Server>,
    /// One per database host, in the URL's order; none for the embedded store.
    proxies: Vec<Proxy>,
    /// The database URL routed through `proxies`.
    database: Option<String>,
}

/// The replicas.
pub(crate) struct Fleet {
    exe: PathBuf,
    data: PathBuf,
    args: Vec<String>,
    replicas: Vec<Replica>,
    pub(crate) urls: Urls,
}

async fn resolve(host: &str) -> anyhow::Result<std::net::SocketAddr> {
    tokio::net::lookup_host(host)
        .await
        .with_context(|| format!("resolving {host}"))?
        .next()
        .with_context(|| format!("{host} resolves to nothing"))
}

impl Fleet {
    /// Starts `count` replicas on `data` (and `database`, shared; several replicas need one).
    pub(crate) async fn start(
        exe: &Path,
        data: &Path,
        database: Option<&str>,
        count: usize,
        settings: &ServeSettings,
    ) -> anyhow::Result<Fleet> {
        if count == 0 || (count > 1 && database.is_none()) {
            bail!("the embedded store runs one replica; several need PostgreSQL");
        }
        let args = vec![
            format!("--lease-ms={}", settings.lease_ms),
            format!("--dispatch-timeout-ms={}", settings.dispatch_timeout_ms),
            format!("--reconcile-interval-ms={}", settings.reconcile_interval_ms),
            format!("--absence-grace-ms={}", settings.absence_grace_ms),
        ];
        let mut fleet = Fleet {
            exe: exe.to_path_buf(),
            data: data.to_path_buf(),
            args,
            replicas: Vec::with_capacity(count),
            urls: Arc::default(),
        };
        for _ in 0..count {
            let mut proxies = vec![];
            let database = match database {
                None => None,
                Some(url) => {
                    let mut hosts = vec![];
                    route(url, |host| {
                        hosts.push(host.to_string());
                        Ok(String::new())
                    })?;
                    for host in &hosts {
                        proxies.push(Proxy::start(resolve(host).await?).await?);
                    }
                    let mut next = proxies.iter();
                    Some(route(url, |_| {
                        Ok(next
                            .next()
                            .context("a host without a proxy")?
                            .addr()
                            .to_string())
                    })?)
                }
            };
            fleet.replicas.push(Replica {
                server: None,
                proxies,
                database,
            });
            fleet
                .urls
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .push(String::new());
            fleet.restart(fleet.replicas.len() - 1).await?;
        }
        Ok(fleet)
    }

    pub(crate) fn len(&self) -> usize {
        self.replicas.len()
    }

    /// Starts replica `i` (again), on the same store and proxies; it gets a fresh port.
    pub(crate) async fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let replica = &mut self.replicas[i];
        if let Some(mut old) = replica.server.take() {
            kill(&mut old.child).await;
        }
        let server = start_server(
            &self.exe,
            &self.data,
            replica.database.as_deref(),
            &args,
            Duration::from_secs(REPLICA_READY_S),
        )
        .await
        .with_context(|| format!("starting replica {i}"))?;
        self.urls.write().unwrap_or_else(|e| e.into_inner())[i] = server.url.clone();
        replica.server = Some(server);
        Ok(())
    }

    /// SIGKILL of replica `i` (no restart).
    pub(crate) async fn kill(&mut self, i: usize) {
        if let Some(server) = self.replicas[i].server.as_mut() {
            kill(&mut server.child).await;
        }
    }

    fn pid(&self, i: usize) -> Option<rustix::process::Pid> {
        let id = self.replicas[i].server.as_ref()?.child.id()?;
        rustix::process::Pid::from_raw(i32::try_from(id).ok()?)
    }

    /// SIGSTOP of replica `i`: it stops without dying, as in a long GC pause or a frozen VM.
    pub(crate) fn pause(&self, i: usize) -> anyhow::Result<()> {
        let pid = self.pid(i).context("the replica is not running")?;
        rustix::process::kill_process(pid, rustix::process::Signal::STOP)
            .context("SIGSTOP of the replica")
    }

    /// SIGCONT of replica `i`.
    pub(crate) fn resume(&self, i: usize) {
        if let Some(pid) = self.pid(i) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::CONT);
        }
    }

    /// Cuts replica `i` off from the database (every database port); `false` for the embedded
    /// store, which has no network to cut.
    pub(crate) fn partition(&self, i: usize) -> bool {
        for proxy in &self.replicas[i].proxies {
            proxy.partition();
        }
        !self.replicas[i].proxies.is_empty()
    }

    /// Resets the connections that lived through the partition and restores the route.
    pub(crate) fn heal(&self, i: usize) {
        for proxy in &self.replicas[i].proxies {
            proxy.heal();
        }
    }

    /// Heals every route and resumes every replica.
    pub(crate) fn heal_all(&self) {
        for i in 0..self.replicas.len() {
            self.heal(i);
            self.resume(i);
        }
    }

    /// Stops every replica (SIGTERM, then SIGKILL after a grace).
    pub(crate) async fn stop(&mut self) {
        self.heal_all();
        for replica in &mut self.replicas {
            if let Some(server) = replica.server.as_mut() {
                terminate(&mut server.child).await;
            }
        }
    }
}
