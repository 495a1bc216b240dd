//! The journal in the application's PostgreSQL database: the same table as the SQLite journal
//! (and the Python package's journals), on the application's connection pool. A committed
//! transaction is durable when it returns (PostgreSQL's default `synchronous_commit = on`).
//!
//! [`PostgresJournal::begin_in`] records an intent inside the caller's own transaction, so the
//! application's rows and the intent commit together or not at all; every other write runs in
//! a transaction of the journal's own.

use super::row::{decode, json_text, RawRow, COLUMNS};
use super::{Begun, Journal, JournalError};
use crate::operation::{Operation, OperationId};
use crate::state::LocalState;
use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use std::time::Duration;
use steward_core::{ApprovalId, EffectId, InvocationId, InvocationStatus};
use tokio_postgres::types::ToSql;
use tokio_postgres::{GenericClient, NoTls, Row};

/// Connections the journal's own pool opens at most: one operation's drive uses one at a time,
/// and a worker runs a handful of operations at once.
const POOL_CONNECTIONS_MAX: usize = 8;
/// How long opening a connection, or waiting for a pooled one, may take, in milliseconds: a
/// database that does not answer in that time is down as far as the caller is concerned.
const CONNECT_TIMEOUT_MS: u64 = 5_000;

/// The same table as the SQLite journal's, in PostgreSQL types (and the Python package's DDL,
/// `steward_recovery/journal/postgres.py`).
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS steward_operations (
    id                TEXT PRIMARY KEY,
    environment       TEXT NOT NULL,
    action            TEXT NOT NULL,
    operation_key     TEXT NOT NULL,
    input             TEXT NOT NULL,
    input_fingerprint TEXT NOT NULL,
    idempotency_key   TEXT NOT NULL,
    retry_of          TEXT,
    state             TEXT NOT NULL,
    invocation_id     TEXT,
    effect_id         TEXT,
    approval_id       TEXT,
    server_status     TEXT,
    server_record     TEXT,
    result            TEXT,
    last_error        TEXT,
    assignee          TEXT,
    attempt_count     BIGINT NOT NULL,
    version           BIGINT NOT NULL,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL,
    UNIQUE (environment, action, operation_key)
);
CREATE INDEX IF NOT EXISTS steward_operations_unfinished
    ON steward_operations (state, created_at);
";

/// A journal on a PostgreSQL connection pool (the application's own, or one it opens).
#[derive(Clone)]
pub struct PostgresJournal {
    pool: Pool,
}

fn storage(context: &'static str) -> impl FnOnce(tokio_postgres::Error) -> JournalError {
    move |e| JournalError::Storage {
        context,
        source: Box::new(e),
    }
}

fn raw(row: &Row) -> Result<RawRow, JournalError> {
    let read = || -> Result<RawRow, tokio_postgres::Error> {
        let mut text: [Option<String>; 17] = Default::default();
        for (i, slot) in text.iter_mut().enumerate() {
            *slot = row.try_get(i)?;
        }
        Ok(RawRow {
            text,
            attempt_count: row.try_get(17)?,
            version: row.try_get(18)?,
            created_at: row.try_get(19)?,
            updated_at: row.try_get(20)?,
        })
    };
    read().map_err(storage("reading an operation's columns"))
}

async fn select(
    client: &impl GenericClient,
    filter: &str,
    args: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Operation>, JournalError> {
    let sql = format!("SELECT {COLUMNS} FROM steward_operations {filter}");
    let rows = client
        .query(&sql, args)
        .await
        .map_err(storage("reading operations"))?;
    rows.iter().map(|r| decode(raw(r)?)).collect()
}

/// The one insert, or nothing when the key is taken (the unique index decides between
/// concurrent begins; the loser reads the winner's record).
async fn insert(client: &impl GenericClient, op: &Operation) -> Result<bool, JournalError> {
    let version = op.version as i64;
    let attempts = i64::from(op.attempt_count);
    let inserted = client
        .execute(
            &format!(
                "INSERT INTO steward_operations ({COLUMNS}) VALUES \
                 ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, \
                 $18, $19, $20, $21) ON CONFLICT (environment, action, operation_key) DO NOTHING"
            ),
            &[
                &op.id.as_str(),
                &op.environment,
                &op.action,
                &op.operation_key.as_str(),
                &op.input.to_string(),
                &op.input_fingerprint,
                &op.idempotency_key.as_str(),
                &op.retry_of.as_ref().map(InvocationId::as_str),
                &op.state.as_str(),
                &op.invocation_id.as_ref().map(InvocationId::as_str),
                &op.effect_id.as_ref().map(EffectId::as_str),
                &op.approval_id.as_ref().map(ApprovalId::as_str),
                &op.server_status.map(InvocationStatus::as_str),
                &json_text(&op.server_record),
                &json_text(&op.result),
                &op.last_error,
                &op.assignee,
                &attempts,
                &version,
                &op.created_at.0,
                &op.updated_at.0,
            ],
        )
        .await
        .map_err(storage("recording an intent"))?;
    Ok(inserted == 1)
}

/// Begins `intended` on `client` (inside whatever transaction it is) and says what it found.
async fn begin_on(
    client: &impl GenericClient,
    intended: &Operation,
) -> Result<Begun, JournalError> {
    assert_eq!(
        intended.state,
        LocalState::Intended,
        "begin records intents only ({})",
        intended.id
    );
    if insert(client, intended).await? {
        return Ok(Begun::Created(intended.clone()));
    }
    let existing = select(
        client,
        "WHERE environment = $1 AND action = $2 AND operation_key = $3",
        &[
            &intended.environment,
            &intended.action,
            &intended.operation_key.as_str(),
        ],
    )
    .await?
    .into_iter()
    .next()
    .unwrap_or_else(|| {
        panic!(
            "{}: the insert conflicted on operation key {:?} and no record holds it",
            intended.id,
            intended.operation_key.as_str()
        )
    });
    if existing.input_fingerprint == intended.input_fingerprint {
        Ok(Begun::Existing(existing))
    } else {
        Err(JournalError::KeyConflict {
            action: intended.action.clone(),
            key: intended.operation_key.as_str().to_string(),
            existing: existing.id,
        })
    }
}

impl PostgresJournal {
    /// Opens a pool of its own on `url` (`postgres://user@host:port/db`) and creates the table
    /// if needed.
    pub async fn connect(url: &str) -> Result<PostgresJournal, JournalError> {
        let config: tokio_postgres::Config = url.parse().map_err(storage("parsing the URL"))?;
        PostgresJournal::connect_with(config).await
    }

    /// Like [`connect`](Self::connect), from a parsed configuration.
    pub async fn connect_with(
        mut config: tokio_postgres::Config,
    ) -> Result<PostgresJournal, JournalError> {
        config.connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS));
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_CONNECTIONS_MAX)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(Duration::from_millis(CONNECT_TIMEOUT_MS)))
            .wait_timeout(Some(Duration::from_millis(CONNECT_TIMEOUT_MS)))
            .build()
            .map_err(|e| JournalError::Storage {
                context: "building the connection pool",
                source: Box::new(e),
            })?;
        PostgresJournal::new(pool).await
    }

    /// A journal on the application's own pool; creates the table if needed.
    pub async fn new(pool: Pool) -> Result<PostgresJournal, JournalError> {
        let journal = PostgresJournal { pool };
        journal
            .client()
            .await?
            .batch_execute(SCHEMA)
            .await
            .map_err(storage("creating the journal table"))?;
        Ok(journal)
    }

    /// Records `intended` inside the caller's transaction (or on any client): the application's
    /// own rows and the intent become durable together when the caller commits, and neither
    /// exists if it rolls back. Same answers as [`Journal::begin`]; nothing is committed here.
    /// Commit before running the operation: an intent the caller has not committed is not
    /// recoverable, so nothing may be sent for it.
    pub async fn begin_in(
        client: &impl GenericClient,
        intended: &Operation,
    ) -> Result<Begun, JournalError> {
        begin_on(client, intended).await
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, JournalError> {
        self.pool.get().await.map_err(|e| JournalError::Storage {
            context: "taking a connection from the pool",
            source: Box::new(e),
        })
    }
}

#[async_trait]
impl Journal for PostgresJournal {
    async fn begin(&self, intended: &Operation) -> Result<Begun, JournalError> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(storage("beginning an operation"))?;
        let begun = begin_on(&*tx, intended).await?;
        tx.commit().await.map_err(storage("committing an intent"))?;
        Ok(begun)
    }

    async fn save(&self, op: &Operation) -> Result<Operation, JournalError> {
        let mut next = op.clone();
        next.version = op.version + 1;
        let client = self.client().await?;
        let (version, expected, attempts) = (
            next.version as i64,
            op.version as i64,
            i64::from(next.attempt_count),
        );
        let changed = client
            .execute(
                "UPDATE steward_operations SET state = $1, invocation_id = $2, effect_id = $3, \
                 approval_id = $4, server_status = $5, server_record = $6, result = $7, \
                 last_error = $8, assignee = $9, attempt_count = $10, version = $11, \
                 updated_at = $12 WHERE id = $13 AND version = $14",
                &[
                    &next.state.as_str(),
                    &next.invocation_id.as_ref().map(InvocationId::as_str),
                    &next.effect_id.as_ref().map(EffectId::as_str),
                    &next.approval_id.as_ref().map(ApprovalId::as_str),
                    &next.server_status.map(InvocationStatus::as_str),
                    &json_text(&next.server_record),
                    &json_text(&next.result),
                    &next.last_error,
                    &next.assignee,
                    &attempts,
                    &version,
                    &next.updated_at.0,
                    &next.id.as_str(),
                    &expected,
                ],
            )
            .await
            .map_err(storage("saving an operation"))?;
        if changed == 1 {
            return Ok(next);
        }
        let exists = client
            .query_opt(
                "SELECT version FROM steward_operations WHERE id = $1",
                &[&next.id.as_str()],
            )
            .await
            .map_err(storage("checking an operation's version"))?;
        Err(match exists {
            Some(_) => JournalError::Stale {
                id: next.id.clone(),
                expected: op.version,
            },
            None => JournalError::NotFound {
                id: next.id.clone(),
            },
        })
    }

    async fn get(&self, id: &OperationId) -> Result<Option<Operation>, JournalError> {
        let client = self.client().await?;
        Ok(select(&**client, "WHERE id = $1", &[&id.as_str()])
            .await?
            .into_iter()
            .next())
    }

    async fn unfinished(&self) -> Result<Vec<Operation>, JournalError> {
        let client = self.client().await?;
        select(
            &**client,
            "WHERE state <> 'continued' ORDER BY created_at, id",
            &[],
        )
        .await
    }

    async fn all(&self) -> Result<Vec<Operation>, JournalError> {
        let client = self.client().await?;
        select(&**client, "ORDER BY created_at, id", &[]).await
    }
}

#[cfg(test)]
mod tests {
    //! Against a database of their own on the local server (`STEWARD_TEST_DATABASE_URL`,
    //! default `postgres://postgres@127.0.0.1:5432/postgres`), created for the test and dropped
    //! after it, passed or panicked. An unreachable PostgreSQL fails these tests: never skipped.

    use super::*;
    use crate::journal::conformance;
    use serde_json::json;
    use std::sync::atomic::{AtomicU64, Ordering};

    const TEST_DATABASE_URL_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/postgres";

    fn admin_url() -> String {
        std::env::var("STEWARD_TEST_DATABASE_URL")
            .unwrap_or_else(|_| TEST_DATABASE_URL_DEFAULT.to_string())
    }

    async fn admin(url: &str) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(url, NoTls)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL at {url} is needed for this test: {e}"));
        tokio::spawn(connection);
        client
    }

    /// A database for one test, dropped on drop (even while a failed test unwinds).
    struct TestDatabase {
        name: String,
        config: tokio_postgres::Config,
    }

    impl TestDatabase {
        async fn create() -> TestDatabase {
            static NEXT: AtomicU64 = AtomicU64::new(0);
            let name = format!(
                "steward_journal_test_{}_{}_{}",
                std::process::id(),
                crate::clock::now().0,
                NEXT.fetch_add(1, Ordering::Relaxed)
            );
            admin(&admin_url())
                .await
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await
                .unwrap_or_else(|e| panic!("cannot create test database {name}: {e}"));
            let mut config: tokio_postgres::Config = admin_url().parse().expect("a valid URL");
            config.dbname(&name);
            TestDatabase { name, config }
        }

        /// A fresh, empty journal: its own schema in this database, its own pool.
        async fn journal(&self, schema: &str) -> PostgresJournal {
            let mut config = self.config.clone();
            config.options(format!("-c search_path={schema}"));
            let (client, connection) = config.connect(NoTls).await.expect("connect");
            tokio::spawn(connection);
            client
                .batch_execute(&format!("CREATE SCHEMA {schema}"))
                .await
                .expect("create schema");
            PostgresJournal::connect_with(config)
                .await
                .expect("open the journal")
        }
    }

    impl Drop for TestDatabase {
        fn drop(&mut self) {
            let name = self.name.clone();
            let dropped = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                runtime.block_on(async {
                    admin(&admin_url())
                        .await
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await
                })
            })
            .join();
            if !matches!(dropped, Ok(Ok(()))) && !std::thread::panicking() {
                panic!("cannot drop test database {}: {dropped:?}", self.name);
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_postgres_journal_passes_the_conformance_suite() {
        let database = TestDatabase::create().await;
        let mut n = 0;
        conformance::run_all(|| {
            n += 1;
            let schema = format!("journal_{n}");
            // The suite's factory is synchronous; each fresh journal needs a schema and a pool.
            tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(database.journal(&schema))
            })
        })
        .await;
        assert!(n >= 6, "the suite asked for {n} journals");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn begin_in_commits_and_rolls_back_with_the_applications_rows() {
        let database = TestDatabase::create().await;
        let journal = database.journal("app").await;
        let mut client = journal.client().await.unwrap();
        client
            .batch_execute("CREATE TABLE app_orders (order_id TEXT PRIMARY KEY)")
            .await
            .unwrap();

        let kept = conformance::sample("refund:o-1", json!({"amount": 1}));
        let tx = client.transaction().await.unwrap();
        tx.execute("INSERT INTO app_orders VALUES ('o-1')", &[])
            .await
            .unwrap();
        assert!(matches!(
            PostgresJournal::begin_in(&*tx, &kept).await.unwrap(),
            Begun::Created(_)
        ));
        // Not visible to anyone else before the caller commits.
        assert_eq!(journal.get(&kept.id).await.unwrap(), None);
        tx.commit().await.unwrap();
        assert_eq!(journal.get(&kept.id).await.unwrap(), Some(kept.clone()));

        let dropped = conformance::sample("refund:o-2", json!({"amount": 2}));
        let tx = client.transaction().await.unwrap();
        tx.execute("INSERT INTO app_orders VALUES ('o-2')", &[])
            .await
            .unwrap();
        PostgresJournal::begin_in(&*tx, &dropped).await.unwrap();
        tx.rollback().await.unwrap();
        assert_eq!(journal.get(&dropped.id).await.unwrap(), None);
        let count: i64 = client
            .query_one(
                "SELECT count(*) FROM app_orders WHERE order_id = 'o-2'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            count, 0,
            "the application's row rolled back with the intent"
        );
        assert_eq!(journal.all().await.unwrap(), vec![kept]);
    }
}
