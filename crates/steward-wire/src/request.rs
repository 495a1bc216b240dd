//! Request bodies. Each is a JSON object whose unknown fields are refused
//! (`deny_unknown_fields`, `additionalProperties: false` in the schema); a field sent as `null`
//! reads as left out. The server checks the field names against the type's schema before it
//! deserializes, so an unknown field is named the same way whatever else is wrong.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use steward_core::TextKind;
use utoipa::ToSchema;

/// Text a person reads (a title, note, reason, description): a JSON string without control or
/// invisible formatting characters (line feeds and tabs aside). Anything else is refused with
/// the message the hand-written parsers gave: `must be a string`, or the character found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Text(pub String);

impl Text {
    pub fn into_string(self) -> String {
        self.0
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(text) => {
                steward_core::check_text("", &text, TextKind::Prose)
                    .map_err(|e| D::Error::custom(e.message))?;
                Ok(Text(text))
            }
            _ => Err(D::Error::custom("must be a string")),
        }
    }
}

/// `POST /environment/halt`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HaltBody {
    /// Why the environment is halted, shown to whoever resumes it (at most
    /// `HALT_REASON_LEN_MAX` bytes; the server's drift test checks the bound).
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 1000)]
    pub reason: Option<Text>,
}

/// `PATCH /environment`: the environment's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnvironmentBody {
    /// `refuse`: governed invokes with neither an `operationKey` nor an `Idempotency-Key` are
    /// refused (400 `operation_key_required`); `accept` (the default): they are answered with
    /// a `no_request_key` warning.
    pub unkeyed_invokes: crate::UnkeyedInvokes,
}

/// `POST /environment/resume`: no fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeBody {}

/// `POST /approvals/{id}/approve` and `/deny`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecisionBody {
    /// Why, for the record; the settling decision's note is the approval's `decisionNote`.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub note: Option<Text>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_refuses_what_is_not_a_clean_string_with_the_old_messages() {
        let body: DecisionBody = serde_json::from_value(json!({"note": null})).unwrap();
        assert_eq!(body.note, None);
        let err = serde_json::from_value::<DecisionBody>(json!({"note": 1})).unwrap_err();
        assert_eq!(err.to_string(), "must be a string");
        let err =
            serde_json::from_value::<DecisionBody>(json!({"note": "a\u{202E}b"})).unwrap_err();
        assert!(
            err.to_string().starts_with("must not contain control"),
            "{err}"
        );
        let body: HaltBody = serde_json::from_value(json!({"reason": "line\nfeed"})).unwrap();
        assert_eq!(body.reason, Some(Text("line\nfeed".into())));
    }
}
