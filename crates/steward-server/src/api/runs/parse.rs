//! The bodies of the run endpoints, checked field by field: every refusal names its field, and
//! every bound below has its unit in its name.

use crate::api::body::{only_known, optional_string};
use crate::error::{ApiError, ApiResult};
use serde_json::{json, Map, Value};
use steward_core::Millis;
use steward_store::{RunBody, RunEnd, RunStatus};

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
/// The most spans one run may hold, counting each span id once. Past it, an ingest that would
/// add spans is refused whole (`run_spans_limit_reached`); replacing existing spans still works.
pub const SPANS_PER_RUN_MAX: usize = 10_000;
/// The longest span id a client may choose, in bytes (LangChain's are 35).
pub const SPAN_ID_BYTES_MAX: usize = 128;
/// The largest `attributes` object of a span, in bytes of its JSON. Input and output are
/// bounded by the request body limit (`JSON_BODY_BYTES_MAX`) alone.
pub const SPAN_ATTRIBUTES_BYTES_MAX: usize = 16 * 1024;
/// The longest feedback comment, in characters.
pub const FEEDBACK_COMMENT_CHARS_MAX: usize = 4_000;

pub const START_FIELDS: [&str; 8] = [
    "name",
    "agentId",
    "agentVersion",
    "userId",
    "application",
    "input",
    "tags",
    "metadata",
];
pub const END_FIELDS: [&str; 6] = ["status", "output", "error", "tokens", "cost", "metadata"];
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
pub const SPANS_FIELDS: [&str; 1] = ["spans"];
pub const TRACE_FIELDS: [&str; 1] = ["resourceSpans"];
pub const FEEDBACK_FIELDS: [&str; 6] =
    ["spanId", "source", "label", "rating", "comment", "metadata"];
/// The kinds of span: a model call, a tool call, a workflow step, and anything else.
pub const SPAN_TYPES: [&str; 4] = ["model_call", "tool_call", "workflow_step", "custom"];
pub const SPAN_STATUSES: [&str; 4] = ["running", "succeeded", "failed", "cancelled"];

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

fn count(map: &Map<String, Value>, field: &str) -> ApiResult<Option<u64>> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| ApiError::validation(field, "must be a non-negative integer")),
    }
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

fn tags(map: &Map<String, Value>) -> ApiResult<Vec<String>> {
    let list = match map.get("tags") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(ApiError::validation("tags", "must be a list of strings")),
    };
    if list.len() > RUN_TAGS_MAX {
        return Err(ApiError::validation(
            "tags",
            format!("must hold at most {RUN_TAGS_MAX} tags"),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for (i, tag) in list.iter().enumerate() {
        let field = format!("tags[{i}]");
        let Some(tag) = tag.as_str() else {
            return Err(ApiError::validation(field, "must be a string"));
        };
        steward_core::check_text(&field, tag, steward_core::TextKind::Prose)
            .map_err(|e| ApiError::validation(e.field, e.message))?;
        if tag.is_empty() || tag.chars().count() > RUN_TAG_CHARS_MAX {
            return Err(ApiError::validation(
                field,
                format!("must be 1 to {RUN_TAG_CHARS_MAX} characters"),
            ));
        }
        if !out.iter().any(|t| t == tag) {
            out.push(tag.to_string());
        }
    }
    Ok(out)
}

/// `POST /runs`: the run's columns and its body.
pub struct Start {
    pub name: Option<String>,
    pub agent_id: Option<String>,
    pub user_id: Option<String>,
    pub body: RunBody,
}

pub fn start(map: &Map<String, Value>) -> ApiResult<Start> {
    only_known(map, &START_FIELDS)?;
    Ok(Start {
        name: bounded(map, "name", RUN_TEXT_CHARS_MAX)?,
        agent_id: bounded(map, "agentId", RUN_TEXT_CHARS_MAX)?,
        user_id: bounded(map, "userId", RUN_TEXT_CHARS_MAX)?,
        body: RunBody {
            agent_version: bounded(map, "agentVersion", RUN_TEXT_CHARS_MAX)?,
            application: bounded(map, "application", RUN_TEXT_CHARS_MAX)?,
            tags: tags(map)?,
            input: any(map, "input"),
            metadata: object_or_null(map, "metadata")?,
            ..RunBody::default()
        },
    })
}

/// `PATCH /runs/{id}`.
pub fn end(map: &Map<String, Value>) -> ApiResult<RunEnd> {
    only_known(map, &END_FIELDS)?;
    let status = optional_string(map, "status")?
        .map(|s| {
            RunStatus::parse(&s).ok_or_else(|| {
                ApiError::validation(
                    "status",
                    "must be one of running, succeeded, failed, cancelled",
                )
            })
        })
        .transpose()?;
    Ok(RunEnd {
        status,
        output: any(map, "output"),
        error: object_or_null(map, "error")?,
        tokens: count(map, "tokens")?,
        cost: amount(map, "cost")?,
        metadata: object_or_null(map, "metadata")?,
    })
}

/// An RFC 3339 time as tracers write it: any number of fraction digits (Python writes six),
/// `Z` or a `+HH:MM` / `-HH:MM` offset. Read to the millisecond; `None` for anything else.
pub fn rfc3339(text: &str) -> Option<Millis> {
    let base = Millis::parse_rfc3339(&format!("{}Z", text.get(..19)?))?;
    let rest = &text[19..];
    let (fraction, zone) = match rest.strip_prefix('.') {
        Some(tail) => {
            let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 || digits > 9 {
                return None;
            }
            (&tail[..digits], &tail[digits..])
        }
        None => ("", rest),
    };
    let ms: i64 = format!("{fraction:0<3}")[..3].parse().ok()?;
    let offset_ms = match zone.as_bytes() {
        [b'Z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let two = |a: u8, b: u8| -> Option<i64> {
                (a.is_ascii_digit() && b.is_ascii_digit())
                    .then(|| i64::from(a - b'0') * 10 + i64::from(b - b'0'))
            };
            let (h, m) = (two(*h1, *h2)?, two(*m1, *m2)?);
            if h > 23 || m > 59 {
                return None;
            }
            let magnitude = (h * 60 + m) * 60_000;
            if *sign == b'+' {
                magnitude
            } else {
                -magnitude
            }
        }
        _ => return None,
    };
    Some(Millis(base.0 + ms - offset_ms))
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
    let Some(id) = optional_string(map, field)? else {
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

/// One checked span: its id, its parent, and its normalized document.
pub struct Span {
    pub id: String,
    pub parent: Option<String>,
    pub document: Value,
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
pub fn feedback(map: &Map<String, Value>) -> ApiResult<(Option<String>, Value)> {
    only_known(map, &FEEDBACK_FIELDS)?;
    let span = span_id(map, "spanId")?;
    let label = bounded(map, "label", RUN_TEXT_CHARS_MAX)?;
    let comment = bounded(map, "comment", FEEDBACK_COMMENT_CHARS_MAX)?;
    let rating = match map.get("rating") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_f64() {
            Some(n) if n.is_finite() => Some(n),
            _ => return Err(ApiError::validation("rating", "must be a number")),
        },
    };
    if label.is_none() && comment.is_none() && rating.is_none() {
        return Err(ApiError::validation(
            "rating",
            "feedback needs a rating, a label or a comment",
        ));
    }
    let document = json!({
        "source": bounded(map, "source", RUN_TEXT_CHARS_MAX)?,
        "label": label,
        "rating": rating,
        "comment": comment,
        "metadata": object_or_null(map, "metadata")?,
    });
    Ok((span, document))
}

#[cfg(test)]
mod tests {
    use super::*;

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
