//! Adapters: provider integrations behind one seam.
//!
//! An adapter action names a `type` (`stripe.refund`, `http.idempotent`) instead of a URL
//! template. Everything that type means lives in one module here, behind [`Adapter`]: which
//! configurations it accepts when the action is saved, which inputs it accepts before anything is
//! recorded, the provider idempotency key it sends, the impact one call implies, the request it
//! builds, what the provider's answer says, the read-only lookup that settles an `unknown`
//! effect, and how long the provider keeps its idempotency keys (the replay window). The
//! dispatcher, the reconciler and the API call the functions below and never name an adapter.
//!
//! Adding an adapter is one new module and one line in [`REGISTRY`].

mod http_idempotent;
mod stripe_refund;

use crate::dispatch::prepared::{Blocked, OpenedSecret, Prepared};
use crate::reconcile::lookup::Finding;
use crate::state::AppState;
use reqwest::header::HeaderMap;
use serde_json::Value;
use steward_core::impact::{Quantity, MONEY};
use steward_core::{
    ActionDefinition, AdapterSpec, EffectId, EnvironmentId, FieldError, InvocationId,
};
use steward_store::InvocationRecord;

/// A replay must start at least this long before its adapter's replay window closes, in
/// milliseconds, so that it cannot land after the provider has forgotten the key (one dispatch
/// deadline plus a wide margin).
pub const REPLAY_WINDOW_MARGIN_MS: i64 = 3600 * 1000;

/// What a provider's answer says beyond its status, as the adapter reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    /// The provider said explicitly that nothing happened and a retry is safe.
    pub nothing_happened: bool,
    /// For a 2xx: the answer is the provider's own record of the completed write.
    pub confirms: bool,
    /// The provider's id for the write, when the answer names one.
    pub reference: Option<String>,
}

/// One provider integration. Every method but [`Adapter::look_up`] is pure.
#[async_trait::async_trait]
pub trait Adapter: Send + Sync {
    /// The `type` an action names it by.
    fn kind(&self) -> &'static str;

    /// Checks `adapter.config` when the action is saved; the error names the field
    /// (`adapter.config.<name>`). `allow_http`: the server allows insecure destinations.
    fn check_config(&self, config: &Value, allow_http: bool) -> Result<(), FieldError>;

    /// Checks the invoke input before anything is recorded; the error names the field
    /// (`input.<name>`).
    fn check_input(&self, spec: &AdapterSpec, input: &Value) -> Result<(), FieldError>;

    /// The provider idempotency key of `effect`: the same for every attempt, ever.
    fn provider_key(&self, spec: &AdapterSpec, effect: &EffectId) -> String;

    /// The quantities one call with `input` changes, for impact limits and policies.
    fn impact(&self, spec: &AdapterSpec, input: &Value) -> Vec<Quantity>;

    /// The URL of what one call with `input` changes, for limits narrowed by `resourcePrefix`;
    /// `None` when it cannot be told (the limit then counts the call).
    fn resource(&self, _spec: &AdapterSpec, _input: &Value) -> Option<String> {
        None
    }

    /// The URL a write of the action goes to as saved (its path may still be filled in from the
    /// input), and the config field that holds it: what a save checks the credential's
    /// `allowedHosts` against (`app/warnings.rs`). `None` when the config does not tell.
    fn write_url(&self, _spec: &AdapterSpec) -> Option<(String, &'static str)> {
        None
    }

    /// How long the provider keeps an idempotency key, in milliseconds: a replay under the same
    /// key is safe only inside it.
    fn replay_window_ms(&self, spec: &AdapterSpec) -> i64;

    /// Builds the request of one attempt under the provider key `key`, with the action's
    /// credential. `Err` means it must not be sent.
    fn prepare(
        &self,
        spec: &AdapterSpec,
        input: &Value,
        invocation: &InvocationId,
        key: &str,
        credential: OpenedSecret,
    ) -> Result<Prepared, Blocked>;

    /// Reads an answer: its status, headers and body (JSON, or the text as a string).
    fn read_answer(
        &self,
        spec: &AdapterSpec,
        status: u16,
        headers: &HeaderMap,
        body: &Value,
    ) -> Reading;

    /// Looks the write up at the provider by the key Steward sent, read-only.
    async fn look_up(
        &self,
        state: &AppState,
        inv: &InvocationRecord,
        spec: &AdapterSpec,
        key: &str,
    ) -> Finding;

    /// What a preview reads from the provider before the call, read-only, and the
    /// preconditions it checks on what it read. By default an adapter reads nothing.
    async fn preview_reads(
        &self,
        _state: &AppState,
        _env: &EnvironmentId,
        _spec: &AdapterSpec,
        _input: &Value,
    ) -> PreviewReads {
        PreviewReads::default()
    }
}

/// What a preview read from the provider: each read (what was asked and what it said, never a
/// credential), and each precondition with whether it held (`null`: it could not be told).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct PreviewReads {
    pub reads: Vec<Value>,
    pub preconditions: Vec<Value>,
}

/// The provider reads of a preview of `def` with `input` (nothing for a template action).
pub async fn preview_reads(
    state: &AppState,
    env: &EnvironmentId,
    def: &ActionDefinition,
    input: &Value,
) -> PreviewReads {
    match of(def) {
        Some((adapter, spec)) => adapter.preview_reads(state, env, spec, input).await,
        None => PreviewReads::default(),
    }
}

/// Every adapter this build knows.
const REGISTRY: &[&dyn Adapter] = &[
    &stripe_refund::StripeRefund,
    &http_idempotent::HttpIdempotent,
];

/// The adapter named `kind`.
pub fn find(kind: &str) -> Option<&'static dyn Adapter> {
    REGISTRY.iter().copied().find(|a| a.kind() == kind)
}

/// The adapter of an adapter action, with its spec; `None` for a template action or a type
/// this build does not know.
pub fn of(def: &ActionDefinition) -> Option<(&'static dyn Adapter, &AdapterSpec)> {
    let spec = def.adapter.as_ref()?;
    find(&spec.kind).map(|adapter| (adapter, spec))
}

/// The refusal of a type this build does not know (not echoed: it may be anything).
fn unknown() -> FieldError {
    let known: Vec<&str> = REGISTRY.iter().map(|a| a.kind()).collect();
    FieldError::new(
        "adapter.type",
        format!("unknown adapter; known: {}", known.join(", ")),
    )
}

/// Checks an adapter action's type and configuration when it is saved (after
/// `ActionDefinition::validate`, which checks what every adapter action shares).
pub fn check_definition(def: &ActionDefinition, allow_http: bool) -> Result<(), FieldError> {
    let Some(spec) = &def.adapter else {
        return Ok(());
    };
    let adapter = find(&spec.kind).ok_or_else(unknown)?;
    adapter.check_config(&spec.config, allow_http)
}

/// Checks the invoke input of an adapter action; a template action is checked elsewhere.
pub fn check_input(def: &ActionDefinition, input: &Value) -> Result<(), FieldError> {
    let Some(spec) = &def.adapter else {
        return Ok(());
    };
    let adapter = find(&spec.kind).ok_or_else(unknown)?;
    adapter.check_input(spec, input)
}

/// The provider idempotency key of `effect` under `def`; `None` without provider idempotency.
pub fn provider_key(def: &ActionDefinition, effect: &EffectId) -> Option<String> {
    of(def).map(|(adapter, spec)| adapter.provider_key(spec, effect))
}

/// How long the provider keeps `def`'s idempotency keys, in milliseconds; `None` without
/// provider idempotency (no replay is ever safe).
pub fn replay_window_ms(def: &ActionDefinition) -> Option<i64> {
    of(def).map(|(adapter, spec)| adapter.replay_window_ms(spec))
}

/// The quantities one invocation of `def` with `input` carries: its adapter's, or what a
/// template action declares (`steward_core::impact::quantities`).
pub fn quantities(def: &ActionDefinition, input: &Value) -> Vec<Quantity> {
    match of(def) {
        Some((adapter, spec)) => adapter.impact(spec, input),
        None => steward_core::impact::quantities(def, input),
    }
}

/// What one invocation of `def` with `input` changes, as a URL: the adapter's, or a template
/// action's URL rendered over the input (none when it names a secret).
pub fn resource(def: &ActionDefinition, input: &Value) -> Option<String> {
    match of(def) {
        Some((adapter, spec)) => adapter.resource(spec, input),
        None => steward_core::render(def, input, &Default::default())
            .ok()
            .map(|r| r.url),
    }
}

/// The request's money amount, for policies' `minAmount`: the first money quantity.
pub fn money_amount(def: &ActionDefinition, input: &Value) -> Option<i64> {
    quantities(def, input)
        .into_iter()
        .find(|q| q.dimension == MONEY)
        .and_then(|q| q.amount)
}

/// What an answer says under `def`'s adapter; a template action's answer says nothing more
/// than its status.
pub fn read_answer(
    adapter: Option<(&'static dyn Adapter, &AdapterSpec)>,
    status: u16,
    headers: &HeaderMap,
    body: &Value,
) -> Reading {
    match adapter {
        Some((adapter, spec)) => adapter.read_answer(spec, status, headers, body),
        None => Reading::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_adapter_is_found_by_its_kind_once() {
        for adapter in REGISTRY {
            let found = find(adapter.kind()).expect("registered");
            assert_eq!(found.kind(), adapter.kind());
            let same = REGISTRY.iter().filter(|a| a.kind() == adapter.kind());
            assert_eq!(same.count(), 1, "{} is registered twice", adapter.kind());
        }
        assert!(find("stripe.charge").is_none());
    }

    #[test]
    fn an_unknown_type_is_refused_naming_the_field_and_the_known_ones() {
        let def: ActionDefinition = serde_json::from_value(serde_json::json!({
            "name": "x", "adapter": {"type": "stripe.charge", "config": {}, "credentialSecret": "K"}
        }))
        .unwrap();
        let refused = check_definition(&def, false).unwrap_err();
        assert_eq!(refused.field, "adapter.type");
        assert!(refused.message.contains("stripe.refund"), "{refused}");
        assert!(refused.message.contains("http.idempotent"), "{refused}");
        assert!(provider_key(&def, &EffectId::from_unique("01J")).is_none());
    }
}
