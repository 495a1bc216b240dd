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
    let gauges = store_gauges(&state).await;
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(&gauges),
    )
        .into_response()
}

/// The gauges read from the store at scrape time (`Figures`), each a count or an age over
/// every environment. A read that fails leaves its gauges out, so a graph shows a gap rather
/// than a made-up 0; the pool's figures are read from memory and always there.
async fn store_gauges(state: &AppState) -> Vec<(&'static str, &'static str, f64)> {
    let mut gauges = Vec::new();
    match state.store.figures(state.clock.now()).await {
        Ok(f) => gauges.extend([
            (
                "steward_unknown_effects",
                "effects whose outcome is unknown (the reconciling stage), in every environment",
                f.effects_unknown as f64,
            ),
            (
                "steward_dispatching_effects",
                "effects with an attempt recorded and its answer not yet, on every replica",
                f.effects_dispatching as f64,
            ),
            (
                "steward_reconcile_lag_seconds",
                "how long the most overdue reconcile of an unknown effect has waited past its due time",
                f.reconcile_overdue_ms as f64 / 1000.0,
            ),
            (
                "steward_approvals_pending",
                "approvals waiting for a decision, in every environment",
                f.approvals_pending as f64,
            ),
            (
                "steward_webhook_dead_letters",
                "webhook dead letters not redelivered (dead, or redelivery requested)",
                f.dead_letters_waiting as f64,
            ),
        ]),
        Err(e) => tracing::warn!(error = %e, "metrics: reading the store's figures failed"),
    }
    // Per subscription on the subscription's listing; here the sum and how many are behind, so
    // the number of series does not grow with the subscriptions.
    match state.store.webhook_backlog(None).await {
        Ok(backlog) => gauges.extend([
            (
                "steward_webhook_backlog_events",
                "sealed events after the webhook subscriptions' cursors, summed over every subscription",
                backlog.iter().map(|b| b.events).sum::<u64>() as f64,
            ),
            (
                "steward_webhook_subscriptions_behind",
                "webhook subscriptions with events after their cursor",
                backlog.iter().filter(|b| b.events > 0).count() as f64,
            ),
        ]),
        Err(e) => tracing::warn!(error = %e, "metrics: reading the webhook backlog failed"),
    }
    let pool = state.store.pool_use();
    gauges.extend([
        (
            "steward_store_pool_connections_in_use",
            "store connections lent out now (SQLite: reader connections; PostgreSQL: the pool)",
            pool.in_use as f64,
        ),
        (
            "steward_store_pool_connections_max",
            "the most store connections lent out at once",
            pool.max as f64,
        ),
        (
            "steward_store_pool_waiting",
            "callers waiting for a store connection (PostgreSQL; always 0 on SQLite)",
            pool.waiting as f64,
        ),
    ]);
    gauges
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
