//! Template rendering for template actions: `{{input.path}}` and `{{secret:NAME}}` in the URL,
//! headers and JSON body. Pure: secret values are handed in by the caller.

use crate::action::ActionDefinition;
use crate::secret::Placement;
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("the template reads `input.{path}`, which the input does not have")]
    MissingInput { path: String },
    #[error(
        "`{{{{{text}}}}}` is not a placeholder; use {{{{input.path}}}} or {{{{secret:NAME}}}}"
    )]
    BadPlaceholder { text: String },
    #[error("an opening `{{{{` has no closing `}}}}`")]
    Unclosed,
    #[error("secret `{name}` is not available")]
    MissingSecret { name: String },
}

/// One placeholder.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token<'a> {
    Text(&'a str),
    Input(&'a str),
    Secret(&'a str),
}

fn tokenize(text: &str) -> Result<Vec<Token<'_>>, TemplateError> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        if open > 0 {
            out.push(Token::Text(&rest[..open]));
        }
        let after = &rest[open + 2..];
        let close = after.find("}}").ok_or(TemplateError::Unclosed)?;
        let inner = after[..close].trim();
        if let Some(path) = inner.strip_prefix("input.").filter(|p| !p.is_empty()) {
            out.push(Token::Input(path));
        } else if let Some(name) = inner.strip_prefix("secret:").map(str::trim) {
            if !crate::secret::is_valid_secret_name(name) {
                return Err(TemplateError::BadPlaceholder {
                    text: inner.to_string(),
                });
            }
            out.push(Token::Secret(name));
        } else {
            return Err(TemplateError::BadPlaceholder {
                text: inner.to_string(),
            });
        }
        rest = &after[close + 2..];
    }
    if !rest.is_empty() {
        out.push(Token::Text(rest));
    }
    Ok(out)
}

/// Checks that every placeholder in `text` is well formed.
pub fn check_placeholders(text: &str) -> Result<(), TemplateError> {
    tokenize(text).map(|_| ())
}

/// Reads a dotted path (`a.b.0.c`) from the input.
pub fn lookup<'a>(input: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(input, |node, segment| match node {
        Value::Object(map) => map.get(segment),
        Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

struct Renderer<'a> {
    input: &'a Value,
    secrets: &'a BTreeMap<String, String>,
}

impl Renderer<'_> {
    fn string(&self, text: &str, encode: bool) -> Result<String, TemplateError> {
        let mut out = String::new();
        for token in tokenize(text)? {
            let piece = match token {
                Token::Text(t) => t.to_string(),
                Token::Input(path) => scalar_text(self.input_value(path)?),
                Token::Secret(name) => self.secret(name)?.to_string(),
            };
            match (encode, token) {
                (true, Token::Input(_) | Token::Secret(_)) => out.push_str(&percent_encode(&piece)),
                _ => out.push_str(&piece),
            }
        }
        Ok(out)
    }

    fn input_value(&self, path: &str) -> Result<&Value, TemplateError> {
        lookup(self.input, path).ok_or_else(|| TemplateError::MissingInput {
            path: path.to_string(),
        })
    }

    fn secret(&self, name: &str) -> Result<&str, TemplateError> {
        self.secrets
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| TemplateError::MissingSecret {
                name: name.to_string(),
            })
    }

    /// A string that is exactly one input placeholder keeps the input's JSON type.
    fn json(&self, node: &Value) -> Result<Value, TemplateError> {
        Ok(match node {
            Value::String(text) => match tokenize(text)?.as_slice() {
                [Token::Input(path)] => self.input_value(path)?.clone(),
                _ => Value::String(self.string(text, false)?),
            },
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|i| self.json(i))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| Ok((k.clone(), self.json(v)?)))
                    .collect::<Result<_, TemplateError>>()?,
            ),
            scalar => scalar.clone(),
        })
    }
}

/// A fully rendered outgoing request.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedRequest {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Value>,
}

/// Every secret a template action references, and where.
pub fn secret_references(
    def: &ActionDefinition,
) -> Result<Vec<(String, Placement)>, TemplateError> {
    let mut refs = Vec::new();
    let mut scan = |text: &str, placement: Placement| -> Result<(), TemplateError> {
        for token in tokenize(text)? {
            if let Token::Secret(name) = token {
                refs.push((name.to_string(), placement));
            }
        }
        Ok(())
    };
    if let Some(url) = &def.url_template {
        scan(url, Placement::Url)?;
    }
    for value in def.headers.iter().flat_map(|h| h.values()) {
        scan(value, Placement::Header)?;
    }
    if let Some(body) = &def.body_template {
        let mut strings = Vec::new();
        collect_strings(body, &mut strings);
        for s in strings {
            scan(s, Placement::Body)?;
        }
    }
    refs.sort();
    refs.dedup();
    Ok(refs)
}

fn collect_strings<'a>(node: &'a Value, out: &mut Vec<&'a str>) {
    match node {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|i| collect_strings(i, out)),
        Value::Object(map) => map.values().for_each(|v| collect_strings(v, out)),
        _ => {}
    }
}

/// Renders a template action's request for `input` with the given secret values.
pub fn render(
    def: &ActionDefinition,
    input: &Value,
    secrets: &BTreeMap<String, String>,
) -> Result<RenderedRequest, TemplateError> {
    let r = Renderer { input, secrets };
    let url = r.string(def.url_template.as_deref().unwrap_or_default(), true)?;
    let headers = def
        .headers
        .iter()
        .flatten()
        .map(|(k, v)| Ok((k.clone(), r.string(v, false)?)))
        .collect::<Result<Vec<_>, TemplateError>>()?;
    let body = def.body_template.as_ref().map(|b| r.json(b)).transpose()?;
    Ok(RenderedRequest {
        method: def.method().to_string(),
        url,
        headers,
        body,
    })
}

/// Checks that `input` has everything the template reads, without any secret value.
pub fn check_input(def: &ActionDefinition, input: &Value) -> Result<(), TemplateError> {
    let placeholders: BTreeMap<String, String> = secret_references(def)?
        .into_iter()
        .map(|(name, _)| (name, String::new()))
        .collect();
    render(def, input, &placeholders).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(v: Value) -> ActionDefinition {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn renders_url_headers_and_typed_body() {
        let d = def(json!({
            "name": "t", "method": "POST",
            "urlTemplate": "https://api.example.com/orders/{{input.order.id}}/refund?q={{ input.q }}",
            "headers": {"Authorization": "Bearer {{secret:API_KEY}}"},
            "bodyTemplate": {"amount": "{{input.amount}}", "note": "order {{input.order.id}}"}
        }));
        let input = json!({"order": {"id": "o 1"}, "q": "a&b", "amount": 1250});
        let secrets = BTreeMap::from([("API_KEY".to_string(), "s3cr3t".to_string())]);
        let r = render(&d, &input, &secrets).unwrap();
        assert_eq!(r.url, "https://api.example.com/orders/o%201/refund?q=a%26b");
        assert_eq!(
            r.headers,
            vec![("Authorization".into(), "Bearer s3cr3t".into())]
        );
        assert_eq!(r.body, Some(json!({"amount": 1250, "note": "order o 1"})));
        assert_eq!(
            secret_references(&d).unwrap(),
            vec![("API_KEY".to_string(), Placement::Header)]
        );
    }

    #[test]
    fn missing_input_names_the_path() {
        let d = def(json!({"name": "t", "urlTemplate": "https://a.example/{{input.id}}"}));
        assert_eq!(
            check_input(&d, &json!({})),
            Err(TemplateError::MissingInput { path: "id".into() })
        );
    }

    #[test]
    fn malformed_placeholders_are_refused() {
        assert!(check_placeholders("https://x/{{nope}}").is_err());
        assert!(check_placeholders("https://x/{{input.a").is_err());
        assert!(check_placeholders("https://x/{{secret:lower}}").is_err());
    }
}
