//! `dependsOn` and `compensates` on invoke, read from the body; `app/links.rs` checks them.

use super::body::optional_string;
use crate::error::{ApiError, ApiResult};
use serde_json::{Map, Value};
use steward_core::link::parse_dependencies;
use steward_core::EffectId;
use steward_store::EffectLinks;

/// Reads `dependsOn` and `compensates` from the invoke body; absent or `null` means none.
pub(super) fn parse(map: &Map<String, Value>) -> ApiResult<EffectLinks> {
    let depends_on = match map.get("dependsOn") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => parse_dependencies(v).map_err(|e| ApiError::validation(e.field, e.message))?,
    };
    let compensates = optional_string(map, "compensates")?
        .map(|id| {
            EffectId::parse(&id)
                .map_err(|_| ApiError::validation("compensates", "must be an effect id (eff_...)"))
        })
        .transpose()?;
    Ok(EffectLinks {
        depends_on,
        compensates,
        compensated_by: Vec::new(),
        preview: None,
    })
}
