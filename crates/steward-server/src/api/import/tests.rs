//! The mapping of whole documents: the test data under `tests/data/openapi/`, and each skip
//! reason, warning, proposed read-back, selection and bound on small documents.

use super::document::{load, Document};
use super::operation::Settings;
use super::plan::{plan, Plan};
use super::{Auth, OPERATIONS_MAX, SCHEMA_DEPTH_MAX};
use serde_json::{json, Value};

const PETSTORE_30: &str = include_str!("../../../../../tests/data/openapi/petstore-3.0.yaml");
const PETSTORE_31: &str = include_str!("../../../../../tests/data/openapi/petstore-3.1.json");
const STRIPE: &str = include_str!("../../../../../tests/data/openapi/stripe-subset.json");
const BASE: &str = "https://api.example.com";

fn bearer() -> Auth {
    Auth {
        header_name: "Authorization".into(),
        value_template: "Bearer {{secret:API_KEY}}".into(),
    }
}

fn run(doc: &Document, auth: Option<&Auth>, governed: bool, only: Option<&[String]>) -> Plan {
    let settings = Settings {
        base: BASE,
        auth,
        requires_approval: false,
        governed,
    };
    plan(doc, &settings, only).unwrap_or_else(|e| panic!("{}: {:?}", e.message, e.details))
}

fn names(plan: &Plan) -> Vec<&str> {
    plan.entries.iter().map(|e| e.name.as_str()).collect()
}

fn skipped(plan: &Plan) -> Vec<(String, String)> {
    plan.skipped
        .iter()
        .map(|s| (format!("{} {}", s.method, s.path), s.reason.clone()))
        .collect()
}

/// A one-operation document with `operation` at `method /things/{id}` and `extra` merged in.
fn one(method: &str, operation: Value, extra: Value) -> Document {
    let mut doc = json!({"openapi": "3.1.0", "info": {"title": "t", "version": "1"},
        "paths": {"/things/{id}": {method: operation}}});
    if let (Value::Object(doc), Value::Object(extra)) = (&mut doc, extra) {
        doc.extend(extra);
    }
    load(&doc).unwrap()
}

fn id_param() -> Value {
    json!({"name": "id", "in": "path", "required": true, "schema": {"type": "string"}})
}

fn skip_reason(method: &str, operation: Value, extra: Value) -> String {
    let plan = run(&one(method, operation, extra), None, true, None);
    assert!(plan.entries.is_empty(), "imported");
    plan.skipped[0].reason.clone()
}

#[test]
fn petstore_3_0_imports_every_operation_with_its_warnings() {
    let plan = run(&load(&json!(PETSTORE_30)).unwrap(), None, true, None);
    assert_eq!(names(&plan), ["listPets", "createPets", "showPetById"]);
    assert!(plan.skipped.is_empty());
    let list = &plan.entries[0];
    assert_eq!(
        list.definition["urlTemplate"],
        json!(format!("{BASE}/pets"))
    );
    assert!(
        list.definition.get("impact").is_none(),
        "a GET is not governed"
    );
    assert_eq!(
        list.warnings,
        ["optional query parameter limit left out: a template sends every value it names"]
    );
    let create = &plan.entries[1];
    assert_eq!(create.definition["bodyTemplate"], json!("{{input.body}}"));
    assert_eq!(
        create.definition["impact"],
        json!({"dimension": "resource_mutations", "amount": "1", "bound": "exact"})
    );
    assert_eq!(create.definition["governed"], json!(true));
    assert_eq!(
        create.definition["inputSchema"]["properties"]["body"],
        json!({"type": "object", "required": ["id", "name"], "properties": {
            "id": {"type": "integer"}, "name": {"type": "string"}, "tag": {"type": "string"}}})
    );
    assert_eq!(
        create.warnings,
        ["body.id: dropped format (documents the value; not checked)"]
    );
    // The GET exists, but the 201 answers nothing to find the pet by.
    assert_eq!(create.proposed_verify, None);
    assert!(create.verify_note.as_deref().unwrap().contains("no id"));
    let show = &plan.entries[2];
    assert_eq!(
        show.definition["urlTemplate"],
        json!(format!("{BASE}/pets/{{{{input.petId}}}}"))
    );
    assert_eq!(
        show.definition["inputSchema"],
        json!({"type": "object", "additionalProperties": false, "required": ["petId"],
               "properties": {"petId": {"type": "string", "description": "The id of the pet to retrieve"}}})
    );
}

#[test]
fn petstore_3_1_skips_what_it_cannot_carry_and_proposes_read_backs() {
    let plan = run(&load(&json!(PETSTORE_31)).unwrap(), None, true, None);
    assert_eq!(
        names(&plan),
        ["listPets", "createPets", "showPetById", "deletePet"]
    );
    let skipped = skipped(&plan);
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert_eq!(skipped[0].0, "PUT /pets/{petId}");
    assert!(skipped[0].1.contains("uses oneOf"), "{skipped:?}");
    assert_eq!(skipped[1].0, "POST /pets/{petId}/photo");
    assert!(skipped[1].1.contains("multipart"), "{skipped:?}");
    let create = &plan.entries[1];
    assert_eq!(
        create.definition["inputSchema"]["properties"]["body"]["properties"]["tag"],
        json!({"type": ["string", "null"]})
    );
    assert_eq!(
        create.proposed_verify,
        Some(
            json!({"url": format!("{BASE}/pets/{{{{response.id}}}}"), "status": 200,
                    "match": [{"path": "id", "equals": "{{response.id}}"}]})
        )
    );
    let delete = &plan.entries[3];
    assert_eq!(
        delete.proposed_verify,
        Some(json!({"url": format!("{BASE}/pets/{{{{input.petId}}}}"), "status": 404}))
    );
    assert!(delete.definition.get("bodyTemplate").is_none());
    assert!(!delete
        .verify_note
        .as_deref()
        .unwrap()
        .contains("credentials"));
}

#[test]
fn the_stripe_subset_carries_auth_and_proposes_the_refund_read_back() {
    let auth = bearer();
    let plan = run(&load(&json!(STRIPE)).unwrap(), Some(&auth), true, None);
    assert_eq!(
        names(&plan),
        ["GetPaymentIntentsIntent", "PostRefunds", "GetRefundsRefund"]
    );
    assert_eq!(skipped(&plan).len(), 1);
    assert!(plan.skipped[0].reason.contains("form-encoded"));
    let refund = &plan.entries[1];
    assert_eq!(
        refund.definition["headers"],
        json!({"Authorization": "Bearer {{secret:API_KEY}}"})
    );
    assert_eq!(
        refund.proposed_verify.as_ref().unwrap()["url"],
        json!(format!("{BASE}/v1/refunds/{{{{response.id}}}}"))
    );
    let note = refund.verify_note.as_deref().unwrap();
    assert!(note.contains("from GET /v1/refunds/{refund}"), "{note}");
    assert!(note.contains("needs credentials (bearerAuth)"), "{note}");
    assert!(refund
        .warnings
        .iter()
        .any(|w| w.contains("body.amount: dropped minimum")));
    // Without auth, the bearer requirement is a warning, not a skip.
    let plan = run(&load(&json!(STRIPE)).unwrap(), None, true, None);
    assert!(plan.entries[1]
        .warnings
        .iter()
        .any(|w| w.contains("needs credentials")));
    assert!(plan.entries[1].definition.get("headers").is_none());
}

#[test]
fn not_governed_imports_plain_template_actions() {
    let plan = run(&load(&json!(PETSTORE_31)).unwrap(), None, false, None);
    for entry in &plan.entries {
        assert!(entry.definition.get("impact").is_none(), "{}", entry.name);
        assert!(entry.definition.get("governed").is_none(), "{}", entry.name);
        assert_eq!(entry.proposed_verify, None);
        assert_eq!(entry.verify_note, None);
    }
}

#[test]
fn only_selects_by_operation_id_or_method_and_path() {
    let doc = load(&json!(PETSTORE_31)).unwrap();
    let only = vec![
        "showPetById".to_string(),
        "delete /pets/{petId}".to_string(),
    ];
    let plan = run(&doc, None, true, Some(&only));
    assert_eq!(names(&plan), ["showPetById", "deletePet"]);
    assert!(
        plan.skipped.is_empty(),
        "unselected operations are not reported"
    );
    let settings = Settings {
        base: BASE,
        auth: None,
        requires_approval: false,
        governed: true,
    };
    let only = vec!["listPets".to_string(), "GET /nope".to_string()];
    let err = plan_err(&doc, &settings, &only);
    assert_eq!(err, "only.1");
}

fn plan_err(doc: &Document, settings: &Settings, only: &[String]) -> String {
    match plan(doc, settings, Some(only)) {
        Ok(_) => panic!("planned"),
        Err(e) => e.details.unwrap()["field"].as_str().unwrap().to_string(),
    }
}

#[test]
fn each_skip_reason() {
    let id = id_param();
    let with = |extra: Value| {
        let mut params = vec![id.clone()];
        params.push(extra);
        json!({"operationId": "op", "parameters": params})
    };
    let cases: Vec<(&str, Value, Value, &str)> = vec![
        (
            "head",
            json!({"parameters": [id]}),
            json!({}),
            "not a method",
        ),
        (
            "get",
            with(
                json!({"name": "session", "in": "cookie", "required": true, "schema": {"type": "string"}}),
            ),
            json!({}),
            "cookie",
        ),
        (
            "get",
            with(
                json!({"name": "q", "in": "query", "required": true, "content": {"application/json": {}}}),
            ),
            json!({}),
            "by content",
        ),
        (
            "get",
            with(
                json!({"name": "ids", "in": "query", "required": true, "schema": {"type": "array", "items": {"type": "string"}}}),
            ),
            json!({}),
            "not a single",
        ),
        (
            "get",
            with(
                json!({"name": "a.b", "in": "query", "required": true, "schema": {"type": "string"}}),
            ),
            json!({}),
            "cannot be an input name",
        ),
        (
            "get",
            with(
                json!({"name": "f", "in": "query", "required": true, "style": "deepObject", "schema": {"type": "string"}}),
            ),
            json!({}),
            "style",
        ),
        (
            "get",
            json!({"parameters": []}),
            json!({}),
            "does not declare",
        ),
        (
            "get",
            json!({"parameters": [id], "servers": [{"url": "https://upload.example.com"}]}),
            json!({}),
            "own server",
        ),
        (
            "get",
            json!({"parameters": [id], "security": [{"key": []}]}),
            json!({"components": {"securitySchemes": {"key": {"type": "apiKey", "in": "query", "name": "api_key"}}}}),
            "an API key in the query",
        ),
        (
            "get",
            json!({"parameters": [id], "security": [{"tls": []}]}),
            json!({"components": {"securitySchemes": {"tls": {"type": "mutualTLS"}}}}),
            "mutual TLS",
        ),
        (
            "get",
            json!({"parameters": [id], "security": [{"a": [], "b": []}]}),
            json!({"components": {"securitySchemes": {"a": {"type": "http", "scheme": "basic"}, "b": {"type": "http", "scheme": "basic"}}}}),
            "several credentials",
        ),
        (
            "post",
            json!({"parameters": [id], "requestBody": {"content": {"text/plain": {}}}}),
            json!({}),
            "text/plain body",
        ),
        (
            "post",
            json!({"parameters": [id, {"name": "body", "in": "query", "required": true, "schema": {"type": "string"}}],
            "requestBody": {"content": {"application/json": {}}}}),
            json!({}),
            "two of its inputs",
        ),
        (
            "post",
            json!({"parameters": [id], "requestBody": {"content": {"application/json": {"schema": {"type": "object", "patternProperties": {}}}}}}),
            json!({}),
            "uses patternProperties",
        ),
    ];
    for (method, operation, extra, expected) in cases {
        let reason = skip_reason(method, operation.clone(), extra);
        assert!(reason.contains(expected), "{method} {operation}: {reason}");
    }
}

#[test]
fn names_are_sanitized_and_a_clash_within_the_import_is_skipped() {
    let doc = json!({"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": {
        "/a": {"get": {"operationId": "list things"}, "post": {"operationId": "act_make"}},
        "/b": {"get": {"operationId": "list_things"}},
        "/c/{id}": {"get": {"parameters": [id_param()]}}}});
    let plan = run(&load(&doc).unwrap(), None, false, None);
    assert_eq!(names(&plan), ["list_things", "op_act_make", "get_c_id"]);
    assert!(plan.entries[0].warnings[0].contains("after the operationId list things"));
    assert!(plan.entries[2].warnings[0].contains("no operationId"));
    assert_eq!(plan.skipped.len(), 1);
    assert!(plan.skipped[0]
        .reason
        .contains("another operation of this import"));
}

#[test]
fn required_headers_and_queries_are_carried_optional_ones_warned() {
    let operation = json!({"operationId": "op", "parameters": [id_param(),
        {"name": "q", "in": "query", "required": true, "schema": {"type": "integer", "minimum": 0}},
        {"name": "X-Trace", "in": "header", "required": true, "schema": {"type": "string"}},
        {"name": "X-Opt", "in": "header", "schema": {"type": "string"}},
        {"name": "Accept", "in": "header", "required": true, "schema": {"type": "string"}}]});
    let plan = run(&one("get", operation, json!({})), None, true, None);
    let entry = &plan.entries[0];
    assert_eq!(
        entry.definition["urlTemplate"],
        json!(format!("{BASE}/things/{{{{input.id}}}}?q={{{{input.q}}}}"))
    );
    assert_eq!(
        entry.definition["headers"],
        json!({"X-Trace": "{{input.X-Trace}}"})
    );
    assert_eq!(
        entry.definition["inputSchema"]["required"],
        json!(["id", "q", "X-Trace"])
    );
    assert_eq!(entry.warnings.len(), 2, "{:?}", entry.warnings);
}

#[test]
fn bounds_are_validation_errors_naming_the_field() {
    let mut paths = serde_json::Map::new();
    for i in 0..=OPERATIONS_MAX {
        paths.insert(format!("/p{i}"), json!({"get": {}}));
    }
    let doc =
        load(&json!({"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": paths}))
            .unwrap();
    let settings = Settings {
        base: BASE,
        auth: None,
        requires_approval: false,
        governed: true,
    };
    let field = |doc: &Document| match plan(doc, &settings, None) {
        Ok(_) => panic!("planned"),
        Err(e) => e.details.unwrap()["field"].as_str().unwrap().to_string(),
    };
    assert_eq!(field(&doc), "spec.paths");
    let mut deep = json!({"type": "string"});
    for _ in 0..SCHEMA_DEPTH_MAX {
        deep = json!({"type": "array", "items": deep});
    }
    let operation = json!({"parameters": [id_param()],
        "requestBody": {"content": {"application/json": {"schema": deep}}}});
    assert_eq!(
        field(&one("post", operation, json!({}))),
        "spec.paths./things/{id}.post"
    );
}
