//! What an action definition says, on the action and on each of its versions.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use steward_core::{ActionId, AdapterSpec, KeyId, MissingOperationKey};
use utoipa::ToSchema;

/// An action or one of its versions, in one of two views: the full view (keys with
/// `actions:write`) carries the wiring (`method`, `urlTemplate`, `headers`, `bodyTemplate`,
/// `adapter`, `verify`); the tool view (an agent choosing a tool) leaves those six out.
///
/// The import's report (`POST /actions/import`) shows definitions not saved yet with this type
/// too; only there are `id`, `version` and `createdAt` absent (the import documents its
/// `action` as an object), so the schema of this type requires them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Action {
    /// The action's `act_` id; on a version, `<actionId>:v<version>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, value_type = String)]
    pub id: Option<String>,
    pub name: String,
    pub description: Option<String>,
    /// Full view only, like the five wiring fields after it; `null` without a URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<String>)]
    pub method: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<String>)]
    pub url_template: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<BTreeMap<String, String>>)]
    pub headers: Option<Option<BTreeMap<String, String>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Any JSON value: a template (an object, a string such as `{{input.body}}`, ...).
    #[schema(required = false, value_type = Option<Value>)]
    pub body_template: Option<Option<Value>>,
    #[schema(value_type = Option<Value>)]
    pub input_schema: Option<Value>,
    pub requires_approval: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub approval_expires_in_seconds: Option<u64>,
    /// `refuse` or `derive`; present only when the definition sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<String>)]
    pub mcp_missing_operation_key: Option<MissingOperationKey>,
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<Object>)]
    pub adapter: Option<Option<AdapterSpec>>,
    #[schema(value_type = Option<Value>)]
    pub impact: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<Value>)]
    pub verify: Option<Option<Value>>,
    pub governed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, value_type = u32)]
    pub version: Option<u32>,
    /// On the action: `<actionId>:v<version>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub version_id: Option<String>,
    /// On a version: the action it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<String>)]
    pub action_id: Option<ActionId>,
    /// On a version: the key that made it (`null`: made by the system).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<String>)]
    pub created_by: Option<Option<KeyId>>,
    /// On a version: the name of the key in `createdBy` (`null`: the system, or a key that is
    /// not one of the environment's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<String>)]
    pub created_by_name: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, value_type = String)]
    pub created_at: Option<String>,
    /// On the action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub updated_at: Option<String>,
}

impl Action {
    /// The tool view: the same action without its wiring.
    pub fn without_wiring(mut self) -> Self {
        self.method = None;
        self.url_template = None;
        self.headers = None;
        self.body_template = None;
        self.adapter = None;
        self.verify = None;
        self
    }
}

/// What an MCP call of a governed action without an operation key does
/// (`mcpMissingOperationKey`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MissingOperationKeyChoice {
    Refuse,
    Derive,
}

/// `POST /actions` and `PATCH /actions/{reference}` (a field left out is unchanged, `null`
/// clears it). The server reads the definition from the body's object itself (a change tells
/// `null` from left out, and the import builds the same object), after refusing any field this
/// type does not describe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActionBody {
    /// Unique in the environment, not starting with `act_`; required on create.
    #[schema(pattern = "^[A-Za-z0-9._-]+$", min_length = 1, max_length = 64)]
    pub name: Option<String>,
    pub description: Option<String>,
    /// The HTTP method of `urlTemplate` (default POST).
    pub method: Option<String>,
    /// The URL called, with `{{input.path}}` placeholders.
    pub url_template: Option<String>,
    pub headers: Option<BTreeMap<String, String>>,
    /// Any JSON value: a template (an object, a string such as `{{input.body}}`, ...).
    #[schema(value_type = Option<Value>)]
    pub body_template: Option<Value>,
    /// A JSON Schema the input must satisfy.
    #[schema(value_type = Option<Object>)]
    pub input_schema: Option<Value>,
    pub requires_approval: Option<bool>,
    /// How long an approval of this action's calls stays open, in seconds (1 to 2592000);
    /// past it the call is `expired` and never runs. Left out: open until decided.
    #[schema(minimum = 1, maximum = 2592000)]
    pub approval_expires_in_seconds: Option<u64>,
    /// What an MCP call of this governed action without an operation key does: `refuse` it, or
    /// `derive` a key from (agent key, action version, input) within the server's window. Left
    /// out: the server's default (`steward serve --mcp-missing-operation-key`).
    pub mcp_missing_operation_key: Option<MissingOperationKeyChoice>,
    pub enabled: Option<bool>,
    /// A built-in adapter (`stripe.refund`, `http.idempotent`) instead of a URL.
    #[schema(value_type = Option<Object>)]
    pub adapter: Option<Value>,
    /// What the action changes, for limits and verification.
    #[schema(value_type = Option<Object>)]
    pub impact: Option<Value>,
    /// How an unknown outcome is checked with the provider.
    #[schema(value_type = Option<Object>)]
    pub verify: Option<Value>,
    pub governed: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::Action;
    use utoipa::PartialSchema;

    /// A template's body, an input schema, an impact declaration and a verify read-back are
    /// whatever JSON the action saved (a body template is often a string such as
    /// `{{input.body}}`): the document must not narrow them to objects, or a client validating
    /// answers (schemathesis did) refuses a correct one.
    #[test]
    fn the_saved_json_fields_of_an_action_are_any_json() {
        let schema = serde_json::to_value(Action::schema()).expect("the schema serializes");
        for field in ["bodyTemplate", "inputSchema", "impact", "verify"] {
            let property = &schema["properties"][field];
            assert!(property.is_object(), "{field} is not described: {schema}");
            assert!(
                property.get("type").is_none(),
                "{field} is narrowed to {}",
                property["type"]
            );
        }
    }
}
