//! The envelopes every success answer is wrapped in. The error envelope is the server's
//! (`steward-server`'s `error.rs`): its `code` lists the server's table of codes.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `{"success": true, "data": {...}}`: one record, and `warnings` when the request did
/// something its sender may not have meant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Single<T> {
    /// Always `true`.
    pub success: bool,
    pub data: T,
    /// What the server accepted but would not have done by itself; absent when there is none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(required = false)]
    pub warnings: Vec<Warning>,
}

impl<T> Single<T> {
    pub fn new(data: T) -> Self {
        Self::warned(data, Vec::new())
    }

    /// One record answered with `warnings`.
    pub fn warned(data: T, warnings: Vec<Warning>) -> Self {
        Self {
            success: true,
            data,
            warnings,
        }
    }
}

/// Something a request did that its sender may not have meant: accepted, not refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Warning {
    /// Stable, for matching: `no_request_key` (an invoke with neither `operationKey` nor
    /// `Idempotency-Key`), `credential_host_not_allowed` (an action's credential may not be
    /// sent where the action calls), `credential_missing` (an action names a secret that does
    /// not exist yet).
    pub code: String,
    pub message: String,
    /// The request field the warning is about, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub field: Option<String>,
}

/// `{"success": true, "data": [...]}`: an unpaged listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct List<T> {
    /// Always `true`.
    pub success: bool,
    pub data: Vec<T>,
}

impl<T> List<T> {
    pub fn new(data: Vec<T>) -> Self {
        Self {
            success: true,
            data,
        }
    }
}

/// `{"success": true, "data": [...], "pagination": {...}}`: a page of a listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Page<T> {
    /// Always `true`.
    pub success: bool,
    pub data: Vec<T>,
    #[schema(inline)]
    pub pagination: Pagination,
}

impl<T> Page<T> {
    pub fn new(data: Vec<T>, pagination: Pagination) -> Self {
        Self {
            success: true,
            data,
            pagination,
        }
    }
}

/// Where a page of a listing sits in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pagination {
    pub total: u64,
    /// At most 200 (`PAGE_LIMIT_MAX` in the server; its drift test checks the bound).
    #[schema(minimum = 1, maximum = 200)]
    pub limit: u32,
    pub offset: u32,
    #[schema(minimum = 1)]
    pub page: u64,
    pub total_pages: u64,
    pub has_more: bool,
    /// Where the next page starts (`offset`), or `null` at the end; only on the listings
    /// bounded by answer size. A page may end before `limit` items when the next would take the
    /// answer past 4 MiB (`ANSWER_BYTES_MAX`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub next_offset: Option<Option<u64>>,
    /// The `cursor` of the next page, or `null` at the end; only where `nextOffset` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub next_cursor: Option<Option<String>>,
}

impl Pagination {
    /// The page at `offset` of `limit` items, of `total` in all (no `nextOffset`/`nextCursor`).
    pub fn of(total: u64, limit: u32, offset: u32) -> Self {
        Self {
            total,
            limit,
            offset,
            page: u64::from(offset / limit + 1),
            total_pages: total.div_ceil(u64::from(limit)),
            has_more: u64::from(offset) + u64::from(limit) < total,
            next_offset: None,
            next_cursor: None,
        }
    }
}

/// `{"success": true, "data": [...], "pagination": {"limit", "hasMore", "nextCursor"}}`: a page
/// read by cursor. It ends before `limit` items when the next would take the answer past 4 MiB.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CursorPage<T> {
    /// Always `true`.
    pub success: bool,
    pub data: Vec<T>,
    #[schema(inline)]
    pub pagination: CursorPagination,
}

impl<T> CursorPage<T> {
    /// `data`, then the cursor of the next page (`None` at the end).
    pub fn new(data: Vec<T>, limit: u32, next_cursor: Option<String>) -> Self {
        Self {
            success: true,
            data,
            pagination: CursorPagination {
                limit,
                has_more: next_cursor.is_some(),
                next_cursor,
            },
        }
    }
}

/// Where a page read by cursor ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CursorPagination {
    #[schema(minimum = 1)]
    pub limit: u32,
    pub has_more: bool,
    /// The `cursor` of the next page, or `null` at the end.
    pub next_cursor: Option<String>,
}

/// A page of versions, newest first; `nextBefore` asks for the next page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VersionPage<T> {
    /// Always `true`.
    pub success: bool,
    pub data: Vec<T>,
    #[schema(inline)]
    pub pagination: VersionPagination,
}

impl<T> VersionPage<T> {
    /// `data` of `total` versions in all, then the version the next page starts before
    /// (`None` at the end).
    pub fn new(data: Vec<T>, total: u64, limit: u32, next_before: Option<u32>) -> Self {
        Self {
            success: true,
            data,
            pagination: VersionPagination {
                total,
                limit,
                has_more: next_before.is_some(),
                next_before,
            },
        }
    }
}

/// Where a page of versions ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VersionPagination {
    pub total: u64,
    /// At most 200 (`PAGE_LIMIT_MAX` in the server; its drift test checks the bound).
    #[schema(minimum = 1, maximum = 200)]
    pub limit: u32,
    pub has_more: bool,
    pub next_before: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_plain_page_has_no_next_fields_and_a_bounded_one_writes_null_at_the_end() {
        let plain = serde_json::to_value(Pagination::of(120, 50, 100)).unwrap();
        assert_eq!(
            plain,
            json!({"total": 120, "limit": 50, "offset": 100, "page": 3, "totalPages": 3,
                   "hasMore": false})
        );
        let bounded = Pagination {
            next_offset: Some(None),
            next_cursor: Some(None),
            ..Pagination::of(120, 50, 100)
        };
        let bounded = serde_json::to_value(bounded).unwrap();
        assert_eq!(bounded["nextOffset"], json!(null));
        assert_eq!(bounded["nextCursor"], json!(null));
    }
}
