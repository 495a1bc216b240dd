//! Answers this replica got and could not record, kept until the database takes them.
//!
//! Write path step 5 commits an attempt's answer. When that commit fails (the database is
//! down, failing over, out of disk), the provider call has already happened: the effect is
//! still `dispatching` in the store and only this process knows how it ended. Dropping the
//! answer would leave the effect `dispatching` until a restart or another replica's sweep, and
//! every resend of its key would hear `running`. So the answer is kept here and committed as
//! soon as the database takes it ([`run`]: retried with backoff, from
//! [`PENDING_RETRY_MS_MIN`] doubling to [`PENDING_RETRY_MS_MAX`]), and a resend of the key
//! nudges it first ([`PendingAnswers::settle_now`]).
//!
//! The same queue settles an invoke whose intent commit lost its answer
//! (`StoreError::CommitUnknown` from `submit_and_begin`): its request was never sent, so if the
//! intent turns out committed its attempt is settled `failed` as not sent ([`not_sent`]).
//!
//! Bounded: at most [`PENDING_ANSWERS_MAX`] answers are kept whole. Past that an answer is kept
//! only as "mark it unknown" (its ids and attempt, no body: [`unknown_instead`]), at most
//! [`PENDING_MARKS_MAX`] of those; the reconciler then asks the provider. Past both, the effect
//! is left to the sweep that takes attempts past their deadline plus the lease, and an error is
//! logged. A change the store refuses because the effect moved meanwhile (another replica's
//! sweep marked it `unknown`) is dropped, its answer appended as late evidence where it can be.
//! What is still kept when the process ends is lost with it: the next start's sweep (embedded
//! store) or another replica's (PostgreSQL) marks those attempts `unknown`.
//!
//! A "not sent" mark names an attempt by its effect and number, which another request may
//! share: two approvers deciding at once both plan attempt 1, one commit lands and is sent, the
//! other's answer is lost. So the mark must never settle an attempt somebody did send (found by
//! `steward faults`, seed 26: the approver whose commit was lost settled the other's sent
//! attempt `failed`). Three rules hold it: the mark is fenced by the replica that would have
//! owned the attempt (another replica's attempt refuses it); it waits while any request of this
//! process is beginning or sending an attempt of the same effect ([`PendingAnswers::sending`],
//! taken before the begin commit and held until the answer is recorded or kept); and it never
//! replaces a kept answer, which is proof that something was sent.
//! docs/DECISIONS.md, "Failover: honest answers and ambiguous commits".

use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use steward_core::{EffectEvent, EffectId, EffectState, EvidenceKind, EvidenceSource};
use steward_store::{AttemptChange, EffectChange, Fence, NewEvidence};

/// Answers kept whole at most. An answer holds its stored body (at most 256 KiB, see
/// `RESPONSE_BODY_BYTES_MAX`), so this bounds the queue near 64 MiB; a database outage long
/// enough to fill it under load turns the rest into [`PENDING_MARKS_MAX`] marks.
pub const PENDING_ANSWERS_MAX: usize = 256;
/// Effects kept only to be marked `unknown` at most (a few hundred bytes each: about 5 MiB).
pub const PENDING_MARKS_MAX: usize = 16_384;
/// The first retry of a failed commit waits this long, in milliseconds; each failure doubles
/// it, up to [`PENDING_RETRY_MS_MAX`]. A failover takes seconds: the answers land within about
/// one [`PENDING_RETRY_MS_MAX`] of the database's return.
pub const PENDING_RETRY_MS_MIN: u64 = 100;
/// The longest wait between two rounds of retries, in milliseconds.
pub const PENDING_RETRY_MS_MAX: u64 = 2_000;

/// What a kept change does once committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The attempt's answer, as write path step 5 would have recorded it.
    Answer,
    /// The answer could not be kept: the attempt is marked `unknown`, to be reconciled.
    Unknown,
    /// The intent's commit lost its answer and nothing was sent: if it is recorded, its
    /// attempt (or its `ready` effect) is settled `failed` as not sent.
    NotSent,
}

#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) change: EffectChange,
    pub(crate) kind: Kind,
    /// An earlier try of this change ended in `CommitUnknown`: a later compare-and-set miss
    /// that finds the change's own target state is that try having landed.
    pub(crate) tried_ambiguously: bool,
}

/// The answers kept by this process (`AppState::pending`).
#[derive(Debug, Default)]
pub struct PendingAnswers {
    entries: Mutex<BTreeMap<EffectId, Entry>>,
    /// Effects a request of this process is beginning or sending an attempt of, counted.
    sending: Mutex<HashMap<EffectId, usize>>,
    /// Woken when something is kept, so [`run`] tries at once.
    wake: tokio::sync::Notify,
}

/// A request of this process is beginning or sending an attempt of an effect, from before its
/// begin commit until its answer is recorded or kept; dropped, it counts no more.
pub(crate) struct Sending<'a> {
    pending: &'a PendingAnswers,
    effect: EffectId,
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        let mut sending = self
            .pending
            .sending
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(count) = sending.get_mut(&self.effect) {
            *count -= 1;
            if *count == 0 {
                sending.remove(&self.effect);
            }
        }
    }
}

impl PendingAnswers {
    /// Keeps `change` to be committed later. Returns `false` when it could not be kept at all
    /// (both bounds reached): an error is logged, and the effect waits for a sweep.
    pub(crate) fn keep(&self, change: EffectChange, kind: Kind) -> bool {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let answers = entries.values().filter(|e| e.kind == Kind::Answer).count();
        let (change, kind) = if kind == Kind::Answer && answers >= PENDING_ANSWERS_MAX {
            tracing::warn!(
                effect = %change.effect_id,
                kept = PENDING_ANSWERS_MAX,
                "too many answers wait for the database: this one is kept only to mark its \
                 effect unknown, and the reconciler will ask the provider"
            );
            (unknown_instead(&change, "answer"), Kind::Unknown)
        } else {
            (change, kind)
        };
        // A "not sent" mark never replaces what proves a send (module doc).
        if kind == Kind::NotSent
            && entries
                .get(&change.effect_id)
                .is_some_and(|kept| kept.kind != Kind::NotSent)
        {
            return true;
        }
        let marks = entries.len() - answers;
        if kind != Kind::Answer && marks >= PENDING_MARKS_MAX {
            tracing::error!(
                effect = %change.effect_id,
                "cannot keep this effect to settle it: it stays dispatching until the sweep of \
                 attempts past their deadline takes it"
            );
            return false;
        }
        entries.insert(
            change.effect_id.clone(),
            Entry {
                change,
                kind,
                tried_ambiguously: false,
            },
        );
        drop(entries);
        self.wake.notify_one();
        true
    }

    /// Counts a request of this process beginning or sending an attempt of `effect`, until the
    /// guard is dropped. Take it before the begin commit.
    pub(crate) fn sending(&self, effect: &EffectId) -> Sending<'_> {
        *self
            .sending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(effect.clone())
            .or_default() += 1;
        Sending {
            pending: self,
            effect: effect.clone(),
        }
    }

    /// Whether a request of this process is beginning or sending an attempt of `effect`.
    pub(crate) fn is_sending(&self, effect: &EffectId) -> bool {
        self.sending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(effect)
    }

    /// Whether this process keeps a change for `effect`.
    pub fn holds(&self, effect: &EffectId) -> bool {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(effect)
    }

    /// How many changes wait.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes the change kept for `effect` out, to try it.
    pub(crate) fn take(&self, effect: &EffectId) -> Option<Entry> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(effect)
    }

    /// The effects a change is kept for.
    pub(crate) fn ids(&self) -> Vec<EffectId> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Waits until something is kept.
    pub(crate) async fn kept(&self) {
        self.wake.notified().await;
    }

    pub(crate) fn put_back(&self, entry: Entry) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        // One attempt is in flight per effect and its answer is kept once, so what was kept
        // meanwhile is a "not sent" mark or that answer: an answer wins over a mark either way.
        match entries.get(&entry.change.effect_id) {
            Some(kept) if kept.kind == Kind::NotSent && entry.kind != Kind::NotSent => {
                entries.insert(entry.change.effect_id.clone(), entry);
            }
            Some(_) => {}
            None => {
                entries.insert(entry.change.effect_id.clone(), entry);
            }
        }
    }
}

/// The attempt number a change finishes (1 when it names none).
pub(crate) fn attempt_number(change: &EffectChange) -> u32 {
    match &change.attempt {
        Some(AttemptChange::Finish { number, .. } | AttemptChange::Begin { number, .. }) => *number,
        None => 1,
    }
}

/// Instead of `change` (an answer from `dispatching`), the attempt marked `unknown`: the same
/// effect, attempt and request, no answer, evidence saying why. `what` names what was lost.
pub(crate) fn unknown_instead(change: &EffectChange, what: &str) -> EffectChange {
    let evidence = NewEvidence::new(
        EvidenceKind::Transport,
        EvidenceSource::Steward,
        format!(
            "this attempt's {what} could not be recorded while the database was away, and was \
             not kept: the provider may have acted. Marked unknown; nothing was re-sent. \
             Reconcile to settle it."
        ),
    );
    let mut unknown = EffectChange::of(
        &change.env_id,
        &change.effect_id,
        EffectState::Dispatching,
        EffectEvent::Ambiguous,
        evidence,
        change.actor.clone(),
    )
    .expect("dispatching takes Ambiguous");
    unknown.attempt = Some(AttemptChange::Finish {
        number: attempt_number(change),
        response_status: None,
        error: Some(format!("the {what} could not be recorded")),
    });
    unknown.error = Some(json!({
        "code": "outcome_unknown",
        "message": format!("the {what} could not be recorded; reconcile to settle it"),
    }));
    unknown.answers_request = change.answers_request.clone();
    unknown
}

/// The change that settles, as not sent, the first attempt of an invoke whose intent commit
/// lost its answer: `dispatching -> failed`, the request marked answered.
pub(crate) fn not_sent(
    begin: &EffectChange,
    answers_request: Option<steward_core::IdempotencyKey>,
) -> EffectChange {
    let evidence = NewEvidence::new(
        EvidenceKind::Blocked,
        EvidenceSource::Steward,
        NOT_SENT_SUMMARY,
    );
    let mut change = EffectChange::of(
        &begin.env_id,
        &begin.effect_id,
        EffectState::Dispatching,
        EffectEvent::NotSent,
        evidence,
        begin.actor.clone(),
    )
    .expect("dispatching takes NotSent");
    change.attempt = Some(AttemptChange::Finish {
        number: attempt_number(begin),
        response_status: None,
        error: Some("not sent: the commit recording the attempt lost its answer".into()),
    });
    change.error = Some(NOT_SENT_ERROR.clone());
    change.answers_request = answers_request;
    // Only the attempt this request would have owned: another replica's is refused.
    if let Some(AttemptChange::Begin { owner, .. }) = &begin.attempt {
        change.fence = Some(Fence::Holder(owner.clone()));
    }
    change
}

const NOT_SENT_SUMMARY: &str = "not sent: the database lost its answer to the commit that \
     recorded this invocation and its attempt, so Steward did not send the request. Settled \
     failed once the database was back; start a new invocation with retryOf to try again.";

static NOT_SENT_ERROR: std::sync::LazyLock<serde_json::Value> = std::sync::LazyLock::new(|| {
    json!({
        "code": "not_sent",
        "message": "the commit recording the attempt lost its answer; nothing was sent",
    })
});

/// [`not_sent`] for an intent that committed `ready` (no attempt): `ready -> failed`.
pub(crate) fn not_sent_from_ready(change: &EffectChange) -> EffectChange {
    let evidence = NewEvidence::new(
        EvidenceKind::Blocked,
        EvidenceSource::Steward,
        NOT_SENT_SUMMARY,
    );
    let mut blocked = EffectChange::of(
        &change.env_id,
        &change.effect_id,
        EffectState::Ready,
        EffectEvent::Block,
        evidence,
        change.actor.clone(),
    )
    .expect("ready takes Block");
    blocked.error = Some(NOT_SENT_ERROR.clone());
    blocked.answers_request = change.answers_request.clone();
    blocked
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_core::{EnvironmentId, IdempotencyKey, Millis};
    use steward_store::Actor;

    fn answer(n: usize) -> EffectChange {
        let evidence = NewEvidence::new(EvidenceKind::Response, EvidenceSource::Provider, "200");
        let mut change = EffectChange::of(
            &EnvironmentId::from_unique("env"),
            &EffectId::from_unique(&format!("effect{n}")),
            EffectState::Dispatching,
            EffectEvent::ProviderAccepted { confirmed: true },
            evidence,
            Actor::system(Millis(1)),
        )
        .unwrap();
        change.attempt = Some(AttemptChange::Finish {
            number: 2,
            response_status: Some(200),
            error: None,
        });
        change.answers_request = Some(IdempotencyKey::parse("idem-1").unwrap());
        change
    }

    fn kinds(pending: &PendingAnswers) -> (usize, usize) {
        let entries = pending.entries.lock().unwrap();
        let answers = entries.values().filter(|e| e.kind == Kind::Answer).count();
        (answers, entries.len() - answers)
    }

    #[test]
    fn past_its_bound_an_answer_is_kept_only_to_mark_its_effect_unknown() {
        let pending = PendingAnswers::default();
        for n in 0..PENDING_ANSWERS_MAX {
            assert!(pending.keep(answer(n), Kind::Answer));
        }
        assert_eq!(kinds(&pending), (PENDING_ANSWERS_MAX, 0));
        let over = answer(PENDING_ANSWERS_MAX);
        let id = over.effect_id.clone();
        assert!(pending.keep(over, Kind::Answer));
        assert_eq!(kinds(&pending), (PENDING_ANSWERS_MAX, 1));
        let entries = pending.entries.lock().unwrap();
        let mark = &entries[&id].change;
        assert_eq!(mark.to, EffectState::Unknown);
        assert!(mark.response_body.is_none());
        assert!(matches!(
            mark.attempt,
            Some(AttemptChange::Finish { number: 2, .. })
        ));
        assert_eq!(
            mark.answers_request,
            Some(IdempotencyKey::parse("idem-1").unwrap())
        );
    }

    #[test]
    fn past_both_bounds_nothing_more_is_kept() {
        let pending = PendingAnswers::default();
        for n in 0..PENDING_MARKS_MAX {
            let mark = unknown_instead(&answer(n), "answer");
            assert!(pending.keep(mark, Kind::Unknown));
        }
        let last = unknown_instead(&answer(PENDING_MARKS_MAX), "answer");
        assert!(!pending.keep(last.clone(), Kind::Unknown));
        assert!(!pending.holds(&last.effect_id));
        assert_eq!(pending.len(), PENDING_MARKS_MAX);
    }

    fn begin(n: usize) -> EffectChange {
        let mut change = answer(n);
        change.attempt = Some(AttemptChange::Begin {
            number: 1,
            deadline_at: Millis(10),
            owner: steward_core::ReplicaId::from_unique("replica-a"),
        });
        change
    }

    #[test]
    fn a_not_sent_mark_never_replaces_a_kept_answer_and_an_answer_replaces_the_mark() {
        let pending = PendingAnswers::default();
        let id = answer(1).effect_id.clone();
        assert!(pending.keep(answer(1), Kind::Answer));
        assert!(pending.keep(not_sent(&begin(1), None), Kind::NotSent));
        assert_eq!(pending.take(&id).unwrap().kind, Kind::Answer);

        assert!(pending.keep(not_sent(&begin(1), None), Kind::NotSent));
        assert!(pending.keep(answer(1), Kind::Answer));
        assert_eq!(pending.take(&id).unwrap().kind, Kind::Answer);

        // The mark was out being tried when the answer was kept: putting it back keeps the
        // answer; an answer put back over a mark replaces it.
        assert!(pending.keep(answer(1), Kind::Answer));
        pending.put_back(Entry {
            change: not_sent(&begin(1), None),
            kind: Kind::NotSent,
            tried_ambiguously: false,
        });
        assert_eq!(pending.take(&id).unwrap().kind, Kind::Answer);
        assert!(pending.keep(not_sent(&begin(1), None), Kind::NotSent));
        pending.put_back(Entry {
            change: answer(1),
            kind: Kind::Answer,
            tried_ambiguously: false,
        });
        assert_eq!(pending.take(&id).unwrap().kind, Kind::Answer);
    }

    #[test]
    fn a_not_sent_mark_is_fenced_by_the_replica_that_would_have_owned_the_attempt() {
        let mark = not_sent(&begin(1), None);
        assert_eq!(
            mark.fence,
            Some(Fence::Holder(steward_core::ReplicaId::from_unique(
                "replica-a"
            )))
        );
    }

    #[test]
    fn sending_counts_until_every_guard_is_dropped() {
        let pending = PendingAnswers::default();
        let id = answer(1).effect_id.clone();
        assert!(!pending.is_sending(&id));
        let first = pending.sending(&id);
        let second = pending.sending(&id);
        drop(first);
        assert!(pending.is_sending(&id));
        drop(second);
        assert!(!pending.is_sending(&id));
    }

    #[test]
    fn an_ambiguous_intent_is_settled_failed_not_sent() {
        let begin = answer(1);
        let settle = not_sent(&begin, None);
        assert_eq!(settle.from, EffectState::Dispatching);
        assert_eq!(settle.to, EffectState::Failed);
        assert_eq!(settle.error.as_ref().unwrap()["code"], "not_sent");
        let from_ready = not_sent_from_ready(&settle);
        assert_eq!(from_ready.from, EffectState::Ready);
        assert_eq!(from_ready.to, EffectState::Failed);
    }
}
