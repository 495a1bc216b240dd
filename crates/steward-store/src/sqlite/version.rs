//! The embedded store's schema version, kept in SQLite's `user_version` header field.
//!
//! The embedded schema migrates itself in place (`CREATE ... IF NOT EXISTS`, columns added where
//! missing, tables rebuilt: `conn.rs`), so an older store opens under a newer Steward. The other
//! way round is what this version is for: a store a newer Steward has migrated may hold tables,
//! columns or meanings this build does not know, and writing to it could lose what it does not
//! understand. [`refuse_newer`] runs before anything touches the schema; [`record`] writes this
//! build's version in the transaction that migrated it.
//!
//! Raise [`SCHEMA_VERSION`] by one with every change to the embedded schema. Stores made before
//! the version existed read 0, which every build knows.

use super::conn::unavailable;
use crate::error::{StoreError, StoreResult};
use rusqlite::Connection;
use std::path::Path;

/// The embedded schema this build creates and migrates to.
/// 2: `environments.unkeyed_invokes`.
/// 3: the fencing epochs (`schema::FENCE_COLUMNS`).
/// 4: edit-and-approve (`invocations.edited_input`, `invocations.input_edit`,
/// `approvals.edit`) and shadow policies (`invocations.shadow_decisions`).
/// 5: `connection_sessions` (OAuth consent sessions).
/// 6: signed receipts (`receipt_keys`, `receipt_cursor`, `receipts`).
/// 7: `webhook_subscriptions.channel` (approval channels).
/// 8: `holds` (an operator's hold on an action or an operation key).
pub(crate) const SCHEMA_VERSION: i64 = 8;

/// The schema version a store file records (0 for a new file, or one made before versions).
pub(crate) fn stored(conn: &Connection) -> StoreResult<i64> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(unavailable)
}

/// Refuses a store whose schema a newer Steward wrote, naming both versions.
pub(crate) fn refuse_newer(conn: &Connection, path: &Path) -> StoreResult<()> {
    let found = stored(conn)?;
    if found <= SCHEMA_VERSION {
        return Ok(());
    }
    Err(StoreError::Unavailable {
        message: format!(
            "{} has schema version {found}, newer than the version this Steward knows \
             ({SCHEMA_VERSION}): a newer Steward migrated it. Run that Steward (or a later one), \
             or restore a backup taken before the upgrade",
            path.display()
        ),
        source: None,
    })
}

/// Records this build's schema version; called inside the migrating transaction, so a store is
/// marked only once its schema is this build's.
pub(crate) fn record(conn: &Connection) -> StoreResult<()> {
    // A pragma takes no bound parameter; the value is a constant.
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(unavailable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_from_a_newer_steward_is_refused_with_both_versions_and_an_older_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("steward.db");
        let conn = Connection::open(&path).unwrap();
        assert_eq!(stored(&conn).unwrap(), 0);
        refuse_newer(&conn, &path).expect("a store from before versions opens");
        record(&conn).unwrap();
        assert_eq!(stored(&conn).unwrap(), SCHEMA_VERSION);
        refuse_newer(&conn, &path).expect("this build's own store opens");
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        let refused = refuse_newer(&conn, &path).unwrap_err().to_string();
        assert!(
            refused.contains(&format!("schema version {}", SCHEMA_VERSION + 1))
                && refused.contains(&format!("({SCHEMA_VERSION})")),
            "{refused}"
        );
    }
}
