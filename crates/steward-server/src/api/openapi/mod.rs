//! The OpenAPI 3.1 document of the `/api/v2` surface, served unauthenticated at
//! `GET /api/v2/openapi.json`.
//!
//! Each handler carries its own `#[utoipa::path(...)]`, and `super::v2_routes` registers every
//! route through `utoipa_axum::routes!`, which adds the handler to the router and its operation to
//! the document in one step: a route cannot be served without being described. The answers'
//! `data` are the `steward_wire` views the handlers build (`api/views.rs` and each handler's
//! `view`), and the request bodies the `steward_wire` types they parse, so the document
//! describes the types that are sent; nothing here describes a type beside the one sent.
//! `envelopes.rs` lists the error answers an operation names, `params.rs` the path and query
//! parameters. `api/openapi_tests/` checks the document against the router.

mod envelopes;
mod params;

pub(crate) use envelopes::*;
pub(crate) use params::*;
// The views the handlers write are their own schemas.
pub(crate) use steward_wire::{
    Action, ActionBody, Approval, ApprovalChannel, ApprovalChannelBody, ApprovalRequestBody,
    BillingQuota, BillingUsage, Budget, BudgetBody, BudgetDeleted, CallbackDone, CheckBody,
    CompleteBody, ConnectKeyBody, Connection, ConnectionCompleted, ConnectionSession, CursorPage,
    DeadLetter, Decided, DecisionBody, Deleted, Effect, Environment, EnvironmentBody, HaltBody,
    Hold, HoldBody, HoldReleaseBody, Identity, ImportBody, ImportResult, Integration, Invocation,
    InvokeBody, Limit, LimitBody, LimitUpdateBody, List, Page, ReconnectBody, Reconnected,
    RedeliveryRequested, ResolveEffectBody, ResolveInvocationBody, ResumeBody, Secret, SecretBody,
    SecretDeleted, SessionBody, Single, Subscription, SubscriptionBody, SubscriptionPatch, Topic,
    WorkspaceBudget,
};
// The runs' views and bodies (`api/runs/`).
pub(crate) use steward_wire::{
    Feedback, FeedbackBody, Run, RunDetail, RunEndBody, RunStartBody, Span, SpansBody,
    SpansIngested, Trace, TraceBody,
};

use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use std::sync::OnceLock;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{
    ComponentsBuilder, InfoBuilder, OpenApi, OpenApiBuilder, SecurityRequirement,
};

/// The name of the bearer-key security scheme in the document.
pub const BEARER: &str = "bearer";

/// The document before any path is added: info, the bearer scheme, and bearer required by
/// default (the one unauthenticated operation says so itself).
pub fn base() -> OpenApi {
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("Steward API")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "The Anlyon v2 governed-execution contract. Every answer is JSON: \
                     `{\"success\": true, \"data\": ..., \"pagination\"?}` on success, \
                     `{\"success\": false, \"error\": {\"code\", \"message\", \"details\"?}}` on error. \
                     Authenticate with `Authorization: Bearer <key>`.",
                ))
                .build(),
        )
        .components(Some(
            ComponentsBuilder::new()
                .schema_from::<ErrorEnvelope>()
                .security_scheme(
                    BEARER,
                    SecurityScheme::Http(
                        HttpBuilder::new()
                            .scheme(HttpAuthScheme::Bearer)
                            .description(Some("An API key made with `steward keys create`"))
                            .build(),
                    ),
                )
                .build(),
        ))
        .security(Some(vec![SecurityRequirement::new(BEARER, Vec::<String>::new())]))
        .build()
}

/// The whole document, built once.
pub fn document() -> &'static OpenApi {
    static DOCUMENT: OnceLock<OpenApi> = OnceLock::new();
    DOCUMENT.get_or_init(|| super::surface().1)
}

fn document_json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| document().to_json().unwrap_or_else(|_| "{}".to_string()))
}

/// This document. It needs no key: it describes the API, not anything in it.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "meta",
    security(()),
    responses((status = 200, description = "the OpenAPI 3.1 document", body = Object))
)]
pub async fn serve() -> Response {
    ([(CONTENT_TYPE, "application/json")], document_json()).into_response()
}
