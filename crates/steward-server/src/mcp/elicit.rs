//! URL elicitation: a call that parks for approval, or that needs a signed-in account a person
//! must connect first, can answer with a URL for the person at the host to open. Never a form:
//! Steward asks the person nothing through the client (a secret typed into an agent's host
//! would pass through the model), and no token ever appears in the link.
//!
//! **Approval.** A parked call can answer, instead of its result, an `InputRequiredResult` (the
//! 2026-07-28 revision's multi round-trip request) whose one input request is an
//! `elicitation/create` in mode `url` that sends the person to the console, where the approval
//! is decided. Offered only when all of these hold, per request:
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
//! **A connected account.** A call refused, with nothing recorded, because an account its
//! action acts through is missing or `needs_reauth` (`app/account_gate.rs`) sends the person to
//! a new consent session's `connectUrl` (the provider's sign-in page; Steward's callback then
//! stores the tokens). Per the revision the request is on:
//!
//! - 2026-07-28, `elicitation.url` declared, and [`CONNECT_KEY`] not yet answered: an
//!   `InputRequiredResult` as above, under [`CONNECT_KEY`];
//! - 2025-11-25: the `-32042` `URLElicitationRequiredError` (its `elicitationId` the session's
//!   id), which is right here because the call's result is exactly that nothing ran. The
//!   stateless transport has no `initialize` of its own to read the client's capabilities
//!   from, so it is sent on that revision alone;
//! - otherwise no link: the refusal says a person must connect the account.
//!
//! Either way the call is made again with the same operation key once the person consented, and
//! runs once then; a retry that answers [`CONNECT_KEY`] while the account is still unusable gets
//! the refusal, not a second session.

use crate::app::account_gate::Unusable;
use crate::app::connection_sessions::{Started, CALLBACK_PATH};
use axum::http::header;
use axum::http::request::Parts;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ErrorCode, InputRequest, InputRequests,
    InputRequiredResult, ProtocolVersion,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::json;
use steward_core::ApprovalId;

/// The key of the approval's elicitation in `inputRequests` (and of its answer in
/// `inputResponses`).
pub const ELICITATION_KEY: &str = "steward/approval";

/// The key of a connected account's elicitation in `inputRequests` and `inputResponses`.
pub const CONNECT_KEY: &str = "steward/connect";

/// `URL_ELICITATION_REQUIRED` (2025-11-25).
pub const URL_ELICITATION_REQUIRED: ErrorCode = ErrorCode(-32042);

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
    if !offered(
        declared,
        version.as_ref(),
        answered(request, ELICITATION_KEY),
    ) {
        return None;
    }
    ApprovalLink::of(context.extensions.get::<Parts>()?)
}

/// Whether the request carries the client's answer to the elicitation under `key`.
fn answered(request: &CallToolRequestParams, key: &str) -> bool {
    request
        .input_responses
        .as_ref()
        .is_some_and(|r| r.contains_key(key))
}

/// How a call that needs a connected account can send the person to sign in, on this request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectLink {
    /// Where Steward is, as the request reached it (for the session's callback).
    server: ApprovalLink,
    form: ConnectForm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnectForm {
    /// 2026-07-28: an `InputRequiredResult`.
    InputRequired,
    /// 2025-11-25: the `-32042` error.
    Error,
}

/// The way to elicit an account's sign-in on this request, if the revision has one (see the
/// module's conditions).
pub fn connect_link(
    context: &RequestContext<RoleServer>,
    capabilities: Option<&ClientCapabilities>,
    request: &CallToolRequestParams,
) -> Option<ConnectLink> {
    let declared = capabilities
        .and_then(|c| c.elicitation.as_ref())
        .is_some_and(|e| e.url.is_some());
    let version = context.protocol_version();
    let form = connect_form(declared, version.as_ref(), answered(request, CONNECT_KEY))?;
    Some(ConnectLink {
        server: ApprovalLink::of(context.extensions.get::<Parts>()?)?,
        form,
    })
}

/// The module's conditions for a connected account's elicitation.
fn connect_form(
    declared: bool,
    version: Option<&ProtocolVersion>,
    answered: bool,
) -> Option<ConnectForm> {
    if offered(declared, version, answered) {
        Some(ConnectForm::InputRequired)
    } else if version == Some(&ProtocolVersion::V_2025_11_25) {
        Some(ConnectForm::Error)
    } else {
        None
    }
}

impl ConnectLink {
    /// Steward's callback on the address the request reached (the consent session's
    /// `redirect_uri` unless the catalog names one).
    pub fn callback_url(&self) -> String {
        format!("{}{CALLBACK_PATH}", self.server.origin)
    }

    /// The answer that sends the person to `started`'s `connectUrl` to connect `needed`.
    pub fn elicit(
        &self,
        needed: &Unusable,
        started: &Started,
    ) -> Result<InputRequiredResult, ErrorData> {
        let message = format!(
            "{} Sign in at the provider to connect it (session {}, valid 15 minutes); then the call is made again with the same operationKey. Nothing is asked here.",
            needed.message(),
            started.session.id
        );
        match self.form {
            ConnectForm::InputRequired => {
                let request = json!({
                    "method": "elicitation/create",
                    "params": {"mode": "url", "message": message, "url": started.connect_url},
                });
                Ok(input_required(CONNECT_KEY, request))
            }
            ConnectForm::Error => Err(ErrorData::new(
                URL_ELICITATION_REQUIRED,
                "This call needs an account a person must connect first.",
                Some(json!({"elicitations": [{
                    "mode": "url",
                    "elicitationId": started.session.id,
                    "url": started.connect_url,
                    "message": message,
                }]})),
            )),
        }
    }
}

/// An `InputRequiredResult` with the one input request `request` under `key`.
fn input_required(key: &str, request: serde_json::Value) -> InputRequiredResult {
    let request: InputRequest =
        serde_json::from_value(request).expect("a URL elicitation is an input request");
    let mut requests = InputRequests::new();
    requests.insert(key.to_string(), request);
    InputRequiredResult::from_input_requests(requests)
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
        input_required(ELICITATION_KEY, request)
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

    #[test]
    fn an_account_is_elicited_per_revision_and_never_twice_on_2026_07_28() {
        let modern = ProtocolVersion::V_2026_07_28;
        let legacy = ProtocolVersion::V_2025_11_25;
        let older = ProtocolVersion::V_2025_06_18;
        let form = |declared, version: Option<&ProtocolVersion>, answered| {
            connect_form(declared, version, answered)
        };
        assert_eq!(
            form(true, Some(&modern), false),
            Some(ConnectForm::InputRequired)
        );
        assert_eq!(form(false, Some(&modern), false), None, "not declared");
        assert_eq!(
            form(true, Some(&modern), true),
            None,
            "the retry answers it"
        );
        assert_eq!(form(false, Some(&legacy), false), Some(ConnectForm::Error));
        assert_eq!(form(false, Some(&older), false), None, "no URL mode then");
        assert_eq!(form(true, None, false), None);
    }

    #[test]
    fn an_accounts_elicitation_sends_the_person_to_the_connect_url_and_asks_nothing() {
        use crate::app::account_gate::Why;
        let request = axum::http::Request::builder()
            .header("host", "127.0.0.1:8080")
            .body(())
            .unwrap();
        let server = ApprovalLink::of(&request.into_parts().0).unwrap();
        let needed = Unusable {
            secret_name: "PERSON_A".into(),
            integration_id: "hub".into(),
            why: Why::NeedsReauth(None),
        };
        let now = steward_core::Millis(0);
        let started = Started {
            session: steward_store::ConnectionSession {
                id: "cs_01".into(),
                env_id: steward_core::EnvironmentId::parse("env_01hx").unwrap(),
                integration_id: "hub".into(),
                secret_name: "PERSON_A".into(),
                description: None,
                state_digest: String::new(),
                verifier_sealed: String::new(),
                redirect_uri: String::new(),
                status: steward_store::SessionStatus::Pending,
                reason: None,
                created_by: String::new(),
                created_at: now,
                expires_at: now,
                updated_at: now,
            },
            connect_url: "https://idp.example/authorize?state=s".into(),
        };
        let modern = ConnectLink {
            server: server.clone(),
            form: ConnectForm::InputRequired,
        };
        assert_eq!(
            modern.callback_url(),
            "http://127.0.0.1:8080/api/v2/connections/callback"
        );
        let result = serde_json::to_value(modern.elicit(&needed, &started).unwrap()).unwrap();
        assert_eq!(result["resultType"], "input_required");
        let params = &result["inputRequests"][CONNECT_KEY]["params"];
        assert_eq!(params["mode"], "url");
        assert_eq!(params["url"], "https://idp.example/authorize?state=s");
        assert!(params["message"].as_str().unwrap().contains("PERSON_A"));
        assert!(params.get("requestedSchema").is_none());

        let legacy = ConnectLink {
            server,
            form: ConnectForm::Error,
        };
        let error = legacy.elicit(&needed, &started).unwrap_err();
        assert_eq!(error.code, URL_ELICITATION_REQUIRED);
        let elicitation = &error.data.unwrap()["elicitations"][0];
        assert_eq!(elicitation["mode"], "url");
        assert_eq!(elicitation["elicitationId"], "cs_01");
        assert_eq!(elicitation["url"], "https://idp.example/authorize?state=s");
    }
}
