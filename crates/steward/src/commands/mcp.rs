//! `steward mcp`: an MCP server on stdio for hosts that start their tools as a subprocess.
//!
//! It keeps no record of any call: every JSON-RPC message read from stdin (one per line) is
//! POSTed to the Steward server's Streamable HTTP endpoint (`--server URL` + `/mcp`) with the
//! agent key from `STEWARD_API_KEY`, and every message the server answers is written to stdout,
//! one per line, as it arrives (progress notifications before the result). Tools, operation
//! keys, approvals and results are all the server's; what the proxy keeps is the protocol
//! revision the server negotiated at `initialize`, which the HTTP transport expects on every
//! later request (`MCP-Protocol-Version`; a 2026-07-28 request names its own revision in `_meta`
//! and is sent with it, its method and its name as headers: [`revision_headers`]), and the last
//! tool list it saw: it asks for the list
//! every `--tools-poll-ms` and tells the host `notifications/tools/list_changed` when it
//! differs, which the stateless HTTP transport cannot push.
//!
//! Every line that is not a well-formed notification or response is answered: a line that is
//! not JSON with a parse error (-32700); anything else with what the server answered (its
//! JSON-RPC error for a malformed message: invalid request -32600, method not found -32601,
//! invalid params -32602), or, when the server could not be reached, refused without a JSON-RPC
//! answer or answered nothing, with [`PROXY_ERROR_CODE`] and the line's `id` (`null` when it has
//! no valid one). Notifications and responses are never answered.

use anyhow::{bail, Context};
use serde_json::{json, Value};
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// How long one forwarded request may take, in seconds: far longer than the server's dispatch
/// deadline (10 s by default), so a call is never cut off by the proxy while the server still
/// answers; a gated call answers `pending_approval` at once and does not wait for the person.
pub const REQUEST_TIMEOUT_S: u64 = 120;

/// The environment variable the agent key is read from (never a flag: flags are visible in
/// the process list).
pub const API_KEY_ENV: &str = "STEWARD_API_KEY";

/// JSON-RPC error code for "the Steward server could not be reached or refused the request"
/// (the implementation-defined server-error range).
const PROXY_ERROR_CODE: i64 = -32000;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The Steward server to forward to; by default where `steward serve` listens by default.
    #[arg(long, env = "STEWARD_SERVER", default_value = super::remote::DEFAULT_SERVER)]
    server: String,
    /// How often to ask the server for the tool list, in milliseconds, to tell the host when it
    /// changed (`notifications/tools/list_changed`): actions added, edited, disabled or deleted.
    #[arg(long, default_value_t = TOOLS_POLL_MS_DEFAULT,
          value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    tools_poll_ms: u64,
}

/// Five seconds: a changed action reaches the model's tool list within a turn or two, for one
/// small `tools/list` per host every few seconds.
pub const TOOLS_POLL_MS_DEFAULT: u64 = 5_000;

/// True once `initialize` was answered (the revision is known).
fn proxy_ready(proxy: &Proxy) -> bool {
    proxy.protocol().is_some()
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    super::init_logging();
    let key = std::env::var(API_KEY_ENV)
        .ok()
        .filter(|k| !k.trim().is_empty())
        .with_context(|| format!("set {API_KEY_ENV} to the agent's API key"))?;
    let base = url::Url::parse(&args.server).context("--server must be a URL")?;
    if !matches!(base.scheme(), "http" | "https") {
        bail!("--server must be an http or https URL");
    }
    let endpoint = base.join("/mcp").context("--server")?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(REQUEST_TIMEOUT_S))
        .build()?;
    let proxy = Arc::new(Proxy {
        http,
        endpoint: endpoint.to_string(),
        key,
        protocol: Mutex::new(None),
    });

    // One writer, so concurrent answers never interleave inside a line.
    let (out, mut answers) = mpsc::unbounded_channel::<String>();
    // Plain threads for stdin and stdout (blocking reads and writes of the process's streams).
    let writer = tokio::task::spawn_blocking(move || {
        let mut stdout = std::io::stdout().lock();
        while let Some(line) = answers.blocking_recv() {
            if writeln!(stdout, "{line}").is_err() || stdout.flush().is_err() {
                break;
            }
        }
    });
    let (lines_in, mut lines) = mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines_in.send(line).is_err() {
                break;
            }
        }
    });
    let mut tasks = tokio::task::JoinSet::new();
    let mut watcher = None;
    while let Some(line) = lines.recv().await {
        if line.trim().is_empty() {
            continue;
        }
        let (forwarder, out_for_forward) = (proxy.clone(), out.clone());
        // `initialize` is answered before anything else is sent, so the negotiated revision is
        // known for every later request.
        let is_initialize = serde_json::from_str::<Value>(&line)
            .is_ok_and(|m| m.get("method").and_then(Value::as_str) == Some("initialize"));
        let forward = async move {
            forwarder.forward(&line, &out_for_forward).await;
        };
        if is_initialize {
            // The first tool list is read before the host hears `initialize`'s answer, so any
            // change the host could cause or see after it is a change from this list.
            let first = match watcher {
                None => Some(proxy.tools().await),
                Some(_) => None,
            };
            forward.await;
            if let (Some(first), true) = (first, proxy_ready(&proxy)) {
                let interval = Duration::from_millis(args.tools_poll_ms);
                watcher = Some(tokio::spawn(watch_tools(
                    proxy.clone(),
                    out.clone(),
                    first,
                    interval,
                )));
            }
        } else {
            tasks.spawn(forward);
        }
    }
    while tasks.join_next().await.is_some() {}
    if let Some(watcher) = watcher {
        watcher.abort();
    }
    drop(out);
    let _ = writer.await;
    Ok(ExitCode::SUCCESS)
}

struct Proxy {
    http: reqwest::Client,
    endpoint: String,
    key: String,
    /// The protocol revision the server chose at `initialize`.
    protocol: Mutex<Option<String>>,
}

impl Proxy {
    /// A POST of `message` (read from `body`) to the server's `/mcp`, with the key and the
    /// revision's headers ([`revision_headers`]).
    fn post(&self, body: String, message: &Value) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .post(&self.endpoint)
            .bearer_auth(&self.key)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        for (name, value) in revision_headers(message, self.protocol().as_deref()) {
            request = request.header(name, value);
        }
        request
    }

    fn protocol(&self) -> Option<String> {
        self.protocol
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sends one message and writes every message the server answers to `out` as it arrives
    /// (an event stream carries progress notifications before the result).
    async fn forward(&self, line: &str, out: &mpsc::UnboundedSender<String>) {
        for answer in self.exchange(line, out).await {
            let _ = out.send(answer);
        }
    }

    /// [`Proxy::forward`]'s work; messages of an event stream go to `out` at once, and what is
    /// returned is written after them (a whole JSON answer, or the error that cut one off).
    async fn exchange(&self, line: &str, out: &mpsc::UnboundedSender<String>) -> Vec<String> {
        let message: Value = match serde_json::from_str(line) {
            Ok(m) => m,
            Err(_) => {
                return vec![json!({"jsonrpc": "2.0", "id": null,
                    "error": {"code": -32700, "message": "parse error: not JSON"}})
                .to_string()]
            }
        };
        let answered = expects_answer(&message);
        let id = message
            .get("id")
            .filter(|id| id.is_string() || id.is_i64() || id.is_u64())
            .cloned()
            .unwrap_or(Value::Null);
        let request = self.post(line.to_string(), &message);
        let failed = |message: String| match answered {
            true => vec![json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": PROXY_ERROR_CODE, "message": message}})
            .to_string()],
            false => Vec::new(),
        };
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                let e = e.without_url();
                return failed(format!("the Steward server could not be reached: {e}"));
            }
        };
        let status = response.status();
        let is_stream = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if is_stream && status.is_success() {
            return match self.relay_stream(response, out).await {
                Ok(()) => Vec::new(),
                Err(e) => failed(format!("the Steward server's answer was cut off: {e}")),
            };
        }
        let body = match response.text().await {
            Ok(b) => b,
            Err(e) => {
                let e = e.without_url();
                return failed(format!("the Steward server's answer was cut off: {e}"));
            }
        };
        let answers: Vec<String> = if is_stream {
            sse_data(&body)
        } else if body.trim().is_empty() {
            Vec::new()
        } else {
            vec![body.trim().to_string()]
        };
        let answers: Vec<String> = answers.into_iter().filter(|a| is_message(a)).collect();
        if !answered {
            // JSON-RPC answers no notification or response, even one the server refused.
            return Vec::new();
        }
        if !status.is_success() && answers.is_empty() {
            return failed(format!(
                "the Steward server refused the request (HTTP {}): {}",
                status.as_u16(),
                error_message(&body)
            ));
        }
        if answers.is_empty() {
            return failed(format!(
                "the Steward server answered nothing (HTTP {})",
                status.as_u16()
            ));
        }
        answers.into_iter().map(|a| self.inspect(a)).collect()
    }

    /// Writes each message of an event stream to `out` as its event completes.
    async fn relay_stream(
        &self,
        mut response: reqwest::Response,
        out: &mpsc::UnboundedSender<String>,
    ) -> Result<(), reqwest::Error> {
        // Bytes, not text, until an event is whole: a chunk may end inside a character. A `\r`
        // can only be a line ending here (JSON escapes control characters), so it is dropped.
        let mut pending: Vec<u8> = Vec::new();
        let relay = |events: Vec<String>| {
            for event in events.into_iter().filter(|e| is_message(e)) {
                let _ = out.send(self.inspect(event));
            }
        };
        while let Some(chunk) = response.chunk().await.map_err(|e| e.without_url())? {
            pending.extend(chunk.iter().filter(|&&b| b != b'\r'));
            // Everything up to the last blank line is whole events; the rest waits for more.
            if let Some(end) = pending.windows(2).rposition(|w| w == b"\n\n") {
                let whole: Vec<u8> = pending.drain(..end + 2).collect();
                relay(sse_data(&String::from_utf8_lossy(&whole)));
            }
        }
        relay(sse_data(&String::from_utf8_lossy(&pending)));
        Ok(())
    }

    /// Passes an answer on, looking at an `initialize` result on the way: its
    /// `protocolVersion` is remembered, and its tools capability gains `listChanged`, which
    /// this proxy provides (the HTTP transport is stateless and cannot push it).
    fn inspect(&self, answer: String) -> String {
        let Ok(mut value) = serde_json::from_str::<Value>(&answer) else {
            return answer;
        };
        let Some(version) = value
            .pointer("/result/protocolVersion")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            return answer;
        };
        *self.protocol.lock().unwrap_or_else(|e| e.into_inner()) = Some(version);
        match value.pointer_mut("/result/capabilities/tools") {
            Some(Value::Object(tools)) => {
                tools.insert("listChanged".into(), json!(true));
                value.to_string()
            }
            _ => answer,
        }
    }

    /// The tool list as the server answers `tools/list` now (names, schemas, descriptions).
    async fn tools(&self) -> Option<Value> {
        let body =
            json!({"jsonrpc": "2.0", "id": "steward-mcp-tools-poll", "method": "tools/list"});
        let response = self.post(body.to_string(), &body).send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let stream = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let text = response.text().await.ok()?;
        let answer = if stream { sse_data(&text).pop()? } else { text };
        serde_json::from_str::<Value>(&answer)
            .ok()?
            .pointer("/result/tools")
            .cloned()
    }
}

/// Asks for the tool list every `interval` and writes `notifications/tools/list_changed` when
/// it differs from the last one seen. A failed poll changes nothing (the next one looks again).
async fn watch_tools(
    proxy: Arc<Proxy>,
    out: mpsc::UnboundedSender<String>,
    mut seen: Option<Value>,
    interval: Duration,
) {
    loop {
        tokio::time::sleep(interval).await;
        let Some(now) = proxy.tools().await else {
            continue;
        };
        if seen.as_ref() != Some(&now) {
            if seen.is_some() {
                let changed =
                    json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
                if out.send(changed.to_string()).is_err() {
                    return;
                }
            }
            seen = Some(now);
        }
    }
}

/// False only for a well-formed notification (a string `method`, no `id`) or response (an `id`
/// with a `result` or an `error`, no `method`): JSON-RPC answers neither, whatever the server
/// says of it. Anything else is a
/// request or a malformed message, and gets an answer.
fn expects_answer(message: &Value) -> bool {
    let Some(m) = message.as_object() else {
        return true;
    };
    if m.get("jsonrpc") != Some(&json!("2.0")) {
        return true;
    }
    let notification = m.get("method").is_some_and(Value::is_string) && !m.contains_key("id");
    let response = !m.contains_key("method")
        && m.contains_key("id")
        && (m.contains_key("result") || m.contains_key("error"));
    !(notification || response)
}

/// True for a JSON-RPC message (not an empty priming event).
fn is_message(data: &str) -> bool {
    serde_json::from_str::<Value>(data).is_ok_and(|v| v.get("jsonrpc").is_some())
}

/// The message of Steward's error envelope, or a short prefix of the body.
fn error_message(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| body.chars().take(200).collect())
}

/// The `data:` payloads of a server-sent event stream, one per event.
fn sse_data(body: &str) -> Vec<String> {
    let mut events = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for line in body.lines().chain(std::iter::once("")) {
        if line.is_empty() {
            if !current.is_empty() {
                events.push(current.join("\n"));
                current.clear();
            }
        } else if let Some(data) = line.strip_prefix("data:") {
            current.push(data.strip_prefix(' ').unwrap_or(data));
        }
    }
    events
        .into_iter()
        .filter(|e| !e.trim().is_empty())
        .collect()
}

/// The first revision without `initialize`: its requests carry their version in `_meta` and the
/// HTTP transport wants it, and the method and name, in headers.
const STATELESS_REVISION: &str = "2026-07-28";

/// The `_meta` key a 2026-07-28 request names its revision in.
const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

/// The headers the Streamable HTTP transport expects for `message`: `MCP-Protocol-Version`, the
/// revision the request names in its `_meta` or else the one `initialize` chose (`negotiated`);
/// from 2026-07-28 on, also `Mcp-Method` and `Mcp-Name` (the tool or prompt name, the resource
/// URI, or the task id), a name that is not printable ASCII sent in the transport's
/// `=?base64?...?=` form. No `Mcp-Param-*`: Steward's tools annotate no argument as a header.
fn revision_headers(message: &Value, negotiated: Option<&str>) -> Vec<(&'static str, String)> {
    let version = message
        .pointer("/params/_meta")
        .and_then(|meta| meta.get(META_PROTOCOL_VERSION))
        .and_then(Value::as_str)
        .or(negotiated);
    let Some(version) = version else {
        return Vec::new();
    };
    let mut headers = vec![("mcp-protocol-version", version.to_string())];
    let method = message.get("method").and_then(Value::as_str);
    let Some(method) = method.filter(|_| version >= STATELESS_REVISION) else {
        return headers;
    };
    headers.push(("mcp-method", method.to_string()));
    let name_field = match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    };
    let name = name_field
        .and_then(|field| message.get("params")?.get(field))
        .and_then(Value::as_str);
    if let Some(name) = name {
        headers.push(("mcp-name", header_value(name)));
    }
    headers
}

/// `value` as the transport carries it in a header: as it is when it is printable ASCII without
/// surrounding blanks, else `=?base64?<standard base64>?=`.
fn header_value(value: &str) -> String {
    use base64::Engine;
    let printable = value.bytes().all(|b| (0x20..=0x7e).contains(&b));
    let blank_edge = value.starts_with([' ', '\t']) || value.ends_with([' ', '\t']);
    let looks_encoded = value.starts_with("=?base64?") && value.ends_with("?=");
    if printable && !blank_edge && !looks_encoded {
        value.to_string()
    } else {
        let encoded = base64::engine::general_purpose::STANDARD.encode(value);
        format!("=?base64?{encoded}?=")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_names_its_revision_and_from_2026_07_28_its_method_and_name_in_headers() {
        let legacy = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                            "params": {"name": "refund"}});
        assert_eq!(revision_headers(&legacy, None), vec![]);
        assert_eq!(
            revision_headers(&legacy, Some("2025-11-25")),
            vec![("mcp-protocol-version", "2025-11-25".to_string())]
        );
        let meta = json!({META_PROTOCOL_VERSION: "2026-07-28"});
        let modern = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                            "params": {"name": "refund", "_meta": meta}});
        assert_eq!(
            revision_headers(&modern, Some("2025-11-25")),
            vec![
                ("mcp-protocol-version", "2026-07-28".to_string()),
                ("mcp-method", "tools/call".to_string()),
                ("mcp-name", "refund".to_string()),
            ]
        );
        let task = json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get",
                          "params": {"taskId": "tsk_abc", "_meta": meta}});
        assert_eq!(
            revision_headers(&task, None)[2],
            ("mcp-name", "tsk_abc".to_string())
        );
        let discover = json!({"jsonrpc": "2.0", "id": 3, "method": "server/discover",
                              "params": {"_meta": meta}});
        assert_eq!(revision_headers(&discover, None).len(), 2);
    }

    #[test]
    fn a_name_that_is_not_printable_ascii_travels_in_base64() {
        assert_eq!(header_value("refund"), "refund");
        assert_eq!(header_value("r\u{e9}fund"), "=?base64?csOpZnVuZA==?=");
        assert_eq!(header_value(" x"), "=?base64?IHg=?=");
        assert_eq!(
            header_value("=?base64?eA==?="),
            "=?base64?PT9iYXNlNjQ/ZUE9PT89?="
        );
    }

    #[test]
    fn sse_data_yields_one_message_per_event_and_skips_priming_events() {
        let body =
            "id: 0\nretry: 3000\ndata: \n\nevent: message\ndata: {\"a\":1}\n\ndata: {\"b\":2}\n";
        assert_eq!(sse_data(body), vec!["{\"a\":1}", "{\"b\":2}"]);
    }

    #[test]
    fn only_well_formed_notifications_and_responses_go_unanswered() {
        for silent in [
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
            json!({"jsonrpc": "2.0", "id": "a", "error": {"code": 1, "message": "m"}}),
        ] {
            assert!(!expects_answer(&silent), "{silent}");
        }
        for answered in [
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            json!([{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]),
            json!(42),
            json!({"method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "method": 5}),
            json!({"jsonrpc": "2.0"}),
            json!({"jsonrpc": "2.0", "id": 1}),
        ] {
            assert!(expects_answer(&answered), "{answered}");
        }
    }

    #[test]
    fn the_envelope_message_is_shown_for_a_refused_request() {
        let body =
            r#"{"success":false,"error":{"code":"AUTHENTICATION_FAILED","message":"no key"}}"#;
        assert_eq!(error_message(body), "no key");
    }
}
