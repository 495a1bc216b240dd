//! At most `MAX` of one kind of long or heavy request per API key at once on this process: open
//! event streams (`api/stream.rs`) and heavy reads (`api/bounded.rs`). A place is taken by
//! [`PerKeySlots::take`] and given back when its [`PerKeySlot`] is dropped, however the request
//! ends; a key with no place taken holds no entry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The places taken, by key id.
#[derive(Debug, Default)]
pub struct PerKeySlots<const MAX: usize> {
    taken: Mutex<HashMap<String, usize>>,
}

/// One request's place in [`PerKeySlots`], given back when dropped.
#[derive(Debug)]
pub struct PerKeySlot<const MAX: usize> {
    slots: Arc<PerKeySlots<MAX>>,
    key: String,
}

impl<const MAX: usize> PerKeySlots<MAX> {
    /// A place for one more request of `key`, or `None` when it already holds `MAX`.
    pub fn take(self: &Arc<Self>, key: &str) -> Option<PerKeySlot<MAX>> {
        let mut taken = self.taken.lock().unwrap_or_else(|p| p.into_inner());
        let count = taken.entry(key.to_string()).or_default();
        if *count >= MAX {
            return None;
        }
        *count += 1;
        Some(PerKeySlot {
            slots: self.clone(),
            key: key.to_string(),
        })
    }
}

impl<const MAX: usize> Drop for PerKeySlot<MAX> {
    fn drop(&mut self) {
        let mut taken = self.slots.taken.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = taken.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                taken.remove(&self.key);
            }
        }
    }
}

/// How many streams one key may hold open on one replica at once, in connections
/// (`api/stream.rs`). A client needs one; a few allow a reconnect to overlap the old
/// connection's teardown. More is a leak or abuse, answered 429.
pub const STREAM_CONNECTIONS_PER_KEY_MAX: usize = 5;

/// The open streams of this process, at most [`STREAM_CONNECTIONS_PER_KEY_MAX`] per key.
pub type StreamSlots = PerKeySlots<STREAM_CONNECTIONS_PER_KEY_MAX>;

/// How many heavy reads (`api/bounded.rs`) one key may run at once. Two lets a client page
/// while another read is in flight; past that, each further read would only add memory and CPU
/// for the same caller.
pub const HEAVY_READS_PER_KEY_MAX: usize = 2;

/// The heavy reads running on this process, at most [`HEAVY_READS_PER_KEY_MAX`] per key.
pub type HeavyReads = PerKeySlots<HEAVY_READS_PER_KEY_MAX>;

/// One running heavy read's place in [`HeavyReads`], given back when it is dropped.
pub type HeavyRead = PerKeySlot<HEAVY_READS_PER_KEY_MAX>;

// The admission is the application layer's rule (an invocation list from the console holds a
// place as one from the API does), so it lives beside the slots, not in `api/`.
impl HeavyReads {
    /// A place for one more heavy read of `key`, or `429 TOO_MANY_READS`.
    pub fn admit(self: &Arc<Self>, key: &str) -> crate::error::ApiResult<HeavyRead> {
        self.take(key).ok_or_else(|| {
            crate::error::ApiError::of(
                crate::error::codes::TOO_MANY_READS,
                format!(
                    "this key already runs {HEAVY_READS_PER_KEY_MAX} heavy reads (runs, spans, invocation lists); retry after one ends"
                ),
            )
            .with_details(serde_json::json!({
                "readsMax": HEAVY_READS_PER_KEY_MAX,
                "retryAfterSeconds": crate::error::HEAVY_READ_RETRY_AFTER_S,
            }))
        })
    }
}
