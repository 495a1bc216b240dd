//! Bytes per commit of the embedded store, measured in pages, not time.
//!
//! Drives governed invokes shaped like `steward bench` workload (a) (the `stripe.refund` adapter
//! against the fixture, a new operation key and `Idempotency-Key` each; here both are 32 hex
//! digits from a fixed sequence, as random as the UUIDs clients send) through the in-process
//! server and its real SQLite store. After each wave of invokes (one at a time, or `c` at once)
//! it reads the frames their commits appended to the WAL (each frame header names its page) and
//! names the table or index owning each page with `dbstat`. Frames per commit are deterministic
//! up to B-tree splits and, with `c` > 1, up to how group commit batches the invokes, so the
//! figures hold on any machine.
//!
//! The report (the table in bench/PROFILE.md):
//!
//! ```text
//! cargo test -p steward-server --test in_process wal_pages_report -- --ignored --nocapture
//! ```
//!
//! A reader transaction is held open across each invoke, so no checkpoint can restart the WAL
//! between the invoke's two commits (a restart overwrites frames from the start); between
//! invokes the test checkpoints itself once the WAL passes SQLite's automatic threshold.

use crate::harness::{world, World, TOKEN};
use axum::body::Body;
use axum::http::Request;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;
use steward_server::app;
use tower::ServiceExt;

/// The WAL file's header, in bytes.
const WAL_HEADER_BYTES: usize = 32;
/// One frame's header, in bytes: page number, database size after a commit (0 inside a
/// transaction), the two salts and the two checksums.
const FRAME_HEADER_BYTES: usize = 24;
/// SQLite's automatic checkpoint threshold, in frames (`wal_autocheckpoint` default).
const CHECKPOINT_FRAMES: usize = 1000;
/// Invokes made before measuring (16 at a time), so the B-trees have several levels and the
/// random keys land on leaves of their own.
const WARM_UP_INVOKES: u64 = 2_000;
/// Invokes measured for the report.
const REPORT_INVOKES: u64 = 300;
/// Invokes in flight at once in the report's second measurement.
const REPORT_CONCURRENCY: u64 = 16;

/// One generation of the WAL: a restart gives the file new salts and starts it over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Generation {
    checkpoint_seq: u32,
    salt: (u32, u32),
}

/// The committed frames of the WAL's current generation: each commit's page numbers, in order.
struct WalFrames {
    generation: Option<Generation>,
    page_size: usize,
    commits: Vec<Vec<u32>>,
    frames: usize,
}

fn be32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// Reads the WAL beside `database`: the frames carrying the current header's salts, up to the
/// last commit frame.
fn read_wal(database: &Path) -> WalFrames {
    let bytes = std::fs::read(wal_path(database)).unwrap_or_default();
    let mut wal = WalFrames {
        generation: None,
        page_size: 0,
        commits: vec![],
        frames: 0,
    };
    if bytes.len() < WAL_HEADER_BYTES {
        return wal;
    }
    let generation = Generation {
        checkpoint_seq: be32(&bytes, 12),
        salt: (be32(&bytes, 16), be32(&bytes, 20)),
    };
    wal.generation = Some(generation);
    wal.page_size = be32(&bytes, 8) as usize;
    let mut open = vec![];
    let mut at = WAL_HEADER_BYTES;
    while at + FRAME_HEADER_BYTES + wal.page_size <= bytes.len() {
        let salt = (be32(&bytes, at + 8), be32(&bytes, at + 12));
        if salt != generation.salt {
            break;
        }
        open.push(be32(&bytes, at));
        if be32(&bytes, at + 4) != 0 {
            wal.frames += open.len();
            wal.commits.push(std::mem::take(&mut open));
        }
        at += FRAME_HEADER_BYTES + wal.page_size;
    }
    wal
}

fn wal_path(database: &Path) -> PathBuf {
    PathBuf::from(format!("{}-wal", database.display()))
}

/// The owner of a page: its table or index, and whether it is a leaf.
#[derive(Clone)]
struct Owner {
    name: String,
    leaf: bool,
}

/// Which table or index owns each page, from `dbstat` in `reader`'s snapshot. The first page
/// holds the database header, whose page count changes whenever a commit grows the file.
fn page_owners(reader: &rusqlite::Connection) -> HashMap<u32, Owner> {
    let mut stmt = reader
        .prepare("SELECT name, pagetype, pageno FROM dbstat")
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            let (name, kind, page): (String, String, u32) = (r.get(0)?, r.get(1)?, r.get(2)?);
            let name = if page == 1 {
                "page 1 (header)".to_string()
            } else {
                format!("`{name}`")
            };
            let leaf = kind == "leaf";
            Ok((page, Owner { name, leaf }))
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

/// What each table and index holding rows has after the run, from `dbstat`: pages, rows (the
/// cells of a rowid table's leaves; of every page of an index or a `WITHOUT ROWID` table, whose
/// interior pages hold entries too) and bytes per row.
fn sizes(reader: &rusqlite::Connection) -> String {
    let mut stmt = reader
        .prepare(
            "SELECT d.name, COUNT(*),
                    SUM(CASE WHEN d.pagetype = 'leaf' OR s.type = 'index' OR t.wr THEN d.ncell ELSE 0 END),
                    SUM(d.payload), SUM(CASE WHEN d.pagetype = 'overflow' THEN 1 ELSE 0 END)
             FROM dbstat d LEFT JOIN sqlite_schema s ON s.name = d.name
                  LEFT JOIN pragma_table_list t ON t.schema = 'main' AND t.name = d.name
             GROUP BY d.name HAVING SUM(d.ncell) > 0 ORDER BY d.name",
        )
        .unwrap();
    let mut out = String::from(
        "| table or index | pages | rows | bytes per row | overflow pages |\n| --- | ---: | ---: | ---: | ---: |\n",
    );
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, i64>(4)?,
            ))
        })
        .unwrap();
    for row in rows {
        let (name, pages, cells, payload, overflow) = row.unwrap();
        let per_row = if cells > 0 { payload / cells } else { 0 };
        out += &format!("| `{name}` | {pages} | {cells} | {per_row} | {overflow} |\n");
    }
    out
}

/// Frames of the measured invokes, by commit (step 3, step 5) and owner. With more than one
/// invoke in flight, commits are shared and counted in the first column.
#[derive(Default)]
struct Tally {
    invokes: u64,
    commits: u64,
    /// `(commit index, owner)` -> frames.
    frames: BTreeMap<(usize, String), u64>,
    /// Frames per commit index.
    per_commit: [u64; 2],
    /// Frames of interior and overflow pages (not leaves) per commit index.
    not_leaves: [u64; 2],
    page_size: usize,
}

impl Tally {
    /// Adds the commits of a wave of `invokes` invokes.
    fn add(&mut self, invokes: u64, commits: &[Vec<u32>], owners: &HashMap<u32, Owner>) {
        if invokes == 1 {
            assert_eq!(
                commits.len(),
                2,
                "a governed invoke commits twice (step 3 and step 5): {commits:?}"
            );
        }
        self.invokes += invokes;
        self.commits += commits.len() as u64;
        for (i, pages) in commits.iter().enumerate() {
            let i = if invokes == 1 { i } else { 0 };
            self.per_commit[i] += pages.len() as u64;
            for page in pages {
                let owner = owners.get(page).cloned().unwrap_or_else(|| Owner {
                    name: "(free list)".to_string(),
                    leaf: false,
                });
                if !owner.leaf {
                    self.not_leaves[i] += 1;
                }
                *self.frames.entry((i, owner.name)).or_default() += 1;
            }
        }
    }

    /// The Markdown table: frames (pages) per invoke, by table or index and commit.
    fn markdown(&self) -> String {
        let n = self.invokes as f64;
        let mut owners: BTreeMap<&str, [u64; 2]> = BTreeMap::new();
        for ((commit, owner), frames) in &self.frames {
            owners.entry(owner).or_default()[*commit] += frames;
        }
        let mut rows: Vec<_> = owners.into_iter().collect();
        rows.sort_by(|a, b| (b.1[0] + b.1[1]).cmp(&(a.1[0] + a.1[1])).then(a.0.cmp(b.0)));
        let mut out = String::from(
            "| table or index | step 3 commit | step 5 commit | pages per invoke |\n| --- | ---: | ---: | ---: |\n",
        );
        for (owner, [a, b]) in rows {
            out += &format!(
                "| {owner} | {:.2} | {:.2} | {:.2} |\n",
                a as f64 / n,
                b as f64 / n,
                (a + b) as f64 / n
            );
        }
        let frame_bytes = (self.page_size + FRAME_HEADER_BYTES) as f64;
        let [a, b] = self.per_commit.map(|f| f as f64 / n);
        let [x, y] = self.not_leaves.map(|f| f as f64 / n);
        out += &format!(
            "| **all** | {a:.2} | {b:.2} | {:.2} |\n| of which interior or overflow pages | {x:.2} | {y:.2} | {:.2} |\n| WAL bytes | {:.0} | {:.0} | {:.0} |\n",
            a + b,
            x + y,
            a * frame_bytes,
            b * frame_bytes,
            (a + b) * frame_bytes
        );
        out += &format!(
            "\n{} invokes after {WARM_UP_INVOKES} to warm up; page size {} bytes; a frame is a page plus {FRAME_HEADER_BYTES} bytes of header.\n",
            self.invokes, self.page_size
        );
        out
    }

    /// One line: pages and WAL bytes per invoke and per commit.
    fn summary(&self, concurrency: u64) -> String {
        let frames = (self.per_commit[0] + self.per_commit[1]) as f64;
        let frame_bytes = (self.page_size + FRAME_HEADER_BYTES) as f64;
        format!(
            "c={concurrency}: {:.2} pages per invoke, {:.2} commits per invoke, {:.1} pages ({:.0} WAL bytes) per commit",
            frames / self.invokes as f64,
            self.commits as f64 / self.invokes as f64,
            frames / self.commits as f64,
            frames / self.commits as f64 * frame_bytes
        )
    }
}

/// The `n`th key: 32 hex digits (splitmix64), a fixed sequence that spreads like random UUIDs.
fn key(n: u64) -> String {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let seed = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    format!("{:016x}{:016x}", mix(seed), mix(seed ^ 0x5555))
}

/// One governed invoke as workload (a) sends it; panics unless it succeeded.
async fn invoke(state: steward_server::AppState, n: u64) {
    let key = key(n);
    let body = json!({
        "input": {"paymentIntent": format!("pi_{key}"), "amount": 100 + n % 900},
        "operationKey": key,
    });
    let request = Request::builder()
        .method("POST")
        .uri("/api/v2/actions/bench-refund/invoke")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .header("idempotency-key", &key)
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = app(state).oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let reply: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["data"]["status"], "succeeded", "{reply}");
}

/// `c` invokes at once, from number `first` on.
async fn wave(w: &World, first: u64, c: u64) {
    let mut wave = tokio::task::JoinSet::new();
    for n in first..first + c {
        wave.spawn(invoke(w.state.clone(), n));
    }
    while let Some(done) = wave.join_next().await {
        done.unwrap();
    }
}

/// Runs `count` invokes after the warm-up, `c` at a time, and tallies their commits' frames.
/// With `limits`, two impact limits apply to every invoke (its money and its one mutation), so
/// each reserves two rows in step 3 and settles them in step 5.
async fn measure(count: u64, c: u64, limits: bool) -> (Tally, String) {
    let w = world(Duration::from_secs(10), None).await;
    let base = w.fixture.base_url();
    // The bench's action: `stripe.refund` against the fixture, no policy.
    w.ok(
        "POST",
        "/actions",
        json!({"name": "bench-refund", "adapter": {"type": "stripe.refund",
            "config": {"account": "acct_bench", "mode": "test", "currency": "usd", "baseUrl": base},
            "credentialSecret": "STRIPE_TEST_KEY"}}),
    )
    .await;
    if limits {
        for limit in [
            json!({"name": "refunds a day", "dimension": "money", "currency": "USD",
                   "period": "day", "amount": 1_000_000_000_000_i64}),
            json!({"name": "mutations a day", "dimension": "resource_mutations",
                   "period": "day", "amount": 1_000_000_000_i64}),
        ] {
            w.ok("POST", "/impact-limits", limit).await;
        }
    }
    for first in (0..WARM_UP_INVOKES).step_by(REPORT_CONCURRENCY as usize) {
        wave(&w, first, REPORT_CONCURRENCY).await;
    }
    let database = w.database();
    let reader = rusqlite::Connection::open(&database).unwrap();
    let mut tally = Tally::default();
    for first in (WARM_UP_INVOKES..WARM_UP_INVOKES + count).step_by(c as usize) {
        let before = read_wal(&database);
        if before.frames > CHECKPOINT_FRAMES {
            reader
                .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                .unwrap();
        }
        // The snapshot this transaction takes keeps the WAL from restarting during the invoke,
        // and its `dbstat` names the pages the invoke will find.
        reader.execute_batch("BEGIN").unwrap();
        reader
            .query_row("SELECT COUNT(*) FROM sqlite_schema", [], |_| Ok(()))
            .unwrap();
        let before = read_wal(&database);
        wave(&w, first, c).await;
        let after = read_wal(&database);
        reader.execute_batch("COMMIT").unwrap();
        let new = if after.generation == before.generation {
            &after.commits[before.commits.len()..]
        } else {
            &after.commits[..]
        };
        // The owners as of after the invoke: the pages it allocated are named there.
        let owners = page_owners(&reader);
        tally.page_size = after.page_size;
        tally.add(c, new, &owners);
    }
    (tally, sizes(&reader))
}

/// Prints the per-table frames of workload (a)'s two commits (the bench/PROFILE.md table), the
/// pages per invoke with invokes in flight at once, the same two commits under two impact
/// limits, and what the tables hold.
#[tokio::test]
#[ignore = "a report: run with --ignored --nocapture"]
async fn wal_pages_report() {
    let (one, sizes) = measure(REPORT_INVOKES, 1, false).await;
    let (many, _) = measure(REPORT_INVOKES, REPORT_CONCURRENCY, false).await;
    let (limited, _) = measure(REPORT_INVOKES, 1, true).await;
    println!(
        "{}\n{}\n{}\n\nUnder two impact limits:\n\n{}\n{}\n\n{sizes}",
        one.markdown(),
        one.summary(1),
        many.summary(REPORT_CONCURRENCY),
        limited.markdown(),
        limited.summary(1),
    );
}
