//! One operation of the document turned into a template action's definition, or skipped with
//! the reason it cannot be expressed faithfully.
//!
//! The action's input is an object: each parameter the call carries is a property named as the
//! parameter, and a JSON body is the property `body`, sent as it is (`bodyTemplate` is
//! `"{{input.body}}"`, which keeps the input's JSON). A template sends every value it names, so
//! only required query and header parameters are carried; an optional one is left out with a
//! warning (the call without it is still the documented call).

use super::document::Document;
use super::schema::{self, Converted, Refusal};
use super::Auth;
use crate::error::{ApiError, ApiResult};
use axum::http::Method;
use oas3::spec::{Operation, Parameter, ParameterIn, ParameterStyle, PathItem, SecurityScheme};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// The methods a template action calls.
const METHODS: [Method; 5] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
];
/// Header parameters OpenAPI says to ignore (the call sets them itself).
const IGNORED_HEADERS: [&str; 3] = ["accept", "content-type", "authorization"];
/// The longest description kept from an operation's summary, in characters.
const DESCRIPTION_CHARS_MAX: usize = 1000;

/// What every operation of one import shares.
pub(super) struct Settings<'a> {
    /// The URL paths are appended to, without a trailing `/`.
    pub base: &'a str,
    pub auth: Option<&'a Auth>,
    pub requires_approval: bool,
    pub governed: bool,
}

/// One operation of the document.
pub(super) struct Op<'a> {
    pub path: &'a str,
    pub method: Method,
    pub item: &'a PathItem,
    pub operation: &'a Operation,
}

impl Op<'_> {
    /// Where the operation is in the document, as a field name (`spec.paths./pets.post`).
    pub fn field(&self) -> String {
        format!(
            "{}.paths.{}.{}",
            super::SPEC_FIELD,
            self.path,
            self.method.as_str().to_ascii_lowercase()
        )
    }

    fn raw<'d>(&self, doc: &'d Document) -> &'d Value {
        &doc.raw["paths"][self.path][self.method.as_str().to_ascii_lowercase()]
    }
}

/// An operation that becomes an action: its definition (without `name`) and its warnings.
pub(super) struct Mapped {
    pub definition: Map<String, Value>,
    pub warnings: Vec<String>,
}

/// The operation as an action, `Ok(Err(reason))` when it is skipped, or a bound's error.
pub(super) fn map(
    doc: &Document,
    settings: &Settings,
    op: &Op,
) -> ApiResult<Result<Mapped, String>> {
    match build(doc, settings, op) {
        Ok(mapped) => Ok(Ok(mapped)),
        Err(Refusal::Skip(reason)) => Ok(Err(reason)),
        Err(Refusal::Bound(message)) => Err(ApiError::validation(op.field(), message)),
    }
}

fn skip<T>(reason: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal::Skip(reason.into()))
}

/// A parameter's value becomes `{{input.NAME}}`: the name must be a plain input path segment
/// that needs no encoding in a URL or a header.
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

struct Input {
    properties: Map<String, Value>,
    required: Vec<String>,
    warnings: Vec<String>,
}

impl Input {
    fn add(&mut self, name: &str, converted: Converted) -> Result<(), Refusal> {
        if self.properties.contains_key(name) {
            return skip(format!("two of its inputs are named {name}"));
        }
        self.properties.insert(name.to_string(), converted.schema);
        self.required.push(name.to_string());
        self.warnings.extend(converted.warnings);
        Ok(())
    }
}

/// The input schema of one parameter a template can carry, or `None` for one it leaves out
/// (with a warning, or silently for a header Steward sets itself); a parameter no template can
/// send refuses the operation.
fn parameter_schema(
    doc: &Document,
    settings: &Settings,
    parameter: &Parameter,
    raw: &Value,
    warnings: &mut Vec<String>,
) -> Result<Option<Converted>, Refusal> {
    let name = parameter.name.as_str();
    let required = parameter.required == Some(true) || parameter.location == ParameterIn::Path;
    let location = match parameter.location {
        ParameterIn::Path => "path",
        ParameterIn::Query => "query",
        ParameterIn::Header => "header",
        ParameterIn::Cookie => "cookie",
    };
    if parameter.location == ParameterIn::Header
        && (IGNORED_HEADERS.contains(&name.to_ascii_lowercase().as_str())
            || settings
                .auth
                .is_some_and(|a| a.header_name.eq_ignore_ascii_case(name)))
    {
        return Ok(None);
    }
    if !required {
        warnings.push(format!(
            "optional {location} parameter {name} left out: a template sends every value it names"
        ));
        return Ok(None);
    }
    if parameter.location == ParameterIn::Cookie {
        return skip(format!(
            "sends the cookie {name}, which a template cannot carry"
        ));
    }
    if parameter.content.is_some() {
        return skip(format!(
            "describes the {location} parameter {name} by content, a serialization a template cannot build"
        ));
    }
    if !plain_name(name) {
        return skip(format!(
            "the {location} parameter {name} cannot be an input name (A-Z a-z 0-9 - _)"
        ));
    }
    let style_ok = match parameter.location {
        ParameterIn::Query => matches!(parameter.style, None | Some(ParameterStyle::Form)),
        _ => matches!(parameter.style, None | Some(ParameterStyle::Simple)),
    };
    if !style_ok {
        return skip(format!(
            "the {location} parameter {name} has a style a template cannot build"
        ));
    }
    let mut converted = match raw.get("schema") {
        Some(s) => schema::convert(&doc.raw, s, name)?,
        None => return skip(format!("the {location} parameter {name} has no schema")),
    };
    if !is_scalar(&converted.schema) {
        return skip(format!(
            "the {location} parameter {name} is not a single string, number or boolean"
        ));
    }
    if let (Some(description), Value::Object(s)) = (&parameter.description, &mut converted.schema) {
        s.entry("description").or_insert_with(|| json!(description));
    }
    Ok(Some(converted))
}

/// The template action's definition, as `POST /actions` takes it.
fn definition(
    settings: &Settings,
    op: &Op,
    url: &str,
    headers: &BTreeMap<String, String>,
    body: bool,
    input: &Input,
) -> Map<String, Value> {
    let mut definition = Map::new();
    if let Some(text) = op
        .operation
        .summary
        .as_ref()
        .or(op.operation.description.as_ref())
    {
        let text: String = text.trim().chars().take(DESCRIPTION_CHARS_MAX).collect();
        if !text.is_empty() {
            definition.insert("description".into(), json!(text));
        }
    }
    definition.insert("method".into(), json!(op.method.as_str()));
    definition.insert("urlTemplate".into(), json!(url));
    if !headers.is_empty() {
        definition.insert("headers".into(), json!(headers));
    }
    if body {
        definition.insert("bodyTemplate".into(), json!("{{input.body}}"));
    }
    definition.insert(
        "inputSchema".into(),
        json!({"type": "object", "properties": input.properties, "required": input.required,
               "additionalProperties": false}),
    );
    definition.insert("requiresApproval".into(), json!(settings.requires_approval));
    if settings.governed && op.method != Method::GET {
        definition.insert(
            "impact".into(),
            json!({"dimension": "resource_mutations", "amount": "1", "bound": "exact"}),
        );
        definition.insert("governed".into(), json!(true));
    }
    definition
}

fn build(doc: &Document, settings: &Settings, op: &Op) -> Result<Mapped, Refusal> {
    if !METHODS.contains(&op.method) {
        return skip(format!(
            "{} is not a method a template action calls (GET, POST, PUT, PATCH, DELETE)",
            op.method
        ));
    }
    own_servers(settings, op)?;
    let mut input = Input {
        properties: Map::new(),
        required: Vec::new(),
        warnings: Vec::new(),
    };
    let mut headers = BTreeMap::new();
    if let Some(header) = security(doc, settings, op, &mut input.warnings)? {
        headers.insert(header.0, header.1);
    }
    let mut url = format!("{}{}", settings.base, op.path);
    let mut query = Vec::new();
    for (parameter, raw) in parameters(doc, op)? {
        let name = parameter.name.as_str();
        let Some(converted) =
            parameter_schema(doc, settings, &parameter, raw, &mut input.warnings)?
        else {
            continue;
        };
        let placeholder = format!("{{{{input.{name}}}}}");
        match parameter.location {
            ParameterIn::Path => {
                let segment = format!("{{{name}}}");
                if !url.contains(&segment) {
                    return skip(format!("the path parameter {name} is not in the path"));
                }
                url = url.replace(&segment, &placeholder);
            }
            ParameterIn::Query => query.push(format!("{name}={placeholder}")),
            _ => {
                headers.insert(name.to_string(), placeholder);
            }
        }
        input.add(name, converted)?;
    }
    for segment in op.path.split('{').skip(1) {
        let name = segment.split('}').next().unwrap_or_default();
        if !input.properties.contains_key(name) {
            return skip(format!(
                "its path names the parameter {name}, which it does not declare"
            ));
        }
    }
    if !query.is_empty() {
        url = format!("{url}?{}", query.join("&"));
    }
    let body = body(doc, op, &mut input)?;
    let definition = definition(settings, op, &url, &headers, body, &input);
    Ok(Mapped {
        definition,
        warnings: input.warnings,
    })
}

fn is_scalar(schema: &Value) -> bool {
    let scalar = |t: &Value| {
        matches!(
            t.as_str(),
            Some("string" | "integer" | "number" | "boolean" | "null")
        )
    };
    match schema.get("type") {
        Some(Value::Array(types)) => types.iter().all(scalar),
        Some(t) => scalar(t) && t != "null",
        None => false,
    }
}

/// An operation served from its own servers is called there, not at the import's base URL.
fn own_servers(settings: &Settings, op: &Op) -> Result<(), Refusal> {
    let own = op.operation.servers.first().or(op.item.servers.first());
    match own.map(super::document::server_url) {
        Some(url) if url.trim_end_matches('/') != settings.base => skip(format!(
            "is served from its own server ({url}); import it with that baseUrl"
        )),
        _ => Ok(()),
    }
}

/// The path item's parameters with the operation's (which override the same name and place),
/// each with its JSON in the document.
fn parameters<'d>(doc: &'d Document, op: &Op) -> Result<Vec<(Parameter, &'d Value)>, Refusal> {
    let raw_item = &doc.raw["paths"][op.path]["parameters"];
    let raw_op = &op.raw(doc)["parameters"];
    let mut out: Vec<(Parameter, &Value)> = Vec::new();
    let sources = [
        (&op.item.parameters, raw_item),
        (&op.operation.parameters, raw_op),
    ];
    for (list, raw_list) in sources {
        for (i, parameter) in list.iter().enumerate() {
            let resolved = parameter
                .resolve(&doc.spec)
                .map_err(|e| Refusal::Skip(format!("a parameter does not resolve ({e})")))?;
            let mut raw = &raw_list[i];
            if let Some(reference) = raw.get("$ref").and_then(Value::as_str) {
                raw = schema::resolve(&doc.raw, reference)?;
            }
            out.retain(|(p, _)| !(p.name == resolved.name && p.location == resolved.location));
            out.push((resolved, raw));
        }
    }
    Ok(out)
}

/// The request body as the input's `body`; false when the operation takes none.
fn body(doc: &Document, op: &Op, input: &mut Input) -> Result<bool, Refusal> {
    let Some(request_body) = &op.operation.request_body else {
        return Ok(false);
    };
    let resolved = request_body
        .resolve(&doc.spec)
        .map_err(|e| Refusal::Skip(format!("its request body does not resolve ({e})")))?;
    let mut raw = &op.raw(doc)["requestBody"];
    if let Some(reference) = raw.get("$ref").and_then(Value::as_str) {
        raw = schema::resolve(&doc.raw, reference)?;
    }
    if resolved.content.is_empty() {
        return Ok(false);
    }
    let is_json = |media: &str| {
        let base = media
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        base == "application/json" || (base.starts_with("application/") && base.ends_with("+json"))
    };
    let Some(media) = resolved.content.keys().find(|m| is_json(m)) else {
        let media = resolved
            .content
            .keys()
            .next()
            .map(String::as_str)
            .unwrap_or("");
        let base = media
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        return skip(if base.starts_with("multipart/") {
            format!("takes a multipart body ({media}); a template sends JSON")
        } else if base == "application/x-www-form-urlencoded" {
            format!("takes a form-encoded body ({media}); a template sends JSON")
        } else {
            format!("takes a {media} body; a template sends JSON")
        });
    };
    for other in resolved.content.keys().filter(|m| *m != media) {
        input.warnings.push(format!(
            "the body may also be {other}; the action sends JSON"
        ));
    }
    let converted = match raw["content"][media.as_str()].get("schema") {
        Some(s) => schema::convert(&doc.raw, s, "body")?,
        None => Converted {
            schema: json!({}),
            warnings: vec!["the body has no schema: any JSON is sent".into()],
        },
    };
    if resolved.required != Some(true) {
        input
            .warnings
            .push("the body is optional in the spec; the action always sends one".into());
    }
    input.add("body", converted)?;
    Ok(true)
}

/// The credential header the operation gets from `auth`, if any. The operation is skipped
/// when its security can only be met in ways one header cannot carry.
fn security(
    doc: &Document,
    settings: &Settings,
    op: &Op,
    warnings: &mut Vec<String>,
) -> Result<Option<(String, String)>, Refusal> {
    let header = settings
        .auth
        .map(|a| (a.header_name.clone(), a.value_template.clone()));
    let (requirements, declared) = if op.raw(doc).get("security").is_some() {
        (&op.operation.security, true)
    } else {
        (&doc.spec.security, doc.raw.get("security").is_some())
    };
    if requirements.is_empty() {
        // `security: []` says the operation needs no credentials: none are sent.
        return Ok(if declared { None } else { header });
    }
    if requirements.iter().any(|r| r.0.is_empty()) {
        return Ok(header);
    }
    let schemes = doc.spec.components.as_ref().map(|c| &c.security_schemes);
    let mut carried = Vec::new();
    let mut refused = Vec::new();
    for requirement in requirements {
        let names: Vec<&String> = requirement.0.keys().collect();
        let scheme = match names.as_slice() {
            [one] => schemes
                .and_then(|s| s.get(*one))
                .and_then(|s| s.resolve(&doc.spec).ok()),
            _ => None,
        };
        let described = names
            .iter()
            .map(|n| n.as_str())
            .collect::<Vec<_>>()
            .join(" + ");
        match scheme {
            Some(SecurityScheme::ApiKey { name, location, .. }) if location == "header" => {
                carried.push((described, name))
            }
            Some(SecurityScheme::Http { .. })
            | Some(SecurityScheme::OAuth2 { .. })
            | Some(SecurityScheme::OpenIdConnect { .. }) => {
                carried.push((described, "Authorization".to_string()))
            }
            Some(SecurityScheme::ApiKey { location, .. }) => {
                refused.push(format!("{described}: an API key in the {location}"))
            }
            Some(SecurityScheme::MutualTls { .. }) => {
                refused.push(format!("{described}: mutual TLS"))
            }
            None if names.len() > 1 => {
                refused.push(format!("{described}: several credentials at once"))
            }
            None => refused.push(format!(
                "{described}: a scheme the document does not define"
            )),
        }
    }
    if carried.is_empty() {
        return skip(format!(
            "its security cannot be carried by one header ({})",
            refused.join("; ")
        ));
    }
    match settings.auth {
        None => warnings.push(format!(
            "needs credentials ({}); no auth was given, so none are sent",
            carried
                .iter()
                .map(|c| c.0.as_str())
                .collect::<Vec<_>>()
                .join(" or ")
        )),
        Some(auth)
            if !carried
                .iter()
                .any(|c| c.1.eq_ignore_ascii_case(&auth.header_name)) =>
        {
            warnings.push(format!(
                "the spec sends credentials in {}; auth sets {}",
                carried[0].1, auth.header_name
            ))
        }
        Some(_) => {}
    }
    Ok(header)
}
