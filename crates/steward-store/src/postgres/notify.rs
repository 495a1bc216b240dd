//! Approval announcements across replicas: `LISTEN`/`NOTIFY`.
//!
//! Once a decision or an expiry has committed, the store hands the approval's id to its
//! [`Announcer`], which sends `pg_notify(APPROVALS_CHANNEL, <approval id>)` for every id waiting,
//! in one statement on a connection of its own. It is not sent inside the deciding transaction:
//! PostgreSQL serializes every transaction that notifies, from its commit until its WAL flush
//! has returned, behind one lock for the whole server (the notification queue's), so concurrent
//! decisions that each notified would commit one at a time, one flush after the other, however
//! little else they share. The announcer's transaction writes nothing but the notification and
//! commits asynchronously (`synchronous_commit = off`), so it holds that lock for microseconds,
//! and a batch of decisions shares one. A notification carries no state: it only tells a long
//! poll to read the approval again, and that read sees the committed decision, since the
//! decision committed before it was announced.
//!
//! A replica that dies between a decision's commit and its announcement leaves it unannounced;
//! the recovery sweep that removes the dead replica sends [`RESYNC_PAYLOAD`], so every waiter
//! reads again within a lease. Until then a waiter still answers with a fresh read when its wait
//! runs out.
//!
//! Each store that is asked for
//! [`Approvals::approval_events`](crate::Approvals::approval_events) keeps one connection of its
//! own listening, and forwards every notification to a broadcast channel. When the connection
//! drops, it reconnects with backoff and sends [`ApprovalEvent::Resync`] once it listens again:
//! a decision committed while it was away was not announced, so waiters must read again.

use super::conn;
use crate::error::StoreResult;
use crate::records::ApprovalEvent;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use steward_core::ApprovalId;
use tokio::sync::{broadcast, mpsc};
use tokio_postgres::AsyncMessage;

/// The notification channel for approval changes; the payload is the approval id, or
/// [`RESYNC_PAYLOAD`].
pub(crate) const APPROVALS_CHANNEL: &str = "steward_approvals";
/// The payload that tells every listener to read again whatever it waits for: sent by a sweep
/// that removed a dead replica, whose last decisions may not have been announced.
pub(crate) const RESYNC_PAYLOAD: &str = "resync";
/// Approvals waiting to be announced at most; past it an announcement is dropped (with a
/// warning) and its waiters answer when their wait runs out. Far above what a replica decides
/// in the time one announcement takes.
const ANNOUNCE_QUEUE_MAX: usize = 4_096;
/// Approval ids announced in one statement at most: bounds the statement's parameter.
const ANNOUNCE_BATCH_MAX: usize = 256;
/// Tries of one batch before it is dropped with a warning (a reconnect between tries).
const ANNOUNCE_ATTEMPTS_MAX: u32 = 3;
/// The wait before trying a batch again after a failure, in milliseconds.
const ANNOUNCE_RETRY_MS: u64 = 100;
/// One statement notifies every id in `$2` on channel `$1`.
const ANNOUNCE_SQL: &str = "SELECT pg_notify($1, id) FROM UNNEST($2::text[]) AS id";
/// Announcements a slow subscriber may fall behind by before it is told it lagged (it then
/// reads again, as after a resync). Decisions arrive at human pace; this is ample.
const EVENTS_BUFFERED_MAX: usize = 1_024;
/// The first wait before listening again after the connection failed, in milliseconds; each
/// further failure doubles it, up to [`LISTEN_RETRY_MS_MAX`].
const LISTEN_RETRY_MS_MIN: u64 = 100;
/// Five seconds: a database that is down is retried often enough to resume long polls soon
/// after it is back, rarely enough not to flood its log.
const LISTEN_RETRY_MS_MAX: u64 = 5_000;
/// How often an idle listener checks whether its store is gone, in milliseconds.
const LISTENER_CHECK_MS: u64 = 1_000;

/// The listener of one store (shared by its clones), started by the first subscriber.
pub(crate) struct Announcements {
    config: tokio_postgres::Config,
    sender: Mutex<Option<Arc<broadcast::Sender<ApprovalEvent>>>>,
}

impl Announcements {
    pub(crate) fn new(config: tokio_postgres::Config) -> Self {
        Self {
            config,
            sender: Mutex::new(None),
        }
    }

    /// A receiver of every announcement from now on; starts the listener on first use. The
    /// listener stops once the store is dropped.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<ApprovalEvent> {
        let mut slot = self.sender.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sender) = slot.as_ref() {
            return sender.subscribe();
        }
        // The first receiver exists before the listener starts, so it sees the first Resync.
        let (sender, receiver) = broadcast::channel(EVENTS_BUFFERED_MAX);
        let sender = Arc::new(sender);
        tokio::spawn(listen(self.config.clone(), Arc::downgrade(&sender)));
        *slot = Some(sender);
        receiver
    }
}

/// Listens until the store is gone, reconnecting with backoff.
async fn listen(config: tokio_postgres::Config, sender: Weak<broadcast::Sender<ApprovalEvent>>) {
    let mut retry_ms = LISTEN_RETRY_MS_MIN;
    loop {
        match listen_once(&config, &sender, &mut retry_ms).await {
            Ok(()) => return,
            Err(e) => tracing::warn!(
                error = %e,
                retry_ms,
                "lost the approval notification connection; long polls fall back to their own reads until it is back"
            ),
        }
        tokio::time::sleep(Duration::from_millis(retry_ms)).await;
        retry_ms = (retry_ms * 2).min(LISTEN_RETRY_MS_MAX);
        if sender.strong_count() == 0 {
            return;
        }
    }
}

/// One connection's life: `LISTEN`, then forward notifications. `Ok` when the store is gone,
/// `Err` when the connection failed.
async fn listen_once(
    config: &tokio_postgres::Config,
    sender: &Weak<broadcast::Sender<ApprovalEvent>>,
    retry_ms: &mut u64,
) -> StoreResult<()> {
    let (client, mut connection) = conn::dedicated(config, "steward-listener").await?;
    let statement = format!("LISTEN {APPROVALS_CHANNEL}");
    let listen = client.batch_execute(&statement);
    tokio::pin!(listen);
    let mut listening = false;
    let mut check = tokio::time::interval(Duration::from_millis(LISTENER_CHECK_MS));
    loop {
        // Polling the connection both drives the LISTEN request and yields notifications.
        let message = std::future::poll_fn(|cx| connection.poll_message(cx));
        tokio::select! {
            done = &mut listen, if !listening => {
                done.map_err(conn::unavailable)?;
                listening = true;
                *retry_ms = LISTEN_RETRY_MS_MIN;
                if !send(sender, ApprovalEvent::Resync) {
                    return Ok(());
                }
            }
            message = message => match message {
                Some(Ok(AsyncMessage::Notification(n))) if n.payload() == RESYNC_PAYLOAD => {
                    if !send(sender, ApprovalEvent::Resync) {
                        return Ok(());
                    }
                }
                Some(Ok(AsyncMessage::Notification(n))) => {
                    let Ok(id) = ApprovalId::parse(n.payload()) else {
                        tracing::warn!(payload = n.payload(), "ignored a malformed approval notification");
                        continue;
                    };
                    if !send(sender, ApprovalEvent::Changed(id)) {
                        return Ok(());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(conn::unavailable(e)),
                None => {
                    return Err(crate::StoreError::Unavailable {
                        message: "the database closed the notification connection".into(),
                        source: None,
                    })
                }
            },
            _ = check.tick() => {
                if sender.strong_count() == 0 {
                    return Ok(());
                }
            }
        }
    }
}

/// Sends to every subscriber; false once the store (and so the sender) is gone.
fn send(sender: &Weak<broadcast::Sender<ApprovalEvent>>, event: ApprovalEvent) -> bool {
    match sender.upgrade() {
        Some(sender) => {
            // No subscriber right now is fine: nobody is waiting.
            let _ = sender.send(event);
            true
        }
        None => false,
    }
}

/// Announces committed approval changes (see the module's doc), on a connection of its own
/// opened on first use. Shared by the store's clones; its task ends once they are all gone.
pub(crate) struct Announcer {
    config: tokio_postgres::Config,
    queue: Mutex<Option<mpsc::Sender<ApprovalId>>>,
}

impl Announcer {
    pub(crate) fn new(config: tokio_postgres::Config) -> Self {
        Self {
            config,
            queue: Mutex::new(None),
        }
    }

    /// Queues `id` to be announced; returns at once. Call it only once the change committed.
    pub(crate) fn announce(&self, id: ApprovalId) {
        let mut slot = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let queue = slot.get_or_insert_with(|| {
            let (queue, waiting) = mpsc::channel(ANNOUNCE_QUEUE_MAX);
            tokio::spawn(announce_queued(self.config.clone(), waiting));
            queue
        });
        if let Err(e) = queue.try_send(id) {
            tracing::warn!(approval = %e.into_inner(), "approval announcements are backed up; \
                this one is dropped and its long polls answer when their wait runs out");
        }
    }
}

/// Sends every queued announcement, a batch per statement, until the store is gone.
async fn announce_queued(config: tokio_postgres::Config, mut waiting: mpsc::Receiver<ApprovalId>) {
    let mut config = config;
    // The notification is all this session's transactions write: nothing to make durable.
    let options = match config.get_options() {
        Some(given) => format!("{given} -c synchronous_commit=off"),
        None => "-c synchronous_commit=off".to_string(),
    };
    config.options(options);
    let mut client: Option<(tokio_postgres::Client, tokio_postgres::Statement)> = None;
    let mut batch = Vec::with_capacity(ANNOUNCE_BATCH_MAX);
    while waiting.recv_many(&mut batch, ANNOUNCE_BATCH_MAX).await > 0 {
        let ids: Vec<&str> = batch.iter().map(ApprovalId::as_str).collect();
        for attempt in 1..=ANNOUNCE_ATTEMPTS_MAX {
            match announce_once(&config, &mut client, &ids).await {
                Ok(()) => break,
                Err(e) => {
                    client = None;
                    tracing::warn!(error = %e, attempt, approvals = ids.len(),
                        "could not announce approval changes; long polls on other replicas \
                         answer when their wait runs out");
                    tokio::time::sleep(Duration::from_millis(ANNOUNCE_RETRY_MS)).await;
                }
            }
        }
        batch.clear();
    }
}

/// Sends one batch, on the announcer's connection (opened, with its statement prepared, when
/// there is none or it closed).
async fn announce_once(
    config: &tokio_postgres::Config,
    client: &mut Option<(tokio_postgres::Client, tokio_postgres::Statement)>,
    ids: &[&str],
) -> StoreResult<()> {
    if client.as_ref().is_none_or(|(c, _)| c.is_closed()) {
        let (opened, connection) = conn::dedicated(config, "steward-announcer").await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "the approval announcement connection failed");
            }
        });
        let statement = opened
            .prepare(ANNOUNCE_SQL)
            .await
            .map_err(conn::unavailable)?;
        *client = Some((opened, statement));
    }
    let (client, statement) = client.as_ref().expect("connected above");
    client
        .execute(statement, &[&APPROVALS_CHANNEL, &ids])
        .await
        .map_err(conn::unavailable)?;
    Ok(())
}
