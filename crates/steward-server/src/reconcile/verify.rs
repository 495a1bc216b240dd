//! `verify` read-back for governed template actions: a GET on the action's own host whose answer
//! must have the declared status and match the declared values.

use crate::dispatch::prepared::open_secret;
use crate::state::AppState;
use serde_json::Value;
use std::collections::BTreeMap;
use steward_core::{lookup, percent_encode, redact, Placement};
use steward_store::InvocationRecord;

/// The most checks one `verify` may declare.
pub const VERIFY_MATCH_MAX: usize = 10;

/// The declared read-back.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifySpec {
    pub url: String,
    pub status: u16,
    pub checks: Vec<Check>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub path: String,
    pub equals: Value,
    pub absent: bool,
}

/// Parses a `verify` declaration; the error names the field.
/// Plain `http` is accepted only when the server allows insecure destinations (local fixtures).
pub fn parse(verify: &Value, allow_http: bool) -> Result<VerifySpec, (String, String)> {
    let field = |f: &str| format!("verify.{f}");
    let url = verify
        .get("url")
        .and_then(Value::as_str)
        .ok_or((field("url"), "is required".into()))?;
    if !(url.starts_with("https://") || (allow_http && url.starts_with("http://"))) {
        return Err((field("url"), "must be an https URL".into()));
    }
    let status = verify
        .get("status")
        .and_then(Value::as_u64)
        .filter(|s| (100..600).contains(s))
        .ok_or((field("status"), "must be an HTTP status code".into()))? as u16;
    let mut checks = Vec::new();
    if let Some(list) = verify.get("match") {
        let list = list
            .as_array()
            .ok_or((field("match"), "must be a list".into()))?;
        if list.len() > VERIFY_MATCH_MAX {
            return Err((
                field("match"),
                format!("holds at most {VERIFY_MATCH_MAX} checks"),
            ));
        }
        for (i, item) in list.iter().enumerate() {
            let path = item
                .get("path")
                .and_then(Value::as_str)
                .filter(|p| !p.is_empty());
            let path = path.ok_or((format!("verify.match.{i}.path"), "is required".into()))?;
            let equals = item
                .get("equals")
                .cloned()
                .ok_or((format!("verify.match.{i}.equals"), "is required".into()))?;
            let absent = item.get("absent").and_then(Value::as_bool).unwrap_or(false);
            checks.push(Check {
                path: path.to_string(),
                equals,
                absent,
            });
        }
    }
    Ok(VerifySpec {
        url: url.to_string(),
        status,
        checks,
    })
}

/// Every value at a dotted path; a `*` segment stands for any item of a list.
fn values_at<'a>(root: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut current = vec![root];
    for segment in path.split('.') {
        current = current
            .into_iter()
            .flat_map(|node| -> Vec<&'a Value> {
                match (segment, node) {
                    ("*", Value::Array(items)) => items.iter().collect(),
                    (_, Value::Object(map)) => map.get(segment).into_iter().collect(),
                    (_, Value::Array(items)) => segment
                        .parse::<usize>()
                        .ok()
                        .and_then(|i| items.get(i))
                        .into_iter()
                        .collect(),
                    _ => Vec::new(),
                }
            })
            .collect();
    }
    current
}

/// Resolves `equals`: a literal, or exactly one `{{input.x}}` / `{{response.x}}`.
fn expected(equals: &Value, input: &Value, response: &Value) -> Option<Value> {
    let Some(text) = equals.as_str() else {
        return Some(equals.clone());
    };
    let inner = text
        .strip_prefix("{{")
        .and_then(|t| t.strip_suffix("}}"))
        .map(str::trim);
    match inner {
        Some(p) if p.starts_with("input.") => lookup(input, &p["input.".len()..]).cloned(),
        Some(p) if p.starts_with("response.") => lookup(response, &p["response.".len()..]).cloned(),
        _ => Some(equals.clone()),
    }
}

/// Checks a read-back body against the declared matches.
pub fn matches(
    spec: &VerifySpec,
    body: &Value,
    input: &Value,
    response: &Value,
) -> Result<(), String> {
    for check in &spec.checks {
        let want = expected(&check.equals, input, response)
            .ok_or_else(|| format!("{} has nothing to compare with", check.path))?;
        let found = values_at(body, &check.path).into_iter().any(|v| *v == want);
        match (check.absent, found) {
            (false, false) => return Err(format!("{} does not equal {want}", check.path)),
            (true, true) => return Err(format!("{} still holds {want}", check.path)),
            _ => {}
        }
    }
    Ok(())
}

/// Renders the read-back URL: `{{input.x}}`, `{{response.x}}` and `{{secret:NAME}}`.
fn render_url(
    template: &str,
    input: &Value,
    response: &Value,
    secrets: &BTreeMap<String, String>,
) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let close = after.find("}}").ok_or("unclosed placeholder")?;
        let inner = after[..close].trim();
        let value = if let Some(name) = inner.strip_prefix("secret:") {
            secrets
                .get(name.trim())
                .cloned()
                .ok_or(format!("secret {name} unavailable"))?
        } else if let Some(p) = inner.strip_prefix("input.") {
            lookup(input, p)
                .map(scalar)
                .ok_or(format!("input.{p} missing"))?
        } else if let Some(p) = inner.strip_prefix("response.") {
            lookup(response, p)
                .map(scalar)
                .ok_or(format!("response.{p} missing"))?
        } else {
            return Err(format!("unknown placeholder {inner}"));
        };
        out.push_str(&percent_encode(&value));
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

fn scalar(v: &Value) -> String {
    v.as_str()
        .map(str::to_string)
        .unwrap_or_else(|| v.to_string())
}

fn host_of(url: &str) -> Option<String> {
    url::Url::parse(url).ok()?.host_str().map(str::to_string)
}

/// Runs the read-back. `Ok(())` is a match; `Err` says why not.
pub async fn read_back(
    state: &AppState,
    inv: &InvocationRecord,
    spec: &VerifySpec,
    action_url: &str,
    response: &Value,
) -> Result<(), String> {
    let mut secrets = BTreeMap::new();
    let mut values = Vec::new();
    let mut rest = spec.url.as_str();
    while let Some(i) = rest.find("{{secret:") {
        let after = &rest[i + "{{secret:".len()..];
        let name = after
            .split("}}")
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        let opened = open_secret(state, &inv.env_id, &name)
            .await
            .map_err(|b| b.message)?;
        opened.allow(Placement::Url).map_err(|b| b.message)?;
        values.push(opened.value.clone());
        secrets.insert(name, opened.value);
        rest = after;
    }
    let url = render_url(&spec.url, inv.dispatch_input(), response, &secrets)
        .map_err(|e| redact(&e, &values))?;
    let (host, own) = (host_of(&url), host_of(action_url));
    if host.is_none() || host != own {
        return Err("the read-back must call the action's own host".into());
    }
    let host = state
        .outbound
        .check(&url)
        .await
        .map_err(|e| e.to_string())?;
    for name in secrets.keys() {
        let opened = open_secret(state, &inv.env_id, name)
            .await
            .map_err(|b| b.message)?;
        opened.allow_host(&host).map_err(|b| b.message)?;
    }
    let request = state
        .http
        .get(&url)
        .timeout(state.dispatch_timeout)
        .build()
        .map_err(|e| redact(&format!("read-back failed: {}", e.without_url()), &values))?;
    let answer = state.transport.execute(request).await;
    let answer =
        answer.map_err(|f| redact(&format!("read-back failed: {}", f.summary), &values))?;
    let status = answer.status;
    if status != spec.status {
        return Err(format!(
            "read-back answered {status}, expected {}",
            spec.status
        ));
    }
    let body: Value = answer
        .body
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    // What did not match may quote the provider's answer.
    matches(spec, &body, inv.dispatch_input(), response).map_err(|e| redact(&e, &values))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn matches_paths_stars_templates_and_absence() {
        let spec = parse(
            &json!({
                "url": "https://api.example.com/x/{{response.id}}", "status": 200,
                "match": [
                    {"path": "data.status", "equals": "sent"},
                    {"path": "labels.*.name", "equals": "{{input.label}}"},
                    {"path": "labels.*.name", "equals": "removed", "absent": true}
                ]
            }),
            false,
        )
        .unwrap();
        let body = json!({"data": {"status": "sent"}, "labels": [{"name": "a"}, {"name": "b"}]});
        assert!(matches(&spec, &body, &json!({"label": "b"}), &json!({})).is_ok());
        assert!(matches(&spec, &body, &json!({"label": "c"}), &json!({})).is_err());
        let removed =
            json!({"data": {"status": "sent"}, "labels": [{"name": "b"}, {"name": "removed"}]});
        assert!(matches(&spec, &removed, &json!({"label": "b"}), &json!({})).is_err());
    }

    #[test]
    fn parse_names_the_field() {
        assert_eq!(
            parse(&json!({"status": 200}), false).unwrap_err().0,
            "verify.url"
        );
        assert_eq!(
            parse(&json!({"url": "http://x", "status": 200}), false)
                .unwrap_err()
                .0,
            "verify.url"
        );
        assert_eq!(
            parse(
                &json!({"url": "https://x", "status": 200, "match": [{"equals": 1}]}),
                false
            )
            .unwrap_err()
            .0,
            "verify.match.0.path"
        );
    }

    #[test]
    fn url_rendering_encodes_values() {
        let url = render_url(
            "https://h/{{input.a}}/{{response.id}}",
            &json!({"a": "x y"}),
            &json!({"id": 7}),
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(url, "https://h/x%20y/7");
    }
}
