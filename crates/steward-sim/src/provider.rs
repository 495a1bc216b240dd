//! The in-memory provider: a Stripe-shaped refunds API that counts committed writes, deduplicates
//! by the provider idempotency key when one is sent (as the `stripe.refund` adapter does) and
//! not otherwise (a template action), and fails in the ways real providers do.

use std::collections::BTreeMap;

/// What the provider does with one request, chosen by the seed when it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Writes and answers 200 with a succeeded refund.
    None,
    /// Refuses (400); writes nothing.
    Reject,
    /// Answers 500 with `Stripe-Should-Retry: true` before writing: nothing happened.
    ErrorBeforeCommit,
    /// Writes, then answers 500: the caller cannot tell.
    ErrorAfterCommit,
    /// Writes, and answers only after the caller's deadline.
    Slow,
}

impl Fault {
    pub(crate) const ALL: [Fault; 5] = [
        Fault::None,
        Fault::Reject,
        Fault::ErrorBeforeCommit,
        Fault::ErrorAfterCommit,
        Fault::Slow,
    ];
}

/// The provider's answer as it travels back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Response {
    /// 200, a refund object with status `succeeded`.
    Refund,
    /// 400.
    Rejected,
    /// 500, with or without `Stripe-Should-Retry: true`.
    ServerError { should_retry: bool },
}

/// One committed write.
#[derive(Debug, Clone)]
pub(crate) struct Write {
    pub op: usize,
    pub attempt: u32,
}

#[derive(Default)]
pub(crate) struct Provider {
    pub writes: Vec<Write>,
    /// Every request that reached the provider, written or not: (operation, attempt).
    pub received: Vec<(usize, u32)>,
    by_key: BTreeMap<String, usize>,
}

impl Provider {
    /// Handles one request. A key already written answers with that write and writes nothing.
    pub(crate) fn receive(
        &mut self,
        op: usize,
        attempt: u32,
        key: Option<&str>,
        fault: Fault,
    ) -> Response {
        self.received.push((op, attempt));
        if key.is_some_and(|k| self.by_key.contains_key(k)) {
            return Response::Refund;
        }
        let writes = matches!(fault, Fault::None | Fault::ErrorAfterCommit | Fault::Slow);
        if writes {
            self.writes.push(Write { op, attempt });
            if let Some(k) = key {
                self.by_key.insert(k.to_string(), self.writes.len() - 1);
            }
        }
        match fault {
            Fault::None | Fault::Slow => Response::Refund,
            Fault::Reject => Response::Rejected,
            Fault::ErrorBeforeCommit => Response::ServerError { should_retry: true },
            Fault::ErrorAfterCommit => Response::ServerError {
                should_retry: false,
            },
        }
    }

    /// The read-only lookup the adapter's reconcile makes: is there a write under this key?
    pub(crate) fn has(&self, key: &str) -> bool {
        self.by_key.contains_key(key)
    }

    pub(crate) fn writes_of(&self, op: usize) -> usize {
        self.writes.iter().filter(|w| w.op == op).count()
    }
}
