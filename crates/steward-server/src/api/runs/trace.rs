//! A run as one OTLP/JSON trace, and back: `GET /runs/{id}/export` and `POST /runs/import`.
//!
//! The run is the root span; each of its spans is a child (or a grandchild, following
//! `parentSpanId`). OTLP span ids are 8 bytes: each is the first 8 bytes of SHA-256 over the run
//! id and the span's own id, and the span's own id travels in the `steward.span.id` attribute,
//! so an import gives the spans back their ids. Attribute values whose key names a credential
//! (`secret`, `token`, `password`, `authorization`, `api_key`, `apikey`, `cookie`) are exported
//! as `[REDACTED]`.

use crate::app::runs::Imported;
use crate::error::{ApiError, ApiResult};
use serde_json::{json, Map, Value};
use steward_core::{Millis, RunId};
use steward_store::{RunBody, RunRecord, RunStatus, SpanRecord};

/// The OTLP span id (16 hex digits) of `span` in `run`; the run's own root span is `span = ""`.
fn otlp_span_id(run: &RunId, span: &str) -> String {
    hex::encode(crate::telemetry::span_id_bytes(run.as_str(), span))
}

fn nanos(at: Millis) -> String {
    (i128::from(at.0) * 1_000_000).to_string()
}

fn text_nanos(text: Option<&str>) -> Option<String> {
    text.and_then(super::parse::rfc3339).map(nanos)
}

fn is_credential(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "secret",
        "token",
        "password",
        "authorization",
        "api_key",
        "apikey",
        "cookie",
    ]
    .iter()
    .any(|w| key.contains(w))
}

fn string_attr(key: &str, value: &str) -> Value {
    json!({"key": key, "value": {"stringValue": value}})
}

/// A JSON value as an OTLP attribute: strings as they are, anything else as its JSON text.
fn json_attr(key: &str, value: &Value) -> Value {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let text = if is_credential(key) {
        "[REDACTED]".to_string()
    } else {
        text
    };
    string_attr(key, &text)
}

fn status_code(status: &str) -> u8 {
    match status {
        "succeeded" => 1,
        "failed" => 2,
        _ => 0,
    }
}

fn root_span(run: &RunRecord) -> Value {
    let b = &run.body;
    let mut attributes = vec![
        string_attr("steward.run.id", run.id.as_str()),
        string_attr("steward.run.status", run.status.as_str()),
    ];
    let optional = [
        ("steward.run.agent_id", run.agent_id.as_deref()),
        ("steward.run.user_id", run.user_id.as_deref()),
        ("steward.run.agent_version", b.agent_version.as_deref()),
        ("steward.run.application", b.application.as_deref()),
    ];
    attributes.extend(
        optional
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| string_attr(k, v))),
    );
    if !b.tags.is_empty() {
        attributes.push(
            json!({"key": "steward.run.tags", "value": {"arrayValue": {"values":
            b.tags.iter().map(|t| json!({"stringValue": t})).collect::<Vec<_>>()}}}),
        );
    }
    for (k, v) in [
        ("steward.run.input", &b.input),
        ("steward.run.output", &b.output),
        ("steward.run.error", &b.error),
        ("steward.run.metadata", &b.metadata),
    ] {
        if let Some(v) = v {
            attributes.push(json_attr(k, v));
        }
    }
    json!({
        "traceId": run.trace_id,
        "spanId": otlp_span_id(&run.id, ""),
        "name": run.name.clone().unwrap_or_else(|| "run".to_string()),
        "kind": 1,
        "startTimeUnixNano": nanos(run.started_at),
        "endTimeUnixNano": nanos(run.ended_at.unwrap_or(run.updated_at)),
        "attributes": attributes,
        "status": {"code": status_code(run.status.as_str())},
    })
}

fn child_span(run: &RunRecord, s: &SpanRecord, known: &dyn Fn(&str) -> bool) -> Value {
    let d = &s.document;
    let parent = match s.parent_span_id.as_deref() {
        Some(p) if known(p) => otlp_span_id(&run.id, p),
        _ => otlp_span_id(&run.id, ""),
    };
    let mut attributes = vec![
        string_attr("steward.span.id", &s.span_id),
        string_attr("steward.span.type", d["type"].as_str().unwrap_or("custom")),
        string_attr(
            "steward.span.status",
            d["status"].as_str().unwrap_or("running"),
        ),
    ];
    for field in [
        "input", "output", "error", "tokens", "cost", "model", "metadata",
    ] {
        if !d[field].is_null() {
            attributes.push(json_attr(&format!("steward.span.{field}"), &d[field]));
        }
    }
    if let Some(a) = d["attributes"].as_object() {
        attributes.extend(
            a.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| json_attr(k, v)),
        );
    }
    let start = text_nanos(d["startedAt"].as_str()).unwrap_or_else(|| nanos(s.created_at));
    let end = text_nanos(d["endedAt"].as_str()).unwrap_or_else(|| start.clone());
    json!({
        "traceId": run.trace_id,
        "spanId": otlp_span_id(&run.id, &s.span_id),
        "parentSpanId": parent,
        "name": d["name"],
        "kind": 1,
        "startTimeUnixNano": start,
        "endTimeUnixNano": end,
        "attributes": attributes,
        "status": {"code": status_code(d["status"].as_str().unwrap_or(""))},
    })
}

/// The run and its spans as one OTLP/JSON trace.
pub(super) fn export(run: &RunRecord, spans: &[SpanRecord]) -> steward_wire::Trace {
    let known = |id: &str| spans.iter().any(|s| s.span_id == id);
    let mut out = vec![root_span(run)];
    out.extend(spans.iter().map(|s| child_span(run, s, &known)));
    steward_wire::Trace {
        resource_spans: vec![json!({
            "resource": {"attributes": [string_attr("service.name", "steward")]},
            "scopeSpans": [{"scope": {"name": "steward.runs"}, "spans": out}],
        })],
    }
}

/// One OTLP attribute value as JSON: a string, number or bool as itself, an array of strings
/// as a list.
fn attr_value(v: &Value) -> Value {
    if let Some(s) = v.get("stringValue") {
        return s.clone();
    }
    if let Some(b) = v.get("boolValue") {
        return b.clone();
    }
    if let Some(i) = v.get("intValue") {
        return i
            .as_str()
            .and_then(|s| s.parse::<i64>().ok())
            .map_or_else(|| i.clone(), Value::from);
    }
    if let Some(d) = v.get("doubleValue") {
        return d.clone();
    }
    if let Some(list) = v.pointer("/arrayValue/values").and_then(Value::as_array) {
        return Value::Array(list.iter().map(attr_value).collect());
    }
    Value::Null
}

fn attributes(span: &Value) -> Map<String, Value> {
    span["attributes"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|a| Some((a["key"].as_str()?.to_string(), attr_value(&a["value"]))))
                .collect()
        })
        .unwrap_or_default()
}

/// A JSON document carried as an attribute's text: parsed back when it parses.
fn document(v: Option<Value>) -> Option<Value> {
    match v? {
        Value::String(s) => Some(serde_json::from_str(&s).unwrap_or(Value::String(s))),
        Value::Null => None,
        other => Some(other),
    }
}

fn text(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_string)
}

fn millis_of(v: &Value) -> Option<Millis> {
    let n: i128 = match v {
        Value::String(s) => s.parse().ok()?,
        Value::Number(n) => n.as_i64()?.into(),
        _ => return None,
    };
    i64::try_from(n / 1_000_000).ok().map(Millis)
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Every span of every `resourceSpans[].scopeSpans[]`, with the path that names it in an error.
fn every_span(resources: &[Value]) -> ApiResult<Vec<(String, &Value)>> {
    let mut all: Vec<(String, &Value)> = Vec::new();
    for (r, resource) in resources.iter().enumerate() {
        let scopes = resource["scopeSpans"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for s in 0..scopes.len() {
            let spans = resource["scopeSpans"][s]["spans"].as_array();
            for (i, span) in spans.into_iter().flatten().enumerate() {
                all.push((
                    format!("resourceSpans[{r}].scopeSpans[{s}].spans[{i}]"),
                    span,
                ));
            }
        }
    }
    if all.is_empty() || all.len() > super::parse::SPANS_PER_RUN_MAX + 1 {
        return Err(ApiError::validation(
            "resourceSpans",
            format!(
                "must hold 1 to {} spans",
                super::parse::SPANS_PER_RUN_MAX + 1
            ),
        ));
    }
    Ok(all)
}

/// The one trace id every span carries (lower case); a span id or trace id of the wrong shape,
/// or a second trace, is refused naming the span.
fn one_trace_id(all: &[(String, &Value)]) -> ApiResult<String> {
    let mut trace_id: Option<String> = None;
    for (at, span) in all {
        let id = span["spanId"].as_str().unwrap_or("");
        if !is_hex(id, 16) {
            return Err(ApiError::validation(
                format!("{at}.spanId"),
                "must be 16 hex digits",
            ));
        }
        let t = span["traceId"].as_str().unwrap_or("");
        if !is_hex(t, 32) {
            return Err(ApiError::validation(
                format!("{at}.traceId"),
                "must be 32 hex digits",
            ));
        }
        match &trace_id {
            Some(first) if first != &t.to_ascii_lowercase() => {
                return Err(ApiError::validation(
                    format!("{at}.traceId"),
                    "differs from the first span's: import one trace at a time",
                ))
            }
            _ => trace_id = Some(t.to_ascii_lowercase()),
        }
    }
    Ok(trace_id.unwrap_or_default())
}

/// A non-root span as `POST /runs/{id}/spans` takes it: its Steward id and parent, name, the
/// `steward.span.*` attributes as fields, times, and the other attributes kept as they are.
fn span_fields(span: &Value, id: String, parent: Option<String>) -> Map<String, Value> {
    let mut attrs = attributes(span);
    let mut fields = Map::new();
    fields.insert("id".into(), Value::from(id));
    if let Some(p) = parent {
        fields.insert("parentSpanId".into(), Value::from(p));
    }
    fields.insert("name".into(), span["name"].clone());
    let mut take = |attr: &str, field: &str| {
        if let Some(v) = attrs.remove(attr) {
            fields.insert(field.into(), v);
        }
    };
    take("steward.span.type", "type");
    take("steward.span.status", "status");
    take("steward.span.model", "model");
    for field in ["input", "output", "error", "tokens", "cost", "metadata"] {
        if let Some(v) = document(attrs.remove(&format!("steward.span.{field}"))) {
            fields.insert(field.into(), v);
        }
    }
    attrs.remove("steward.span.id");
    if let Some(t) = millis_of(&span["startTimeUnixNano"]) {
        fields.insert("startedAt".into(), Value::from(t.to_rfc3339()));
    }
    if let Some(t) = millis_of(&span["endTimeUnixNano"]) {
        fields.insert("endedAt".into(), Value::from(t.to_rfc3339()));
    }
    if !attrs.is_empty() {
        fields.insert("attributes".into(), Value::Object(attrs));
    }
    fields
}

/// Reads one OTLP/JSON trace: every span of every `resourceSpans[].scopeSpans[]`. The root is
/// the span without a parent; it becomes the run, the others its spans.
pub(super) fn import(body: steward_wire::TraceBody) -> ApiResult<Imported> {
    let Some(resources) = body.resource_spans else {
        return Err(ApiError::validation("resourceSpans", "must be a list"));
    };
    let all = every_span(&resources)?;
    let trace_id = one_trace_id(&all)?;
    let has_parent = |s: &Value| s["parentSpanId"].as_str().is_some_and(|p| !p.is_empty());
    let roots: Vec<&(String, &Value)> = all.iter().filter(|(_, s)| !has_parent(s)).collect();
    let [(_, root)] = roots.as_slice() else {
        return Err(ApiError::validation(
            "resourceSpans",
            "must hold exactly one root span (one without parentSpanId)",
        ));
    };
    let root_id = root["spanId"].as_str().unwrap_or("").to_ascii_lowercase();
    let mut a = attributes(root);
    let status = text(a.get("steward.run.status"))
        .and_then(|s| RunStatus::parse(&s))
        .unwrap_or(match root["status"]["code"].as_u64() {
            Some(2) => RunStatus::Failed,
            _ => RunStatus::Succeeded,
        });
    let tags = match a.remove("steward.run.tags") {
        Some(Value::Array(list)) => list
            .into_iter()
            .filter_map(|t| t.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    // Checked as `POST /runs` checks them, and kept as the trace has them.
    super::parse::tags(tags.clone())?;
    let name = text(root.get("name")).filter(|n| !n.is_empty());
    // Each span's Steward id: its `steward.span.id`, else its OTLP span id.
    let steward_id = |s: &Value| {
        text(attributes(s).get("steward.span.id"))
            .unwrap_or_else(|| s["spanId"].as_str().unwrap_or("").to_ascii_lowercase())
    };
    let mut spans = Vec::with_capacity(all.len() - 1);
    for (i, (at, span)) in all.iter().filter(|(_, s)| has_parent(s)).enumerate() {
        let parent_otlp = span["parentSpanId"]
            .as_str()
            .unwrap_or("")
            .to_ascii_lowercase();
        let parent = if parent_otlp == root_id {
            None
        } else {
            all.iter()
                .find(|(_, s)| {
                    s["spanId"].as_str().map(str::to_ascii_lowercase) == Some(parent_otlp.clone())
                })
                .map(|(_, s)| steward_id(s))
        };
        let fields = span_fields(span, steward_id(span), parent);
        let parsed = super::parse::span(i, &Value::Object(fields), String::new)
            .map_err(|e| ApiError::validation(at.clone(), e.message))?;
        spans.push(parsed);
    }
    Ok(Imported {
        trace_id,
        name,
        status,
        agent_id: text(a.get("steward.run.agent_id")),
        user_id: text(a.get("steward.run.user_id")),
        body: RunBody {
            agent_version: text(a.get("steward.run.agent_version")),
            application: text(a.get("steward.run.application")),
            tags,
            input: document(a.remove("steward.run.input")),
            output: document(a.remove("steward.run.output")),
            error: document(a.remove("steward.run.error")).filter(Value::is_object),
            metadata: document(a.remove("steward.run.metadata")).filter(Value::is_object),
            ..RunBody::default()
        },
        started_at: millis_of(&root["startTimeUnixNano"]),
        ended_at: millis_of(&root["endTimeUnixNano"]),
        spans,
    })
}
