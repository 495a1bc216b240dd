//! The whole import, before anything is written: which operations are selected (`only`), what
//! each becomes (`operation.rs`) or why it is skipped, the action names, and the read-backs
//! proposed for governed writes.

use super::document::Document;
use super::operation::{self, Op, Settings};
use super::{ONLY_FIELD, OPERATIONS_MAX};
use crate::error::{ApiError, ApiResult};
use axum::http::Method;
use serde_json::{json, Map, Value};
use steward_core::ACTION_NAME_LEN_MAX;

/// An operation that becomes an action.
pub(super) struct Entry {
    pub name: String,
    pub operation_id: Option<String>,
    pub method: String,
    pub path: String,
    /// The action's definition, as `POST /actions` takes it.
    pub definition: Map<String, Value>,
    pub warnings: Vec<String>,
    pub proposed_verify: Option<Value>,
    pub verify_note: Option<String>,
}

/// An operation left out, and why.
pub(super) struct Skip {
    pub path: String,
    pub method: String,
    pub operation_id: Option<String>,
    pub reason: String,
}

impl Skip {
    pub fn of(entry: &Entry, reason: String) -> Skip {
        Skip {
            path: entry.path.clone(),
            method: entry.method.clone(),
            operation_id: entry.operation_id.clone(),
            reason,
        }
    }
}

pub(super) struct Plan {
    pub entries: Vec<Entry>,
    pub skipped: Vec<Skip>,
}

/// Plans the import of `doc`'s operations (those `only` names, or all).
pub(super) fn plan(
    doc: &Document,
    settings: &Settings,
    only: Option<&[String]>,
) -> ApiResult<Plan> {
    let mut ops = Vec::new();
    let mut skipped = Vec::new();
    for (path, item) in doc.spec.paths.iter().flatten() {
        if item.reference.is_some() {
            skipped.push(Skip {
                path: path.clone(),
                method: "*".into(),
                operation_id: None,
                reason: "the path item is a $ref, which the import does not follow".into(),
            });
        }
        for (method, operation) in item.methods() {
            ops.push(Op {
                path,
                method,
                item,
                operation,
            });
        }
    }
    if ops.len() > OPERATIONS_MAX {
        return Err(ApiError::validation(
            "spec.paths",
            format!(
                "holds {} operations; an import reads at most {OPERATIONS_MAX}",
                ops.len()
            ),
        ));
    }
    let selected = select(&ops, only)?;
    let mut entries: Vec<Entry> = Vec::new();
    for op in ops.iter().filter(|op| selected(op)) {
        let operation_id = op.operation.operation_id.clone();
        let (name, renamed) = action_name(op);
        let skip = |reason: String| Skip {
            path: op.path.to_string(),
            method: op.method.to_string(),
            operation_id: operation_id.clone(),
            reason,
        };
        if entries.iter().any(|e| e.name == name) {
            skipped.push(skip(format!(
                "another operation of this import is named {name}"
            )));
            continue;
        }
        match operation::map(doc, settings, op)? {
            Err(reason) => skipped.push(skip(reason)),
            Ok(mut mapped) => {
                mapped.definition.insert("name".into(), json!(name));
                mapped.warnings.extend(renamed);
                let (proposed_verify, verify_note) = if mapped.definition.contains_key("impact") {
                    propose_verify(doc, settings.base, op, &ops)
                } else {
                    (None, None)
                };
                entries.push(Entry {
                    name,
                    operation_id,
                    method: op.method.to_string(),
                    path: op.path.to_string(),
                    definition: mapped.definition,
                    warnings: mapped.warnings,
                    proposed_verify,
                    verify_note,
                });
            }
        }
    }
    Ok(Plan { entries, skipped })
}

/// Which operations `only` selects: each entry is an operationId or `METHOD /path`, and each
/// must name an operation of the document.
fn select<'a>(ops: &'a [Op], only: Option<&'a [String]>) -> ApiResult<impl Fn(&Op) -> bool + 'a> {
    let names = |entry: &str, op: &Op| {
        op.operation.operation_id.as_deref() == Some(entry)
            || entry.split_once(' ').is_some_and(|(method, path)| {
                method.eq_ignore_ascii_case(op.method.as_str()) && path == op.path
            })
    };
    for (i, entry) in only.into_iter().flatten().enumerate() {
        if !ops.iter().any(|op| names(entry, op)) {
            return Err(ApiError::validation(
                format!("{ONLY_FIELD}.{i}"),
                format!("{entry} is neither an operationId nor a METHOD /path of the spec"),
            ));
        }
    }
    Ok(move |op: &Op| only.is_none_or(|only| only.iter().any(|e| names(e, op))))
}

/// The action's name: the operationId made a valid action name, or `method_path` without one.
/// The second value is a warning when the name is not the operationId as written.
fn action_name(op: &Op) -> (String, Option<String>) {
    let sanitize = |text: &str| -> String {
        let mut name: String = text
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if name.starts_with("act_") {
            name.insert_str(0, "op_");
        }
        name.truncate(ACTION_NAME_LEN_MAX);
        name
    };
    if let Some(id) = op
        .operation
        .operation_id
        .as_deref()
        .filter(|id| !id.is_empty())
    {
        let name = sanitize(id);
        let note = (name != id).then(|| format!("named {name} after the operationId {id}"));
        return (name, note);
    }
    let path: String = op
        .path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_matches(|c| c == '{' || c == '}'))
        .collect::<Vec<_>>()
        .join("_");
    let name = sanitize(&format!(
        "{}_{path}",
        op.method.as_str().to_ascii_lowercase()
    ));
    let note = format!("no operationId: named {name} after its method and path");
    (name, Some(note))
}

/// The path with `{p}` as `{{input.p}}`, after `base`.
fn url(base: &str, path: &str) -> String {
    let mut out = String::from(base);
    for (i, part) in path.split('{').enumerate() {
        match (i, part.split_once('}')) {
            (0, _) | (_, None) => out.push_str(part),
            (_, Some((name, rest))) => {
                out.push_str(&format!("{{{{input.{name}}}}}{rest}"));
            }
        }
    }
    out
}

/// The first 2xx status an operation documents (200 when it documents none).
fn success_status(op: &Op) -> u16 {
    op.operation
        .responses
        .iter()
        .flatten()
        .filter_map(|(code, _)| code.parse::<u16>().ok())
        .find(|code| (200..300).contains(code))
        .unwrap_or(200)
}

/// `node`, through its `$ref`s (`Null` when one does not resolve).
fn follow<'d>(doc: &'d Document, mut node: &'d Value) -> &'d Value {
    for _ in 0..super::SCHEMA_DEPTH_MAX {
        match node.get("$ref").and_then(Value::as_str) {
            Some(r) => match super::schema::resolve(&doc.raw, r) {
                Ok(target) => node = target,
                Err(_) => return &Value::Null,
            },
            None => break,
        }
    }
    node
}

/// True when the operation's 2xx JSON answer documents an `id` (following `$ref`s).
fn answers_with_id(doc: &Document, op: &Op) -> bool {
    let raw = &doc.raw["paths"][op.path][op.method.as_str().to_ascii_lowercase()]["responses"];
    let Some(responses) = raw.as_object() else {
        return false;
    };
    responses
        .iter()
        .filter(|(code, _)| code.starts_with('2'))
        .any(|(_, response)| {
            let content = &follow(doc, response)["content"];
            content.as_object().into_iter().flatten().any(|(media, m)| {
                media.contains("json") && !follow(doc, &m["schema"])["properties"]["id"].is_null()
            })
        })
}

/// The security schemes `op` needs (joined with `or`), or `None` when it may be called
/// without credentials.
fn needs_credentials(doc: &Document, op: &Op) -> Option<String> {
    let raw = &doc.raw["paths"][op.path][op.method.as_str().to_ascii_lowercase()];
    let requirements = if raw.get("security").is_some() {
        &op.operation.security
    } else {
        &doc.spec.security
    };
    if requirements.is_empty() || requirements.iter().any(|r| r.0.is_empty()) {
        return None;
    }
    let schemes: Vec<String> = requirements
        .iter()
        .map(|r| r.0.keys().cloned().collect::<Vec<_>>().join(" + "))
        .collect();
    Some(schemes.join(" or "))
}

/// A GET of the document that reads the write `op` back, as a `verify` rule to propose (never
/// applied), and a note saying where it came from or why there is none.
fn propose_verify(
    doc: &Document,
    base: &str,
    op: &Op,
    ops: &[Op],
) -> (Option<Value>, Option<String>) {
    let gets = || ops.iter().filter(|o| o.method == Method::GET);
    let found = if op.method == Method::POST {
        // `POST /refunds` is read back by `GET /refunds/{id}` with the id it answered.
        let prefix = format!("{}/{{", op.path.trim_end_matches('/'));
        gets()
            .find(|g| {
                g.path
                    .strip_prefix(&prefix)
                    .is_some_and(|rest| rest.ends_with('}') && !rest.contains('/'))
            })
            .map(|g| {
                if !answers_with_id(doc, op) {
                    return Err(format!(
                        "GET {} reads this write back, but its answer documents no id to find it by",
                        g.path
                    ));
                }
                let rule = json!({
                    "url": format!("{}/{{{{response.id}}}}", url(base, op.path.trim_end_matches('/'))),
                    "status": success_status(g),
                    "match": [{"path": "id", "equals": "{{response.id}}"}],
                });
                Ok((g, rule))
            })
    } else {
        // `PUT`/`PATCH`/`DELETE /refunds/{id}` is read back by `GET /refunds/{id}`.
        gets().find(|g| g.path == op.path).map(|g| {
            let status = if op.method == Method::DELETE {
                404
            } else {
                success_status(g)
            };
            Ok((g, json!({"url": url(base, op.path), "status": status})))
        })
    };
    match found {
        Some(Ok((get, rule))) => {
            let mut note = format!(
                "proposed from GET {}; check it, then declare it as this action's verify (nothing applies it)",
                get.path
            );
            if let Some(schemes) = needs_credentials(doc, get) {
                note.push_str(&format!(
                    "; that GET needs credentials ({schemes}) and a verify read-back sends no headers, so it confirms only where the GET answers without them"
                ));
            }
            (Some(rule), Some(note))
        }
        Some(Err(note)) => (None, Some(note)),
        None => (
            None,
            Some("no GET of the spec reads this write back".into()),
        ),
    }
}
