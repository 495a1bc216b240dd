//! The rmcp server handler. One is made per HTTP request (the transport is stateless); it reads
//! the principal the guard authenticated from that request and holds nothing between requests, so any
//! replica can answer any request.

use super::call::{self, Cancelled};
use super::elicit;
use super::result::{Envelope, Status};
use super::task::{Polled, TaskIdentity};
use crate::app::account_gate::Unusable;
use crate::app::connection_sessions::{self, Started};
use crate::app::Principal;
use crate::progress::Progress;
use crate::state::AppState;
use axum::http::request::Parts;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities,
    CreateTaskResult, GetTaskParams, GetTaskResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ProtocolVersion,
    ServerCapabilities, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::Peer;
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use std::borrow::Cow;

/// What every host shows the model about this server.
const INSTRUCTIONS: &str = "Each tool is a governed action of Steward. Governed tools take an operationKey (in _meta \"steward/operationKey\" when a tool's description says so, because its own input has an operationKey field): choose one per business operation and reuse it on every retry of that operation, so it runs at most once. Every result has a status and an instruction: follow the instruction (for example, do not retry an unknown outcome; call again with the same operationKey to observe an approval).";

#[derive(Clone)]
pub struct Handler {
    pub state: AppState,
    /// What a governed call without an operation key does.
    pub keys: super::derive::KeyPolicy,
}

/// The principal the guard authenticated for this request (`http.rs`): the request's one
/// authentication.
fn principal(context: &RequestContext<RoleServer>) -> Result<Principal, ErrorData> {
    let parts = context
        .extensions
        .get::<Parts>()
        .ok_or_else(|| ErrorData::invalid_request("no HTTP request", None))?;
    parts
        .extensions
        .get::<Principal>()
        .cloned()
        .ok_or_else(|| ErrorData::invalid_request("a bearer key is required", None))
}

/// The error every task request answers for a task id that names no task of the caller's
/// (the extension's "invalid or nonexistent `taskId`").
fn no_such_task() -> ErrorData {
    ErrorData::invalid_params("Failed to retrieve task: Task not found", None)
}

/// An application error in a task request: its message, never its internals.
fn task_error(e: crate::error::ApiError) -> ErrorData {
    ErrorData::internal_error(e.message, None)
}

/// The task `task_id` names, as `context`'s caller may see it.
async fn find_task(
    state: &AppState,
    context: &RequestContext<RoleServer>,
    task_id: &str,
) -> Result<(Principal, TaskIdentity, call::Called), ErrorData> {
    let principal = principal(context)?;
    let identity = TaskIdentity::parse(task_id).ok_or_else(no_such_task)?;
    let called = call::task(state, &principal, &identity)
        .await
        .map_err(task_error)?
        .ok_or_else(no_such_task)?;
    Ok((principal, identity, called))
}

impl ServerHandler for Handler {
    /// The revisions served: up to 2026-07-28 (the 2025-06-18 and 2025-11-25 hosts use
    /// `initialize`; 2026-07-28 clients send the version and capabilities with each request),
    /// and never a later one rmcp learns before Steward is tested with it.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28))
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("steward", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let principal = principal(&context)?;
        let tools = call::list(&self.state, &principal)
            .await
            .map_err(|e| ErrorData::internal_error(e.message, None))?;
        let tools = tools
            .into_iter()
            .map(serde_json::from_value::<Tool>)
            .collect::<Result<_, _>>()
            .map_err(|e| ErrorData::internal_error(format!("tool: {e}"), None))?;
        Ok(ListToolsResult {
            tools,
            ..Default::default()
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let principal = principal(&context)?;
        let meta_key = request
            .meta
            .as_ref()
            .and_then(|m| m.0 .0.get(call::META_OPERATION_KEY))
            .or_else(|| context.meta.0 .0.get(call::META_OPERATION_KEY))
            .cloned();
        let token = request
            .meta
            .as_ref()
            .and_then(|m| m.get_progress_token())
            .or_else(|| context.meta.get_progress_token());
        let (progress, notifier) = match token {
            Some(token) => {
                let (progress, stages) = Progress::channel();
                (progress, Some(Notifier::start(&context, token, stages)))
            }
            None => (Progress::none(), None),
        };
        let capabilities = context.client_capabilities();
        let wants_task = capabilities
            .as_ref()
            .is_some_and(ClientCapabilities::supports_tasks);
        let approval_link = elicit::approval_link(&context, capabilities.as_ref(), &request);
        let connect_link = elicit::connect_link(&context, capabilities.as_ref(), &request);
        let called = call::call(
            &self.state,
            &self.keys,
            &principal,
            &request.name,
            request.arguments,
            meta_key.as_ref(),
            progress,
        )
        .await?;
        if let Some(notifier) = notifier {
            notifier.finish(&called.envelope).await;
        }
        if let (Some(needed), Some(link)) = (&called.needs_account, &connect_link) {
            if let Some(started) = self.start_session(&principal, needed, link).await {
                return link
                    .elicit(needed, &started)
                    .map(CallToolResponse::InputRequired);
            }
        }
        let Some(recorded) = called.recorded else {
            return Ok(called.envelope.into_call_result().into());
        };
        if wants_task {
            let polled = Polled::of(called.envelope, recorded.withdrawn);
            let task = polled.task(
                &recorded.identity.task_id(),
                recorded.created,
                recorded.updated,
            );
            return Ok(CallToolResponse::Task(CreateTaskResult::new(task)));
        }
        if let (Some(approval), Some(link)) = (&recorded.pending_approval, approval_link) {
            return Ok(CallToolResponse::InputRequired(link.elicit(approval)));
        }
        Ok(called.envelope.into_call_result().into())
    }

    /// `tasks/get`: the call's invocation read back by its identity, its status mapped
    /// (`task.rs`).
    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let (_, identity, called) = find_task(&self.state, &context, &request.task_id).await?;
        let recorded = called.recorded.ok_or_else(no_such_task)?;
        let polled = Polled::of(called.envelope, recorded.withdrawn);
        Ok(GetTaskResult::new(polled.detailed(
            &identity.task_id(),
            recorded.created,
            recorded.updated,
        )))
    }

    /// `tasks/update`: Steward's tasks never ask for input (an approval is given in the
    /// console), so every response is for no outstanding request and is ignored, as the
    /// extension says; the task must exist.
    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        find_task(&self.state, &context, &request.task_id).await?;
        Ok(())
    }

    /// `tasks/cancel`: before dispatch (awaiting approval) the invocation is withdrawn and never
    /// runs; after, the call goes on and the client only stops waiting (the next `tasks/get`
    /// says how it ended).
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let principal = principal(&context)?;
        let identity = TaskIdentity::parse(&request.task_id).ok_or_else(no_such_task)?;
        let cancelled = call::cancel(&self.state, &principal, &identity)
            .await
            .map_err(|e| {
                if e.status == axum::http::StatusCode::NOT_FOUND {
                    ErrorData::invalid_params(
                        "only the key that made this call may withdraw it before approval",
                        None,
                    )
                } else {
                    task_error(e)
                }
            })?
            .ok_or_else(no_such_task)?;
        tracing::debug!(?cancelled, "tasks/cancel");
        match cancelled {
            Cancelled::Withdrawn | Cancelled::TooLate => Ok(()),
        }
    }
}

impl Handler {
    /// A consent session for the account a call needs; `None` (logged) when none could be
    /// started, and the call answers its refusal without a link.
    async fn start_session(
        &self,
        principal: &Principal,
        needed: &Unusable,
        link: &elicit::ConnectLink,
    ) -> Option<Started> {
        let callback = link.callback_url();
        match connection_sessions::start_for_call(&self.state, principal, needed, &callback).await {
            Ok(started) => Some(started),
            Err(e) => {
                tracing::warn!(code = e.code, message = %e.message, account = %needed.secret_name, "no consent session for an MCP call's account");
                None
            }
        }
    }
}

/// Sends a call's stages as `notifications/progress` to a client that asked for them with a
/// progress token, then the final stage, all before the result (so the HTTP answer becomes an
/// event stream for that request, and stdio writes them first).
struct Notifier {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    forwarding: tokio::task::JoinHandle<u32>,
}

impl Notifier {
    fn start(
        context: &RequestContext<RoleServer>,
        token: ProgressToken,
        mut stages: tokio::sync::mpsc::UnboundedReceiver<crate::progress::Stage>,
    ) -> Notifier {
        let (peer, sent_token) = (context.peer.clone(), token.clone());
        let forwarding = tokio::spawn(async move {
            let mut sent = 0;
            while let Some(stage) = stages.recv().await {
                sent += 1;
                notify(&peer, &sent_token, sent, stage.message()).await;
            }
            sent
        });
        Notifier {
            peer: context.peer.clone(),
            token,
            forwarding,
        }
    }

    /// Waits for the stages the invoke reported (its reporter is gone once the call returned),
    /// then reports where the call ended.
    async fn finish(self, envelope: &Envelope) {
        let sent = self.forwarding.await.unwrap_or(0);
        let last = match envelope.status {
            Status::PendingApproval => "awaiting approval".to_string(),
            status => format!("settled: {}", status.as_str()),
        };
        notify(&self.peer, &self.token, sent + 1, &last).await;
    }
}

/// One progress notification; a client that went away only misses it.
async fn notify(peer: &Peer<RoleServer>, token: &ProgressToken, progress: u32, message: &str) {
    let param =
        ProgressNotificationParam::new(token.clone(), f64::from(progress)).with_message(message);
    if let Err(e) = peer.notify_progress(param).await {
        tracing::debug!(error = %e, "a progress notification was not delivered");
    }
}
