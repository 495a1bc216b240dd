//! The run endpoints' views (`steward_wire`), built from the store's records: a run, a span
//! (whole, or as a page lists it with its large fields elided), the span tree, feedback and
//! the run's approvals.

use crate::api::bounded;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashSet};
use steward_core::RunId;
use steward_store::{FeedbackRecord, RunApproval, RunRecord, SpanOutline, SpanRecord};
use steward_wire as wire;

/// How deep the span tree of `GET /runs/{id}` nests, in levels; deeper spans are listed in
/// `spans` but not nested further. Sixty-four levels of recursion is a few KiB of stack.
pub const SPAN_TREE_DEPTH_MAX: usize = 64;

pub fn run(r: &RunRecord) -> wire::Run {
    let b = &r.body;
    wire::Run {
        id: r.id.clone(),
        name: r.name.clone(),
        status: r.status.as_str().to_string(),
        agent_id: r.agent_id.clone(),
        agent_version: b.agent_version.clone(),
        user_id: r.user_id.clone(),
        application: b.application.clone(),
        tags: b.tags.clone(),
        input: b.input.clone(),
        output: b.output.clone(),
        error: b.error.clone(),
        tokens: b.tokens,
        cost: b.cost,
        metadata: b.metadata.clone(),
        trace_id: r.trace_id.clone(),
        started_at: r.started_at.to_rfc3339(),
        ended_at: r.ended_at.map(|t| t.to_rfc3339()),
        updated_at: r.updated_at.to_rfc3339(),
        elided_fields: None,
    }
}

/// The bytes of the run's fields with its `approvals` beside them, as one JSON object: what
/// the run read measures its own part by before sharing the rest of the bound.
pub fn run_and_approvals_len(run: &wire::Run, approvals: &[wire::RunApproval]) -> usize {
    // The run is a non-empty object: `approvals` adds `,"approvals":` and the list.
    bounded::view_len(run) + r#","approvals":"#.len() + bounded::view_len(approvals)
}

/// Marks each of `fields` (named, in the order given) that holds the store's elision marker
/// as the wire's, reading the record whole at `href`, and returns the names of those marked.
fn mark_elided<'a>(
    fields: impl IntoIterator<Item = (&'static str, &'a mut Option<Value>)>,
    href: &str,
) -> Option<Vec<String>> {
    let elided: Vec<String> = fields
        .into_iter()
        .filter_map(|(name, value)| {
            let marked = value
                .as_mut()
                .is_some_and(|v| bounded::mark_elided_field(v, href));
            marked.then(|| name.to_string())
        })
        .collect();
    (!elided.is_empty()).then_some(elided)
}

/// A run as `GET /runs` lists it: a large `input`, `output`, `error` or `metadata` elided.
pub fn listed_run(r: &RunRecord) -> wire::Run {
    let mut view = run(r);
    let href = format!("/api/v2/runs/{}", r.id);
    // In the order of the field names, as the elided fields were always named.
    view.elided_fields = mark_elided(
        [
            ("error", &mut view.error),
            ("input", &mut view.input),
            ("metadata", &mut view.metadata),
            ("output", &mut view.output),
        ],
        &href,
    );
    view
}

/// A field of a span's document that holds text.
fn text(document: &mut Map<String, Value>, field: &str) -> Option<String> {
    match document.remove(field) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

/// A field of a span's document that holds any JSON (`null` is none).
fn any(document: &mut Map<String, Value>, field: &str) -> Option<Value> {
    document.remove(field).filter(|v| !v.is_null())
}

/// A span, whole: its document as ingested, with the run and its times.
pub fn span(s: SpanRecord) -> wire::Span {
    let mut d = match s.document {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    wire::Span {
        id: text(&mut d, "id").unwrap_or(s.span_id),
        parent_span_id: text(&mut d, "parentSpanId"),
        name: text(&mut d, "name"),
        kind: text(&mut d, "type"),
        status: text(&mut d, "status"),
        started_at: text(&mut d, "startedAt"),
        ended_at: text(&mut d, "endedAt"),
        input: any(&mut d, "input"),
        output: any(&mut d, "output"),
        error: any(&mut d, "error"),
        attributes: any(&mut d, "attributes"),
        metadata: any(&mut d, "metadata"),
        tokens: any(&mut d, "tokens"),
        cost: d.get("cost").and_then(Value::as_f64),
        model: text(&mut d, "model"),
        run_id: s.run_id,
        ingested_at: s.created_at.to_rfc3339(),
        updated_at: s.updated_at.to_rfc3339(),
        elided_fields: None,
    }
}

/// The path that reads one span of a run alone and whole.
pub fn span_href(run: &RunId, span: &str) -> String {
    let span: String = form_urlencoded::byte_serialize(span.as_bytes()).collect();
    format!("/api/v2/runs/{run}/spans/{span}")
}

/// A span as a page of spans shows it: its large fields elided, each a link to the span alone.
pub fn listed_span(s: SpanRecord) -> wire::Span {
    let href = span_href(&s.run_id, &s.span_id);
    let mut view = span(s);
    // Only the fields that hold documents can be longer than the elision bound: the others
    // are bounded well below it when a span is ingested. In the order of the field names.
    view.elided_fields = mark_elided(
        [
            ("attributes", &mut view.attributes),
            ("error", &mut view.error),
            ("input", &mut view.input),
            ("metadata", &mut view.metadata),
            ("output", &mut view.output),
            ("tokens", &mut view.tokens),
        ],
        &href,
    );
    view
}

/// The spans as a forest of outlines (id, parent, name, type, status, size and the link to
/// read the span whole), each with its `children`; roots first in ingest order. A span whose
/// parent is not (yet) in the run is a root. Built from a map of parent to children in
/// O(n log n), never a scan per node.
pub fn tree(run: &RunId, spans: &[SpanOutline]) -> Vec<wire::SpanNode> {
    let known: HashSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    let mut children: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let mut roots = Vec::new();
    for (i, s) in spans.iter().enumerate() {
        match s.parent_span_id.as_deref() {
            Some(p) if known.contains(p) => children.entry(p).or_default().push(i),
            _ => roots.push(i),
        }
    }
    // Ids are unique within a run and a span is never its own parent, but a client can still
    // send a cycle (a -> b -> a): its spans are no one's descendants and show in no tree;
    // `spans` lists them. Depth also stops at SPAN_TREE_DEPTH_MAX.
    fn node(
        run: &RunId,
        spans: &[SpanOutline],
        children: &BTreeMap<&str, Vec<usize>>,
        at: usize,
        depth: usize,
    ) -> wire::SpanNode {
        let s = &spans[at];
        let kids: Vec<wire::SpanNode> = if depth < SPAN_TREE_DEPTH_MAX {
            children
                .get(s.span_id.as_str())
                .map(|list| {
                    list.iter()
                        .map(|&i| node(run, spans, children, i, depth + 1))
                        .collect()
                })
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        wire::SpanNode {
            id: s.span_id.clone(),
            parent_span_id: s.parent_span_id.clone(),
            name: s.name.clone(),
            kind: s.kind.clone(),
            status: s.status.clone(),
            bytes: s.bytes,
            href: span_href(run, &s.span_id),
            children: kids,
        }
    }
    roots
        .into_iter()
        .map(|i| node(run, spans, &children, i, 0))
        .collect()
}

pub fn approval(a: &RunApproval) -> wire::RunApproval {
    wire::RunApproval {
        id: a.id.clone(),
        status: a.status.clone(),
        title: a.title.clone(),
        invocation_id: a.invocation_id.clone(),
        created_at: a.created_at.to_rfc3339(),
        decided_at: a.decided_at.map(|t| t.to_rfc3339()),
    }
}

pub fn feedback(f: &FeedbackRecord) -> wire::Feedback {
    let d = &f.document;
    let text = |field: &str| d.get(field).and_then(Value::as_str).map(str::to_string);
    wire::Feedback {
        id: f.id.clone(),
        run_id: f.run_id.clone(),
        span_id: f.span_id.clone(),
        source: text("source"),
        label: text("label"),
        rating: d.get("rating").and_then(Value::as_f64),
        comment: text("comment"),
        metadata: d.get("metadata").filter(|v| !v.is_null()).cloned(),
        created_at: f.created_at.to_rfc3339(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use steward_core::Millis;

    fn outline(seq: i64, id: &str, parent: Option<&str>) -> SpanOutline {
        SpanOutline {
            seq,
            span_id: id.to_string(),
            parent_span_id: parent.map(str::to_string),
            name: Some(id.to_string()),
            kind: None,
            status: None,
            bytes: 10,
        }
    }

    fn count(nodes: &[wire::SpanNode]) -> usize {
        nodes.iter().map(|n| 1 + count(&n.children)).sum()
    }

    fn run_id() -> RunId {
        RunId::from_unique("views")
    }

    #[test]
    fn the_tree_nests_by_parent_keeps_ingest_order_and_orphans_are_roots() {
        let run = run_id();
        let spans = [
            outline(0, "root", None),
            outline(1, "b", Some("root")),
            outline(2, "a", Some("root")),
            outline(3, "leaf", Some("b")),
            outline(4, "orphan", Some("not-here")),
        ];
        let forest = tree(&run, &spans);
        let ids: Vec<&str> = forest.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(ids, ["root", "orphan"]);
        let kids: Vec<&str> = forest[0].children.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(kids, ["b", "a"], "ingest order, not id order");
        assert_eq!(forest[0].children[0].children[0].id, "leaf");
        assert_eq!(forest[0].href, format!("/api/v2/runs/{run}/spans/root"));
        let node = serde_json::to_value(&forest[0]).unwrap();
        assert!(node.get("input").is_none(), "outlines carry no content");
    }

    /// Ten thousand spans (the per-run bound) in a wide and a deep shape: every span appears
    /// once, a chain stops nesting at the depth bound, and a cycle is in no tree.
    #[test]
    fn ten_thousand_spans_build_once_each_and_cycles_and_depth_stay_bounded() {
        let run = run_id();
        let wide: Vec<SpanOutline> = (0..10_000)
            .map(|i| outline(i, &format!("s{i}"), None))
            .collect();
        let started = std::time::Instant::now();
        assert_eq!(count(&tree(&run, &wide)), 10_000);
        // A scan per node (the old O(n^2) build) took most of a second here in a release
        // build; the map takes milliseconds. Generous for a loaded debug build.
        assert!(started.elapsed() < std::time::Duration::from_secs(5));

        let chain: Vec<SpanOutline> = (0..200)
            .map(|i| {
                let parent = (i > 0).then(|| format!("c{}", i - 1));
                outline(i, &format!("c{i}"), parent.as_deref())
            })
            .collect();
        let forest = tree(&run, &chain);
        assert_eq!(count(&forest), SPAN_TREE_DEPTH_MAX + 1);

        let cycle = [outline(0, "x", Some("y")), outline(1, "y", Some("x"))];
        assert!(tree(&run, &cycle).is_empty());
    }

    fn record() -> RunRecord {
        let at = Millis(1_767_225_600_000);
        RunRecord {
            id: run_id(),
            env_id: steward_core::EnvironmentId::from_unique("e"),
            status: steward_store::RunStatus::Running,
            name: Some("n".into()),
            agent_id: None,
            user_id: Some("u".into()),
            trace_id: "0".repeat(32),
            body: steward_store::RunBody {
                tags: vec!["t".into()],
                input: Some(steward_store::elision_marker(20_000)),
                output: Some(json!({"a": 1})),
                cost: Some(0.5),
                ..steward_store::RunBody::default()
            },
            started_at: at,
            ended_at: None,
            updated_at: at,
        }
    }

    /// A listed run elides as the `json!` view did (`bounded::mark_elided` over its fields),
    /// and the run read measures its own part by the same bytes as before.
    #[test]
    fn a_listed_run_elides_and_measures_as_the_json_view_did() {
        let r = record();
        let href = format!("/api/v2/runs/{}", r.id);
        let mut expected = serde_json::to_value(run(&r)).unwrap();
        bounded::mark_elided(&mut expected, &href);
        assert_eq!(serde_json::to_value(listed_run(&r)).unwrap(), expected);
        assert_eq!(expected["elidedFields"], json!(["input"]));

        let approvals = vec![wire::RunApproval {
            id: "apr_1".into(),
            status: "pending".into(),
            title: "t".into(),
            invocation_id: None,
            created_at: "2026-01-01T00:00:00.000Z".into(),
            decided_at: None,
        }];
        let mut old = serde_json::to_value(run(&r)).unwrap();
        old["approvals"] = serde_json::to_value(&approvals).unwrap();
        assert_eq!(
            run_and_approvals_len(&run(&r), &approvals),
            steward_store::json_len(&old)
        );
    }

    /// The typed span is the stored document with the run's fields, key for key (what the
    /// `json!` view wrote), and a page elides its large fields the same way.
    #[test]
    fn a_span_view_is_its_document_with_the_runs_fields() {
        let document = json!({
            "id": "llm", "parentSpanId": "root", "name": "llm", "type": "model_call",
            "status": "succeeded", "startedAt": "2026-01-01T00:00:00Z", "endedAt": null,
            "input": {"prompt": "p"}, "output": {"$elided": 20000}, "error": null,
            "attributes": null, "metadata": null, "tokens": 3, "cost": 0.5, "model": "m",
        });
        let at = Millis(1_767_225_600_000);
        let record = SpanRecord {
            run_id: run_id(),
            span_id: "llm".into(),
            parent_span_id: Some("root".into()),
            document: document.clone(),
            created_at: at,
            updated_at: at,
        };
        let mut expected = document;
        expected["runId"] = json!(run_id());
        expected["ingestedAt"] = json!(at.to_rfc3339());
        expected["updatedAt"] = json!(at.to_rfc3339());
        let whole = serde_json::to_value(span(record.clone())).unwrap();
        assert_eq!(whole, expected);

        let listed = serde_json::to_value(listed_span(record)).unwrap();
        let href = format!("/api/v2/runs/{}/spans/llm", run_id());
        assert_eq!(
            listed["output"],
            json!({"elided": true, "bytes": 20000, "href": href})
        );
        assert_eq!(listed["elidedFields"], json!(["output"]));
        assert_eq!(listed["input"], json!({"prompt": "p"}));
    }
}
