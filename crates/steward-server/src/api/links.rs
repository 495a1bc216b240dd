//! `dependsOn` and `compensates` on invoke, read from the body; `app/links.rs` checks them.

use crate::error::{ApiError, ApiResult};
use serde_json::Value;
use steward_core::link::parse_dependencies;
use steward_core::EffectId;
use steward_store::EffectLinks;

/// Reads `dependsOn` and `compensates` from the invoke body; absent or `null` means none.
/// `dependsOn` stays JSON here: the core's parser names each entry it refuses.
pub(super) fn parse(
    depends_on: Option<Value>,
    compensates: Option<String>,
) -> ApiResult<EffectLinks> {
    let depends_on = match depends_on {
        None => Vec::new(),
        Some(v) => parse_dependencies(&v).map_err(|e| ApiError::validation(e.field, e.message))?,
    };
    let compensates = compensates
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
