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

/// `PUT /secrets/{name}`: create or rotate. A rotation may narrow where the secret may go, never
/// widen it. The server reads the lists from the body's object (left out keeps a rotation's
/// list, `null` is anywhere), after refusing any field this type does not describe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretBody {
    /// The secret; never returned by any endpoint.
    #[schema(min_length = 1)]
    pub value: String,
    pub description: Option<String>,
    /// Hosts (or `.suffix` domains) the secret may be sent to; `null` is anywhere.
    pub allowed_hosts: Option<Vec<String>>,
    /// Where in a request the secret may be placed; `null` is anywhere.
    pub allowed_placements: Option<Vec<String>>,
}
