//! Where the time goes in one cell: measured around its timed part, on every run.
//!
//! - CPU per request, by process (`procfs.rs`): the bench itself (the load generator, "client"),
//!   the fixture, the `steward serve` processes of the cell (replicas summed) and every
//!   `postgres` process on the machine; the machine's busy fraction; and the time the client's,
//!   fixture's and servers' threads were runnable but waited for a core (the direct sign of a
//!   saturated CPU).
//! - The servers' own split (`scrape.rs`): time to answer, in commits (fsync included), in the
//!   provider call.
//! - PostgreSQL's backends, sampled (`pgwaits.rs`).

use super::pgwaits::{PgWaits, Sampler};
use super::procfs::{self, GroupSample, MachineTicks};
use super::scrape::{self, Times};
use serde::Serialize;
use std::collections::BTreeMap;

/// What a cell watches besides its latencies.
#[derive(Clone, Default)]
pub(super) struct Watched {
    pub(super) fixture_pid: Option<u32>,
    pub(super) server_pids: Vec<u32>,
    /// Each server's base URL and the token its `/metrics` answers to.
    pub(super) metrics: Vec<(String, String)>,
    /// The cell's PostgreSQL database, sampled for its backends' waits.
    pub(super) database_url: Option<String>,
}

struct Cpu {
    machine: Option<MachineTicks>,
    client: GroupSample,
    fixture: GroupSample,
    steward: GroupSample,
    postgres: GroupSample,
}

impl Cpu {
    fn now(watched: &Watched) -> Cpu {
        Cpu {
            machine: procfs::machine(),
            client: GroupSample::of(&[std::process::id()]),
            fixture: GroupSample::of(watched.fixture_pid.as_slice()),
            steward: GroupSample::of(&watched.server_pids),
            postgres: if watched.database_url.is_some() {
                GroupSample::postgres()
            } else {
                GroupSample::default()
            },
        }
    }
}

/// The readings taken as the timed part starts.
pub(super) struct Before {
    cpu: Cpu,
    times: Option<Times>,
    sampler: Option<Sampler>,
}

/// Per-process figures of one cell, per request; `None` where not measured.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub(crate) struct PerProcess {
    pub(crate) client: Option<f64>,
    pub(crate) fixture: Option<f64>,
    pub(crate) steward: Option<f64>,
    pub(crate) postgres: Option<f64>,
}

/// One kind of commit, per request.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CommitShare {
    pub(crate) per_request: f64,
    pub(crate) ms_per_request: f64,
}

/// Where one cell's time went (the JSON's `split`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Split {
    /// Busy (not idle, not waiting for IO) share of all the machine's cores, in %.
    pub(crate) machine_busy_pct: Option<f64>,
    /// User + system CPU, microseconds per request.
    pub(crate) cpu_us: PerProcess,
    /// Time runnable but waiting for a core, summed over threads, milliseconds per request
    /// (`postgres` only for the processes alive at the end of the cell).
    pub(crate) run_queue_ms: PerProcess,
    /// The servers' time to answer, summed over requests, milliseconds per request.
    pub(crate) server_ms: Option<f64>,
    /// Durable commits per request, and their time (call to return) in milliseconds.
    pub(crate) commits_per_request: Option<f64>,
    pub(crate) commit_ms: Option<f64>,
    pub(crate) commits: BTreeMap<String, CommitShare>,
    /// The provider call (network to the fixture and the fixture's time), ms per request.
    pub(crate) dispatch_ms: Option<f64>,
    pub(crate) pg_waits: Option<PgWaits>,
}

impl Watched {
    /// Reads everything once and starts the PostgreSQL sampler; call right before the timed part.
    pub(super) async fn before(&self, http: &reqwest::Client) -> Before {
        let times = scrape::scrape(http, &self.metrics).await;
        let sampler = match &self.database_url {
            Some(url) => Sampler::start(url).await,
            None => None,
        };
        Before {
            cpu: Cpu::now(self),
            times,
            sampler,
        }
    }

    /// Reads everything again right after the timed part and divides by its `requests`.
    pub(super) async fn after(
        &self,
        http: &reqwest::Client,
        before: Before,
        requests: u64,
    ) -> Split {
        let cpu = Cpu::now(self);
        let pg_waits = match before.sampler {
            Some(s) => s.stop().await,
            None => None,
        };
        let times = match &before.times {
            Some(b) => scrape::scrape(http, &self.metrics)
                .await
                .map(|a| a.since(b)),
            None => None,
        };
        let n = requests.max(1) as f64;
        let us_per_tick = 1e6 / procfs::ticks_per_second() as f64;
        let per = |after: &GroupSample, before: &GroupSample| {
            let (ticks, wait_ns) = after.since(before);
            let cpu = ticks.map(|t| t as f64 * us_per_tick / n);
            let wait = ticks.map(|_| wait_ns as f64 / 1e6 / n);
            (cpu, wait)
        };
        let (client, client_wait) = per(&cpu.client, &before.cpu.client);
        let (fixture, fixture_wait) = per(&cpu.fixture, &before.cpu.fixture);
        let (steward, steward_wait) = per(&cpu.steward, &before.cpu.steward);
        let (postgres, postgres_wait) = per(&cpu.postgres, &before.cpu.postgres);
        let machine_busy_pct = match (before.cpu.machine, cpu.machine) {
            (Some(b), Some(a)) if a.total > b.total => {
                Some(100.0 * a.busy.saturating_sub(b.busy) as f64 / (a.total - b.total) as f64)
            }
            _ => None,
        };
        let mut split = Split {
            machine_busy_pct,
            cpu_us: PerProcess {
                client,
                fixture,
                steward,
                postgres,
            },
            run_queue_ms: PerProcess {
                client: client_wait,
                fixture: fixture_wait,
                steward: steward_wait,
                postgres: postgres_wait,
            },
            pg_waits,
            ..Split::default()
        };
        if let Some(t) = times {
            let all = t.all_commits();
            split.server_ms = Some(t.http.sum_s * 1e3 / n);
            split.commits_per_request = Some(all.count / n);
            split.commit_ms = Some(all.sum_s * 1e3 / n);
            split.dispatch_ms = Some(t.dispatch.sum_s * 1e3 / n);
            split.commits = t
                .commits
                .iter()
                .map(|(op, c)| {
                    let share = CommitShare {
                        per_request: c.count / n,
                        ms_per_request: c.sum_s * 1e3 / n,
                    };
                    (op.clone(), share)
                })
                .collect();
        }
        split
    }
}
