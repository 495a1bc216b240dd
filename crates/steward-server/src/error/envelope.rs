//! The error envelope, `{"success": false, "error": {"code", "message", "details"?}}`: the type
//! every error answer is written from, and its schema in the OpenAPI document (the code an enum
//! of [`CODES`], with the table as the `x-error-codes` extension).

use super::codes::CODES;
use serde::Serialize;
use serde_json::{json, Value};
use utoipa::openapi::extensions::ExtensionsBuilder;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};
use utoipa::ToSchema;

/// The extension of the error envelope's `code` that lists every code with its status and
/// meaning.
pub const ERROR_CODES_EXTENSION: &str = "x-error-codes";

/// `{"success": false, "error": {...}}`: every error answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorEnvelope {
    /// Always `false`.
    pub success: bool,
    #[schema(inline)]
    pub error: ErrorBody,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// A stable code, one of `x-error-codes` (`crate::error::codes::CODES`).
    #[schema(schema_with = error_code)]
    pub code: String,
    /// What went wrong, for a human.
    pub message: String,
    /// Structured context, e.g. `{"field": "name"}` for a validation error.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object, required = false)]
    pub details: Option<Value>,
}

/// The error envelope's `code`: an enum of every code in [`CODES`], and the table itself (code,
/// status, meaning) as the `x-error-codes` extension.
fn error_code() -> Object {
    let table: Vec<Value> = CODES
        .iter()
        .map(|c| json!({"code": c.code, "status": c.status.as_u16(), "meaning": c.meaning}))
        .collect();
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(
            "A stable code; `x-error-codes` gives each one's HTTP status and meaning.",
        ))
        .enum_values(Some(CODES.iter().map(|c| c.code)))
        .extensions(Some(
            ExtensionsBuilder::new()
                .add(ERROR_CODES_EXTENSION, table)
                .build(),
        ))
        .build()
}
