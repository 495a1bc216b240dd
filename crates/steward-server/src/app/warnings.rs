//! What a request was allowed to do that its sender may not have meant: answered beside the
//! record (`warnings` in the envelope, `api/warnings.rs`), never a refusal.
//!
//! - An invoke of a governed action with neither an `operationKey` nor an `Idempotency-Key`
//!   ([`Warning::NoRequestKey`]): nothing tells a resend from new work, so a client that retries
//!   after a lost answer makes a second provider write. An environment whose `unkeyedInvokes`
//!   is `refuse` refuses such an invoke instead (`app/invoke.rs`).
//! - An action saved with a credential that cannot reach where it calls
//!   ([`credential_reach`]): every invoke would then be `failed` with
//!   `secret_host_not_allowed`, which is better said when the action is saved.

use crate::state::AppState;
use reqwest::Url;
use steward_core::{host_allowed, ActionDefinition, Destination, EnvironmentId, Placement};
use steward_store::secrets_named_by;

/// One warning, as the front ends render it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// A governed invoke with neither an operation key nor an `Idempotency-Key`.
    NoRequestKey,
    /// The action's secret `secret` has `allowedHosts` that do not take `destination`.
    CredentialHostNotAllowed {
        secret: String,
        destination: String,
        field: &'static str,
    },
    /// The action names secret `secret`, which the environment does not hold.
    CredentialMissing { secret: String, field: &'static str },
}

impl Warning {
    /// The stable code a client matches on.
    pub fn code(&self) -> &'static str {
        match self {
            Warning::NoRequestKey => "no_request_key",
            Warning::CredentialHostNotAllowed { .. } => "credential_host_not_allowed",
            Warning::CredentialMissing { .. } => "credential_missing",
        }
    }

    /// What it means and what to do, for people.
    pub fn message(&self) -> String {
        match self {
            Warning::NoRequestKey => "this governed invoke carried neither an operationKey nor an \
                 Idempotency-Key: a resend after a lost answer would be a second write. Send an \
                 operationKey (or an Idempotency-Key) with every governed invoke"
                .to_string(),
            Warning::CredentialHostNotAllowed {
                secret,
                destination,
                ..
            } => format!(
                "secret {secret} may not be sent to {destination} (its allowedHosts do not take \
                 it): every invoke of this action will fail with secret_host_not_allowed until \
                 the action's URL or the secret's allowedHosts change"
            ),
            Warning::CredentialMissing { secret, .. } => format!(
                "secret {secret} does not exist in this environment yet: invokes fail until it \
                 is created"
            ),
        }
    }

    /// The request field it is about.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Warning::NoRequestKey => Some("operationKey"),
            Warning::CredentialHostNotAllowed { field, .. }
            | Warning::CredentialMissing { field, .. } => Some(field),
        }
    }
}

/// Where every request of `def` goes, as saved, and the field that says so: an adapter's base
/// URL, or a template action's `urlTemplate` when its scheme and host are fixed. `None` when
/// only the input tells.
pub(crate) fn destination(def: &ActionDefinition) -> Option<(Destination, &'static str)> {
    let (url, field) = match crate::adapters::of(def) {
        Some((adapter, spec)) => adapter.write_url(spec)?,
        None => (def.url_template.clone()?, "urlTemplate"),
    };
    let authority = url.split("://").nth(1)?.split('/').next()?;
    if authority.contains("{{") {
        return None;
    }
    let parsed = Url::parse(&url).ok()?;
    let host = parsed.host_str()?.trim_matches(['[', ']']).to_string();
    let port = parsed.port_or_known_default()?;
    Some((Destination::new(parsed.scheme(), &host, port)?, field))
}

/// The field that names secret `name` in `def`: the adapter's credential, or the template
/// part that places it.
fn secret_field(def: &ActionDefinition, name: &str) -> &'static str {
    if def
        .adapter
        .as_ref()
        .is_some_and(|spec| spec.credential_secret == name)
    {
        return "adapter.credentialSecret";
    }
    let placed = steward_core::secret_references(def)
        .unwrap_or_default()
        .into_iter()
        .find_map(|(n, placement)| (n == name).then_some(placement));
    match placed {
        Some(Placement::Header) => "headers",
        Some(Placement::Body) => "bodyTemplate",
        Some(Placement::Url) | None => "urlTemplate",
    }
}

/// The warnings of saving `def` in `env`: each secret it names that does not exist, and each
/// whose `allowedHosts` do not take the action's destination. Reads the secrets; a read that
/// fails warns of nothing (the save itself does not depend on it).
pub async fn credential_reach(
    state: &AppState,
    env: &EnvironmentId,
    def: &ActionDefinition,
) -> Vec<Warning> {
    let destination = destination(def);
    let mut warnings = Vec::new();
    for name in secrets_named_by(def) {
        match state.store.secret(env, &name).await {
            Ok(None) => warnings.push(Warning::CredentialMissing {
                field: secret_field(def, &name),
                secret: name,
            }),
            Ok(Some(secret)) => {
                let (Some((to, url_field)), Some(allowed)) = (&destination, &secret.allowed_hosts)
                else {
                    continue;
                };
                if !host_allowed(allowed, to) {
                    warnings.push(Warning::CredentialHostNotAllowed {
                        secret: name,
                        destination: to.to_string(),
                        field: url_field,
                    });
                }
            }
            Err(e) => tracing::warn!(error = %e, "reading an action's secrets for its warnings"),
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn definition(value: serde_json::Value) -> ActionDefinition {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn an_actions_destination_is_its_adapters_url_or_its_fixed_template_host() {
        let stripe = definition(json!({"name": "r", "adapter": {"type": "stripe.refund",
            "config": {"mode": "test"}, "credentialSecret": "K"}}));
        let (to, field) = destination(&stripe).unwrap();
        assert_eq!(
            (to.to_string(), field),
            (
                "https://api.stripe.com:443".to_string(),
                "adapter.config.baseUrl"
            )
        );
        let fixed = definition(json!({"name": "t", "method": "POST",
            "urlTemplate": "http://127.0.0.1:9999/v1/{{input.id}}"}));
        let (to, field) = destination(&fixed).unwrap();
        assert_eq!(
            (to.to_string(), field),
            ("http://127.0.0.1:9999".to_string(), "urlTemplate")
        );
        let from_input = definition(json!({"name": "t", "method": "GET",
            "urlTemplate": "https://{{input.host}}/v1"}));
        assert_eq!(
            destination(&from_input),
            None,
            "only the invoke knows the host"
        );
    }

    #[test]
    fn a_secret_is_named_by_the_field_that_places_it() {
        let def = definition(json!({"name": "t", "method": "POST",
            "urlTemplate": "https://api.example.com/{{secret:IN_URL}}",
            "headers": {"Authorization": "Bearer {{secret:IN_HEADER}}"}}));
        assert_eq!(secret_field(&def, "IN_URL"), "urlTemplate");
        assert_eq!(secret_field(&def, "IN_HEADER"), "headers");
        let adapter = definition(json!({"name": "r", "adapter": {"type": "stripe.refund",
            "config": {}, "credentialSecret": "K"}}));
        assert_eq!(secret_field(&adapter, "K"), "adapter.credentialSecret");
    }

    #[test]
    fn every_warning_has_a_code_a_message_and_a_field() {
        let all = [
            Warning::NoRequestKey,
            Warning::CredentialHostNotAllowed {
                secret: "K".into(),
                destination: "https://x:443".into(),
                field: "urlTemplate",
            },
            Warning::CredentialMissing {
                secret: "K".into(),
                field: "adapter.credentialSecret",
            },
        ];
        for warning in all {
            assert!(!warning.code().is_empty() && !warning.message().is_empty());
            assert!(warning.field().is_some(), "{warning:?}");
        }
    }
}
