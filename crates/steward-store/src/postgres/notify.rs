//! Approval announcements across replicas: `LISTEN`/`NOTIFY`.
//!
//! Deciding or expiring an approval runs `pg_notify(APPROVALS_CHANNEL, <approval id>)` inside its
//! transaction; PostgreSQL delivers the notification to every listening session when (and only
//! if) that transaction commits. Each store that is asked for
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
use tokio::sync::broadcast;
use tokio_postgres::AsyncMessage;

/// The notification channel for approval changes; the payload is the approval id.
pub(crate) const APPROVALS_CHANNEL: &str = "steward_approvals";
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
