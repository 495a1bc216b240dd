//! A policy file, read and compared with the environment's policies: pure functions, no IO.
//!
//! The file is YAML (or JSON, which YAML reads too) describing the environment's *whole* policy
//! set, one entry per policy with the fields of a create body:
//!
//! ```yaml
//! policies:
//!   - name: large refunds need two people
//!     matchKind: action
//!     matchActionName: refund-order
//!     condition: input.amount >= 50000
//!     effect: require_approval
//!     requiredApprovals: 2
//! ```
//!
//! Policies are matched by name: an entry whose name no live policy has is created, one whose
//! spec differs from the live policy of that name is updated (a new version), a live policy the
//! file does not name is deleted. The plan's digest covers the file's policies and the live set
//! it was compared with (ids and versions), so an apply of that digest means exactly that change
//! against exactly that set.

use serde_json::{json, Map, Value};
use steward_core::policy::{PolicySpec, SPEC_FIELDS};
use steward_core::{fingerprint, PolicyId};
use steward_store::{PolicyChange, PolicyRecord, PolicySetChange};

/// The largest policy file read, in bytes: far above any real policy set (200 policies of a
/// few hundred bytes each), and well under the request body limit.
pub const POLICY_FILE_BYTES_MAX: usize = 256 * 1024;
/// The most policies one file may describe: a set a person can still review as one change.
pub const POLICY_FILE_POLICIES_MAX: usize = 200;
/// The most cases one `test` call decides: each is one policy evaluation, bounded by the
/// conditions' own limits, so this bounds the call's work.
pub const POLICY_TEST_CASES_MAX: usize = 500;

/// One problem with the file, named by where it is (`policies[2].effect`).
#[derive(Debug, Clone, PartialEq)]
pub struct FileError {
    pub field: String,
    pub message: String,
    /// The entry's name, when the entry has one.
    pub name: Option<String>,
}

impl FileError {
    fn at(field: impl Into<String>, message: impl Into<String>) -> FileError {
        FileError {
            field: field.into(),
            message: message.into(),
            name: None,
        }
    }

    pub fn view(&self) -> Value {
        json!({"field": self.field, "message": self.message, "name": self.name})
    }
}

/// Reads YAML or JSON text into a value, bounded in size first. `what` names the field for
/// errors (`source`, `cases`).
pub fn read_text(text: &str, what: &str) -> Result<Value, FileError> {
    if text.len() > POLICY_FILE_BYTES_MAX {
        return Err(FileError::at(
            what,
            format!("is longer than {POLICY_FILE_BYTES_MAX} bytes"),
        ));
    }
    yaml_serde::from_str::<Value>(text).map_err(|e| {
        // The parser's message names a line and column; it never echoes more than a token.
        FileError::at(what, format!("is not valid YAML or JSON: {e}"))
    })
}

/// The policies a file describes, in file order, each checked as a create body would be; every
/// problem found, not only the first.
pub fn parse(source: &str) -> Result<Vec<PolicySpec>, Vec<FileError>> {
    let value = read_text(source, "source").map_err(|e| vec![e])?;
    let Value::Object(top) = value else {
        return Err(vec![FileError::at(
            "source",
            "must be a mapping with a `policies` list",
        )]);
    };
    let mut errors = Vec::new();
    for key in top.keys() {
        if key != "policies" && key != "version" {
            errors.push(FileError::at(
                key.clone(),
                "is not a field of a policy file (policies, version)",
            ));
        }
    }
    match top.get("version") {
        None | Some(Value::Null) => {}
        Some(v) if v.as_u64() == Some(1) => {}
        Some(_) => errors.push(FileError::at("version", "must be 1")),
    }
    let entries = match top.get("policies") {
        Some(Value::Array(list)) => list.as_slice(),
        None | Some(Value::Null) => &[],
        Some(_) => {
            errors.push(FileError::at("policies", "must be a list"));
            &[]
        }
    };
    if entries.len() > POLICY_FILE_POLICIES_MAX {
        errors.push(FileError::at(
            "policies",
            format!("has more than {POLICY_FILE_POLICIES_MAX} entries"),
        ));
        return Err(errors);
    }
    let mut specs = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        match entry_spec(i, entry) {
            Ok(spec) => {
                if let Some(first) = specs.iter().position(|s: &PolicySpec| s.name == spec.name) {
                    errors.push(FileError {
                        field: format!("policies[{i}].name"),
                        message: format!("is also the name of policies[{first}]: names are unique"),
                        name: Some(spec.name.clone()),
                    });
                }
                specs.push(spec);
            }
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(specs)
    } else {
        Err(errors)
    }
}

fn entry_spec(i: usize, entry: &Value) -> Result<PolicySpec, FileError> {
    let Value::Object(map) = entry else {
        return Err(FileError::at(format!("policies[{i}]"), "must be a mapping"));
    };
    let name = map.get("name").and_then(Value::as_str).map(str::to_string);
    let located = |field: &str, message: String| FileError {
        field: format!("policies[{i}].{field}"),
        message,
        name: name.clone(),
    };
    if let Some(unknown) = map.keys().find(|k| !SPEC_FIELDS.contains(&k.as_str())) {
        return Err(located(unknown, "is not a policy field".into()));
    }
    let fields: Map<String, Value> = map.clone();
    PolicySpec::from_create(&fields).map_err(|e| located(&e.field, e.message))
}

/// What applying the file changes, against `live` (the environment's live policies).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub digest: String,
    pub creates: Vec<PolicySpec>,
    /// The live policy and its new spec.
    pub updates: Vec<(PolicyRecord, PolicySpec)>,
    pub deletes: Vec<PolicyRecord>,
    pub unchanged: Vec<PolicyRecord>,
    /// Every live policy with its version, as compared.
    pub live: Vec<(PolicyId, u32)>,
}

/// Compares the file's policies with the live ones, by name.
pub fn plan(specs: &[PolicySpec], live: &[PolicyRecord]) -> Plan {
    let mut creates = Vec::new();
    let mut updates = Vec::new();
    let mut unchanged = Vec::new();
    for spec in specs {
        match live.iter().find(|p| p.spec.name == spec.name) {
            None => creates.push(spec.clone()),
            Some(current) if current.spec == *spec => unchanged.push(current.clone()),
            Some(current) => updates.push((current.clone(), spec.clone())),
        }
    }
    let deletes: Vec<PolicyRecord> = live
        .iter()
        .filter(|p| !specs.iter().any(|s| s.name == p.spec.name))
        .cloned()
        .collect();
    let mut versions: Vec<(PolicyId, u32)> =
        live.iter().map(|p| (p.id.clone(), p.version)).collect();
    versions.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    let digest = fingerprint(&json!({
        "file": specs.iter().map(steward_wire::Policy::of_spec).collect::<Vec<_>>(),
        "live": versions.iter().map(|(id, v)| json!([id, v])).collect::<Vec<_>>(),
    }));
    Plan {
        digest,
        creates,
        updates,
        deletes,
        unchanged,
        live: versions,
    }
}

impl Plan {
    /// The store's change for this plan; `new_record` makes each created policy's record.
    pub fn change(
        &self,
        env: &steward_core::EnvironmentId,
        mut new_record: impl FnMut(&PolicySpec) -> PolicyRecord,
    ) -> PolicySetChange {
        let mut changes: Vec<PolicyChange> = Vec::new();
        changes.extend(self.deletes.iter().map(|p| PolicyChange::Delete {
            id: p.id.clone(),
            expected_version: p.version,
        }));
        changes.extend(self.updates.iter().map(|(p, spec)| PolicyChange::Update {
            id: p.id.clone(),
            expected_version: p.version,
            spec: spec.clone(),
        }));
        changes.extend(
            self.creates
                .iter()
                .map(|spec| PolicyChange::Create(new_record(spec))),
        );
        PolicySetChange {
            env_id: env.clone(),
            expected: self.live.clone(),
            changes,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.creates.is_empty() && self.updates.is_empty() && self.deletes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_core::{EnvironmentId, Millis};

    fn live(name: &str, version: u32, effect: &str) -> PolicyRecord {
        PolicyRecord {
            id: PolicyId::from_unique(&crate::clock::unique()),
            env_id: EnvironmentId::from_unique(&crate::clock::unique()),
            version,
            spec: spec(name, effect),
            created_at: Millis(1),
            updated_at: Millis(1),
        }
    }

    fn spec(name: &str, effect: &str) -> PolicySpec {
        let body = json!({"name": name, "matchKind": "action", "effect": effect});
        PolicySpec::from_create(body.as_object().unwrap()).expect("a valid spec")
    }

    const FILE: &str = "
policies:
  - name: keep
    matchKind: action
    effect: require_approval
  - name: edit
    matchKind: action
    effect: auto_approve
  - name: new
    matchKind: action
    effect: require_approval
";

    #[test]
    fn a_plan_creates_updates_deletes_and_keeps_by_name() {
        let specs = parse(FILE).expect("a valid file");
        let current = vec![
            live("keep", 1, "require_approval"),
            live("edit", 3, "require_approval"),
            live("gone", 2, "auto_approve"),
        ];
        let p = plan(&specs, &current);
        assert_eq!(
            p.creates.iter().map(|s| &s.name).collect::<Vec<_>>(),
            ["new"]
        );
        assert_eq!(p.updates.len(), 1);
        assert_eq!(p.updates[0].0.spec.name, "edit");
        assert_eq!(p.deletes[0].spec.name, "gone");
        assert_eq!(p.unchanged[0].spec.name, "keep");
        // The same file against the same set plans the same digest; against a set one version
        // further on, another.
        assert_eq!(plan(&specs, &current).digest, p.digest);
        let mut moved = current.clone();
        moved[0].version = 2;
        assert_ne!(plan(&specs, &moved).digest, p.digest);
    }

    #[test]
    fn json_text_is_read_as_well_as_yaml() {
        let json =
            r#"{"policies": [{"name": "a", "matchKind": "action", "effect": "auto_approve"}]}"#;
        assert_eq!(parse(json).expect("json").len(), 1);
        assert_eq!(parse("policies: []").expect("empty set"), vec![]);
    }

    #[test]
    fn every_problem_is_named_by_where_it_is() {
        let file = "
policies:
  - name: a
    matchKind: action
    effect: maybe
  - name: a
    matchKind: action
    effect: auto_approve
  - name: b
    matchKind: action
    colour: red
extra: 1
";
        let errors = parse(file).expect_err("refused");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert!(fields.contains(&"extra"), "{fields:?}");
        assert!(fields.contains(&"policies[0].effect"), "{fields:?}");
        assert!(fields.contains(&"policies[2].colour"), "{fields:?}");
        assert!(parse("policies: 3").is_err());
        assert!(parse("- just a list").is_err());
        assert!(parse("policies: [").is_err());
    }

    #[test]
    fn duplicate_names_are_refused() {
        let file = "
policies:
  - {name: a, matchKind: action, effect: auto_approve}
  - {name: a, matchKind: action, effect: auto_deny, acknowledgeBroadScope: true}
";
        let errors = parse(file).expect_err("refused");
        assert_eq!(errors[0].field, "policies[1].name");
    }

    #[test]
    fn a_file_is_bounded_in_bytes_and_entries() {
        let long = format!("policies: []\n#{}", "x".repeat(POLICY_FILE_BYTES_MAX));
        assert_eq!(parse(&long).expect_err("too long")[0].field, "source");
        let many = format!(
            "policies:\n{}",
            "  - {name: a, matchKind: action}\n".repeat(POLICY_FILE_POLICIES_MAX + 1)
        );
        assert_eq!(parse(&many).expect_err("too many")[0].field, "policies");
    }
}
