//! The delivery loop (issue #30 item 4): a dispatcher leases due subscriptions and gives each
//! one a worker of its own; the worker delivers the subscription's events one after the other,
//! back to back, until it is caught up or an attempt fails, and records each outcome
//! (`Webhooks::record_delivery`) before the next POST. A slow or failing receiver holds up only
//! its own worker: the dispatcher never waits for one.
//!
//! Per subscription, one POST is in flight at a time, so a receiver sees its events in order;
//! a worker reads the log a batch at a time ([`Feed::next`]) and keeps its lease
//! while it works through the batch, so a healthy receiver gets events as fast as it answers,
//! not one per poll. The cursor moves only after the receiver answered 2xx (or the event went
//! to the dead-letter list), in a transaction after the POST: a process that dies before it
//! delivers the event again after its restart (at least once; receivers dedupe by the event
//! id). Which outcome an attempt leaves is [`outcome`], a pure function of the attempt's result,
//! the count so far and the [`RetrySchedule`].
//!
//! A dead letter an operator asked to redeliver is POSTed, once, by the worker of its
//! subscription before the subscription's next event (`Webhooks::record_redelivery`).

use super::retry::RetrySchedule;
use super::signature;
use super::topics::Topic;
use crate::events::Feed;
use crate::state::AppState;
use serde_json::Value;
use std::time::{Duration, Instant};
use steward_core::Millis;
use steward_store::{
    DeadLetter, DeliveryOutcome, Redelivery, SealedSecret, StoreError, Sweep, WebhookSubscription,
};

/// How often the dispatcher looks for due subscriptions, in milliseconds. With the sealer's
/// 200 ms an event reaches an idle subscription's receiver within about half a second of its
/// commit; a subscription with a worker gets it as soon as the worker reads the log again.
pub const WEBHOOK_POLL_INTERVAL_MS: u64 = 250;
/// How many subscriptions the dispatcher leases per round, in subscriptions.
pub const WEBHOOK_CLAIM_SUBSCRIPTIONS_MAX: u32 = 32;
/// How many subscriptions one replica delivers to at once, in workers (one each): bounds the
/// connections and tasks a replica spends on webhooks; the rest wait for a free worker.
pub const WEBHOOK_WORKERS_MAX: usize = 256;
pub use super::WEBHOOK_TIMEOUT_MS;
/// How long a lease keeps a subscription away from other replicas, in milliseconds: longer than
/// an attempt can take, so a live deliverer is never overtaken. A worker extends it with every
/// outcome it records.
pub const WEBHOOK_LEASE_MS: i64 = 30_000;
/// How long a worker waits for an event it has not seen yet when its receiver is caught up, in
/// milliseconds, before it gives its lease back: a busy subscription keeps its worker (no
/// dispatcher round between two events), an idle one frees it.
pub const WEBHOOK_IDLE_MS: u64 = 1_000;
/// How often a worker that is caught up reads the log again while it waits, in milliseconds.
pub const WEBHOOK_IDLE_POLL_MS: u64 = 50;
/// How many requested redeliveries one worker POSTs per lease, in letters: each may take
/// [`WEBHOOK_TIMEOUT_MS`], and the worker extends its lease after each.
pub const WEBHOOK_REDELIVERIES_PER_LEASE: u32 = 20;
/// The longest receiver error text kept with a retry or a dead letter, in bytes.
const ERROR_TEXT_BYTES_MAX: usize = 200;

/// How this replica delivers: its retry schedule, and how it tells whose leases are dead.
#[derive(Debug, Clone)]
pub struct DeliverySettings {
    pub retry: RetrySchedule,
    /// The console's base URL as people reach it (`--public-url`, no trailing slash): the
    /// links approval channels send (`channels.rs`).
    pub public_url: std::sync::Arc<str>,
    /// Several replicas share the store (PostgreSQL): a lease's owner is dead once its
    /// heartbeat lapsed for `replica_lease`. Otherwise this process is the store's only one.
    pub shared: bool,
    pub replica_lease: Duration,
}

/// Delivers forever: takes back dead processes' leases at once, then every
/// [`WEBHOOK_POLL_INTERVAL_MS`] leases what is due and starts a worker for each.
pub(crate) async fn run(state: AppState, settings: DeliverySettings) {
    let reclaim_every = crate::replica::heartbeat_every(settings.replica_lease);
    reclaim(&state, &settings).await;
    let mut reclaimed = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_millis(WEBHOOK_POLL_INTERVAL_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        while workers.try_join_next().is_some() {}
        if settings.shared && reclaimed.elapsed() >= reclaim_every {
            reclaim(&state, &settings).await;
            reclaimed = Instant::now();
        }
        let room = WEBHOOK_WORKERS_MAX.saturating_sub(workers.len());
        if room == 0 {
            continue;
        }
        let limit = (room as u32).min(WEBHOOK_CLAIM_SUBSCRIPTIONS_MAX);
        for subscription in claim(&state, limit).await {
            let (state, settings) = (state.clone(), settings.clone());
            workers.spawn(async move { work(&state, &settings, subscription).await });
        }
    }
}

/// Releases the leases of processes known dead: at start every other owner of an embedded
/// store (its lock file proves them gone), on a shared store the replicas whose heartbeat
/// lapsed or whose database session closed. The restarted process's own earlier leases are
/// among them: each start is a new replica id.
async fn reclaim(state: &AppState, settings: &DeliverySettings) {
    let now = state.clock.now();
    let sweep = if settings.shared {
        Sweep::lease(
            &state.replica,
            now,
            settings.replica_lease.as_millis() as i64,
        )
    } else {
        Sweep::sole(&state.replica, now)
    };
    match state.store.release_dead_webhook_leases(&sweep).await {
        Ok(0) => {}
        Ok(released) => {
            tracing::info!(
                released,
                "took back webhook leases of stopped Steward processes"
            )
        }
        Err(e) => tracing::warn!(error = %e, "releasing dead webhook leases failed; retrying"),
    }
}

/// Leases at most `limit` due subscriptions to this replica.
async fn claim(state: &AppState, limit: u32) -> Vec<WebhookSubscription> {
    let now = state.clock.now();
    let owner = state.replica.to_string();
    match state
        .store
        .claim_subscriptions(&owner, now, now.plus_ms(WEBHOOK_LEASE_MS), limit)
        .await
    {
        Ok(due) => due,
        Err(e) => {
            tracing::warn!(error = %e, "claiming webhook subscriptions failed; retrying");
            Vec::new()
        }
    }
}

/// What a worker does next with its lease.
enum Next {
    /// Keep the lease and go on: there may be more to deliver.
    More,
    /// The lease is released (or lost): the worker ends.
    Done,
}

/// One subscription's worker: its requested redeliveries and its events in order, batch after
/// batch, until it is caught up (and stays so for [`WEBHOOK_IDLE_MS`]) or an attempt fails.
async fn work(state: &AppState, settings: &DeliverySettings, mut s: WebhookSubscription) {
    let base = &*settings.public_url;
    let owner = state.replica.to_string();
    let mut idle_since: Option<Instant> = None;
    loop {
        // Every batch, not only at the lease: a busy subscription keeps its worker for as long
        // as events come, and an operator's request must not wait for a quiet moment.
        if let Next::Done = redeliver(state, &owner, &s, base).await {
            return;
        }
        if s.next_attempt_at > state.clock.now() {
            // Leased only for its redeliveries; its next event waits for its retry time.
            record(state, &owner, &s, &unchanged(&s, state.clock.now()), None).await;
            return;
        }
        match deliver_batch(state, &owner, settings, &mut s).await {
            Step::Delivered => idle_since = None,
            Step::CaughtUp => {
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= Duration::from_millis(WEBHOOK_IDLE_MS) {
                    let now = state.clock.now();
                    record(state, &owner, &s, &unchanged(&s, now), None).await;
                    return;
                }
                tokio::time::sleep(Duration::from_millis(WEBHOOK_IDLE_POLL_MS)).await;
            }
            Step::Stop => return,
        }
    }
}

/// What one batch of the log left.
enum Step {
    /// Something was delivered, dead-lettered or scanned past: the lease is kept.
    Delivered,
    /// Nothing new in the sealed log.
    CaughtUp,
    /// The lease is released or lost: an attempt failed, or another replica moved on.
    Stop,
}

/// Delivers the events of one batch of the log in order, recording each outcome.
async fn deliver_batch(
    state: &AppState,
    owner: &str,
    settings: &DeliverySettings,
    s: &mut WebhookSubscription,
) -> Step {
    let retry = &settings.retry;
    let (events, scanned) = match next_events(state, s).await {
        Ok(found) => found,
        Err(e) => {
            // Not the receiver's failure: try again next round, the attempt count unchanged.
            tracing::warn!(subscription = %s.id, error = %e, "reading events for a webhook failed");
            let now = state.clock.now();
            let outcome = DeliveryOutcome::Retry {
                attempts: s.attempts,
                next_attempt_at: now.plus_ms(WEBHOOK_POLL_INTERVAL_MS as i64),
                error: "the event log could not be read".into(),
            };
            record(state, owner, s, &outcome, None).await;
            return Step::Stop;
        }
    };
    if events.is_empty() && scanned == s.cursor {
        return Step::CaughtUp;
    }
    for (seq, event) in events {
        if let Some(fresh) = refreshed(state, s).await {
            *s = fresh;
        } else {
            return Step::Stop;
        }
        let now = state.clock.now();
        let body = event.to_string();
        let result = post(state, s, &body, &event, now, &settings.public_url).await;
        if let Err(reason) = &result {
            tracing::info!(subscription = %s.id, event = seq, attempt = s.attempts + 1,
                           reason = %reason, "webhook delivery failed");
        }
        let now = state.clock.now();
        let outcome = outcome(s, seq, &event, body, result, now, retry);
        let keep = !matches!(outcome, DeliveryOutcome::Retry { .. });
        let keep_until = keep.then(|| now.plus_ms(WEBHOOK_LEASE_MS));
        if !record(state, owner, s, &outcome, keep_until).await || !keep {
            return Step::Stop;
        }
        s.cursor = seq;
        s.attempts = 0;
    }
    if scanned > s.cursor {
        let now = state.clock.now();
        let outcome = DeliveryOutcome::Advance { cursor: scanned };
        if !record(
            state,
            owner,
            s,
            &outcome,
            Some(now.plus_ms(WEBHOOK_LEASE_MS)),
        )
        .await
        {
            return Step::Stop;
        }
        s.cursor = scanned;
        s.attempts = 0;
    }
    Step::Delivered
}

/// The subscription as stored now (its secrets, URL and headers may have changed since the
/// lease), if it is still there, enabled, and at the cursor this worker left it.
async fn refreshed(state: &AppState, s: &WebhookSubscription) -> Option<WebhookSubscription> {
    match state.store.subscription(&s.env_id, &s.id).await {
        Ok(Some(fresh)) if fresh.enabled && fresh.cursor == s.cursor => Some(fresh),
        Ok(_) => {
            let now = state.clock.now();
            record(
                state,
                &state.replica.to_string(),
                s,
                &unchanged(s, now),
                None,
            )
            .await;
            None
        }
        Err(e) => {
            tracing::warn!(subscription = %s.id, error = %e, "reading a webhook subscription failed");
            let now = state.clock.now();
            record(
                state,
                &state.replica.to_string(),
                s,
                &unchanged(s, now),
                None,
            )
            .await;
            None
        }
    }
}

/// Records `outcome` for `s` at its cursor, under its claim's epoch; `keep_until` keeps the
/// lease. `false` when it was not recorded (the claim is stale, the cursor moved on, or the
/// store failed).
async fn record(
    state: &AppState,
    owner: &str,
    s: &WebhookSubscription,
    outcome: &DeliveryOutcome,
    keep_until: Option<Millis>,
) -> bool {
    let now = state.clock.now();
    match state
        .store
        .record_delivery(
            &s.id,
            owner,
            s.lease_epoch,
            s.cursor,
            outcome,
            now,
            keep_until,
        )
        .await
    {
        Ok(recorded) => {
            if recorded && matches!(outcome, DeliveryOutcome::DeadLetter { .. }) {
                state.metrics.webhook_dead_lettered();
            }
            recorded
        }
        // This replica's claim ran out (it paused, or lost the database) and another claim
        // took the subscription: the new holder delivers from the stored cursor.
        Err(StoreError::Fenced { held, current, .. }) => {
            tracing::warn!(subscription = %s.id, held, current,
                "fenced: this replica's webhook claim was taken over; its result is dropped");
            false
        }
        Err(e) => {
            tracing::warn!(subscription = %s.id, error = %e, "recording a webhook delivery failed");
            false
        }
    }
}

/// The outcome that leaves `s` as it is (used to extend or give back its lease).
fn unchanged(s: &WebhookSubscription, now: Millis) -> DeliveryOutcome {
    if s.attempts == 0 && s.next_attempt_at <= now {
        return DeliveryOutcome::Advance { cursor: s.cursor };
    }
    DeliveryOutcome::Retry {
        attempts: s.attempts,
        next_attempt_at: s.next_attempt_at,
        error: s.last_error.clone().unwrap_or_default(),
    }
}

/// POSTs the subscription's requested redeliveries, each once, recording each answer.
async fn redeliver(state: &AppState, owner: &str, s: &WebhookSubscription, base: &str) -> Next {
    let letters = match state
        .store
        .requested_redeliveries(&s.id, WEBHOOK_REDELIVERIES_PER_LEASE)
        .await
    {
        Ok(letters) => letters,
        Err(e) => {
            tracing::warn!(subscription = %s.id, error = %e, "reading redeliveries failed");
            return Next::More;
        }
    };
    for letter in letters {
        redeliver_one(state, owner, s, &letter, base).await;
        // Each POST may take the receiver's whole timeout: keep the lease ahead of it.
        let now = state.clock.now();
        let keep = Some(now.plus_ms(WEBHOOK_LEASE_MS));
        if !record(state, owner, s, &unchanged(s, now), keep).await {
            return Next::Done;
        }
    }
    Next::More
}

/// POSTs one dead letter's body again, byte for byte, freshly signed, and records the answer.
async fn redeliver_one(
    state: &AppState,
    owner: &str,
    s: &WebhookSubscription,
    d: &DeadLetter,
    base: &str,
) {
    debug_assert_eq!(d.redelivery, Redelivery::Requested, "letter {}", d.id);
    let event: Value = serde_json::from_str(&d.body).unwrap_or(Value::Null);
    let now = state.clock.now();
    let result = post(state, s, &d.body, &event, now, base).await;
    if let Err(reason) = &result {
        tracing::info!(subscription = %s.id, letter = %d.id, reason = %reason,
                       "webhook redelivery failed");
    }
    if let Err(e) = state
        .store
        .record_redelivery(&d.id, owner, result, state.clock.now())
        .await
    {
        tracing::warn!(letter = %d.id, error = %e, "recording a webhook redelivery failed");
    }
}

/// The events `subscription` takes after its cursor in one batch of the log, in order, and
/// how far the batch scanned.
async fn next_events(
    state: &AppState,
    s: &WebhookSubscription,
) -> steward_store::StoreResult<(Vec<(i64, Value)>, i64)> {
    let topic = Topic::by_name(&s.topic);
    let mut feed = Feed {
        env: s.env_id.to_string(),
        cursor: s.cursor,
    };
    let events = feed.next(&*state.store).await?;
    let wanted = |kind: &str| {
        topic.is_some_and(|t| t.carries(kind))
            && (s.event_types.is_empty() || s.event_types.iter().any(|t| t == kind))
    };
    let found = events
        .into_iter()
        .filter(|(_, e)| wanted(e["type"].as_str().unwrap_or_default()))
        .collect();
    Ok((found, feed.cursor))
}

/// What an attempt at the event at `seq` leaves: the cursor past it after a 2xx, a retry after
/// the schedule's delay, or a dead letter once the schedule's attempts all failed.
fn outcome(
    s: &WebhookSubscription,
    seq: i64,
    event: &Value,
    body: String,
    result: Result<(), String>,
    now: Millis,
    retry: &RetrySchedule,
) -> DeliveryOutcome {
    let error = match result {
        Ok(()) => return DeliveryOutcome::Advance { cursor: seq },
        Err(error) => error,
    };
    let failures = s.attempts + 1;
    if failures >= retry.attempts {
        return DeliveryOutcome::DeadLetter {
            letter: DeadLetter {
                id: format!("dlq_{}", crate::clock::unique().to_ascii_lowercase()),
                subscription_id: s.id.clone(),
                env_id: s.env_id.clone(),
                event_seq: seq,
                event_type: event["type"].as_str().unwrap_or_default().to_string(),
                body,
                attempts: failures,
                last_error: error,
                created_at: now,
                redelivery: Redelivery::Dead,
                redelivered_at: None,
            },
        };
    }
    DeliveryOutcome::Retry {
        attempts: failures,
        next_attempt_at: now.plus_ms(retry.delay_ms(failures)),
        error,
    }
}

/// The secrets that sign now: the current one, and the previous one within its grace.
fn signing_secrets(
    state: &AppState,
    s: &WebhookSubscription,
    now: Millis,
) -> Result<Vec<String>, String> {
    let open = |sealed: &SealedSecret| {
        state
            .vault
            .open(
                &s.env_id,
                &secret_name(&s.id),
                &sealed.nonce,
                &sealed.sealed,
            )
            .map_err(|_| "the subscription's secret could not be opened".to_string())
    };
    let mut secrets = vec![open(&s.secret)?];
    if let (Some(previous), Some(until)) = (&s.previous_secret, s.previous_until) {
        if now < until {
            secrets.push(open(previous)?);
        }
    }
    Ok(secrets)
}

pub(crate) use super::secret_name;

/// POSTs `body`, signed, after the same outbound checks as a dispatch. `Ok` only for a 2xx.
/// An approval channel sends its own message for `event` instead (`channels::send`).
async fn post(
    state: &AppState,
    s: &WebhookSubscription,
    body: &str,
    event: &Value,
    now: Millis,
    base: &str,
) -> Result<(), String> {
    if s.channel.is_some() {
        return super::channels::send(state, s, event, base).await;
    }
    state
        .outbound
        .check(&s.url)
        .await
        .map_err(|e| format!("destination refused: {e}"))?;
    let secrets = signing_secrets(state, s, now)?;
    let header = signature::header(body, now.0.div_euclid(1000), s.env_id.as_str(), &secrets);
    let mut request = state
        .http
        .post(&s.url)
        .timeout(Duration::from_millis(WEBHOOK_TIMEOUT_MS))
        .header("content-type", "application/json")
        .header("user-agent", "steward-webhooks")
        .header("anlyon-event-id", event["id"].as_str().unwrap_or_default())
        .header(
            "anlyon-event-type",
            event["type"].as_str().unwrap_or_default(),
        );
    if let Some(extra) = s.headers.as_object() {
        for (name, value) in extra {
            if let Some(value) = value.as_str() {
                request = request.header(name.as_str(), value);
            }
        }
    }
    let response = request
        .header("anlyon-signature", header)
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| {
            if e.is_timeout() {
                "the receiver did not answer in time".to_string()
            } else {
                "the receiver could not be reached".to_string()
            }
        })?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let mut text = format!("HTTP {}", status.as_u16());
    text.truncate(ERROR_TEXT_BYTES_MAX);
    Err(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn subscription(attempts: u32) -> WebhookSubscription {
        WebhookSubscription {
            id: "whs_1".into(),
            env_id: steward_core::EnvironmentId::from_unique("1"),
            topic: "effects".into(),
            url: "https://example.com".into(),
            event_types: vec![],
            enabled: true,
            headers: json!({}),
            secret: SealedSecret {
                nonce: vec![],
                sealed: vec![],
            },
            previous_secret: None,
            previous_until: None,
            cursor: 4,
            lease_epoch: 1,
            attempts,
            next_attempt_at: Millis(0),
            last_error: None,
            created_at: Millis(0),
            updated_at: Millis(0),
            channel: None,
        }
    }

    const RETRY: RetrySchedule = RetrySchedule {
        attempts: 6,
        first_delay_ms: 500,
        max_delay_ms: 60_000,
    };

    #[test]
    fn a_2xx_moves_past_the_event_and_a_failure_retries_then_dead_letters() {
        let event = json!({"id": "evt_5", "type": "effect.settled"});
        let now = Millis(1_000);
        let ok = outcome(&subscription(3), 5, &event, "b".into(), Ok(()), now, &RETRY);
        assert_eq!(ok, DeliveryOutcome::Advance { cursor: 5 });
        let retry = outcome(
            &subscription(0),
            5,
            &event,
            "b".into(),
            Err("HTTP 500".into()),
            now,
            &RETRY,
        );
        assert_eq!(
            retry,
            DeliveryOutcome::Retry {
                attempts: 1,
                next_attempt_at: Millis(1_500),
                error: "HTTP 500".into()
            }
        );
        let last = subscription(RETRY.attempts - 1);
        match outcome(
            &last,
            5,
            &event,
            "b".into(),
            Err("HTTP 503".into()),
            now,
            &RETRY,
        ) {
            DeliveryOutcome::DeadLetter { letter } => {
                assert_eq!(letter.event_seq, 5);
                assert_eq!(letter.attempts, RETRY.attempts);
                assert_eq!(letter.redelivery, Redelivery::Dead);
                assert_eq!(letter.event_type, "effect.settled");
            }
            other => panic!("expected a dead letter, got {other:?}"),
        }
    }

    #[test]
    fn leaving_a_subscription_unchanged_keeps_its_retry_or_its_cursor() {
        let now = Millis(1_000);
        assert_eq!(
            unchanged(&subscription(0), now),
            DeliveryOutcome::Advance { cursor: 4 }
        );
        let mut waiting = subscription(2);
        waiting.next_attempt_at = Millis(9_000);
        waiting.last_error = Some("HTTP 500".into());
        assert_eq!(
            unchanged(&waiting, now),
            DeliveryOutcome::Retry {
                attempts: 2,
                next_attempt_at: Millis(9_000),
                error: "HTTP 500".into()
            }
        );
    }
}
