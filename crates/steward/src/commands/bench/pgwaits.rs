//! What the cell's PostgreSQL backends are doing, sampled: `pg_stat_activity` of the cell's
//! database read every [`SAMPLE_INTERVAL_MS`] on a connection of its own while the load runs,
//! each client backend counted in one state. The mean number of backends in each state over the
//! cell says where PostgreSQL's side of a request goes: on a core, flushing the WAL (the fsync),
//! waiting for a lock, or idle waiting for Steward (inside a transaction or between them).

use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::watch;

/// How often `pg_stat_activity` is read, in milliseconds: often enough for a few hundred samples
/// in a short cell, rarely enough that the sampler's own backend costs well under 1 % of a core.
const SAMPLE_INTERVAL_MS: u64 = 20;
/// At most this many samples per cell (an hour at the interval above): the sampler stops by
/// itself even if the cell's end is never signalled.
const SAMPLES_MAX: u64 = 180_000;

const QUERY: &str = "SELECT state, wait_event_type, wait_event FROM pg_stat_activity \
     WHERE datname = current_database() AND pid <> pg_backend_pid() \
     AND backend_type = 'client backend'";

/// The state one backend is counted in.
pub(super) fn classify(
    state: Option<&str>,
    kind: Option<&str>,
    event: Option<&str>,
) -> &'static str {
    match (kind, event) {
        (None, _) if state == Some("active") => "cpu",
        (Some("IO"), Some(e)) if e.starts_with("WAL") => "walFlush",
        (Some("LWLock"), Some("WALWrite")) => "walFlush",
        (Some("Lock"), _) => "lock",
        (Some("LWLock"), _) => "lwlock",
        (Some("IO"), _) => "io",
        (Some("Client"), Some("ClientRead")) if state == Some("idle in transaction") => {
            "idleInTransaction"
        }
        (Some("Client"), Some("ClientRead")) if state == Some("idle") => "idle",
        _ => "other",
    }
}

/// The means over a cell's samples.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PgWaits {
    pub(crate) samples: u64,
    /// Mean backends in each state of [`classify`].
    pub(crate) states: BTreeMap<String, f64>,
    /// Mean backends per `wait_event_type:wait_event` (`-` for none), the detail behind them.
    pub(crate) events: BTreeMap<String, f64>,
}

#[derive(Default)]
struct Counts {
    samples: u64,
    states: BTreeMap<&'static str, u64>,
    events: BTreeMap<String, u64>,
}

impl Counts {
    fn add(&mut self, state: Option<&str>, kind: Option<&str>, event: Option<&str>) {
        *self.states.entry(classify(state, kind, event)).or_default() += 1;
        let detail = match (kind, event) {
            (Some(k), Some(e)) => format!("{k}:{e}"),
            _ => format!("-:{}", state.unwrap_or("-")),
        };
        *self.events.entry(detail).or_default() += 1;
    }

    fn means(&self) -> PgWaits {
        let n = self.samples.max(1) as f64;
        PgWaits {
            samples: self.samples,
            states: self
                .states
                .iter()
                .map(|(k, v)| (k.to_string(), *v as f64 / n))
                .collect(),
            events: self
                .events
                .iter()
                .map(|(k, v)| (k.clone(), *v as f64 / n))
                .collect(),
        }
    }
}

/// A running sampler; [`Sampler::stop`] ends it and returns the means.
pub(super) struct Sampler {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Counts>,
}

impl Sampler {
    /// Connects to `url` (the cell's database) and starts sampling; `None` if it cannot connect
    /// (the cell is measured without it).
    pub(super) async fn start(url: &str) -> Option<Sampler> {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .ok()?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let statement = client.prepare(QUERY).await.ok()?;
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut counts = Counts::default();
            let mut tick = tokio::time::interval(Duration::from_millis(SAMPLE_INTERVAL_MS));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await; // the first tick is immediate
                               // At least one sample, however short the cell; then one per tick until stopped.
            while counts.samples < SAMPLES_MAX {
                let Ok(rows) = client.query(&statement, &[]).await else {
                    break;
                };
                counts.samples += 1;
                for row in rows {
                    counts.add(row.get(0), row.get(1), row.get(2));
                }
                tokio::select! {
                    _ = stopped.changed() => break,
                    _ = tick.tick() => {}
                }
            }
            counts
        });
        Some(Sampler { stop, task })
    }

    pub(super) async fn stop(self) -> Option<PgWaits> {
        let _ = self.stop.send(true);
        let counts = self.task.await.ok()?;
        (counts.samples > 0).then(|| counts.means())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_are_counted_in_one_state_each() {
        let active = Some("active");
        assert_eq!(classify(active, None, None), "cpu");
        assert_eq!(classify(active, Some("IO"), Some("WALSync")), "walFlush");
        assert_eq!(classify(active, Some("IO"), Some("WALWrite")), "walFlush");
        assert_eq!(
            classify(active, Some("LWLock"), Some("WALWrite")),
            "walFlush"
        );
        assert_eq!(
            classify(active, Some("LWLock"), Some("WALInsert")),
            "lwlock"
        );
        assert_eq!(
            classify(active, Some("Lock"), Some("transactionid")),
            "lock"
        );
        assert_eq!(classify(active, Some("IO"), Some("DataFileRead")), "io");
        let in_tx = Some("idle in transaction");
        assert_eq!(
            classify(in_tx, Some("Client"), Some("ClientRead")),
            "idleInTransaction"
        );
        assert_eq!(
            classify(Some("idle"), Some("Client"), Some("ClientRead")),
            "idle"
        );
        assert_eq!(classify(active, Some("IPC"), Some("SyncRep")), "other");
        assert_eq!(classify(None, None, None), "other");
    }

    #[test]
    fn means_are_per_sample() {
        let mut counts = Counts {
            samples: 4,
            ..Counts::default()
        };
        for _ in 0..6 {
            counts.add(Some("active"), None, None);
        }
        counts.add(Some("active"), Some("IO"), Some("WALSync"));
        let means = counts.means();
        assert_eq!(means.states["cpu"], 1.5);
        assert_eq!(means.states["walFlush"], 0.25);
        assert_eq!(means.events["IO:WALSync"], 0.25);
        assert_eq!(means.events["-:active"], 1.5);
    }
}
