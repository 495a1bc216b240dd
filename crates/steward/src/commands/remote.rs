//! What every operator command shares: the server it talks to, the key it talks with, and how
//! it prints. Operator commands are API clients like the SDK: they read and decide through
//! `/api/v2` on a running server (any replica), never the database, so the server's rules
//! (separation of duties, scopes, environments) hold for them exactly as for everyone else.

use anyhow::{bail, Context};
use serde_json::Value;
use std::time::Duration;

/// The environment variable the operator's key is read from (never a flag: flags are visible in
/// the process list).
pub const API_KEY_ENV: &str = "STEWARD_API_KEY";

/// The server an operator command talks to unless `--server` or `STEWARD_SERVER` says otherwise:
/// the address `steward serve` listens on by default.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:4000";

/// How long one request may take, in seconds: longer than the server's dispatch deadline, so an
/// approval that dispatches answers before the command gives up.
pub const REQUEST_TIMEOUT_S: u64 = 60;

/// Where and how an operator command talks to the server.
#[derive(clap::Args, Debug, Clone)]
pub struct RemoteArgs {
    /// The Steward server (the key comes from STEWARD_API_KEY); by default where `steward serve`
    /// listens by default.
    #[arg(long, env = "STEWARD_SERVER", global = true, default_value = DEFAULT_SERVER)]
    server: String,
    /// Print the API's JSON (`data`) instead of a table, for scripts.
    #[arg(long, global = true)]
    pub json: bool,
}

/// A server and a key.
pub struct Remote {
    http: reqwest::Client,
    base: url::Url,
    key: String,
    pub json: bool,
}

/// A refusal from the server: its envelope's code and message.
#[derive(Debug, thiserror::Error)]
#[error("{message} ({code}, HTTP {status})")]
pub struct Refused {
    pub status: u16,
    pub code: String,
    pub message: String,
    /// The envelope's `details` (`null` when it has none).
    pub details: Value,
}

impl Remote {
    pub fn connect(args: &RemoteArgs) -> anyhow::Result<Remote> {
        let key = std::env::var(API_KEY_ENV)
            .ok()
            .filter(|k| !k.trim().is_empty())
            .with_context(|| format!("set {API_KEY_ENV} to an operator's API key"))?;
        let base = url::Url::parse(&args.server).context("--server must be a URL")?;
        if !matches!(base.scheme(), "http" | "https") {
            bail!("--server must be an http or https URL");
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(REQUEST_TIMEOUT_S))
            .build()?;
        Ok(Remote {
            http,
            base,
            key,
            json: args.json,
        })
    }

    fn url(&self, path: &str) -> anyhow::Result<url::Url> {
        self.base
            .join(&format!("/api/v2{path}"))
            .context("the request path")
    }

    /// `GET /api/v2{path}` with `query`; the envelope's `data`.
    pub async fn get(&self, path: &str, query: &[(&str, String)]) -> anyhow::Result<Value> {
        let request = self.http.get(self.url(path)?).query(query);
        self.send(request).await
    }

    /// `POST /api/v2{path}` with a JSON body and a fresh `Idempotency-Key`, so a request the
    /// network cut off can be told apart from one never sent; the envelope's `data`.
    #[allow(clippy::disallowed_methods)] // a fresh key per command run; the CLI has no clock seam
    pub async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let request = self
            .http
            .post(self.url(path)?)
            .header("idempotency-key", format!("cli-{}", ulid::Ulid::new()))
            .json(body);
        self.send(request).await
    }

    /// `PATCH /api/v2{path}` with a JSON body and a fresh `Idempotency-Key`, as [`Remote::post`].
    #[allow(clippy::disallowed_methods)] // a fresh key per command run; the CLI has no clock seam
    pub async fn patch(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let request = self
            .http
            .patch(self.url(path)?)
            .header("idempotency-key", format!("cli-{}", ulid::Ulid::new()))
            .json(body);
        self.send(request).await
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> anyhow::Result<Value> {
        let response = request
            .bearer_auth(&self.key)
            .send()
            .await
            .map_err(|e| unreachable(&self.base, &e))?;
        let status = response.status();
        let body: Value = response.json().await.map_err(|e| {
            anyhow::anyhow!(
                "{} answered HTTP {} with something that is not JSON ({}): is it a Steward \
                 server? Point --server or STEWARD_SERVER at one",
                self.base,
                status.as_u16(),
                e.without_url()
            )
        })?;
        if body["success"] == Value::Bool(true) {
            return Ok(body["data"].clone());
        }
        if body["success"] != Value::Bool(false) {
            bail!(
                "{} answered HTTP {} without Steward's envelope: is it a Steward server? Point \
                 --server or STEWARD_SERVER at one",
                self.base,
                status.as_u16()
            );
        }
        Err(Refused {
            status: status.as_u16(),
            code: body
                .pointer("/error/code")
                .and_then(Value::as_str)
                .unwrap_or("unknown")
                .to_string(),
            message: body
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("the server refused the request")
                .to_string(),
            details: body.pointer("/error/details").cloned().unwrap_or_default(),
        }
        .into())
    }

    /// Prints `data` as JSON with `--json`, else through `human`.
    pub fn print(&self, data: &Value, human: impl FnOnce(&Value) -> String) {
        if self.json {
            println!("{}", serde_json::to_string_pretty(data).unwrap_or_default());
        } else {
            print!("{}", human(data));
        }
    }
}

/// Why `server` could not be asked anything: the URL, the cause (refused, timed out, TLS, ...)
/// and how to point the command elsewhere.
fn unreachable(server: &url::Url, error: &reqwest::Error) -> anyhow::Error {
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    let cause = causes.last().cloned().unwrap_or_else(|| error.to_string());
    let what = if error.is_timeout() {
        format!("did not answer within {REQUEST_TIMEOUT_S} s")
    } else if causes.iter().any(|c| {
        let c = c.to_ascii_lowercase();
        c.contains("tls") || c.contains("certificate") || c.contains("handshake")
    }) {
        format!("failed the TLS handshake ({cause})")
    } else if error.is_connect() {
        format!("could not be reached ({cause})")
    } else {
        format!("could not be asked ({cause})")
    };
    anyhow::anyhow!(
        "the Steward server at {server} {what}; start it with `steward serve`, or point --server \
         or STEWARD_SERVER at it (the default is {DEFAULT_SERVER})"
    )
}

/// A path segment from user input, percent-encoded (an id or a name).
pub fn segment(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_server_is_where_serve_listens_by_default() {
        assert_eq!(
            DEFAULT_SERVER,
            format!("http://{}", crate::commands::serve::DEFAULT_LISTEN)
        );
    }
}
