//! The simulated agent process, as `steward-client` behaves: an operation is journaled
//! (durably) before anything is sent; every resend carries the same operation key, input and
//! `Idempotency-Key`; after a crash it resends everything without a final answer; `unknown`
//! is polled, never re-sent as a new operation.

use crate::queue::{Answer, Event};
use crate::world::{Kind, Local, Operation, Sim, World, CLIENT_TIMEOUT_MS};
use serde_json::json;
use std::collections::BTreeMap;
use steward_core::EffectState;

pub(crate) struct Client {
    /// Which process this is: every restart starts a new one, and answers to an old one are lost.
    pub generation: u32,
    pub up: bool,
    /// Operations with a request out, and which send it was (the in-memory state a crash loses).
    pub waiting: BTreeMap<usize, u32>,
    sends: u32,
}

impl Client {
    pub(crate) fn new() -> Self {
        Self {
            generation: 1,
            up: true,
            waiting: BTreeMap::new(),
            sends: 0,
        }
    }
}

/// How long the client waits before resending after "in progress" or a non-final answer.
const RETRY_MS_MIN: i64 = 100;
const RETRY_MS_MAX: i64 = 600;

impl World {
    pub(crate) fn new_operation(&mut self) -> Sim {
        if !self.client.up {
            return Ok(());
        }
        let n = self.ops.len();
        let kind = if self.rng.percent(50) {
            Kind::Adapter
        } else {
            Kind::Template
        };
        let amount_cents = self.rng.between(1, 6) * 100;
        let name = format!("op-{n}");
        self.ops.push(Operation {
            input: json!({
                "op": name, "order": name, "paymentIntent": format!("pi_{name}"),
                "amount": amount_cents,
            }),
            name: name.clone(),
            kind,
            amount_cents,
            local: Local::Intended,
            seen: None,
            reserved_cents: 0,
            holding: None,
            retry_of: None,
            retried: false,
            invocation: None,
        });
        self.say(format!(
            "client: intends {name} ({kind:?}, {amount_cents} cents)"
        ));
        self.send(n);
        Ok(())
    }

    /// The client starts a new operation with `retryOf` for one it saved as `failed` (at most
    /// one retry per failure): safe only because `failed` means nothing happened.
    pub(crate) fn retry_failure(&mut self) -> Sim {
        if !self.client.up {
            return Ok(());
        }
        let Some(failed) = self.pick(|o| {
            o.local == Local::Final(EffectState::Failed) && !o.retried && o.invocation.is_some()
        }) else {
            return Ok(());
        };
        self.ops[failed].retried = true;
        let n = self.ops.len();
        let name = format!("op-{n}");
        let (kind, amount_cents) = (self.ops[failed].kind, self.ops[failed].amount_cents);
        let order = self.ops[failed].input["order"].clone();
        self.ops.push(Operation {
            input: json!({
                "op": name, "order": order, "paymentIntent": format!("pi_{name}"),
                "amount": amount_cents, "retry": n,
            }),
            name: name.clone(),
            kind,
            amount_cents,
            local: Local::Intended,
            seen: None,
            reserved_cents: 0,
            holding: None,
            retry_of: Some(failed),
            retried: false,
            invocation: None,
        });
        let of = self.ops[failed].name.clone();
        self.say(format!("client: retries failed {of} as {name} (retryOf)"));
        self.send(n);
        Ok(())
    }

    /// Sends (or resends) the invoke of `op`, and arms the client's own timeout.
    pub(crate) fn send(&mut self, op: usize) {
        if !self.client.up {
            return;
        }
        self.client.sends += 1;
        let send = self.client.sends;
        let client = self.client.generation;
        self.client.waiting.insert(op, send);
        self.queue.push(
            self.now + CLIENT_TIMEOUT_MS,
            Event::ClientTimeout { op, client, send },
        );
        let name = self.ops[op].name.clone();
        match self.hop() {
            Some(delay) => {
                self.queue
                    .push(self.now + delay, Event::InvokeArrives { op, client });
                self.say(format!("client: sends {name}"));
            }
            None => self.say(format!("client: sends {name}, lost on the way")),
        }
    }

    /// The client polls an operation it was answered `unknown` for (a resend: same key).
    pub(crate) fn client_poll(&mut self) {
        let waiting = self.client.waiting.clone();
        if let Some(op) = self.pick(|o| o.local == Local::Unknown) {
            if !waiting.contains_key(&op) {
                self.send(op);
            }
        }
    }

    pub(crate) fn answer_arrives(&mut self, op: usize, client: u32, answer: Answer) {
        let name = self.ops[op].name.clone();
        if client != self.client.generation || !self.client.up {
            self.say(format!(
                "client: the answer for {name} found its process gone"
            ));
            return;
        }
        self.client.waiting.remove(&op);
        match answer {
            Answer::InProgress | Answer::State(EffectState::Ready | EffectState::Dispatching) => {
                let at = self.now + self.rng.between(RETRY_MS_MIN, RETRY_MS_MAX);
                self.queue.push(at, Event::ClientRetry { op, client });
                self.say(format!("client: {name} is {answer:?}, retries later"));
            }
            Answer::State(EffectState::Unknown) => {
                self.ops[op].local = Local::Unknown;
                self.say(format!("client: {name} is unknown, needs reconciliation"));
            }
            Answer::State(state) => {
                self.ops[op].local = Local::Final(state);
                self.say(format!("client: {name} saved as {}", state.name()));
            }
        }
    }

    pub(crate) fn client_timeout(&mut self, op: usize, client: u32, send: u32) {
        if client == self.client.generation
            && self.client.up
            && self.client.waiting.get(&op) == Some(&send)
        {
            let name = self.ops[op].name.clone();
            self.say(format!("client: {name} timed out"));
            self.send(op);
        }
    }

    pub(crate) fn client_retry(&mut self, op: usize, client: u32) {
        if client == self.client.generation
            && self.client.up
            && !self.client.waiting.contains_key(&op)
        {
            self.send(op);
        }
    }

    pub(crate) fn crash_client(&mut self) {
        self.client.up = false;
        self.client.waiting.clear();
        self.say("client crash");
        let back = if self.calm {
            1
        } else {
            self.rng.between(100, 2_000)
        };
        self.queue.push(self.now + back, Event::ClientRestart);
    }

    /// A new client process reads its journal and resends every operation without a final
    /// answer, under the same keys.
    pub(crate) fn restart_client(&mut self) {
        if self.client.up {
            return;
        }
        self.client.generation += 1;
        self.client.up = true;
        self.say("client restart: resends what has no final answer");
        for op in 0..self.ops.len() {
            if !matches!(self.ops[op].local, Local::Final(_)) {
                self.send(op);
            }
        }
    }
}
