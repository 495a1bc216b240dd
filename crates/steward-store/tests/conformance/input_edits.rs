//! Edit-and-approve: an approver's edit of a parked invocation's input is recorded beside the
//! input as sent, clears the ballots, refuses its editor's approval, and is what the released
//! invocation carries; the operation key still names the invocation by the input as sent.

use super::*;
use steward_core::{fingerprint, ApprovalId, ApprovalStatus, InvocationStatus};
use steward_store::{DecideOutcome, DecisionRequest, EditOutcome, EditRequest};

fn edit_request(
    env: &Env,
    approval: &ApprovalId,
    key: &KeyId,
    input: Value,
    at: i64,
) -> EditRequest {
    EditRequest {
        env_id: env.id.clone(),
        approval_id: approval.clone(),
        key: key.clone(),
        input_fingerprint: fingerprint(&input),
        input,
        note: Some("a tenth of it".into()),
        now: Millis(at),
    }
}

fn ballot(
    env: &Env,
    approval: &ApprovalId,
    key: &KeyId,
    at: i64,
    seen: Option<&str>,
) -> DecisionRequest {
    let mut request = approve(env, approval, key, &writer(), at);
    request.seen = seen.map(str::to_string);
    request
}

pub async fn an_edit_is_recorded_beside_the_input_and_needs_another_approver(
    store: Arc<dyn Store>,
) {
    let env = Env::new(&store, "edit").await;
    let action = env.create_action(refund_definition("refund")).await;
    let sent = json!({"n": 5000});
    let key = op(&unique("edit"));
    let mut sub = env.submission(&action, sent.clone());
    sub.operation_key = Some(key.clone());
    sub.initial = EffectState::AwaitingApproval;
    sub.approval = Some(steward_store::NewApproval {
        id: ApprovalId::from_unique(&unique("apr")),
        title: "approve the refund".into(),
        description: None,
        payload: json!({"action": "refund", "input": sent}),
        required_approvals: 2,
        expires_at: None,
        run_id: None,
    });
    let parked = expect_created(store.submit(&sub).await.expect("submit"));
    let approval = ApprovalId::parse(parked.approval_id.as_deref().expect("approval id"))
        .expect("approval id");
    let (first, editor, other, third) = (
        KeyId::from_unique(&unique("approver")),
        KeyId::from_unique(&unique("editor")),
        KeyId::from_unique(&unique("approver")),
        KeyId::from_unique(&unique("approver")),
    );
    // One approval of two on the input as sent.
    let done = store
        .decide_and_begin(&ballot(&env, &approval, &first, 2_000, None), None)
        .await
        .expect("decide");
    assert!(matches!(
        done.outcome,
        DecideOutcome::Recorded { ready: None, .. }
    ));

    // The requester never edits its own request.
    let edited = json!({"n": 500});
    let own = edit_request(&env, &approval, &env.key, edited.clone(), 2_500);
    assert!(matches!(
        store.edit_approval(&own).await.expect("edit"),
        EditOutcome::SelfDecision
    ));
    // An edit to the input it holds changes nothing.
    let same = edit_request(&env, &approval, &editor, sent.clone(), 2_500);
    assert!(matches!(
        store.edit_approval(&same).await.expect("edit"),
        EditOutcome::SameInput(_)
    ));

    let request = edit_request(&env, &approval, &editor, edited.clone(), 3_000);
    let EditOutcome::Edited {
        approval: answered,
        invocation,
    } = store.edit_approval(&request).await.expect("edit")
    else {
        panic!("the edit is recorded");
    };
    assert_eq!(answered, read_approval(&env, &approval).await);
    assert_eq!(answered.status, ApprovalStatus::Pending);
    assert!(
        answered.decisions.is_empty(),
        "the ballots start again on the edit"
    );
    assert_eq!(
        answered.input_fingerprint.as_deref(),
        Some(fingerprint(&edited).as_str())
    );
    let approval_edit = answered.edit.clone().expect("the approval keeps the edit");
    assert_eq!(approval_edit.by, editor);
    assert_eq!(approval_edit.original_fingerprint, parked.input_fingerprint);
    assert_eq!(answered.payload["input"], edited);
    assert_eq!(answered.payload["originalInput"], sent);
    // The invocation keeps the input as sent (its operation key's identity) beside the edit.
    let read = env.invocation(&parked.id).await;
    assert_eq!(*invocation, read);
    assert_eq!(read.input, sent);
    assert_eq!(read.input_fingerprint, parked.input_fingerprint);
    let edit = read.edit.clone().expect("the invocation carries the edit");
    assert_eq!((&edit.input, &edit.by), (&edited, &editor));
    assert_eq!(edit.input_fingerprint, fingerprint(&edited));
    assert_eq!(read.dispatch_input(), &edited);
    assert_eq!(read.state, EffectState::AwaitingApproval);

    // The editor's approval counts for nothing on its own edit.
    let done = store
        .decide_and_begin(&ballot(&env, &approval, &editor, 4_000, None), None)
        .await
        .expect("decide");
    assert!(matches!(done.outcome, DecideOutcome::OwnEdit));
    // An approval cast on the input as sent is refused: it did not see the edit.
    let stale = ballot(
        &env,
        &approval,
        &other,
        4_000,
        Some(&parked.input_fingerprint),
    );
    let done = store.decide_and_begin(&stale, None).await.expect("decide");
    assert!(matches!(done.outcome, DecideOutcome::InputChanged(_)));
    assert!(read_approval(&env, &approval).await.decisions.is_empty());

    // Two approvals of the edit by others release the invocation, with the edit.
    let seen = fingerprint(&edited);
    let done = store
        .decide_and_begin(&ballot(&env, &approval, &other, 5_000, Some(&seen)), None)
        .await
        .expect("decide");
    assert!(matches!(
        done.outcome,
        DecideOutcome::Recorded { ready: None, .. }
    ));
    let done = store
        .decide_and_begin(&ballot(&env, &approval, &third, 6_000, Some(&seen)), None)
        .await
        .expect("decide");
    let DecideOutcome::Recorded {
        approval: settled,
        ready: Some(ready),
    } = done.outcome
    else {
        panic!(
            "the second approval of the edit releases it: {:?}",
            done.outcome
        );
    };
    assert_eq!(settled.status, ApprovalStatus::Approved);
    assert_eq!(ready.dispatch_input(), &edited);
    assert_eq!(ready.input, sent);

    // A resubmission of the operation key with the input as sent finds the same invocation,
    // edit and all; the edited input under that key is another input.
    let mut again = env.submission(&action, sent.clone());
    again.operation_key = Some(key.clone());
    match store.submit(&again).await.expect("submit") {
        steward_store::SubmitOutcome::Existing(found) => {
            assert_eq!(found.id, parked.id);
            assert_eq!(found.edit.map(|e| e.input), Some(edited.clone()));
        }
        other => panic!("expected the existing invocation, got {other:?}"),
    }
    let mut other_input = env.submission(&action, edited.clone());
    other_input.operation_key = Some(key);
    assert!(matches!(
        store.submit(&other_input).await.expect("submit"),
        steward_store::SubmitOutcome::OperationKeyConflict { .. }
    ));

    // A settled approval takes no edit; the audit log has the edit.
    let late = edit_request(&env, &approval, &other, json!({"n": 1}), 7_000);
    assert!(matches!(
        store.edit_approval(&late).await.expect("edit"),
        EditOutcome::Unchanged(_)
    ));
}

/// A custom request gates no invocation: there is nothing to edit. An edit of an approval that
/// ran out expires it instead.
pub async fn a_custom_request_takes_no_edit_and_an_expired_one_expires(store: Arc<dyn Store>) {
    let env = Env::new(&store, "edit-custom").await;
    let custom = steward_store::NewApproval {
        id: ApprovalId::from_unique(&unique("apr")),
        title: "ship it".into(),
        description: None,
        payload: json!({}),
        required_approvals: 1,
        expires_at: None,
        run_id: None,
    };
    store
        .create_approval(&env.id, &custom, &env.key, T0)
        .await
        .expect("create_approval");
    let editor = KeyId::from_unique(&unique("editor"));
    let request = edit_request(&env, &custom.id, &editor, json!({"n": 1}), 2_000);
    assert!(matches!(
        store.edit_approval(&request).await.expect("edit"),
        EditOutcome::NotEditable(_)
    ));

    let action = env.create_action(refund_definition("refund")).await;
    let (parked, approval) = park(&env, &action, json!({"n": 1}), 1, Some(Millis(5_000))).await;
    let request = edit_request(&env, &approval, &editor, json!({"n": 2}), 5_000);
    let EditOutcome::Expired(expired) = store.edit_approval(&request).await.expect("edit") else {
        panic!("an approval that ran out expires");
    };
    assert_eq!(expired.status, ApprovalStatus::Expired);
    let read = env.invocation(&parked.id).await;
    assert_eq!(read.edit, None);
    assert_eq!(read.state.invocation_status(), InvocationStatus::Expired);
}
