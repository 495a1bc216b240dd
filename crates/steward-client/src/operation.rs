//! One business operation, as the journal records it.

use crate::state::LocalState;
use serde_json::Value;
use std::fmt;
use steward_core::{
    fingerprint, ApprovalId, EffectId, IdempotencyKey, InvocationId, InvocationStatus, Millis,
    OperationKey,
};

/// The journal's id for one business operation: `op_` and a ULID.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperationId(String);

impl OperationId {
    pub const PREFIX: &'static str = "op_";

    /// Builds an id from a fresh unique suffix.
    pub fn from_unique(suffix: &str) -> OperationId {
        OperationId(format!("{}{}", Self::PREFIX, suffix.to_ascii_lowercase()))
    }

    /// Parses a stored id, checking its prefix and characters.
    pub fn parse(value: &str) -> Option<OperationId> {
        let rest = value.strip_prefix(Self::PREFIX)?;
        let ok = !rest.is_empty()
            && rest.len() <= 64
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        ok.then(|| OperationId(value.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The `Idempotency-Key` of this operation's invoke: derived from the id alone, so the same
    /// operation always sends the same key, in this process or after any restart.
    pub fn idempotency_key(&self) -> IdempotencyKey {
        IdempotencyKey::parse(&format!("{}:attempt-1", self.0))
            .expect("an operation id makes a printable key well under the length limit")
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The application's durable record of one intended action.
#[derive(Debug, Clone, PartialEq)]
pub struct Operation {
    pub id: OperationId,
    /// The Steward environment the operation runs in (the key's environment).
    pub environment: String,
    /// The action name or id invoked.
    pub action: String,
    /// The application's stable key for this business operation; sent as `operationKey`.
    pub operation_key: OperationKey,
    /// The input, stored as given, and its canonical fingerprint.
    pub input: Value,
    pub input_fingerprint: String,
    /// The `Idempotency-Key` every send of this operation carries.
    pub idempotency_key: IdempotencyKey,
    /// The failed invocation this operation retries, if any.
    pub retry_of: Option<InvocationId>,
    pub state: LocalState,
    pub invocation_id: Option<InvocationId>,
    pub effect_id: Option<EffectId>,
    pub approval_id: Option<ApprovalId>,
    /// The server's status when last read.
    pub server_status: Option<InvocationStatus>,
    /// The invocation as the server last returned it.
    pub server_record: Option<Value>,
    /// The application's result, saved by `complete`.
    pub result: Option<Value>,
    /// Why the last step could not proceed (an escalation or a refusal).
    pub last_error: Option<String>,
    /// Who reconciles an `unknown` outcome.
    pub assignee: Option<String>,
    /// How many times the invoke was sent (every send with the same keys).
    pub attempt_count: u32,
    /// Bumped by every save; saves compare and set it.
    pub version: u64,
    pub created_at: Millis,
    pub updated_at: Millis,
}

impl Operation {
    /// A new operation in state `intended`, not yet in any journal.
    pub fn intended(
        id: OperationId,
        environment: &str,
        action: &str,
        operation_key: OperationKey,
        input: Value,
        retry_of: Option<InvocationId>,
        now: Millis,
    ) -> Operation {
        Operation {
            idempotency_key: id.idempotency_key(),
            id,
            environment: environment.to_string(),
            action: action.to_string(),
            operation_key,
            input_fingerprint: fingerprint(&input),
            input,
            retry_of,
            state: LocalState::Intended,
            invocation_id: None,
            effect_id: None,
            approval_id: None,
            server_status: None,
            server_record: None,
            result: None,
            last_error: None,
            assignee: None,
            attempt_count: 0,
            version: 0,
            created_at: now,
            updated_at: now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_idempotency_key_is_derived_from_the_id_alone() {
        let id = OperationId::from_unique("01HX");
        assert_eq!(id.as_str(), "op_01hx");
        assert_eq!(id.idempotency_key().as_str(), "op_01hx:attempt-1");
        assert_eq!(OperationId::parse("op_01hx"), Some(id));
        assert_eq!(OperationId::parse("inv_01hx"), None);
        assert_eq!(OperationId::parse("op_"), None);
    }

    #[test]
    fn fingerprints_match_the_shared_vectors() {
        // The same file the Python package's tests read (tests/vectors/fingerprints.json).
        let file: Value =
            serde_json::from_str(include_str!("../../../tests/vectors/fingerprints.json"))
                .expect("the fingerprint vectors are JSON");
        assert_eq!(file["version"], json!(1));
        let cases = file["cases"].as_array().expect("a list of cases");
        assert!(!cases.is_empty());
        for case in cases {
            let value = &case["value"];
            assert_eq!(
                json!(steward_core::canonical_json(value)),
                case["canonical"],
                "{value}"
            );
            assert_eq!(json!(fingerprint(value)), case["fingerprint"], "{value}");
        }
    }

    #[test]
    fn the_fingerprint_ignores_key_order() {
        let key = OperationKey::parse("k").unwrap();
        let a = Operation::intended(
            OperationId::from_unique("a"),
            "test",
            "refund",
            key.clone(),
            json!({"a": 1, "b": 2}),
            None,
            Millis(0),
        );
        let b = Operation::intended(
            OperationId::from_unique("b"),
            "test",
            "refund",
            key,
            json!({"b": 2, "a": 1}),
            None,
            Millis(0),
        );
        assert_eq!(a.input_fingerprint, b.input_fingerprint);
    }
}
