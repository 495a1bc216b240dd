//! Heartbeats: each replica records that it is alive, on a connection of its own.
//!
//! A heartbeat is one autocommitted upsert of the replica's row, outside the write lock and
//! outside the pool: a replica whose pool is busy with a queue of writers waiting for the lock
//! must still heartbeat on time, or the others would take it for dead. (Taking a live replica
//! for dead is safe, only wasteful: its attempts in flight are marked `unknown` and its late
//! answers are kept as evidence; compare-and-set keeps it from sending anything twice.)
//!
//! The row also names the database session the replica heartbeats on (its backend pid and start
//! time). A process that dies, however it dies, closes that session at once, so the recovery
//! sweep ([`super::recover`]) takes a replica whose session is gone for dead without waiting for
//! its lease to run out: a crashed replica's attempts become `unknown` at the next sweep of any
//! replica, including its own successor's start-up sweep. The lease still catches a replica that
//! hangs while its session stays open.

use super::conn::{self, unavailable};
use crate::error::{StoreError, StoreResult};
use std::time::Duration;
use steward_core::{Millis, ReplicaId};
use tokio::sync::Mutex;

const HEARTBEAT_SQL: &str = "INSERT INTO replicas (id, started_at, heartbeat_at, session_pid, session_started)
     VALUES ($1, $2, $2, pg_backend_pid(),
             (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()))
     ON CONFLICT (id) DO UPDATE SET heartbeat_at = GREATEST(replicas.heartbeat_at, EXCLUDED.heartbeat_at),
         session_pid = EXCLUDED.session_pid, session_started = EXCLUDED.session_started";

/// How long one heartbeat may wait for its answer before the connection is taken for broken
/// and replaced, in milliseconds. Longer than the default lease: by the time it runs out, the
/// other replicas already count this one as dead, so closing the session (which they would
/// also read as death) costs nothing more. A slow answer is never a reason to drop the session
/// sooner.
const HEARTBEAT_ANSWER_MS_MAX: u64 = 10_000;

/// The heartbeat connection, opened on first use and again after it breaks.
pub(crate) struct Heartbeats {
    config: tokio_postgres::Config,
    client: Mutex<Option<tokio_postgres::Client>>,
}

impl Heartbeats {
    pub(crate) fn new(config: tokio_postgres::Config) -> Self {
        Self {
            config,
            client: Mutex::new(None),
        }
    }

    /// One heartbeat. Cancelling it (dropping the future) keeps the connection and its session:
    /// the session is this replica's proof of life.
    pub(crate) async fn beat(&self, replica: &ReplicaId, now: Millis) -> StoreResult<()> {
        let mut slot = self.client.lock().await;
        if slot.as_ref().is_none_or(|client| client.is_closed()) {
            let (client, connection) = conn::dedicated(&self.config, "steward-heartbeat").await?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::warn!(error = %e, "the heartbeat connection failed");
                }
            });
            *slot = Some(client);
        }
        let client = slot.as_ref().expect("connected above");
        let answer = tokio::time::timeout(
            Duration::from_millis(HEARTBEAT_ANSWER_MS_MAX),
            client.execute(HEARTBEAT_SQL, &[&replica.as_str(), &now.0]),
        )
        .await;
        match answer {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => {
                if client.is_closed() {
                    *slot = None;
                }
                Err(unavailable(e))
            }
            Err(_) => {
                *slot = None;
                Err(StoreError::Unavailable {
                    message: format!(
                        "no heartbeat answer within {HEARTBEAT_ANSWER_MS_MAX} ms; reconnecting"
                    ),
                    source: None,
                })
            }
        }
    }
}
