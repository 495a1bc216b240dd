//! The request bodies of approval policies and policy files.
//!
//! A policy body's definition fields are kept as the JSON that was sent, with whether each was
//! sent at all: a PATCH leaves a field that is absent unchanged and clears one sent as `null`,
//! and `steward_core::policy::PolicySpec` checks the values (naming the field, with its own
//! messages) for a create, an edit and a policy file alike. The schema still gives each field
//! its type and bounds.

use crate::request::Text;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// A field's JSON as sent, `null` included: `None` only when the field was left out.
fn as_sent<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// A JSON object, or `null` (read as left out); anything else is refused.
pub(crate) fn json_object<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Map<String, Value>>, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::Null => Ok(None),
        Value::Object(map) => Ok(Some(map)),
        _ => Err(D::Error::custom("must be a JSON object")),
    }
}

/// `POST /approval-policies` and `PATCH /approval-policies/{id}` (on a PATCH, a field left out
/// is unchanged and `null` clears a matcher).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyBody {
    /// Required on create.
    #[serde(
        default,
        deserialize_with = "as_sent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 100)]
    pub name: Option<Value>,
    #[serde(
        default,
        deserialize_with = "as_sent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<crate::MatchKind>)]
    pub match_kind: Option<Value>,
    #[serde(
        default,
        deserialize_with = "as_sent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub match_action_name: Option<Value>,
    #[serde(
        default,
        deserialize_with = "as_sent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub match_agent_id: Option<Value>,
    #[serde(
        default,
        deserialize_with = "as_sent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub match_user_id: Option<Value>,
    #[serde(
        default,
        deserialize_with = "as_sent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Vec<String>>, max_items = 20)]
    pub match_tags: Option<Value>,
    #[serde(
        default,
        deserialize_with = "as_sent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<f64>, minimum = 0)]
    pub min_amount: Option<Value>,
    /// A CEL expression over `input`, `action`, `agentId` and `amount`.
    #[serde(
        default,
        deserialize_with = "as_sent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, max_length = 4096)]
    pub condition: Option<Value>,
    #[serde(
        default,
        deserialize_with = "as_sent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<crate::PolicyEffect>)]
    pub effect: Option<Value>,
    #[serde(
        default,
        deserialize_with = "as_sent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 10)]
    pub required_approvals: Option<Value>,
    #[serde(
        default,
        deserialize_with = "as_sent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<i64>, minimum = -1000000, maximum = 1000000)]
    pub priority: Option<Value>,
    #[serde(
        default,
        deserialize_with = "as_sent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<bool>)]
    pub enabled: Option<Value>,
    #[serde(
        default,
        deserialize_with = "as_sent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<bool>)]
    pub acknowledge_broad_scope: Option<Value>,
    /// A structured condition, compiled to CEL (both must hold when `condition` is set too):
    /// `{all: [...]}`, `{any: [...]}`, `{not: ...}` or `{field, op, value}` with `field`
    /// `input.<name>...`, `amount`, `action` or `agentId` and `op` eq, ne, gt, gte, lt, lte, in,
    /// contains or exists; at most 8 levels and 64 nodes.
    #[serde(
        default,
        deserialize_with = "as_sent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Object>)]
    pub conditions: Option<Value>,
    /// `enforce` (the default: the policy decides) or `shadow` (log-only: evaluated on live
    /// traffic, its would-be decision recorded on the invocation and counted, the call not
    /// affected).
    #[serde(
        default,
        deserialize_with = "as_sent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub mode: Option<Value>,
    /// Recorded on the version this change creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub change_note: Option<Text>,
}

impl PolicyBody {
    /// The definition fields sent (a field sent as `null` is there as `null`), keyed as sent:
    /// what `PolicySpec::from_create` and `PolicySpec::patched` read.
    pub fn fields(&self) -> Map<String, Value> {
        let sent = [
            ("name", &self.name),
            ("matchKind", &self.match_kind),
            ("matchActionName", &self.match_action_name),
            ("matchAgentId", &self.match_agent_id),
            ("matchUserId", &self.match_user_id),
            ("matchTags", &self.match_tags),
            ("minAmount", &self.min_amount),
            ("condition", &self.condition),
            ("effect", &self.effect),
            ("requiredApprovals", &self.required_approvals),
            ("priority", &self.priority),
            ("enabled", &self.enabled),
            ("acknowledgeBroadScope", &self.acknowledge_broad_scope),
            ("conditions", &self.conditions),
            ("mode", &self.mode),
        ];
        sent.into_iter()
            .filter_map(|(field, value)| Some((field.to_string(), value.clone()?)))
            .collect()
    }
}

/// `DELETE /approval-policies/{id}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyDeleteBody {
    /// Recorded on the tombstone.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub change_note: Option<Text>,
}

/// What kind of request `evaluate` (or a policy file's test case) describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    Action,
    Custom,
}

impl<'de> Deserialize<'de> for RequestKind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Text::deserialize(deserializer)?.0.as_str() {
            "action" => Ok(RequestKind::Action),
            "custom" => Ok(RequestKind::Custom),
            _ => Err(D::Error::custom("must be action or custom")),
        }
    }
}

/// `POST /approval-policies/evaluate`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EvaluateBody {
    /// Required (refused as `must be action or custom` when left out).
    #[serde(default)]
    #[schema(value_type = RequestKind, required = true)]
    pub kind: Option<RequestKind>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub action_name: Option<Text>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub agent_id: Option<Text>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub user_id: Option<Text>,
    /// The request's input (default `{}`).
    #[serde(default, deserialize_with = "json_object")]
    #[schema(value_type = Object)]
    pub payload: Option<Map<String, Value>>,
}

/// `POST /approval-policies/files/plan`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyFilePlanBody {
    /// The policy file: YAML or JSON text, `{policies: [...]}` (at most 256 KiB, 200 policies).
    #[serde(default)]
    #[schema(value_type = String, required = true)]
    pub source: Option<Text>,
}

/// `POST /approval-policies/files/apply`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyFileApplyBody {
    /// The same file that was planned.
    #[serde(default)]
    #[schema(value_type = String, required = true)]
    pub source: Option<Text>,
    /// The plan's `digest`: the change is applied only if it still describes it exactly.
    #[serde(default)]
    #[schema(value_type = String, required = true)]
    pub digest: Option<Text>,
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 1000)]
    pub change_note: Option<Text>,
}

/// `POST /approval-policies/files/test`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyFileTestBody {
    #[serde(default)]
    #[schema(value_type = String, required = true)]
    pub source: Option<Text>,
    /// The cases: a list of `{name, kind, actionName, agentId, userId, tags, payload, expect}`
    /// (at most 500), or YAML or JSON text of one.
    #[serde(default)]
    #[schema(value_type = Object, required = true)]
    pub cases: Option<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_policy_body_keeps_what_was_left_out_apart_from_what_was_cleared() {
        let body: PolicyBody =
            serde_json::from_value(json!({"priority": 5, "matchTags": null, "changeNote": "up"}))
                .unwrap();
        assert_eq!(
            Value::Object(body.fields()),
            json!({"priority": 5, "matchTags": null})
        );
        assert_eq!(body.change_note, Some(Text("up".into())));
        let err = serde_json::from_value::<PolicyBody>(json!({"colour": 1})).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }

    /// The body carries exactly the fields `PolicySpec` reads, and `changeNote`; `fields` hands
    /// every one of them on.
    #[test]
    fn a_policy_body_is_the_fields_the_spec_reads() {
        use steward_core::policy::SPEC_FIELDS;
        use utoipa::openapi::{schema::Schema, RefOr};
        use utoipa::PartialSchema;
        let RefOr::T(Schema::Object(schema)) = PolicyBody::schema() else {
            panic!("PolicyBody is an object schema");
        };
        let mut expected: Vec<&str> = SPEC_FIELDS.to_vec();
        expected.push("changeNote");
        expected.sort_unstable();
        let mut properties: Vec<&str> = schema.properties.keys().map(String::as_str).collect();
        properties.sort_unstable();
        assert_eq!(properties, expected);
        let every: Map<String, Value> = SPEC_FIELDS
            .iter()
            .map(|f| (f.to_string(), Value::Null))
            .collect();
        let body: PolicyBody = serde_json::from_value(Value::Object(every.clone())).unwrap();
        assert_eq!(body.fields(), every);
    }

    #[test]
    fn a_request_kind_is_action_or_custom_and_payload_an_object() {
        let body: EvaluateBody =
            serde_json::from_value(json!({"kind": "custom", "payload": null})).unwrap();
        assert_eq!((body.kind, body.payload), (Some(RequestKind::Custom), None));
        let err = serde_json::from_value::<EvaluateBody>(json!({"kind": "maybe"})).unwrap_err();
        assert_eq!(err.to_string(), "must be action or custom");
        let err = serde_json::from_value::<EvaluateBody>(json!({"kind": 3})).unwrap_err();
        assert_eq!(err.to_string(), "must be a string");
        let err = serde_json::from_value::<EvaluateBody>(json!({"payload": [1]})).unwrap_err();
        assert_eq!(err.to_string(), "must be a JSON object");
    }
}
