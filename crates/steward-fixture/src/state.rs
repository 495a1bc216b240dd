//! The fixture's memory: committed refunds, saved idempotent results, the
//! in-flight idempotency keys and the armed fault, plus durable persistence.
//!
//! A *commit* appends a refund (and/or an idempotent result) to the store.
//! With a state file the new state is first written durably (temp file,
//! fsync, rename, fsync of the directory) and only then applied in memory, so
//! nothing is ever reported, counted or answered that is not on disk. Commits
//! are serialized by one lock and run on a blocking thread (see
//! [`Store::commit`]).

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::faults::{FaultPlan, FaultState};
use crate::generic::GenericWrite;
use crate::refunds::Refund;

const SNAPSHOT_VERSION: u32 = 1;

/// A response saved under an `Idempotency-Key`, replayed verbatim.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct SavedResponse {
    /// Identifies the parameters of the first request.
    pub fingerprint: String,
    pub status: u16,
    pub body: Value,
}

/// What goes into the state file.
#[derive(Default, Serialize, Deserialize)]
struct Snapshot {
    version: u32,
    refunds: Vec<Refund>,
    idempotency: BTreeMap<String, SavedResponse>,
    /// Generic writes (`generic.rs`); absent from state files written before they existed.
    #[serde(default)]
    writes: Vec<GenericWrite>,
}

#[derive(Default)]
struct Inner {
    refunds: Vec<Refund>,
    writes: Vec<GenericWrite>,
    saved: HashMap<String, SavedResponse>,
    /// Keys of requests still being handled, with the owner's token.
    in_flight: HashMap<String, u64>,
    faults: FaultState,
}

/// Shared state of one fixture.
pub(crate) struct Store {
    state_file: Option<PathBuf>,
    /// Serializes commits and resets (held across the file write).
    persist: Mutex<()>,
    inner: Mutex<Inner>,
    next_token: AtomicU64,
    /// Registered payment intents (`payment_intents.rs`), in memory only.
    payment_intents: Mutex<HashMap<String, crate::payment_intents::PaymentIntent>>,
}

/// Outcome of claiming an idempotency key for a request.
pub(crate) enum Claim {
    /// Same key, same parameters, already answered: replay this.
    Replay(SavedResponse),
    /// Same key, different parameters.
    Mismatch,
    /// Another request with this key is still in flight.
    InUse,
    /// The key is ours until the guard drops.
    Claimed(KeyGuard),
}

/// Holds an idempotency key "in flight"; releases it on drop.
pub(crate) struct KeyGuard {
    store: Arc<Store>,
    key: String,
    token: u64,
}

impl Drop for KeyGuard {
    fn drop(&mut self) {
        let mut inner = self.store.lock();
        if inner.in_flight.get(&self.key) == Some(&self.token) {
            inner.in_flight.remove(&self.key);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Store {
    /// Opens a store, loading `state_file` if it exists.
    pub fn open(state_file: Option<PathBuf>) -> Result<Arc<Store>, FixtureError> {
        let mut inner = Inner::default();
        if let Some(path) = &state_file {
            if let Some(snapshot) = load(path)? {
                inner.refunds = snapshot.refunds;
                inner.writes = snapshot.writes;
                inner.saved = snapshot.idempotency.into_iter().collect();
            }
        }
        Ok(Arc::new(Store {
            state_file,
            persist: Mutex::new(()),
            inner: Mutex::new(inner),
            next_token: AtomicU64::new(1),
            payment_intents: Mutex::new(HashMap::new()),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    pub(crate) fn payment_intent(&self, id: &str) -> Option<crate::payment_intents::PaymentIntent> {
        lock(&self.payment_intents).get(id).cloned()
    }

    pub(crate) fn register_payment_intent(&self, intent: crate::payment_intents::PaymentIntent) {
        lock(&self.payment_intents).insert(intent.id.clone(), intent);
    }

    /// Claims `key` for a request whose parameters have `fingerprint`.
    pub fn claim(self: &Arc<Self>, key: &str, fingerprint: &str) -> Claim {
        let mut inner = self.lock();
        if inner.in_flight.contains_key(key) {
            return Claim::InUse;
        }
        if let Some(saved) = inner.saved.get(key) {
            return if saved.fingerprint == fingerprint {
                Claim::Replay(saved.clone())
            } else {
                Claim::Mismatch
            };
        }
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        inner.in_flight.insert(key.to_string(), token);
        Claim::Claimed(KeyGuard {
            store: Arc::clone(self),
            key: key.to_string(),
            token,
        })
    }

    /// Commits a refund and/or a saved idempotent result: durably first (with
    /// a state file), then in memory. Blocking; call from a blocking thread.
    /// On error nothing was committed.
    pub fn commit(
        &self,
        refund: Option<Refund>,
        saved: Option<(String, SavedResponse)>,
    ) -> io::Result<()> {
        self.commit_all(refund, None, saved)
    }

    /// Commits a generic write and/or its saved result, as [`Store::commit`] does a refund.
    pub fn commit_generic(
        &self,
        write: Option<GenericWrite>,
        saved: (String, SavedResponse),
    ) -> io::Result<()> {
        self.commit_all(None, write, Some(saved))
    }

    fn commit_all(
        &self,
        refund: Option<Refund>,
        write: Option<GenericWrite>,
        saved: Option<(String, SavedResponse)>,
    ) -> io::Result<()> {
        let _persist = lock(&self.persist);
        if let Some(path) = &self.state_file {
            let bytes = {
                let inner = self.lock();
                let mut snapshot = Snapshot {
                    version: SNAPSHOT_VERSION,
                    refunds: inner.refunds.clone(),
                    idempotency: inner.saved.clone().into_iter().collect(),
                    writes: inner.writes.clone(),
                };
                snapshot.refunds.extend(refund.clone());
                snapshot.writes.extend(write.clone());
                if let Some((key, resp)) = &saved {
                    snapshot.idempotency.insert(key.clone(), resp.clone());
                }
                serde_json::to_vec_pretty(&snapshot).map_err(io::Error::other)?
            };
            write_durably(path, &bytes)?;
        }
        let mut inner = self.lock();
        inner.refunds.extend(refund);
        inner.writes.extend(write);
        if let Some((key, resp)) = saved {
            inner.saved.insert(key, resp);
        }
        Ok(())
    }

    /// Clears refunds, saved keys and faults, and removes the state file.
    /// Blocking.
    pub fn reset(&self) -> io::Result<()> {
        let _persist = lock(&self.persist);
        {
            let mut inner = self.lock();
            inner.refunds.clear();
            inner.writes.clear();
            inner.saved.clear();
            inner.in_flight.clear();
            inner.faults = FaultState::default();
        }
        if let Some(path) = &self.state_file {
            match fs::remove_file(path) {
                Ok(()) => sync_parent(path)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Committed refunds, in commit order.
    pub fn refunds(&self) -> Vec<Refund> {
        self.lock().refunds.clone()
    }

    /// Number of committed writes: refunds and generic writes.
    pub fn write_count(&self) -> u64 {
        let inner = self.lock();
        (inner.refunds.len() + inner.writes.len()) as u64
    }

    /// Committed generic writes, in commit order.
    pub fn generic_writes(&self) -> Vec<GenericWrite> {
        self.lock().writes.clone()
    }

    /// The generic write committed under `key`.
    pub fn generic_write(&self, key: &str) -> Option<GenericWrite> {
        self.lock().writes.iter().find(|w| w.key == key).cloned()
    }

    /// The refund with this id.
    pub fn find(&self, id: &str) -> Option<Refund> {
        self.lock().refunds.iter().find(|r| r.id == id).cloned()
    }

    /// Refunds (optionally of one payment intent), newest first, at most
    /// `limit`; and whether more matched.
    pub fn list(&self, payment_intent: Option<&str>, limit: usize) -> (Vec<Refund>, bool) {
        let inner = self.lock();
        let mut matching = inner
            .refunds
            .iter()
            .rev()
            .filter(|r| payment_intent.is_none_or(|pi| r.payment_intent == pi));
        let page: Vec<Refund> = matching.by_ref().take(limit).cloned().collect();
        let has_more = matching.next().is_some();
        (page, has_more)
    }

    /// Arms a fault plan.
    pub fn set_faults(&self, plan: FaultPlan) {
        self.lock().faults.arm(plan);
    }

    /// Consumes the armed fault for one refund write.
    pub fn take_fault(&self) -> Option<FaultPlan> {
        self.lock().faults.take()
    }

    /// The armed plan and how many writes it still applies to.
    pub fn fault_status(&self) -> (FaultPlan, u32) {
        self.lock().faults.status()
    }
}

fn load(path: &Path) -> Result<Option<Snapshot>, FixtureError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(FixtureError::ReadState {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let snapshot: Snapshot =
        serde_json::from_slice(&bytes).map_err(|source| FixtureError::ParseState {
            path: path.to_path_buf(),
            source,
        })?;
    if snapshot.version != SNAPSHOT_VERSION {
        return Err(FixtureError::StateVersion {
            path: path.to_path_buf(),
            found: snapshot.version,
        });
    }
    Ok(Some(snapshot))
}

/// Why the fixture could not start or stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error("reading state file {}", path.display())]
    ReadState {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("parsing state file {}", path.display())]
    ParseState {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("state file {} has version {found}, expected {SNAPSHOT_VERSION}", path.display())]
    StateVersion { path: PathBuf, found: u32 },
    #[error("binding the fixture to {addr}")]
    Bind {
        addr: std::net::SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("serving the fixture")]
    Serve(#[source] io::Error),
}

/// Writes `bytes` to `path` atomically and durably: temp file in the same
/// directory, fsync, rename over `path`, fsync the directory.
fn write_durably(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let file_name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "state file has no name"))?;
    let mut tmp_name = file_name.to_os_string();
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let result = (|| {
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)?;
        sync_parent(path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn sync_parent(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}
