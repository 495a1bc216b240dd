//! Sending one request, with the client's own bounded retries.
//!
//! Every retry resends the *same* request: same body, same `Idempotency-Key`. That is what makes
//! retrying an invoke safe after a timeout or a reset: Steward answers a repeat with the
//! invocation it already recorded. A new key is never drawn here.

use super::error::ApiError;
use serde_json::Value;
use std::time::Duration;

/// Attempts per request, the first included. With the backoff below this spans about 10 s: long
/// enough to ride out a restart of Steward, short enough that a worker gives up and leaves the
/// operation for recovery rather than hanging.
pub const TRANSPORT_ATTEMPTS_MAX: u32 = 8;
/// The first pause between attempts, in milliseconds; it doubles each time.
pub const BACKOFF_INITIAL_MS: u64 = 100;
/// The longest pause between attempts, in milliseconds.
pub const BACKOFF_MAX_MS: u64 = 2_000;

/// How many times and how patiently to resend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub attempts_max: u32,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts_max: TRANSPORT_ATTEMPTS_MAX,
            backoff_initial: Duration::from_millis(BACKOFF_INITIAL_MS),
            backoff_max: Duration::from_millis(BACKOFF_MAX_MS),
        }
    }
}

impl RetryPolicy {
    /// The pause after failed attempt `attempt` (1-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(16);
        self.backoff_initial
            .saturating_mul(factor)
            .min(self.backoff_max)
    }
}

/// A success answer: the envelope's `data`.
#[derive(Debug, Clone)]
pub struct Reply {
    pub data: Value,
}

/// What one attempt came to.
enum Attempt {
    Done(Reply),
    Retry(String),
    Fail(ApiError),
}

/// Statuses that say "not now" rather than "no": the request may be resent unchanged.
fn retryable_status(status: u16, code: &str) -> bool {
    matches!(status, 429 | 500 | 502 | 503 | 504)
        || (status == 409 && code == "idempotency_request_in_progress")
}

fn judge(status: u16, text: &str) -> Attempt {
    let parsed: Option<Value> = serde_json::from_str(text).ok();
    if (200..300).contains(&status) {
        return match parsed {
            Some(Value::Object(mut map)) if map.get("success") == Some(&Value::Bool(true)) => {
                Attempt::Done(Reply {
                    data: map.remove("data").unwrap_or(Value::Null),
                })
            }
            _ => Attempt::Fail(ApiError::Malformed(format!(
                "status {status} without a success envelope"
            ))),
        };
    }
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    let code = error
        .and_then(|e| e.get("code"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let message = error
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if retryable_status(status, &code) {
        return Attempt::Retry(format!("{status} {code}"));
    }
    Attempt::Fail(ApiError::Refused {
        status,
        code,
        message,
        details: error.and_then(|e| e.get("details")).cloned(),
    })
}

/// Sends the request `build` makes, resending the identical request on retryable failures.
/// `on_headers` runs once the answer's status line and headers are in and before its body is
/// read (the client's `after_dispatch` window).
pub async fn send(
    policy: &RetryPolicy,
    build: impl Fn() -> reqwest::RequestBuilder,
    on_headers: impl Fn(),
) -> Result<Reply, ApiError> {
    let mut last = String::new();
    for attempt in 1..=policy.attempts_max {
        let outcome = match build().send().await {
            Err(e) => Attempt::Retry(format!("transport: {e}")),
            Ok(response) => {
                on_headers();
                let status = response.status().as_u16();
                match response.text().await {
                    Ok(text) => judge(status, &text),
                    Err(e) => Attempt::Retry(format!("reading the answer: {e}")),
                }
            }
        };
        match outcome {
            Attempt::Done(reply) => return Ok(reply),
            Attempt::Fail(e) => return Err(e),
            Attempt::Retry(why) => {
                tracing::debug!(attempt, reason = %why, "retrying with the same request");
                last = why;
                if attempt < policy.attempts_max {
                    tokio::time::sleep(policy.backoff(attempt)).await;
                }
            }
        }
    }
    Err(ApiError::Exhausted {
        attempts: policy.attempts_max,
        last,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff(1), Duration::from_millis(100));
        assert_eq!(p.backoff(2), Duration::from_millis(200));
        assert_eq!(p.backoff(5), Duration::from_millis(1_600));
        assert_eq!(p.backoff(6), Duration::from_millis(2_000));
        assert_eq!(p.backoff(60), Duration::from_millis(2_000));
    }

    #[test]
    fn only_not_now_answers_are_retried() {
        let body = |code: &str| {
            format!(r#"{{"success":false,"error":{{"code":"{code}","message":"m"}}}}"#)
        };
        assert!(matches!(
            judge(503, &body("STORAGE_UNAVAILABLE")),
            Attempt::Retry(_)
        ));
        assert!(matches!(
            judge(409, &body("idempotency_request_in_progress")),
            Attempt::Retry(_)
        ));
        assert!(matches!(
            judge(502, "<html>bad gateway</html>"),
            Attempt::Retry(_)
        ));
        assert!(matches!(
            judge(409, &body("operation_key_conflict")),
            Attempt::Fail(ApiError::Refused { status: 409, .. })
        ));
        assert!(matches!(judge(404, &body("NOT_FOUND")), Attempt::Fail(_)));
        assert!(matches!(
            judge(200, r#"{"success":true,"data":{"a":1}}"#),
            Attempt::Done(_)
        ));
        assert!(matches!(
            judge(200, "not json"),
            Attempt::Fail(ApiError::Malformed(_))
        ));
    }
}
