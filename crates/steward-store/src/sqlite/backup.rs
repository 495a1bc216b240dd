//! `steward backup`: a consistent copy of a live embedded store, made with SQLite's online
//! backup API while the server keeps writing.
//!
//! The copy is one backup step over every page (`sqlite3_backup_step(-1)`), which reads the
//! source inside one read transaction: in WAL mode that is a snapshot of the last commit before
//! the step began, and it does not block the writer (commits go on into the WAL meanwhile).
//! Copying a few pages per step instead would restart the copy each time the server commits
//! between two steps, and under steady load it might never finish. Every commit acknowledged
//! before the backup started is in the copy; none made after it is.
//!
//! The copy is written beside `out` as `out.partial`, switched to a rollback journal (one
//! self-contained file: no `-wal` beside it), checked with `PRAGMA quick_check`, fsync'd, and
//! only then renamed to `out`. A crash or an error leaves no file at `out` that looks whole.

use super::conn::unavailable;
use super::SqliteStore;
use crate::error::{StoreError, StoreResult};
use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long the backup waits for the source's locks (the writer checkpointing, a store being
/// opened and migrated) before giving up, in milliseconds. The same as a store connection's.
const BACKUP_BUSY_TIMEOUT_MS: u64 = 5_000;
/// The pause between two tries of a step the source's locks refused, in milliseconds.
const BACKUP_RETRY_PAUSE_MS: u64 = 50;

/// What [`SqliteStore::backup`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupReport {
    /// The database pages copied.
    pub pages: u64,
    /// The copy's size on disk, in bytes.
    pub bytes: u64,
    /// The schema version the copy records (see `version.rs`).
    pub schema_version: i64,
}

impl SqliteStore {
    /// Copies the store file at `source`, which a server may be writing, to a new file `out`
    /// (refused if `out` exists): a snapshot of every commit acknowledged before the call (see
    /// the module docs). A data directory holding the copy as `steward.db`, and the master key
    /// the source's secrets are sealed with, is one `steward serve --data` starts from.
    pub fn backup(source: &Path, out: &Path) -> StoreResult<BackupReport> {
        if !source.is_file() {
            return Err(io_failed("no store file at", source, None));
        }
        if out.exists() {
            return Err(io_failed(
                "will not overwrite an existing file: remove it or choose another name:",
                out,
                None,
            ));
        }
        let partial = partial_path(out);
        let copied = copy_to(source, &partial).and_then(|report| {
            finish(&partial, out)?;
            Ok(report)
        });
        if copied.is_err() {
            let _ = std::fs::remove_file(&partial);
        }
        copied
    }
}

/// `out` with `.partial` added to its name.
fn partial_path(out: &Path) -> PathBuf {
    let mut name = out.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

fn io_failed(what: &str, path: &Path, source: Option<std::io::Error>) -> StoreError {
    let message = match &source {
        Some(e) => format!("{what} {}: {e}", path.display()),
        None => format!("{what} {}", path.display()),
    };
    StoreError::Unavailable {
        message,
        source: source.map(|e| Box::new(e) as _),
    }
}

/// Creates `path` readable by its owner only (0600): the copy holds sealed secrets, hashed keys
/// and the audit log, like the store. Fails when it exists (a backup of the same name running).
fn create_private(path: &Path) -> StoreResult<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(path)
        .map(drop)
        .map_err(|e| io_failed("cannot create", path, Some(e)))
}

/// Copies every page of `source` into a new file at `partial` and checks the copy.
fn copy_to(source: &Path, partial: &Path) -> StoreResult<BackupReport> {
    // Never created here: a missing store is the caller's error, not an empty backup.
    let from = Connection::open_with_flags(
        source,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(unavailable)?;
    from.busy_timeout(Duration::from_millis(BACKUP_BUSY_TIMEOUT_MS))
        .map_err(unavailable)?;
    create_private(partial)?;
    let mut to = Connection::open(partial).map_err(unavailable)?;
    {
        let backup = Backup::new(&from, &mut to).map_err(unavailable)?;
        let started = std::time::Instant::now();
        loop {
            match backup.step(-1).map_err(unavailable)? {
                StepResult::Done => break,
                // One step over every page ends in `Done` or a refused lock (`Busy`, `Locked`);
                // anything else (`More`, or a variant a later rusqlite adds: the enum is
                // non-exhaustive) is tried again too, within the same bound.
                _ => {
                    if started.elapsed() > Duration::from_millis(BACKUP_BUSY_TIMEOUT_MS) {
                        return Err(StoreError::Unavailable {
                            message: format!(
                                "the store stayed locked for {BACKUP_BUSY_TIMEOUT_MS} ms; try again"
                            ),
                            source: None,
                        });
                    }
                    std::thread::sleep(Duration::from_millis(BACKUP_RETRY_PAUSE_MS));
                }
            }
        }
    }
    drop(from);
    // The copy carries the source's WAL flag; a rollback journal makes it one file.
    let _: String = to
        .query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))
        .map_err(unavailable)?;
    let check: String = to
        .query_row("PRAGMA quick_check", [], |r| r.get(0))
        .map_err(unavailable)?;
    if check != "ok" {
        return Err(StoreError::Corrupt(format!(
            "the copy failed its integrity check: {check}"
        )));
    }
    let pages: i64 = to
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .map_err(unavailable)?;
    let schema_version = super::version::stored(&to)?;
    to.close().map_err(|(_, e)| unavailable(e))?;
    let bytes = std::fs::metadata(partial)
        .map_err(|e| io_failed("cannot read", partial, Some(e)))?
        .len();
    Ok(BackupReport {
        pages: pages.max(0) as u64,
        bytes,
        schema_version,
    })
}

/// Makes the copy durable, then gives it its name.
fn finish(partial: &Path, out: &Path) -> StoreResult<()> {
    std::fs::File::open(partial)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_failed("cannot sync", partial, Some(e)))?;
    // `rename` replaces silently: the check in `backup` is repeated as close to it as can be.
    if out.exists() {
        return Err(io_failed(
            "will not overwrite an existing file: remove it or choose another name:",
            out,
            None,
        ));
    }
    std::fs::rename(partial, out).map_err(|e| io_failed("cannot rename to", out, Some(e)))?;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        // The rename itself survives a power cut once the directory is synced; best effort
        // where a directory cannot be opened for it.
        if let Ok(dir) = std::fs::File::open(dir) {
            let _ = dir.sync_all();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::conn::unavailable as to_store_error;

    fn count(path: &Path) -> i64 {
        Connection::open(path)
            .unwrap()
            .query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
            .map_err(to_store_error)
            .unwrap()
    }

    #[test]
    fn the_copy_holds_every_commit_before_it_and_is_one_private_file() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("steward.db");
        let writer = Connection::open(&source).unwrap();
        writer
            .execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (v INTEGER);")
            .unwrap();
        for v in 0..100 {
            writer
                .execute("INSERT INTO t (v) VALUES (?1)", [v])
                .unwrap();
        }
        let out = dir.path().join("backup.db");
        let report = SqliteStore::backup(&source, &out).unwrap();
        assert_eq!(count(&out), 100);
        assert!(report.pages > 0 && report.bytes > 0, "{report:?}");
        assert!(!partial_path(&out).exists());
        assert!(!dir.path().join("backup.db-wal").exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&out).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "mode {mode:o}");
        }
        // A commit after the backup is not in it.
        writer
            .execute("INSERT INTO t (v) VALUES (100)", [])
            .unwrap();
        assert_eq!(count(&out), 100);
    }

    #[test]
    fn an_existing_file_is_never_overwritten_and_a_missing_store_never_created() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("steward.db");
        let out = dir.path().join("backup.db");
        let missing = SqliteStore::backup(&source, &out).unwrap_err().to_string();
        assert!(missing.contains("no store file"), "{missing}");
        assert!(!source.exists() && !out.exists());

        Connection::open(&source)
            .unwrap()
            .execute_batch("CREATE TABLE t (v INTEGER)")
            .unwrap();
        std::fs::write(&out, b"keep me").unwrap();
        let refused = SqliteStore::backup(&source, &out).unwrap_err().to_string();
        assert!(refused.contains("will not overwrite"), "{refused}");
        assert_eq!(std::fs::read(&out).unwrap(), b"keep me");
    }
}
