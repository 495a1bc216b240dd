//! A note on an effect: what a person adds to its evidence.

use crate::request::Text;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /actions/effects/{id}/notes`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NoteBody {
    /// Required, and not blank.
    #[serde(default)]
    #[schema(value_type = String, min_length = 1, required = true)]
    pub note: Option<Text>,
}
