//! The envelope's `warnings` (`steward_wire::Warning`), from the application's
//! (`app/warnings.rs`).

use crate::app::warnings::Warning;

/// The wire form of `warnings`.
pub(crate) fn wire(warnings: &[Warning]) -> Vec<steward_wire::Warning> {
    warnings
        .iter()
        .map(|w| steward_wire::Warning {
            code: w.code().to_string(),
            message: w.message(),
            field: w.field().map(str::to_string),
        })
        .collect()
}
