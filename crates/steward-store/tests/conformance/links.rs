//! Links between effects: recorded with the submission that makes them, read back both ways, and
//! kept out of an unlinked invocation's audit event.

use super::*;
use steward_core::link::Dependency;
use steward_core::{Outcome, PreviewId};
use steward_store::{PreviewRecord, StoreError, PREVIEW_BINDING};

pub async fn links_are_recorded_with_the_effect_and_read_both_ways(store: Arc<dyn Store>) {
    let env = Env::new(&store, "links").await;
    let action = env.create_action(refund_definition("refund")).await;

    let first = env.submission(&action, json!({"paymentIntent": "pi_1", "amount": 100}));
    expect_created(store.submit(&first).await.expect("submit"));
    let plain = env.effect(&first.effect_id).await;
    assert!(plain.links.is_empty(), "{:?}", plain.links);

    let other = env.submission(&action, json!({"paymentIntent": "pi_2", "amount": 100}));
    expect_created(store.submit(&other).await.expect("submit"));

    let mut linked = env.submission(&action, json!({"paymentIntent": "pi_1", "amount": -100}));
    linked.links.depends_on = vec![
        Dependency {
            effect: first.effect_id.clone(),
            outcome: Outcome::Succeeded,
        },
        Dependency {
            effect: other.effect_id.clone(),
            outcome: Outcome::Failed,
        },
    ];
    linked.links.compensates = Some(first.effect_id.clone());
    expect_created(store.submit(&linked).await.expect("submit linked"));

    let read = env.effect(&linked.effect_id).await.links;
    let mut wanted = linked.links.depends_on.clone();
    wanted.sort_by(|a, b| a.effect.as_str().cmp(b.effect.as_str()));
    assert_eq!(read.depends_on, wanted);
    assert_eq!(read.compensates.as_ref(), Some(&first.effect_id));
    assert!(read.compensated_by.is_empty());

    let target = env.effect(&first.effect_id).await.links;
    assert_eq!(target.compensated_by, vec![linked.effect_id.clone()]);
    assert!(target.depends_on.is_empty() && target.compensates.is_none());
    assert!(env
        .effect(&other.effect_id)
        .await
        .links
        .compensated_by
        .is_empty());

    // The audit event of the linked invocation records its links; an unlinked one has none.
    let events = all_audit_events(&store).await;
    let created = |id: &InvocationId| {
        events
            .iter()
            .find(|e| e.kind == "invocation.created" && e.subject == id.as_str())
            .and_then(|e| e.after.clone())
            .expect("invocation.created event")
    };
    let audited = created(&linked.invocation_id);
    assert_eq!(audited["links"]["compensates"], json!(first.effect_id));
    assert_eq!(
        audited["links"]["dependsOn"].as_array().map(Vec::len),
        Some(2)
    );
    assert!(created(&first.invocation_id).get("links").is_none());
}

/// A submission refused by the submission rules writes no links either.
pub async fn a_refused_submission_records_no_links(store: Arc<dyn Store>) {
    let env = Env::new(&store, "links-refused").await;
    let action = env.create_action(refund_definition("refund")).await;
    let mut first = env.submission(&action, json!({"paymentIntent": "pi_1", "amount": 1}));
    first.operation_key = Some(op("order-1"));
    expect_created(store.submit(&first).await.expect("submit"));

    let mut conflicting = env.submission(&action, json!({"paymentIntent": "pi_1", "amount": 2}));
    conflicting.operation_key = Some(op("order-1"));
    conflicting.links.compensates = Some(first.effect_id.clone());
    let outcome = store.submit(&conflicting).await.expect("submit");
    assert!(
        matches!(outcome, SubmitOutcome::OperationKeyConflict { .. }),
        "{outcome:?}"
    );
    assert!(env
        .effect(&first.effect_id)
        .await
        .links
        .compensated_by
        .is_empty());
}

fn preview_record(env: &Env, action: &ActionRecord, tag: &str) -> PreviewRecord {
    PreviewRecord {
        id: PreviewId::from_unique(&unique(tag)),
        env_id: env.id.clone(),
        action_id: action.id.clone(),
        action_name: action.name.clone(),
        action_version: action.version,
        input: json!({"paymentIntent": "pi_1", "amount": 5}),
        input_fingerprint: "fp".into(),
        request_digest: "digest".into(),
        body: json!({"request": {"method": "POST"}}),
        run_id: None,
        created_by: env.key.clone(),
        created_at: T0,
        expires_at: Millis(T0.0 + 60_000),
        refreshes: None,
        superseded_by: None,
        bound_effect: None,
    }
}

/// A preview is recorded and read back in its environment only; a refresh supersedes it once;
/// a submission binds it, at most one ever, and the effect reads it back.
pub async fn a_preview_binds_one_effect_and_is_refreshed_once(store: Arc<dyn Store>) {
    let env = Env::new(&store, "previews").await;
    let other = Env::new(&store, "previews-other").await;
    let action = env.create_action(refund_definition("refund")).await;
    let first = preview_record(&env, &action, "prv");
    store
        .create_preview(&first, &env.actor(T0.0))
        .await
        .expect("create_preview");
    assert_eq!(
        store.preview(&env.id, &first.id).await.expect("preview"),
        Some(first.clone())
    );
    assert_eq!(
        store.preview(&other.id, &first.id).await.expect("preview"),
        None
    );

    let mut second = preview_record(&env, &action, "prv");
    second.refreshes = Some(first.id.clone());
    assert!(store
        .refresh_preview(&second, &env.actor(T0.0))
        .await
        .expect("refresh"));
    let mut third = preview_record(&env, &action, "prv");
    third.refreshes = Some(first.id.clone());
    assert!(
        !store
            .refresh_preview(&third, &env.actor(T0.0))
            .await
            .expect("refresh again"),
        "a preview is superseded once"
    );
    assert_eq!(
        store.preview(&env.id, &third.id).await.expect("preview"),
        None
    );
    let read = store
        .preview(&env.id, &first.id)
        .await
        .expect("preview")
        .expect("first");
    assert_eq!(read.superseded_by.as_ref(), Some(&second.id));

    let mut bound = env.submission(&action, json!({"paymentIntent": "pi_1", "amount": 5}));
    bound.links.preview = Some(second.id.clone());
    expect_created(store.submit(&bound).await.expect("bind"));
    let detail = env.effect(&bound.effect_id).await;
    assert_eq!(detail.links.preview.as_ref(), Some(&second.id));
    assert_eq!(detail.preview.as_ref().map(|p| &p.id), Some(&second.id));
    let read = store
        .preview(&env.id, &second.id)
        .await
        .expect("preview")
        .expect("second");
    assert_eq!(read.bound_effect.as_ref(), Some(&bound.effect_id));

    let mut again = env.submission(&action, json!({"paymentIntent": "pi_1", "amount": 5}));
    again.links.preview = Some(second.id.clone());
    match store.submit(&again).await {
        Err(StoreError::Duplicate { what }) => assert_eq!(what, PREVIEW_BINDING),
        other => panic!("a second binding must be refused, got {other:?}"),
    }
    assert!(
        store
            .invocation(&env.id, &again.invocation_id)
            .await
            .expect("read")
            .is_none(),
        "the refused submission recorded nothing"
    );
}
