//! The server process: the production `steward-server` itself, not a model of it. An invoke
//! runs `steward_server::submit_and_dispatch` (write path steps 2 to 5), a replay
//! `steward_server::replay`, a reconcile `steward_server::reconcile` (the adapter's lookup
//! included), and a restart the store's recovery sweep as `serve` runs it, all on the real
//! SQLite store. What is the simulator's: the `AppState` seams (`wire.rs`: clock, ids,
//! transport, crash hook), the network the calls cross and the provider that answers them.
//!
//! Each operation runs as a task of the process, one at a time (see `wire.rs`); a crash aborts
//! every task of the process where it stands, as a killed process stops, and a restart starts a
//! new process (a new replica, a new wire) on the same store.

use crate::provider::{Call, Fault, Response};
use crate::queue::{Answer, Event};
use crate::wire::{Done, SimTransport, Wire, Work};
use crate::world::{err, Kind, Sim, World, DISPATCH_TIMEOUT_MS};
use serde_json::json;
use std::future::Future;
use std::sync::Arc;
use steward_core::{
    fingerprint, EffectEvent, EffectId, EffectState, InvocationId, ManualOutcome, Millis, ReplicaId,
};
use steward_core::{EvidenceKind, EvidenceSource};
use steward_server::{AppState, FailureKind, Progress, TransportFailure};
use steward_store::{
    EffectChange, Effects, InvocationRecord, NewEvidence, Replicas, StoreError, Submission,
    SubmitOutcome, Sweep,
};

/// One server process.
pub(crate) struct Server {
    /// Which process this is: every restart starts a new one (a new replica id).
    pub generation: u32,
    pub up: bool,
    pub state: AppState,
    pub wire: Arc<Wire>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// The provider key the `stripe.refund` adapter derives from the effect id (its
/// `provider_key`), which the invoke front puts in the submission.
fn provider_key(effect: &EffectId) -> String {
    format!("steward-{effect}")
}

/// What the call is, for the log.
fn describe(call: &Call, world: &World) -> String {
    let name = |op: &usize| {
        world
            .ops
            .get(*op)
            .map_or_else(|| format!("op #{op}"), |o| o.name.clone())
    };
    match call {
        Call::Refund { op, .. } => format!("{} refund", name(op)),
        Call::Notify { op } => format!("{} notify", name(op)),
        Call::ListRefunds { op } => format!("{} lookup", name(op)),
        Call::Other(what) => format!("unexpected call {what}"),
    }
}

impl Server {
    /// Starts server process `generation` from `base` (not yet swept: its caller runs the
    /// sweep), with a wire, a transport and a crash hook of its own.
    pub(crate) fn start(
        base: &AppState,
        tag: &str,
        generation: u32,
        crash_seed: u64,
        calm: bool,
    ) -> Server {
        let wire = Wire::new(crash_seed, calm);
        let state = AppState {
            transport: Arc::new(SimTransport(wire.clone())),
            crash_hook: Some(wire.crash_hook()),
            replica: ReplicaId::from_unique(&format!("{tag}gen{generation}")),
            lease: std::sync::Arc::new(steward_server::Lease::unlimited()),
            pending: Arc::default(),
            ..base.clone()
        };
        Server {
            generation,
            up: true,
            state,
            wire,
            tasks: Vec::new(),
        }
    }
}

impl World {
    /// Runs `work` as a task of the live process, then lets it run until it parks or ends.
    async fn run_task<F>(&mut self, op: usize, work: F) -> Sim
    where
        F: Future<Output = Work> + Send + 'static,
    {
        self.clock.set(self.now);
        let wire = self.server.wire.clone();
        let live = wire.started();
        let task = tokio::spawn(async move {
            let what = work.await;
            wire.finish(Done { op, what });
            drop(live);
        });
        self.server.tasks.retain(|t| !t.is_finished());
        self.server.tasks.push(task);
        self.quiesce().await
    }

    /// Waits until the process is quiet, then puts what it sent on the network, acts on what
    /// it finished and, if a crash point stopped it, crashes it.
    async fn quiesce(&mut self) -> Sim {
        self.dirty = true;
        self.server.wire.quiet().await;
        let (sent, done, crashed) = self.server.wire.take();
        let server = self.server.generation;
        for s in sent {
            let what = describe(&s.call, self);
            self.queue.push(
                self.now + s.timeout_ms,
                Event::Deadline {
                    call: s.call_id,
                    server,
                },
            );
            match self.hop() {
                Some(delay) => {
                    self.calls.insert((server, s.call_id), s.call);
                    self.queue.push(
                        self.now + delay,
                        Event::RequestArrives {
                            call: s.call_id,
                            server,
                        },
                    );
                    self.say(format!("call {server}.{}: {what} sent", s.call_id));
                }
                None => self.say(format!(
                    "call {server}.{}: {what} sent, lost on the way",
                    s.call_id
                )),
            }
        }
        for d in done {
            self.finished(d, crashed.is_some())?;
        }
        if let Some(point) = crashed {
            self.crash_server(point.name());
        }
        Ok(())
    }

    /// Acts on a task's end. Its error is expected only when a crash point stopped it.
    fn finished(&mut self, done: Done, crashed: bool) -> Sim {
        let name = self.ops[done.op].name.clone();
        let failed = |what: &str, e: String| {
            if crashed {
                Ok(())
            } else {
                Err(format!("{what} {name}: {e}"))
            }
        };
        match done.what {
            Work::Invoke {
                client,
                answer: Ok(answer),
            } => {
                self.say(format!("invoke {name}: answers {answer:?}"));
                self.answer(done.op, client, answer);
                Ok(())
            }
            Work::Invoke { answer: Err(e), .. } => failed("invoke", e),
            Work::Replay(Ok(())) => {
                self.say(format!("replay {name}: done"));
                Ok(())
            }
            Work::Replay(Err(e)) => failed("replay", e),
            Work::Reconcile(Ok(reconciled)) => {
                self.say(format!("reconcile {name}: {reconciled:?}"));
                Ok(())
            }
            Work::Reconcile(Err(e)) => failed("reconcile", e),
        }
    }

    fn submission(&mut self, op: usize) -> Submission {
        let o = &self.ops[op];
        let action = match o.kind {
            Kind::Adapter => self.adapter.clone(),
            Kind::Template => self.template.clone(),
        };
        // As the invoke front draws them: from the process's id source.
        let effect_id = EffectId::from_unique(&self.server.state.ids.next());
        let invocation_id = InvocationId::from_unique(&self.server.state.ids.next());
        Submission {
            env_id: self.env.clone(),
            invocation_id,
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
            owner: self.server.state.replica.clone(),
            links: Default::default(),
            parent_span_id: None,
            shadow_decisions: None,
        }
    }

    /// Tells the client process `client` how its invoke of `op` stands.
    pub(crate) fn answer(&mut self, op: usize, client: u32, answer: Answer) {
        if let Some(delay) = self.hop() {
            self.queue.push(
                self.now + delay,
                Event::AnswerArrives { op, client, answer },
            );
        }
    }

    /// An invoke reaches the server: the production invoke path from step 2.
    pub(crate) async fn invoke(&mut self, op: usize, client: u32) -> Sim {
        let name = self.ops[op].name.clone();
        if !self.server.up {
            self.say(format!("invoke {name}: refused, the server is down"));
            return Ok(());
        }
        self.clock.set(self.now);
        let submission = self.submission(op);
        let definition = submission.action.definition.clone();
        let secrets = self.secrets.clone();
        let state = self.server.state.clone();
        self.say(format!("invoke {name}: arrives"));
        self.run_task(op, async move {
            let submitted = steward_server::submit_and_dispatch(
                &state,
                &submission,
                &definition,
                &secrets,
                &Progress::none(),
            )
            .await;
            let answer = match submitted {
                Ok(submitted) => answer_of(&state, &submission, submitted).await,
                Err(e) => Err(e.to_string()),
            };
            Work::Invoke { client, answer }
        })
        .await
    }

    /// A call reaches the provider, whichever process sent it, and its answer heads back.
    pub(crate) fn request_arrives(&mut self, call_id: u64, server: u32) {
        let call = self
            .calls
            .remove(&(server, call_id))
            .expect("an arriving call was sent");
        let fault = if self.calm || !call.writes() {
            Fault::None
        } else {
            Fault::ALL[self.rng.weighted(&[60, 10, 10, 10, 10])]
        };
        let before = self.provider.writes.len();
        let response = self.provider.receive(&call, fault);
        let wrote = if self.provider.writes.len() > before {
            ", written"
        } else {
            ""
        };
        let what = describe(&call, self);
        self.say(format!(
            "provider: call {server}.{call_id} {what}: {fault:?} -> {}{wrote}",
            response.status
        ));
        let delay = match (fault, self.hop()) {
            (_, None) => {
                self.say(format!(
                    "provider: call {server}.{call_id}: the response is lost"
                ));
                return;
            }
            (Fault::Slow, Some(d)) => DISPATCH_TIMEOUT_MS + d,
            (_, Some(d)) => d,
        };
        self.queue.push(
            self.now + delay,
            Event::ResponseArrives {
                call: call_id,
                server,
                response,
            },
        );
    }

    fn listening(&self, call_id: u64, server: u32) -> bool {
        server == self.server.generation && self.server.up && self.server.wire.waits_for(call_id)
    }

    pub(crate) async fn response_arrives(
        &mut self,
        call_id: u64,
        server: u32,
        response: Response,
    ) -> Sim {
        if !self.listening(call_id, server) {
            self.say(format!(
                "call {server}.{call_id}: the response finds no one waiting"
            ));
            return Ok(());
        }
        self.say(format!(
            "call {server}.{call_id}: response {}",
            response.status
        ));
        self.clock.set(self.now);
        self.server.wire.answer(call_id, Ok(response.exchange()));
        self.quiesce().await
    }

    pub(crate) async fn deadline(&mut self, call_id: u64, server: u32) -> Sim {
        if !self.listening(call_id, server) {
            return Ok(());
        }
        self.say(format!("call {server}.{call_id}: deadline"));
        self.clock.set(self.now);
        let timed_out = TransportFailure::new(FailureKind::TimedOut, "operation timed out");
        self.server.wire.answer(call_id, Err(timed_out));
        self.quiesce().await
    }

    /// The process dies: every task stops where it stands; what it committed stays.
    pub(crate) fn crash_server(&mut self, at: &str) {
        self.server.up = false;
        for task in self.server.tasks.drain(..) {
            task.abort();
        }
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
        let crash_seed = self.rng.next_u64();
        let generation = self.server.generation + 1;
        self.server = Server::start(&self.base, &self.tag, generation, crash_seed, self.calm);
        let sweep = Sweep::sole(&self.server.state.replica, Millis(self.now));
        let report = self.store.recover(&sweep).await.map_err(err)?;
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

    async fn invocation_of(&self, op: usize) -> Sim<InvocationRecord> {
        let action = match self.ops[op].kind {
            Kind::Adapter => &self.adapter.id,
            Kind::Template => &self.template.id,
        };
        self.store
            .invocation_by_operation_key(&self.env, action, &self.ops[op].key())
            .await
            .map_err(err)?
            .ok_or_else(|| format!("{} has no invocation", self.ops[op].name))
    }

    /// A read-only reconcile of an unknown effect, as an operator asks for it.
    pub(crate) async fn reconcile(&mut self, op: usize) -> Sim {
        if !self.server.up {
            return Ok(());
        }
        let inv = self.invocation_of(op).await?;
        let state = self.server.state.clone();
        let by = steward_store::Actor::key(&self.operator, Millis(self.now));
        self.run_task(op, async move {
            let reconciled = steward_server::reconcile(
                &state,
                &inv.env_id,
                &inv.effect_id,
                EvidenceSource::Api,
                by,
            )
            .await
            .map_err(|e| e.to_string());
            Work::Reconcile(reconciled)
        })
        .await
    }

    /// A replay of an unknown adapter effect: a new attempt under the same provider key.
    pub(crate) async fn replay(&mut self, op: usize) -> Sim {
        if !self.server.up {
            return Ok(());
        }
        let inv = self.invocation_of(op).await?;
        let state = self.server.state.clone();
        self.run_task(op, async move {
            let replayed = steward_server::replay(&state, &inv)
                .await
                .map_err(|e| e.to_string());
            Work::Replay(replayed)
        })
        .await
    }

    /// A person resolves an unknown effect that has no read-only lookup (`api/recovery.rs`, with
    /// a key other than the invoker's), from what they find at the provider.
    pub(crate) async fn resolve(&mut self, op: usize) -> Sim {
        let name = self.ops[op].name.clone();
        if !self.server.up {
            return Ok(());
        }
        self.dirty = true;
        let effect = self.invocation_of(op).await?.effect_id;
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
        match self.store.change_effect(&change).await {
            Ok(()) | Err(StoreError::StateConflict { .. }) => {}
            Err(e) => return Err(err(e)),
        }
        self.say(format!(
            "resolve {name}: {outcome:?} -> {}",
            change.to.name()
        ));
        Ok(())
    }
}

/// What the invoke front (`api/invoke.rs`) answers for a submission: the recorded answer, else
/// the invocation as it stands, its request marked answered as the front marks it when no
/// recorded answer did.
async fn answer_of(
    state: &AppState,
    submission: &Submission,
    submitted: steward_server::Submitted,
) -> Result<Answer, String> {
    if let Some(inv) = submitted.answered {
        return Ok(Answer::State(inv.state));
    }
    match submitted.outcome {
        SubmitOutcome::Created(inv) => {
            if let Some(key) = &submission.idempotency_key {
                state
                    .store
                    .finish_invoke_request(&inv.env_id, &submission.actor, key)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            let now = state
                .store
                .invocation(&inv.env_id, &inv.id)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("invocation {} vanished", inv.id))?;
            Ok(Answer::State(now.state))
        }
        SubmitOutcome::Existing(inv) | SubmitOutcome::Replayed(inv) => Ok(Answer::State(inv.state)),
        SubmitOutcome::InProgress => Ok(Answer::InProgress),
        other => Err(format!("unexpected {other:?}")),
    }
}
