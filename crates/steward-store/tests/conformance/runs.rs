//! Runs, spans and feedback: a run reads back as written, ends once, lists newest first with
//! its filters, holds at most `spans_max` spans (a retry replaces by id), stays in its
//! environment, and every change is audited in its own transaction.

use super::*;
use steward_core::{FeedbackId, RunId};
use steward_store::{
    FeedbackRecord, RunBody, RunEnd, RunEndRefusal, RunFilter, RunRecord, RunStatus, SpanRecord,
    SpansIngested,
};

fn run_record(env: &Env, name: &str, user: Option<&str>, at: i64) -> RunRecord {
    RunRecord {
        id: RunId::from_unique(&unique("run").replace('-', "")),
        env_id: env.id.clone(),
        status: RunStatus::Running,
        name: Some(name.to_string()),
        agent_id: Some("bot".into()),
        user_id: user.map(str::to_string),
        trace_id: "ab".repeat(16),
        body: RunBody {
            tags: vec!["vip".into()],
            input: Some(json!({"q": name})),
            ..RunBody::default()
        },
        started_at: Millis(at),
        ended_at: None,
        updated_at: Millis(at),
    }
}

fn span(run: &RunRecord, id: &str, parent: Option<&str>, at: i64) -> SpanRecord {
    SpanRecord {
        run_id: run.id.clone(),
        span_id: id.to_string(),
        parent_span_id: parent.map(str::to_string),
        document: json!({"id": id, "name": id, "parentSpanId": parent}),
        created_at: Millis(at),
        updated_at: Millis(at),
    }
}

fn filter() -> RunFilter {
    RunFilter {
        limit: 50,
        ..RunFilter::default()
    }
}

pub async fn runs_spans_and_feedback_are_walled_and_audited(store: Arc<dyn Store>) {
    let env = Env::new(&store, "runs").await;
    let other = Env::new(&store, "runs-other").await;
    let first = run_record(&env, "Triage", Some("alice"), 2_000);
    let second = run_record(&env, "billing", Some("bob"), 3_000);
    for r in [&first, &second] {
        store
            .start_run(r, &env.actor(r.started_at.0))
            .await
            .expect("start_run");
    }
    let err = store
        .start_run(&first, &env.actor(3_500))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Duplicate { .. }), "{err:?}");
    assert_eq!(
        store.run(&env.id, &first.id).await.unwrap().as_ref(),
        Some(&first)
    );
    assert_eq!(
        store.run(&other.id, &first.id).await.unwrap(),
        None,
        "walled"
    );

    let ids = |runs: Vec<RunRecord>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    let all = store.list_runs(&env.id, &filter()).await.unwrap();
    assert_eq!(
        ids(all),
        vec![second.id.clone(), first.id.clone()],
        "newest first"
    );
    let by_user = RunFilter {
        user_id: Some("alice".into()),
        ..filter()
    };
    assert_eq!(
        ids(store.list_runs(&env.id, &by_user).await.unwrap()),
        vec![first.id.clone()]
    );
    let search = RunFilter {
        search: Some("TRI".into()),
        ..filter()
    };
    assert_eq!(
        ids(store.list_runs(&env.id, &search).await.unwrap()),
        vec![first.id.clone()]
    );
    let window = RunFilter {
        started_after: Some(Millis(2_500)),
        started_before: Some(Millis(3_500)),
        ..filter()
    };
    assert_eq!(
        ids(store.list_runs(&env.id, &window).await.unwrap()),
        vec![second.id.clone()]
    );
    let page = RunFilter {
        limit: 1,
        offset: 1,
        ..filter()
    };
    assert_eq!(
        ids(store.list_runs(&env.id, &page).await.unwrap()),
        vec![first.id.clone()]
    );
    assert!(store
        .list_runs(&other.id, &filter())
        .await
        .unwrap()
        .is_empty());

    // Spans: created, then replaced by id; past the bound nothing is written.
    let stored = store
        .ingest_spans(
            &env.id,
            &first.id,
            &[
                span(&first, "a", None, 4_000),
                span(&first, "b", Some("a"), 4_000),
            ],
            3,
            &env.actor(4_000),
        )
        .await
        .unwrap();
    assert_eq!(
        stored,
        SpansIngested::Stored {
            created: 2,
            replaced: 0
        }
    );
    let mut b = span(&first, "b", Some("a"), 4_100);
    b.document["status"] = json!("succeeded");
    let again = store
        .ingest_spans(
            &env.id,
            &first.id,
            &[b.clone(), span(&first, "c", Some("b"), 4_100)],
            3,
            &env.actor(4_100),
        )
        .await
        .unwrap();
    assert_eq!(
        again,
        SpansIngested::Stored {
            created: 1,
            replaced: 1
        }
    );
    let over = store
        .ingest_spans(
            &env.id,
            &first.id,
            &[span(&first, "d", None, 4_200)],
            3,
            &env.actor(4_200),
        )
        .await
        .unwrap();
    assert_eq!(over, SpansIngested::TooMany { existing: 3 });
    let spans = store.spans(&env.id, &first.id).await.unwrap();
    let order: Vec<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    assert_eq!(
        order,
        ["a", "b", "c"],
        "first-ingest order, nothing of the refused batch"
    );
    assert_eq!(spans[1].document["status"], "succeeded");
    assert_eq!(
        spans[1].created_at,
        Millis(4_000),
        "a replacement keeps its first ingest time"
    );
    assert!(store.spans(&other.id, &first.id).await.unwrap().is_empty());
    let err = store
        .ingest_spans(
            &other.id,
            &first.id,
            &[span(&first, "x", None, 1)],
            3,
            &other.actor(4_300),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");

    // Feedback.
    let feedback = FeedbackRecord {
        id: FeedbackId::from_unique(&unique("fb").replace('-', "")),
        env_id: env.id.clone(),
        run_id: first.id.clone(),
        span_id: Some("b".into()),
        document: json!({"rating": 1}),
        created_at: Millis(5_000),
    };
    store
        .add_feedback(&feedback, &env.actor(5_000))
        .await
        .unwrap();
    assert_eq!(
        store.feedback(&env.id, &first.id).await.unwrap(),
        vec![feedback.clone()]
    );
    assert!(store
        .feedback(&other.id, &first.id)
        .await
        .unwrap()
        .is_empty());
    let mut foreign = feedback.clone();
    foreign.id = FeedbackId::from_unique(&unique("fb").replace('-', ""));
    foreign.env_id = other.id.clone();
    let err = store
        .add_feedback(&foreign, &other.actor(5_100))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");

    // Ending: once; an update keeps it running.
    let update = RunEnd {
        metadata: Some(json!({"step": 1})),
        ..RunEnd::default()
    };
    let updated = store
        .end_run(&env.id, &first.id, &update, &env.actor(6_000))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(updated.status, RunStatus::Running);
    let end = RunEnd {
        status: Some(RunStatus::Failed),
        error: Some(json!({"m": "x"})),
        ..RunEnd::default()
    };
    let ended = store
        .end_run(&env.id, &first.id, &end, &env.actor(7_000))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (ended.status, ended.ended_at),
        (RunStatus::Failed, Some(Millis(7_000)))
    );
    assert_eq!(ended.body.metadata, Some(json!({"step": 1})));
    assert_eq!(
        store.run(&env.id, &first.id).await.unwrap(),
        Some(ended.clone())
    );
    let twice = store
        .end_run(&env.id, &first.id, &end, &env.actor(8_000))
        .await
        .unwrap();
    assert_eq!(
        twice,
        Err(RunEndRefusal::AlreadyEnded {
            status: RunStatus::Failed
        })
    );
    let err = store
        .end_run(&other.id, &first.id, &end, &other.actor(8_000))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");

    // No invocation or approval names the run yet.
    let (invocations, approvals) = store.run_timeline(&env.id, &first.id).await.unwrap();
    assert!(invocations.is_empty() && approvals.is_empty());

    // Audited: started, updated, ended, spans, feedback; never the refused changes.
    let events: Vec<(String, Value)> = all_audit_events(&store)
        .await
        .into_iter()
        .filter(|e| e.subject == first.id.as_str())
        .map(|e| (e.kind, e.after.unwrap_or(Value::Null)))
        .collect();
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "run.started",
            "run.spans_ingested",
            "run.spans_ingested",
            "run.feedback_added",
            "run.updated",
            "run.ended"
        ]
    );
    let ended_event = &events[5].1;
    assert_eq!(ended_event["runId"], json!(first.id));
    assert_eq!(ended_event["name"], "Triage");
    assert_eq!(ended_event["status"], "failed");
}
