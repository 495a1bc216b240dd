//! Bearer-key authentication and scope checks. A key is bound to one environment; every handler
//! reads and writes only that environment's records.

use crate::error::ApiError;
use crate::keys::hash_token;
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use steward_store::{ApiKeyRecord, Environment};

/// The hash of the request's bearer token, as keys are stored; 401 without one.
pub fn token_hash(headers: &HeaderMap) -> Result<String, ApiError> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(hash_token)
        .ok_or_else(ApiError::unauthenticated)
}

/// The authenticated caller.
#[derive(Debug, Clone)]
pub struct Caller {
    pub key: ApiKeyRecord,
    pub env: Environment,
}

impl Caller {
    pub fn has(&self, scope: &str) -> bool {
        self.key.scopes.iter().any(|s| s == scope)
    }

    /// 403 unless the key holds `scope`.
    pub fn require(&self, scope: &str) -> Result<(), ApiError> {
        if self.has(scope) {
            Ok(())
        } else {
            Err(ApiError::forbidden(scope))
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let (key, env) = state
            .store
            .caller(&token_hash(&parts.headers)?)
            .await?
            .ok_or_else(ApiError::unauthenticated)?;
        Ok(Caller { key, env })
    }
}
