//! The audit log: events written unchained by the transaction that makes the change, sealed
//! into one hash chain afterwards by one sealer (issue #13).
//!
//! **Written.** The transaction that makes a change inserts its event with its own content hash
//! ([`content_hash`]: over its time, environment, actor, kind, subject, before and after,
//! domain-separated) and nothing else: no sequence number, no link, and no read of any other
//! audit row. So an audited commit never waits for another one on account of the audit log, and
//! nothing is committed without its event.
//!
//! **Sealed.** The sealer ([`crate::Store::seal_audit`]: on PostgreSQL the replica holding the
//! sealer's lease, on SQLite the writer) takes the oldest unsealed events, in insertion order,
//! and in one transaction gives each the next sequence number, the hash of the event before it
//! and its chain hash ([`link_hash`]: over its sequence number, that previous hash and its
//! content hash), and stores the new head. A sealer that dies mid-batch has committed nothing of
//! that batch. Changing, removing, inserting or reordering a sealed event breaks the chain at
//! that point; editing an unsealed event breaks its own hash.
//!
//! **Verified.** [`verify_log`] checks the chain from genesis to the stored head and each
//! unsealed event's own hash; [`verify_chain`] checks one run of sealed events.
//!
//! Events chained before sealing existed have no content hash: their chain hash covers their
//! content directly ([`legacy_event_hash`]). They are the sealed prefix of a migrated store and
//! verify as they always did.

use crate::error::{StoreError, StoreResult};
use crate::records::{AuditEvent, ChainLink};
use crate::store::Store;
use serde_json::json;
use steward_core::{canonical_json, fingerprint_str, Millis, ReplicaId};

/// The hash before the first event.
pub const GENESIS_HASH: &str =
    "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// The most events one seal commits: one transaction of this many updates stays well under a
/// second on either backend, and a backlog drains batch after batch.
pub const SEAL_BATCH_EVENTS_MAX: u32 = 1_000;

/// What [`content_hash`] hashes under, so that no other hash in Steward can collide with it.
const CONTENT_DOMAIN: &str = "steward.audit.event.v2";
/// What [`link_hash`] hashes under.
const LINK_DOMAIN: &str = "steward.audit.link.v2";

/// An event's own hash over its content, computed when it is written. Editing any field of the
/// event (its time, environment, actor, kind, subject, before or after) changes it.
pub fn content_hash(event: &AuditEvent) -> String {
    let content = json!({
        "domain": CONTENT_DOMAIN,
        "at": event.at,
        "env": event.env_id,
        "actor": event.actor,
        "kind": event.kind,
        "subject": event.subject,
        "before": event.before,
        "after": event.after,
    });
    fingerprint_str(&canonical_json(&content))
}

/// The chain hash of the event sealed at `seq` after `prev_hash`, given its content hash.
pub fn link_hash(seq: i64, prev_hash: &str, content_hash: &str) -> String {
    let link = json!({
        "domain": LINK_DOMAIN,
        "seq": seq,
        "prev": prev_hash,
        "content": content_hash,
    });
    fingerprint_str(&canonical_json(&link))
}

/// The chain hash of an event chained at `seq` after `prev_hash` before sealing existed: one
/// hash over its content and its place. Kept to verify the sealed prefix of migrated stores.
pub fn legacy_event_hash(event: &AuditEvent, seq: i64, prev_hash: &str) -> String {
    let content = json!({
        "seq": seq,
        "at": event.at,
        "env": event.env_id,
        "actor": event.actor,
        "kind": event.kind,
        "subject": event.subject,
        "before": event.before,
        "after": event.after,
        "prev": prev_hash,
    });
    fingerprint_str(&canonical_json(&content))
}

/// The chain hash a sealed event must carry at its place: its link over its recomputed content
/// hash, or for a legacy event its legacy hash. `None` when the event is not sealed.
pub fn expected_hash(event: &AuditEvent) -> Option<String> {
    let link = event.link.as_ref()?;
    Some(match &event.content_hash {
        Some(_) => link_hash(link.seq, &link.prev_hash, &content_hash(event)),
        None => legacy_event_hash(event, link.seq, &link.prev_hash),
    })
}

/// Where the audit log is broken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error("audit event {seq}: previous hash does not match the event before it")]
    BrokenLink { seq: i64 },
    #[error("audit event {seq}: content does not match its hash")]
    Tampered { seq: i64 },
    #[error("audit event {seq}: sequence gap after {previous}")]
    Gap { seq: i64, previous: i64 },
    #[error("unsealed audit event (insertion id {id}): content does not match its hash")]
    TamperedUnsealed { id: i64 },
    #[error("audit event (insertion id {id}) is listed as sealed but has no place in the chain")]
    NotSealed { id: i64 },
    #[error("the stored head is event {head}, but the sealed chain ends at {last}")]
    Truncated { head: i64, last: i64 },
    #[error("audit event {seq}: its hash differs from the stored head's")]
    HeadMismatch { seq: i64 },
}

/// Verifies a run of sealed events that follows `prev_hash` (at sequence `prev_seq`); returns
/// the last event's sequence number and hash.
pub fn verify_chain(
    prev_seq: i64,
    prev_hash: &str,
    events: &[AuditEvent],
) -> Result<(i64, String), ChainError> {
    let mut seq = prev_seq;
    let mut hash = prev_hash.to_string();
    for event in events {
        let Some(link) = &event.link else {
            return Err(ChainError::NotSealed { id: event.id });
        };
        if link.seq != seq + 1 {
            return Err(ChainError::Gap {
                seq: link.seq,
                previous: seq,
            });
        }
        if link.prev_hash != hash {
            return Err(ChainError::BrokenLink { seq: link.seq });
        }
        let content_holds = match &event.content_hash {
            Some(stored) => *stored == content_hash(event),
            None => true,
        };
        if !content_holds || expected_hash(event).as_deref() != Some(link.hash.as_str()) {
            return Err(ChainError::Tampered { seq: link.seq });
        }
        seq = link.seq;
        hash = link.hash.clone();
    }
    Ok((seq, hash))
}

/// Verifies each unsealed event's own hash. An event with no content hash cannot be unsealed:
/// only events chained before sealing existed lack one.
pub fn verify_unsealed(events: &[AuditEvent]) -> Result<(), ChainError> {
    for event in events {
        if event.content_hash.as_deref() != Some(content_hash(event).as_str()) {
            return Err(ChainError::TamperedUnsealed { id: event.id });
        }
    }
    Ok(())
}

/// The head of the sealed chain as the last seal stored it, and the sealer's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditHead {
    /// The last sealed event's sequence number (`0` before the first).
    pub seq: i64,
    /// The last sealed event's chain hash ([`GENESIS_HASH`] before the first).
    pub hash: String,
    /// The replica that sealed last, which holds the lease until `lease_until`.
    pub sealer: Option<ReplicaId>,
    pub lease_until: Millis,
    /// The sealer's epoch: it grows each time a replica takes the sealer's lease, so that a
    /// seal by an earlier holder is refused (`StoreError::Fenced`).
    pub sealer_epoch: i64,
}

/// One seal: who seals, when, for how long it keeps the sealer's lease, and how many events at
/// most.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditSeal {
    pub sealer: ReplicaId,
    pub now: Millis,
    /// How long after `now` the lease runs, in milliseconds.
    pub lease_ms: i64,
    /// At most this many events ([`SEAL_BATCH_EVENTS_MAX`] in the server).
    pub events_max: u32,
    /// The sealer's epoch the sealer holds, from its last [`SealOutcome::Sealed`]; `None` when
    /// it holds none and takes the lease (under the next epoch) with this seal.
    pub epoch: Option<i64>,
}

/// Whether another registered replica holds the sealer's lease at `seal.now`: then a seal
/// writes nothing and answers [`SealOutcome::Held`]. (`registered`: the holder still has its
/// replica row; a holder whose row the sweep removed is dead, whatever its lease says.)
pub(crate) fn held_by_another(
    head: &AuditHead,
    registered: bool,
    seal: &AuditSeal,
) -> Option<SealOutcome> {
    let holder = head.sealer.as_ref()?;
    (*holder != seal.sealer && head.lease_until > seal.now && registered).then(|| {
        SealOutcome::Held {
            by: holder.clone(),
            until: head.lease_until,
        }
    })
}

/// The sealer's epoch a seal writes under, once no other live replica holds the lease: the
/// epoch `seal` holds when it is still the current one (a renewal), the next one when it holds
/// none (a takeover). A held epoch that is no longer current, or no longer the holder's, is
/// refused: another replica sealed since (this one paused or was cut off past its lease).
pub(crate) fn sealing_epoch(head: &AuditHead, seal: &AuditSeal) -> StoreResult<i64> {
    match seal.epoch {
        None => Ok(head.sealer_epoch + 1),
        Some(held) if held == head.sealer_epoch && head.sealer.as_ref() == Some(&seal.sealer) => {
            Ok(held)
        }
        Some(held) => Err(StoreError::Fenced {
            what: "the audit sealer".into(),
            held,
            current: head.sealer_epoch,
        }),
    }
}

/// One event's place in the chain, as a seal gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewLink {
    /// The event's insertion id.
    pub id: i64,
    pub link: ChainLink,
}

/// What a seal reads of an unsealed event: its insertion id and its content hash, which is all
/// the chain covers of it (its content is in the content hash), so sealing decodes no event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unsealed {
    pub id: i64,
    pub content_hash: Option<String>,
}

/// The columns of [`Unsealed`], in its order, for both backends' reads.
pub(crate) const UNSEALED_COLUMNS: &str = "id, content_hash";

/// The seal plan of `batch` (the oldest unsealed events, in insertion order) after `head`: each
/// event's `seq`, previous hash and chain hash. The last link is the new head. Both backends
/// write exactly these.
pub(crate) fn seal_links(head: &AuditHead, batch: &[Unsealed]) -> Vec<NewLink> {
    let (mut seq, mut hash) = (head.seq, head.hash.clone());
    let mut links = Vec::with_capacity(batch.len());
    for event in batch {
        let prev_hash = std::mem::take(&mut hash);
        seq += 1;
        // An unsealed event always has a content hash; one without was tampered with, and
        // sealing it over an empty one keeps that visible to verification.
        hash = link_hash(
            seq,
            &prev_hash,
            event.content_hash.as_deref().unwrap_or_default(),
        );
        links.push(NewLink {
            id: event.id,
            link: ChainLink {
                seq,
                prev_hash,
                hash: hash.clone(),
            },
        });
    }
    links
}

/// A stored event's place in the chain from its columns: none before it is sealed. A sealed row
/// missing its hashes was tampered with: verification says so.
pub(crate) fn stored_link(
    seq: Option<i64>,
    prev_hash: Option<String>,
    hash: Option<String>,
) -> Option<ChainLink> {
    seq.map(|seq| ChainLink {
        seq,
        prev_hash: prev_hash.unwrap_or_default(),
        hash: hash.unwrap_or_default(),
    })
}

/// A stored audit event from its row (the columns `id, at, env_id, actor, kind, subject,
/// before, after, content_hash, seq, prev_hash, hash`).
pub(crate) fn stored_event(row: &impl crate::columns::Columns) -> StoreResult<AuditEvent> {
    Ok(AuditEvent {
        id: row.get(0)?,
        at: row.get(1)?,
        env_id: row.get(2)?,
        actor: row.get(3)?,
        kind: row.get(4)?,
        subject: row.get(5)?,
        before: row.json_opt(6, "audit before")?,
        after: row.json_opt(7, "audit after")?,
        content_hash: row.get(8)?,
        link: stored_link(row.get(9)?, row.get(10)?, row.get(11)?),
    })
}

/// What one seal did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SealOutcome {
    /// `events` events were sealed (the oldest unsealed ones, at most `events_max`); the chain
    /// now ends at `head`. The sealer holds the lease until `now + lease_ms`, under `epoch`
    /// (for its next seal's `AuditSeal::epoch`).
    Sealed {
        events: u32,
        head: (i64, String),
        epoch: i64,
    },
    /// Nothing was unsealed; nothing was written.
    Idle,
    /// Another live replica holds the lease until `until`; nothing was written.
    Held { by: ReplicaId, until: Millis },
}

/// What [`verify_log`] found in an intact log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogReport {
    /// The sealed chain's length and its last hash.
    pub sealed: i64,
    pub head: String,
    /// How many events were not sealed yet, each verified by its own hash.
    pub unsealed: u64,
    /// When the oldest of them was written (its `at`).
    pub oldest_unsealed_at: Option<Millis>,
}

/// Reads and verifies the whole audit log, `page_events` events per read: the stored head, the
/// sealed chain from genesis through that head (so a removed tail is found too), then each
/// unsealed event's own hash. Every event read is passed to `visit` once its page verified:
/// sealed ones in chain order, then unsealed ones in insertion order. An event the sealer seals
/// while this runs is read as sealed. `Ok(Err(_))` is a broken log; `Err` a store that could not
/// be read.
pub async fn verify_log(
    store: &dyn Store,
    page_events: u32,
    mut visit: impl FnMut(&AuditEvent),
) -> StoreResult<Result<LogReport, ChainError>> {
    let head = store.audit_head().await?;
    let mut end = (0_i64, GENESIS_HASH.to_string());
    let mut head_seen = head.seq == 0 && head.hash == GENESIS_HASH;
    let mut sealed_page = |page: &[AuditEvent], end: &mut (i64, String)| {
        let next = verify_chain(end.0, &end.1, page)?;
        if let Some(at_head) = page
            .iter()
            .find(|e| e.link.as_ref().map(|l| l.seq) == Some(head.seq))
        {
            if at_head.link.as_ref().map(|l| l.hash.as_str()) != Some(head.hash.as_str()) {
                return Err(ChainError::HeadMismatch { seq: head.seq });
            }
            head_seen = true;
        }
        *end = next;
        Ok(())
    };
    loop {
        let page = store.audit_events(end.0, page_events).await?;
        if page.is_empty() {
            break;
        }
        if let Err(broken) = sealed_page(&page, &mut end) {
            return Ok(Err(broken));
        }
        page.iter().for_each(&mut visit);
    }
    let mut unsealed = Vec::new();
    let mut after_id = 0;
    loop {
        let page = store.unsealed_audit_events(after_id, page_events).await?;
        let Some(last) = page.last() else { break };
        after_id = last.id;
        if let Err(broken) = verify_unsealed(&page) {
            return Ok(Err(broken));
        }
        unsealed.extend(page);
    }
    // Events sealed while the unsealed ones were being read: read once more, as sealed.
    let mut sealed_meanwhile = std::collections::HashSet::new();
    loop {
        let page = store.audit_events(end.0, page_events).await?;
        if page.is_empty() {
            break;
        }
        if let Err(broken) = sealed_page(&page, &mut end) {
            return Ok(Err(broken));
        }
        sealed_meanwhile.extend(page.iter().map(|e| e.id));
        page.iter().for_each(&mut visit);
    }
    if !head_seen {
        return Ok(Err(ChainError::Truncated {
            head: head.seq,
            last: end.0,
        }));
    }
    unsealed.retain(|e| !sealed_meanwhile.contains(&e.id));
    unsealed.iter().for_each(&mut visit);
    Ok(Ok(LogReport {
        sealed: end.0,
        head: end.1,
        unsealed: unsealed.len() as u64,
        oldest_unsealed_at: unsealed.iter().map(|e| Millis(e.at)).min(),
    }))
}
