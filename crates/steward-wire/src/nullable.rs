//! A request field whose `null` means something other than leaving it out (on a change:
//! left out keeps the value, `null` clears it).

use serde::{Deserialize, Deserializer};

/// With `#[serde(default, deserialize_with = "nullable::field")]` on an
/// `Option<Option<T>>`: left out is `None`, `null` is `Some(None)`, a value is `Some(Some(v))`.
pub(crate) fn field<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize)]
    struct Change {
        #[serde(default, deserialize_with = "super::field")]
        cap: Option<Option<i64>>,
    }

    #[test]
    fn left_out_null_and_a_value_are_three_answers() {
        let read = |v| serde_json::from_value::<Change>(v).unwrap().cap;
        assert_eq!(read(json!({})), None);
        assert_eq!(read(json!({"cap": null})), Some(None));
        assert_eq!(read(json!({"cap": 3})), Some(Some(3)));
    }
}
