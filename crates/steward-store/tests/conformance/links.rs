//! Links between effects: recorded with the submission that makes them, read back both ways, and
//! kept out of an unlinked invocation's audit event.

use super::*;
use steward_core::link::Dependency;
use steward_core::Outcome;

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
