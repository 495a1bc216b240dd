//! The seams the production server runs on inside the simulator: its clock, its id source, its
//! crash hook and its transport. Each server process has a [`Wire`] of its own; its transport
//! parks every provider call on the wire until the simulated network answers it, so the real
//! dispatcher and reconciler run step by step, one at a time, under the world's control.
//!
//! Scheduling: the world runs on a current-thread runtime and lets one server task run at a
//! time. It starts a task (or hands a parked one its answer), then waits until the wire is
//! quiet: every live task of the process is parked on a call or has ended
//! ([`Wire::quiet`]). Only then does it look at what the task sent, and move on. So which task
//! runs, and in what order its store calls and sends happen, is fixed by the seed; no tokio
//! scheduling choice reaches the log.

use crate::provider::Call;
use crate::rng::Prng;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use steward_core::{CrashPoint, Millis};
use steward_server::{Clock, Exchange, FailureKind, IdSource, Transport, TransportFailure};
use tokio::sync::{oneshot, Notify};

/// Percent of crash points reached at which the process dies (outside the final phase). Three
/// points on a dispatch: about one dispatch in sixteen stops at one.
const CRASH_POINT_PERCENT: u64 = 2;

/// The simulated clock: what the world says the time is.
#[derive(Default)]
pub(crate) struct SimClock(AtomicI64);

impl SimClock {
    pub(crate) fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for SimClock {
    fn now(&self) -> Millis {
        Millis(self.0.load(Ordering::SeqCst))
    }
}

/// Ids numbered in the order they are drawn, with the run's tag: a function of the seed.
pub(crate) struct SimIds {
    tag: String,
    drawn: AtomicU64,
}

impl SimIds {
    pub(crate) fn new(tag: &str) -> Self {
        Self {
            tag: tag.to_string(),
            drawn: AtomicU64::new(0),
        }
    }
}

impl IdSource for SimIds {
    fn next(&self) -> String {
        let n = self.drawn.fetch_add(1, Ordering::SeqCst) + 1;
        format!("{}n{n:06}", self.tag)
    }
}

/// What a server task reports when it ends, for the world to act on.
pub(crate) struct Done {
    pub op: usize,
    pub what: Work,
}

/// Which work a task did, and how it came out.
pub(crate) enum Work {
    /// An invoke from client process `client`: the answer it gets, or an error.
    Invoke {
        client: u32,
        answer: Result<crate::queue::Answer, String>,
    },
    Replay(Result<(), String>),
    Reconcile(Result<steward_server::Reconciled, String>),
}

/// A provider call the process sent and waits on.
pub(crate) struct Sent {
    pub call_id: u64,
    pub call: Call,
    pub timeout_ms: i64,
}

type Reply = oneshot::Sender<Result<Exchange, TransportFailure>>;

#[derive(Default)]
struct Inner {
    calls: u64,
    /// Calls sent since the world last looked.
    outbox: Vec<Sent>,
    /// Calls waiting for their answer, by id: one parked task each.
    waiting: BTreeMap<u64, Reply>,
    /// Tasks started and not yet ended.
    live: usize,
    done: Vec<Done>,
    /// Where the crash hook stopped the process, if it did.
    crashed: Option<CrashPoint>,
    crash_rng: Option<Prng>,
    /// The final phase: no crash points fire.
    calm: bool,
}

/// One server process's connection to the world.
#[derive(Default)]
pub(crate) struct Wire {
    inner: Mutex<Inner>,
    changed: Notify,
}

impl Wire {
    pub(crate) fn new(crash_seed: u64, calm: bool) -> Arc<Wire> {
        let wire = Wire::default();
        {
            let mut inner = wire.lock();
            inner.crash_rng = Some(Prng::new(crash_seed));
            inner.calm = calm;
        }
        Arc::new(wire)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .expect("the wire's lock is never poisoned")
    }

    pub(crate) fn set_calm(&self) {
        self.lock().calm = true;
    }

    /// The crash hook: at each crash point reached, the seed decides whether the process dies.
    pub(crate) fn crash_hook(self: &Arc<Self>) -> steward_server::CrashHook {
        let wire = self.clone();
        Arc::new(move |point| {
            let mut inner = wire.lock();
            if inner.calm {
                return false;
            }
            let rng = inner.crash_rng.as_mut().expect("the wire has a crash seed");
            let dies = rng.percent(CRASH_POINT_PERCENT);
            if dies {
                inner.crashed = Some(point);
            }
            dies
        })
    }

    /// Counts a task as started; the guard counts it ended when dropped (ended or aborted).
    pub(crate) fn started(self: &Arc<Self>) -> Live {
        self.lock().live += 1;
        Live(self.clone())
    }

    pub(crate) fn finish(&self, done: Done) {
        self.lock().done.push(done);
    }

    /// Waits until every live task is parked on a call or has ended.
    pub(crate) async fn quiet(&self) {
        loop {
            {
                let inner = self.lock();
                if inner.live == inner.waiting.len() {
                    return;
                }
            }
            self.changed.notified().await;
        }
    }

    /// Takes what the tasks sent, what they finished and where the process crashed since the
    /// world last looked.
    pub(crate) fn take(&self) -> (Vec<Sent>, Vec<Done>, Option<CrashPoint>) {
        let mut inner = self.lock();
        (
            std::mem::take(&mut inner.outbox),
            std::mem::take(&mut inner.done),
            inner.crashed.take(),
        )
    }

    /// Hands call `call_id` its answer, if its task still waits for it (`false` when the
    /// deadline came first).
    pub(crate) fn answer(&self, call_id: u64, answer: Result<Exchange, TransportFailure>) -> bool {
        let reply = self.lock().waiting.remove(&call_id);
        match reply {
            Some(reply) => {
                let _ = reply.send(answer);
                true
            }
            None => false,
        }
    }

    pub(crate) fn waits_for(&self, call_id: u64) -> bool {
        self.lock().waiting.contains_key(&call_id)
    }
}

/// A live task; dropped when it ends or is aborted.
pub(crate) struct Live(Arc<Wire>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.lock().live -= 1;
        self.0.changed.notify_one();
    }
}

/// A call parked on the wire; dropped when its task resumes or is aborted.
struct Parked {
    wire: Arc<Wire>,
    call_id: u64,
}

impl Drop for Parked {
    fn drop(&mut self) {
        // Answered calls are gone already; an aborted task's call is no longer waited on.
        self.wire.lock().waiting.remove(&self.call_id);
    }
}

/// The server's transport inside the simulator: the call goes on the wire, and the task waits
/// until the world answers it (or its deadline passes).
pub(crate) struct SimTransport(pub Arc<Wire>);

#[async_trait::async_trait]
impl Transport for SimTransport {
    async fn execute(&self, request: reqwest::Request) -> Result<Exchange, TransportFailure> {
        let call = Call::of(&request);
        let timeout_ms = request
            .timeout()
            .map_or(crate::world::DISPATCH_TIMEOUT_MS, |t| t.as_millis() as i64);
        let (reply, answered) = oneshot::channel();
        let call_id = {
            let mut inner = self.0.lock();
            inner.calls += 1;
            let call_id = inner.calls;
            inner.outbox.push(Sent {
                call_id,
                call,
                timeout_ms,
            });
            inner.waiting.insert(call_id, reply);
            call_id
        };
        self.0.changed.notify_one();
        let _parked = Parked {
            wire: self.0.clone(),
            call_id,
        };
        answered.await.unwrap_or_else(|_| {
            Err(TransportFailure::new(
                FailureKind::BrokenAfterSend,
                "the simulated process lost the connection",
            ))
        })
    }
}
