//! Why the server could not start or stopped serving: the errors of `serve`,
//! [`crate::open_store`], [`crate::open_existing_store`] and [`crate::lock_data_dir`]. A library error (no `anyhow` here): the
//! binary prints it with its source chain. None of them carries a connection string or a key.

use crate::mcp::http::InvalidHostName;
use crate::vault::VaultError;
use std::net::SocketAddr;
use std::path::PathBuf;
use steward_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A PostgreSQL connection string may hold a password: it is never repeated here.
    #[error("cannot open the PostgreSQL store")]
    OpenPostgres(#[source] StoreError),
    #[error("cannot open the store in {}", data_dir.display())]
    OpenEmbedded {
        data_dir: PathBuf,
        #[source]
        source: StoreError,
    },
    /// A command other than `serve` found no store to open: only `serve` creates one.
    #[error(
        "no Steward store in {} (there is no {} in it): only `steward serve` creates a store. \
         Point --data (or STEWARD_DATA) at the data directory of your server, or start \
         `steward serve --data {}` once to create one there",
        data_dir.display(),
        steward_store::DATABASE_FILE,
        data_dir.display()
    )]
    NoEmbeddedStore { data_dir: PathBuf },
    /// The same for `--database`; the connection string is not repeated (it may hold a
    /// password).
    #[error(
        "the PostgreSQL database holds no Steward store (no steward_migrations table): only \
         `steward serve --database` creates one. Check the database name in --database (or \
         STEWARD_DATABASE_URL), or start a server on it once"
    )]
    NoSharedStore,
    #[error(
        "another `steward serve` is already serving {} (it holds {}): the embedded store \
         serves one process at a time. Stop it first, or run several replicas on one \
         PostgreSQL database with --database",
        data_dir.display(),
        lock_file.display()
    )]
    DataDirLocked {
        data_dir: PathBuf,
        lock_file: PathBuf,
    },
    /// A file-system step on the data directory (create it, open or lock its lock file).
    #[error("cannot {action} {}", path.display())]
    DataDir {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "--metrics-listen {0} is not a loopback address: set --metrics-token too, or the \
         counters of every environment are open to the network"
    )]
    MetricsListenNotLoopback(SocketAddr),
    #[error(transparent)]
    McpHost(#[from] InvalidHostName),
    #[error(transparent)]
    Vault(#[from] VaultError),
    #[error("cannot make or open the receipt signing key")]
    ReceiptKey(#[from] crate::receipts::keys::ReceiptKeyError),
    /// A store step of start-up: registering the replica, start-up recovery.
    #[error("{step} failed")]
    Store {
        step: &'static str,
        #[source]
        source: StoreError,
    },
    #[error("cannot build the HTTP client")]
    HttpClient(#[source] reqwest::Error),
    #[error("cannot listen on {addr}{purpose}")]
    Listen {
        addr: SocketAddr,
        /// Empty for the main listener, " for metrics" for the metrics listener.
        purpose: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("the metrics listener failed")]
    MetricsListener(#[source] tokio::task::JoinError),
}
