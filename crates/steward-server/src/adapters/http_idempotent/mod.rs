//! The `http.idempotent` adapter: any provider that deduplicates writes by a request header and
//! can be asked, read-only, what it did under a key.
//!
//! The action's `config` says where to write (`url`, `method`, a JSON `body` template over the
//! input), which header carries the key (`idempotencyHeader`) and how the key is made from the
//! effect id (`keyTemplate`, default `steward-{{effectId}}`), where the credential goes
//! (`credentialHeader`, `credentialPrefix`), how to look a write up by its key (`lookup`: a URL
//! on the same origin, the status that proves absence, match rules on the record), how long the
//! provider keeps its keys (`replayWindowSeconds`) and, optionally, what else one call changes
//! (`impact`, a declaration like a template action's). See `config.rs` for the limits.
//!
//! A 2xx answers the request that carried the key: it grades `confirmed` when the answer passes
//! the lookup's match rules (a rule naming `{{key}}` holds of the answer to that key's request),
//! `acknowledged` otherwise. Any other answer is classified by its status alone.

mod config;

use super::{Adapter, Reading};
use crate::dispatch::prepared::{Blocked, OpenedSecret, Prepared, PreparedBody};
use crate::reconcile::lookup::{self, Finding};
use crate::state::AppState;
use config::{Config, MatchRule, EFFECT_PLACEHOLDER, KEY_PLACEHOLDER};
use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use steward_core::impact::{Quantity, RESOURCE_MUTATIONS};
use steward_core::{
    lookup as value_at, percent_encode, render, ActionDefinition, AdapterSpec, EffectId,
    FieldError, InvocationId, Placement, RenderedRequest, TemplateError,
};
use steward_store::InvocationRecord;

pub struct HttpIdempotent;

/// The configuration of a stored action. It was checked when saved; a version that no longer
/// parses is refused at use as a misconfiguration.
fn config(spec: &AdapterSpec) -> Result<Config, FieldError> {
    Config::parse(&spec.config, true)
}

/// The write as a template action would send it, so that core's renderer fills it in.
fn template(config: &Config, url: &str) -> ActionDefinition {
    serde_json::from_value(json!({
        "name": "http.idempotent",
        "method": config.method,
        "urlTemplate": url,
        "bodyTemplate": config.body,
    }))
    .expect("a template definition is built from checked parts")
}

/// Renders `url` and the body over `input`; without a body template the input is the body.
fn rendered(config: &Config, url: &str, input: &Value) -> Result<RenderedRequest, TemplateError> {
    let mut request = render(&template(config, url), input, &Default::default())?;
    if config.body.is_none() {
        request.body = Some(input.clone());
    }
    Ok(request)
}

/// Whether every rule holds of `record`; `Err` names the first that does not.
fn check_rules(
    rules: &[MatchRule],
    record: &Value,
    key: Option<&str>,
    input: &Value,
) -> Result<(), String> {
    for rule in rules {
        let want = match rule.equals.as_str() {
            Some(KEY_PLACEHOLDER) => match key {
                Some(key) => Value::String(key.to_string()),
                // The answer to the request that carried the key is that key's record.
                None => continue,
            },
            Some(text) => match text
                .strip_prefix("{{input.")
                .and_then(|t| t.strip_suffix("}}"))
            {
                Some(path) => value_at(input, path.trim())
                    .cloned()
                    .ok_or_else(|| format!("{} has nothing to compare with", rule.path))?,
                None => rule.equals.clone(),
            },
            None => rule.equals.clone(),
        };
        match value_at(record, &rule.path) {
            Some(found) if *found == want => {}
            Some(found) => return Err(format!("{} is {found}, not {want}", rule.path)),
            None => return Err(format!("{} is missing", rule.path)),
        }
    }
    Ok(())
}

fn reference(config: &Config, record: &Value) -> Option<String> {
    let path = config.reference_path.as_deref()?;
    value_at(record, path).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
}

#[async_trait::async_trait]
impl Adapter for HttpIdempotent {
    fn kind(&self) -> &'static str {
        "http.idempotent"
    }

    fn check_config(&self, config: &Value, allow_http: bool) -> Result<(), FieldError> {
        Config::parse(config, allow_http).map(|_| ())
    }

    fn write_url(&self, spec: &AdapterSpec) -> Option<(String, &'static str)> {
        Some((config(spec).ok()?.url, "adapter.config.url"))
    }

    /// The URL it writes to, rendered over the input.
    fn resource(&self, spec: &AdapterSpec, input: &Value) -> Option<String> {
        let config = config(spec).ok()?;
        rendered(&config, &config.url, input).ok().map(|r| r.url)
    }

    fn check_input(&self, spec: &AdapterSpec, input: &Value) -> Result<(), FieldError> {
        let config = config(spec)?;
        match rendered(&config, &config.url, input) {
            Ok(_) => Ok(()),
            Err(TemplateError::MissingInput { path }) => Err(FieldError::new(
                format!("input.{path}"),
                "is required by the adapter's template",
            )),
            Err(other) => Err(FieldError::new("input", other.to_string())),
        }
    }

    fn provider_key(&self, spec: &AdapterSpec, effect: &EffectId) -> String {
        let template = config(spec)
            .map(|c| c.key_template)
            .unwrap_or_else(|_| format!("steward-{EFFECT_PLACEHOLDER}"));
        template.replace(EFFECT_PLACEHOLDER, effect.as_str())
    }

    /// One resource mutation per call, and whatever the config's `impact` declares.
    fn impact(&self, spec: &AdapterSpec, input: &Value) -> Vec<Quantity> {
        let mut quantities = vec![Quantity {
            dimension: RESOURCE_MUTATIONS.into(),
            unit: RESOURCE_MUTATIONS.into(),
            amount: Some(1),
        }];
        if let Some(declared) = config(spec).ok().and_then(|c| c.impact) {
            quantities.insert(0, declared.quantity(input));
        }
        quantities
    }

    fn replay_window_ms(&self, spec: &AdapterSpec) -> i64 {
        // A stored config that no longer parses allows no replay at all.
        config(spec).map_or(0, |c| c.replay_window_s.saturating_mul(1000))
    }

    fn prepare(
        &self,
        spec: &AdapterSpec,
        input: &Value,
        _invocation: &InvocationId,
        key: &str,
        credential: OpenedSecret,
    ) -> Result<Prepared, Blocked> {
        let config =
            config(spec).map_err(|e| Blocked::new("adapter_misconfigured", e.to_string()))?;
        credential.allow(Placement::Header)?;
        let request = rendered(&config, &config.url, input)
            .map_err(|e| Blocked::new("template_invalid", e.to_string()))?;
        let method = reqwest::Method::from_bytes(request.method.as_bytes())
            .map_err(|_| Blocked::new("template_invalid", "bad HTTP method"))?;
        Ok(Prepared {
            method,
            url: request.url,
            headers: vec![
                (
                    config.credential_header.clone(),
                    format!("{}{}", config.credential_prefix, credential.value),
                ),
                (config.idempotency_header.clone(), key.to_string()),
            ],
            body: request.body.map(PreparedBody::Json),
            secrets: vec![credential],
            adapter: None,
        })
    }

    fn read_answer(
        &self,
        spec: &AdapterSpec,
        status: u16,
        _headers: &HeaderMap,
        body: &Value,
    ) -> Reading {
        let Ok(config) = config(spec) else {
            return Reading::default();
        };
        if !(200..300).contains(&status) {
            return Reading::default();
        }
        let rules = &config.lookup.rules;
        Reading {
            nothing_happened: false,
            confirms: !rules.is_empty() && check_rules(rules, body, None, &Value::Null).is_ok(),
            reference: reference(&config, body),
        }
    }

    async fn look_up(
        &self,
        state: &AppState,
        inv: &InvocationRecord,
        spec: &AdapterSpec,
        key: &str,
    ) -> Finding {
        let config = match config(spec) {
            Ok(c) => c,
            Err(e) => {
                return Finding::Inconclusive {
                    detail: format!("cannot look up: {e}"),
                }
            }
        };
        let credential = match lookup::open_credential(state, inv, spec).await {
            Ok(c) => c,
            Err(finding) => return finding,
        };
        let secrets = [credential.value.clone()];
        query(state, inv, &config, key, &credential)
            .await
            .redacted(&secrets)
    }
}

/// The lookup itself, once the credential is open and may go in a header.
async fn query(
    state: &AppState,
    inv: &InvocationRecord,
    config: &Config,
    key: &str,
    credential: &OpenedSecret,
) -> Finding {
    let url = config
        .lookup
        .url
        .replace(KEY_PLACEHOLDER, &percent_encode(key));
    let url = match rendered(config, &url, inv.dispatch_input()) {
        Ok(request) => request.url,
        Err(e) => {
            return Finding::Inconclusive {
                detail: format!("cannot look up: {e}"),
            }
        }
    };
    let headers = [(
        config.credential_header.clone(),
        format!("{}{}", config.credential_prefix, credential.value),
    )];
    let looked = match lookup::get(state, &url, &headers, credential).await {
        Ok(looked) => looked,
        Err(finding) => return finding,
    };
    let status = looked.status;
    if status == config.lookup.absent_status {
        return Finding::Absent {
            detail: format!("the provider has no write under key {key} (it answered {status})"),
        };
    }
    if status != 200 {
        return Finding::Inconclusive {
            detail: format!("lookup answered {status}"),
        };
    }
    let Some(record) = looked.body else {
        return Finding::Inconclusive {
            detail: format!("lookup answered {status} without a readable body"),
        };
    };
    match check_rules(
        &config.lookup.rules,
        &record,
        Some(key),
        inv.dispatch_input(),
    ) {
        Ok(()) => Finding::Found {
            // Without rules the record exists, but nothing says the write completed.
            confirmed: !config.lookup.rules.is_empty(),
            reference: reference(config, &record),
            detail: format!("the provider has a write under key {key}"),
        },
        // A record that does not match cannot prove the write never happened.
        Err(why) => Finding::Inconclusive {
            detail: format!("the provider's record under key {key} does not match: {why}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(config: Value) -> AdapterSpec {
        AdapterSpec {
            kind: "http.idempotent".into(),
            config,
            credential_secret: "PROVIDER_KEY".into(),
        }
    }

    fn configured() -> AdapterSpec {
        spec(json!({
            "url": "https://provider.example/orders/{{input.order}}/writes",
            "body": {"amount": "{{input.amount}}", "note": "order {{input.order}}"},
            "idempotencyHeader": "X-Idempotency-Key",
            "keyTemplate": "acme-{{effectId}}",
            "lookup": {
                "url": "https://provider.example/writes/{{key}}",
                "match": [{"path": "key", "equals": "{{key}}"}, {"path": "status", "equals": "succeeded"}]
            },
            "referencePath": "id",
            "replayWindowSeconds": 7200,
            "impact": {"dimension": "money", "unit": "eur", "amount": "input.amount", "bound": "exact"}
        }))
    }

    #[test]
    fn the_key_is_the_template_with_the_effect_id_and_the_same_every_time() {
        let effect = EffectId::from_unique("01JTESTEFFECT");
        let key = HttpIdempotent.provider_key(&configured(), &effect);
        assert_eq!(key, format!("acme-{effect}"));
        assert_eq!(key, HttpIdempotent.provider_key(&configured(), &effect));
    }

    #[test]
    fn the_input_must_hold_what_the_templates_read() {
        let missing = HttpIdempotent
            .check_input(&configured(), &json!({"order": "o1"}))
            .unwrap_err();
        assert_eq!(missing.field, "input.amount");
        assert!(HttpIdempotent
            .check_input(&configured(), &json!({"order": "o1", "amount": 5}))
            .is_ok());
    }

    #[test]
    fn the_window_and_the_impact_come_from_the_config() {
        assert_eq!(HttpIdempotent.replay_window_ms(&configured()), 7_200_000);
        let quantities = HttpIdempotent.impact(&configured(), &json!({"amount": 5}));
        assert_eq!(quantities[0].dimension, "money");
        assert_eq!(quantities[0].amount, Some(5));
        assert_eq!(quantities[1].dimension, RESOURCE_MUTATIONS);
    }

    #[test]
    fn a_2xx_that_passes_the_rules_confirms_and_names_its_reference() {
        let record = json!({"id": "wr_1", "key": "acme-x", "status": "succeeded"});
        let reading = HttpIdempotent.read_answer(&configured(), 200, &HeaderMap::new(), &record);
        assert!(reading.confirms);
        assert_eq!(reading.reference.as_deref(), Some("wr_1"));
        let pending = json!({"id": "wr_2", "status": "pending"});
        assert!(
            !HttpIdempotent
                .read_answer(&configured(), 200, &HeaderMap::new(), &pending)
                .confirms
        );
        assert_eq!(
            HttpIdempotent.read_answer(&configured(), 500, &HeaderMap::new(), &record),
            Reading::default()
        );
    }

    #[test]
    fn the_request_carries_the_key_in_its_header_and_the_rendered_body() {
        let credential = OpenedSecret::for_test("PROVIDER_KEY", "sk_test_generic");
        let inv = InvocationId::from_unique("01JTESTINV");
        let prepared = HttpIdempotent
            .prepare(
                &configured(),
                &json!({"order": "o 1", "amount": 5}),
                &inv,
                "acme-k",
                credential,
            )
            .unwrap();
        assert_eq!(prepared.url, "https://provider.example/orders/o%201/writes");
        assert!(prepared
            .headers
            .contains(&("X-Idempotency-Key".to_string(), "acme-k".to_string())));
        assert!(prepared.headers.contains(&(
            "Authorization".to_string(),
            "Bearer sk_test_generic".to_string()
        )));
        match prepared.body {
            Some(PreparedBody::Json(body)) => {
                assert_eq!(body, json!({"amount": 5, "note": "order o 1"}))
            }
            _ => panic!("a JSON body"),
        }
    }
}
