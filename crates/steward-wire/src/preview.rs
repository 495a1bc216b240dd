//! Execution-bound previews: what an invoke would send, read from the provider before it; and
//! the bodies that ask for one.

use crate::policy_body::json_object;
use crate::request::Text;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use steward_core::{ActionId, EffectId, PreviewId};
use utoipa::ToSchema;

/// The longest a preview may live, in seconds: what it read goes stale. Part of the contract
/// (the bodies refuse more), so it is here; the server's previews use it.
pub const PREVIEW_TTL_MAX_S: u64 = 3600;

/// An execution-bound preview.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Preview {
    #[schema(value_type = String, pattern = "^prv_")]
    pub id: PreviewId,
    #[schema(value_type = String)]
    pub action_id: ActionId,
    pub action: String,
    pub action_version: u32,
    /// The input the invoke will carry: any JSON object.
    #[schema(value_type = Object)]
    pub input: Value,
    pub run_id: Option<String>,
    /// `active`, `expired`, `superseded` (refreshed) or `used` (bound to an invocation).
    pub status: String,
    pub created_at: String,
    pub expires_at: String,
    pub ttl_seconds: u64,
    /// The preview this one refreshed.
    #[schema(value_type = Option<String>)]
    pub refreshes: Option<PreviewId>,
    /// The preview that refreshed this one.
    #[schema(value_type = Option<String>)]
    pub superseded_by: Option<PreviewId>,
    /// The effect bound to it.
    #[schema(value_type = Option<String>)]
    pub effect_id: Option<EffectId>,
    /// The exact request: method, URL, headers and body, secrets redacted, per-invoke ids as
    /// placeholders.
    #[schema(value_type = Object)]
    pub request: Value,
    /// What was read from the provider, read-only.
    #[schema(value_type = Vec<Object>)]
    pub reads: Vec<Value>,
    /// Each precondition and whether it held (`null`: could not be told).
    #[schema(value_type = Vec<Object>)]
    pub preconditions: Vec<Value>,
    /// Each applicable impact limit: the amount, the limit, what is used and whether it fits.
    #[schema(value_type = Vec<Object>)]
    pub impact: Vec<Value>,
    #[schema(value_type = Object)]
    pub guarantees: Value,
}

/// A preview's life in seconds: a whole number from 1 to [`PREVIEW_TTL_MAX_S`], or `null` for
/// the default.
fn ttl_seconds<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::Null => Ok(None),
        value => value
            .as_u64()
            .filter(|s| (1..=PREVIEW_TTL_MAX_S).contains(s))
            .map(Some)
            .ok_or_else(|| {
                D::Error::custom(format!(
                    "must be a whole number of seconds from 1 to {PREVIEW_TTL_MAX_S}"
                ))
            }),
    }
}

/// `POST /actions/{reference}/previews`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreviewBody {
    /// The input the invoke will carry (default `{}`).
    #[serde(default, deserialize_with = "json_object")]
    #[schema(value_type = Option<Object>)]
    pub input: Option<Map<String, Value>>,
    /// How long the preview may be bound to, in seconds (default 600, at most 3600).
    #[serde(default, deserialize_with = "ttl_seconds")]
    #[schema(minimum = 1, maximum = 3600)]
    pub ttl_seconds: Option<u64>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub run_id: Option<Text>,
}

/// `POST /actions/previews/{id}/refresh`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreviewRefreshBody {
    /// The new preview's life, in seconds (default 600, at most 3600).
    #[serde(default, deserialize_with = "ttl_seconds")]
    #[schema(minimum = 1, maximum = 3600)]
    pub ttl_seconds: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `utoipa` takes only literal bounds: the documented maximum is the constant.
    #[test]
    fn the_documented_ttl_bound_is_the_constant() {
        use utoipa::PartialSchema;
        for schema in [PreviewBody::schema(), PreviewRefreshBody::schema()] {
            let schema = serde_json::to_value(schema).unwrap();
            let ttl = &schema["properties"]["ttlSeconds"];
            assert_eq!(ttl["maximum"].as_u64(), Some(PREVIEW_TTL_MAX_S), "{ttl}");
            assert_eq!(ttl["minimum"].as_u64(), Some(1), "{ttl}");
        }
    }

    #[test]
    fn a_ttl_is_a_whole_number_of_seconds_in_range_or_null() {
        let body: PreviewRefreshBody = serde_json::from_value(json!({"ttlSeconds": null})).unwrap();
        assert_eq!(body.ttl_seconds, None);
        let body: PreviewBody = serde_json::from_value(json!({"ttlSeconds": 3600})).unwrap();
        assert_eq!(body.ttl_seconds, Some(PREVIEW_TTL_MAX_S));
        for refused in [json!(0), json!(3601), json!(1.5), json!("60")] {
            let err = serde_json::from_value::<PreviewRefreshBody>(json!({"ttlSeconds": refused}))
                .unwrap_err();
            assert_eq!(
                err.to_string(),
                "must be a whole number of seconds from 1 to 3600"
            );
        }
    }
}
