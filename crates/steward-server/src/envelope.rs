//! The success envelope: `{"success": true, "data": ..., "pagination": ...}`, written from the
//! typed envelopes of `steward_wire`, and the largest body every door reads.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use steward_wire::{Page, Pagination, Single};

/// The largest request body accepted on any route, in bytes: generous for an action
/// definition or an invocation's input, small enough that a few hundred concurrent uploads fit
/// in memory. Enforced once for every route (`api/rejection.rs` by `Content-Length`, axum's
/// `DefaultBodyLimit` while reading) and on `/mcp` (`mcp/http.rs`); past it the answer is
/// `413 PAYLOAD_TOO_LARGE`.
pub const JSON_BODY_BYTES_MAX: usize = 1024 * 1024;

/// The default and largest page sizes for listings.
pub const PAGE_LIMIT_DEFAULT: u32 = 50;
pub const PAGE_LIMIT_MAX: u32 = 200;

pub fn ok<T: Serialize>(data: T) -> Response {
    with_status(StatusCode::OK, data)
}

pub fn with_status<T: Serialize>(status: StatusCode, data: T) -> Response {
    (status, axum::Json(Single::new(data))).into_response()
}

/// One record with `warnings` beside it (none: the plain envelope).
pub fn warned<T: Serialize>(
    status: StatusCode,
    data: T,
    warnings: Vec<steward_wire::Warning>,
) -> Response {
    (status, axum::Json(Single::warned(data, warnings))).into_response()
}

pub fn paged<T: Serialize>(items: Vec<T>, total: u64, limit: u32, offset: u32) -> Response {
    let body = Page::new(items, Pagination::of(total, limit, offset));
    (StatusCode::OK, axum::Json(body)).into_response()
}
