//! Steward's deterministic simulator, in the manner of TigerBeetle's VOPR.
//!
//! One seed fixes one run: every choice (what the agent does next, every network delay and
//! drop, every provider fault, every crash and restart of the server and of the client) is drawn
//! from one PRNG, time is simulated, and one thread handles one event at a time, awaiting every
//! store call before the next. So a seed replays exactly, and [`run`] returns the same event log,
//! byte for byte, every time.
//!
//! What is real: the production server, in the manner of TigerBeetle's `src/testing/cluster.zig`
//! (the production replica on simulated storage, network and time). An invoke runs
//! `steward_server::submit_and_dispatch`, a replay `steward_server::replay`, a reconcile
//! `steward_server::reconcile` (the `stripe.refund` adapter's lookup included), a restart the
//! store's recovery sweep; under them the core and the store (`SqliteStore` on a temporary file,
//! its transactions, compare-and-set, unique indexes, reservations and recovery sweep). What is
//! simulated: the seams the server takes in its `AppState` (`wire.rs`: the clock, the id source,
//! the crash hook and the transport that carries every provider call), the provider behind the
//! transport (`provider.rs`), the network between the agent, the server and the provider
//! (`queue.rs`), the agent (`client.rs`), and the server process around the production code
//! (`server.rs`: its tasks, its crashes and restarts).
//!
//! The server's work runs as tasks on the current-thread runtime, one at a time: the world
//! starts one, or hands one parked call its answer, and waits until every task is parked on a
//! call or ended before it moves on (`wire.rs`), so no scheduling choice reaches the log.
//!
//! After every step the invariants are checked (`check.rs`); a violation ends the run with the
//! log so far. A [`Bug`] runs a broken build of the production dispatcher
//! (`steward_server::Defect`), to prove the checks can fail.
//!
//! ```no_run
//! let run = steward_sim::run(&steward_sim::Config::new(42));
//! assert!(run.violation.is_none(), "{}", run.log.join("\n"));
//! ```

mod check;
mod client;
mod provider;
mod queue;
mod rng;
mod server;
mod wire;
mod world;

/// A broken build of the server's dispatcher (`steward_server::Defect`), for showing that the
/// checks catch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// A replay is sent under a fresh provider idempotency key instead of the effect's own: a
    /// write that landed unseen is made again.
    ReplayWithoutIdempotency,
    /// The first attempt's request leaves before its `dispatching` attempt is committed (write
    /// path step 3 after step 4): a crash in between loses the record of a write that happened.
    SkipDurableAttempt,
    /// A send whose outcome is unknown is sent again at once, as a retrying HTTP client would:
    /// no new attempt on record, and nothing to make a second write harmless.
    ResendAfterUnknown,
}

impl Bug {
    pub const ALL: [Bug; 3] = [
        Bug::ReplayWithoutIdempotency,
        Bug::SkipDurableAttempt,
        Bug::ResendAfterUnknown,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Bug::ReplayWithoutIdempotency => "replay-without-idempotency",
            Bug::SkipDurableAttempt => "skip-durable-attempt",
            Bug::ResendAfterUnknown => "resend-after-unknown",
        }
    }

    /// The dispatcher's defect this bug builds.
    pub fn defect(self) -> steward_server::Defect {
        match self {
            Bug::ReplayWithoutIdempotency => steward_server::Defect::ReplayWithoutIdempotency,
            Bug::SkipDurableAttempt => steward_server::Defect::SendBeforeAttemptIsDurable,
            Bug::ResendAfterUnknown => steward_server::Defect::ResendAfterUnknown,
        }
    }

    /// The inverse of [`Bug::name`].
    pub fn parse(name: &str) -> Option<Bug> {
        Bug::ALL.into_iter().find(|b| b.name() == name)
    }
}

/// Steps a run takes by default, before its final phase.
pub const STEPS_DEFAULT: u32 = 60;

/// One run's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub seed: u64,
    /// Steps of random work before the final phase heals everything and settles what it can.
    pub steps: u32,
    pub bug: Option<Bug>,
}

impl Config {
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            steps: STEPS_DEFAULT,
            bug: None,
        }
    }
}

/// What a run found.
#[derive(Debug, Clone)]
pub struct Run {
    pub seed: u64,
    /// One line per step: what happened, in simulated time. The same seed gives the same bytes.
    pub log: Vec<String>,
    /// The first invariant that did not hold, if any.
    pub violation: Option<String>,
}

/// Runs one seed on a fresh store. Builds its own single-threaded runtime; to run many seeds,
/// [`Simulator`] keeps one.
pub fn run(config: &Config) -> Run {
    Simulator::new().run(config)
}

/// Runs seeds one after another on one single-threaded runtime and one store, each run in an
/// environment of its own.
pub struct Simulator {
    runtime: tokio::runtime::Runtime,
    /// The store successive runs share (see `world::Shared`).
    shared: std::cell::RefCell<Option<world::Shared>>,
}

impl Default for Simulator {
    fn default() -> Self {
        Self::new()
    }
}

impl Simulator {
    pub fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime builds");
        Self {
            runtime,
            shared: std::cell::RefCell::new(None),
        }
    }

    pub fn run(&self, config: &Config) -> Run {
        let mut shared = self.shared.borrow_mut();
        self.runtime.block_on(world::run(config, &mut shared))
    }
}
