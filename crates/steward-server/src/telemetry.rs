//! What the server hands to OpenTelemetry, when the binary has set a tracer provider
//! (`steward serve --otlp-endpoint`); without one, the global provider is a no-op and this
//! costs a lookup.
//!
//! Two things: an invoke that names a run is traced under the run's trace (the request span's
//! parent becomes the run's root span, [`run_context`]), and finished ingested spans are
//! exported as spans of that trace ([`export_run_spans`]), with the same ids `GET
//! /runs/{id}/export` gives them. Export goes through the provider's batch processor: it never
//! waits for the collector.

use opentelemetry::trace::{
    Span as _, SpanBuilder, SpanContext, SpanId, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use steward_core::Millis;
use steward_store::{RunRecord, SpanRecord};

/// The 8-byte OTLP span id of `span` in `run` (`""` is the run's own root span): the first 8
/// bytes of SHA-256 over the run id, a zero byte and the span id.
pub(crate) fn span_id_bytes(run: &str, span: &str) -> [u8; 8] {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(run.as_bytes());
    h.update([0]);
    h.update(span.as_bytes());
    let digest = h.finalize();
    let mut out = [0u8; 8];
    out.copy_from_slice(&digest[..8]);
    out
}

fn trace_id(run: &RunRecord) -> Option<TraceId> {
    TraceId::from_hex(&run.trace_id).ok()
}

fn remote(run: &RunRecord, span: &str) -> Option<Context> {
    let context = SpanContext::new(
        trace_id(run)?,
        SpanId::from_bytes(span_id_bytes(run.id.as_str(), span)),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    Some(Context::new().with_remote_span_context(context))
}

/// The context of the run's root span: an invoke naming the run is traced under it.
pub(crate) fn run_context(run: &RunRecord) -> Option<Context> {
    remote(run, "")
}

fn at(text: Option<&str>) -> Option<SystemTime> {
    let ms = rfc3339(text?)?;
    let ms = u64::try_from(ms.0).ok()?;
    Some(UNIX_EPOCH + Duration::from_millis(ms))
}

/// Exports each finished span (one with `endedAt`) as a span of the run's trace. A span is
/// exported when it is ingested finished; its start, sent earlier without an end, is not, so a
/// tracer that reports both yields one span.
pub(crate) fn export_run_spans(run: &RunRecord, spans: &[SpanRecord]) {
    let tracer = opentelemetry::global::tracer("steward.runs");
    let Some(trace) = trace_id(run) else { return };
    for s in spans {
        let d = &s.document;
        let Some(end) = at(d["endedAt"].as_str()) else {
            continue;
        };
        let start = at(d["startedAt"].as_str()).unwrap_or(end);
        let parent = s.parent_span_id.as_deref().unwrap_or("");
        let Some(parent_cx) = remote(run, parent) else {
            return;
        };
        let text = |field: &str| d[field].as_str().unwrap_or("").to_string();
        let builder = SpanBuilder::from_name(text("name"))
            .with_trace_id(trace)
            .with_span_id(SpanId::from_bytes(span_id_bytes(
                run.id.as_str(),
                &s.span_id,
            )))
            .with_start_time(start)
            .with_attributes(vec![
                KeyValue::new("steward.run.id", run.id.to_string()),
                KeyValue::new("steward.span.id", s.span_id.clone()),
                KeyValue::new("steward.span.type", text("type")),
                KeyValue::new("steward.span.status", text("status")),
            ]);
        let mut span = tracer.build_with_context(builder, &parent_cx);
        if d["status"] == "failed" {
            span.set_status(Status::error("failed"));
        }
        span.end_with_timestamp(end);
    }
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
