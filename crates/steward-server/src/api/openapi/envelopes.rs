//! The sets of error answers an operation lists in its `responses(...)`, each with the error
//! envelope, `crate::error::ErrorEnvelope`, the type every error answer is written from. The
//! success envelopes are `steward_wire`'s (`Single`, `List`, `Page`, `CursorPage`,
//! `VersionPage`), the types the handlers write.

use std::collections::BTreeMap;
use utoipa::openapi::{Ref, RefOr, Response, ResponseBuilder};
use utoipa::{IntoResponses, ToSchema};

pub use crate::error::ErrorEnvelope;

fn error(description: &str) -> RefOr<Response> {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            utoipa::openapi::ContentBuilder::new()
                .schema(Some(RefOr::Ref(Ref::from_schema_name(
                    ErrorEnvelope::name(),
                ))))
                .build(),
        )
        .into()
}

/// One set of error answers, each with the error envelope.
macro_rules! error_set {
    ($(#[$doc:meta])* $name:ident { $($status:literal => $description:literal),+ $(,)? }) => {
        $(#[$doc])*
        pub struct $name;

        impl IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<Response>> {
                BTreeMap::from([$(($status.to_string(), error($description))),+])
            }
        }
    };
}

error_set!(
    /// Every authenticated operation: no or an unknown key, a key without the scope, storage
    /// down.
    Guarded {
        "401" => "missing or invalid API key (`AUTHENTICATION_FAILED`)",
        "403" => "the key lacks the operation's scope (`FORBIDDEN`)",
        "503" => "storage is unavailable; this request changed nothing (`STORAGE_UNAVAILABLE`), or the database lost the answer of this request's commit (`outcome_unknown`)",
    }
);

error_set!(
    /// A body, path or query value the operation refuses, naming the field.
    Invalid {
        "400" => "a field is missing, malformed or unknown (`VALIDATION_ERROR`, `details.field` names it)",
    }
);

error_set!(
    /// The body is larger than the server accepts.
    TooLarge {
        "413" => "the request body is too large (`PAYLOAD_TOO_LARGE`)",
    }
);

error_set!(
    /// The record named in the path does not exist in the key's environment.
    Missing {
        "404" => "no such record in this environment (`NOT_FOUND`)",
    }
);

error_set!(
    /// The request conflicts with the record's state.
    Conflict {
        "409" => "the request conflicts with the current state (e.g. `already_exists`, `concurrent_modification`, `environment_halted`)",
    }
);

error_set!(
    /// Operations that honour `Idempotency-Key`.
    Idempotent {
        "400" => "a field is malformed or unknown, or the `Idempotency-Key` is not printable ASCII of 1 to 255 bytes (`VALIDATION_ERROR`)",
        "409" => "the original request with this `Idempotency-Key` is still running (`idempotency_request_in_progress`), or the request conflicts with the current state",
        "422" => "this `Idempotency-Key` was used for a different request (`idempotency_key_reused`)",
    }
);

error_set!(
    /// A heavy read (a run, a run's spans or its trace, a list of invocations) past the key's
    /// concurrent reads (`api/bounded.rs`).
    Busy {
        "429" => "the key already runs the most heavy reads a key may at once (`TOO_MANY_READS`); `Retry-After` says when to ask again",
    }
);

error_set!(
    /// A hosted-product feature Steward does not offer.
    NotOffered {
        "402" => "not offered by Steward, which is self-hosted and bills nothing (`FEATURE_NOT_AVAILABLE`)",
    }
);

error_set!(
    /// An invoke its key's budget refuses (`api/budgets.rs`); no invocation is recorded.
    BudgetRefused {
        "429" => "the key's budget has no room this month (`BUDGET_EXCEEDED`)",
        "503" => "storage is unavailable (`STORAGE_UNAVAILABLE`); the provider was called but its answer could not be recorded, or the commit recording the invoke lost its answer (`outcome_unknown`: call again with the same keys, never new ones); or the key's budget has room only if unknown effects are reconciled first (`BUDGET_RECONCILIATION_REQUIRED`)",
    }
);

#[cfg(test)]
mod tests {
    use crate::error::codes::CODES;
    use crate::error::envelope::ERROR_CODES_EXTENSION;
    use serde_json::Value;

    /// The served document lists exactly the table: every code, with its status and meaning.
    #[test]
    fn the_document_lists_every_error_code_of_the_table() {
        let document: Value = serde_json::from_str(&super::super::document().to_json().unwrap())
            .expect("the document is JSON");
        let code = document
            .pointer("/components/schemas/ErrorEnvelope/properties/error/properties/code")
            .unwrap_or_else(|| panic!("no error code schema in {document}"));
        let listed: Vec<&str> = code["enum"]
            .as_array()
            .expect("an enum of codes")
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        let table: Vec<&str> = CODES.iter().map(|c| c.code).collect();
        assert_eq!(listed, table);
        let extension = code[ERROR_CODES_EXTENSION]
            .as_array()
            .expect("the x-error-codes table");
        assert_eq!(extension.len(), CODES.len());
        for (row, c) in extension.iter().zip(CODES) {
            assert_eq!(row["code"], c.code);
            assert_eq!(row["status"], c.status.as_u16());
            assert_eq!(row["meaning"], c.meaning);
        }
    }
}
