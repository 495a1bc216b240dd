//! Request bodies. Each is a JSON object whose unknown fields are refused
//! (`deny_unknown_fields`, `additionalProperties: false` in the schema); a field sent as `null`
//! reads as left out. The server checks the field names against the type's schema before it
//! deserializes, so an unknown field is named the same way whatever else is wrong.

use serde::de::{Error as _, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use std::fmt;
use std::marker::PhantomData;
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

/// A JSON object (`metadata`, `error`): anything else is refused with `must be a JSON object`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Object(pub Map<String, Value>);

impl Object {
    pub fn into_value(self) -> Value {
        Value::Object(self.0)
    }
}

impl<'de> Deserialize<'de> for Object {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::Object(map) => Ok(Object(map)),
            _ => Err(D::Error::custom("must be a JSON object")),
        }
    }
}

/// A count (tokens): a JSON integer of at least 0, else `must be a non-negative integer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Count(pub u64);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer)?
            .as_u64()
            .map(Count)
            .ok_or_else(|| D::Error::custom("must be a non-negative integer"))
    }
}

/// An amount (a cost): a JSON number of at least 0, else `must be a non-negative number`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Amount(pub f64);

impl<'de> Deserialize<'de> for Amount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)?.as_f64() {
            Some(n) if n.is_finite() && n >= 0.0 => Ok(Amount(n)),
            _ => Err(D::Error::custom("must be a non-negative number")),
        }
    }
}

/// Any JSON number (a rating), else `must be a number`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Number(pub f64);

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)?.as_f64() {
            Some(n) if n.is_finite() => Ok(Number(n)),
            _ => Err(D::Error::custom("must be a number")),
        }
    }
}

/// An optional JSON list of `T`: `null` is `None`, anything but a list is refused with
/// `message`, and an item `T` refuses is named by its index (`tags[1]`).
pub(crate) fn list_of<'de, D, T>(
    deserializer: D,
    message: &'static str,
) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct List<T> {
        message: &'static str,
        item: PhantomData<T>,
    }

    impl<'de, T: Deserialize<'de>> Visitor<'de> for List<T> {
        type Value = Option<Vec<T>>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list")
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
            while let Some(item) = seq.next_element()? {
                items.push(item);
            }
            Ok(Some(items))
        }
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Err(E::custom(self.message))
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Err(E::custom(self.message))
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Err(E::custom(self.message))
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Err(E::custom(self.message))
        }
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Err(E::custom(self.message))
        }
        fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            Err(A::Error::custom(self.message))
        }
    }

    deserializer.deserialize_any(List {
        message,
        item: PhantomData,
    })
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
    /// Approve only: the input the gated invocation should run with instead (edit-and-approve).
    /// Checked as an invoke's input is; the edit is not an approval: the approval stays
    /// pending, its ballots start again, and a key other than the requester's and the editor's
    /// approves it. Refused for a custom request (`approval_not_editable`).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub input: Option<serde_json::Value>,
    /// The approval's `inputFingerprint` as the decider read it: an approval whose input was
    /// edited since is not counted (409 `approval_input_changed`).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub input_fingerprint: Option<Text>,
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
