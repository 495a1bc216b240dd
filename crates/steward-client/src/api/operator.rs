//! The operator's side of `/api/v2`: one typed call per thing the `steward` CLI's operator
//! commands ask a running server (approvals, effects, invocations, actions, the kill switch,
//! policy files, webhook dead letters), answering the same `steward_wire` views the server
//! writes. Views name each key they carry beside its id (`requestedByName`, `keyName`...), so
//! the CLI never asks who a key is.
//!
//! Unlike [`super::StewardApi`] (an agent's client, which retries with the same
//! `Idempotency-Key` until a restart of Steward is ridden out), an operator's call is sent once:
//! a person is waiting at a terminal and reads the refusal or the cause at once. Every write
//! still carries the `Idempotency-Key` the caller chose, so a request the network cut off can be
//! told apart from one never sent.
//!
//! Each answer keeps the envelope's `data` as it came ([`Answer::data`]): what `--json` prints is
//! the API's JSON, not a re-encoding of the view.

use super::operator_error::{OperatorError, Unreachable};
use super::OPERATOR_REQUEST_TIMEOUT_S;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::time::Duration;
use steward_core::{percent_encode, Decision, IdempotencyKey};
use steward_wire::{
    Action, Approval, ApprovalChannel, DeadLetter, Decided, Deleted, Effect, Environment, Hold,
    Identity, Invocation, PolicyFileApplied, PolicyFilePlan, PolicyFileTest, RedeliveryRequested,
    UnkeyedInvokes,
};

/// The page an operator's listing reads: the server's largest (`PAGE_LIMIT_MAX`).
const LIST_LIMIT: &str = "200";

/// The dead-letter listing's page: the newest hundred, as the console shows them.
const DEAD_LETTER_LIMIT: &str = "100";

/// An answer: the typed view, and the envelope's `data` it was read from.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer<T> {
    pub view: T,
    /// The envelope's `data`, exactly as the server sent it.
    pub data: Value,
}

/// Which invocations to list.
#[derive(Debug, Clone, Default)]
pub struct InvocationFilter {
    /// Only this action's (name or id).
    pub action: Option<String>,
    /// Only this status (`pending_approval`, `running`, `succeeded`, ...).
    pub status: Option<String>,
}

/// Which effects to list.
#[derive(Debug, Clone, Default)]
pub struct EffectFilter {
    /// Only the ones that still need someone (`unknown` or still dispatching).
    pub unresolved: bool,
    /// Only this outcome (`not_dispatched`, `pending`, `succeeded`, `failed`, `unknown`).
    pub outcome: Option<String>,
}

/// A person's settlement of an unresolved effect.
#[derive(Debug, Clone)]
pub struct Resolution {
    /// `succeeded` or `failed`.
    pub outcome: String,
    /// What was checked, kept as evidence.
    pub reason: String,
    /// The provider's id for the write, if found.
    pub external_reference: Option<String>,
}

/// An operator's client: one server, one key, one attempt per call.
#[derive(Clone)]
pub struct Operator {
    http: reqwest::Client,
    server: reqwest::Url,
    key: String,
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a credential: never printed.
        f.debug_struct("Operator")
            .field("server", &self.server.as_str())
            .finish_non_exhaustive()
    }
}

impl Operator {
    /// A client for the server at `server` (its root; `/api/v2` is added) with the API key
    /// `key`.
    pub fn new(server: reqwest::Url, key: &str) -> Result<Operator, OperatorError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(OPERATOR_REQUEST_TIMEOUT_S))
            .build()
            .map_err(|e| OperatorError::Client(e.to_string()))?;
        Ok(Operator {
            http,
            server,
            key: key.to_string(),
        })
    }

    /// `GET /auth/identity`: the calling key, with its name.
    pub async fn identity(&self) -> Result<Answer<Identity>, OperatorError> {
        self.read("the identity", "/auth/identity", &[]).await
    }

    /// `GET /environment`: the key's environment and whether it is halted.
    pub async fn environment(&self) -> Result<Answer<Environment>, OperatorError> {
        self.read("the environment", "/environment", &[]).await
    }

    /// `POST /environment/halt`: every call of the environment stops before its provider.
    pub async fn halt(
        &self,
        reason: &str,
        key: &IdempotencyKey,
    ) -> Result<Answer<Environment>, OperatorError> {
        let body = json!({ "reason": reason });
        self.write("the environment", "/environment/halt", &body, key)
            .await
    }

    /// `POST /environment/resume`: parked calls dispatch once each.
    pub async fn resume(&self, key: &IdempotencyKey) -> Result<Answer<Environment>, OperatorError> {
        self.write("the environment", "/environment/resume", &json!({}), key)
            .await
    }

    /// `PATCH /environment`: what a governed invoke with neither an operation key nor an
    /// `Idempotency-Key` gets in the key's environment (needs `environments:halt`).
    pub async fn set_unkeyed_invokes(
        &self,
        setting: UnkeyedInvokes,
        key: &IdempotencyKey,
    ) -> Result<Answer<Environment>, OperatorError> {
        let body = json!({ "unkeyedInvokes": setting });
        let request = self
            .http
            .patch(self.url("/environment")?)
            .header("idempotency-key", key.as_str())
            .json(&body);
        let data = self.send(request).await?;
        self.typed("the environment", data)
    }

    /// `GET /approvals`: the newest page, of one status or (`None`) of all.
    pub async fn approvals(
        &self,
        status: Option<&str>,
    ) -> Result<Answer<Vec<Approval>>, OperatorError> {
        let mut query = vec![("limit", LIST_LIMIT.to_string())];
        query.extend(status.map(|s| ("status", s.to_string())));
        self.read("the approvals", "/approvals", &query).await
    }

    /// `GET /approvals/{id}`.
    pub async fn approval(&self, id: &str) -> Result<Answer<Approval>, OperatorError> {
        let path = format!("/approvals/{}", percent_encode(id));
        self.read("the approval", &path, &[]).await
    }

    /// `POST /approvals/{id}/approve|deny`: the approval after the decision and the invocation
    /// it gated as the decision's dispatch left it. A decision on a settled approval is answered
    /// with the approval unchanged.
    pub async fn decide(
        &self,
        id: &str,
        decision: Decision,
        note: Option<&str>,
        key: &IdempotencyKey,
    ) -> Result<Answer<Decided>, OperatorError> {
        let verb = match decision {
            Decision::Approve => "approve",
            Decision::Deny => "deny",
        };
        let path = format!("/approvals/{}/{verb}", percent_encode(id));
        self.write("the decision", &path, &json!({ "note": note }), key)
            .await
    }

    /// `GET /actions/invocations`: the newest page, narrowed by `filter`.
    pub async fn invocations(
        &self,
        filter: &InvocationFilter,
    ) -> Result<Answer<Vec<Invocation>>, OperatorError> {
        let mut query = vec![("limit", LIST_LIMIT.to_string())];
        query.extend(filter.action.clone().map(|a| ("action", a)));
        query.extend(filter.status.clone().map(|s| ("status", s)));
        self.read("the invocations", "/actions/invocations", &query)
            .await
    }

    /// `GET /actions/invocations/{id}`.
    pub async fn invocation(&self, id: &str) -> Result<Answer<Invocation>, OperatorError> {
        let path = format!("/actions/invocations/{}", percent_encode(id));
        self.read("the invocation", &path, &[]).await
    }

    /// `GET /actions/effects`: the newest page, narrowed by `filter`.
    pub async fn effects(
        &self,
        filter: &EffectFilter,
    ) -> Result<Answer<Vec<Effect>>, OperatorError> {
        let mut query = vec![("limit", LIST_LIMIT.to_string())];
        if filter.unresolved {
            query.push(("unresolved", "true".into()));
        }
        query.extend(filter.outcome.clone().map(|o| ("outcome", o)));
        self.read("the effects", "/actions/effects", &query).await
    }

    /// `GET /actions/effects/{id}`: with its attempts and evidence.
    pub async fn effect(&self, id: &str) -> Result<Answer<Effect>, OperatorError> {
        self.read("the effect", &effect_path(id, ""), &[]).await
    }

    /// `POST /actions/effects/{id}/reconcile`: asks the provider, read-only, what became of it.
    pub async fn reconcile(
        &self,
        id: &str,
        key: &IdempotencyKey,
    ) -> Result<Answer<Effect>, OperatorError> {
        let path = effect_path(id, "/reconcile");
        self.write("the effect", &path, &json!({}), key).await
    }

    /// `POST /actions/effects/{id}/resolve`: a person settles it, with a reason.
    pub async fn resolve(
        &self,
        id: &str,
        resolution: &Resolution,
        key: &IdempotencyKey,
    ) -> Result<Answer<Effect>, OperatorError> {
        let body = json!({
            "outcome": resolution.outcome,
            "reason": resolution.reason,
            "externalReference": resolution.external_reference,
        });
        let path = effect_path(id, "/resolve");
        self.write("the effect", &path, &body, key).await
    }

    /// `GET /actions`: the environment's actions.
    pub async fn actions(&self) -> Result<Answer<Vec<Action>>, OperatorError> {
        self.read("the actions", "/actions", &[]).await
    }

    /// `GET /actions/{ref}`: one action by name or id.
    pub async fn action(&self, reference: &str) -> Result<Answer<Action>, OperatorError> {
        let path = format!("/actions/{}", percent_encode(reference));
        self.read("the action", &path, &[]).await
    }

    /// `GET /actions/{ref}/versions`: every version of the action.
    pub async fn action_versions(
        &self,
        reference: &str,
    ) -> Result<Answer<Vec<Action>>, OperatorError> {
        let path = format!("/actions/{}/versions", percent_encode(reference));
        self.read("the action's versions", &path, &[]).await
    }

    /// `POST /approval-policies/files/plan`: what applying the file would change, and the
    /// digest that applies exactly that.
    pub async fn plan_policy_file(
        &self,
        source: &str,
        key: &IdempotencyKey,
    ) -> Result<Answer<PolicyFilePlan>, OperatorError> {
        let body = json!({ "source": source });
        self.write(
            "the policy file's plan",
            "/approval-policies/files/plan",
            &body,
            key,
        )
        .await
    }

    /// `POST /approval-policies/files/apply`: exactly the plan whose digest is `digest`, or
    /// `STALE_PLAN` if anything moved since.
    pub async fn apply_policy_file(
        &self,
        source: &str,
        digest: &str,
        note: Option<&str>,
        key: &IdempotencyKey,
    ) -> Result<Answer<PolicyFileApplied>, OperatorError> {
        let body = json!({ "source": source, "digest": digest, "changeNote": note });
        self.write(
            "the policy file's apply",
            "/approval-policies/files/apply",
            &body,
            key,
        )
        .await
    }

    /// `POST /approval-policies/files/test`: `cases` decided against the set `source` would
    /// leave; nothing is written.
    pub async fn test_policy_file(
        &self,
        source: &str,
        cases: &str,
        key: &IdempotencyKey,
    ) -> Result<Answer<PolicyFileTest>, OperatorError> {
        let body = json!({ "source": source, "cases": cases });
        self.write(
            "the policy file's test",
            "/approval-policies/files/test",
            &body,
            key,
        )
        .await
    }

    /// `GET /dlq`: the newest webhook dead letters.
    pub async fn dead_letters(&self) -> Result<Answer<Vec<DeadLetter>>, OperatorError> {
        let query = [("limit", DEAD_LETTER_LIMIT.to_string())];
        self.read("the dead letters", "/dlq", &query).await
    }

    /// `POST /dlq/{id}/redeliver`: one dead letter, sent again once.
    pub async fn redeliver_dead_letter(
        &self,
        id: &str,
        key: &IdempotencyKey,
    ) -> Result<Answer<DeadLetter>, OperatorError> {
        let path = format!("/dlq/{}/redeliver", percent_encode(id));
        self.write("the dead letter", &path, &json!({}), key).await
    }

    /// `POST /events/subscriptions/{id}/dlq/redeliver`: every dead letter of the subscription
    /// not already requested.
    pub async fn redeliver_subscription(
        &self,
        subscription: &str,
        key: &IdempotencyKey,
    ) -> Result<Answer<RedeliveryRequested>, OperatorError> {
        let path = format!(
            "/events/subscriptions/{}/dlq/redeliver",
            percent_encode(subscription)
        );
        self.write("the redelivery", &path, &json!({}), key).await
    }

    /// `GET /approval-channels`: the environment's approval channels.
    pub async fn approval_channels(&self) -> Result<Answer<Vec<ApprovalChannel>>, OperatorError> {
        self.read("the approval channels", "/approval-channels", &[])
            .await
    }

    /// `POST /approval-channels`: adds a channel (`body` is an `ApprovalChannelBody`; its
    /// credential is sent once and never shown back).
    pub async fn add_approval_channel(
        &self,
        body: &Value,
        key: &IdempotencyKey,
    ) -> Result<Answer<ApprovalChannel>, OperatorError> {
        self.write("the approval channel", "/approval-channels", body, key)
            .await
    }

    /// `DELETE /approval-channels/{id}`: removes a channel.
    pub async fn remove_approval_channel(
        &self,
        id: &str,
        key: &IdempotencyKey,
    ) -> Result<Answer<Deleted>, OperatorError> {
        let path = format!("/approval-channels/{}", percent_encode(id));
        let request = self
            .http
            .delete(self.url(&path)?)
            .header("idempotency-key", key.as_str());
        let data = self.send(request).await?;
        self.typed("the removed channel", data)
    }

    /// `GET /holds`: the environment's holds, oldest first (needs `environments:halt`).
    pub async fn holds(&self) -> Result<Answer<Vec<Hold>>, OperatorError> {
        self.read("the holds", "/holds", &[]).await
    }

    /// `POST /holds`: holds an action, an operation key, or both (`body` is a `HoldBody`).
    pub async fn hold(
        &self,
        body: &Value,
        key: &IdempotencyKey,
    ) -> Result<Answer<Hold>, OperatorError> {
        self.write("the hold", "/holds", body, key).await
    }

    /// `POST /holds/{id}/release`: releases a hold; what it parked dispatches once each.
    pub async fn release_hold(
        &self,
        id: &str,
        key: &IdempotencyKey,
    ) -> Result<Answer<Hold>, OperatorError> {
        let path = format!("/holds/{}/release", percent_encode(id));
        self.write("the released hold", &path, &json!({}), key)
            .await
    }

    fn url(&self, path: &str) -> Result<reqwest::Url, OperatorError> {
        self.server
            .join(&format!("/api/v2{path}"))
            .map_err(|e| OperatorError::Client(format!("the request path {path:?}: {e}")))
    }

    fn get(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<reqwest::RequestBuilder, OperatorError> {
        Ok(self.http.get(self.url(path)?).query(query))
    }

    fn post(
        &self,
        path: &str,
        body: &Value,
        key: &IdempotencyKey,
    ) -> Result<reqwest::RequestBuilder, OperatorError> {
        Ok(self
            .http
            .post(self.url(path)?)
            .header("idempotency-key", key.as_str())
            .json(body))
    }

    async fn read<T: DeserializeOwned>(
        &self,
        what: &'static str,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<Answer<T>, OperatorError> {
        let data = self.send(self.get(path, query)?).await?;
        self.typed(what, data)
    }

    async fn write<T: DeserializeOwned>(
        &self,
        what: &'static str,
        path: &str,
        body: &Value,
        key: &IdempotencyKey,
    ) -> Result<Answer<T>, OperatorError> {
        let data = self.send(self.post(path, body, key)?).await?;
        self.typed(what, data)
    }

    fn typed<T: DeserializeOwned>(
        &self,
        what: &'static str,
        data: Value,
    ) -> Result<Answer<T>, OperatorError> {
        match T::deserialize(&data) {
            Ok(view) => Ok(Answer { view, data }),
            Err(e) => Err(OperatorError::Unexpected {
                server: self.server.to_string(),
                what,
                cause: e.to_string(),
            }),
        }
    }

    /// Sends once; the envelope's `data`, or why there is none.
    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Value, OperatorError> {
        let server = self.server.to_string();
        let response = request.bearer_auth(&self.key).send().await.map_err(|e| {
            OperatorError::Unreachable {
                server: server.clone(),
                why: Unreachable::of(&e),
            }
        })?;
        let status = response.status().as_u16();
        let body: Value = response.json().await.map_err(|e| OperatorError::NotJson {
            server: server.clone(),
            status,
            cause: e.without_url().to_string(),
        })?;
        envelope(&server, status, body)
    }
}

fn effect_path(id: &str, rest: &str) -> String {
    format!("/actions/effects/{}{rest}", percent_encode(id))
}

/// The `data` of a success envelope, the refusal of an error envelope, or "not Steward".
fn envelope(server: &str, status: u16, mut body: Value) -> Result<Value, OperatorError> {
    match body.get("success") {
        Some(Value::Bool(true)) => Ok(body
            .as_object_mut()
            .and_then(|o| o.remove("data"))
            .unwrap_or(Value::Null)),
        Some(Value::Bool(false)) => {
            let text = |pointer: &str, otherwise: &str| {
                body.pointer(pointer)
                    .and_then(Value::as_str)
                    .unwrap_or(otherwise)
                    .to_string()
            };
            Err(OperatorError::Refused {
                status,
                code: text("/error/code", "unknown"),
                message: text("/error/message", "the server refused the request"),
                details: body.pointer("/error/details").cloned().unwrap_or_default(),
            })
        }
        _ => Err(OperatorError::NotSteward {
            server: server.to_string(),
            status,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::SERVER_DEFAULT;

    #[test]
    fn an_envelope_is_its_data_its_refusal_or_not_stewards() {
        let server = "http://127.0.0.1:4000/";
        let data = envelope(
            server,
            200,
            json!({"success": true, "data": {"id": "apr_1"}}),
        );
        assert_eq!(data.unwrap(), json!({"id": "apr_1"}));

        let refused = envelope(
            server,
            403,
            json!({"success": false, "error": {"code": "FORBIDDEN", "message": "no",
                                                "details": {"scope": "approvals:decide"}}}),
        )
        .unwrap_err();
        match refused {
            OperatorError::Refused {
                status,
                code,
                message,
                details,
            } => {
                assert_eq!(
                    (status, code.as_str(), message.as_str()),
                    (403, "FORBIDDEN", "no")
                );
                assert_eq!(details["scope"], "approvals:decide");
            }
            other => panic!("not a refusal: {other:?}"),
        }

        let foreign = envelope(server, 200, json!({"ok": true})).unwrap_err();
        assert!(
            foreign.to_string().contains("is it a Steward server"),
            "{foreign}"
        );
        assert!(foreign.to_string().contains(server), "{foreign}");
    }

    #[test]
    fn data_in_another_shape_is_named_and_the_json_is_kept_when_it_reads() {
        let operator = Operator::new(
            reqwest::Url::parse(SERVER_DEFAULT).unwrap(),
            "stw_not_checked",
        )
        .unwrap();
        let wrong = operator
            .typed::<Environment>("the environment", json!({"id": 1}))
            .unwrap_err();
        let text = wrong.to_string();
        assert!(
            text.contains("the environment") && text.contains("same version"),
            "{text}"
        );
        let data = json!({"id": "env_1", "name": "test", "halted": true,
                          "haltReason": "incident 42"});
        let read = operator
            .typed::<Environment>("the environment", data.clone())
            .unwrap();
        assert_eq!(read.view.halt_reason.as_deref(), Some("incident 42"));
        assert_eq!(read.data, data, "the API's JSON as it came");
    }

    #[test]
    fn the_key_is_never_printed() {
        let operator = Operator::new(
            reqwest::Url::parse(SERVER_DEFAULT).unwrap(),
            "stw_secret_value",
        )
        .unwrap();
        let shown = format!("{operator:?}");
        assert!(!shown.contains("stw_secret_value"), "{shown}");
        assert!(shown.contains("127.0.0.1:4000"), "{shown}");
    }
}
