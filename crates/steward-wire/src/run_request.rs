//! The bodies of the run endpoints. Each field's type refuses what is not its kind with the
//! message the endpoint always gave (`must be a string`, `must be a JSON object`, ...); the
//! server then checks the bounds (lengths, counts) and names the field it refuses. Every bound
//! in a schema here is a literal: the server's drift test checks each against its named
//! constant.

use crate::request::list_of;
use crate::{Amount, Count, Number, Object, Text};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// `POST /runs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunStartBody {
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 200)]
    pub name: Option<Text>,
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 200)]
    pub agent_id: Option<Text>,
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 200)]
    pub agent_version: Option<Text>,
    /// The user the run acts for: what approval policies' `matchUserId` sees for invocations
    /// that name this run.
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 200)]
    pub user_id: Option<Text>,
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 200)]
    pub application: Option<Text>,
    #[serde(default)]
    pub input: Option<Value>,
    /// At most 32 tags of 1 to 64 characters: what policies' `matchTags` see.
    #[serde(default, deserialize_with = "strings")]
    #[schema(value_type = Option<Vec<String>>, max_items = 32)]
    pub tags: Option<Vec<Text>>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Object>,
}

/// `PATCH /runs/{id}`: end the run (a terminal status) or update a running one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunEndBody {
    /// `running`, `succeeded`, `failed` or `cancelled`.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub status: Option<Text>,
    #[serde(default)]
    pub output: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub error: Option<Object>,
    #[serde(default)]
    #[schema(value_type = Option<u64>, minimum = 0)]
    pub tokens: Option<Count>,
    #[serde(default)]
    #[schema(value_type = Option<f64>, minimum = 0)]
    pub cost: Option<Amount>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Object>,
}

/// `POST /runs/{id}/spans`: 1 to 100 spans. Each span: `id` (chosen by the client so a retry or
/// the span's end replaces it), `parentSpanId` (or `parentId`), `name`, `type` (`model_call`,
/// `tool_call`, `workflow_step`, `custom`), `status`, `startedAt`, `endedAt`, `input`,
/// `output`, `error`, `attributes` (at most 16 KiB of JSON), `metadata`, `tokens`, `cost`,
/// `model`. The server checks each span and names a refused field under `spans[i].`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpansBody {
    #[serde(default, deserialize_with = "spans")]
    #[schema(value_type = Vec<Object>, required = true, min_items = 1, max_items = 100)]
    pub spans: Option<Vec<Value>>,
}

/// `POST /runs/{id}/feedback`: a rating, a label or a comment at least.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FeedbackBody {
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub span_id: Option<Text>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub source: Option<Text>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub label: Option<Text>,
    #[serde(default)]
    #[schema(value_type = Option<f64>)]
    pub rating: Option<Number>,
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 4000)]
    pub comment: Option<Text>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Object>,
}

/// `POST /runs/import`: one OTLP/JSON trace, as `GET /runs/{id}/export` answers it. Exactly
/// one span has no `parentSpanId`: it becomes the run; the others become its spans.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TraceBody {
    #[serde(default, deserialize_with = "resource_spans")]
    #[schema(value_type = Vec<Object>, required = true, min_items = 1)]
    pub resource_spans: Option<Vec<Value>>,
}

fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Text>>, D::Error> {
    list_of(d, "must be a list of strings")
}

fn spans<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Value>>, D::Error> {
    list_of(d, "must be a list of spans")
}

fn resource_spans<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Value>>, D::Error> {
    list_of(d, "must be a list")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_refuse_other_kinds_with_the_endpoints_messages() {
        let err = |v: Value| {
            serde_json::from_value::<RunEndBody>(v)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(err(json!({"tokens": -1})), "must be a non-negative integer");
        assert_eq!(err(json!({"cost": -0.5})), "must be a non-negative number");
        assert_eq!(err(json!({"error": "x"})), "must be a JSON object");
        let body: RunEndBody = serde_json::from_value(json!({"tokens": 3, "cost": 0})).unwrap();
        assert_eq!(
            (body.tokens, body.cost),
            (Some(Count(3)), Some(Amount(0.0)))
        );

        let err = |v: Value| {
            serde_json::from_value::<RunStartBody>(v)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(err(json!({"tags": "a"})), "must be a list of strings");
        assert_eq!(err(json!({"tags": {"a": 1}})), "must be a list of strings");
        assert_eq!(err(json!({"tags": ["a", 1]})), "must be a string");
        let body: RunStartBody = serde_json::from_value(json!({"tags": null})).unwrap();
        assert_eq!(body.tags, None);
        let body: RunStartBody = serde_json::from_value(json!({"tags": ["a"]})).unwrap();
        assert_eq!(body.tags, Some(vec![Text("a".into())]));

        let err = |v: Value| {
            serde_json::from_value::<SpansBody>(v)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(err(json!({"spans": 1})), "must be a list of spans");
        let err = |v: Value| {
            serde_json::from_value::<FeedbackBody>(v)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(err(json!({"rating": "5"})), "must be a number");
        let err = |v: Value| {
            serde_json::from_value::<TraceBody>(v)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(err(json!({"resourceSpans": {}})), "must be a list");
    }
}
