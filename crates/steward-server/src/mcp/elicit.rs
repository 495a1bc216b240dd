//! URL elicitation: a call that parks for approval can answer, instead of its result, an
//! `InputRequiredResult` (the 2026-07-28 revision's multi round-trip request) whose one input
//! request is an `elicitation/create` in mode `url` that sends the person at the host to the
//! console, where the approval is decided. Never a form: Steward asks the person nothing
//! through the client (a secret typed into an agent's host would pass through the model).
//!
//! Offered only when all of these hold, per request:
//!
//! - the client declared `elicitation.url` in the request's capabilities;
//! - the request is on 2026-07-28 (the earlier revisions carry an elicitation only as a
//!   server-to-client request, which the stateless transport has no stream for, or as the
//!   `-32042` error, which would replace the call's result);
//! - the request does not already answer it: the client's retry with `inputResponses` for
//!   [`ELICITATION_KEY`] gets the call's result as it then stands (pending, or decided), so a
//!   long approval never loops through elicitations.
//!
//! The link is `/console/#<approvalId>` on the host the request was sent to (the guard allowed
//! that `Host`), `https` when a proxy says so in `X-Forwarded-Proto`. The retry is the same
//! `tools/call` with the same operation key, so it observes the approval and never runs the
//! action twice.
//!
//! Seam: a call refused for want of a connected account (OAuth connections, issue #28's
//! `connectUrl`) would elicit that URL the same way; Steward has no such refusal yet.

use axum::http::header;
use axum::http::request::Parts;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, InputRequest, InputRequests, InputRequiredResult,
    ProtocolVersion,
};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use serde_json::json;
use steward_core::ApprovalId;

/// The key of the approval's elicitation in `inputRequests` (and of its answer in
/// `inputResponses`).
pub const ELICITATION_KEY: &str = "steward/approval";

/// Where the console of the server the request reached is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalLink {
    /// `scheme://host[:port]`.
    origin: String,
}

/// The link to elicit for this request, if the module's conditions hold.
pub fn approval_link(
    context: &RequestContext<RoleServer>,
    capabilities: Option<&ClientCapabilities>,
    request: &CallToolRequestParams,
) -> Option<ApprovalLink> {
    let declared = capabilities
        .and_then(|c| c.elicitation.as_ref())
        .is_some_and(|e| e.url.is_some());
    let version = context.protocol_version();
    let answered = request
        .input_responses
        .as_ref()
        .is_some_and(|r| r.contains_key(ELICITATION_KEY));
    if !offered(declared, version.as_ref(), answered) {
        return None;
    }
    ApprovalLink::of(context.extensions.get::<Parts>()?)
}

/// The module's conditions.
fn offered(declared: bool, version: Option<&ProtocolVersion>, answered: bool) -> bool {
    let stateless = version.is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
    declared && stateless && !answered
}

impl ApprovalLink {
    /// From the request's `Host` (already allowed by the guard) and `X-Forwarded-Proto`.
    fn of(parts: &Parts) -> Option<ApprovalLink> {
        let host = parts.headers.get(header::HOST)?.to_str().ok()?;
        let https = parts
            .headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("https"));
        let scheme = if https { "https" } else { "http" };
        Some(ApprovalLink {
            origin: format!("{scheme}://{host}"),
        })
    }

    /// The console page where `approval` is decided.
    pub fn url(&self, approval: &ApprovalId) -> String {
        format!("{}/console/#{}", self.origin, approval.as_str())
    }

    /// The answer that asks the person to open [`ApprovalLink::url`].
    pub fn elicit(&self, approval: &ApprovalId) -> InputRequiredResult {
        let request = json!({
            "method": "elicitation/create",
            "params": {
                "mode": "url",
                "message": format!(
                    "A person must approve this call in Steward's console before it runs (approval {}). Open the link to review it; then the call is made again with the same operationKey to see the decision. Nothing is asked here.",
                    approval.as_str()
                ),
                "url": self.url(approval),
            },
        });
        let request: InputRequest =
            serde_json::from_value(request).expect("a URL elicitation is an input request");
        let mut requests = InputRequests::new();
        requests.insert(ELICITATION_KEY.to_string(), request);
        InputRequiredResult::from_input_requests(requests)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offered_only_when_declared_on_2026_07_28_and_not_yet_answered() {
        let modern = ProtocolVersion::V_2026_07_28;
        let legacy = ProtocolVersion::V_2025_11_25;
        assert!(offered(true, Some(&modern), false));
        assert!(!offered(false, Some(&modern), false), "not declared");
        assert!(!offered(true, Some(&legacy), false), "no result carries it");
        assert!(!offered(true, None, false), "no version");
        assert!(!offered(true, Some(&modern), true), "the retry answers it");
    }

    #[test]
    fn the_link_is_the_consoles_on_the_requests_host_and_the_elicitation_asks_nothing() {
        let request = axum::http::Request::builder()
            .header("host", "127.0.0.1:8080")
            .body(())
            .unwrap();
        let (parts, ()) = request.into_parts();
        let link = ApprovalLink::of(&parts).unwrap();
        let approval = ApprovalId::parse("apr_01hx").unwrap();
        assert_eq!(
            link.url(&approval),
            "http://127.0.0.1:8080/console/#apr_01hx"
        );
        let result = serde_json::to_value(link.elicit(&approval)).unwrap();
        assert_eq!(result["resultType"], "input_required");
        let elicitation = &result["inputRequests"][ELICITATION_KEY];
        assert_eq!(elicitation["method"], "elicitation/create");
        assert_eq!(elicitation["params"]["mode"], "url");
        assert_eq!(
            elicitation["params"]["url"],
            "http://127.0.0.1:8080/console/#apr_01hx"
        );
        assert!(elicitation["params"].get("requestedSchema").is_none());

        let forwarded = axum::http::Request::builder()
            .header("host", "steward.example.com")
            .header("x-forwarded-proto", "https")
            .body(())
            .unwrap();
        let link = ApprovalLink::of(&forwarded.into_parts().0).unwrap();
        assert!(link
            .url(&approval)
            .starts_with("https://steward.example.com/"));
    }
}
