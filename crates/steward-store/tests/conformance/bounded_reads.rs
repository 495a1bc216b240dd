//! Large fields stay out of lists: an invocation's input longer than
//! `LISTED_FIELD_BYTES_MAX` is listed as its elision marker and read whole alone; a span's large
//! fields are elided in a page of spans, its outline carries no content, pages follow ingest
//! order by place, and the single-span read is whole. Both backends count the same bytes.

use super::*;
use steward_core::RunId;
use steward_store::{
    elided_bytes, RunBody, RunFilter, RunRecord, RunStatus, SpanRecord, LISTED_FIELD_BYTES_MAX,
};

pub async fn large_fields_are_elided_from_lists_and_read_whole_alone(store: Arc<dyn Store>) {
    let env = Env::new(&store, "bounded").await;
    let action = env.create_action(template_definition("lookup")).await;
    let big = json!({"blob": "x".repeat(LISTED_FIELD_BYTES_MAX)});
    let big_bytes = big.to_string().len() as u64;
    let large = expect_created(
        store
            .submit(&env.submission(&action, big.clone()))
            .await
            .expect("submit"),
    );
    let mut small_sub = env.submission(&action, json!({"blob": "small"}));
    small_sub.now = Millis(T0.0 + 1);
    let small = expect_created(store.submit(&small_sub).await.expect("submit"));

    let listed = store
        .list_invocations(&env.id, &invocations_of(&action))
        .await
        .expect("list");
    let by_id = |id| listed.items.iter().find(|i| &i.id == id).expect("listed");
    assert_eq!(elided_bytes(&by_id(&large.id).input), Some(big_bytes));
    assert_eq!(by_id(&small.id).input, json!({"blob": "small"}));
    let whole = store
        .invocation(&env.id, &large.id)
        .await
        .expect("read")
        .expect("found");
    assert_eq!(whole.input, big, "stored whole, read whole alone");

    let run = RunRecord {
        id: RunId::from_unique(&unique("run").replace('-', "")),
        env_id: env.id.clone(),
        status: RunStatus::Running,
        name: Some("bounded".into()),
        agent_id: None,
        user_id: None,
        trace_id: "cd".repeat(16),
        body: RunBody {
            agent_version: Some("v".repeat(LISTED_FIELD_BYTES_MAX + 1)),
            input: Some(big.clone()),
            output: Some(json!("done")),
            ..RunBody::default()
        },
        started_at: T0,
        ended_at: None,
        updated_at: T0,
    };
    store
        .start_run(&run, &env.actor(T0.0))
        .await
        .expect("start_run");
    let listed = store
        .list_runs(
            &env.id,
            &RunFilter {
                limit: 10,
                ..RunFilter::default()
            },
        )
        .await
        .expect("list_runs");
    let body = &listed[0].body;
    assert_eq!(elided_bytes(body.input.as_ref().unwrap()), Some(big_bytes));
    assert_eq!(body.output, Some(json!("done")));
    assert_eq!(
        body.agent_version, run.body.agent_version,
        "only documents are elided"
    );
    assert_eq!(
        store.run(&env.id, &run.id).await.expect("run").as_ref(),
        Some(&run),
        "read whole alone"
    );
    let span = |id: &str, parent: Option<&str>, input: Value| SpanRecord {
        run_id: run.id.clone(),
        span_id: id.to_string(),
        parent_span_id: parent.map(str::to_string),
        document: json!({"id": id, "name": format!("step {id}"), "type": "tool_call",
                         "status": "succeeded", "input": input, "output": {"ok": true}}),
        created_at: T0,
        updated_at: T0,
    };
    let spans = vec![
        span("a", None, big.clone()),
        span("b", Some("a"), json!("small")),
        span("c", Some("a"), big.clone()),
    ];
    store
        .ingest_spans(&env.id, &run.id, &spans, 100, &env.actor(T0.0))
        .await
        .expect("ingest");

    let outlines = store
        .span_outlines(&env.id, &run.id)
        .await
        .expect("outlines");
    let ids: Vec<&str> = outlines.iter().map(|o| o.span_id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"], "ingest order");
    assert_eq!(outlines[1].parent_span_id.as_deref(), Some("a"));
    assert_eq!(outlines[0].name.as_deref(), Some("step a"));
    assert_eq!(outlines[0].kind.as_deref(), Some("tool_call"));
    assert_eq!(outlines[0].status.as_deref(), Some("succeeded"));
    assert_eq!(
        outlines[0].bytes,
        spans[0].document.to_string().len() as u64
    );

    let first = store
        .span_page(&env.id, &run.id, None, 2)
        .await
        .expect("page");
    assert_eq!(first.len(), 2);
    let (_, a) = &first[0];
    assert_eq!(elided_bytes(&a.document["input"]), Some(big_bytes));
    assert_eq!(
        a.document["output"],
        json!({"ok": true}),
        "small fields stay"
    );
    assert_eq!(a.document["name"], "step a");
    assert_eq!(first[1].1.document["input"], "small");
    let rest = store
        .span_page(&env.id, &run.id, Some(first[1].0), 2)
        .await
        .expect("page");
    let rest_ids: Vec<&str> = rest.iter().map(|(_, s)| s.span_id.as_str()).collect();
    assert_eq!(rest_ids, ["c"], "the next page starts after the cursor");

    let whole = store
        .span(&env.id, &run.id, "c")
        .await
        .expect("span")
        .expect("found");
    assert_eq!(whole, spans[2]);
    let other = Env::new(&store, "bounded-other").await;
    assert_eq!(
        store.span(&other.id, &run.id, "c").await.expect("span"),
        None
    );
    assert!(store
        .span_page(&other.id, &run.id, None, 10)
        .await
        .expect("page")
        .is_empty());
    assert!(store
        .span_outlines(&other.id, &run.id)
        .await
        .expect("outlines")
        .is_empty());
}
