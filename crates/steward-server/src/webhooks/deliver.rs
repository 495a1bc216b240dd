//! The delivery loop: every replica leases due subscriptions, POSTs each one's next event, and
//! records the outcome (`Webhooks::record_delivery`).
//!
//! The cursor moves only after the receiver answered 2xx (or the event went to the dead-letter
//! list), in a transaction after the POST: a process that dies before it delivers the event
//! again after its restart (at least once; receivers dedupe by the event id). Which outcome an
//! attempt leaves is [`outcome`], a pure function of the attempt's result and the count so far.

use super::signature;
use super::topics::Topic;
use crate::events::Feed;
use crate::state::AppState;
use serde_json::Value;
use std::time::Duration;
use steward_core::Millis;
use steward_store::{DeadLetter, DeliveryOutcome, SealedSecret, WebhookSubscription};

/// How often a replica looks for due subscriptions, in milliseconds. With the sealer's 200 ms
/// an event reaches its receivers within about half a second of its commit.
pub const WEBHOOK_POLL_INTERVAL_MS: u64 = 250;
/// How many subscriptions one replica leases per round, in subscriptions; their attempts run
/// concurrently.
pub const WEBHOOK_CLAIM_SUBSCRIPTIONS_MAX: u32 = 32;
/// How long a receiver may take to answer, in milliseconds; past it the attempt failed.
pub const WEBHOOK_TIMEOUT_MS: u64 = 10_000;
/// How long a lease keeps a subscription away from other replicas, in milliseconds: longer than
/// an attempt can take, so a live deliverer is never overtaken.
pub const WEBHOOK_LEASE_MS: i64 = 30_000;
/// Attempts at one event before it goes to the dead-letter list, in attempts.
pub const WEBHOOK_ATTEMPTS_MAX: u32 = 6;
/// The wait before the first retry, in milliseconds; each further retry waits twice as long.
pub const WEBHOOK_RETRY_DELAY_MS_FIRST: i64 = 500;
/// The longest wait between two attempts, in milliseconds.
pub const WEBHOOK_RETRY_DELAY_MS_MAX: i64 = 60_000;
/// The longest receiver error text kept with a retry or a dead letter, in bytes.
const ERROR_TEXT_BYTES_MAX: usize = 200;

/// Delivers forever, every [`WEBHOOK_POLL_INTERVAL_MS`].
pub(crate) async fn run(state: AppState) {
    let mut tick = tokio::time::interval(Duration::from_millis(WEBHOOK_POLL_INTERVAL_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        round(&state).await;
    }
}

/// One round: lease what is due and attempt each, concurrently.
async fn round(state: &AppState) {
    let now = state.clock.now();
    let owner = state.replica.to_string();
    let due = match state
        .store
        .claim_subscriptions(
            &owner,
            now,
            now.plus_ms(WEBHOOK_LEASE_MS),
            WEBHOOK_CLAIM_SUBSCRIPTIONS_MAX,
        )
        .await
    {
        Ok(due) => due,
        Err(e) => {
            tracing::warn!(error = %e, "claiming webhook subscriptions failed; retrying");
            return;
        }
    };
    let mut attempts = tokio::task::JoinSet::new();
    for subscription in due {
        let state = state.clone();
        let owner = owner.clone();
        attempts.spawn(async move { attempt(&state, &owner, subscription).await });
    }
    while attempts.join_next().await.is_some() {}
}

/// The next event `subscription` takes after its cursor, and how far the scan got.
async fn next_event(
    state: &AppState,
    s: &WebhookSubscription,
) -> steward_store::StoreResult<(Option<(i64, Value)>, i64)> {
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
        .find(|(_, e)| wanted(e["type"].as_str().unwrap_or_default()));
    Ok((found, feed.cursor))
}

/// One subscription's turn: deliver its next event if it has one, and record what happened.
async fn attempt(state: &AppState, owner: &str, s: WebhookSubscription) {
    let now = state.clock.now();
    let outcome = match next_event(state, &s).await {
        Err(e) => {
            // Not the receiver's failure: try again next round, the attempt count unchanged.
            tracing::warn!(subscription = %s.id, error = %e, "reading events for a webhook failed");
            DeliveryOutcome::Retry {
                attempts: s.attempts,
                next_attempt_at: now.plus_ms(WEBHOOK_POLL_INTERVAL_MS as i64),
                error: "the event log could not be read".into(),
            }
        }
        Ok((None, scanned)) => DeliveryOutcome::Advance { cursor: scanned },
        Ok((Some((seq, event)), _)) => {
            let body = event.to_string();
            let result = post(state, &s, &body, &event, now).await;
            if let Err(reason) = &result {
                tracing::info!(subscription = %s.id, event = seq, attempt = s.attempts + 1,
                               reason = %reason, "webhook delivery failed");
            }
            outcome(&s, seq, &event, body, result, now)
        }
    };
    if let Err(e) = state
        .store
        .record_delivery(&s.id, owner, s.cursor, &outcome, now)
        .await
    {
        tracing::warn!(subscription = %s.id, error = %e, "recording a webhook delivery failed");
    }
}

/// What an attempt at the event at `seq` leaves: the cursor past it after a 2xx, a retry with
/// a doubling delay, or a dead letter once [`WEBHOOK_ATTEMPTS_MAX`] attempts failed.
fn outcome(
    s: &WebhookSubscription,
    seq: i64,
    event: &Value,
    body: String,
    result: Result<(), String>,
    now: Millis,
) -> DeliveryOutcome {
    let error = match result {
        Ok(()) => return DeliveryOutcome::Advance { cursor: seq },
        Err(error) => error,
    };
    let failures = s.attempts + 1;
    if failures >= WEBHOOK_ATTEMPTS_MAX {
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
            },
        };
    }
    DeliveryOutcome::Retry {
        attempts: failures,
        next_attempt_at: now.plus_ms(retry_delay_ms(failures)),
        error,
    }
}

/// The wait after the `failures`-th failed attempt, in milliseconds.
fn retry_delay_ms(failures: u32) -> i64 {
    let doublings = failures.saturating_sub(1).min(20);
    (WEBHOOK_RETRY_DELAY_MS_FIRST << doublings).min(WEBHOOK_RETRY_DELAY_MS_MAX)
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

/// The vault name a subscription's secrets are sealed under (bound into the ciphertext).
pub(crate) fn secret_name(subscription: &str) -> String {
    format!("webhook:{subscription}")
}

/// POSTs `body`, signed, after the same outbound checks as a dispatch. `Ok` only for a 2xx.
async fn post(
    state: &AppState,
    s: &WebhookSubscription,
    body: &str,
    event: &Value,
    now: Millis,
) -> Result<(), String> {
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
            attempts,
            next_attempt_at: Millis(0),
            last_error: None,
            created_at: Millis(0),
            updated_at: Millis(0),
        }
    }

    #[test]
    fn a_2xx_moves_past_the_event_and_a_failure_retries_then_dead_letters() {
        let event = json!({"id": "evt_5", "type": "effect.settled"});
        let now = Millis(1_000);
        let ok = outcome(&subscription(3), 5, &event, "b".into(), Ok(()), now);
        assert_eq!(ok, DeliveryOutcome::Advance { cursor: 5 });
        let retry = outcome(
            &subscription(0),
            5,
            &event,
            "b".into(),
            Err("HTTP 500".into()),
            now,
        );
        assert_eq!(
            retry,
            DeliveryOutcome::Retry {
                attempts: 1,
                next_attempt_at: Millis(1_500),
                error: "HTTP 500".into()
            }
        );
        let last = subscription(WEBHOOK_ATTEMPTS_MAX - 1);
        match outcome(&last, 5, &event, "b".into(), Err("HTTP 503".into()), now) {
            DeliveryOutcome::DeadLetter { letter } => {
                assert_eq!(letter.event_seq, 5);
                assert_eq!(letter.attempts, WEBHOOK_ATTEMPTS_MAX);
                assert_eq!(letter.event_type, "effect.settled");
            }
            other => panic!("expected a dead letter, got {other:?}"),
        }
    }

    #[test]
    fn retries_back_off_doubling_up_to_the_cap() {
        let delays: Vec<i64> = (1..=10).map(retry_delay_ms).collect();
        assert_eq!(&delays[..4], &[500, 1_000, 2_000, 4_000]);
        assert!(delays.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(*delays.last().unwrap(), WEBHOOK_RETRY_DELAY_MS_MAX);
        assert_eq!(retry_delay_ms(u32::MAX), WEBHOOK_RETRY_DELAY_MS_MAX);
    }
}
