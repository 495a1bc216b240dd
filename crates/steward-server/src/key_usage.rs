//! When this process last recorded each key's use (`auth::note_used`): kept in the server's
//! state, so it knows nothing of requests.

use std::collections::HashMap;
use std::sync::Mutex;
use steward_core::{KeyId, Millis};
use steward_store::ApiKeyRecord;

/// How often a key's last-used time is written, in seconds: fine enough for `keys list` to
/// tell a key in use from an abandoned one, coarse enough that a busy key costs one commit a
/// minute rather than one per request.
pub const KEY_LAST_USED_INTERVAL_S: i64 = 60;

/// How many keys [`KeyUsage`] remembers before it forgets those noted more than an interval
/// ago: far more keys than one deployment has, so the map is pruned rarely and stays small.
const KEY_USAGE_ENTRIES_MAX: usize = 10_000;

/// When this process last wrote each key's last use, so that concurrent requests with one key
/// write it once per interval, not once each while the first write is under way.
#[derive(Debug, Default)]
pub struct KeyUsage {
    noted: Mutex<HashMap<KeyId, Millis>>,
}

impl KeyUsage {
    /// True when a request with `key` at `now` should record the key's use: neither the stored
    /// last use nor this process's last write of it is within the interval. Marks it written.
    pub fn due(&self, key: &ApiKeyRecord, now: Millis) -> bool {
        let interval_ms = KEY_LAST_USED_INTERVAL_S * 1_000;
        let recent = |at: Millis| now.0 - at.0 < interval_ms;
        if key.last_used_at.is_some_and(recent) {
            return false;
        }
        let mut noted = self.noted.lock().unwrap_or_else(|e| e.into_inner());
        if noted.get(&key.id).copied().is_some_and(recent) {
            return false;
        }
        if noted.len() >= KEY_USAGE_ENTRIES_MAX {
            noted.retain(|_, at| recent(*at));
        }
        noted.insert(key.id.clone(), now);
        true
    }
}
