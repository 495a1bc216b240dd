//! Opening a database a server already made a Steward store of, for the commands that are not
//! `serve` (`steward keys`, `steward audit`): only `serve` creates a store, so a key is never
//! made in a database no server reads.

use super::conn;
use super::PostgresStore;
use crate::error::{StoreError, StoreResult};

impl PostgresStore {
    /// [`PostgresStore::connect`], for a database that already holds a Steward store (its
    /// migrations table): `NotFound { what: "Steward store" }` for any other, which is left
    /// untouched. The schema of a store that has one is brought up to date as by `connect`.
    pub async fn connect_existing(url: &str) -> StoreResult<Self> {
        let config = conn::config(url)?;
        let probe = conn::pool(&config)?;
        let client = conn::client(&probe).await?;
        let row = client
            .query_one("SELECT to_regclass('steward_migrations') IS NOT NULL", &[])
            .await
            .map_err(conn::unavailable)?;
        let made: bool = super::rows::col(&row, 0)?;
        drop(client);
        probe.close();
        if !made {
            return Err(StoreError::NotFound {
                what: "Steward store",
            });
        }
        Self::connect(url).await
    }
}
