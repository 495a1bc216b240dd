//! The bodies of the run endpoints, checked field by field into the application layer's
//! inputs (`app::runs`): each body is parsed as its `steward_wire` type (`api/body.rs::parse`,
//! which refuses an unknown field and a field of the wrong kind), then every bound below is
//! checked. Every refusal names its field, and every bound has its unit in its name.

use crate::api::body::{only_known, optional_string};
use crate::app::runs::{Feedback, Span, Start};
use crate::error::{ApiError, ApiResult};
use serde_json::{json, Map, Value};
use steward_core::Millis;
use steward_store::{RunBody, RunEnd, RunStatus};
use steward_wire::{FeedbackBody, Object, RunEndBody, RunStartBody, SpansBody, Text};

pub use crate::app::runs::SPANS_PER_RUN_MAX;
/// Span times are read as tracers write them (`telemetry.rs` reads them the same way).
pub use crate::telemetry::rfc3339;

/// The longest run name, agent, user or application id, span name or model, in characters:
/// identifiers and labels, not documents.
pub const RUN_TEXT_CHARS_MAX: usize = 200;
/// The most tags on a run, and the longest tag in characters. Tags are matched by approval
/// policies (`matchTags`), so they are labels, not payloads.
pub const RUN_TAGS_MAX: usize = 32;
pub const RUN_TAG_CHARS_MAX: usize = 64;
/// The most spans one ingest request may carry. A tracer sends a span at its start and again
/// at its end; 100 keeps one request's transaction short.
pub const SPANS_PER_INGEST_MAX: usize = 100;
/// The longest span id a client may choose, in bytes (LangChain's are 35).
pub const SPAN_ID_BYTES_MAX: usize = 128;
/// The largest `attributes` object of a span, in bytes of its JSON. Input and output are
/// bounded by the request body limit (`JSON_BODY_BYTES_MAX`) alone.
pub const SPAN_ATTRIBUTES_BYTES_MAX: usize = 16 * 1024;
/// The longest feedback comment, in characters.
pub const FEEDBACK_COMMENT_CHARS_MAX: usize = 4_000;

/// The fields of one span of `POST /runs/{id}/spans` (checked here, not by a type: a refusal
/// names the field under `spans[i].`).
pub const SPAN_FIELDS: [&str; 16] = [
    "id",
    "parentId",
    "parentSpanId",
    "name",
    "type",
    "status",
    "startedAt",
    "endedAt",
    "input",
    "output",
    "error",
    "attributes",
    "metadata",
    "tokens",
    "cost",
    "model",
];
/// The kinds of span: a model call, a tool call, a workflow step, and anything else.
pub const SPAN_TYPES: [&str; 4] = ["model_call", "tool_call", "workflow_step", "custom"];
pub const SPAN_STATUSES: [&str; 4] = ["running", "succeeded", "failed", "cancelled"];

/// A parsed string field (`field`) of 1 to `max` characters.
fn text(value: Option<Text>, field: &str, max: usize) -> ApiResult<Option<String>> {
    let value = value.map(Text::into_string);
    if let Some(v) = &value {
        if v.chars().count() > max {
            return Err(ApiError::validation(
                field,
                format!("must be at most {max} characters"),
            ));
        }
        if v.is_empty() {
            return Err(ApiError::validation(field, "must not be empty"));
        }
    }
    Ok(value)
}

fn object(value: Option<Object>) -> Option<Value> {
    value.map(Object::into_value)
}

/// A value that is not `null`.
fn given(value: Option<Value>) -> Option<Value> {
    value.filter(|v| !v.is_null())
}

/// A string field of at most `max` characters.
pub fn bounded(map: &Map<String, Value>, field: &str, max: usize) -> ApiResult<Option<String>> {
    let value = optional_string(map, field)?;
    if let Some(v) = &value {
        if v.chars().count() > max {
            return Err(ApiError::validation(
                field,
                format!("must be at most {max} characters"),
            ));
        }
        if v.is_empty() {
            return Err(ApiError::validation(field, "must not be empty"));
        }
    }
    Ok(value)
}

fn object_or_null(map: &Map<String, Value>, field: &str) -> ApiResult<Option<Value>> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Object(_)) => Ok(Some(v.clone())),
        Some(_) => Err(ApiError::validation(field, "must be a JSON object")),
    }
}

fn any(map: &Map<String, Value>, field: &str) -> Option<Value> {
    map.get(field).filter(|v| !v.is_null()).cloned()
}

fn amount(map: &Map<String, Value>, field: &str) -> ApiResult<Option<f64>> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(n) if n.is_finite() && n >= 0.0 => Ok(Some(n)),
            _ => Err(ApiError::validation(field, "must be a non-negative number")),
        },
    }
}

/// A run's tags, checked: at most [`RUN_TAGS_MAX`], each 1 to [`RUN_TAG_CHARS_MAX`]
/// characters of text a person reads, a refusal naming `tags[i]`; repeats are dropped.
pub fn tags(list: Vec<String>) -> ApiResult<Vec<String>> {
    if list.len() > RUN_TAGS_MAX {
        return Err(ApiError::validation(
            "tags",
            format!("must hold at most {RUN_TAGS_MAX} tags"),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for (i, tag) in list.into_iter().enumerate() {
        let field = format!("tags[{i}]");
        steward_core::check_text(&field, &tag, steward_core::TextKind::Prose)
            .map_err(|e| ApiError::validation(e.field, e.message))?;
        if tag.is_empty() || tag.chars().count() > RUN_TAG_CHARS_MAX {
            return Err(ApiError::validation(
                field,
                format!("must be 1 to {RUN_TAG_CHARS_MAX} characters"),
            ));
        }
        if !out.contains(&tag) {
            out.push(tag);
        }
    }
    Ok(out)
}

/// `POST /runs`: the run's columns and its body.
pub fn start(body: RunStartBody) -> ApiResult<Start> {
    let tag_list = body.tags.unwrap_or_default();
    Ok(Start {
        name: text(body.name, "name", RUN_TEXT_CHARS_MAX)?,
        agent_id: text(body.agent_id, "agentId", RUN_TEXT_CHARS_MAX)?,
        user_id: text(body.user_id, "userId", RUN_TEXT_CHARS_MAX)?,
        body: RunBody {
            agent_version: text(body.agent_version, "agentVersion", RUN_TEXT_CHARS_MAX)?,
            application: text(body.application, "application", RUN_TEXT_CHARS_MAX)?,
            tags: tags(tag_list.into_iter().map(Text::into_string).collect())?,
            input: given(body.input),
            metadata: object(body.metadata),
            ..RunBody::default()
        },
    })
}

/// `PATCH /runs/{id}`.
pub fn end(body: RunEndBody) -> ApiResult<RunEnd> {
    let status = body
        .status
        .map(|s| {
            RunStatus::parse(s.0.as_str()).ok_or_else(|| {
                ApiError::validation(
                    "status",
                    "must be one of running, succeeded, failed, cancelled",
                )
            })
        })
        .transpose()?;
    Ok(RunEnd {
        status,
        output: given(body.output),
        error: object(body.error),
        tokens: body.tokens.map(|c| c.0),
        cost: body.cost.map(|a| a.0),
        metadata: object(body.metadata),
    })
}

/// An RFC 3339 time, kept as given once it parses.
fn time(map: &Map<String, Value>, field: &str) -> ApiResult<Option<(String, Millis)>> {
    match optional_string(map, field)? {
        None => Ok(None),
        Some(text) => rfc3339(&text)
            .map(|at| Some((text, at)))
            .ok_or_else(|| ApiError::validation(field, "must be an RFC 3339 time")),
    }
}

fn span_id(map: &Map<String, Value>, field: &str) -> ApiResult<Option<String>> {
    checked_span_id(optional_string(map, field)?, field)
}

/// A span id a client chose (`field`), checked.
fn checked_span_id(id: Option<String>, field: &str) -> ApiResult<Option<String>> {
    let Some(id) = id else {
        return Ok(None);
    };
    let fits = !id.is_empty()
        && id.len() <= SPAN_ID_BYTES_MAX
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if fits {
        Ok(Some(id))
    } else {
        Err(ApiError::validation(
            field,
            format!("must be 1 to {SPAN_ID_BYTES_MAX} letters, digits, `_`, `-`, `.` or `:`"),
        ))
    }
}

/// `e` with the field it names put under `prefix` (a span's field under `spans[i].`), so the
/// refusal names the field where the client wrote it.
fn within(mut e: ApiError, prefix: &str) -> ApiError {
    if let Some(field) = e.details.as_ref().and_then(|d| d["field"].as_str()) {
        let field = format!("{prefix}{field}");
        e.message = e.message.replacen(&field[prefix.len()..], &field, 1);
        e.details = Some(json!({ "field": field }));
    }
    e
}

/// `POST /runs/{id}/spans`: 1 to [`SPANS_PER_INGEST_MAX`] spans, each checked, no id given
/// twice. A span without an id gets a fresh one.
pub fn spans(body: SpansBody) -> ApiResult<Vec<Span>> {
    let Some(list) = body.spans else {
        return Err(ApiError::validation("spans", "must be a list of spans"));
    };
    if list.is_empty() || list.len() > SPANS_PER_INGEST_MAX {
        return Err(ApiError::validation(
            "spans",
            format!("must hold 1 to {SPANS_PER_INGEST_MAX} spans"),
        ));
    }
    let mut spans: Vec<Span> = Vec::with_capacity(list.len());
    for (i, value) in list.iter().enumerate() {
        let span = span(i, value, crate::app::runs::fresh_span_id)?;
        if spans.iter().any(|s| s.id == span.id) {
            return Err(ApiError::validation(
                format!("spans[{i}].id"),
                "repeats an id given earlier in this request",
            ));
        }
        spans.push(span);
    }
    Ok(spans)
}

/// One span of an ingest, at `spans[index]`. A span without an id gets `fresh`; `parentId` (the
/// hosted tracers' name) and `parentSpanId` are the same field, and giving both differently is
/// refused.
pub fn span(index: usize, value: &Value, fresh: impl FnOnce() -> String) -> ApiResult<Span> {
    let at = |field: &str| format!("spans[{index}].{field}");
    let rename = |e: ApiError| within(e, &format!("spans[{index}]."));
    let Value::Object(map) = value else {
        return Err(ApiError::validation(
            format!("spans[{index}]"),
            "must be a JSON object",
        ));
    };
    only_known(map, &SPAN_FIELDS).map_err(rename)?;
    let id = span_id(map, "id").map_err(rename)?.unwrap_or_else(fresh);
    let parent_id = span_id(map, "parentId").map_err(rename)?;
    let parent_span_id = span_id(map, "parentSpanId").map_err(rename)?;
    let parent = match (parent_id, parent_span_id) {
        (Some(a), Some(b)) if a != b => {
            return Err(ApiError::validation(
                at("parentSpanId"),
                "differs from parentId; give one",
            ))
        }
        (a, b) => a.or(b),
    };
    if parent.as_deref() == Some(id.as_str()) {
        return Err(ApiError::validation(
            at("parentSpanId"),
            "names the span itself",
        ));
    }
    let name = bounded(map, "name", RUN_TEXT_CHARS_MAX)
        .map_err(rename)?
        .ok_or_else(|| ApiError::validation(at("name"), "is required"))?;
    let kind = optional_string(map, "type").map_err(rename)?;
    let kind = kind.unwrap_or_else(|| "custom".to_string());
    if !SPAN_TYPES.contains(&kind.as_str()) {
        return Err(ApiError::validation(
            at("type"),
            format!("must be one of {}", SPAN_TYPES.join(", ")),
        ));
    }
    let started = time(map, "startedAt").map_err(rename)?;
    let ended = time(map, "endedAt").map_err(rename)?;
    if let (Some((_, s)), Some((_, e))) = (&started, &ended) {
        if e < s {
            return Err(ApiError::validation(at("endedAt"), "is before startedAt"));
        }
    }
    let status = optional_string(map, "status").map_err(rename)?;
    let status = status.unwrap_or_else(|| {
        if ended.is_some() {
            "succeeded"
        } else {
            "running"
        }
        .to_string()
    });
    if !SPAN_STATUSES.contains(&status.as_str()) {
        return Err(ApiError::validation(
            at("status"),
            format!("must be one of {}", SPAN_STATUSES.join(", ")),
        ));
    }
    let attributes = object_or_null(map, "attributes").map_err(rename)?;
    if let Some(a) = &attributes {
        if a.to_string().len() > SPAN_ATTRIBUTES_BYTES_MAX {
            return Err(ApiError::validation(
                at("attributes"),
                format!("must be at most {SPAN_ATTRIBUTES_BYTES_MAX} bytes of JSON"),
            ));
        }
    }
    let tokens = match map.get("tokens") {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => Some(v.clone()),
        Some(v) if v.as_u64().is_some() => Some(v.clone()),
        Some(_) => {
            return Err(ApiError::validation(
                at("tokens"),
                "must be a non-negative integer or an object of counts",
            ))
        }
    };
    let document = json!({
        "id": id,
        "parentSpanId": parent,
        "name": name,
        "type": kind,
        "status": status,
        "startedAt": started.map(|(t, _)| t),
        "endedAt": ended.map(|(t, _)| t),
        "input": any(map, "input"),
        "output": any(map, "output"),
        "error": object_or_null(map, "error").map_err(rename)?,
        "attributes": attributes,
        "metadata": object_or_null(map, "metadata").map_err(rename)?,
        "tokens": tokens,
        "cost": amount(map, "cost").map_err(rename)?,
        "model": bounded(map, "model", RUN_TEXT_CHARS_MAX).map_err(rename)?,
    });
    Ok(Span {
        id,
        parent,
        document,
    })
}

/// `POST /runs/{id}/feedback`: its span, if any, and its document.
pub fn feedback(body: FeedbackBody) -> ApiResult<Feedback> {
    let span_id = checked_span_id(body.span_id.map(Text::into_string), "spanId")?;
    let label = text(body.label, "label", RUN_TEXT_CHARS_MAX)?;
    let comment = text(body.comment, "comment", FEEDBACK_COMMENT_CHARS_MAX)?;
    let rating = body.rating.map(|r| r.0);
    if label.is_none() && comment.is_none() && rating.is_none() {
        return Err(ApiError::validation(
            "rating",
            "feedback needs a rating, a label or a comment",
        ));
    }
    let document = json!({
        "source": text(body.source, "source", RUN_TEXT_CHARS_MAX)?,
        "label": label,
        "rating": rating,
        "comment": comment,
        "metadata": object(body.metadata),
    });
    Ok(Feedback { span_id, document })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Bytes;

    fn refused<T: serde::de::DeserializeOwned + utoipa::ToSchema + 'static>(
        body: Value,
    ) -> ApiError {
        match crate::api::body::parse::<T>(&Bytes::from(body.to_string())) {
            Ok(_) => panic!("{body} was accepted"),
            Err(e) => e,
        }
    }

    fn field_of(e: &ApiError) -> &str {
        e.details
            .as_ref()
            .and_then(|d| d["field"].as_str())
            .unwrap_or("")
    }

    /// The typed bodies refuse what the hand-written parsers refused, naming the same field
    /// with the same message.
    #[test]
    fn typed_run_bodies_name_the_field_they_refuse() {
        let cases: Vec<(ApiError, &str, &str)> = vec![
            (
                refused::<RunStartBody>(json!({"nope": 1})),
                "nope",
                "nope: is not a known field",
            ),
            (
                refused::<RunStartBody>(json!({"name": 7})),
                "name",
                "name: must be a string",
            ),
            (
                refused::<RunStartBody>(json!({"tags": "t"})),
                "tags",
                "tags: must be a list of strings",
            ),
            (
                refused::<RunStartBody>(json!({"tags": ["a", 2]})),
                "tags[1]",
                "tags[1]: must be a string",
            ),
            (
                refused::<RunStartBody>(json!({"metadata": [1]})),
                "metadata",
                "metadata: must be a JSON object",
            ),
            (
                refused::<RunEndBody>(json!({"tokens": -1})),
                "tokens",
                "tokens: must be a non-negative integer",
            ),
            (
                refused::<RunEndBody>(json!({"cost": "1"})),
                "cost",
                "cost: must be a non-negative number",
            ),
            (
                refused::<SpansBody>(json!({"spans": {}})),
                "spans",
                "spans: must be a list of spans",
            ),
            (
                refused::<FeedbackBody>(json!({"rating": "high"})),
                "rating",
                "rating: must be a number",
            ),
            (
                refused::<steward_wire::TraceBody>(json!({"spans": []})),
                "spans",
                "spans: is not a known field",
            ),
        ];
        for (e, field, message) in cases {
            assert_eq!((field_of(&e), e.message.as_str()), (field, message));
        }
        let bounds = |body: Value| {
            let parsed = crate::api::body::parse::<RunStartBody>(&Bytes::from(body.to_string()));
            start(parsed.unwrap())
                .err()
                .map(|e| field_of(&e).to_string())
        };
        assert_eq!(
            bounds(json!({"name": "x".repeat(201)})).as_deref(),
            Some("name")
        );
        assert_eq!(
            bounds(json!({"tags": ["ok", ""]})).as_deref(),
            Some("tags[1]")
        );
        assert_eq!(
            bounds(json!({"name": null, "tags": null, "input": null})),
            None
        );
        let none = SpansBody { spans: None };
        assert_eq!(field_of(&spans(none).err().unwrap()), "spans");
        let many = SpansBody {
            spans: Some(vec![json!({"name": "x"}); SPANS_PER_INGEST_MAX + 1]),
        };
        assert_eq!(field_of(&spans(many).err().unwrap()), "spans");
    }

    /// `utoipa` takes only literal bounds; each in the run bodies' schemas is the constant the
    /// checks above enforce.
    #[test]
    fn the_run_bodies_bounds_in_the_document_are_the_named_constants() {
        use utoipa::PartialSchema;
        let schema = |s: utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>| {
            serde_json::to_value(s).unwrap()
        };
        let start = schema(RunStartBody::schema());
        for field in ["name", "agentId", "agentVersion", "userId", "application"] {
            let max = &start["properties"][field]["maxLength"];
            assert_eq!(max.as_u64(), Some(RUN_TEXT_CHARS_MAX as u64), "{field}");
        }
        let tags = &start["properties"]["tags"]["maxItems"];
        assert_eq!(tags.as_u64(), Some(RUN_TAGS_MAX as u64));
        let spans = schema(SpansBody::schema());
        let max = &spans["properties"]["spans"]["maxItems"];
        assert_eq!(max.as_u64(), Some(SPANS_PER_INGEST_MAX as u64));
        let feedback = schema(FeedbackBody::schema());
        let max = &feedback["properties"]["comment"]["maxLength"];
        assert_eq!(max.as_u64(), Some(FEEDBACK_COMMENT_CHARS_MAX as u64));
        for body in [start, spans, feedback, schema(RunEndBody::schema())] {
            assert_eq!(body["additionalProperties"], json!(false), "{body}");
        }
    }

    #[test]
    fn tracer_times_read_to_the_millisecond() {
        let z = Millis::parse_rfc3339("2026-01-02T03:04:05.678Z").unwrap();
        for text in [
            "2026-01-02T03:04:05.678Z",
            "2026-01-02T03:04:05.678901Z",
            "2026-01-02T04:04:05.678+01:00",
            "2026-01-02T02:04:05.6789-01:00",
        ] {
            assert_eq!(rfc3339(text), Some(z), "{text}");
        }
        assert_eq!(rfc3339("2026-01-02T03:04:05Z"), Some(Millis(z.0 - 678)));
        for bad in [
            "2026-01-02T03:04:05",
            "2026-01-02T03:04:05.Z",
            "soon",
            "2026-01-02T03:04:05+1:00",
        ] {
            assert_eq!(rfc3339(bad), None, "{bad}");
        }
    }
}
