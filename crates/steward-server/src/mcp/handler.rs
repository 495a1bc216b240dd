//! The rmcp server handler. One is made per HTTP request (the transport is stateless); it reads
//! the principal the guard authenticated from that request and holds nothing between requests, so any
//! replica can answer any request.

use super::call;
use super::result::{Envelope, Status};
use crate::app::Principal;
use crate::progress::Progress;
use crate::state::AppState;
use axum::http::request::Parts;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::Peer;
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};

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

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
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
        let envelope = call::call(
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
            notifier.finish(&envelope).await;
        }
        Ok(envelope.into_call_result().into())
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
