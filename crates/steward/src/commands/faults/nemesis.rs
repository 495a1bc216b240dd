//! The nemesis: injects the schedule's faults one after another, each at its place in the run
//! (a share of the run's time, or of its operations), and undoes each before the next.

use super::check::{deaths, recovery_after};
use super::clients::{settled_at_least, Shared};
use super::deployment::{Deployment, StoreKind};
use super::events::Event;
use super::fleet::Fleet;
use super::schedule::{Fault, Planned};
use anyhow::Context;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the nemesis waits for an acknowledged invoke after a primary's death before it
/// goes on, in seconds. The wait keeps one outage from stacking on the next; a run that never
/// recovers fails its `no recovery` check.
const RECOVERY_WAIT_S: u64 = 120;
/// How long the nemesis waits for every node of the cluster to run again before it kills the
/// next primary, in seconds (a killed node rejoins with `pg_rewind`).
const CLUSTER_HEALTHY_WAIT_S: u64 = 120;
/// How long a killed replica stays down before its restart, in milliseconds.
const REPLICA_DOWN_MS: u64 = 500;
/// How long a run of `--operations N` may take to reach each fault's place, in seconds.
const OPERATIONS_WAIT_S: u64 = 600;
/// A pause or a partition lasts this many times the lease, in tenths: past the lease, so the
/// others take the replica's work over while it is still alive.
const PAST_LEASE_TENTHS: u64 = 25;

/// Where the faults fall: over a span of time, or over a count of settled operations.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pacing {
    Time(Duration),
    Operations(u64),
}

/// What was injected.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Injected {
    pub(crate) primary_failovers: u32,
    pub(crate) replica_kills: u32,
    pub(crate) pauses: u32,
    pub(crate) partitions: u32,
    pub(crate) provider_faults: u32,
}

pub(crate) struct Nemesis<'a> {
    pub(crate) fleet: &'a mut Fleet,
    pub(crate) deployment: &'a Deployment,
    pub(crate) shared: Arc<Shared>,
    pub(crate) fixture_url: String,
    pub(crate) lease_ms: u64,
    pub(crate) dispatch_timeout_ms: u64,
}

impl Nemesis<'_> {
    /// Runs the schedule, then waits for the run's end (its time, or its operations).
    pub(crate) async fn run(
        &mut self,
        schedule: &[Planned],
        pacing: Pacing,
    ) -> anyhow::Result<Injected> {
        let started = Instant::now();
        let mut injected = Injected::default();
        for planned in schedule {
            self.wait_for(pacing, planned.position, started).await;
            self.inject(&planned.fault, &mut injected).await?;
        }
        self.wait_for(pacing, 1.0, started).await;
        Ok(injected)
    }

    async fn wait_for(&self, pacing: Pacing, position: f64, started: Instant) {
        match pacing {
            Pacing::Time(span) => {
                let at = span.mul_f64(position);
                if let Some(left) = at.checked_sub(started.elapsed()) {
                    tokio::time::sleep(left).await;
                }
            }
            Pacing::Operations(total) => {
                let count = (total as f64 * position).ceil() as u64;
                if !settled_at_least(&self.shared, count, Duration::from_secs(OPERATIONS_WAIT_S))
                    .await
                {
                    self.shared.log.note(format!(
                        "gave up waiting for {count} settled operations after {OPERATIONS_WAIT_S} s"
                    ));
                }
            }
        }
    }

    fn fault(&self, kind: &str, detail: String) {
        self.shared.log.record(Event::Fault {
            kind: kind.to_string(),
            detail,
        });
    }

    fn past_lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms * PAST_LEASE_TENTHS / 10)
    }

    async fn inject(&mut self, fault: &Fault, injected: &mut Injected) -> anyhow::Result<()> {
        let kind = fault.name();
        match *fault {
            Fault::PrimaryKill => {
                self.kill_primary().await?;
                injected.primary_failovers += 1;
            }
            Fault::ReplicaKill { replica } => {
                self.fault(kind, format!("replica={replica}"));
                self.fleet.kill(replica).await;
                tokio::time::sleep(Duration::from_millis(REPLICA_DOWN_MS)).await;
                self.fleet.restart(replica).await?;
                self.fault("replica-restarted", format!("replica={replica}"));
                injected.replica_kills += 1;
            }
            Fault::Pause { replica } => {
                self.fault(kind, format!("replica={replica}"));
                self.fleet.pause(replica)?;
                tokio::time::sleep(self.past_lease()).await;
                self.fleet.resume(replica);
                self.fault("resume", format!("replica={replica}"));
                injected.pauses += 1;
            }
            Fault::Partition { replica } => {
                if self.fleet.partition(replica) {
                    self.fault(kind, format!("replica={replica}"));
                    tokio::time::sleep(self.past_lease()).await;
                    self.fleet.heal(replica);
                    self.fault("heal", format!("replica={replica}"));
                    injected.partitions += 1;
                } else {
                    self.shared
                        .log
                        .note("partition skipped: the embedded store has no network");
                }
            }
            Fault::Provider { mode } => {
                // Held past the provider deadline: the attempt ends unknown, then reconciles.
                let hold_ms = self.dispatch_timeout_ms + 1_000;
                let plan = json!({"mode": mode, "ms": hold_ms, "count": 1});
                self.shared
                    .http
                    .post(format!("{}/_fixture/faults", self.fixture_url))
                    .json(&plan)
                    .send()
                    .await
                    .and_then(|r| r.error_for_status())
                    .context("arming a provider fault")?;
                self.fault(kind, mode.to_string());
                injected.provider_faults += 1;
            }
        }
        Ok(())
    }

    /// Kills the primary (the Steward process, embedded), then waits (bounded) for the first
    /// invoke acknowledged after it.
    async fn kill_primary(&mut self) -> anyhow::Result<()> {
        if self.deployment.kind == StoreKind::Embedded {
            self.fault("primary-kill", "the steward process".into());
            self.fleet.kill(0).await;
            self.shared.log.record(Event::PrimaryDeath);
            self.fleet.restart(0).await?;
            self.fault("primary-restarted", String::new());
        } else {
            if !self
                .deployment
                .wait_healthy(Duration::from_secs(CLUSTER_HEALTHY_WAIT_S))
                .await
            {
                self.shared.log.note(format!(
                    "the cluster was not healthy after {CLUSTER_HEALTHY_WAIT_S} s; killing its primary anyway"
                ));
            }
            // The script waits for a synchronous standby to promote, kills, and returns at
            // once: the outage starts when it returns.
            let node = self.deployment.kill_primary().await?;
            self.fault("primary-kill", node);
            self.shared.log.record(Event::PrimaryDeath);
        }
        let started = Instant::now();
        let death = *deaths(&self.shared.log.events())
            .last()
            .context("the death was just recorded")?;
        while started.elapsed() < Duration::from_secs(RECOVERY_WAIT_S) {
            if let Some(rto) = recovery_after(&self.shared.log.events(), death) {
                self.shared.log.note(format!(
                    "recovered: first acknowledged invoke {:.3} s after the death",
                    rto.as_secs_f64()
                ));
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.shared.log.note(format!(
            "no acknowledged invoke within {RECOVERY_WAIT_S} s of the death"
        ));
        Ok(())
    }
}
