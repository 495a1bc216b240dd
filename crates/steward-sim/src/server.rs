//! The simulated server process: the write path of docs/ARCHITECTURE.md, step for step, through
//! the real store and the real core. It mirrors `steward-server`'s `dispatch/` and `reconcile/`:
//! submit and begin in one commit (step 3), send only after it (step 4), classify and record the
//! answer with the request marked answered (step 5); a sweep at every start; read-only
//! reconciles; replays under the same provider key. Crash points are `steward_core::CrashPoint`.

use crate::provider::{Fault, Response};
use crate::queue::{Answer, AttemptRef, Event};
use crate::world::{
    err, Kind, Sim, World, ABSENCE_GRACE_MS, DISPATCH_TIMEOUT_MS, NETWORK_DELAY_MS_MAX,
};
use crate::Bug;
use serde_json::json;
use std::collections::BTreeMap;
use steward_core::impact::ReservationState;
use steward_core::{
    classify, fingerprint, next, AttemptReport, CrashPoint, EffectEvent, EffectId, EffectState,
    IdempotencyKey, InvocationId, ManualOutcome, Millis, ReplicaId,
};
use steward_core::{EvidenceKind, EvidenceSource};
use steward_store::{
    AttemptChange, EffectChange, Effects, FirstAttempt, FirstAttemptOutcome, ImpactRequest, Limits,
    NewEvidence, Replicas, ReserveOutcome, StoreError, Submission, SubmitOutcome, Sweep,
};

/// The server-side crash points a dispatch can stop at.
const CRASH_POINTS: [CrashPoint; 3] = [
    CrashPoint::ServerAfterRecord,
    CrashPoint::ServerAfterSend,
    CrashPoint::ServerAfterResponse,
];
/// Percent of dispatches that stop at one of [`CRASH_POINTS`] (outside the final phase).
const CRASH_POINT_PERCENT: u64 = 6;

/// An attempt this process has sent (or, under `Bug::SkipDurableAttempt`, is sending) and
/// waits on.
pub(crate) struct Inflight {
    pub effect: EffectId,
    /// The invoke request this attempt answers, and the client process that sent it.
    pub answers: Option<(IdempotencyKey, u32)>,
    pub crash: Option<CrashPoint>,
    /// `Bug::SkipDurableAttempt`: the `Begin` not yet committed although the request left.
    pub uncommitted: Option<EffectChange>,
}

pub(crate) struct Server {
    /// Which process this is: every restart starts a new one (a new replica id).
    pub generation: u32,
    pub up: bool,
    pub replica: ReplicaId,
    pub inflight: BTreeMap<AttemptRef, Inflight>,
}

impl Server {
    pub(crate) fn new(tag: &str) -> Self {
        Self {
            generation: 1,
            up: true,
            replica: ReplicaId::from_unique(&format!("{tag}gen1")),
            inflight: BTreeMap::new(),
        }
    }
}

fn provider_key(effect: &EffectId) -> String {
    format!("steward-{effect}")
}

impl World {
    fn crash_point(&mut self) -> Option<CrashPoint> {
        (!self.calm && self.rng.percent(CRASH_POINT_PERCENT))
            .then(|| CRASH_POINTS[self.rng.below(CRASH_POINTS.len() as u64) as usize])
    }

    fn submission(&mut self, op: usize) -> Submission {
        let suffix = self.fresh();
        let o = &self.ops[op];
        let action = match o.kind {
            Kind::Adapter => self.adapter.clone(),
            Kind::Template => self.template.clone(),
        };
        let effect_id = EffectId::from_unique(&suffix);
        Submission {
            env_id: self.env.clone(),
            invocation_id: InvocationId::from_unique(&suffix),
            provider_idempotency_key: (o.kind == Kind::Adapter).then(|| provider_key(&effect_id)),
            effect_id,
            input_fingerprint: fingerprint(&o.input),
            request_fingerprint: fingerprint(&json!({"action": action.name, "input": o.input})),
            input: o.input.clone(),
            action,
            operation_key: Some(o.key()),
            idempotency_key: Some(o.request_key()),
            run_id: None,
            retry_of: o.retry_of.map(|r| {
                self.ops[r]
                    .invocation
                    .clone()
                    .expect("a retried operation's invocation was seen")
            }),
            initial: EffectState::Ready,
            approval: None,
            decision: None,
            evidence: NewEvidence::new(
                EvidenceKind::Accepted,
                EvidenceSource::Steward,
                "invocation accepted",
            ),
            actor: self.agent.clone(),
            now: Millis(self.now),
            owner: self.server.replica.clone(),
            links: Default::default(),
            parent_span_id: None,
        }
    }

    fn impact(&self, sub: &Submission) -> ImpactRequest {
        ImpactRequest {
            env_id: self.env.clone(),
            effect_id: sub.effect_id.clone(),
            action_name: sub.action.name.clone(),
            resource: None,
            quantities: steward_server::impact_quantities(&sub.action.definition, &sub.input),
            actor: self.actor(),
        }
    }

    fn begin(
        &self,
        effect: &EffectId,
        from: EffectState,
        event: EffectEvent,
        number: u32,
    ) -> Sim<EffectChange> {
        let evidence = NewEvidence::new(
            EvidenceKind::Attempt,
            EvidenceSource::Steward,
            format!("attempt {number}"),
        );
        let mut begin = EffectChange::of(&self.env, effect, from, event, evidence, self.actor())
            .map_err(|e| e.to_string())?;
        begin.attempt = Some(AttemptChange::Begin {
            number,
            deadline_at: Millis(self.now + DISPATCH_TIMEOUT_MS),
            owner: self.server.replica.clone(),
        });
        Ok(begin)
    }

    /// Tells the client process `client` how its invoke of `op` stands.
    fn answer(&mut self, op: usize, client: u32, answer: Answer) {
        if let Some(delay) = self.hop() {
            self.queue.push(
                self.now + delay,
                Event::AnswerArrives { op, client, answer },
            );
        }
    }

    /// Write path steps 1 to 3 for an invoke (steps 1 and 2 have nothing to refuse here).
    pub(crate) async fn invoke(&mut self, op: usize, client: u32) -> Sim {
        let name = self.ops[op].name.clone();
        if !self.server.up {
            self.say(format!("invoke {name}: refused, the server is down"));
            return Ok(());
        }
        self.dirty = true;
        let sub = self.submission(op);
        let crash = self.crash_point();
        if self.bug(Bug::SkipDurableAttempt) {
            return self
                .invoke_skipping_durability(op, client, sub, crash)
                .await;
        }
        let first = FirstAttempt {
            impact: self.impact(&sub),
            begin: self.begin(
                &sub.effect_id,
                EffectState::Ready,
                EffectEvent::BeginAttempt,
                1,
            )?,
        };
        let submitted = self
            .store
            .submit_and_begin(&sub, &first)
            .await
            .map_err(err)?;
        match (submitted.outcome, submitted.first) {
            (SubmitOutcome::Created(inv), Some(FirstAttemptOutcome::Begun)) => {
                self.ops[op].reserved_cents = self.reservable(op);
                self.ops[op].holding = Some(ReservationState::Reserved);
                self.say(format!("invoke {name}: created, attempt 1 committed"));
                let answers = Some((self.ops[op].request_key(), client));
                let key = sub.provider_idempotency_key.clone();
                self.dispatch(op, 1, &inv.effect_id, key, answers, crash, None);
                Ok(())
            }
            (SubmitOutcome::Created(inv), Some(FirstAttemptOutcome::Refused(_))) => {
                self.refuse(op, &inv.effect_id).await?;
                self.answer(
                    op,
                    client,
                    Answer::State(EffectState::Rejected {
                        reason: steward_core::Rejection::Refused,
                    }),
                );
                Ok(())
            }
            (SubmitOutcome::Existing(inv) | SubmitOutcome::Replayed(inv), None) => {
                self.say(format!(
                    "invoke {name}: answered from the record, {}",
                    inv.state.name()
                ));
                self.answer(op, client, Answer::State(inv.state));
                Ok(())
            }
            (SubmitOutcome::InProgress, None) => {
                self.say(format!("invoke {name}: request in progress"));
                self.answer(op, client, Answer::InProgress);
                Ok(())
            }
            (outcome, first) => Err(format!("invoke {name}: unexpected {outcome:?} / {first:?}")),
        }
    }

    /// What the effect of `op` reserves when it goes: its money, for a refund.
    fn reservable(&self, op: usize) -> i64 {
        match self.ops[op].kind {
            Kind::Adapter => self.ops[op].amount_cents,
            Kind::Template => 0,
        }
    }

    /// `Bug::SkipDurableAttempt`: the invocation and its reservation are committed, the request
    /// leaves, and only then is the attempt committed (as its own later event).
    async fn invoke_skipping_durability(
        &mut self,
        op: usize,
        client: u32,
        sub: Submission,
        crash: Option<CrashPoint>,
    ) -> Sim {
        let name = self.ops[op].name.clone();
        match self.store.submit(&sub).await.map_err(err)? {
            SubmitOutcome::Created(inv) => {
                match self
                    .store
                    .reserve_impact(&self.impact(&sub))
                    .await
                    .map_err(err)?
                {
                    ReserveOutcome::Refused { .. } => {
                        self.refuse(op, &inv.effect_id).await?;
                        let refused = EffectState::Rejected {
                            reason: steward_core::Rejection::Refused,
                        };
                        self.answer(op, client, Answer::State(refused));
                        return Ok(());
                    }
                    ReserveOutcome::Reserved(_) | ReserveOutcome::AlreadyReserved => {}
                }
                self.ops[op].reserved_cents = self.reservable(op);
                self.ops[op].holding = Some(ReservationState::Reserved);
                self.say(format!(
                    "invoke {name}: created, sending before the attempt is committed"
                ));
                let begin = self.begin(
                    &inv.effect_id,
                    EffectState::Ready,
                    EffectEvent::BeginAttempt,
                    1,
                )?;
                let answers = Some((self.ops[op].request_key(), client));
                let attempt = AttemptRef { op, number: 1 };
                self.queue.push(
                    self.now,
                    Event::CommitAttempt {
                        attempt,
                        server: self.server.generation,
                    },
                );
                self.dispatch(
                    op,
                    1,
                    &inv.effect_id,
                    sub.provider_idempotency_key.clone(),
                    answers,
                    crash,
                    Some(begin),
                );
                Ok(())
            }
            SubmitOutcome::Existing(inv) | SubmitOutcome::Replayed(inv) => {
                self.answer(op, client, Answer::State(inv.state));
                Ok(())
            }
            SubmitOutcome::InProgress => {
                self.answer(op, client, Answer::InProgress);
                Ok(())
            }
            other => Err(format!("invoke {name}: unexpected {other:?}")),
        }
    }

    pub(crate) async fn commit_attempt(&mut self, attempt: AttemptRef, server: u32) -> Sim {
        if server != self.server.generation || !self.server.up {
            return Ok(());
        }
        self.dirty = true;
        let Some(begin) = self
            .server
            .inflight
            .get_mut(&attempt)
            .and_then(|i| i.uncommitted.take())
        else {
            return Ok(());
        };
        self.store.change_effect(&begin).await.map_err(err)?;
        let name = self.ops[attempt.op].name.clone();
        self.say(format!(
            "{name} attempt {}: committed after sending",
            attempt.number
        ));
        Ok(())
    }

    /// `ready -> rejected(refused)`, as `dispatch/reserve.rs` settles a refused reservation;
    /// then, as `api/invoke.rs` does for an answer not recorded with an attempt, the request's
    /// `Idempotency-Key` is marked answered.
    async fn refuse(&mut self, op: usize, effect: &EffectId) -> Sim {
        let evidence = NewEvidence::new(
            EvidenceKind::Refused,
            EvidenceSource::Steward,
            "not sent: the limit is exhausted",
        );
        let change = EffectChange::of(
            &self.env,
            effect,
            EffectState::Ready,
            EffectEvent::Refuse,
            evidence,
            self.actor(),
        )
        .map_err(|e| e.to_string())?;
        self.store.change_effect(&change).await.map_err(err)?;
        let key = self.ops[op].request_key();
        self.store
            .finish_invoke_request(&self.env, &self.agent, &key)
            .await
            .map_err(err)?;
        let name = self.ops[op].name.clone();
        self.say(format!("invoke {name}: refused by the limit, nothing sent"));
        Ok(())
    }

    /// Write path step 4: the attempt is (in a correct build) committed; the request leaves.
    #[allow(clippy::too_many_arguments)]
    fn dispatch(
        &mut self,
        op: usize,
        number: u32,
        effect: &EffectId,
        key: Option<String>,
        answers: Option<(IdempotencyKey, u32)>,
        crash: Option<CrashPoint>,
        uncommitted: Option<EffectChange>,
    ) {
        let attempt = AttemptRef { op, number };
        let server = self.server.generation;
        if crash == Some(CrashPoint::ServerAfterRecord) {
            self.crash_server(CrashPoint::ServerAfterRecord.name());
            return;
        }
        self.server.inflight.insert(
            attempt,
            Inflight {
                effect: effect.clone(),
                answers,
                crash,
                uncommitted,
            },
        );
        self.queue.push(
            self.now + DISPATCH_TIMEOUT_MS,
            Event::Deadline { attempt, server },
        );
        let name = self.ops[op].name.clone();
        match self.hop() {
            Some(delay) => {
                let provider_key = key;
                self.queue.push(
                    self.now + delay,
                    Event::RequestArrives {
                        attempt,
                        server,
                        provider_key,
                    },
                );
                self.say(format!("{name} attempt {number}: sent"));
            }
            None => self.say(format!("{name} attempt {number}: sent, lost on the way")),
        }
        if crash == Some(CrashPoint::ServerAfterSend) {
            self.crash_server(CrashPoint::ServerAfterSend.name());
        }
    }

    /// The provider handles a request, whichever process sent it, and answers it.
    pub(crate) fn request_arrives(
        &mut self,
        attempt: AttemptRef,
        server: u32,
        key: Option<String>,
    ) {
        let fault = if self.calm {
            Fault::None
        } else {
            Fault::ALL[self.rng.weighted(&[60, 10, 10, 10, 10])]
        };
        let before = self.provider.writes.len();
        let response = self
            .provider
            .receive(attempt.op, attempt.number, key.as_deref(), fault);
        let wrote = self.provider.writes.len() > before;
        let name = self.ops[attempt.op].name.clone();
        self.say(format!(
            "provider: {name} attempt {}: {fault:?} -> {response:?}{}",
            attempt.number,
            if wrote {
                ", written"
            } else {
                ", nothing written"
            }
        ));
        let delay = match (fault, self.hop()) {
            (_, None) => {
                self.say(format!(
                    "provider: {name} attempt {}: the response is lost",
                    attempt.number
                ));
                return;
            }
            (Fault::Slow, Some(d)) => DISPATCH_TIMEOUT_MS + d,
            (_, Some(d)) => d,
        };
        self.queue.push(
            self.now + delay,
            Event::ResponseArrives {
                attempt,
                server,
                response,
            },
        );
    }

    pub(crate) async fn response_arrives(
        &mut self,
        attempt: AttemptRef,
        server: u32,
        response: Response,
    ) -> Sim {
        let name = self.ops[attempt.op].name.clone();
        if server != self.server.generation || !self.server.up {
            self.say(format!(
                "{name} attempt {}: the response found its process gone",
                attempt.number
            ));
            return Ok(());
        }
        self.dirty = true;
        let Some(inflight) = self.server.inflight.get(&attempt) else {
            // The deadline came first: the answer is kept as evidence, the state stays.
            let effect = self.effect_of(attempt.op).await?;
            let note = NewEvidence::new(
                EvidenceKind::LateAnswer,
                EvidenceSource::Provider,
                format!("{response:?} after the deadline"),
            );
            self.store
                .append_evidence(&self.env, &effect, &note, &self.actor())
                .await
                .map_err(err)?;
            self.say(format!(
                "{name} attempt {}: late answer {response:?} kept as evidence",
                attempt.number
            ));
            return Ok(());
        };
        if inflight.crash == Some(CrashPoint::ServerAfterResponse) {
            self.crash_server(CrashPoint::ServerAfterResponse.name());
            return Ok(());
        }
        let stripe = self.ops[attempt.op].kind == Kind::Adapter;
        let report = match response {
            Response::Refund => AttemptReport::Answered {
                status: 200,
                provider_says_nothing_happened: false,
                provider_record_confirms: stripe,
            },
            Response::Rejected => AttemptReport::Answered {
                status: 400,
                provider_says_nothing_happened: false,
                provider_record_confirms: false,
            },
            Response::ServerError { should_retry } => AttemptReport::Answered {
                status: 500,
                provider_says_nothing_happened: stripe && should_retry,
                provider_record_confirms: false,
            },
        };
        self.finish(attempt, report).await
    }

    pub(crate) async fn deadline(&mut self, attempt: AttemptRef, server: u32) -> Sim {
        if server != self.server.generation
            || !self.server.up
            || !self.server.inflight.contains_key(&attempt)
        {
            return Ok(());
        }
        self.dirty = true;
        self.finish(attempt, AttemptReport::TimedOut).await
    }

    /// Write path step 5: classify, `next(dispatching, event)`, commit with the request answered.
    async fn finish(&mut self, attempt: AttemptRef, report: AttemptReport) -> Sim {
        let inflight = self
            .server
            .inflight
            .remove(&attempt)
            .expect("finish of an attempt in flight");
        let classified = classify(&report);
        let status = match report {
            AttemptReport::Answered { status, .. } => Some(status),
            _ => None,
        };
        let evidence = NewEvidence::new(
            EvidenceKind::Response,
            EvidenceSource::Provider,
            classified.reason.clone(),
        );
        let mut change = EffectChange::of(
            &self.env,
            &inflight.effect,
            EffectState::Dispatching,
            classified.event,
            evidence,
            self.actor(),
        )
        .map_err(|e| e.to_string())?;
        let to = change.to;
        change.attempt = Some(AttemptChange::Finish {
            number: attempt.number,
            response_status: status,
            error: (!matches!(to, EffectState::Succeeded { .. }))
                .then(|| classified.reason.clone()),
        });
        change.response_status = status;
        change.answers_request = inflight.answers.as_ref().map(|(k, _)| k.clone());
        let name = self.ops[attempt.op].name.clone();
        let recorded = match self.store.change_effect_and_read(&change).await {
            Ok(inv) => inv,
            Err(StoreError::StateConflict { found, .. }) => {
                return Err(format!(
                    "{name} attempt {}: recorded answer found {} (one process owns it)",
                    attempt.number,
                    found.name()
                ))
            }
            Err(e) => return Err(err(e)),
        };
        self.say(format!(
            "{name} attempt {}: {:?} recorded, {}",
            attempt.number,
            classified.event,
            recorded.state.name()
        ));
        if let Some((_, client)) = inflight.answers {
            self.answer(attempt.op, client, Answer::State(recorded.state));
        }
        Ok(())
    }

    pub(crate) fn crash_server(&mut self, at: &str) {
        self.server.up = false;
        self.server.inflight.clear();
        self.say(format!("server crash {at}"));
        let back = if self.calm {
            1
        } else {
            self.rng.between(100, 1_500)
        };
        self.queue.push(self.now + back, Event::ServerRestart);
    }

    /// A new process (a new replica) on the same store: the start-up sweep, then it serves.
    pub(crate) async fn restart_server(&mut self) -> Sim {
        if self.server.up {
            return Ok(());
        }
        self.dirty = true;
        self.server.generation += 1;
        self.server.replica =
            ReplicaId::from_unique(&format!("{}gen{}", self.tag, self.server.generation));
        let report = self
            .store
            .recover(&Sweep::sole(&self.server.replica, Millis(self.now)))
            .await
            .map_err(err)?;
        self.server.up = true;
        // The sweep is store-wide; only this run's effects belong in its log.
        let ours = format!("{}n", self.tag);
        let mine = |ids: &[EffectId]| {
            ids.iter()
                .filter(|id| id.as_str()[EffectId::PREFIX.len()..].starts_with(&ours))
                .count()
        };
        self.say(format!(
            "server restart: sweep made {} unknown, {} failed",
            mine(&report.dispatching_to_unknown),
            mine(&report.ready_to_failed),
        ));
        Ok(())
    }

    async fn effect_of(&self, op: usize) -> Sim<EffectId> {
        let inv = self
            .store
            .invocation_by_operation_key(&self.env, &self.ops_action(op), &self.ops[op].key())
            .await
            .map_err(err)?
            .ok_or_else(|| format!("{} has no effect", self.ops[op].name))?;
        Ok(inv.effect_id)
    }

    fn ops_action(&self, op: usize) -> steward_core::ActionId {
        match self.ops[op].kind {
            Kind::Adapter => self.adapter.id.clone(),
            Kind::Template => self.template.id.clone(),
        }
    }

    /// A read-only reconcile of an unknown effect (`reconcile/`): the adapter's lookup settles
    /// it when the provider has the write, or when it has none and no attempt can still land.
    pub(crate) async fn reconcile(&mut self, op: usize) -> Sim {
        let name = self.ops[op].name.clone();
        if !self.server.up {
            return Ok(());
        }
        self.dirty = true;
        let effect = self.effect_of(op).await?;
        let detail = self
            .store
            .effect(&self.env, &effect)
            .await
            .map_err(err)?
            .ok_or_else(|| format!("{name}: effect missing"))?;
        if detail.effect.state != EffectState::Unknown {
            return Ok(());
        }
        let Some(key) = detail.effect.provider_idempotency_key.clone() else {
            self.say(format!(
                "reconcile {name}: no read-only lookup, stays unknown"
            ));
            return Ok(());
        };
        let deadline = detail
            .attempts
            .iter()
            .map(|a| a.deadline_at.0)
            .max()
            .unwrap_or(0);
        let event = if self.provider.has(&key) {
            EffectEvent::ReconcileFound { confirmed: true }
        } else if self.now > deadline + ABSENCE_GRACE_MS {
            EffectEvent::ReconcileAbsent
        } else {
            EffectEvent::ReconcileInconclusive
        };
        let (to, _) = next(EffectState::Unknown, event).map_err(|e| e.to_string())?;
        let note = NewEvidence::new(
            EvidenceKind::Reconcile,
            EvidenceSource::Steward,
            format!("{event:?}"),
        );
        if to == EffectState::Unknown {
            self.store
                .append_evidence(&self.env, &effect, &note, &self.actor())
                .await
                .map_err(err)?;
        } else {
            let mut change = EffectChange::of(
                &self.env,
                &effect,
                EffectState::Unknown,
                event,
                note,
                self.actor(),
            )
            .map_err(|e| e.to_string())?;
            if to != EffectState::Failed {
                change.external_reference = Some(format!("re_{}", key));
            }
            self.change_unless_moved(&change).await?;
        }
        self.say(format!("reconcile {name}: {event:?} -> {}", to.name()));
        Ok(())
    }

    /// A person resolves an unknown effect that has no read-only lookup (`api/recovery.rs`, with
    /// a key other than the invoker's), from what they find at the provider.
    pub(crate) async fn resolve(&mut self, op: usize) -> Sim {
        let name = self.ops[op].name.clone();
        if !self.server.up {
            return Ok(());
        }
        self.dirty = true;
        let effect = self.effect_of(op).await?;
        let outcome = if self.provider.writes_of(op) > 0 {
            ManualOutcome::Succeeded
        } else {
            ManualOutcome::Failed
        };
        let by = steward_store::Actor::key(&self.operator, Millis(self.now));
        let evidence = NewEvidence::new(
            EvidenceKind::ManualResolution,
            EvidenceSource::Operator,
            format!("{outcome:?}, as the provider's records show"),
        );
        let change = EffectChange::of(
            &self.env,
            &effect,
            EffectState::Unknown,
            EffectEvent::Resolve { outcome },
            evidence,
            by,
        )
        .map_err(err)?;
        self.change_unless_moved(&change).await?;
        self.say(format!(
            "resolve {name}: {outcome:?} -> {}",
            change.to.name()
        ));
        Ok(())
    }

    /// Writes `change`; an effect someone else moved first (a compare-and-set lost) is left as
    /// that move made it, as the server does.
    async fn change_unless_moved(&self, change: &EffectChange) -> Sim {
        match self.store.change_effect(change).await {
            Ok(()) | Err(StoreError::StateConflict { .. }) => Ok(()),
            Err(e) => Err(err(e)),
        }
    }

    /// A replay of an unknown adapter effect: a new attempt under the same provider key.
    pub(crate) async fn replay(&mut self, op: usize) -> Sim {
        let name = self.ops[op].name.clone();
        if !self.server.up {
            return Ok(());
        }
        self.dirty = true;
        let effect = self.effect_of(op).await?;
        let detail = self
            .store
            .effect(&self.env, &effect)
            .await
            .map_err(err)?
            .ok_or_else(|| format!("{name}: effect missing"))?;
        if detail.effect.state != EffectState::Unknown {
            return Ok(());
        }
        let number = detail.effect.attempt_count + 1;
        let begin = self.begin(&effect, EffectState::Unknown, EffectEvent::Replay, number)?;
        match self.store.change_effect(&begin).await {
            Ok(()) => {}
            Err(StoreError::StateConflict { .. }) => return Ok(()),
            Err(e) => return Err(err(e)),
        }
        self.say(format!("replay {name}: attempt {number} committed"));
        let mut key = detail.effect.provider_idempotency_key.clone();
        if self.bug(Bug::ReplayWithoutIdempotency) {
            key = key.map(|k| format!("{k}-replay{number}"));
        }
        let crash = self.crash_point();
        self.dispatch(op, number, &effect, key, None, crash, None);
        Ok(())
    }
}

/// How long a hop may take, for the doc of the absence rule above.
const _: () = assert!(NETWORK_DELAY_MS_MAX < DISPATCH_TIMEOUT_MS);
