//! The body of a POST to `/mcp`, checked before rmcp reads it, so that every malformed message
//! gets the JSON-RPC error the specification names instead of a plain HTTP error (rmcp answers
//! anything it cannot read as a message with a bare 415).
//!
//! The rule, after the MCP revision 2025-11-25 ("Streamable HTTP", "Sending Messages to the
//! Server": the body is a single JSON-RPC request, notification or response; input the server
//! cannot accept gets an HTTP error status whose body may be a JSON-RPC error with no `id`):
//!
//! | what arrived | HTTP | JSON-RPC error | `id` |
//! | --- | --- | --- | --- |
//! | a `Content-Type` other than `application/json` | 415 | -32600 invalid request | null |
//! | a body above [`crate::api::JSON_BODY_BYTES_MAX`] | 413 | -32600 invalid request | null |
//! | not JSON (empty, cut, not UTF-8) | 400 | -32700 parse error | null |
//! | a batch (an array), or JSON that is not an object | 400 | -32600 invalid request | null |
//! | an object without `jsonrpc: "2.0"`, a string `method` (nor a response's `result`/`error`), or with an `id` that is not a string or an integer | 400 | -32600 invalid request | the `id` when it is valid, else null |
//! | a request of a method MCP defines whose `params` do not fit it | 200 | -32602 invalid params | the request's |
//! | a notification of a method MCP defines whose `params` do not fit it | 400 | -32602 invalid params | null |
//!
//! A request of a method nobody defines is left to rmcp, which answers -32601 (method not
//! found, HTTP 200, the request's `id`) like any other in-band error; so is everything
//! well-formed.

use rmcp::model::{
    CallToolRequestMethod, CancelTaskMethod, CancelledNotificationMethod, ClientJsonRpcMessage,
    ClientNotification, ClientRequest, CompleteRequestMethod, ConstString, DiscoverRequestMethod,
    GetPromptRequestMethod, GetSkillRequestMethod, GetTaskMethod, InitializeResultMethod,
    InitializedNotificationMethod, JsonRpcMessage, ListPromptsRequestMethod,
    ListResourceTemplatesRequestMethod, ListResourcesRequestMethod, ListSkillsRequestMethod,
    ListToolsRequestMethod, PingRequestMethod, ProgressNotificationMethod,
    ReadResourceDirectoryRequestMethod, ReadResourceRequestMethod,
    RootsListChangedNotificationMethod, SetLevelRequestMethod, SubscribeRequestMethod,
    SubscriptionsListenRequestMethod, UnsubscribeRequestMethod, UpdateTaskMethod,
};
use serde_json::{json, Map, Value};

/// JSON-RPC 2.0's codes for a message the server could not take.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const INVALID_PARAMS: i64 = -32602;

/// The methods a client may send that rmcp reads into a typed message: one of these that rmcp
/// could only read as a custom message has `params` that do not fit it.
const KNOWN_METHODS: [&str; 25] = [
    PingRequestMethod::VALUE,
    InitializeResultMethod::VALUE,
    DiscoverRequestMethod::VALUE,
    CompleteRequestMethod::VALUE,
    SetLevelRequestMethod::VALUE,
    GetPromptRequestMethod::VALUE,
    ListPromptsRequestMethod::VALUE,
    ListResourcesRequestMethod::VALUE,
    ListResourceTemplatesRequestMethod::VALUE,
    ReadResourceRequestMethod::VALUE,
    SubscriptionsListenRequestMethod::VALUE,
    SubscribeRequestMethod::VALUE,
    UnsubscribeRequestMethod::VALUE,
    CallToolRequestMethod::VALUE,
    ListToolsRequestMethod::VALUE,
    GetTaskMethod::VALUE,
    UpdateTaskMethod::VALUE,
    CancelTaskMethod::VALUE,
    ListSkillsRequestMethod::VALUE,
    GetSkillRequestMethod::VALUE,
    ReadResourceDirectoryRequestMethod::VALUE,
    CancelledNotificationMethod::VALUE,
    ProgressNotificationMethod::VALUE,
    InitializedNotificationMethod::VALUE,
    RootsListChangedNotificationMethod::VALUE,
];

/// Why a message is refused before rmcp: the HTTP status and the JSON-RPC error to answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The HTTP status (see the module's table).
    pub status: u16,
    pub code: i64,
    pub message: String,
    /// The request's `id` when it could be read; `null` otherwise.
    pub id: Value,
}

impl Refusal {
    fn new(status: u16, code: i64, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            code,
            message: message.into(),
            id: Value::Null,
        }
    }

    fn with_id(mut self, id: Option<&Value>) -> Refusal {
        self.id = id.filter(|id| valid_id(id)).cloned().unwrap_or(Value::Null);
        self
    }

    /// The JSON-RPC error response.
    pub fn body(&self) -> Value {
        json!({"jsonrpc": "2.0", "id": self.id,
               "error": {"code": self.code, "message": self.message}})
    }
}

/// The refusal of a body sent with `content_type`, if any.
pub fn content_type(content_type: Option<&str>) -> Option<Refusal> {
    let is_json = content_type.is_some_and(|v| {
        let essence = v.split_once(';').map_or(v, |(essence, _)| essence);
        essence.trim().eq_ignore_ascii_case("application/json")
    });
    (!is_json).then(|| {
        Refusal::new(
            415,
            INVALID_REQUEST,
            "invalid request: a JSON-RPC message is sent as Content-Type: application/json",
        )
    })
}

/// The refusal of a body above the size bound.
pub fn too_large(bytes_max: usize) -> Refusal {
    Refusal::new(
        413,
        INVALID_REQUEST,
        format!("invalid request: the body exceeds {bytes_max} bytes"),
    )
}

/// The refusal of `body` (already of the right type and size), if it is not one message
/// rmcp can read.
pub fn check(body: &[u8]) -> Option<Refusal> {
    let value = match serde_json::from_slice::<Value>(body) {
        Ok(value) => value,
        Err(e) => {
            return Some(Refusal::new(
                400,
                PARSE_ERROR,
                format!("parse error: the body is not JSON ({e})"),
            ))
        }
    };
    let message = match value {
        Value::Object(message) => message,
        Value::Array(_) => {
            return Some(Refusal::new(
                400,
                INVALID_REQUEST,
                "invalid request: batches are not supported; send one message per POST",
            ))
        }
        _ => {
            return Some(Refusal::new(
                400,
                INVALID_REQUEST,
                "invalid request: a JSON-RPC message is a JSON object",
            ))
        }
    };
    envelope(&message)
        .or_else(|| params(&message))
        .map(|refusal| refusal.with_id(message.get("id")))
}

/// MCP's request ids are strings or integers (never null).
fn valid_id(id: &Value) -> bool {
    id.is_string() || id.is_i64() || id.is_u64()
}

/// The refusal of a message whose JSON-RPC envelope is wrong.
fn envelope(message: &Map<String, Value>) -> Option<Refusal> {
    let invalid = |why: &str| {
        Some(Refusal::new(
            400,
            INVALID_REQUEST,
            format!("invalid request: {why}"),
        ))
    };
    if message.get("jsonrpc") != Some(&json!("2.0")) {
        return invalid("`jsonrpc` must be \"2.0\"");
    }
    if message.get("id").is_some_and(|id| !valid_id(id)) {
        return invalid("`id` must be a string or an integer");
    }
    match message.get("method") {
        Some(Value::String(_)) => None,
        Some(_) => invalid("`method` must be a string"),
        // A response to the server: rmcp answers it.
        None if message.contains_key("id")
            && (message.contains_key("result") || message.contains_key("error")) =>
        {
            None
        }
        None => invalid("`method` is missing"),
    }
}

/// The refusal of a request or notification of a method MCP defines whose `params` rmcp cannot
/// read as that method's.
fn params(message: &Map<String, Value>) -> Option<Refusal> {
    let method = message.get("method")?.as_str()?;
    if !KNOWN_METHODS.contains(&method) {
        return None;
    }
    let read = serde_json::from_value::<ClientJsonRpcMessage>(Value::Object(message.clone()));
    let fits = match read {
        Ok(JsonRpcMessage::Request(r)) => !matches!(r.request, ClientRequest::CustomRequest(_)),
        Ok(JsonRpcMessage::Notification(n)) => {
            !matches!(n.notification, ClientNotification::CustomNotification(_))
        }
        Ok(_) => true,
        Err(_) => false,
    };
    if fits {
        return None;
    }
    let is_request = message.contains_key("id");
    Some(Refusal::new(
        if is_request { 200 } else { 400 },
        INVALID_PARAMS,
        format!("invalid params: `params` do not fit `{method}`"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(body: &str) -> (u16, i64, Value) {
        let r = check(body.as_bytes()).unwrap_or_else(|| panic!("{body} passed"));
        assert_eq!(r.body()["jsonrpc"], "2.0");
        (r.status, r.code, r.id)
    }

    #[test]
    fn each_malformed_kind_gets_its_code_status_and_id() {
        let null = Value::Null;
        for (body, want) in [
            ("", (400, PARSE_ERROR, null.clone())),
            ("{nope", (400, PARSE_ERROR, null.clone())),
            ("[]", (400, INVALID_REQUEST, null.clone())),
            (
                r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
                (400, INVALID_REQUEST, null.clone()),
            ),
            ("42", (400, INVALID_REQUEST, null.clone())),
            (r#""ping""#, (400, INVALID_REQUEST, null.clone())),
            (
                r#"{"id":1,"method":"ping"}"#,
                (400, INVALID_REQUEST, json!(1)),
            ),
            (
                r#"{"jsonrpc":"1.0","id":"a","method":"ping"}"#,
                (400, INVALID_REQUEST, json!("a")),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1}"#,
                (400, INVALID_REQUEST, json!(1)),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":5}"#,
                (400, INVALID_REQUEST, json!(1)),
            ),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                (400, INVALID_REQUEST, null.clone()),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
                (400, INVALID_REQUEST, null.clone()),
            ),
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{}}}"#,
                (200, INVALID_PARAMS, json!(7)),
            ),
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":5}"#,
                (200, INVALID_PARAMS, json!(7)),
            ),
            (
                r#"{"jsonrpc":"2.0","method":"notifications/progress","params":5}"#,
                (400, INVALID_PARAMS, null.clone()),
            ),
        ] {
            assert_eq!(refused(body), want, "{body}");
        }
    }

    #[test]
    fn well_formed_messages_and_unknown_methods_pass_to_rmcp() {
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"no/such/method"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
        ] {
            assert_eq!(check(body.as_bytes()), None, "{body}");
        }
    }

    #[test]
    fn only_a_json_content_type_is_read() {
        assert_eq!(content_type(Some("application/json")), None);
        assert_eq!(content_type(Some("Application/JSON; charset=utf-8")), None);
        for other in [None, Some("text/plain"), Some("application/jsonx")] {
            let r = content_type(other).unwrap();
            assert_eq!((r.status, r.code), (415, INVALID_REQUEST));
        }
    }
}
