//! Links between effects (`EffectLinks`), written in the submission's transaction and read with
//! the effect's detail.

use super::conn::{constraint, execute_cached, unavailable};
use super::rows::{self, query_all};
use crate::error::StoreResult;
use crate::links::{assemble, COMPENSATES, DEPENDS_ON, PREVIEW};
use crate::records::PREVIEW_BINDING;
use crate::records::{EffectLinks, Submission};
use rusqlite::{params, Connection};
use steward_core::EffectId;

/// Records the new effect's links; nothing when it has none (the common case costs nothing).
pub(crate) fn insert(tx: &Connection, s: &Submission) -> StoreResult<()> {
    let sql =
        "INSERT INTO effect_links (effect_id, kind, target_id, outcome) VALUES (?1, ?2, ?3, ?4)";
    for d in &s.links.depends_on {
        execute_cached(
            tx,
            sql,
            params![
                s.effect_id.as_str(),
                DEPENDS_ON,
                d.effect.as_str(),
                d.outcome.as_str()
            ],
        )
        .map_err(unavailable)?;
    }
    if let Some(target) = &s.links.compensates {
        execute_cached(
            tx,
            sql,
            params![
                s.effect_id.as_str(),
                COMPENSATES,
                target.as_str(),
                None::<&str>
            ],
        )
        .map_err(unavailable)?;
    }
    if let Some(preview) = &s.links.preview {
        execute_cached(
            tx,
            sql,
            params![
                s.effect_id.as_str(),
                PREVIEW,
                preview.as_str(),
                None::<&str>
            ],
        )
        .map_err(|e| constraint(e, PREVIEW_BINDING))?;
    }
    Ok(())
}

/// The links of `effect`, both ways.
pub(crate) fn read(conn: &Connection, effect: &EffectId) -> StoreResult<EffectLinks> {
    let own = query_all(
        conn,
        "SELECT kind, target_id, outcome FROM effect_links WHERE effect_id = ?1 ORDER BY kind, target_id",
        &[&effect.as_str()],
        |row| {
            Ok((
                rows::col::<String>(row, 0)?,
                rows::col::<String>(row, 1)?,
                rows::col::<Option<String>>(row, 2)?,
            ))
        },
    )?;
    let compensated_by = query_all(
        conn,
        "SELECT effect_id FROM effect_links WHERE target_id = ?1 AND kind = 'compensates' ORDER BY effect_id",
        &[&effect.as_str()],
        |row| rows::col::<String>(row, 0),
    )?;
    assemble(own, compensated_by)
}
