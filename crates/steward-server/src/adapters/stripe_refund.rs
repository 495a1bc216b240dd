//! The `stripe.refund` adapter: typed input in, a Stripe refund request out, with a provider
//! `Idempotency-Key` derived from the effect id so that any repeat is the same refund to Stripe.
//! Its lookup lists the payment intent's refunds and looks for the key Steward sent (the
//! refund's `metadata[steward_idempotency_key]`).

use super::{Adapter, Reading};
use crate::dispatch::prepared::{Blocked, OpenedSecret, Prepared, PreparedBody};
use crate::reconcile::lookup::{self, Finding};
use crate::state::AppState;
use reqwest::header::HeaderMap;
use serde_json::Value;
use steward_core::impact::{Quantity, MONEY, RESOURCE_MUTATIONS};
use steward_core::{AdapterSpec, EffectId, FieldError, InvocationId, Placement};
use steward_store::InvocationRecord;

/// Stripe's public API, used unless the action's config names another base URL.
pub const STRIPE_BASE_URL: &str = "https://api.stripe.com";
/// Stripe keeps an idempotency key for 24 hours, in milliseconds; after that the same key could
/// create a second refund, so a replay is refused.
pub const STRIPE_IDEMPOTENCY_WINDOW_MS: i64 = 24 * 3600 * 1000;
/// The most refunds one lookup reads for a payment intent; Stripe's own page maximum.
const STRIPE_LIST_LIMIT: u32 = 100;

pub struct StripeRefund;

fn base_url(adapter: &AdapterSpec) -> &str {
    adapter
        .config
        .get("baseUrl")
        .and_then(Value::as_str)
        .unwrap_or(STRIPE_BASE_URL)
}

fn currency(adapter: &AdapterSpec, input: &Value) -> String {
    input
        .get("currency")
        .or_else(|| adapter.config.get("currency"))
        .and_then(Value::as_str)
        .unwrap_or("usd")
        .to_ascii_lowercase()
}

/// The secret's prefix must match the adapter's mode, so a test action never moves live money.
fn check_mode(adapter: &AdapterSpec, value: &str) -> Result<(), Blocked> {
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

#[async_trait::async_trait]
impl Adapter for StripeRefund {
    fn kind(&self) -> &'static str {
        "stripe.refund"
    }

    fn check_config(&self, config: &Value, _allow_http: bool) -> Result<(), FieldError> {
        match config.get("mode").and_then(Value::as_str) {
            Some("test") | Some("live") => {}
            _ => {
                return Err(FieldError::new(
                    "adapter.config.mode",
                    "must be \"test\" or \"live\"",
                ))
            }
        }
        if let Some(base) = config.get("baseUrl") {
            let ok = base
                .as_str()
                .is_some_and(|b| b.starts_with("https://") || b.starts_with("http://"));
            if !ok {
                return Err(FieldError::new(
                    "adapter.config.baseUrl",
                    "must be an absolute http(s) URL",
                ));
            }
        }
        Ok(())
    }

    fn check_input(&self, _spec: &AdapterSpec, input: &Value) -> Result<(), FieldError> {
        match input.get("paymentIntent") {
            Some(Value::String(s)) if !s.is_empty() => {}
            _ => {
                return Err(FieldError::new(
                    "input.paymentIntent",
                    "is required and must be a non-empty string",
                ))
            }
        }
        match input.get("amount").and_then(Value::as_i64) {
            Some(a) if a > 0 => {}
            _ => {
                return Err(FieldError::new(
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
                return Err(FieldError::new(
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
                return Err(FieldError::new(
                    "input.reason",
                    "must be duplicate, fraudulent or requested_by_customer",
                ));
            }
        }
        Ok(())
    }

    fn provider_key(&self, _spec: &AdapterSpec, effect: &EffectId) -> String {
        format!("steward-{effect}")
    }

    /// A refund moves `input.amount` of money in the input's (else the config's) currency and
    /// is one resource mutation.
    fn impact(&self, spec: &AdapterSpec, input: &Value) -> Vec<Quantity> {
        vec![
            Quantity {
                dimension: MONEY.into(),
                unit: currency(spec, input),
                amount: input
                    .get("amount")
                    .and_then(Value::as_i64)
                    .filter(|a| *a >= 0),
            },
            Quantity {
                dimension: RESOURCE_MUTATIONS.into(),
                unit: RESOURCE_MUTATIONS.into(),
                amount: Some(1),
            },
        ]
    }

    fn replay_window_ms(&self, _spec: &AdapterSpec) -> i64 {
        STRIPE_IDEMPOTENCY_WINDOW_MS
    }

    fn prepare(
        &self,
        spec: &AdapterSpec,
        input: &Value,
        invocation: &InvocationId,
        key: &str,
        credential: OpenedSecret,
    ) -> Result<Prepared, Blocked> {
        check_mode(spec, &credential.value)?;
        credential.allow(Placement::Header)?;
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
        form.append_pair("currency", &currency(spec, input));
        if let Some(reason) = input.get("reason").and_then(Value::as_str) {
            form.append_pair("reason", reason);
        }
        form.append_pair("metadata[steward_invocation_id]", invocation.as_str());
        form.append_pair("metadata[steward_idempotency_key]", key);
        let url = format!("{}/v1/refunds", base_url(spec).trim_end_matches('/'));
        Ok(Prepared {
            method: reqwest::Method::POST,
            url,
            headers: vec![
                (
                    "Authorization".into(),
                    format!("Bearer {}", credential.value),
                ),
                ("Idempotency-Key".into(), key.to_string()),
            ],
            body: Some(PreparedBody::Form(form.finish())),
            secrets: vec![credential],
            adapter: None,
        })
    }

    /// `Stripe-Should-Retry: true` is Stripe's own statement that nothing happened; a 2xx
    /// refund object with `status: succeeded` is its record of the refund.
    fn read_answer(
        &self,
        _spec: &AdapterSpec,
        status: u16,
        headers: &HeaderMap,
        body: &Value,
    ) -> Reading {
        let nothing_happened = headers
            .get("stripe-should-retry")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
        if !(200..300).contains(&status) {
            return Reading {
                nothing_happened,
                ..Reading::default()
            };
        }
        let is_refund = body.get("object").and_then(Value::as_str) == Some("refund");
        Reading {
            nothing_happened,
            confirms: is_refund && body.get("status").and_then(Value::as_str) == Some("succeeded"),
            reference: body.get("id").and_then(Value::as_str).map(str::to_string),
        }
    }

    async fn look_up(
        &self,
        state: &AppState,
        inv: &InvocationRecord,
        spec: &AdapterSpec,
        key: &str,
    ) -> Finding {
        let credential = match lookup::open_credential(state, inv, spec).await {
            Ok(c) => c,
            Err(finding) => return finding,
        };
        let secrets = [credential.value.clone()];
        query(state, inv, spec, key, &credential)
            .await
            .redacted(&secrets)
    }

    /// Reads the payment intent: what was paid and what is already refunded, so the preview can
    /// say whether this refund fits.
    fn write_url(&self, spec: &AdapterSpec) -> Option<(String, &'static str)> {
        Some((base_url(spec).to_string(), "adapter.config.baseUrl"))
    }

    /// A refund changes its payment intent.
    fn resource(&self, spec: &AdapterSpec, input: &Value) -> Option<String> {
        let payment_intent = input.get("paymentIntent").and_then(Value::as_str)?;
        Some(format!(
            "{}/v1/payment_intents/{payment_intent}",
            base_url(spec).trim_end_matches('/')
        ))
    }

    async fn preview_reads(
        &self,
        state: &AppState,
        env: &steward_core::EnvironmentId,
        spec: &AdapterSpec,
        input: &Value,
    ) -> super::PreviewReads {
        read_payment_intent(state, env, spec, input).await
    }
}

/// `GET /v1/payment_intents/{id}` for a preview, under the same destination and credential
/// checks as a dispatch; its preconditions: the intent exists, and the refund fits in what is
/// left of it.
async fn read_payment_intent(
    state: &AppState,
    env: &steward_core::EnvironmentId,
    spec: &AdapterSpec,
    input: &Value,
) -> super::PreviewReads {
    use serde_json::json;
    let payment_intent = input
        .get("paymentIntent")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let amount = input
        .get("amount")
        .and_then(Value::as_i64)
        .unwrap_or_default();
    let path = format!(
        "/v1/payment_intents/{}",
        url::form_urlencoded::byte_serialize(payment_intent.as_bytes()).collect::<String>()
    );
    let unknown = |detail: String| super::PreviewReads {
        reads: vec![json!({"request": format!("GET {path}"), "error": detail})],
        preconditions: vec![
            json!({"name": "payment_intent_exists", "holds": null, "detail": "the provider could not be read"}),
            json!({"name": "amount_refundable", "holds": null, "detail": "the provider could not be read"}),
        ],
    };
    let credential =
        match crate::dispatch::prepared::open_secret(state, env, &spec.credential_secret).await {
            Ok(c) => c,
            Err(blocked) => return unknown(blocked.message),
        };
    if let Err(blocked) = credential.allow(Placement::Header) {
        return unknown(blocked.message);
    }
    let url = format!("{}{path}", base_url(spec).trim_end_matches('/'));
    let authorization = [(
        "Authorization".to_string(),
        format!("Bearer {}", credential.value),
    )];
    let secrets = [credential.value.clone()];
    let looked = match lookup::get(state, &url, &authorization, &credential).await {
        Ok(looked) => looked,
        Err(finding) => return unknown(finding.redacted(&secrets).detail().to_string()),
    };
    let body = looked.body.unwrap_or(Value::Null);
    if looked.status == 404 {
        return super::PreviewReads {
            reads: vec![json!({"request": format!("GET {path}"), "status": 404})],
            preconditions: vec![
                json!({"name": "payment_intent_exists", "holds": false, "detail": format!("the provider has no payment intent {payment_intent}")}),
                json!({"name": "amount_refundable", "holds": false, "detail": "nothing to refund"}),
            ],
        };
    }
    if looked.status != 200 {
        return unknown(format!("the provider answered {}", looked.status));
    }
    let paid = body
        .get("amount")
        .and_then(Value::as_i64)
        .unwrap_or_default();
    let refunded = body
        .get("amount_refunded")
        .and_then(Value::as_i64)
        .unwrap_or_default();
    let left = paid.saturating_sub(refunded);
    super::PreviewReads {
        reads: vec![json!({
            "request": format!("GET {path}"),
            "status": 200,
            "paymentIntent": payment_intent,
            "amount": paid,
            "amountRefunded": refunded,
            "currency": body.get("currency"),
        })],
        preconditions: vec![
            json!({"name": "payment_intent_exists", "holds": true}),
            json!({
                "name": "amount_refundable",
                "holds": amount > 0 && amount <= left,
                "detail": format!("refund {amount} of {left} left ({paid} paid, {refunded} refunded)"),
            }),
        ],
    }
}

/// The lookup itself, once the credential is open and may go in a header.
async fn query(
    state: &AppState,
    inv: &InvocationRecord,
    adapter: &AdapterSpec,
    effect_key: &str,
    credential: &OpenedSecret,
) -> Finding {
    let url = format!("{}/v1/refunds", base_url(adapter).trim_end_matches('/'));
    let payment_intent = inv
        .dispatch_input()
        .get("paymentIntent")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let limit = STRIPE_LIST_LIMIT.to_string();
    let url = match reqwest::Url::parse_with_params(
        &url,
        &[("payment_intent", payment_intent), ("limit", &limit)],
    ) {
        Ok(url) => url.to_string(),
        Err(e) => {
            return Finding::Inconclusive {
                detail: format!("cannot look up: {e}"),
            }
        }
    };
    let authorization = [(
        "Authorization".to_string(),
        format!("Bearer {}", credential.value),
    )];
    let looked = match lookup::get(state, &url, &authorization, credential).await {
        Ok(looked) => looked,
        Err(finding) => return finding,
    };
    let status = looked.status;
    let Some(body) = looked.body else {
        return Finding::Inconclusive {
            detail: format!("lookup answered {status} without a readable body"),
        };
    };
    if status != 200 {
        return Finding::Inconclusive {
            detail: format!("lookup answered {status}"),
        };
    }
    let Some(refunds) = body.get("data").and_then(Value::as_array) else {
        return Finding::Inconclusive {
            detail: "lookup answer has no refund list".into(),
        };
    };
    if body.get("has_more").and_then(Value::as_bool) == Some(true) {
        // A truncated list cannot prove absence.
        if let Some(found) = matching(refunds, effect_key) {
            return found;
        }
        return Finding::Inconclusive {
            detail: format!("more than {STRIPE_LIST_LIMIT} refunds for this payment intent"),
        };
    }
    matching(refunds, effect_key).unwrap_or_else(|| Finding::Absent {
        detail: format!("the provider lists {} refund(s) for this payment intent and none carries this effect's key", refunds.len()),
    })
}

fn matching(refunds: &[Value], effect_key: &str) -> Option<Finding> {
    let refund = refunds.iter().find(|r| {
        r.pointer("/metadata/steward_idempotency_key")
            .and_then(Value::as_str)
            == Some(effect_key)
    })?;
    let reference = refund.get("id").and_then(Value::as_str).map(str::to_string);
    let status = refund
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    let detail = format!(
        "the provider has refund {} with status {status}",
        reference.as_deref().unwrap_or("?")
    );
    Some(match status {
        "succeeded" => Finding::Found {
            confirmed: true,
            reference,
            detail,
        },
        "failed" | "canceled" => Finding::ProviderFailed { reference, detail },
        _ => Finding::Inconclusive { detail },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use steward_core::ActionDefinition;

    fn def(v: Value) -> ActionDefinition {
        serde_json::from_value(v).unwrap()
    }

    /// Moved from `steward_core::action` with the configuration checks.
    #[test]
    fn validation_names_the_field() {
        let bad = def(
            json!({"name": "x", "adapter": {"type": "stripe.refund", "config": {"mode": "dev"}, "credentialSecret": "K"}}),
        );
        assert!(
            bad.validate().is_ok(),
            "core checks only what adapters share"
        );
        let refused = super::super::check_definition(&bad, false).unwrap_err();
        assert_eq!(refused.field, "adapter.config.mode");
        let ok = def(
            json!({"name": "refund-order", "adapter": {"type": "stripe.refund", "config": {"mode": "test"}, "credentialSecret": "STRIPE_TEST_KEY"}}),
        );
        assert!(ok.validate().is_ok());
        assert!(super::super::check_definition(&ok, false).is_ok());
        assert!(ok.is_governed());
    }

    /// Moved from `steward_core::impact` with the adapter's impact.
    #[test]
    fn a_refund_moves_its_amount_in_its_currency_and_mutates_one_resource() {
        let refund = def(
            json!({"name": "r", "adapter": {"type": "stripe.refund", "config": {"mode": "test", "currency": "EUR"}, "credentialSecret": "K"}}),
        );
        let q = super::super::quantities(&refund, &json!({"paymentIntent": "pi", "amount": 500}));
        assert_eq!(
            q[0],
            Quantity {
                dimension: "money".into(),
                unit: "eur".into(),
                amount: Some(500)
            }
        );
        assert_eq!(
            q[1],
            Quantity {
                dimension: "resource_mutations".into(),
                unit: "resource_mutations".into(),
                amount: Some(1)
            }
        );
        assert_eq!(
            super::super::money_amount(&refund, &json!({"amount": 7, "currency": "usd"})),
            Some(7)
        );
    }

    #[test]
    fn should_retry_says_nothing_happened_and_a_succeeded_refund_confirms() {
        let spec = AdapterSpec {
            kind: "stripe.refund".into(),
            config: json!({"mode": "test"}),
            credential_secret: "K".into(),
        };
        let mut headers = HeaderMap::new();
        headers.insert("stripe-should-retry", "true".parse().unwrap());
        let failed = StripeRefund.read_answer(&spec, 500, &headers, &json!({}));
        assert!(failed.nothing_happened && !failed.confirms);
        let refund = json!({"object": "refund", "status": "succeeded", "id": "re_1"});
        let ok = StripeRefund.read_answer(&spec, 200, &HeaderMap::new(), &refund);
        assert!(ok.confirms && !ok.nothing_happened);
        assert_eq!(ok.reference.as_deref(), Some("re_1"));
        let pending = json!({"object": "refund", "status": "pending", "id": "re_2"});
        assert!(
            !StripeRefund
                .read_answer(&spec, 200, &HeaderMap::new(), &pending)
                .confirms
        );
    }
}
