//! Whether an action takes an input: what an invoke and a preview both check first.

use super::{Error, Result};
use crate::error::codes;
use serde_json::Value;
use steward_core::check_input;
use steward_core::ActionDefinition;
use steward_store::ActionRecord;

/// Refuses `input` for `action` when the action is disabled, or the input does not fit the
/// action's schema, adapter or template. Previews check the same.
pub fn check(action: &ActionRecord, input: &Value) -> Result<()> {
    check_definition(&action.definition, input)
}

/// [`check`] against one version's definition: what an approver's edit of a parked
/// invocation's input is checked with (the version the invocation names).
pub fn check_definition(def: &ActionDefinition, input: &Value) -> Result<()> {
    if !def.enabled {
        return Err(Error::of(codes::ACTION_DISABLED, "this action is disabled"));
    }
    if !input.is_object() && def.takes_object_input() {
        return Err(Error::validation("input", "must be a JSON object"));
    }
    if let Some(schema) = &def.input_schema {
        crate::input_schema::validate(schema, input)?;
    }
    if def.adapter.is_some() {
        crate::adapters::check_input(def, input)
            .map_err(|e| Error::validation(e.field, e.message))?;
    } else {
        check_input(def, input).map_err(|e| match e {
            steward_core::TemplateError::MissingInput { path } => Error::validation(
                format!("input.{path}"),
                "is required by the action's template",
            ),
            other => Error::validation("input", other.to_string()),
        })?;
    }
    Ok(())
}
