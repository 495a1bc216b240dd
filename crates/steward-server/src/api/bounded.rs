//! Bounded answers. Every list and read answer stays under [`ANSWER_BYTES_MAX`]:
//!
//! - a field that may be large (an invocation's input or response body, a span's input or
//!   output) is left out of lists and trees when its JSON text is longer than
//!   [`steward_store::LISTED_FIELD_BYTES_MAX`] (16 KiB). The store reads it as a marker
//!   (`elide.rs`); the wire shows `{"elided": true, "bytes": <size>, "href": <path>}`, where
//!   `href` reads the record alone and whole, and the record lists the fields it elided in
//!   `elidedFields`;
//! - a page holds its items until the next would take the answer past its byte budget; then it
//!   ends early with `hasMore: true` and a `nextCursor`;
//! - the heavy reads (a run, a run's spans, a list of invocations) hold one of
//!   [`HEAVY_READS_PER_KEY_MAX`](crate::per_key::HEAVY_READS_PER_KEY_MAX) places per key while
//!   they run; a key that asks for more at once is answered `429 TOO_MANY_READS` with
//!   `Retry-After` (`per_key.rs`, `HeavyReads::admit`, which the application layer calls).

use serde_json::Value;

/// The largest answer a list or read builds, in bytes of JSON: a few MiB, so a page of records
/// or a run with its first spans and its tree is read in well under a second on a slow link
/// and a handful of concurrent reads cost tens of MiB of memory, not gigabytes.
pub const ANSWER_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Turns the store's elision markers among `record`'s top-level fields into the wire's
/// (`{"elided": true, "bytes": n, "href": href}`) and names them in `elidedFields`.
///
/// Every view now marks its own fields (`mark_elided_field`); this is kept, in tests, as the
/// reference the typed views are compared with.
#[cfg(test)]
pub fn mark_elided(record: &mut Value, href: &str) {
    let Some(map) = record.as_object_mut() else {
        return;
    };
    let mut elided = Vec::new();
    for (field, value) in map.iter_mut() {
        if mark_elided_field(value, href) {
            elided.push(Value::from(field.clone()));
        }
    }
    if !elided.is_empty() {
        map.insert("elidedFields".into(), Value::Array(elided));
    }
}

/// Turns `value` into the wire's marker if it is the store's elision marker; says whether it
/// was one (the caller names the field in `elidedFields`).
pub fn mark_elided_field(value: &mut Value, href: &str) -> bool {
    let Some(bytes) = steward_store::elided_bytes(value) else {
        return false;
    };
    let marker = steward_wire::Elided {
        elided: true,
        bytes,
        href: href.to_string(),
    };
    *value = serde_json::to_value(marker).expect("a marker is plain JSON");
    true
}

/// The length of a view's compact JSON text, in bytes, without writing it out: the bytes
/// `steward_store::json_len` counts for the view as a JSON value.
pub fn view_len<T: serde::Serialize + ?Sized>(view: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // A view is plain JSON, and the writer cannot fail.
    let _ = serde_json::to_writer(&mut count, view);
    count.0
}

/// The first items that fit in `budget` bytes (each counted with its separating comma), and
/// whether any were left out. The first item is always kept, so paging always moves on; with
/// large fields elided, one item is far smaller than any budget here.
pub fn fit<T: serde::Serialize>(items: Vec<T>, budget: usize) -> (Vec<T>, bool) {
    let mut used = 0usize;
    let mut kept = Vec::with_capacity(items.len());
    let total = items.len();
    for item in items {
        used += view_len(&item) + 1;
        if used > budget && !kept.is_empty() {
            break;
        }
        kept.push(item);
    }
    let cut = kept.len() < total;
    (kept, cut)
}

/// The first items that fit in `budget` bytes, none if the first does not, and whether any were
/// left out: for a part of an answer that shares the bound with other parts.
pub fn fit_strict<T: serde::Serialize>(items: Vec<T>, budget: usize) -> (Vec<T>, bool) {
    let mut used = 0usize;
    let total = items.len();
    let kept: Vec<T> = items
        .into_iter()
        .take_while(|item| {
            used += view_len(item) + 1;
            used <= budget
        })
        .collect();
    let cut = kept.len() < total;
    (kept, cut)
}

/// Room the envelope around a page's items takes (`success`, `pagination`), in bytes.
const ENVELOPE_BYTES: usize = 1024;

/// A page of `items` (the store's page at `offset`, of `total` in all) as the success envelope,
/// ended early if the items would take the answer past [`ANSWER_BYTES_MAX`]. `pagination` keeps
/// the fields the SDK reads (`total`, `limit`, `offset`, `page`, `totalPages`, `hasMore`) and
/// adds `nextCursor` (the next page's cursor, or `null` at the end) and `nextOffset`.
pub fn page<T: serde::Serialize>(
    items: Vec<T>,
    total: u64,
    limit: u32,
    offset: u32,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let body = page_body(items, total, limit, offset);
    (axum::http::StatusCode::OK, axum::Json(body)).into_response()
}

/// The body [`page`] answers: the items that fit the byte budget, and where to go on.
pub fn page_body<T: serde::Serialize>(
    items: Vec<T>,
    total: u64,
    limit: u32,
    offset: u32,
) -> steward_wire::Page<Value> {
    // Measured as JSON values: the budget counts bytes of the answer's text.
    let items: Vec<Value> = items
        .iter()
        .map(|item| serde_json::to_value(item).expect("a view is plain JSON"))
        .collect();
    let (items, cut) = fit(items, ANSWER_BYTES_MAX - ENVELOPE_BYTES);
    let next = u64::from(offset) + items.len() as u64;
    let has_more = cut || next < total;
    let pagination = steward_wire::Pagination {
        has_more,
        next_offset: Some(has_more.then_some(next)),
        next_cursor: Some(has_more.then(|| cursor(next))),
        ..steward_wire::Pagination::of(total, limit, offset)
    };
    steward_wire::Page::new(items, pagination)
}

/// A list cursor: the offset of the next page, opaque to clients (`o<offset>`).
pub fn cursor(offset: u64) -> String {
    format!("o{offset}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::reads::cursor_offset;
    use crate::error::{codes, HEAVY_READ_RETRY_AFTER_S};
    use crate::per_key::{HeavyRead, HeavyReads, HEAVY_READS_PER_KEY_MAX};
    use serde_json::json;
    use std::sync::Arc;
    use steward_store::json_len;

    #[test]
    fn a_key_runs_at_most_its_heavy_reads_and_gets_its_place_back() {
        let reads = Arc::new(HeavyReads::default());
        let held: Vec<HeavyRead> = (0..HEAVY_READS_PER_KEY_MAX)
            .map(|_| reads.admit("key_a").expect("a free place"))
            .collect();
        let refused = reads.admit("key_a").unwrap_err();
        assert_eq!(refused.code, codes::TOO_MANY_READS.code);
        assert!(reads.admit("key_b").is_ok(), "another key is not held back");
        drop(held);
        assert!(reads.admit("key_a").is_ok());
    }

    #[test]
    fn a_refused_heavy_read_is_a_429_envelope_with_retry_after() {
        use axum::response::IntoResponse;
        let reads = Arc::new(HeavyReads::default());
        let _held: Vec<HeavyRead> = (0..HEAVY_READS_PER_KEY_MAX)
            .map(|_| reads.admit("key_a").expect("a free place"))
            .collect();
        let response = reads.admit("key_a").unwrap_err().into_response();
        assert_eq!(response.status(), axum::http::StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            response.headers()[axum::http::header::RETRY_AFTER],
            HEAVY_READ_RETRY_AFTER_S.to_string().as_str()
        );
    }

    #[test]
    fn a_page_ends_before_its_budget_and_keeps_at_least_one_item() {
        let item = json!({"input": "x".repeat(1000)});
        let one = json_len(&item) + 1;
        let (kept, cut) = fit(vec![item.clone(); 10], one * 3 + 1);
        assert_eq!((kept.len(), cut), (3, true));
        let (kept, cut) = fit(vec![item.clone(); 2], 10);
        assert_eq!((kept.len(), cut), (1, true), "one item always goes");
        let (kept, cut) = fit(vec![item; 2], one * 2);
        assert_eq!((kept.len(), cut), (2, false));
    }

    #[test]
    fn a_strict_fit_may_keep_nothing() {
        let item = json!({"input": "x".repeat(1000)});
        assert_eq!(fit_strict(vec![item.clone(); 2], 10), (vec![], true));
        let one = json_len(&item) + 1;
        assert_eq!(fit_strict(vec![item.clone(); 3], one * 2 + 5).0.len(), 2);
    }

    #[test]
    fn store_markers_become_links_and_are_named() {
        let mut record =
            json!({"id": "x", "input": steward_store::elision_marker(20_000), "output": 1});
        mark_elided(&mut record, "/api/v2/x");
        assert_eq!(
            record["input"],
            json!({"elided": true, "bytes": 20_000, "href": "/api/v2/x"})
        );
        assert_eq!(record["elidedFields"], json!(["input"]));
        assert_eq!(record["output"], 1);
    }

    #[test]
    fn cursors_round_trip_and_strangers_are_refused() {
        assert_eq!(cursor_offset(&cursor(250)).unwrap(), 250);
        assert_eq!(cursor_offset("x9").unwrap_err().code, "VALIDATION_ERROR");
    }
}
