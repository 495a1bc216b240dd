//! `POST /actions/import`'s use case: the actions an OpenAPI document planned become actions,
//! each through the same checks as a create ([`super::actions::definition`]). Reading the
//! document and planning its operations is parsing and stays with the HTTP front end
//! (`api/import/`); this takes the plan's definitions and answers, for each in order, what
//! became of it. One that fails the checks, or whose name is taken, is skipped, never created
//! half-right, so a second import of the same spec creates only what the first one did not.

use super::{actions, Error, Principal, Result};
use crate::state::AppState;
use serde_json::{Map, Value};
use std::collections::BTreeSet;
use steward_core::{scopes, ActionDefinition, ActionId};
use steward_store::{Actor, StoreError};

/// An action the plan proposes: its name and its definition as the plan built it.
#[derive(Debug, Clone)]
pub struct Planned {
    pub name: String,
    pub definition: Map<String, Value>,
}

/// What became of a planned action.
#[derive(Debug)]
pub enum Outcome {
    /// Checked, and created unless the import is a dry run (then `id` is `None`).
    Created {
        id: Option<ActionId>,
        definition: Box<ActionDefinition>,
    },
    /// Not created, and why.
    Skipped(String),
}

/// Checks each planned action and creates it (nothing when `dry_run`), answering one outcome
/// per entry of `planned`, in order.
pub async fn import(
    state: &AppState,
    principal: &Principal,
    planned: Vec<Planned>,
    dry_run: bool,
) -> Result<Vec<Outcome>> {
    principal.require(scopes::ACTIONS_WRITE)?;
    let allow_http = state.outbound.allow_insecure;
    let taken: BTreeSet<String> = state
        .store
        .list_actions(&principal.env.id)
        .await?
        .into_iter()
        .map(|a| a.name)
        .collect();
    let mut outcomes = Vec::with_capacity(planned.len());
    for entry in planned {
        let taken_reason = || format!("an action named {} already exists", entry.name);
        if taken.contains(&entry.name) {
            outcomes.push(Outcome::Skipped(taken_reason()));
            continue;
        }
        let def = match actions::definition(entry.definition.clone(), allow_http) {
            Ok(def) => def,
            Err(e) => {
                outcomes.push(Outcome::Skipped(invalid_reason(&e)));
                continue;
            }
        };
        let mut id = None;
        if !dry_run {
            let record = actions::new_record(state, principal, def.clone());
            match state
                .store
                .create_action(&record, &Actor::key(&principal.key.id, record.created_at))
                .await
            {
                Ok(()) => id = Some(record.id.clone()),
                Err(StoreError::Duplicate { .. }) => {
                    outcomes.push(Outcome::Skipped(taken_reason()));
                    continue;
                }
                Err(other) => return Err(other.into()),
            }
        }
        outcomes.push(Outcome::Created {
            id,
            definition: Box::new(def),
        });
    }
    Ok(outcomes)
}

/// Why a planned action that fails a create's checks is skipped, naming the field.
fn invalid_reason(e: &Error) -> String {
    let field = e.details.as_ref().and_then(|d| d["field"].as_str());
    format!(
        "would not be a valid action ({}: {})",
        field.unwrap_or("definition"),
        e.message
    )
}
