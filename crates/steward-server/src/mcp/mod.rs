//! The Model Context Protocol surface: the actions a key may invoke, offered as MCP tools, each
//! call an invoke through the same path as `POST /api/v2/actions/{ref}/invoke`.
//!
//! - [`tools`]: which actions become which tools (names, schemas, descriptions, annotations).
//! - [`call`]: a `tools/call` turned into an invoke, with its operation key.
//! - [`derive`]: the operation key of a call that carries none, where the action allows it.
//! - [`result`]: the one result envelope every call answers with.
//! - [`task`]: a governed call as a task of the `io.modelcontextprotocol/tasks` extension, its
//!   id derived from the effect's identity.
//! - [`elicit`]: the URL elicitation that sends a person to the console to approve a parked call.
//! - [`handler`]: the rmcp server handler tying them together, per request, holding no state.
//! - [`message`]: a POST's body checked before rmcp, so a malformed one gets its JSON-RPC error.
//! - [`http`]: Streamable HTTP at `/mcp`, behind the bearer key and the `Host`/`Origin` checks.

mod call;
pub mod derive;
mod elicit;
mod handler;
pub mod http;
mod message;
mod result;
mod task;
mod tools;

/// How `/mcp` answers: the host names it serves and what a governed call without an operation
/// key does.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub hosts: http::Hosts,
    pub keys: derive::KeyPolicy,
}
