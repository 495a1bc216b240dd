//! `GET /metrics`, the Prometheus text of this process.
//!
//! The counters and gauges span every environment of the server, so they are an operator's
//! view, not a tenant's: no environment's API key opens them. They are served only
//! - on the main listener when a metrics token is configured, to a request carrying
//!   `Authorization: Bearer <token>` (compared in constant time); or
//! - on a separate metrics listener (`--metrics-listen`), where the token, if configured, is
//!   also required.
//!
//! Without either, `/metrics` is an unknown endpoint like any other (404 envelope).

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// The shortest metrics token accepted, in characters: 16 random characters are out of reach
/// of guessing, and a shorter one is more likely a placeholder left in a config file.
pub const METRICS_TOKEN_CHARS_MIN: usize = 16;

/// The bearer token that opens `/metrics`.
#[derive(Clone)]
pub struct MetricsToken(Arc<str>);

impl std::fmt::Debug for MetricsToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsToken(<redacted>)")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MetricsTokenError {
    #[error("the metrics token must be at least {METRICS_TOKEN_CHARS_MIN} characters")]
    TooShort,
    #[error("the metrics token must be printable ASCII without spaces")]
    NotPrintable,
}

impl MetricsToken {
    pub fn new(token: &str) -> Result<Self, MetricsTokenError> {
        if token.chars().count() < METRICS_TOKEN_CHARS_MIN {
            return Err(MetricsTokenError::TooShort);
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(MetricsTokenError::NotPrintable);
        }
        Ok(Self(token.into()))
    }

    /// Whether `presented` is this token. Both are hashed first, so the comparison takes the
    /// same time whatever their lengths and wherever they differ.
    fn matches(&self, presented: &str) -> bool {
        let expected = Sha256::digest(self.0.as_bytes());
        let presented = Sha256::digest(presented.as_bytes());
        expected.ct_eq(&presented).into()
    }
}

/// The handler; `token`, when there is one, must come as a bearer token.
pub async fn scrape(state: AppState, headers: HeaderMap, token: Option<MetricsToken>) -> Response {
    if let Some(token) = token {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !presented.is_some_and(|p| token.matches(p.trim())) {
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "AUTHENTICATION_FAILED",
                "missing or invalid metrics token",
            )
            .into_response();
        }
    }
    render(State(state)).await
}

async fn render(State(state): State<AppState>) -> Response {
    let unknown = state.store.count_unknown().await.unwrap_or(0);
    // Per subscription on the subscription's listing; here the sum and how many are behind, so
    // the number of series does not grow with the subscriptions.
    let backlog = state.store.webhook_backlog(None).await.unwrap_or_default();
    let gauges = [
        (
            "steward_unknown_effects",
            "effects whose outcome is unknown, in every environment",
            unknown,
        ),
        (
            "steward_webhook_backlog_events",
            "sealed events after the webhook subscriptions' cursors, summed over every subscription",
            backlog.iter().map(|b| b.events).sum(),
        ),
        (
            "steward_webhook_subscriptions_behind",
            "webhook subscriptions with events after their cursor",
            backlog.iter().filter(|b| b.events > 0).count() as u64,
        ),
    ];
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(&gauges),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_matches_only_itself() {
        let token = MetricsToken::new("0123456789abcdef").unwrap();
        assert!(token.matches("0123456789abcdef"));
        assert!(!token.matches("0123456789abcdeF"));
        assert!(!token.matches("0123456789abcdef0"));
        assert!(!token.matches(""));
        assert!(matches!(
            MetricsToken::new("short"),
            Err(MetricsTokenError::TooShort)
        ));
        assert!(format!("{token:?}").contains("redacted"));
    }
}
