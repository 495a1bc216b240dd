//! The `stripe.refund` adapter: typed input in, a Stripe refund request out, with a provider
//! `Idempotency-Key` derived from the effect id so that any repeat is the same refund to Stripe.

use super::prepare::{Blocked, OpenedSecret, Prepared, PreparedBody};
use crate::error::ApiError;
use serde_json::Value;
use steward_core::{AdapterSpec, InvocationId, Placement};

/// Stripe's public API, used unless the action's config names another base URL.
pub const STRIPE_BASE_URL: &str = "https://api.stripe.com";

/// Checks the invoke input before anything is recorded; errors name the field.
pub fn check_input(input: &Value) -> Result<(), ApiError> {
    match input.get("paymentIntent") {
        Some(Value::String(s)) if !s.is_empty() => {}
        _ => {
            return Err(ApiError::validation(
                "input.paymentIntent",
                "is required and must be a non-empty string",
            ))
        }
    }
    match input.get("amount").and_then(Value::as_i64) {
        Some(a) if a > 0 => {}
        _ => {
            return Err(ApiError::validation(
                "input.amount",
                "is required and must be a positive integer (minor units)",
            ))
        }
    }
    if let Some(c) = input.get("currency") {
        if !c
            .as_str()
            .is_some_and(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_alphabetic()))
        {
            return Err(ApiError::validation(
                "input.currency",
                "must be a three-letter ISO currency code",
            ));
        }
    }
    if let Some(r) = input.get("reason") {
        if !matches!(
            r.as_str(),
            Some("duplicate" | "fraudulent" | "requested_by_customer")
        ) {
            return Err(ApiError::validation(
                "input.reason",
                "must be duplicate, fraudulent or requested_by_customer",
            ));
        }
    }
    Ok(())
}

/// The secret's prefix must match the adapter's mode, so a test action never moves live money.
pub fn check_mode(adapter: &AdapterSpec, value: &str) -> Result<(), Blocked> {
    let mode = adapter
        .config
        .get("mode")
        .and_then(Value::as_str)
        .unwrap_or("");
    let ok = match mode {
        "test" => value.starts_with("sk_test_") || value.starts_with("rk_test_"),
        "live" => value.starts_with("sk_live_") || value.starts_with("rk_live_"),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(Blocked::new(
            "credential_mode_mismatch",
            format!(
                "secret {} does not hold a {mode}-mode Stripe key",
                adapter.credential_secret
            ),
        ))
    }
}

pub fn build(
    adapter: &AdapterSpec,
    input: &Value,
    invocation: &InvocationId,
    effect_key: &str,
    credential: OpenedSecret,
) -> Result<Prepared, Blocked> {
    check_mode(adapter, &credential.value)?;
    credential.allow(Placement::Header)?;
    let base = adapter
        .config
        .get("baseUrl")
        .and_then(Value::as_str)
        .unwrap_or(STRIPE_BASE_URL);
    let currency = input
        .get("currency")
        .or_else(|| adapter.config.get("currency"))
        .and_then(Value::as_str)
        .unwrap_or("usd")
        .to_ascii_lowercase();
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    form.append_pair(
        "payment_intent",
        input
            .get("paymentIntent")
            .and_then(Value::as_str)
            .unwrap_or_default(),
    );
    form.append_pair(
        "amount",
        &input
            .get("amount")
            .and_then(Value::as_i64)
            .unwrap_or_default()
            .to_string(),
    );
    form.append_pair("currency", &currency);
    if let Some(reason) = input.get("reason").and_then(Value::as_str) {
        form.append_pair("reason", reason);
    }
    form.append_pair("metadata[steward_invocation_id]", invocation.as_str());
    form.append_pair("metadata[steward_idempotency_key]", effect_key);
    let url = format!("{}/v1/refunds", base.trim_end_matches('/'));
    Ok(Prepared {
        method: reqwest::Method::POST,
        url,
        headers: vec![
            (
                "Authorization".into(),
                format!("Bearer {}", credential.value),
            ),
            ("Idempotency-Key".into(), effect_key.to_string()),
        ],
        body: Some(PreparedBody::Form(form.finish())),
        secrets: vec![credential],
        stripe: true,
    })
}
