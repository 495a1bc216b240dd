//! The one query-string extractor of the API. Every endpoint that takes query parameters reads
//! them through [`Query`], so every endpoint refuses the same mistakes the same way, as
//! `400 VALIDATION_ERROR` naming the parameter:
//!
//! - a parameter the endpoint does not know (`?bogus=1`);
//! - a parameter given twice (`?limit=1&limit=2`): which one would win is a guess;
//! - a value of the wrong type (`?limit=abc`).
//!
//! The router runs the same check as a route layer on every endpoint (`api/mod.rs`), so a bad
//! query string is refused before authentication everywhere, the endpoints that take no
//! parameters included.
//!
//! The known parameters are the target struct's field names as serde sees them (after
//! `rename`), read from its `Deserialize` impl; the handlers' query structs need nothing extra.

use crate::error::ApiError;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};

/// Query parameters deserialized into `T`, refusing unknown, repeated and ill-typed ones.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        parse(parts.uri.query().unwrap_or_default()).map(Query)
    }
}

/// Parses a raw query string (without the `?`) into `T`.
pub fn parse<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    let known = fields::<T>();
    let mut seen: Vec<String> = Vec::new();
    for (name, _) in form_urlencoded::parse(query.as_bytes()) {
        if known.is_some_and(|known| !known.contains(&name.as_ref())) {
            return Err(ApiError::validation(name, "is not a known query parameter"));
        }
        if seen.iter().any(|s| *s == name) {
            return Err(ApiError::validation(name, "must be given at most once"));
        }
        seen.push(name.into_owned());
    }
    let deserializer =
        serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let field = e.path().to_string();
        let field = if field == "." { "query".into() } else { field };
        ApiError::validation(field, format!("is not valid ({})", e.inner()))
    })
}

/// The field names `T`'s derived `Deserialize` asks for, or `None` if `T` is not a struct.
fn fields<T: DeserializeOwned>() -> Option<&'static [&'static str]> {
    let mut found = None;
    // The introspecting deserializer always errs after noting the fields: `T` is never built.
    let _ = T::deserialize(FieldNames(&mut found));
    found
}

/// A deserializer that records the field list serde hands to `deserialize_struct`.
struct FieldNames<'a>(&'a mut Option<&'static [&'static str]>);

impl<'de> Deserializer<'de> for FieldNames<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = Some(fields);
        Err(de::Error::custom("fields noted"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, Default, PartialEq)]
    struct Page {
        limit: Option<u32>,
        #[serde(rename = "waitSeconds")]
        wait_seconds: Option<u64>,
    }

    fn refused(query: &str) -> (String, String) {
        let e = parse::<Page>(query).expect_err(query);
        assert_eq!(e.code, "VALIDATION_ERROR", "{query}");
        (
            e.details.unwrap()["field"].as_str().unwrap().to_string(),
            e.message,
        )
    }

    #[test]
    fn known_parameters_parse() {
        assert_eq!(parse::<Page>("").unwrap(), Page::default());
        assert_eq!(
            parse::<Page>("limit=5&waitSeconds=2").unwrap(),
            Page {
                limit: Some(5),
                wait_seconds: Some(2)
            }
        );
    }

    #[test]
    fn unknown_repeated_and_ill_typed_parameters_are_refused_by_name() {
        assert_eq!(refused("bogus=1").0, "bogus");
        assert_eq!(
            refused("wait_seconds=1").0,
            "wait_seconds",
            "the wire name counts"
        );
        assert_eq!(refused("limit=1&limit=2").0, "limit");
        assert_eq!(refused("limit=abc").0, "limit");
        assert_eq!(refused("limit=1&waitSeconds=-1").0, "waitSeconds");
    }
}
