//! The pending events of one run, ordered by simulated time and then by the order they were
//! queued: the only concurrency there is. Delays chosen by the seed reorder messages; nothing
//! else does.

use crate::provider::Response;
use std::collections::BTreeMap;
use steward_core::EffectState;

/// What the server told the client about an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// `409 idempotency_request_in_progress`: the first request under the key is still running.
    InProgress,
    /// The invocation, in this state.
    State(EffectState),
}

#[derive(Debug, Clone)]
pub(crate) enum Event {
    /// The client's invoke request reaches the server.
    InvokeArrives {
        op: usize,
        client: u32,
    },
    /// The server's answer to an invoke reaches the client process that sent it.
    AnswerArrives {
        op: usize,
        client: u32,
        answer: Answer,
    },
    /// Call `call` of server process `server` reaches the provider.
    RequestArrives {
        call: u64,
        server: u32,
    },
    /// The provider's response to call `call` reaches the server process that sent it.
    ResponseArrives {
        call: u64,
        server: u32,
        response: Response,
    },
    /// Call `call`'s deadline passes in the server process that sent it.
    Deadline {
        call: u64,
        server: u32,
    },
    /// The client gives up waiting for the answer to its `send`-th request for `op`.
    ClientTimeout {
        op: usize,
        client: u32,
        send: u32,
    },
    /// The client resends an operation it was told to retry later.
    ClientRetry {
        op: usize,
        client: u32,
    },
    ServerRestart,
    ClientRestart,
}

#[derive(Default)]
pub(crate) struct Queue {
    events: BTreeMap<(i64, u64), Event>,
    queued: u64,
}

impl Queue {
    pub(crate) fn push(&mut self, at_ms: i64, event: Event) {
        self.events.insert((at_ms, self.queued), event);
        self.queued += 1;
    }

    pub(crate) fn pop(&mut self) -> Option<(i64, Event)> {
        self.events.pop_first().map(|((at, _), e)| (at, e))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}
