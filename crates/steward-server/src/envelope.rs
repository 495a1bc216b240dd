//! The success envelope: `{"success": true, "data": ..., "pagination": ...}`, and the largest
//! body every door reads.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// The largest request body accepted on any route, in bytes: generous for an action
/// definition or an invocation's input, small enough that a few hundred concurrent uploads fit
/// in memory. Enforced once for every route (`api/rejection.rs` by `Content-Length`, axum's
/// `DefaultBodyLimit` while reading) and on `/mcp` (`mcp/http.rs`); past it the answer is
/// `413 PAYLOAD_TOO_LARGE`.
pub const JSON_BODY_BYTES_MAX: usize = 1024 * 1024;

/// The default and largest page sizes for listings.
pub const PAGE_LIMIT_DEFAULT: u32 = 50;
pub const PAGE_LIMIT_MAX: u32 = 200;

pub fn ok(data: Value) -> Response {
    (
        StatusCode::OK,
        axum::Json(json!({ "success": true, "data": data })),
    )
        .into_response()
}

pub fn with_status(status: StatusCode, data: Value) -> Response {
    (status, axum::Json(json!({ "success": true, "data": data }))).into_response()
}

pub fn paged(items: Vec<Value>, total: u64, limit: u32, offset: u32) -> Response {
    let total_pages = total.div_ceil(u64::from(limit));
    let body = json!({
        "success": true,
        "data": items,
        "pagination": {
            "total": total,
            "limit": limit,
            "offset": offset,
            "page": offset / limit + 1,
            "totalPages": total_pages,
            "hasMore": u64::from(offset) + u64::from(limit) < total,
        }
    });
    (StatusCode::OK, axum::Json(body)).into_response()
}
