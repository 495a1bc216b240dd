//! Payment intents, as far as a refund preview reads them.
//!
//! * `GET /v1/payment_intents/{id}` (behind the test-key check) answers Stripe's shape with the
//!   intent's `amount`, `currency`, `status` and `amount_refunded`, the sum of the refunds
//!   committed against it. An intent nobody registered is 404 `resource_missing`, as Stripe
//!   answers an unknown id.
//! * `POST /_fixture/payment_intents` `{"id": "pi_...", "amount": N, "currency": "usd"}`
//!   registers one (control API, no authentication; loopback only). Intents live in memory: a
//!   fixture restarted from its state file keeps its refunds, not its intents.
//!
//! Reading never writes: the write count stays what it was.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::json;

use crate::error::{json_response, ApiError};
use crate::state::Store;

/// A registered intent: what was paid, and in which currency.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct PaymentIntent {
    pub id: String,
    /// In the currency's smallest unit; positive.
    pub amount: i64,
    #[serde(default = "usd")]
    pub currency: String,
}

fn usd() -> String {
    "usd".into()
}

/// `GET /v1/payment_intents/{id}`, for the `/v1` router (which adds the key check).
pub(crate) fn api_router() -> Router<Arc<Store>> {
    Router::new().route("/v1/payment_intents/{id}", get(retrieve))
}

/// `POST /_fixture/payment_intents`.
pub(crate) fn control_router() -> Router<Arc<Store>> {
    Router::new().route("/_fixture/payment_intents", post(register))
}

async fn retrieve(State(store): State<Arc<Store>>, Path(id): Path<String>) -> Response {
    let Some(intent) = store.payment_intent(&id) else {
        return ApiError::not_found(Some("id"), format!("No such payment_intent: '{id}'"))
            .into_response();
    };
    let refunded: i64 = store
        .refunds()
        .iter()
        .filter(|r| r.payment_intent == id)
        .map(|r| r.amount)
        .sum();
    json_response(
        StatusCode::OK,
        &json!({
            "id": intent.id,
            "object": "payment_intent",
            "amount": intent.amount,
            "amount_received": intent.amount,
            "amount_refunded": refunded,
            "currency": intent.currency,
            "status": "succeeded",
        }),
    )
}

async fn register(State(store): State<Arc<Store>>, body: Bytes) -> Response {
    let intent: PaymentIntent = match serde_json::from_slice(&body) {
        Ok(intent) => intent,
        Err(e) => {
            return ApiError::bad_request(format!(
                "Invalid payment intent ({e}); expected {{\"id\": \"pi_...\", \"amount\": N, \"currency\": \"usd\"}}"
            ))
            .into_response()
        }
    };
    if !intent.id.starts_with("pi_") || intent.amount <= 0 {
        return ApiError::bad_request("id must start with pi_ and amount must be positive")
            .into_response();
    }
    store.register_payment_intent(intent.clone());
    json_response(
        StatusCode::OK,
        &json!({"id": intent.id, "amount": intent.amount, "currency": intent.currency}),
    )
}
