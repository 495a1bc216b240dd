//! Test builds only: the state a server holds, around a store a test made, with loopback
//! destinations allowed, a fixed vault key, a 1 s dispatch deadline and no absence grace.

use crate::state::AppState;
use std::sync::Arc;
use std::time::Duration;
use steward_store::Store;

/// The state of a test server on `store`, as replica `replica`.
pub(crate) fn on(store: Arc<dyn Store>, replica: &str) -> AppState {
    let outbound = crate::OutboundPolicy {
        allow_insecure: true,
    };
    AppState {
        store,
        vault: crate::Vault::from_key([7; 32]),
        clock: Arc::new(crate::SystemClock),
        http: crate::http_client(outbound).unwrap(),
        transport: Arc::new(crate::HttpTransport::new(
            crate::http_client(outbound).unwrap(),
        )),
        ids: Arc::new(crate::UlidIds),
        outbound,
        dispatch_timeout: Duration::from_secs(1),
        approval_events: Arc::new(tokio::sync::Notify::new()),
        absence_grace: Duration::ZERO,
        metrics: Arc::new(crate::Metrics::default()),
        crash_hook: None,
        defect: None,
        replica: steward_core::ReplicaId::from_unique(replica),
        lease: std::sync::Arc::new(crate::lease::Lease::unlimited()),
        key_usage: Arc::default(),
        integrations: Arc::default(),
        stream_slots: Arc::default(),
        heavy_reads: Arc::default(),
        pending: Arc::default(),
    }
}
