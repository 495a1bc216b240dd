//! The `http.idempotent` adapter's configuration: parsed and checked when the action is saved,
//! and parsed again from the stored version at every use.

use serde_json::{Map, Value};
use steward_core::impact::ImpactDeclaration;
use steward_core::{check_placeholders, FieldError};

/// How long a provider must keep idempotency keys at least, in seconds: two hours, so that a
/// replay has at least an hour after `REPLAY_WINDOW_MARGIN_MS` (one hour) to start in.
pub const REPLAY_WINDOW_S_MIN: i64 = 2 * 3600;
/// The longest replay window an action may claim, in seconds (30 days): no provider we know of
/// keeps keys longer, and a longer claim would only make a wrong one more dangerous.
pub const REPLAY_WINDOW_S_MAX: i64 = 30 * 24 * 3600;
/// The longest key template, in bytes; the rendered key must fit the 255 bytes most providers
/// allow for an idempotency key.
pub const KEY_TEMPLATE_LEN_MAX: usize = 128;
/// The longest header name (idempotency or credential header), in bytes.
pub const HEADER_NAME_LEN_MAX: usize = 64;
/// The longest credential prefix (`Bearer `), in bytes.
pub const CREDENTIAL_PREFIX_LEN_MAX: usize = 32;
/// The most match rules one lookup may declare.
pub const MATCH_RULES_MAX: usize = 10;

/// The placeholder of the effect id in the key template; it must appear, so that each effect
/// has its own key.
pub const EFFECT_PLACEHOLDER: &str = "{{effectId}}";
/// The placeholder of the provider key in the lookup URL and in match rules.
pub const KEY_PLACEHOLDER: &str = "{{key}}";

const FIELDS: [&str; 11] = [
    "url",
    "method",
    "body",
    "idempotencyHeader",
    "keyTemplate",
    "credentialHeader",
    "credentialPrefix",
    "lookup",
    "referencePath",
    "replayWindowSeconds",
    "impact",
];
/// Headers the HTTP client sets itself from the URL and the body; a config may not name them.
const RESERVED_HEADERS: [&str; 5] = [
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
];
const LOOKUP_FIELDS: [&str; 3] = ["url", "absentStatus", "match"];
const METHODS: [&str; 3] = ["POST", "PUT", "PATCH"];

/// One rule on the provider's record: the value at `path` (dotted) equals `equals`, where
/// `"{{key}}"` stands for the provider key and `"{{input.x}}"` for an input value.
#[derive(Debug, Clone, PartialEq)]
pub struct MatchRule {
    pub path: String,
    pub equals: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Lookup {
    /// May hold `{{key}}` and `{{input.x}}`, each percent-encoded when rendered.
    pub url: String,
    /// The status that proves the provider has no write under the key.
    pub absent_status: u16,
    pub rules: Vec<MatchRule>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub url: String,
    pub method: String,
    /// The JSON body template; `None` sends the input as it is.
    pub body: Option<Value>,
    pub idempotency_header: String,
    pub key_template: String,
    pub credential_header: String,
    pub credential_prefix: String,
    pub lookup: Lookup,
    pub reference_path: Option<String>,
    pub replay_window_s: i64,
    pub impact: Option<ImpactDeclaration>,
}

fn field(name: &str) -> String {
    format!("adapter.config.{name}")
}

fn refuse(name: &str, message: impl Into<String>) -> FieldError {
    FieldError::new(field(name), message)
}

fn text<'a>(map: &'a Map<String, Value>, name: &str) -> Result<Option<&'a str>, FieldError> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(refuse(name, "must be a string")),
    }
}

/// An HTTP token (RFC 9110 `tchar`), as a header name must be.
fn header_name(map: &Map<String, Value>, name: &str) -> Result<Option<String>, FieldError> {
    let Some(value) = text(map, name)? else {
        return Ok(None);
    };
    let token = !value.is_empty()
        && value.len() <= HEADER_NAME_LEN_MAX
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !token {
        return Err(refuse(
            name,
            format!("must be an HTTP header name of 1-{HEADER_NAME_LEN_MAX} bytes"),
        ));
    }
    if RESERVED_HEADERS
        .iter()
        .any(|r| r.eq_ignore_ascii_case(value))
    {
        return Err(refuse(
            name,
            format!("may not be {value}: the request sets it from its URL and body"),
        ));
    }
    Ok(Some(value.to_string()))
}

/// The scheme, host and port of an absolute URL whose host holds no placeholder.
fn origin(url: &str, name: &str, allow_http: bool) -> Result<String, FieldError> {
    let secure = url.starts_with("https://") || (allow_http && url.starts_with("http://"));
    let authority = url.split("://").nth(1).unwrap_or("").split('/').next();
    let authority = authority.unwrap_or("");
    if !secure || authority.is_empty() || authority.contains("{{") {
        return Err(refuse(name, "must be an https URL with a fixed host"));
    }
    let scheme = url.split("://").next().unwrap_or("");
    Ok(format!("{scheme}://{}", authority.to_ascii_lowercase()))
}

/// Checks a template's placeholders: input values only (the credential goes in its header).
fn placeholders(text: &str, name: &str, extra: Option<&str>) -> Result<(), FieldError> {
    let rest = extra.map_or(text.to_string(), |p| text.replace(p, ""));
    check_placeholders(&rest).map_err(|e| refuse(name, e.to_string()))?;
    if rest.contains("{{secret:") {
        return Err(refuse(
            name,
            "may not hold a secret; the credential goes in the credential header",
        ));
    }
    Ok(())
}

fn body_placeholders(node: &Value) -> Result<(), FieldError> {
    match node {
        Value::String(s) => placeholders(s, "body", None),
        Value::Array(items) => items.iter().try_for_each(body_placeholders),
        Value::Object(map) => map.values().try_for_each(body_placeholders),
        _ => Ok(()),
    }
}

fn lookup(
    value: Option<&Value>,
    write_origin: &str,
    allow_http: bool,
) -> Result<Lookup, FieldError> {
    let Some(Value::Object(map)) = value else {
        return Err(refuse(
            "lookup",
            "is required: an object with the url that finds a write by its key",
        ));
    };
    if let Some(unknown) = map.keys().find(|k| !LOOKUP_FIELDS.contains(&k.as_str())) {
        return Err(refuse(
            &format!("lookup.{unknown}"),
            "is not a lookup field",
        ));
    }
    let url = text(map, "url")?.ok_or_else(|| refuse("lookup.url", "is required"))?;
    if origin(url, "lookup.url", allow_http)? != write_origin {
        return Err(refuse(
            "lookup.url",
            "must call the same scheme, host and port as url",
        ));
    }
    placeholders(url, "lookup.url", Some(KEY_PLACEHOLDER))?;
    let absent_status = match map.get("absentStatus") {
        None | Some(Value::Null) => 404,
        Some(v) => v
            .as_u64()
            .filter(|s| (400..500).contains(s))
            .ok_or_else(|| refuse("lookup.absentStatus", "must be a 4xx status"))?
            as u16,
    };
    let mut rules = Vec::new();
    if let Some(list) = map.get("match").filter(|v| !v.is_null()) {
        let list = list
            .as_array()
            .ok_or_else(|| refuse("lookup.match", "must be a list"))?;
        if list.len() > MATCH_RULES_MAX {
            return Err(refuse(
                "lookup.match",
                format!("holds at most {MATCH_RULES_MAX} rules"),
            ));
        }
        for (i, rule) in list.iter().enumerate() {
            let path = rule
                .get("path")
                .and_then(Value::as_str)
                .filter(|p| !p.is_empty())
                .ok_or_else(|| refuse(&format!("lookup.match.{i}.path"), "is required"))?;
            let equals = rule
                .get("equals")
                .cloned()
                .ok_or_else(|| refuse(&format!("lookup.match.{i}.equals"), "is required"))?;
            rules.push(MatchRule {
                path: path.to_string(),
                equals,
            });
        }
    }
    let names_key = url.contains(KEY_PLACEHOLDER)
        || rules
            .iter()
            .any(|r| r.equals.as_str() == Some(KEY_PLACEHOLDER));
    if !names_key {
        return Err(refuse(
            "lookup",
            "must find the write by its key: {{key}} in lookup.url or a match rule equal to {{key}}",
        ));
    }
    Ok(Lookup {
        url: url.to_string(),
        absent_status,
        rules,
    })
}

fn key_template(map: &Map<String, Value>) -> Result<String, FieldError> {
    let template = text(map, "keyTemplate")?.unwrap_or("steward-{{effectId}}");
    let rest = template.replace(EFFECT_PLACEHOLDER, "");
    let printable = template.bytes().all(|b| b.is_ascii_graphic());
    if !template.contains(EFFECT_PLACEHOLDER)
        || rest.contains("{{")
        || !printable
        || template.len() > KEY_TEMPLATE_LEN_MAX
    {
        return Err(refuse(
            "keyTemplate",
            format!(
                "must hold {EFFECT_PLACEHOLDER}, no other placeholder, and at most \
                 {KEY_TEMPLATE_LEN_MAX} printable ASCII characters without spaces"
            ),
        ));
    }
    Ok(template.to_string())
}

fn replay_window_s(map: &Map<String, Value>) -> Result<i64, FieldError> {
    map.get("replayWindowSeconds")
        .and_then(Value::as_i64)
        .filter(|s| (REPLAY_WINDOW_S_MIN..=REPLAY_WINDOW_S_MAX).contains(s))
        .ok_or_else(|| {
            refuse(
                "replayWindowSeconds",
                format!(
                    "is required: how long the provider keeps an idempotency key, \
                     {REPLAY_WINDOW_S_MIN} to {REPLAY_WINDOW_S_MAX} seconds"
                ),
            )
        })
}

impl Config {
    /// Parses `config`; the error names the field. `allow_http`: plain http URLs are accepted
    /// (local fixtures); at use, outbound safety decides again.
    pub fn parse(config: &Value, allow_http: bool) -> Result<Config, FieldError> {
        let map = config
            .as_object()
            .ok_or_else(|| FieldError::new("adapter.config", "must be an object"))?;
        if let Some(unknown) = map.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(refuse(unknown, "is not an http.idempotent field"));
        }
        let url = text(map, "url")?.ok_or_else(|| refuse("url", "is required"))?;
        let write_origin = origin(url, "url", allow_http)?;
        placeholders(url, "url", None)?;
        let method = text(map, "method")?.unwrap_or("POST").to_ascii_uppercase();
        if !METHODS.contains(&method.as_str()) {
            return Err(refuse(
                "method",
                format!("must be one of {}", METHODS.join(", ")),
            ));
        }
        let body = map.get("body").filter(|b| !b.is_null()).cloned();
        if let Some(body) = &body {
            body_placeholders(body)?;
        }
        let idempotency_header = header_name(map, "idempotencyHeader")?.ok_or_else(|| {
            refuse(
                "idempotencyHeader",
                "is required: the header the provider deduplicates requests by",
            )
        })?;
        let credential_header =
            header_name(map, "credentialHeader")?.unwrap_or_else(|| "Authorization".into());
        if credential_header.eq_ignore_ascii_case(&idempotency_header) {
            return Err(refuse(
                "credentialHeader",
                "must differ from idempotencyHeader",
            ));
        }
        let credential_prefix = text(map, "credentialPrefix")?.unwrap_or("Bearer ");
        if credential_prefix.len() > CREDENTIAL_PREFIX_LEN_MAX
            || !credential_prefix
                .bytes()
                .all(|b| b == b' ' || b.is_ascii_graphic())
        {
            return Err(refuse(
                "credentialPrefix",
                format!("must be at most {CREDENTIAL_PREFIX_LEN_MAX} printable ASCII characters"),
            ));
        }
        let reference_path = text(map, "referencePath")?.map(str::to_string);
        if reference_path.as_deref() == Some("") {
            return Err(refuse("referencePath", "must not be empty"));
        }
        let impact =
            match map.get("impact").filter(|v| !v.is_null()) {
                None => None,
                Some(v) => Some(ImpactDeclaration::parse(v).map_err(|e| {
                    FieldError::new(format!("adapter.config.{}", e.field), e.message)
                })?),
            };
        Ok(Config {
            url: url.to_string(),
            method,
            body,
            idempotency_header,
            key_template: key_template(map)?,
            credential_header,
            credential_prefix: credential_prefix.to_string(),
            lookup: lookup(map.get("lookup"), &write_origin, allow_http)?,
            reference_path,
            replay_window_s: replay_window_s(map)?,
            impact,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn minimal() -> Value {
        json!({
            "url": "https://provider.example/writes",
            "idempotencyHeader": "X-Idempotency-Key",
            "lookup": {"url": "https://provider.example/writes/{{key}}"},
            "replayWindowSeconds": 86400
        })
    }

    #[test]
    fn a_minimal_config_takes_the_defaults() {
        let config = Config::parse(&minimal(), false).unwrap();
        assert_eq!(config.method, "POST");
        assert_eq!(config.key_template, "steward-{{effectId}}");
        assert_eq!(config.credential_header, "Authorization");
        assert_eq!(config.credential_prefix, "Bearer ");
        assert_eq!(config.lookup.absent_status, 404);
        assert!(config.body.is_none() && config.impact.is_none());
    }

    #[test]
    fn each_refusal_names_its_field() {
        let cases: [(&str, Value, &str); 11] = [
            (
                "idempotencyHeader",
                json!("Host"),
                "adapter.config.idempotencyHeader",
            ),
            (
                "url",
                json!("http://provider.example/writes"),
                "adapter.config.url",
            ),
            (
                "url",
                json!("https://{{input.host}}/writes"),
                "adapter.config.url",
            ),
            (
                "idempotencyHeader",
                json!("X Key"),
                "adapter.config.idempotencyHeader",
            ),
            (
                "keyTemplate",
                json!("fixed-key"),
                "adapter.config.keyTemplate",
            ),
            (
                "keyTemplate",
                json!("{{effectId}}-{{input.a}}"),
                "adapter.config.keyTemplate",
            ),
            (
                "replayWindowSeconds",
                json!(60),
                "adapter.config.replayWindowSeconds",
            ),
            (
                "replayWindowSeconds",
                json!(REPLAY_WINDOW_S_MAX + 1),
                "adapter.config.replayWindowSeconds",
            ),
            (
                "lookup",
                json!({"url": "https://other.example/w/{{key}}"}),
                "adapter.config.lookup.url",
            ),
            (
                "lookup",
                json!({"url": "https://provider.example/writes"}),
                "adapter.config.lookup",
            ),
            (
                "body",
                json!({"token": "{{secret:KEY}}"}),
                "adapter.config.body",
            ),
        ];
        for (name, value, expected) in cases {
            let mut config = minimal();
            config[name] = value.clone();
            let refused = Config::parse(&config, false).expect_err(&format!("{name}: {value}"));
            assert_eq!(refused.field, expected, "{name}: {value}: {refused}");
        }
        let mut config = minimal();
        config["retries"] = json!(3);
        assert_eq!(
            Config::parse(&config, false).unwrap_err().field,
            "adapter.config.retries"
        );
        let mut config = minimal();
        config.as_object_mut().unwrap().remove("idempotencyHeader");
        assert_eq!(
            Config::parse(&config, false).unwrap_err().field,
            "adapter.config.idempotencyHeader"
        );
    }

    #[test]
    fn plain_http_is_accepted_only_where_the_server_allows_it() {
        let mut config = minimal();
        config["url"] = json!("http://127.0.0.1:9/generic/writes");
        config["lookup"] = json!({"url": "http://127.0.0.1:9/generic/writes/{{key}}"});
        assert!(Config::parse(&config, false).is_err());
        assert!(Config::parse(&config, true).is_ok());
    }

    #[test]
    fn a_key_rule_may_name_the_write_instead_of_the_url() {
        let mut config = minimal();
        config["lookup"] = json!({
            "url": "https://provider.example/writes?ref={{input.order}}",
            "match": [{"path": "key", "equals": "{{key}}"}, {"path": "status", "equals": "succeeded"}]
        });
        let parsed = Config::parse(&config, false).unwrap();
        assert_eq!(parsed.lookup.rules.len(), 2);
    }
}
