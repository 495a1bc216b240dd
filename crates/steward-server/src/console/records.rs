//! The application layer's records as the console renders them: the JSON of the API's views,
//! so a page shows the same fields, spelled the same way, as `/api/v2` answers them.
//!
//! The console's pages read `Value`s (`layout::text` and friends); these turn the typed
//! records `app/` returns into the `data` (and `pagination`) the API's answer would hold,
//! without building and re-reading an HTTP answer.

use crate::api::views::KeyNames;
use crate::api::{bounded, views};
use crate::app::reads::Page;
use crate::error::ApiError;
use serde::Serialize;
use serde_json::Value;
use steward_store::{ApprovalRecord, EffectDetail, EffectRecord, InvocationRecord};
use steward_wire::Pagination;

/// A view as JSON.
fn json<T: Serialize>(view: T) -> Result<Value, ApiError> {
    serde_json::to_value(view).map_err(|e| ApiError::internal("console: encoding a view", &e))
}

/// One invocation, whole, as `GET /actions/invocations/{id}` answers its `data`.
pub fn invocation(record: &InvocationRecord) -> Result<Value, ApiError> {
    json(views::invocation(record))
}

/// One effect with its attempts and evidence, as `GET /actions/effects/{id}` answers it (each
/// key named from `names`).
pub fn effect(detail: &EffectDetail, names: &KeyNames) -> Result<Value, ApiError> {
    json(views::effect_detail(detail, names))
}

/// One approval, as `GET /approvals/{id}` answers it (each key named from `names`).
pub fn approval(record: &ApprovalRecord, names: &KeyNames) -> Result<Value, ApiError> {
    json(views::approval(record, names))
}

/// A page of invocations, whole (`data` and `pagination`), ending early past the API's byte
/// budget as `GET /actions/invocations` does.
pub fn invocations(found: &Page<InvocationRecord>) -> Result<Value, ApiError> {
    let items = found.items.iter().map(views::listed_invocation).collect();
    json(bounded::page_body(
        items,
        found.total,
        found.limit,
        found.offset,
    ))
}

/// A page of effects, whole, as `GET /actions/effects` answers it.
pub fn effects(found: &Page<EffectRecord>) -> Result<Value, ApiError> {
    paged(found, views::effect)
}

/// A page of approvals, whole, as `GET /approvals` answers it.
pub fn approvals(found: &Page<ApprovalRecord>, names: &KeyNames) -> Result<Value, ApiError> {
    paged(found, |a| views::approval(a, names))
}

fn paged<T, V: Serialize>(found: &Page<T>, view: impl Fn(&T) -> V) -> Result<Value, ApiError> {
    let items: Vec<V> = found.items.iter().map(view).collect();
    json(steward_wire::Page::new(
        items,
        Pagination::of(found.total, found.limit, found.offset),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_core::{ApprovalId, ApprovalStatus, EnvironmentId, KeyId, Millis};

    fn approval(id: &str) -> ApprovalRecord {
        let at = Millis(1_767_225_600_000);
        ApprovalRecord {
            id: ApprovalId::from_unique(id),
            env_id: EnvironmentId::from_unique("e"),
            status: ApprovalStatus::Pending,
            title: "refund order 42".into(),
            description: Some("over the limit".into()),
            payload: serde_json::json!({"amount": 5000}),
            invocation_id: None,
            effect_id: None,
            action_id: None,
            action_version: None,
            input_fingerprint: None,
            requested_by: KeyId::from_unique("requester"),
            required_approvals: 2,
            decision_origin: None,
            decided_at: None,
            expires_at: Some(at),
            run_id: None,
            created_at: at,
            decisions: Vec::new(),
            edit: None,
        }
    }

    async fn answered(response: axum::response::Response) -> Value {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("an answer's body");
        serde_json::from_slice(&bytes).expect("an answer is JSON")
    }

    /// The console used to render the API's answer, read back from its bytes; it now renders
    /// the records. Both must be the same JSON, or a page would change.
    #[tokio::test]
    async fn a_page_is_the_json_the_api_answers() {
        let found = Page {
            items: vec![approval("a"), approval("b")],
            total: 7,
            limit: 2,
            offset: 4,
        };
        let names = KeyNames::from_pairs([(
            found.items[0].requested_by.clone(),
            "refund-agent".to_string(),
        )]);
        let api = crate::envelope::paged(
            found
                .items
                .iter()
                .map(|a| views::approval(a, &names))
                .collect(),
            found.total,
            found.limit,
            found.offset,
        );
        assert_eq!(approvals(&found, &names).unwrap(), answered(api).await);
        let one = crate::envelope::ok(views::approval(&found.items[0], &names));
        let console = super::approval(&found.items[0], &names).unwrap();
        assert_eq!(Some(&console), answered(one).await.get("data"));
    }
}
