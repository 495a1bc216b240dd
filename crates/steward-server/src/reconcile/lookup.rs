//! Read-only lookups at the provider: what does the provider's own record say about an effect?

use crate::dispatch::prepare::{open_secret, Blocked, OpenedSecret};
use crate::state::AppState;
use serde_json::Value;
use steward_core::{redact, AdapterSpec, Placement};
use steward_store::InvocationRecord;

/// What a lookup found.
#[derive(Debug, Clone, PartialEq)]
pub enum Finding {
    /// The provider has the write. `confirmed` when its record says it completed.
    Found {
        confirmed: bool,
        reference: Option<String>,
        detail: String,
    },
    /// The provider has no record of the write.
    Absent { detail: String },
    /// The provider's record says the write definitively failed.
    ProviderFailed {
        reference: Option<String>,
        detail: String,
    },
    /// The lookup could not decide.
    Inconclusive { detail: String },
}

impl Finding {
    /// The finding with every secret value (in every encoding `redact` covers) scrubbed out of
    /// the provider's text it carries.
    fn redacted(self, secrets: &[String]) -> Finding {
        let text = |s: String| redact(&s, secrets);
        let reference = |r: Option<String>| r.map(text);
        match self {
            Finding::Found {
                confirmed,
                reference: r,
                detail,
            } => Finding::Found {
                confirmed,
                reference: reference(r),
                detail: text(detail),
            },
            Finding::Absent { detail } => Finding::Absent {
                detail: text(detail),
            },
            Finding::ProviderFailed {
                reference: r,
                detail,
            } => Finding::ProviderFailed {
                reference: reference(r),
                detail: text(detail),
            },
            Finding::Inconclusive { detail } => Finding::Inconclusive {
                detail: text(detail),
            },
        }
    }
}

/// The most refunds one lookup reads for a payment intent; Stripe's own page maximum.
const STRIPE_LIST_LIMIT: u32 = 100;

/// Looks a `stripe.refund` effect up by the provider idempotency identity Steward sent (the
/// refund's `metadata[steward_idempotency_key]`), listing the payment intent's refunds.
pub async fn stripe_refund(
    state: &AppState,
    inv: &InvocationRecord,
    adapter: &AdapterSpec,
    effect_key: &str,
) -> Finding {
    let credential = match open_secret(state, &inv.env_id, &adapter.credential_secret).await {
        Ok(c) => c,
        Err(Blocked { message, .. }) => {
            return Finding::Inconclusive {
                detail: format!("cannot look up: {message}"),
            }
        }
    };
    if let Err(b) = credential.allow(Placement::Header) {
        return Finding::Inconclusive {
            detail: format!("cannot look up: {}", b.message),
        };
    }
    let secrets = [credential.value.clone()];
    query(state, inv, adapter, effect_key, &credential)
        .await
        .redacted(&secrets)
}

/// The lookup itself, once the credential is open and may go in a header.
async fn query(
    state: &AppState,
    inv: &InvocationRecord,
    adapter: &AdapterSpec,
    effect_key: &str,
    credential: &OpenedSecret,
) -> Finding {
    let base = adapter
        .config
        .get("baseUrl")
        .and_then(Value::as_str)
        .unwrap_or(crate::dispatch::stripe::STRIPE_BASE_URL);
    let url = format!("{}/v1/refunds", base.trim_end_matches('/'));
    let host = match state.outbound.check(&url).await {
        Ok(h) => h,
        Err(e) => {
            return Finding::Inconclusive {
                detail: format!("cannot look up: {e}"),
            }
        }
    };
    if let Err(b) = credential.allow_host(&host) {
        return Finding::Inconclusive {
            detail: format!("cannot look up: {}", b.message),
        };
    }
    let payment_intent = inv
        .input
        .get("paymentIntent")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let response = state
        .http
        .get(&url)
        .query(&[
            ("payment_intent", payment_intent),
            ("limit", &STRIPE_LIST_LIMIT.to_string()),
        ])
        .bearer_auth(&credential.value)
        .timeout(state.dispatch_timeout)
        .send()
        .await;
    let response = match response {
        Ok(r) => r,
        Err(e) => {
            return Finding::Inconclusive {
                detail: format!("lookup failed: {}", e.without_url()),
            }
        }
    };
    let status = response.status().as_u16();
    let read = crate::dispatch::answer::read_capped(
        response,
        crate::dispatch::answer::PROVIDER_ANSWER_BYTES_MAX,
    )
    .await;
    let body: Value = match read.map(|b| serde_json::from_slice(&b.bytes)) {
        Ok(Ok(b)) => b,
        _ => {
            return Finding::Inconclusive {
                detail: format!("lookup answered {status} without a readable body"),
            }
        }
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
