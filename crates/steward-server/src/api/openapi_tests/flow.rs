//! One real flow through every documented operation, each answer validated against the
//! document: the test that catches a view (`json!` in a handler) drifting from its schema.

use super::drift::{document_json, operations, send_body, state, SECOND_TOKEN, TOKEN};
use crate::state::AppState;
use axum::http::Method;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use Method as M;

/// Drives every documented operation once through a real flow (the provider fixture answering
/// the refund) and checks each answer against the document: its status is documented for the
/// operation and its body validates against that status's schema.
struct Flow {
    state: AppState,
    doc: Value,
    covered: BTreeSet<(String, String)>,
    /// The provider fixture's base URL (`http://127.0.0.1:port/`) and its host and port.
    fixture_url: String,
    fixture_host: String,
}

impl Flow {
    async fn call(
        &mut self,
        token: &str,
        method: Method,
        template: &str,
        path: &str,
        body: Option<Value>,
    ) -> Value {
        let full_template = format!("/api/v2{template}");
        let uri = format!("/api/v2{path}");
        let (status, content_type, reply) =
            send_body(&self.state, method.clone(), &uri, Some(token), body).await;
        let operation = &self.doc["paths"][&full_template][method.as_str().to_ascii_lowercase()];
        assert!(
            !operation.is_null(),
            "{method} {full_template} is not documented"
        );
        let response = &operation["responses"][status.as_str()];
        assert!(
            !response.is_null(),
            "{method} {path} answered {status}, which is not documented: {reply}"
        );
        assert_eq!(content_type, "application/json", "{method} {path}");
        let mut schema = response["content"]["application/json"]["schema"].clone();
        schema["components"] = self.doc["components"].clone();
        let validator = jsonschema::validator_for(&schema)
            .unwrap_or_else(|e| panic!("{method} {full_template} {status}: bad schema: {e}"));
        let errors: Vec<String> = validator
            .iter_errors(&reply)
            .map(|e| format!("{e} at {}", e.instance_path))
            .collect();
        assert!(
            errors.is_empty(),
            "{method} {path} {status} does not match its schema: {errors:?}\n{reply}"
        );
        self.covered
            .insert((full_template, method.as_str().to_string()));
        reply
    }
}

fn id_of(reply: &Value, field: &str) -> String {
    reply["data"][field]
        .as_str()
        .unwrap_or_else(|| panic!("no data.{field} in {reply}"))
        .to_string()
}

impl Flow {
    /// The unauthenticated document, who the key is, the environment, then the refund adapter's secret.
    async fn reads_and_secrets(&mut self) {
        let a = TOKEN;
        self.call(a, M::GET, "/openapi.json", "/openapi.json", None)
            .await;
        self.call(a, M::GET, "/auth/identity", "/auth/identity", None)
            .await;
        self.call(a, M::GET, "/environment", "/environment", None)
            .await;

        let secret = "/secrets/{name}";
        let secret_body = json!({"value": "sk_test_drift", "allowedHosts": [self.fixture_host]});
        self.call(
            a,
            M::PUT,
            secret,
            "/secrets/STRIPE_TEST_KEY",
            Some(secret_body),
        )
        .await;
        self.call(a, M::GET, "/secrets", "/secrets", None).await;
        self.call(a, M::GET, secret, "/secrets/STRIPE_TEST_KEY", None)
            .await;
    }

    /// The refund action on the fixture, an import of a small spec beside it, and edits.
    async fn actions_and_import(&mut self) {
        let a = TOKEN;
        let adapter = json!({"type": "stripe.refund", "credentialSecret": "STRIPE_TEST_KEY",
            "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                       "baseUrl": self.fixture_url}});
        let create = json!({"name": "refund", "adapter": adapter});
        self.call(a, M::POST, "/actions", "/actions", Some(create))
            .await;
        self.call(a, M::GET, "/actions", "/actions", None).await;
        let spec = json!({"openapi": "3.1.0", "info": {"title": "drift", "version": "1"},
            "paths": {"/v1/refunds": {"post": {"operationId": "drift-import",
                "requestBody": {"required": true,
                    "content": {"application/json": {"schema": {"type": "object"}}}},
                "responses": {"200": {"description": "the refund"}}}},
            "/v1/refunds/{id}": {"get": {"responses": {"200": {"description": "the refund"}}}}}});
        let import = json!({"spec": spec, "baseUrl": self.fixture_url, "governed": false});
        let template = "/actions/import";
        let imported = self
            .call(a, M::POST, template, template, Some(import))
            .await;
        assert_eq!(
            imported["data"]["created"][0]["name"],
            json!("drift-import"),
            "{imported}"
        );
        let action = "/actions/{reference}";
        self.call(a, M::GET, action, "/actions/refund", None).await;
        let edit = json!({"description": "a refund"});
        self.call(a, M::PATCH, action, "/actions/refund", Some(edit))
            .await;
        let versions = "/actions/{reference}/versions";
        self.call(a, M::GET, versions, "/actions/refund/versions", None)
            .await;
    }

    /// A preview, refreshed, then bound to an invoke.
    async fn previews(&mut self) {
        let a = TOKEN;
        let preview = json!({"input": {"paymentIntent": "pi_drift_preview", "amount": 100},
                             "ttlSeconds": 60});
        let previews = "/actions/{reference}/previews";
        let made = self
            .call(
                a,
                M::POST,
                previews,
                "/actions/refund/previews",
                Some(preview),
            )
            .await;
        let first = id_of(&made, "id");
        let one_preview = "/actions/previews/{id}";
        self.call(
            a,
            M::GET,
            one_preview,
            &format!("/actions/previews/{first}"),
            None,
        )
        .await;
        let refreshed = self
            .call(
                a,
                M::POST,
                "/actions/previews/{id}/refresh",
                &format!("/actions/previews/{first}/refresh"),
                Some(json!({"ttlSeconds": 60})),
            )
            .await;
        let bound = json!({"input": {"paymentIntent": "pi_drift_preview", "amount": 100},
                           "previewId": id_of(&refreshed, "id")});
        let bound = self
            .call(
                a,
                M::POST,
                "/actions/{reference}/invoke",
                "/actions/refund/invoke",
                Some(bound),
            )
            .await;
        assert_eq!(bound["data"]["status"], json!("succeeded"), "{bound}");
    }

    /// An invoke, its reads, and the recovery operations on its settled effect.
    async fn invoke_and_recover(&mut self) {
        let a = TOKEN;
        let b = SECOND_TOKEN;
        let input = json!({"input": {"paymentIntent": "pi_drift", "amount": 100},
                           "operationKey": "drift-1"});
        let invoke = "/actions/{reference}/invoke";
        let invoked = self
            .call(a, M::POST, invoke, "/actions/refund/invoke", Some(input))
            .await;
        assert_eq!(invoked["data"]["status"], json!("succeeded"), "{invoked}");
        let invocation = id_of(&invoked, "id");
        let effect = id_of(&invoked, "effectId");
        let inv_path = format!("/actions/invocations/{invocation}");
        let eff_path = format!("/actions/effects/{effect}");
        self.call(
            a,
            M::GET,
            "/actions/invocations",
            "/actions/invocations?limit=5",
            None,
        )
        .await;
        self.call(a, M::GET, "/actions/invocations/{id}", &inv_path, None)
            .await;
        let by_action = "/actions/refund/invocations?status=succeeded";
        self.call(
            a,
            M::GET,
            "/actions/{reference}/invocations",
            by_action,
            None,
        )
        .await;
        self.call(
            a,
            M::GET,
            "/actions/effects",
            "/actions/effects?unresolved=false",
            None,
        )
        .await;
        self.call(a, M::GET, "/actions/effects/{id}", &eff_path, None)
            .await;
        // Receipts: issued by a background task this state does not run, so the latest is 404
        // `not_issued` and the lists are empty; each answer is still as documented.
        let receipt = format!("{eff_path}/receipt");
        self.call(a, M::GET, "/actions/effects/{id}/receipt", &receipt, None)
            .await;
        let receipts = format!("{eff_path}/receipts");
        self.call(a, M::GET, "/actions/effects/{id}/receipts", &receipts, None)
            .await;
        self.call(a, M::GET, "/receipts", "/receipts?limit=5", None)
            .await;
        self.call(
            a,
            M::GET,
            "/receipts/public-keys",
            "/receipts/public-keys",
            None,
        )
        .await;
        let note = json!({"note": "checked"});
        let notes = format!("{eff_path}/notes");
        self.call(
            a,
            M::POST,
            "/actions/effects/{id}/notes",
            &notes,
            Some(note),
        )
        .await;
        let reconcile = format!("{eff_path}/reconcile");
        self.call(
            a,
            M::POST,
            "/actions/effects/{id}/reconcile",
            &reconcile,
            None,
        )
        .await;
        // The effect succeeded: replaying or resolving it by hand is refused (409).
        let replay = format!("{eff_path}/replay");
        self.call(a, M::POST, "/actions/effects/{id}/replay", &replay, None)
            .await;
        let resolve = json!({"outcome": "failed", "reason": "drift"});
        let resolve_path = format!("{eff_path}/resolve");
        self.call(
            b,
            M::POST,
            "/actions/effects/{id}/resolve",
            &resolve_path,
            Some(resolve),
        )
        .await;
        let resolve = json!({"outcome": "failed", "evidence": "drift"});
        let resolve_path = format!("{inv_path}/resolve");
        let template = "/actions/invocations/{id}/resolve";
        self.call(b, M::POST, template, &resolve_path, Some(resolve))
            .await;
    }

    /// Two custom approval requests: one approved, one denied, then a long-poll read.
    async fn approvals(&mut self) {
        let a = TOKEN;
        let b = SECOND_TOKEN;
        let request = json!({"title": "drift"});
        let approval = self
            .call(a, M::POST, "/approvals", "/approvals", Some(request))
            .await;
        let approval = id_of(&approval, "id");
        let request = json!({"title": "drift 2"});
        let denied = self
            .call(a, M::POST, "/approvals", "/approvals", Some(request))
            .await;
        let denied = id_of(&denied, "id");
        self.call(a, M::GET, "/approvals", "/approvals?status=pending", None)
            .await;
        let approve = format!("/approvals/{approval}/approve");
        let note = json!({"note": "ok"});
        self.call(b, M::POST, "/approvals/{id}/approve", &approve, Some(note))
            .await;
        let deny = format!("/approvals/{denied}/deny");
        self.call(b, M::POST, "/approvals/{id}/deny", &deny, None)
            .await;
        let read = format!("/approvals/{approval}?waitSeconds=1");
        self.call(a, M::GET, "/approvals/{id}", &read, None).await;
    }

    /// A policy: create, read, edit, evaluate, delete, and its versions.
    async fn policies(&mut self) {
        let a = TOKEN;
        let create = json!({"name": "drift", "matchKind": "action", "matchActionName": "refund",
                            "effect": "require_approval", "minAmount": 500});
        let policy = self
            .call(
                a,
                M::POST,
                "/approval-policies",
                "/approval-policies",
                Some(create),
            )
            .await;
        let policy = id_of(&policy, "id");
        self.call(a, M::GET, "/approval-policies", "/approval-policies", None)
            .await;
        let one = "/approval-policies/{id}";
        let path = format!("/approval-policies/{policy}");
        self.call(a, M::GET, one, &path, None).await;
        let edit = json!({"priority": 5, "changeNote": "up"});
        self.call(a, M::PATCH, one, &path, Some(edit)).await;
        let evaluate = json!({"kind": "action", "actionName": "refund",
                              "payload": {"paymentIntent": "pi_x", "amount": 900}});
        let template = "/approval-policies/evaluate";
        self.call(a, M::POST, template, template, Some(evaluate))
            .await;
        self.call(
            a,
            M::DELETE,
            one,
            &path,
            Some(json!({"changeNote": "gone"})),
        )
        .await;
        let versions = format!("{path}/versions?limit=1");
        self.call(
            a,
            M::GET,
            "/approval-policies/{id}/versions",
            &versions,
            None,
        )
        .await;
        let version = format!("{path}/versions/3");
        let template = "/approval-policies/{id}/versions/{version}";
        self.call(a, M::GET, template, &version, None).await;
    }

    /// A policy file: plan, test, then apply the plan's digest.
    async fn policy_file(&mut self) {
        let a = TOKEN;
        let file = "policies:\n  - {name: file-drift, matchKind: action, matchActionName: refund, effect: require_approval, requiredApprovals: 2}\n";
        let template = "/approval-policies/files/plan";
        let planned = self
            .call(
                a,
                M::POST,
                template,
                template,
                Some(json!({"source": file})),
            )
            .await;
        let digest = planned["data"]["digest"].clone();
        let template = "/approval-policies/files/test";
        let cases = json!([{"name": "big", "actionName": "refund", "payload": {"amount": 900},
                            "expect": {"effect": "require_approval", "requiredApprovals": 2}}]);
        self.call(
            a,
            M::POST,
            template,
            template,
            Some(json!({"source": file, "cases": cases})),
        )
        .await;
        let template = "/approval-policies/files/apply";
        let apply = json!({"source": file, "digest": digest, "changeNote": "from a file"});
        self.call(a, M::POST, template, template, Some(apply)).await;
    }

    /// An impact limit: create, list, read, change, archive.
    async fn limits(&mut self) {
        let a = TOKEN;
        let create = json!({"name": "drift", "dimension": "money", "currency": "usd",
                            "period": "day", "amount": 100000});
        let limit = self
            .call(a, M::POST, "/impact-limits", "/impact-limits", Some(create))
            .await;
        let limit = id_of(&limit, "id");
        self.call(
            a,
            M::GET,
            "/impact-limits",
            "/impact-limits?includeArchived=true",
            None,
        )
        .await;
        let one = "/impact-limits/{id}";
        let path = format!("/impact-limits/{limit}");
        self.call(a, M::GET, one, &path, None).await;
        self.call(a, M::PATCH, one, &path, Some(json!({"amount": 5000})))
            .await;
        self.call(a, M::DELETE, one, &path, None).await;
    }

    /// A connected account on the fixture: the catalog, connect, list, check, reconnect; and a
    /// signed-in one: a consent session, the fixture's consent, the callback, complete.
    async fn connections(&mut self) {
        let a = TOKEN;
        let base = self.fixture_url.trim_end_matches('/').to_string();
        let integration: crate::integrations::Integration = serde_json::from_value(json!({
            "id": "fixture", "name": "Fixture", "authKind": "api_key",
            "allowedHosts": [self.fixture_host],
            "keyCheck": {"url": format!("{base}/v1/account")},
        }))
        .unwrap();
        let oauth: crate::integrations::Integration = serde_json::from_value(json!({
            "id": "fixture-oauth", "name": "Fixture sign-in", "authKind": "oauth",
            "allowedHosts": [self.fixture_host],
            "oauth": {"authorizeUrl": format!("{base}/oauth/authorize"),
                      "tokenUrl": format!("{base}/oauth/token"),
                      "revokeUrl": format!("{base}/oauth/revoke"),
                      "clientId": steward_fixture::oauth::DEFAULT_CLIENT_ID,
                      "clientSecretName": "FIXTURE_OAUTH_CLIENT"},
        }))
        .unwrap();
        self.state.integrations = std::sync::Arc::new(
            crate::integrations::Integrations::checked(vec![integration, oauth]).unwrap(),
        );
        self.signed_in().await;
        let template = "/connections/integrations";
        self.call(a, M::GET, template, template, None).await;
        let connect = json!({"integrationId": "fixture", "secretName": "FIXTURE_ACCOUNT",
                             "apiKey": "sk_test_flow"});
        let template = "/connections/keys";
        let connected = self
            .call(a, M::POST, template, template, Some(connect))
            .await;
        assert_eq!(connected["data"]["status"], "completed", "{connected}");
        self.call(a, M::GET, "/connections", "/connections", None)
            .await;
        let template = "/connections/{secretName}/check";
        self.call(
            a,
            M::POST,
            template,
            "/connections/FIXTURE_ACCOUNT/check",
            Some(json!({})),
        )
        .await;
        let template = "/connections/{secretName}/reconnect";
        let reconnect = json!({"apiKey": "sk_test_flow2"});
        self.call(
            a,
            M::POST,
            template,
            "/connections/FIXTURE_ACCOUNT/reconnect",
            Some(reconnect),
        )
        .await;
    }

    /// A consent session, consented at the fixture, called back, completed.
    async fn signed_in(&mut self) {
        let a = TOKEN;
        let client_secret = json!({"value": steward_fixture::oauth::DEFAULT_CLIENT_SECRET,
                                   "allowedHosts": [self.fixture_host]});
        let secret = "/secrets/{name}";
        self.call(
            a,
            M::PUT,
            secret,
            "/secrets/FIXTURE_OAUTH_CLIENT",
            Some(client_secret),
        )
        .await;
        let template = "/connections/sessions";
        let start = json!({"integrationId": "fixture-oauth", "secretName": "FIXTURE_PERSON"});
        let session = self.call(a, M::POST, template, template, Some(start)).await;
        let id = id_of(&session, "id");
        let connect_url = session["data"]["connectUrl"].as_str().unwrap().to_string();
        let complete = "/connections/sessions/{id}/complete";
        let path = format!("/connections/sessions/{id}/complete");
        let pending = self
            .call(a, M::POST, complete, &path, Some(json!({})))
            .await;
        assert_eq!(pending["data"]["status"], "pending", "{pending}");

        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .unwrap();
        let authorize: Value = http
            .get(&connect_url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let consented = http
            .post(authorize["consentUrl"].as_str().unwrap())
            .json(&json!({"user": "flow"}))
            .send()
            .await
            .unwrap();
        assert_eq!(consented.status(), 303);
        let location = consented.headers()["location"]
            .to_str()
            .unwrap()
            .to_string();
        let back = url::Url::parse(&location).unwrap();
        let path = format!("/connections/callback?{}", back.query().unwrap());
        let done = self
            .call("", M::GET, "/connections/callback", &path, None)
            .await;
        assert_eq!(done["data"]["status"], "completed", "{done}");
        let path = format!("/connections/sessions/{id}/complete");
        let completed = self
            .call(a, M::POST, complete, &path, Some(json!({})))
            .await;
        assert_eq!(completed["data"]["status"], "completed", "{completed}");
        assert_eq!(completed["data"]["connection"]["authKind"], "oauth");
    }

    /// Billing: the key's own usage and quota, the workspace target, and what is not offered.
    async fn billing(&mut self) {
        let a = TOKEN;
        for path in [
            "/billing/usage/current",
            "/billing/quota",
            "/billing/budget",
        ] {
            self.call(a, M::GET, path, path, None).await;
        }
        for (template, path) in [
            ("/billing/plan", "/billing/plan"),
            ("/billing/plans", "/billing/plans"),
            ("/billing/usage/history", "/billing/usage/history?days=7"),
            ("/billing/cost-estimate", "/billing/cost-estimate"),
            ("/billing/invoices", "/billing/invoices?limit=5"),
            ("/billing/stripe-config", "/billing/stripe-config"),
        ] {
            let refused = self.call(a, M::GET, template, path, None).await;
            assert_eq!(
                refused["error"]["code"], "FEATURE_NOT_AVAILABLE",
                "{refused}"
            );
        }
    }

    /// A budget on the second key: put, read, list, delete.
    async fn budgets(&mut self) {
        let a = TOKEN;
        let key = steward_core::KeyId::from_unique("drift2");
        let one = "/budgets/{apiKeyId}";
        let path = format!("/budgets/{key}");
        let budget = json!({"dimensionCaps": {"invocations": 10}, "monthlyCostCentsCap": null,
                            "alertThreshold": 0.5, "enabled": true});
        self.call(a, M::PUT, one, &path, Some(budget)).await;
        self.call(a, M::GET, one, &path, None).await;
        self.call(a, M::GET, "/budgets", "/budgets", None).await;
        self.call(a, M::DELETE, one, &path, None).await;
    }

    /// A run: start, list, spans by page and one, feedback, read, end, export and import.
    async fn runs(&mut self) {
        let a = TOKEN;
        let start = json!({"name": "drift run", "userId": "u1", "tags": ["t"], "input": {"q": 1}});
        let run = self.call(a, M::POST, "/runs", "/runs", Some(start)).await;
        let run = id_of(&run, "id");
        self.call(a, M::GET, "/runs", "/runs?status=running&limit=5", None)
            .await;
        let spans = json!({"spans": [
            {"id": "root", "name": "agent", "type": "workflow_step"},
            {"id": "llm", "parentSpanId": "root", "name": "llm", "type": "model_call",
             "startedAt": "2026-01-01T00:00:00Z", "endedAt": "2026-01-01T00:00:01Z",
             "attributes": {"k": "v"}},
        ]});
        let template = "/runs/{id}/spans";
        let path = format!("/runs/{run}/spans");
        self.call(a, M::POST, template, &path, Some(spans)).await;
        let page = self
            .call(a, M::GET, template, &format!("{path}?limit=1"), None)
            .await;
        let cursor = page["pagination"]["nextCursor"].as_str().unwrap_or("");
        self.call(
            a,
            M::GET,
            template,
            &format!("{path}?cursor={cursor}"),
            None,
        )
        .await;
        let span = "/runs/{id}/spans/{spanId}";
        self.call(a, M::GET, span, &format!("{path}/llm"), None)
            .await;
        let template = "/runs/{id}/feedback";
        let path = format!("/runs/{run}/feedback");
        let feedback = json!({"spanId": "llm", "rating": 1, "comment": "good"});
        self.call(a, M::POST, template, &path, Some(feedback)).await;
        self.call(a, M::GET, template, &path, None).await;
        let one = "/runs/{id}";
        let path = format!("/runs/{run}");
        self.call(a, M::GET, one, &path, None).await;
        let end = json!({"status": "succeeded", "output": {"a": 1}});
        self.call(a, M::PATCH, one, &path, Some(end)).await;
        let exported = self
            .call(
                a,
                M::GET,
                "/runs/{id}/export",
                &format!("/runs/{run}/export"),
                None,
            )
            .await;
        self.call(
            a,
            M::POST,
            "/runs/import",
            "/runs/import",
            Some(exported["data"].clone()),
        )
        .await;
    }

    /// The environment's setting, halt and resume; the stream's documented refusal.
    async fn environment_and_stream(&mut self) {
        let a = TOKEN;
        let setting = json!({"unkeyedInvokes": "accept"});
        self.call(a, M::PATCH, "/environment", "/environment", Some(setting))
            .await;
        let halt = json!({"reason": "drift"});
        self.call(
            a,
            M::POST,
            "/environment/halt",
            "/environment/halt",
            Some(halt),
        )
        .await;
        self.call(
            a,
            M::POST,
            "/environment/resume",
            "/environment/resume",
            None,
        )
        .await;

        // The stream's 200 is `text/event-stream`, read by tests/python/test_stream.py; here its
        // documented refusal: an unknown key.
        self.call("sk_not_a_key", M::GET, "/stream", "/stream", None)
            .await;
    }

    /// A hold on one operation key: the invoke under it is parked (202, `held`), listed, read,
    /// then released (one dispatched); a second release is the documented 404.
    async fn holds(&mut self) {
        let a = TOKEN;
        let hold = json!({"actionName": "refund", "operationKey": "drift-held", "reason": "drift"});
        let made = self.call(a, M::POST, "/holds", "/holds", Some(hold)).await;
        let id = id_of(&made, "id");
        self.call(a, M::GET, "/holds", "/holds", None).await;
        let input = json!({"input": {"paymentIntent": "pi_drift_held", "amount": 100},
                           "operationKey": "drift-held"});
        let invoke = "/actions/{reference}/invoke";
        let parked = self
            .call(a, M::POST, invoke, "/actions/refund/invoke", Some(input))
            .await;
        assert_eq!(parked["data"]["status"], json!("running"), "{parked}");
        assert_eq!(parked["data"]["held"]["holdId"], json!(id), "{parked}");
        let inv_path = format!("/actions/invocations/{}", id_of(&parked, "id"));
        let read = self
            .call(a, M::GET, "/actions/invocations/{id}", &inv_path, None)
            .await;
        assert_eq!(read["data"]["held"]["holdId"], json!(id), "{read}");
        let release = "/holds/{id}/release";
        let released = self
            .call(a, M::POST, release, &format!("/holds/{id}/release"), None)
            .await;
        assert_eq!(released["data"]["released"], json!(1), "{released}");
        self.call(a, M::POST, release, &format!("/holds/{id}/release"), None)
            .await;
    }

    /// Topics, a subscription's life, and the dead-letter reads.
    async fn webhooks(&mut self) {
        let a = TOKEN;
        self.call(a, M::GET, "/events/topics", "/events/topics", None)
            .await;
        self.call(
            a,
            M::GET,
            "/events/topics/{ref}",
            "/events/topics/effects",
            None,
        )
        .await;
        let subs = "/events/topics/{ref}/subscriptions";
        let body = json!({"url": "https://example.com/hook", "eventTypes": ["effect.settled"],
                          "headers": {"X-Team": "ops"}, "generateSecret": true});
        let created = self
            .call(
                a,
                M::POST,
                subs,
                "/events/topics/effects/subscriptions",
                Some(body),
            )
            .await;
        let sub = id_of(&created, "id");
        self.call(
            a,
            M::GET,
            subs,
            "/events/topics/effects/subscriptions",
            None,
        )
        .await;
        let one = "/events/subscriptions/{id}";
        let path = format!("/events/subscriptions/{sub}");
        self.call(a, M::PATCH, one, &path, Some(json!({"enabled": false})))
            .await;
        let rotate = format!("{path}/rotate-secret");
        self.call(
            a,
            M::POST,
            "/events/subscriptions/{id}/rotate-secret",
            &rotate,
            None,
        )
        .await;
        let redeliver = format!("{path}/dlq/redeliver");
        self.call(
            a,
            M::POST,
            "/events/subscriptions/{id}/dlq/redeliver",
            &redeliver,
            None,
        )
        .await;
        self.call(a, M::DELETE, one, &path, None).await;
        let channels = "/approval-channels";
        let slack = json!({"kind": "slack", "url": "https://example.com/services/T0/B0/x"});
        let channel = self.call(a, M::POST, channels, channels, Some(slack)).await;
        let channel = id_of(&channel, "id");
        self.call(a, M::GET, channels, channels, None).await;
        let one_channel = format!("/approval-channels/{channel}");
        self.call(a, M::DELETE, "/approval-channels/{id}", &one_channel, None)
            .await;
        self.call(a, M::GET, "/dlq", "/dlq?page=1&limit=10", None)
            .await;
        self.call(a, M::GET, "/dlq/{id}", "/dlq/dlq_none", None)
            .await;
        self.call(
            a,
            M::POST,
            "/dlq/{id}/redeliver",
            "/dlq/dlq_none/redeliver",
            None,
        )
        .await;
    }

    /// The action and its secret, deleted.
    async fn cleanup(&mut self) {
        let a = TOKEN;
        let (action, secret) = ("/actions/{reference}", "/secrets/{name}");
        self.call(a, M::DELETE, action, "/actions/refund", None)
            .await;
        self.call(a, M::DELETE, secret, "/secrets/STRIPE_TEST_KEY", None)
            .await;
    }
}

#[tokio::test]
async fn every_operation_answers_a_real_flow_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = steward_fixture::spawn(steward_fixture::FixtureConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        state_file: None,
    })
    .await
    .unwrap();
    let fixture_url = fixture.base_url().to_string();
    let fixture_host = fixture_url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let mut f = Flow {
        state: state(&dir).await,
        doc: document_json(),
        covered: BTreeSet::new(),
        fixture_url,
        fixture_host,
    };
    f.reads_and_secrets().await;
    f.actions_and_import().await;
    f.previews().await;
    f.invoke_and_recover().await;
    f.holds().await;
    f.approvals().await;
    f.policies().await;
    f.policy_file().await;
    f.limits().await;
    f.connections().await;
    f.billing().await;
    f.budgets().await;
    f.runs().await;
    f.environment_and_stream().await;
    f.webhooks().await;
    f.cleanup().await;

    let documented: BTreeSet<(String, String)> = operations(&f.doc).into_iter().collect();
    let missed: Vec<_> = documented.difference(&f.covered).collect();
    assert!(
        missed.is_empty(),
        "operations this flow does not exercise: {missed:?}"
    );
}
