//! `steward backup`: a consistent copy of the embedded store while the server runs (SQLite's
//! online backup API, `steward_store::SqliteStore::backup`). Restoring is a data directory
//! holding the copy as `steward.db` and the master key; docs/OPERATING.md spells it out.

use crate::DataArgs;
use anyhow::{bail, Context};
use std::path::PathBuf;
use std::process::ExitCode;
use steward_server::{StartError, DATABASE_FILE, MASTER_KEY_ENV, MASTER_KEY_FILE};
use steward_store::SqliteStore;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    data: DataArgs,
    /// The file to write the copy to; an existing file is never overwritten.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.data.database.is_some() {
        bail!(
            "`steward backup` copies the embedded store; a PostgreSQL store is backed up with \
             pg_dump or a base backup with WAL archiving (docs/OPERATING.md, \"Backup and \
             restore\")"
        );
    }
    let data_dir = args.data.data;
    let source = data_dir.join(DATABASE_FILE);
    if !source.is_file() {
        return Err(StartError::NoEmbeddedStore { data_dir }.into());
    }
    let out = args.out;
    let written = out.clone();
    let report = tokio::task::spawn_blocking(move || SqliteStore::backup(&source, &written))
        .await
        .context("the backup task failed")?
        .with_context(|| format!("cannot back up {}", data_dir.display()))?;
    println!("{}", out.display());
    eprintln!(
        "backed up {} to {} ({} pages, {} bytes, schema version {}). The master key is not in \
         it: keep {MASTER_KEY_FILE} (or {MASTER_KEY_ENV}) safe apart from it, or the secrets \
         in the copy cannot be opened",
        data_dir.display(),
        out.display(),
        report.pages,
        report.bytes,
        report.schema_version
    );
    Ok(ExitCode::SUCCESS)
}
