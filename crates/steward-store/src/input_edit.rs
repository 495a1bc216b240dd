//! Edit-and-approve: an approver corrects a parked invocation's input instead of denying it.
//!
//! The edit is recorded beside the input the caller sent, never over it: `input` and
//! `input_fingerprint` stay what the operation key was submitted with (a retry of that key with
//! that input finds the same invocation, invariant 2), while the edit (`InvocationRecord::edit`)
//! is what dispatch renders ([`InvocationRecord::dispatch_input`]). The approval's
//! `input_fingerprint`, what the approver sees and what runs, becomes the edit's; its
//! [`ApprovalEdit`] keeps the fingerprint it was requested with.
//!
//! An edit is not a decision: it clears the ballots cast so far (they were cast on the input
//! before it: N of M starts again on the edit) and leaves the approval pending, and the editor's
//! own ballot on it is refused ([`crate::DecideOutcome::OwnEdit`]), so an edited call runs only
//! once someone other than its requester and its editor approved exactly what it sends. The
//! audit log keeps the cleared ballots (`approval.decision`) and the edit (`approval.edited`).
//!
//! As for decisions, the backend reads, [`edit_step`] decides, and the backend writes what it
//! says, in one transaction with the approval's row locked.

use crate::audit_entry::{AuditEntry, AuditKind};
use crate::records::{ApprovalRecord, InvocationRecord};
use serde_json::{json, Value};
use steward_core::{ApprovalId, ApprovalStatus, EffectState, EnvironmentId, KeyId, Millis};

/// An approver's edit of a gated invocation's input, made while it awaited approval.
#[derive(Debug, Clone, PartialEq)]
pub struct InputEdit {
    /// The input as the approver edited it: what dispatch renders. In a list, an elision
    /// marker when longer than the listed field bound (as `input` is).
    pub input: Value,
    /// The canonical fingerprint of [`InputEdit::input`] (the edit's argument digest).
    pub input_fingerprint: String,
    /// The key that edited it.
    pub by: KeyId,
    pub at: Millis,
    /// Why, for the record.
    pub note: Option<String>,
}

/// What an approval keeps of the edit of its invocation's input.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalEdit {
    /// The key that edited it: its own ballot on the approval counts for nothing.
    pub by: KeyId,
    pub at: Millis,
    /// The fingerprint of the input the approval was requested with (before any edit).
    pub original_fingerprint: String,
}

/// One approver's edit, as `Approvals::edit_approval` takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct EditRequest {
    pub env_id: EnvironmentId,
    pub approval_id: ApprovalId,
    /// The editing key; never the one that requested the approval.
    pub key: KeyId,
    /// The edited input, checked against the action version's schema by the caller.
    pub input: Value,
    /// Its canonical fingerprint.
    pub input_fingerprint: String,
    pub note: Option<String>,
    pub now: Millis,
}

/// What an edit did.
#[derive(Debug, Clone)]
pub enum EditOutcome {
    /// Recorded: the approval (pending, its ballots cleared) and its invocation as the edit left
    /// them.
    Edited {
        approval: ApprovalRecord,
        invocation: Box<InvocationRecord>,
    },
    /// The approval is settled (or its invocation no longer parked): nothing changed.
    Unchanged(ApprovalRecord),
    /// The approval had run out; it is now expired and the edit was not recorded.
    Expired(ApprovalRecord),
    /// The approval is a custom request: there is no input to edit.
    NotEditable(ApprovalRecord),
    /// The edited input is the input the approval already holds.
    SameInput(ApprovalRecord),
    /// The editing key requested this approval.
    SelfDecision,
}

/// What a backend does with edit `r` on approval `a` (as read, locked, in the edit's
/// transaction), whose gated invocation is `parked` as read there.
#[derive(Debug)]
pub(crate) enum EditStep {
    /// Answer at once; nothing is written.
    Answer(Box<EditOutcome>),
    /// The approval ran out: expire it (and its effect), then answer with it.
    Expire,
    /// Write the edit ([`EditWrite`]).
    Write(Box<EditWrite>),
}

/// What a recorded edit writes.
#[derive(Debug)]
pub(crate) struct EditWrite {
    /// The invocation's `input_edit` column (the edit without its input, which goes in
    /// `edited_input`).
    pub invocation_edit: String,
    /// The approval's `edit` column.
    pub approval_edit: String,
    /// The approval's payload: `input` is the edit, `originalInput` the input as sent.
    pub payload: String,
    /// The `approval.edited` event.
    pub entry: AuditEntry,
}

/// The step for `r` on `a` (see [`EditStep`]).
pub(crate) fn edit_step(
    a: &ApprovalRecord,
    parked: Option<&InvocationRecord>,
    r: &EditRequest,
) -> EditStep {
    let answer = |outcome| EditStep::Answer(Box::new(outcome));
    if a.requested_by == r.key {
        return answer(EditOutcome::SelfDecision);
    }
    if a.status != ApprovalStatus::Pending {
        return answer(EditOutcome::Unchanged(a.clone()));
    }
    if a.expires_at.is_some_and(|t| t <= r.now) {
        return EditStep::Expire;
    }
    let Some(inv) = parked else {
        return answer(EditOutcome::NotEditable(a.clone()));
    };
    if inv.state != EffectState::AwaitingApproval {
        return answer(EditOutcome::Unchanged(a.clone()));
    }
    if a.input_fingerprint.as_deref() == Some(r.input_fingerprint.as_str()) {
        return answer(EditOutcome::SameInput(a.clone()));
    }
    let original = match &a.edit {
        Some(edit) => edit.original_fingerprint.clone(),
        None => inv.input_fingerprint.clone(),
    };
    let invocation_edit = json!({
        "inputFingerprint": r.input_fingerprint,
        "by": r.key,
        "at": r.now.0,
        "note": r.note,
    });
    let approval_edit = json!({
        "by": r.key,
        "at": r.now.0,
        "originalFingerprint": original,
    });
    let mut payload = a.payload.clone();
    if let Value::Object(map) = &mut payload {
        map.insert("originalInput".into(), inv.input.clone());
        map.insert("input".into(), r.input.clone());
    }
    let entry = AuditEntry::new(
        AuditKind::ApprovalEdited,
        r.env_id.as_str(),
        r.approval_id.as_str(),
    )
    .before(json!({
        "inputFingerprint": a.input_fingerprint,
        "decisions": a.decisions.len(),
    }))
    .after(json!({
        "inputFingerprint": r.input_fingerprint,
        "originalFingerprint": original,
        "note": r.note,
        "decisions": 0,
    }));
    EditStep::Write(Box::new(EditWrite {
        invocation_edit: invocation_edit.to_string(),
        approval_edit: approval_edit.to_string(),
        payload: payload.to_string(),
        entry,
    }))
}

/// The invocation's edit from its `edited_input` and `input_edit` columns (both set, or both
/// `NULL`).
pub(crate) fn decode_invocation_edit(
    input: Option<Value>,
    meta: Option<&str>,
) -> Result<Option<InputEdit>, String> {
    let (Some(input), Some(meta)) = (input, meta) else {
        return Ok(None);
    };
    let meta: Value = serde_json::from_str(meta).map_err(|e| e.to_string())?;
    let text = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_string);
    Ok(Some(InputEdit {
        input,
        input_fingerprint: text("inputFingerprint").ok_or("inputFingerprint")?,
        by: KeyId::parse(&text("by").ok_or("by")?).map_err(|e| e.to_string())?,
        at: Millis(meta.get("at").and_then(Value::as_i64).ok_or("at")?),
        note: text("note"),
    }))
}

/// The approval's edit from its `edit` column.
pub(crate) fn decode_approval_edit(meta: Option<&str>) -> Result<Option<ApprovalEdit>, String> {
    let Some(meta) = meta else {
        return Ok(None);
    };
    let meta: Value = serde_json::from_str(meta).map_err(|e| e.to_string())?;
    let text = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_string);
    Ok(Some(ApprovalEdit {
        by: KeyId::parse(&text("by").ok_or("by")?).map_err(|e| e.to_string())?,
        at: Millis(meta.get("at").and_then(Value::as_i64).ok_or("at")?),
        original_fingerprint: text("originalFingerprint").ok_or("originalFingerprint")?,
    }))
}

impl InvocationRecord {
    /// The input dispatch renders: the approver's edit when there is one, else the input as
    /// sent.
    pub fn dispatch_input(&self) -> &Value {
        self.edit.as_ref().map_or(&self.input, |e| &e.input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_core::{ActionId, EffectId, InvocationId};

    fn approval() -> ApprovalRecord {
        ApprovalRecord {
            id: ApprovalId::from_unique("a"),
            env_id: EnvironmentId::from_unique("e"),
            status: ApprovalStatus::Pending,
            title: "t".into(),
            description: None,
            payload: json!({"action": "refund", "input": {"amount": 500}}),
            invocation_id: Some(InvocationId::from_unique("i")),
            effect_id: Some(EffectId::from_unique("f")),
            action_id: Some(ActionId::from_unique("x")),
            action_version: Some(1),
            input_fingerprint: Some("fp-original".into()),
            requested_by: KeyId::from_unique("agent"),
            required_approvals: 1,
            decision_origin: None,
            decided_at: None,
            expires_at: Some(Millis(100)),
            run_id: None,
            created_at: Millis(0),
            decisions: vec![],
            edit: None,
        }
    }

    fn parked(state: EffectState) -> InvocationRecord {
        InvocationRecord {
            id: InvocationId::from_unique("i"),
            env_id: EnvironmentId::from_unique("e"),
            action_id: ActionId::from_unique("x"),
            action_name: "refund".into(),
            action_version: 1,
            effect_id: EffectId::from_unique("f"),
            governed: true,
            state,
            input: json!({"amount": 500}),
            input_fingerprint: "fp-original".into(),
            operation_key: None,
            run_id: None,
            retry_of: None,
            response_status: None,
            response_body: None,
            error: None,
            decision: None,
            approval_id: Some("apr".into()),
            created_by: KeyId::from_unique("agent"),
            created_at: Millis(0),
            completed_at: None,
            parent_span_id: None,
            edit: None,
            shadow_decisions: None,
        }
    }

    fn request(key: &str, fingerprint: &str, now: i64) -> EditRequest {
        EditRequest {
            env_id: EnvironmentId::from_unique("e"),
            approval_id: ApprovalId::from_unique("a"),
            key: KeyId::from_unique(key),
            input: json!({"amount": 50}),
            input_fingerprint: fingerprint.into(),
            note: Some("too much".into()),
            now: Millis(now),
        }
    }

    fn outcome(step: EditStep) -> EditOutcome {
        match step {
            EditStep::Answer(outcome) => *outcome,
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    #[test]
    fn only_a_key_other_than_the_requester_edits_a_pending_parked_invocation() {
        let a = approval();
        let inv = parked(EffectState::AwaitingApproval);
        assert!(matches!(
            outcome(edit_step(&a, Some(&inv), &request("agent", "fp-new", 5))),
            EditOutcome::SelfDecision
        ));
        let mut settled = approval();
        settled.status = ApprovalStatus::Approved;
        assert!(matches!(
            outcome(edit_step(
                &settled,
                Some(&inv),
                &request("boss", "fp-new", 5)
            )),
            EditOutcome::Unchanged(_)
        ));
        assert!(matches!(
            edit_step(&a, Some(&inv), &request("boss", "fp-new", 100)),
            EditStep::Expire
        ));
        assert!(matches!(
            outcome(edit_step(&a, None, &request("boss", "fp-new", 5))),
            EditOutcome::NotEditable(_)
        ));
        let moved = parked(EffectState::Ready);
        assert!(matches!(
            outcome(edit_step(&a, Some(&moved), &request("boss", "fp-new", 5))),
            EditOutcome::Unchanged(_)
        ));
        assert!(matches!(
            outcome(edit_step(
                &a,
                Some(&inv),
                &request("boss", "fp-original", 5)
            )),
            EditOutcome::SameInput(_)
        ));
    }

    #[test]
    fn an_edit_keeps_the_fingerprint_the_approval_was_requested_with() {
        let inv = parked(EffectState::AwaitingApproval);
        let EditStep::Write(first) =
            edit_step(&approval(), Some(&inv), &request("boss", "fp-1", 5))
        else {
            panic!("the first edit writes");
        };
        let meta: Value = serde_json::from_str(&first.approval_edit).unwrap();
        assert_eq!(meta["originalFingerprint"], "fp-original");
        let payload: Value = serde_json::from_str(&first.payload).unwrap();
        assert_eq!(payload["input"], json!({"amount": 50}));
        assert_eq!(payload["originalInput"], json!({"amount": 500}));
        // A second edit (by another key) still names the input the caller sent.
        let mut edited = approval();
        edited.input_fingerprint = Some("fp-1".into());
        edited.edit = decode_approval_edit(Some(&first.approval_edit)).unwrap();
        let EditStep::Write(second) = edit_step(&edited, Some(&inv), &request("ops", "fp-2", 6))
        else {
            panic!("the second edit writes");
        };
        let meta: Value = serde_json::from_str(&second.approval_edit).unwrap();
        assert_eq!(meta["originalFingerprint"], "fp-original");
        let decoded =
            decode_invocation_edit(Some(json!({"amount": 50})), Some(&second.invocation_edit))
                .unwrap()
                .unwrap();
        assert_eq!(decoded.input_fingerprint, "fp-2");
        assert_eq!(decoded.by, KeyId::from_unique("ops"));
        assert_eq!(decoded.note.as_deref(), Some("too much"));
    }
}
