//! Decoding and validating `POST /v1/refunds` parameters.
//!
//! Stripe clients send `application/x-www-form-urlencoded` bodies with bracket
//! keys (`metadata[order_id]=42`); other clients send JSON. Both are decoded
//! into one JSON object ([`decode`]) and then validated into [`RefundParams`]
//! ([`validate`]). Every failure is a Stripe-shaped 400 naming the parameter.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// Parameters `POST /v1/refunds` accepts; anything else is refused like Stripe does.
const KNOWN_PARAMS: &[&str] = &[
    "payment_intent",
    "amount",
    "currency",
    "metadata",
    "reason",
    "expand",
];

/// Stripe's accepted refund reasons.
const REASONS: &[&str] = &["duplicate", "fraudulent", "requested_by_customer"];

/// Validated parameters of a refund create request.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct RefundParams {
    pub payment_intent: String,
    pub amount: i64,
    pub currency: String,
    pub metadata: BTreeMap<String, String>,
    pub reason: Option<String>,
}

impl RefundParams {
    /// A stable string identifying these parameters, for idempotency checks.
    pub fn fingerprint(&self) -> String {
        // Struct fields serialize in declaration order and metadata is a
        // BTreeMap, so this is deterministic.
        format!("params:{}", serde_json::to_string(self).unwrap_or_default())
    }
}

/// Decodes a request body (form or JSON, by `Content-Type`) into a JSON object.
pub(crate) fn decode(
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Map<String, Value>, ApiError> {
    let is_json = content_type
        .map(|ct| {
            ct.trim()
                .to_ascii_lowercase()
                .starts_with("application/json")
        })
        .unwrap_or(false);
    if is_json {
        decode_json(body)
    } else {
        decode_form(body)
    }
}

fn decode_json(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::bad_request(
            "Invalid request body: expected a JSON object.",
        )),
        Err(e) => Err(ApiError::bad_request(format!(
            "Invalid request body: could not parse JSON ({e})."
        ))),
    }
}

fn decode_form(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if std::str::from_utf8(body).is_err() {
        return Err(ApiError::bad_request(
            "Invalid request body: form data must be UTF-8.",
        ));
    }
    let pairs: Vec<(String, String)> = serde_html_form::from_bytes(body).map_err(|e| {
        ApiError::bad_request(format!(
            "Invalid request body: could not parse form data ({e})."
        ))
    })?;
    let mut out = Map::new();
    for (key, value) in pairs {
        let Some(open) = key.find('[') else {
            out.insert(key, Value::String(value));
            continue;
        };
        let base = &key[..open];
        let rest = &key[open..];
        let inner = rest
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .filter(|inner| !inner.contains(['[', ']']))
            .filter(|_| !base.is_empty());
        let Some(inner) = inner else {
            return Err(ApiError::invalid_param(
                key.clone(),
                format!("Invalid parameter name: {key}."),
            ));
        };
        if inner.is_empty() {
            // `expand[]=a&expand[]=b`: an array.
            let slot = out
                .entry(base.to_string())
                .or_insert_with(|| Value::Array(Vec::new()));
            match slot {
                Value::Array(items) => items.push(Value::String(value)),
                _ => return Err(conflicting(base)),
            }
        } else {
            // `metadata[k]=v`: an object.
            let slot = out
                .entry(base.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            match slot {
                Value::Object(map) => {
                    map.insert(inner.to_string(), Value::String(value));
                }
                // `metadata=` (empty) followed by `metadata[k]=v`: keep the keys.
                Value::String(s) if s.is_empty() => {
                    let mut map = Map::new();
                    map.insert(inner.to_string(), Value::String(value));
                    *slot = Value::Object(map);
                }
                _ => return Err(conflicting(base)),
            }
        }
    }
    Ok(out)
}

fn conflicting(base: &str) -> ApiError {
    ApiError::invalid_param(base, format!("Conflicting values given for {base}."))
}

/// Validates decoded parameters.
pub(crate) fn validate(map: &Map<String, Value>) -> Result<RefundParams, ApiError> {
    let mut unknown: Vec<&String> = map
        .keys()
        .filter(|k| !KNOWN_PARAMS.contains(&k.as_str()))
        .collect();
    unknown.sort();
    if let Some(first) = unknown.first() {
        return Err(ApiError::invalid_param(
            first.as_str(),
            format!("Received unknown parameter: {first}"),
        ));
    }

    let payment_intent = match map.get("payment_intent") {
        None | Some(Value::Null) => return Err(ApiError::missing_param("payment_intent")),
        Some(Value::String(s)) if s.trim().is_empty() => {
            return Err(ApiError::missing_param("payment_intent"))
        }
        Some(Value::String(s)) => s.clone(),
        Some(_) => {
            return Err(ApiError::invalid_param(
                "payment_intent",
                "Invalid payment_intent: must be a string.",
            ))
        }
    };

    let amount = match map.get("amount") {
        None | Some(Value::Null) => return Err(ApiError::missing_param("amount")),
        Some(v) => positive_integer(v).ok_or_else(|| {
            ApiError::invalid_param("amount", "Invalid positive integer for param: amount.")
        })?,
    };

    let currency = match map.get("currency") {
        None | Some(Value::Null) => "usd".to_string(),
        Some(Value::String(s)) if s.len() == 3 && s.chars().all(|c| c.is_ascii_alphabetic()) => {
            s.to_ascii_lowercase()
        }
        Some(_) => {
            return Err(ApiError::invalid_param(
                "currency",
                "Invalid currency: must be a three-letter ISO currency code.",
            ))
        }
    };

    let metadata = metadata(map.get("metadata"))?;

    let reason = match map.get("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if REASONS.contains(&s.as_str()) => Some(s.clone()),
        Some(_) => {
            return Err(ApiError::invalid_param(
                "reason",
                format!("Invalid reason: must be one of {}.", REASONS.join(", ")),
            ))
        }
    };

    Ok(RefundParams {
        payment_intent,
        amount,
        currency,
        metadata,
        reason,
    })
}

fn positive_integer(v: &Value) -> Option<i64> {
    let n = match v {
        Value::Number(n) => n.as_i64()?,
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse::<i64>().ok()?
        }
        _ => return None,
    };
    (n > 0).then_some(n)
}

fn metadata(v: Option<&Value>) -> Result<BTreeMap<String, String>, ApiError> {
    let map = match v {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::String(s)) if s.is_empty() => return Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map,
        Some(_) => {
            return Err(ApiError::invalid_param(
                "metadata",
                "Invalid metadata: must be an object of string keys and values.",
            ))
        }
    };
    let mut out = BTreeMap::new();
    for (key, value) in map {
        let param = format!("metadata[{key}]");
        if key.is_empty() || key.chars().count() > 40 {
            return Err(ApiError::invalid_param(
                param,
                "Metadata keys must be 1 to 40 characters long.",
            ));
        }
        let value = match value {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => {
                return Err(ApiError::invalid_param(
                    param,
                    "Metadata values must be strings.",
                ))
            }
        };
        if value.chars().count() > 500 {
            return Err(ApiError::invalid_param(
                param,
                "Metadata values can be at most 500 characters long.",
            ));
        }
        out.insert(key.clone(), value);
    }
    Ok(out)
}

/// A stable fingerprint for parameters that did not validate (keys sorted).
pub(crate) fn raw_fingerprint(map: &Map<String, Value>) -> String {
    format!("raw:{}", canonical(&Value::Object(map.clone())))
}

fn canonical(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let parts: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), canonical(v)))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", parts.join(","))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(body: &str) -> Result<RefundParams, ApiError> {
        validate(&decode(None, body.as_bytes())?)
    }

    #[test]
    fn form_with_metadata_brackets() {
        let p = form("payment_intent=pi_1&amount=500&metadata[order]=o%201&metadata[n]=2").unwrap();
        assert_eq!(p.payment_intent, "pi_1");
        assert_eq!(p.amount, 500);
        assert_eq!(p.currency, "usd");
        assert_eq!(p.metadata.get("order").map(String::as_str), Some("o 1"));
        assert_eq!(p.metadata.get("n").map(String::as_str), Some("2"));
    }

    #[test]
    fn bad_amounts_are_refused() {
        for body in [
            "payment_intent=pi_1&amount=0",
            "payment_intent=pi_1&amount=-5",
            "payment_intent=pi_1&amount=1.5",
            "payment_intent=pi_1&amount=abc",
        ] {
            let err = form(body).unwrap_err();
            assert_eq!(err.param.as_deref(), Some("amount"), "{body}");
        }
        let err = validate(
            &decode(
                Some("application/json"),
                br#"{"payment_intent":"pi","amount":2.5}"#,
            )
            .unwrap(),
        )
        .unwrap_err();
        assert_eq!(err.param.as_deref(), Some("amount"));
    }

    #[test]
    fn malformed_bracket_keys_are_refused_not_panicking() {
        for body in [
            "metadata[a][b]=1",
            "[x]=1",
            "metadata[a=1",
            "metadata]=1&metadata[x]=2",
        ] {
            assert!(form(body).is_err(), "{body}");
        }
        assert!(decode(Some("application/json"), b"{not json").is_err());
        assert!(decode(Some("application/json"), b"[1,2]").is_err());
        assert!(decode(None, &[0xff, 0xfe]).is_err());
    }

    #[test]
    fn unknown_params_are_named() {
        let err = form("payment_intent=pi_1&amount=5&charge=ch_1").unwrap_err();
        assert_eq!(err.param.as_deref(), Some("charge"));
    }

    #[test]
    fn fingerprint_ignores_encoding_and_key_order() {
        let a = form("amount=5&payment_intent=pi_1&metadata[b]=2&metadata[a]=1").unwrap();
        let b = validate(
            &decode(
                Some("application/json; charset=utf-8"),
                br#"{"payment_intent":"pi_1","amount":5,"currency":"USD","metadata":{"a":"1","b":"2"}}"#,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
    }
}
