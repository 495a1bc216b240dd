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
