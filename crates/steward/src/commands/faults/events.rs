//! The run's event log: one timestamped line per fault, request and answer, written to a file as
//! it happens (kept when the run fails) and kept in memory for the checks.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a client learned from one invoke request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// An invocation came back (HTTP 200 or 202): the operation is acknowledged.
    Acknowledged { invocation: String, status: String },
    /// An error whose text says nothing was changed and nothing was sent (failed before
    /// dispatch): `STORAGE_UNAVAILABLE`.
    NotSent { status: u16, code: String },
    /// An error that asks to call again with the same key (5xx, 409 in progress, 429, an
    /// honest "outcome unknown").
    Retry { status: u16, code: String },
    /// A refusal retrying cannot change (4xx): no invocation exists.
    Refused { status: u16, code: String },
    /// No answer: a timeout or a broken connection. The request may have been handled.
    Unanswered { reason: String },
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// A fault injected (or healed): `kind` names it (`primary-kill`, `replica-kill`, ...).
    Fault { kind: String, detail: String },
    /// The Steward process (embedded) or the PostgreSQL primary died: the start of an outage.
    PrimaryDeath,
    /// An invoke request sent for `operation`.
    Request {
        operation: String,
        replica: usize,
        attempt: u32,
    },
    /// Its answer; `sent_at` is when the request left (to tell whether it left after a death).
    Answer {
        operation: String,
        replica: usize,
        sent_at: Duration,
        answer: Answer,
    },
    /// An approval decided by the suite's operator.
    Decision {
        approval: String,
        operation: String,
        decision: String,
        status: u16,
    },
    /// Anything else worth a line (phases, recovery waits).
    Note { text: String },
}

/// A timestamped event: `at` is the time since the run began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stamped {
    pub(crate) at: Duration,
    pub(crate) event: Event,
}

struct Inner {
    events: Vec<Stamped>,
    file: Option<std::fs::File>,
}

/// The shared log (clones write to the same one).
#[derive(Clone)]
pub(crate) struct EventLog {
    started: Instant,
    inner: Arc<Mutex<Inner>>,
}

impl EventLog {
    /// A log written to `path` (created), timed from now.
    pub(crate) fn create(path: &Path) -> std::io::Result<EventLog> {
        let mut file = std::fs::File::create(path)?;
        #[allow(clippy::disallowed_methods)] // a test tool's log names the wall-clock start once
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        writeln!(
            file,
            "# steward faults event log; started at unix {wall}; times are seconds since"
        )?;
        Ok(EventLog {
            started: Instant::now(),
            inner: Arc::new(Mutex::new(Inner {
                events: Vec::new(),
                file: Some(file),
            })),
        })
    }

    /// The time since the run began.
    pub(crate) fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// Records `event` now.
    pub(crate) fn record(&self, event: Event) {
        let at = self.now();
        self.record_at(at, event);
    }

    /// Records `event` at `at` (the checks' unit tests build logs with chosen times).
    pub(crate) fn record_at(&self, at: Duration, event: Event) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(file) = inner.file.as_mut() {
            let _ = writeln!(file, "{:>10.3} {}", at.as_secs_f64(), line(&event));
        }
        inner.events.push(Stamped { at, event });
    }

    pub(crate) fn note(&self, text: impl Into<String>) {
        self.record(Event::Note { text: text.into() });
    }

    /// Every event so far, in the order recorded.
    pub(crate) fn events(&self) -> Vec<Stamped> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .events
            .clone()
    }

    /// Flushes the file.
    pub(crate) fn flush(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(file) = inner.file.as_mut() {
            let _ = file.flush();
        }
    }
}

/// One event as a log line (after its time).
fn line(event: &Event) -> String {
    match event {
        Event::Fault { kind, detail } => format!("fault {kind} {detail}"),
        Event::PrimaryDeath => "fault primary-death".to_string(),
        Event::Request {
            operation,
            replica,
            attempt,
        } => format!("request {operation} replica={replica} attempt={attempt}"),
        Event::Answer {
            operation,
            replica,
            sent_at,
            answer,
        } => {
            let what = match answer {
                Answer::Acknowledged { invocation, status } => {
                    format!("acknowledged {invocation} {status}")
                }
                Answer::NotSent { status, code } => format!("not-sent {status} {code}"),
                Answer::Retry { status, code } => format!("retry {status} {code}"),
                Answer::Refused { status, code } => format!("refused {status} {code}"),
                Answer::Unanswered { reason } => format!("no-answer {reason}"),
            };
            format!(
                "answer {operation} replica={replica} sent={:.3} {what}",
                sent_at.as_secs_f64()
            )
        }
        Event::Decision {
            approval,
            operation,
            decision,
            status,
        } => format!("decision {approval} {operation} {decision} {status}"),
        Event::Note { text } => format!("note {text}"),
    }
}
