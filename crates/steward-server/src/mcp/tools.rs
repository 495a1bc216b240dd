//! Which actions become which MCP tools.
//!
//! A tool is an enabled action of the caller's environment, offered only to a key that may
//! invoke actions. MCP tool names are `^[a-zA-Z0-9_-]{1,64}$`; action names are the same
//! characters plus `.` and at most 64 bytes, so a tool is named after its action with every
//! `.` replaced by `_`. When two actions map to one tool name (`a.b` and `a_b`), the action
//! whose name needs no mapping keeps it and the mapped one is not offered; between mapped
//! names alone, the first in byte order of the action name keeps it. Each skipped action is
//! logged. The rule depends only on the set of names, so every replica offers the same tools.
//!
//! A tool's arguments are an object (MCP requires `inputSchema` to be `type: object`), so how
//! they carry the action's input depends on the action's input schema ([`Arguments`]):
//!
//! - an object schema (or none, or one without a `type`): the arguments are the input, and the
//!   `operationKey` argument, taken out before the invoke, is the operation key;
//! - an object schema that declares an `operationKey` property of its own: the arguments are
//!   the input, that argument included, and the operation key travels only in `_meta`
//!   (`steward/operationKey`, [`META_OPERATION_KEY`]);
//! - any other schema (an array, a string, a type list, a boolean schema): wrapped as
//!   `{"type": "object", "properties": {"input": <schema>}, "required": ["input"]}`, and the
//!   `input` argument is the action's input (with `operationKey` beside it).

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use steward_core::ActionDefinition;
use steward_store::ActionRecord;

/// The longest MCP tool name, in bytes (the protocol's charset rule allows 1-64).
pub const TOOL_NAME_BYTES_MAX: usize = 64;

/// The argument that carries the operation key on every governed tool.
pub const OPERATION_KEY_ARGUMENT: &str = "operationKey";

/// What the model is told about [`OPERATION_KEY_ARGUMENT`].
pub const OPERATION_KEY_DESCRIPTION: &str = "A stable key for this business operation. Reuse the same key when you retry this same operation; use a new key for a new one.";

/// The argument that carries the input of an action whose input is not an object.
pub const INPUT_ARGUMENT: &str = "input";

/// The `_meta` key a programmatic host may carry the operation key in instead of the argument.
pub const META_OPERATION_KEY: &str = "steward/operationKey";

/// How a tool's arguments carry its action's input (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arguments {
    /// The arguments are the input; the `operationKey` argument is the operation key.
    Input,
    /// The arguments are the input, `operationKey` included; the key travels in `_meta` only.
    InputOwningOperationKey,
    /// The input is not an object: it is the `input` argument.
    Wrapped,
}

/// How `def`'s tool carries its input.
pub fn arguments(def: &ActionDefinition) -> Arguments {
    if !def.takes_object_input() {
        return Arguments::Wrapped;
    }
    let owns_key = def
        .input_schema
        .as_ref()
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .is_some_and(|p| p.contains_key(OPERATION_KEY_ARGUMENT));
    match owns_key {
        true => Arguments::InputOwningOperationKey,
        false => Arguments::Input,
    }
}

/// The tool name for an action name: `.` becomes `_`. `None` when the result is not a valid
/// MCP tool name (cannot happen for a valid action name; checked rather than assumed).
pub fn tool_name(action_name: &str) -> Option<String> {
    let name = action_name.replace('.', "_");
    let valid = !name.is_empty()
        && name.len() <= TOOL_NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    valid.then_some(name)
}

/// The tools for `actions`, keyed by tool name (so listed in name order), collisions resolved
/// as the module documentation says. Disabled actions are left out.
pub fn catalog(actions: &[ActionRecord]) -> BTreeMap<String, &ActionRecord> {
    let mut enabled: Vec<&ActionRecord> = actions.iter().filter(|a| a.definition.enabled).collect();
    // Unmapped names first, then mapped ones, each in byte order of the action name.
    enabled.sort_by(|a, b| {
        (a.name.contains('.'), a.name.as_str()).cmp(&(b.name.contains('.'), b.name.as_str()))
    });
    let mut tools = BTreeMap::new();
    for action in enabled {
        let Some(name) = tool_name(&action.name) else {
            tracing::warn!(action = %action.name, "action name has no MCP tool name; not offered");
            continue;
        };
        if let Some(kept) = tools.get(&name) {
            let kept: &&ActionRecord = kept;
            tracing::warn!(
                action = %action.name,
                kept = %kept.name,
                tool = %name,
                "two actions map to one MCP tool name; this one is not offered"
            );
            continue;
        }
        tools.insert(name, action);
    }
    tools
}

/// The tool's JSON (`name`, `description`, `inputSchema`, `annotations`).
pub fn tool(name: &str, def: &ActionDefinition) -> Value {
    let governed = def.is_governed();
    let shape = arguments(def);
    let mut schema = match (&def.input_schema, shape) {
        (Some(input), Arguments::Wrapped) => {
            let mut wrapper = Map::new();
            wrapper.insert(
                "properties".into(),
                json!({ INPUT_ARGUMENT: input.clone() }),
            );
            wrapper.insert("required".into(), json!([INPUT_ARGUMENT]));
            wrapper
        }
        (Some(Value::Object(s)), _) => s.clone(),
        _ => Map::new(),
    };
    schema.insert("type".into(), json!("object"));
    if governed && shape != Arguments::InputOwningOperationKey {
        let properties = schema.entry("properties").or_insert_with(|| json!({}));
        if let Value::Object(properties) = properties {
            properties.insert(
                OPERATION_KEY_ARGUMENT.into(),
                json!({"type": "string", "description": OPERATION_KEY_DESCRIPTION}),
            );
        }
    }
    let mut annotations = json!({"readOnlyHint": false, "openWorldHint": true});
    if destructive(def) {
        annotations["destructiveHint"] = json!(true);
    }
    if governed {
        annotations["idempotentHint"] = json!(true);
    }
    json!({
        "name": name,
        "description": description(def),
        "inputSchema": Value::Object(schema),
        "annotations": annotations,
    })
}

/// True when the action declares what it changes (an `impact`, or an adapter that moves money):
/// such a write cannot be taken back by calling the tool again.
fn destructive(def: &ActionDefinition) -> bool {
    def.impact.is_some() || def.adapter.is_some()
}

/// The action's description, then what it changes, then what governs it.
pub fn description(def: &ActionDefinition) -> String {
    // The action's own words, ended as a sentence so what follows reads apart from it.
    let own = def
        .description
        .as_deref()
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| match d.ends_with(['.', '!', '?']) {
            true => d.to_string(),
            false => format!("{d}."),
        })
        .unwrap_or_else(|| format!("Invokes the action {}.", def.name));
    let mut parts = vec![own];
    if let Some(adapter) = &def.adapter {
        // What the adapter declares it changes (the amounts depend on the input).
        let changes: Vec<String> = crate::adapters::quantities(def, &json!({}))
            .into_iter()
            .map(|q| match q.unit == q.dimension {
                true => q.dimension,
                false => format!("{} ({})", q.dimension, q.unit),
            })
            .collect();
        parts.push(if changes.is_empty() {
            format!("Impact: writes through the {} adapter.", adapter.kind)
        } else {
            format!(
                "Impact: changes {} through the {} adapter.",
                changes.join(", "),
                adapter.kind
            )
        });
    }
    if let Some(impact) = def.impact.as_ref() {
        let field = |f: &str| {
            impact
                .get(f)
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string()
        };
        let bound = if field("bound") == "upper_bound" {
            "at most"
        } else {
            "exactly"
        };
        parts.push(format!(
            "Impact: changes {bound} {} {} ({}).",
            field("amount"),
            field("unit"),
            field("dimension")
        ));
    }
    if def.requires_approval {
        parts.push("A person may have to approve each call before it runs.".into());
    }
    let shape = arguments(def);
    if shape == Arguments::Wrapped {
        parts.push(format!(
            "The action's input is not an object: pass it whole as the `{INPUT_ARGUMENT}` argument."
        ));
    }
    match (def.is_governed(), shape) {
        (false, _) => {}
        (true, Arguments::InputOwningOperationKey) => parts.push(format!(
            "The `{OPERATION_KEY_ARGUMENT}` argument is this action's own input: pass the operation key in _meta \"{}\", the same key on every retry of one operation (it also names the call's task).",
            META_OPERATION_KEY
        )),
        (true, _) => parts.push(format!(
            "Pass {OPERATION_KEY_ARGUMENT} (or _meta \"{META_OPERATION_KEY}\"): the same key on every retry of one operation; it also names the call's task, so a retry finds the same one."
        )),
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_core::{ActionId, EnvironmentId, Millis};

    fn action(name: &str, enabled: bool) -> ActionRecord {
        let def: ActionDefinition = serde_json::from_value(json!({
            "name": name, "urlTemplate": "https://example.test/x", "enabled": enabled,
            "governed": true,
        }))
        .unwrap();
        ActionRecord {
            id: ActionId::from_unique(name),
            env_id: EnvironmentId::from_unique("e"),
            name: name.into(),
            version: 1,
            definition: def,
            created_at: Millis(0),
            updated_at: Millis(0),
        }
    }

    #[test]
    fn dots_map_to_underscores_and_every_valid_action_name_is_a_valid_tool_name() {
        assert_eq!(
            tool_name("billing.refund").as_deref(),
            Some("billing_refund")
        );
        assert_eq!(
            tool_name("refund-payment").as_deref(),
            Some("refund-payment")
        );
        let longest = "a.".repeat(32);
        assert_eq!(tool_name(&longest).map(|n| n.len()), Some(64));
        assert_eq!(tool_name(""), None);
        assert_eq!(tool_name(&"a".repeat(65)), None);
        assert_eq!(tool_name("has space"), None);
    }

    #[test]
    fn a_colliding_mapped_name_is_skipped_whatever_the_order() {
        let forward = [
            action("a.b", true),
            action("a_b", true),
            action("c.d", true),
        ];
        let backward = [
            action("c.d", true),
            action("a_b", true),
            action("a.b", true),
        ];
        for actions in [&forward[..], &backward[..]] {
            let tools = catalog(actions);
            let names: Vec<(&str, &str)> = tools
                .iter()
                .map(|(tool, a)| (tool.as_str(), a.name.as_str()))
                .collect();
            assert_eq!(names, vec![("a_b", "a_b"), ("c_d", "c.d")]);
        }
    }

    #[test]
    fn disabled_actions_are_not_tools() {
        let actions = [action("on", true), action("off", false)];
        let tools = catalog(&actions);
        assert_eq!(tools.keys().collect::<Vec<_>>(), vec!["on"]);
    }

    #[test]
    fn a_governed_tool_takes_an_operation_key_and_claims_idempotence() {
        let a = action("x", true);
        let t = tool("x", &a.definition);
        assert_eq!(
            t["inputSchema"]["properties"]["operationKey"]["description"],
            OPERATION_KEY_DESCRIPTION
        );
        assert_eq!(t["inputSchema"]["type"], "object");
        assert_eq!(t["annotations"]["idempotentHint"], true);
        assert_eq!(t["annotations"]["readOnlyHint"], false);
    }

    #[test]
    fn an_ungoverned_tool_claims_neither_idempotence_nor_destruction() {
        let def: ActionDefinition = serde_json::from_value(json!({
            "name": "plain", "urlTemplate": "https://example.test/x",
            "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}},
                            "required": ["q"]},
        }))
        .unwrap();
        let t = tool("plain", &def);
        assert!(t["annotations"].get("idempotentHint").is_none());
        assert!(t["annotations"].get("destructiveHint").is_none());
        assert!(t["inputSchema"]["properties"].get("operationKey").is_none());
        assert_eq!(t["inputSchema"]["required"], json!(["q"]));
    }

    fn governed_with(input_schema: Value) -> ActionDefinition {
        serde_json::from_value(json!({
            "name": "shaped", "urlTemplate": "https://example.test/x", "governed": true,
            "inputSchema": input_schema,
        }))
        .unwrap()
    }

    #[test]
    fn a_non_object_input_schema_is_wrapped_as_the_input_argument() {
        for input in [
            json!({"type": "array", "items": {"type": "integer"}}),
            json!({"type": "string"}),
            json!({"type": ["object", "null"]}),
        ] {
            let def = governed_with(input.clone());
            assert_eq!(arguments(&def), Arguments::Wrapped, "{input}");
            let t = tool("shaped", &def);
            let schema = &t["inputSchema"];
            assert_eq!(schema["type"], "object", "{input}");
            assert_eq!(schema["properties"]["input"], input);
            assert_eq!(schema["required"], json!(["input"]));
            assert_eq!(
                schema["properties"]["operationKey"]["description"],
                OPERATION_KEY_DESCRIPTION
            );
            assert!(t["description"]
                .as_str()
                .unwrap()
                .contains("`input` argument"));
        }
    }

    #[test]
    fn an_input_with_its_own_operation_key_keeps_it_and_the_key_goes_in_meta() {
        let own = json!({"type": "string", "description": "the caller's own field"});
        let def = governed_with(json!({
            "type": "object", "properties": {"operationKey": own.clone()},
            "required": ["operationKey"],
        }));
        assert_eq!(arguments(&def), Arguments::InputOwningOperationKey);
        let t = tool("shaped", &def);
        assert_eq!(t["inputSchema"]["properties"]["operationKey"], own);
        assert_eq!(t["inputSchema"]["required"], json!(["operationKey"]));
        let description = t["description"].as_str().unwrap();
        assert!(
            description.contains("steward/operationKey"),
            "{description}"
        );
        let plain = governed_with(json!({"type": "object", "properties": {"q": {}}}));
        assert_eq!(arguments(&plain), Arguments::Input);
    }
}
