//! A secret's metadata.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A secret's metadata; the value is never returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Secret {
    pub name: String,
    pub description: Option<String>,
    pub allowed_hosts: Option<Vec<String>>,
    pub allowed_placements: Option<Vec<String>>,
    pub version: u32,
    pub created_at: String,
    pub updated_at: String,
}
