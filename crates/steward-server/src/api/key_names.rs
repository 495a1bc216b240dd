//! Key names beside key ids: the views that name a key (who asked for an approval, who decided
//! it, who acted on an effect, who made an action or policy version) carry its name too, so a
//! person reads `key_01... (night-ops)` rather than an id alone.
//!
//! One read per answer, not per row: the environment's keys, revoked and expired ones included
//! (a revoked key keeps its name in every answer that names it).

use crate::error::ApiResult;
use crate::state::AppState;
use std::collections::HashMap;
use steward_core::{EnvironmentId, KeyId};

/// The names of one environment's keys, by id.
#[derive(Debug, Clone, Default)]
pub struct KeyNames(HashMap<KeyId, String>);

impl KeyNames {
    /// The keys of `env` (`Store::list_keys`, one read), usable or not.
    pub async fn of(state: &AppState, env: &EnvironmentId) -> ApiResult<KeyNames> {
        let keys = state.store.list_keys().await?;
        Ok(KeyNames::from_pairs(
            keys.into_iter()
                .filter(|k| &k.env_id == env)
                .map(|k| (k.id, k.name)),
        ))
    }

    /// Names for these keys.
    pub fn from_pairs(pairs: impl IntoIterator<Item = (KeyId, String)>) -> KeyNames {
        KeyNames(pairs.into_iter().collect())
    }

    /// The key's name; `None` for a key that is not one of the environment's.
    pub fn name(&self, id: &KeyId) -> Option<String> {
        self.0.get(id).cloned()
    }

    /// The name of the key whose id a rendered view spells `id`; `None` for text that is no key
    /// id, or a key that is not one of the environment's.
    pub fn name_of(&self, id: &str) -> Option<&str> {
        let id = KeyId::parse(id).ok()?;
        self.0.get(&id).map(String::as_str)
    }

    /// As [`KeyNames::name`]; `None` for no key (the system).
    pub fn name_opt(&self, id: Option<&KeyId>) -> Option<String> {
        id.and_then(|id| self.name(id))
    }
}

#[cfg(test)]
mod tests {
    //! Through the router, on a real store: an approval names who asked (revoked since) and who
    //! decided; a key of another environment is never named.

    use super::*;
    use axum::body::Body;
    use axum::http::{Method, Request};
    use serde_json::{json, Value};
    use std::sync::Arc;
    use steward_core::Role;
    use steward_store::{Actor, ApiKeyRecord, Identity, NewEnvironment, SqliteStore};
    use tower::ServiceExt;

    const REQUESTER: &str = "stw_key_names_requester";
    const DECIDER: &str = "stw_key_names_decider";

    async fn key(store: &SqliteStore, env: &str, id: &str, name: &str, token: &str) -> KeyId {
        let now = crate::Clock::now(&crate::SystemClock);
        let env = store
            .ensure_environment(
                NewEnvironment {
                    name: env,
                    id: &EnvironmentId::from_unique(env),
                },
                &Actor::system(now),
            )
            .await
            .unwrap();
        let record = ApiKeyRecord {
            id: KeyId::from_unique(id),
            env_id: env.id,
            name: name.into(),
            scopes: Role::Operator.scopes(),
            token_hash: crate::hash_token(token),
            created_at: now,
            expires_at: None,
            revoked_at: None,
            last_used_at: None,
        };
        store
            .insert_key(&record, &Actor::system(now))
            .await
            .unwrap();
        record.id
    }

    async fn send(state: &AppState, method: Method, path: &str, token: &str, body: Value) -> Value {
        let mut request = Request::builder()
            .method(method.clone())
            .uri(format!("/api/v2{path}"))
            .header("authorization", format!("Bearer {token}"));
        let body = if method == Method::GET {
            Body::empty()
        } else {
            request = request.header("content-type", "application/json");
            Body::from(body.to_string())
        };
        let request = request.body(body).unwrap();
        let response = crate::app(state.clone()).oneshot(request).await.unwrap();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let answer: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(answer["success"], true, "{method} {path}: {answer}");
        answer["data"].clone()
    }

    #[tokio::test]
    async fn an_approval_names_its_requester_revoked_since_and_its_decider() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(&dir.path().join("steward.db")).unwrap());
        let requester = key(&store, "test", "asker", "night-agent", REQUESTER).await;
        key(&store, "test", "decider", "night-ops", DECIDER).await;
        let stranger = key(&store, "prod", "stranger", "prod-ops", "stw_key_names_prod").await;
        let state = crate::test_state::on(store.clone(), "names");

        let created = send(
            &state,
            Method::POST,
            "/approvals",
            REQUESTER,
            json!({"title": "Refund order 7"}),
        )
        .await;
        assert_eq!(created["requestedByName"], "night-agent", "{created}");
        let now = crate::Clock::now(&crate::SystemClock);
        assert!(store
            .revoke_key(&requester, &Actor::system(now))
            .await
            .unwrap());

        let id = created["id"].as_str().unwrap();
        let read = send(
            &state,
            Method::GET,
            &format!("/approvals/{id}"),
            DECIDER,
            Value::Null,
        )
        .await;
        assert_eq!(
            (&read["requestedBy"], &read["requestedByName"]),
            (&json!(requester), &json!("night-agent")),
            "a revoked key keeps its name: {read}"
        );
        let decided = send(
            &state,
            Method::POST,
            &format!("/approvals/{id}/approve"),
            DECIDER,
            json!({"note": "checked"}),
        )
        .await;
        let decision = &decided["approval"]["decisions"][0];
        assert_eq!(decision["keyName"], "night-ops", "{decided}");
        let listed = send(&state, Method::GET, "/approvals", DECIDER, Value::Null).await;
        assert_eq!(listed[0]["requestedByName"], "night-agent", "{listed}");
        assert_eq!(listed[0]["decisions"][0]["keyName"], "night-ops");

        let test_names = KeyNames::of(&state, &EnvironmentId::from_unique("test"))
            .await
            .unwrap();
        assert_eq!(
            test_names.name(&stranger),
            None,
            "another environment's key"
        );
        assert_eq!(test_names.name_opt(None), None, "the system");
    }
}
