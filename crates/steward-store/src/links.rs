//! Links between effects, the same in every backend: the kinds a link row may have and how an
//! effect's rows become its [`EffectLinks`]. The backends keep only their SQL
//! (`sqlite/links.rs`, `postgres/links.rs`).

use crate::error::{StoreError, StoreResult};
use crate::records::EffectLinks;
use steward_core::link::{Dependency, DEPENDABLE};
use steward_core::EffectId;

/// A row naming an effect that had to hold `outcome` (`dependsOn`).
pub(crate) const DEPENDS_ON: &str = "depends_on";
/// A row naming the settled effect the new one compensates.
pub(crate) const COMPENSATES: &str = "compensates";
/// A row naming the preview the new effect was bound to (its target is a `prv_` id, unique among
/// preview rows: a preview binds one effect).
pub(crate) const PREVIEW: &str = "preview";

fn corrupt(what: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {detail}"))
}

/// Builds the links from their rows, the same for both backends.
pub(crate) fn assemble(
    own: Vec<(String, String, Option<String>)>,
    compensated_by: Vec<String>,
) -> StoreResult<EffectLinks> {
    let effect = |id: &str| EffectId::parse(id).map_err(|e| corrupt("linked effect id", e));
    let mut links = EffectLinks::default();
    for (kind, target, outcome) in own {
        match kind.as_str() {
            DEPENDS_ON => {
                let wanted = outcome.unwrap_or_default();
                let (_, outcome) = DEPENDABLE
                    .iter()
                    .find(|(name, _)| *name == wanted)
                    .ok_or_else(|| corrupt("dependency outcome", &wanted))?;
                links.depends_on.push(Dependency {
                    effect: effect(&target)?,
                    outcome: *outcome,
                });
            }
            COMPENSATES => links.compensates = Some(effect(&target)?),
            PREVIEW => {
                links.preview = Some(
                    steward_core::PreviewId::parse(&target)
                        .map_err(|e| corrupt("linked preview id", e))?,
                )
            }
            other => return Err(corrupt("effect link kind", other)),
        }
    }
    links.compensated_by = compensated_by
        .iter()
        .map(|id| effect(id))
        .collect::<StoreResult<_>>()?;
    Ok(links)
}

/// `after` (the `invocation.created` audit event's record) with the links added under
/// `links`, when there are any: an unlinked invocation's event is as it was, byte for byte.
pub(crate) fn audited(mut after: serde_json::Value, links: &EffectLinks) -> serde_json::Value {
    if !links.is_empty() {
        after["links"] = serde_json::json!({
            "dependsOn": links.depends_on.iter()
                .map(|d| serde_json::json!({"effect": d.effect, "outcome": d.outcome.as_str()}))
                .collect::<Vec<_>>(),
            "compensates": links.compensates,
            "preview": links.preview,
        });
    }
    after
}
