//! A store created before the hot path's tables were `WITHOUT ROWID` (issue #13) migrates on
//! open: every row of every table comes back as it was, every read answers as before, and the
//! schema is the one a new store gets.
//!
//! The old store is made the way an upgrade finds one: the whole conformance suite writes its
//! records, then the three tables are taken back to their earlier definitions (rowid tables, as
//! `sqlite/schema.rs` had them at commit 9f1eb73, with the `owner` column added later at its end)
//! and the indexes to the earlier ones.

use super::*;
use rusqlite::types::Value as Sql;
use std::collections::BTreeMap;

/// The three tables as the earlier schema created them, each under `<table>_old`.
const EARLIER_TABLES: &[(&str, &str)] = &[
    (
        "attempts",
        "CREATE TABLE attempts_old (
            effect_id TEXT NOT NULL,
            number INTEGER NOT NULL,
            started_at INTEGER NOT NULL,
            deadline_at INTEGER NOT NULL,
            finished_at INTEGER,
            status TEXT NOT NULL,
            response_status INTEGER,
            error TEXT,
            owner TEXT,
            -- Added since (schema version 3); an older store gains it before the rebuild.
            fence INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (effect_id, number)
        )",
    ),
    (
        "evidence",
        "CREATE TABLE evidence_old (
            effect_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            at INTEGER NOT NULL,
            kind TEXT NOT NULL,
            source TEXT NOT NULL,
            message TEXT NOT NULL,
            data TEXT,
            actor TEXT,
            PRIMARY KEY (effect_id, seq)
        )",
    ),
    (
        "impact_reservations",
        "CREATE TABLE impact_reservations_old (
            limit_id TEXT NOT NULL REFERENCES impact_limits(id),
            effect_id TEXT NOT NULL,
            env_id TEXT NOT NULL,
            amount INTEGER NOT NULL,
            window_start INTEGER NOT NULL,
            state TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            PRIMARY KEY (limit_id, effect_id)
        )",
    ),
];

/// The indexes the earlier schema had where this one has others, and those of the rebuilt
/// `impact_reservations` (dropped with it).
const EARLIER_INDEXES: &str = "
DROP INDEX effects_open;
CREATE INDEX invocations_effect ON invocations(effect_id);
CREATE INDEX effects_state ON effects(state);
CREATE INDEX effects_in_flight ON effects(state, owner) WHERE state IN ('ready', 'dispatching');
CREATE INDEX impact_reservations_effect ON impact_reservations(effect_id);
CREATE INDEX impact_reservations_window ON impact_reservations(limit_id, window_start, state);
CREATE INDEX audit_unsealed ON audit(id) WHERE seq IS NULL;
";

/// Takes the store at `path` back to the earlier definitions of the three tables and the
/// earlier indexes.
fn back_to_rowid_tables(path: &std::path::Path) {
    let conn = rusqlite::Connection::open(path).expect("open");
    let tx = conn.unchecked_transaction().expect("transaction");
    for (table, create) in EARLIER_TABLES {
        tx.execute_batch(&format!(
            "{create};
             INSERT INTO {table}_old SELECT * FROM {table};
             DROP TABLE {table};
             ALTER TABLE {table}_old RENAME TO {table};"
        ))
        .expect("earlier table");
    }
    tx.execute_batch(EARLIER_INDEXES).expect("earlier indexes");
    tx.commit().expect("commit");
    for (table, _) in EARLIER_TABLES {
        assert!(!without_rowid(&conn, table), "{table} has a rowid again");
    }
}

fn without_rowid(conn: &rusqlite::Connection, table: &str) -> bool {
    conn.query_row(
        "SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = ?1",
        [table],
        |r| r.get(0),
    )
    .expect("table_list")
}

/// Every row of every table, as text, sorted (a rowid table and a `WITHOUT ROWID` one scan in
/// different orders).
fn rows(path: &std::path::Path) -> BTreeMap<String, Vec<String>> {
    let conn = rusqlite::Connection::open(path).expect("open");
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        .expect("tables")
        .query_map([], |r| r.get(0))
        .expect("tables")
        .map(Result::unwrap)
        .collect();
    let mut all = BTreeMap::new();
    for table in tables {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM {table}"))
            .expect("rows");
        let columns = stmt.column_count();
        let mut found: Vec<String> = stmt
            .query_map([], |r| {
                (0..columns)
                    .map(|i| r.get::<_, Sql>(i).map(|v| format!("{v:?}")))
                    .collect::<Result<Vec<_>, _>>()
            })
            .expect("rows")
            .map(|row| row.expect("row").join(" | "))
            .collect();
        found.sort();
        all.insert(table, found);
    }
    all
}

/// What the schema says, table by table and index by index: columns (name, type, not null,
/// default, key), `WITHOUT ROWID`, and each index's table, columns and SQL.
fn schema(path: &std::path::Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).expect("open");
    let mut out: Vec<String> = conn
        .prepare(
            "SELECT t.name || ' wr=' || t.wr || ': ' || group_concat(c.name || ' ' || c.type || ' ' || c.\"notnull\" || ' ' || IFNULL(c.dflt_value, '-') || ' ' || c.pk, ', ')
             FROM pragma_table_list t JOIN pragma_table_info(t.name) c
             WHERE t.schema = 'main' AND t.type = 'table' AND t.name NOT LIKE 'sqlite_%'
             GROUP BY t.name",
        )
        .expect("tables")
        .query_map([], |r| r.get(0))
        .expect("tables")
        .map(Result::unwrap)
        .collect();
    out.extend(
        conn.prepare(
            "SELECT s.name || ' on ' || s.tbl_name || ' (' ||
                    (SELECT group_concat(IFNULL(x.name, '<rowid>'), ', ') FROM pragma_index_xinfo(s.name) x) ||
                    '): ' || IFNULL(s.sql, '<implicit>')
             FROM sqlite_schema s WHERE s.type = 'index'",
        )
        .expect("indexes")
        .query_map([], |r| r.get::<_, String>(0))
        .expect("indexes")
        .map(Result::unwrap),
    );
    out.sort();
    out
}

/// What the store's reads answer for every environment: the listings (unfiltered, open states
/// and settled states), each invocation and effect in full, the limits' usage in every window a
/// reservation names, the count of unknown effects and the audit log.
async fn reads(store: &Arc<dyn Store>, path: &std::path::Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).expect("open");
    let column = |sql: &str| -> Vec<String> {
        conn.prepare(sql)
            .expect("ids")
            .query_map([], |r| r.get(0))
            .expect("ids")
            .map(Result::unwrap)
            .collect()
    };
    let envs = column("SELECT id FROM environments ORDER BY id");
    let windows: Vec<i64> = conn
        .prepare("SELECT DISTINCT window_start FROM impact_reservations ORDER BY 1")
        .expect("windows")
        .query_map([], |r| r.get(0))
        .expect("windows")
        .map(Result::unwrap)
        .collect();
    let mut out = vec![];
    let filters = [
        None,
        Some(vec![EffectState::Unknown]),
        Some(vec![EffectState::Dispatching, EffectState::Unknown]),
        Some(vec![EffectState::Ready, EffectState::AwaitingApproval]),
        Some(vec![
            EffectState::Succeeded { confirmed: true },
            EffectState::Failed,
        ]),
    ];
    for env in envs {
        let env = EnvironmentId::parse(&env).expect("environment id");
        for states in &filters {
            let invocations = InvocationFilter {
                action_id: None,
                states: states.clone(),
                limit: 100_000,
                offset: 0,
            };
            let effects = EffectFilter {
                action_id: None,
                states: states.clone(),
                limit: 100_000,
                offset: 0,
            };
            out.push(format!(
                "{:?}",
                store
                    .list_invocations(&env, &invocations)
                    .await
                    .expect("list")
            ));
            out.push(format!(
                "{:?}",
                store.list_effects(&env, &effects).await.expect("list")
            ));
        }
        let all = store
            .list_invocations(
                &env,
                &InvocationFilter {
                    action_id: None,
                    states: None,
                    limit: 100_000,
                    offset: 0,
                },
            )
            .await
            .expect("list");
        for invocation in all.items {
            out.push(format!(
                "{:?}",
                store.invocation(&env, &invocation.id).await.expect("read")
            ));
            out.push(format!(
                "{:?}",
                store
                    .effect(&env, &invocation.effect_id)
                    .await
                    .expect("read")
            ));
            if let Some(key) = &invocation.operation_key {
                out.push(format!(
                    "{:?}",
                    store
                        .invocation_by_operation_key(&env, &invocation.action_id, key)
                        .await
                        .expect("read")
                ));
            }
        }
        for at in &windows {
            out.push(format!(
                "{:?}",
                store
                    .list_limits(&env, true, Millis(*at))
                    .await
                    .expect("limits")
            ));
        }
    }
    out.push(format!(
        "unknown: {}",
        store.count_unknown().await.expect("count")
    ));
    out.push(format!(
        "{:?}",
        store.audit_events(0, u32::MAX).await.expect("audit")
    ));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_a_store_from_before_without_rowid_migrates_with_every_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("steward.db");
    let fresh = dir.path().join("fresh.db");
    drop(SqliteStore::open(&fresh).expect("a new store"));
    {
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).expect("open"));
        run_all(store).await;
    }
    let (rows_before, reads_before) = {
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).expect("open"));
        (rows(&path), reads(&store, &path).await)
    };
    assert!(rows_before["effects"].len() > 50, "the suite wrote effects");
    assert!(!rows_before["impact_reservations"].is_empty());

    back_to_rowid_tables(&path);
    assert_eq!(
        rows(&path),
        rows_before,
        "taking the tables back kept every row"
    );
    assert_ne!(
        schema(&path),
        schema(&fresh),
        "the store has the earlier schema"
    );

    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).expect("open migrates"));
    assert_eq!(
        schema(&path),
        schema(&fresh),
        "a migrated store has a new store's schema"
    );
    let conn = rusqlite::Connection::open(&path).expect("open");
    for (table, _) in EARLIER_TABLES {
        assert!(without_rowid(&conn, table), "{table} is WITHOUT ROWID");
    }
    drop(conn);
    assert_eq!(rows(&path), rows_before, "every row came through");
    assert_eq!(
        reads(&store, &path).await,
        reads_before,
        "every read answers as before"
    );
    drop(store);

    // Opening again finds nothing to migrate, and the migrated store takes new work.
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).expect("open again"));
    assert_eq!(rows(&path), rows_before);
    let env = Env::new(&store, "migrated").await;
    let action = env.create_action(refund_definition("refund")).await;
    let mut sub = env.submission(&action, json!({"after": "migration"}));
    sub.operation_key = Some(op("after-migration"));
    let inv = expect_created(store.submit(&sub).await.expect("submit"));
    env.begin_attempt(&inv.effect_id, 2_000).await;
    env.finish_attempt(
        &inv.effect_id,
        EffectState::Succeeded { confirmed: true },
        3_000,
    )
    .await;
    let mut again = env.submission(&action, json!({"after": "migration"}));
    again.operation_key = sub.operation_key.clone();
    match store.submit(&again).await.expect("resubmit") {
        SubmitOutcome::Existing(found) => assert_eq!(found.id, inv.id),
        other => panic!("the operation key still names its invocation: {other:?}"),
    }
    assert_eq!(
        env.invocation(&inv.id).await.state,
        EffectState::Succeeded { confirmed: true }
    );
}
