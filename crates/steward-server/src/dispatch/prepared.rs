//! What a prepared request is, and what stops one: the types the dispatcher, the adapters and the
//! reconciler share, and opening a secret for a request. Nothing here knows an adapter, so the
//! adapters can name these types without importing the dispatcher that calls them.

use crate::state::AppState;
use serde_json::{json, Value};
use steward_core::{host_allowed, AdapterSpec, Destination, EnvironmentId, Placement, Redactor};
use steward_store::SecretRecord;

pub use super::blocked::Blocked;

/// A decrypted secret with its destination policy. Its value goes only into the request.
pub struct OpenedSecret {
    pub name: String,
    pub value: String,
    allowed_hosts: Option<Vec<String>>,
    allowed_placements: Option<Vec<String>>,
    /// True when the secret is a connected OAuth account and `value` its access token
    /// (`oauth/`): a `401` answer then earns one refresh and one more send.
    pub oauth: bool,
}

impl OpenedSecret {
    /// A secret with no host or placement restriction, for unit tests of request building.
    #[cfg(test)]
    pub fn for_test(name: &str, value: &str) -> Self {
        Self {
            name: name.to_string(),
            value: value.to_string(),
            allowed_hosts: None,
            allowed_placements: None,
            oauth: false,
        }
    }

    pub fn allow(&self, placement: Placement) -> Result<(), Blocked> {
        let name = match placement {
            Placement::Url => "url",
            Placement::Header => "header",
            Placement::Body => "body",
        };
        match &self.allowed_placements {
            Some(list) if !list.iter().any(|p| p == name) => Err(Blocked::new(
                "secret_placement_not_allowed",
                format!(
                    "secret {} may not be placed in the request {name}",
                    self.name
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Scheme, host and port must be allowed by one of the secret's `allowedHosts`.
    pub fn allow_host(&self, destination: &Destination) -> Result<(), Blocked> {
        match &self.allowed_hosts {
            Some(list) if !host_allowed(list, destination) => Err(Blocked::new(
                "secret_host_not_allowed",
                format!("secret {} may not be sent to {destination}", self.name),
            )),
            _ => Ok(()),
        }
    }
}

pub enum PreparedBody {
    Json(Value),
    Form(String),
}

pub struct Prepared {
    pub method: reqwest::Method,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<PreparedBody>,
    pub secrets: Vec<OpenedSecret>,
    /// The adapter that reads the answer (`Adapter::read_answer`, found by its kind with
    /// `adapters::find`); `None` for a template action.
    pub adapter: Option<AdapterSpec>,
}

impl Prepared {
    pub fn secret_values(&self) -> Vec<String> {
        self.secrets.iter().map(|s| s.value.clone()).collect()
    }

    /// The request as it is sent, with every secret value it carries replaced by
    /// `steward_core::REDACTED`: `{"method", "url", "headers": [{"name", "value"}], "body"}`,
    /// headers in the order sent, a JSON body as its value, a form body as its text, no body as
    /// `null`. What a preview shows, and what a receipt's request digest covers
    /// ([`Prepared::scrubbed_digest`]).
    pub fn scrubbed_view(&self) -> Value {
        let redactor = Redactor::new(&self.secret_values());
        let text = |s: &str| redactor.text(s);
        let headers: Vec<Value> = self
            .headers
            .iter()
            .map(|(name, value)| json!({"name": name, "value": text(value)}))
            .collect();
        let body = match &self.body {
            None => Value::Null,
            Some(PreparedBody::Json(v)) => redactor.json(v),
            Some(PreparedBody::Form(f)) => Value::String(text(f)),
        };
        json!({
            "method": self.method.as_str(),
            "url": text(&self.url),
            "headers": headers,
            "body": body,
        })
    }

    /// The digest a receipt names the request by: `sha256:` and the hex SHA-256 of the RFC 8785
    /// bytes of [`Prepared::scrubbed_view`] (`docs/RECEIPTS.md`).
    pub fn scrubbed_digest(&self) -> String {
        steward_core::receipt::json_digest(&self.scrubbed_view())
    }

    /// The same request with secret `name`'s value replaced by `value` wherever it was placed
    /// (URL, headers, body): a refreshed access token in place of the one the provider refused.
    pub fn with_secret(&self, name: &str, value: &str) -> Prepared {
        let old = self
            .secrets
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.value.clone())
            .unwrap_or_default();
        let swap = |text: &str| {
            if old.is_empty() {
                text.to_string()
            } else {
                text.replace(&old, value)
            }
        };
        Prepared {
            method: self.method.clone(),
            url: swap(&self.url),
            headers: self
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), swap(v)))
                .collect(),
            body: self.body.as_ref().map(|body| match body {
                PreparedBody::Json(json) => PreparedBody::Json(swap_json(json, &swap)),
                PreparedBody::Form(form) => PreparedBody::Form(swap(form)),
            }),
            secrets: self
                .secrets
                .iter()
                .map(|s| OpenedSecret {
                    name: s.name.clone(),
                    value: if s.name == name {
                        value.to_string()
                    } else {
                        s.value.clone()
                    },
                    allowed_hosts: s.allowed_hosts.clone(),
                    allowed_placements: s.allowed_placements.clone(),
                    oauth: s.oauth,
                })
                .collect(),
            adapter: self.adapter.clone(),
        }
    }
}

fn swap_json(value: &Value, swap: &dyn Fn(&str) -> String) -> Value {
    match value {
        Value::String(text) => Value::String(swap(text)),
        Value::Array(items) => Value::Array(items.iter().map(|v| swap_json(v, swap)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), swap_json(v, swap)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Opens secret `name` as read from the store now.
pub async fn open_secret(
    state: &AppState,
    env: &EnvironmentId,
    name: &str,
) -> Result<OpenedSecret, Blocked> {
    open_from(state, env, name, None).await
}

/// Opens secret `name`: from `known` when the caller already read the action's secrets in the
/// same read as the action (`Store::invoke_context`), from the store otherwise.
pub(super) async fn open_from(
    state: &AppState,
    env: &EnvironmentId,
    name: &str,
    known: Option<&[SecretRecord]>,
) -> Result<OpenedSecret, Blocked> {
    let (record, value) = super::secret_value::read_and_open(state, env, name, known).await?;
    // A connected OAuth account's secret holds its token set: the request gets the access
    // token, refreshed first when it is due.
    let (value, oauth) = match crate::oauth::TokenSet::from_value(&value) {
        Some(set) => (
            crate::oauth::account::access_token(state, env, name, &set).await?,
            true,
        ),
        None => (value, false),
    };
    Ok(OpenedSecret {
        name: name.to_string(),
        value,
        allowed_hosts: record.allowed_hosts,
        allowed_placements: record.allowed_placements,
        oauth,
    })
}
