//! Links between effects (`EffectLinks`), written in the submission's transaction and read with
//! the effect's detail.

use super::conn::Tx;
use crate::error::StoreResult;
use crate::links::{assemble, COMPENSATES, DEPENDS_ON, PREVIEW};
use crate::records::PREVIEW_BINDING;
use crate::records::{EffectLinks, Submission};
use steward_core::EffectId;

/// Records the new effect's links in one statement; nothing when it has none (the hot path's
/// round trips are unchanged).
pub(crate) async fn insert(tx: &Tx<'_>, s: &Submission) -> StoreResult<()> {
    let mut kinds: Vec<&str> = Vec::new();
    let mut targets: Vec<&str> = Vec::new();
    let mut outcomes: Vec<Option<&str>> = Vec::new();
    for d in &s.links.depends_on {
        kinds.push(DEPENDS_ON);
        targets.push(d.effect.as_str());
        outcomes.push(Some(d.outcome.as_str()));
    }
    if let Some(target) = &s.links.compensates {
        kinds.push(COMPENSATES);
        targets.push(target.as_str());
        outcomes.push(None);
    }
    if let Some(preview) = &s.links.preview {
        kinds.push(PREVIEW);
        targets.push(preview.as_str());
        outcomes.push(None);
    }
    if kinds.is_empty() {
        return Ok(());
    }
    tx.execute_unique(
        PREVIEW_BINDING,
        "INSERT INTO effect_links (effect_id, kind, target_id, outcome)
         SELECT $1, kind, target_id, outcome
         FROM unnest($2::text[], $3::text[], $4::text[]) AS l(kind, target_id, outcome)",
        &[&s.effect_id.as_str(), &kinds, &targets, &outcomes],
    )
    .await?;
    Ok(())
}

/// The links of `effect`, both ways.
pub(crate) async fn read(tx: &Tx<'_>, effect: &EffectId) -> StoreResult<EffectLinks> {
    let own = tx
        .query(
            "SELECT kind, target_id, outcome FROM effect_links WHERE effect_id = $1 ORDER BY kind, target_id",
            &[&effect.as_str()],
        )
        .await?
        .iter()
        .map(|row| (row.get::<_, String>(0), row.get::<_, String>(1), row.get::<_, Option<String>>(2)))
        .collect();
    let compensated_by = tx
        .query(
            "SELECT effect_id FROM effect_links WHERE target_id = $1 AND kind = 'compensates' ORDER BY effect_id",
            &[&effect.as_str()],
        )
        .await?
        .iter()
        .map(|row| row.get::<_, String>(0))
        .collect();
    assemble(own, compensated_by)
}
