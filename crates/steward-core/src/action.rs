//! An action's definition: one immutable version of a named hosted tool.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// A provider adapter: Steward builds the request itself from typed input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdapterSpec {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub config: Value,
    pub credential_secret: String,
}

/// One version of an action. Template actions carry `url_template`; adapter actions `adapter`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionDefinition {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub url_template: Option<String>,
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub body_template: Option<Value>,
    #[serde(default)]
    pub input_schema: Option<Value>,
    #[serde(default)]
    pub requires_approval: bool,
    /// How long an approval this action's calls wait for stays open, in seconds; past it the
    /// approval and its invocation are `expired` and nothing runs. None: open until decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_expires_in_seconds: Option<u64>,
    /// What an MCP `tools/call` of this governed action without an operation key does; None:
    /// the server's default (`steward serve --mcp-missing-operation-key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_missing_operation_key: Option<MissingOperationKey>,
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default)]
    pub adapter: Option<AdapterSpec>,
    #[serde(default)]
    pub impact: Option<Value>,
    #[serde(default)]
    pub verify: Option<Value>,
    #[serde(default)]
    pub governed: bool,
}

/// What a governed MCP tool call that carries no operation key (neither the `operationKey`
/// argument nor the `_meta` key) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MissingOperationKey {
    /// Refused with an instruction to call again with a key; nothing is recorded.
    Refuse,
    /// A key is derived from (agent key, action version, canonical input) within a window, and
    /// the result says so: an identical call within the window observes the first one.
    Derive,
}

impl MissingOperationKey {
    pub fn as_str(self) -> &'static str {
        match self {
            MissingOperationKey::Refuse => "refuse",
            MissingOperationKey::Derive => "derive",
        }
    }
}

/// What an environment does with a governed invoke over HTTP that carries neither an
/// `operationKey` nor an `Idempotency-Key`: nothing then tells a resend from new work, so a
/// client's retry after a lost answer is a second provider write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnkeyedInvokes {
    /// Accepted, and the answer carries a warning (the default, as before the setting).
    #[default]
    Accept,
    /// Refused with `operation_key_required`; nothing is recorded.
    Refuse,
}

impl UnkeyedInvokes {
    pub fn as_str(self) -> &'static str {
        match self {
            UnkeyedInvokes::Accept => "accept",
            UnkeyedInvokes::Refuse => "refuse",
        }
    }

    /// The setting a stored name names; `None` for a name this build does not know.
    pub fn parse(name: &str) -> Option<UnkeyedInvokes> {
        match name {
            "accept" => Some(UnkeyedInvokes::Accept),
            "refuse" => Some(UnkeyedInvokes::Refuse),
            _ => None,
        }
    }
}

fn yes() -> bool {
    true
}

/// A definition field that is not acceptable, named the way the client sent it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The longest action name, in bytes.
pub const ACTION_NAME_LEN_MAX: usize = 64;
/// HTTP methods a template action may use.
pub const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];
/// The longest `approvalExpiresInSeconds`, in seconds (30 days, as for a custom request).
pub const APPROVAL_EXPIRY_SECONDS_MAX: u64 = 30 * 24 * 3600;

impl ActionDefinition {
    /// True when the action's input is a JSON object: it declares no input schema, or one whose
    /// `type` is absent or `object`. An action whose schema declares another type (an array, a
    /// string, a list of types) takes any JSON value its schema accepts.
    pub fn takes_object_input(&self) -> bool {
        match &self.input_schema {
            None => true,
            Some(schema) => schema.get("type").is_none_or(|t| t == "object"),
        }
    }

    /// Every invocation of a governed action is a tracked effect with a receipt grade.
    pub fn is_governed(&self) -> bool {
        self.adapter.is_some() || self.impact.is_some() || self.verify.is_some() || self.governed
    }

    pub fn method(&self) -> &str {
        self.method.as_deref().unwrap_or("POST")
    }

    /// The definition with its `impact` declaration in normal form (the unit filled in, a
    /// currency lower-cased). Call after [`ActionDefinition::validate`].
    pub fn normalized(mut self) -> Self {
        if let Some(Ok(declaration)) = self
            .impact
            .as_ref()
            .map(crate::impact::ImpactDeclaration::parse)
        {
            self.impact = Some(declaration.to_value());
        }
        self
    }

    /// Checks the definition as a whole; the error names the offending field.
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_name(&self.name)?;
        if let Some(description) = &self.description {
            crate::check_text("description", description, crate::TextKind::Prose)?;
        }
        match (&self.url_template, &self.adapter) {
            (None, None) => {
                return Err(FieldError::new(
                    "urlTemplate",
                    "an action needs urlTemplate or adapter",
                ))
            }
            (Some(_), Some(_)) => {
                return Err(FieldError::new(
                    "adapter",
                    "an action has urlTemplate or adapter, not both",
                ))
            }
            (Some(url), None) => validate_template_action(self, url)?,
            (None, Some(adapter)) => validate_adapter(self, adapter)?,
        }
        if let Some(impact) = &self.impact {
            crate::impact::ImpactDeclaration::parse(impact)?;
        }
        if let Some(seconds) = self.approval_expires_in_seconds {
            if !(1..=APPROVAL_EXPIRY_SECONDS_MAX).contains(&seconds) {
                return Err(FieldError::new(
                    "approvalExpiresInSeconds",
                    format!("must be between 1 and {APPROVAL_EXPIRY_SECONDS_MAX} seconds"),
                ));
            }
        }
        if let Some(schema) = &self.input_schema {
            if !schema.is_object() {
                return Err(FieldError::new(
                    "inputSchema",
                    "must be a JSON Schema object",
                ));
            }
        }
        Ok(())
    }
}

pub fn validate_name(name: &str) -> Result<(), FieldError> {
    let ok = !name.is_empty()
        && name.len() <= ACTION_NAME_LEN_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && !name.starts_with("act_");
    if ok {
        Ok(())
    } else {
        Err(FieldError::new(
            "name",
            format!("must be 1-{ACTION_NAME_LEN_MAX} characters of A-Z a-z 0-9 - _ . and not start with act_"),
        ))
    }
}

fn validate_template_action(def: &ActionDefinition, url: &str) -> Result<(), FieldError> {
    if !METHODS.contains(&def.method()) {
        return Err(FieldError::new(
            "method",
            format!("must be one of {}", METHODS.join(", ")),
        ));
    }
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(FieldError::new(
            "urlTemplate",
            "must be an absolute http(s) URL",
        ));
    }
    crate::template::check_placeholders(url)
        .map_err(|e| FieldError::new("urlTemplate", e.to_string()))?;
    for (name, value) in def.headers.iter().flatten() {
        crate::template::check_placeholders(value)
            .map_err(|e| FieldError::new(format!("headers.{name}"), e.to_string()))?;
    }
    Ok(())
}

/// What every adapter action shares. Which types exist and what each one's `config` must hold
/// is the server's adapter registry's to say (`steward-server/src/adapters/`): core knows no
/// provider.
fn validate_adapter(def: &ActionDefinition, adapter: &AdapterSpec) -> Result<(), FieldError> {
    if !crate::secret::is_valid_secret_name(&adapter.credential_secret) {
        return Err(FieldError::new(
            "adapter.credentialSecret",
            "must match ^[A-Z0-9_]+$",
        ));
    }
    if def.impact.is_some() || def.verify.is_some() || def.governed {
        return Err(FieldError::new(
            "adapter",
            "an adapter action is always governed and takes no impact, verify or governed",
        ));
    }
    let config = &adapter.config;
    if !config.is_object() {
        return Err(FieldError::new("adapter.config", "must be an object"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> ActionDefinition {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn an_approval_expiry_is_bounded_in_seconds() {
        let with = |s: u64| {
            parse(json!({"name": "x", "urlTemplate": "https://a.example",
                         "approvalExpiresInSeconds": s}))
            .validate()
        };
        assert!(with(1).is_ok());
        assert!(with(APPROVAL_EXPIRY_SECONDS_MAX).is_ok());
        for bad in [0, APPROVAL_EXPIRY_SECONDS_MAX + 1] {
            assert_eq!(with(bad).unwrap_err().field, "approvalExpiresInSeconds");
        }
    }

    #[test]
    fn validation_names_the_field() {
        // An adapter's own configuration (a Stripe mode) is checked by its adapter in the
        // server (`adapters/stripe_refund.rs`); what all adapters share is checked here.
        let bad = parse(
            json!({"name": "x", "adapter": {"type": "stripe.refund", "config": {}, "credentialSecret": "bad name"}}),
        );
        assert_eq!(
            bad.validate().unwrap_err().field,
            "adapter.credentialSecret"
        );
        let bad = parse(
            json!({"name": "x", "adapter": {"type": "stripe.refund", "config": [], "credentialSecret": "K"}}),
        );
        assert_eq!(bad.validate().unwrap_err().field, "adapter.config");
        let bad = parse(json!({"name": "has space", "urlTemplate": "https://a.example"}));
        assert_eq!(bad.validate().unwrap_err().field, "name");
        let bad = parse(json!({"name": "x"}));
        assert_eq!(bad.validate().unwrap_err().field, "urlTemplate");
        let ok = parse(
            json!({"name": "refund-order", "adapter": {"type": "stripe.refund", "config": {"mode": "test"}, "credentialSecret": "STRIPE_TEST_KEY"}}),
        );
        assert!(ok.validate().is_ok());
        assert!(ok.is_governed());
    }
}
