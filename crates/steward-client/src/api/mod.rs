//! Typed async clients for Steward's `/api/v2`. [`StewardApi`] is an agent's: actions, invoke,
//! invocations, effects and approvals; every write carries an `Idempotency-Key` chosen by the
//! caller, and the client's own retries (see [`RetryPolicy`]) resend it unchanged. [`Operator`]
//! is an operator's (the `steward` CLI's): one call per operator command, answering the
//! `steward_wire` views, sent once.

mod error;
mod operator;
mod operator_error;
mod transport;
mod wire;

pub use error::ApiError;
pub use operator::{Answer, EffectFilter, InvocationFilter, Operator, Resolution};
pub use operator_error::{OperatorError, Unreachable};
pub use transport::{RetryPolicy, BACKOFF_INITIAL_MS, BACKOFF_MAX_MS, TRANSPORT_ATTEMPTS_MAX};
pub use wire::{Approval, ApprovalStatus, Invocation, Reconcile};

use crate::crash;
use serde_json::{json, Value};
use std::time::Duration;
use steward_core::{
    percent_encode, ApprovalId, CrashPoint, EffectId, IdempotencyKey, InvocationId,
    InvocationStatus, OperationKey,
};
use transport::{send, Reply};

/// The deadline of one ordinary request, in seconds: the official SDK's client timeout, longer
/// than Steward's own provider deadline (10 s by default) so the honest answer arrives first.
pub const REQUEST_TIMEOUT_S: u64 = 30;
/// The longest approval long poll the server grants, in seconds (it clamps to this).
pub const LONG_POLL_WAIT_S_MAX: u64 = 55;
/// Extra time a long poll's HTTP deadline allows beyond the wait it asks for, in seconds.
const LONG_POLL_SLACK_S: u64 = 10;
/// The server an operator talks to unless told otherwise: where `steward serve` listens by
/// default (the CLI's test checks the two agree).
pub const SERVER_DEFAULT: &str = "http://127.0.0.1:4000";
/// How long one operator request may take, in seconds: longer than the server's dispatch
/// deadline, so an approval that dispatches answers before the command gives up.
pub const OPERATOR_REQUEST_TIMEOUT_S: u64 = 60;
/// The largest page the server returns; listings here read one page of this size.
const PAGE_LIMIT_MAX: u32 = 200;

/// One invoke request body.
#[derive(Debug, Clone, Copy)]
pub struct InvokeRequest<'a> {
    pub input: &'a Value,
    pub operation_key: Option<&'a OperationKey>,
    pub retry_of: Option<&'a InvocationId>,
}

/// A client bound to one server and one API key.
#[derive(Clone)]
pub struct StewardApi {
    base: String,
    key: String,
    http: reqwest::Client,
    retry: RetryPolicy,
}

impl std::fmt::Debug for StewardApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a credential: never printed.
        f.debug_struct("StewardApi")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl StewardApi {
    /// `base_url` is the server's root (`http://127.0.0.1:4000`); `key` a Steward API key.
    pub fn new(base_url: &str, key: &str) -> Result<StewardApi, ApiError> {
        let base = base_url.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ApiError::Config(format!(
                "the server URL must start with http:// or https://, not {base:?}"
            )));
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(REQUEST_TIMEOUT_S))
            .build()
            .map_err(|e| ApiError::Config(e.to_string()))?;
        Ok(StewardApi {
            base: format!("{base}/api/v2"),
            key: key.to_string(),
            http,
            retry: RetryPolicy::default(),
        })
    }

    /// Replaces the retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> StewardApi {
        self.retry = retry;
        self
    }

    fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        idempotency_key: Option<&IdempotencyKey>,
    ) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key);
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key.as_str());
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        request
    }

    async fn get(&self, path: &str) -> Result<Reply, ApiError> {
        send(
            &self.retry,
            || self.request(reqwest::Method::GET, path, None, None),
            || {},
        )
        .await
    }

    async fn post(
        &self,
        path: &str,
        body: &Value,
        idempotency_key: &IdempotencyKey,
    ) -> Result<Reply, ApiError> {
        send(
            &self.retry,
            || {
                self.request(
                    reqwest::Method::POST,
                    path,
                    Some(body),
                    Some(idempotency_key),
                )
            },
            || {},
        )
        .await
    }

    /// `GET /auth/identity`: the key's id, environment and scopes.
    pub async fn identity(&self) -> Result<Value, ApiError> {
        Ok(self.get("/auth/identity").await?.data)
    }

    /// `POST /actions/{ref}/invoke`. Answers with the recorded invocation whatever its status
    /// (202 when parked for approval). Resending the same key and input returns the same
    /// invocation; an error means Steward refused before any invocation existed.
    pub async fn invoke(
        &self,
        action: &str,
        request: &InvokeRequest<'_>,
        idempotency_key: &IdempotencyKey,
    ) -> Result<Invocation, ApiError> {
        let mut body = json!({ "input": request.input });
        if let Some(key) = request.operation_key {
            body["operationKey"] = json!(key);
        }
        if let Some(retry_of) = request.retry_of {
            body["retryOf"] = json!(retry_of);
        }
        let path = format!("/actions/{}/invoke", percent_encode(action));
        let reply = send(
            &self.retry,
            || {
                self.request(
                    reqwest::Method::POST,
                    &path,
                    Some(&body),
                    Some(idempotency_key),
                )
            },
            // The request is out and Steward has answered; nothing of the answer is read yet.
            || crash::reach(CrashPoint::AfterDispatch),
        )
        .await?;
        Invocation::from_json(reply.data).map_err(ApiError::Malformed)
    }

    /// `GET /actions/invocations/{id}`; `None` when the server has no such invocation.
    pub async fn invocation(&self, id: &InvocationId) -> Result<Option<Invocation>, ApiError> {
        match self.get(&format!("/actions/invocations/{id}")).await {
            Ok(reply) => Invocation::from_json(reply.data)
                .map(Some)
                .map_err(ApiError::Malformed),
            Err(e) if e.status() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `GET /actions/invocations`: the newest page, optionally narrowed to one status.
    pub async fn invocations(
        &self,
        status: Option<InvocationStatus>,
    ) -> Result<Vec<Invocation>, ApiError> {
        let mut path = format!("/actions/invocations?limit={PAGE_LIMIT_MAX}");
        if let Some(status) = status {
            path.push_str(&format!("&status={}", status.as_str()));
        }
        let reply = self.get(&path).await?;
        let items = reply
            .data
            .as_array()
            .ok_or_else(|| ApiError::Malformed("invocations: not a list".into()))?;
        items
            .iter()
            .cloned()
            .map(|v| Invocation::from_json(v).map_err(ApiError::Malformed))
            .collect()
    }

    /// `GET /actions/effects/{id}` with attempts and evidence; `None` when not found.
    pub async fn effect(&self, id: &EffectId) -> Result<Option<Value>, ApiError> {
        match self.get(&format!("/actions/effects/{id}")).await {
            Ok(reply) => Ok(Some(reply.data)),
            Err(e) if e.status() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `POST /actions/effects/{id}/reconcile`: a read-only reconcile on the server. A server
    /// without the endpoint answers 404, reported as [`Reconcile::NotAvailable`].
    pub async fn reconcile(
        &self,
        effect: &EffectId,
        idempotency_key: &IdempotencyKey,
    ) -> Result<Reconcile, ApiError> {
        match self
            .post(
                &format!("/actions/effects/{effect}/reconcile"),
                &json!({}),
                idempotency_key,
            )
            .await
        {
            Ok(reply) => Ok(Reconcile::Ran(reply.data)),
            Err(e) if matches!(e.status(), Some(404 | 405)) => Ok(Reconcile::NotAvailable),
            Err(e) => Err(e),
        }
    }

    /// `GET /approvals/{id}?waitSeconds=N`: answers as soon as a decision lands, or after the
    /// wait (clamped to [`LONG_POLL_WAIT_S_MAX`]) with the approval still pending.
    pub async fn approval(
        &self,
        id: &ApprovalId,
        wait: Duration,
    ) -> Result<Option<Approval>, ApiError> {
        let wait_s = wait.as_secs().min(LONG_POLL_WAIT_S_MAX);
        let path = format!("/approvals/{id}?waitSeconds={wait_s}");
        let timeout = Duration::from_secs(wait_s + LONG_POLL_SLACK_S);
        let reply = send(
            &self.retry,
            || {
                self.request(reqwest::Method::GET, &path, None, None)
                    .timeout(timeout)
            },
            || {},
        )
        .await;
        match reply {
            Ok(reply) => Approval::from_json(reply.data)
                .map(Some)
                .map_err(ApiError::Malformed),
            Err(e) if e.status() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `GET /approvals`: the newest page of approvals (scope `approvals:read`), optionally
    /// narrowed to one status (`pending`, `approved`, `denied`, `expired`).
    pub async fn approvals(&self, status: Option<&str>) -> Result<Vec<Approval>, ApiError> {
        let mut path = format!("/approvals?limit={PAGE_LIMIT_MAX}");
        if let Some(status) = status {
            path.push_str(&format!("&status={}", percent_encode(status)));
        }
        let reply = self.get(&path).await?;
        let items = reply
            .data
            .as_array()
            .ok_or_else(|| ApiError::Malformed("approvals: not a list".into()))?;
        items
            .iter()
            .cloned()
            .map(|v| Approval::from_json(v).map_err(ApiError::Malformed))
            .collect()
    }

    /// `POST /approvals/{id}/approve` (scope `approvals:decide`). Answers the server's data.
    pub async fn approve(
        &self,
        id: &ApprovalId,
        note: &str,
        idempotency_key: &IdempotencyKey,
    ) -> Result<Value, ApiError> {
        let path = format!("/approvals/{id}/approve");
        Ok(self
            .post(&path, &json!({ "note": note }), idempotency_key)
            .await?
            .data)
    }

    /// `POST /approvals/{id}/deny` (scope `approvals:decide`).
    pub async fn deny(
        &self,
        id: &ApprovalId,
        note: &str,
        idempotency_key: &IdempotencyKey,
    ) -> Result<Value, ApiError> {
        let path = format!("/approvals/{id}/deny");
        Ok(self
            .post(&path, &json!({ "note": note }), idempotency_key)
            .await?
            .data)
    }

    /// `GET /actions`: the first page of action definitions.
    pub async fn actions(&self) -> Result<Vec<Value>, ApiError> {
        let reply = self
            .get(&format!("/actions?limit={PAGE_LIMIT_MAX}"))
            .await?;
        match reply.data {
            Value::Array(items) => Ok(items),
            _ => Err(ApiError::Malformed("actions: not a list".into())),
        }
    }

    /// `POST /actions` (scope `actions:write`): creates an action from its definition.
    pub async fn create_action(
        &self,
        definition: &Value,
        idempotency_key: &IdempotencyKey,
    ) -> Result<Value, ApiError> {
        Ok(self
            .post("/actions", definition, idempotency_key)
            .await?
            .data)
    }

    /// `PUT /secrets/{name}`: stores a write-only secret bound to `allowed_hosts`, each
    /// `[https://|http://]host[:port]` (an entry without a port allows only 443 or 80).
    pub async fn put_secret(
        &self,
        name: &str,
        value: &str,
        allowed_hosts: &[&str],
        idempotency_key: &IdempotencyKey,
    ) -> Result<Value, ApiError> {
        let body = json!({ "value": value, "allowedHosts": allowed_hosts });
        let path = format!("/secrets/{}", percent_encode(name));
        Ok(send(
            &self.retry,
            || {
                self.request(
                    reqwest::Method::PUT,
                    &path,
                    Some(&body),
                    Some(idempotency_key),
                )
            },
            || {},
        )
        .await?
        .data)
    }
}
