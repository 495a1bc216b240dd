//! Shared server state, built once at start-up.

use crate::clock::{Clock, IdSource};
use crate::dispatch::defect::Defect;
use crate::dispatch::outbound::OutboundPolicy;
use crate::dispatch::transport::Transport;
use crate::vault::Vault;
use std::sync::Arc;
use std::time::Duration;
use steward_store::Store;

/// How long one provider call may take before its attempt is `unknown`, in milliseconds. It is
/// well under the official SDK's 30 s client timeout, so the caller hears the honest answer
/// instead of timing out and guessing.
pub const DISPATCH_TIMEOUT_MS_DEFAULT: u64 = 10_000;

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub vault: Vault,
    pub clock: Arc<dyn Clock>,
    /// Builds the provider requests (`dispatch/request.rs`) and delivers webhooks.
    pub http: reqwest::Client,
    /// Carries every provider call: dispatches, lookups and read-backs (`dispatch/transport.rs`).
    /// `HttpTransport` over `http` in a server process; simulated in `steward-sim`.
    pub transport: Arc<dyn Transport>,
    /// Fresh id suffixes (`clock.rs`): ULIDs in a server process; numbered in `steward-sim`.
    pub ids: Arc<dyn IdSource>,
    pub outbound: OutboundPolicy,
    pub dispatch_timeout: Duration,
    /// Woken whenever an approval is decided or expires, so long polls answer at once.
    pub approval_events: Arc<tokio::sync::Notify>,
    /// How long after an attempt's deadline a provider may still land it; until then "not
    /// found" is not proof of absence.
    pub absence_grace: Duration,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// In-process simulations only: crash (stop the dispatch) where this says so.
    pub crash_hook: Option<crate::crash::CrashHook>,
    /// In-process simulations only: run a deliberately broken dispatcher (`dispatch/defect.rs`).
    pub defect: Option<Defect>,
    /// This process among the replicas sharing the store: the owner recorded on everything it
    /// puts in flight (`replica.rs`).
    pub replica: steward_core::ReplicaId,
    /// This replica's hold on its own lease: no provider request leaves while it does not hold
    /// it (`lease::Lease`, `dispatch/hold.rs`).
    pub lease: Arc<crate::lease::Lease>,
    /// When this process last recorded each key's use (`auth::note_used`).
    pub key_usage: Arc<crate::key_usage::KeyUsage>,
    /// The integrations an account can be connected for (`integrations.rs`).
    pub integrations: Arc<crate::integrations::Integrations>,
    /// The event streams open on this process, by key (`api/stream.rs`).
    pub stream_slots: Arc<crate::per_key::StreamSlots>,
    /// The heavy reads running on this process, by key (`api/bounded.rs`).
    pub heavy_reads: Arc<crate::per_key::HeavyReads>,
    /// Answers of provider calls this process could not record yet (`dispatch/pending.rs`).
    pub pending: Arc<crate::dispatch::pending::PendingAnswers>,
}

impl crate::crash::Hooked for AppState {
    fn crash_hook(&self) -> Option<&crate::crash::CrashHook> {
        self.crash_hook.as_ref()
    }
}

/// Thirty seconds: a provider that lost its client usually finishes or abandons a request
/// within seconds; this leaves a wide margin before "not found" becomes conclusive.
pub const ABSENCE_GRACE_MS_DEFAULT: u64 = 30_000;
/// How often the background reconciler looks for due unknown effects, in milliseconds.
pub const RECONCILE_INTERVAL_MS_DEFAULT: u64 = 1_000;
