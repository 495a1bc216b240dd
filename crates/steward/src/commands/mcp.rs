//! `steward mcp`: an MCP server on stdio for hosts that start their tools as a subprocess.
//!
//! It holds nothing of its own: every JSON-RPC message read from stdin (one per line) is
//! POSTed to the Steward server's Streamable HTTP endpoint (`--server URL` + `/mcp`) with the
//! agent key from `STEWARD_API_KEY`, and every message the server answers is written to stdout,
//! one per line. Tools, operation keys, approvals and results are all the server's; the only
//! thing remembered is the protocol revision the server negotiated at `initialize`, which the
//! HTTP transport expects on every later request (`MCP-Protocol-Version`).

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
    /// The Steward server to forward to, e.g. http://127.0.0.1:8080.
    #[arg(long, env = "STEWARD_SERVER")]
    server: String,
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
    while let Some(line) = lines.recv().await {
        if line.trim().is_empty() {
            continue;
        }
        let (proxy, out) = (proxy.clone(), out.clone());
        // `initialize` is answered before anything else is sent, so the negotiated revision is
        // known for every later request.
        let is_initialize = serde_json::from_str::<Value>(&line)
            .is_ok_and(|m| m.get("method").and_then(Value::as_str) == Some("initialize"));
        let forward = async move {
            for answer in proxy.forward(&line).await {
                let _ = out.send(answer);
            }
        };
        if is_initialize {
            forward.await;
        } else {
            tasks.spawn(forward);
        }
    }
    while tasks.join_next().await.is_some() {}
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
    /// Sends one message; returns the messages to write back (none for a notification).
    async fn forward(&self, line: &str) -> Vec<String> {
        let message: Value = match serde_json::from_str(line) {
            Ok(m) => m,
            Err(_) => {
                return vec![json!({"jsonrpc": "2.0", "id": null,
                    "error": {"code": -32700, "message": "parse error: not JSON"}})
                .to_string()]
            }
        };
        let id = message.get("id").cloned();
        let mut request = self
            .http
            .post(&self.endpoint)
            .bearer_auth(&self.key)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(line.to_string());
        let protocol = self
            .protocol
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(protocol) = protocol {
            request = request.header("mcp-protocol-version", protocol);
        }
        let failed = |message: String| match &id {
            Some(id) => vec![json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": PROXY_ERROR_CODE, "message": message}})
            .to_string()],
            None => Vec::new(),
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
        let answers: Vec<String> = answers
            .into_iter()
            .filter(|a| serde_json::from_str::<Value>(a).is_ok_and(|v| v.get("jsonrpc").is_some()))
            .collect();
        if !status.is_success() && answers.is_empty() {
            return failed(format!(
                "the Steward server refused the request (HTTP {}): {}",
                status.as_u16(),
                error_message(&body)
            ));
        }
        for answer in &answers {
            self.note_protocol(answer);
        }
        answers
    }

    /// Remembers `protocolVersion` from an `initialize` result.
    fn note_protocol(&self, answer: &str) {
        let version = serde_json::from_str::<Value>(answer).ok().and_then(|v| {
            v.pointer("/result/protocolVersion")
                .and_then(Value::as_str)
                .map(str::to_string)
        });
        if let Some(version) = version {
            *self.protocol.lock().unwrap_or_else(|e| e.into_inner()) = Some(version);
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_data_yields_one_message_per_event_and_skips_priming_events() {
        let body =
            "id: 0\nretry: 3000\ndata: \n\nevent: message\ndata: {\"a\":1}\n\ndata: {\"b\":2}\n";
        assert_eq!(sse_data(body), vec!["{\"a\":1}", "{\"b\":2}"]);
    }

    #[test]
    fn the_envelope_message_is_shown_for_a_refused_request() {
        let body =
            r#"{"success":false,"error":{"code":"AUTHENTICATION_FAILED","message":"no key"}}"#;
        assert_eq!(error_message(body), "no key");
    }
}
