//! Secrets: a write-only vault. No use case returns a value; `put` seals one and stores its
//! metadata. `api/secrets.rs` parses the body (its own field-by-field parser: see
//! docs/DECISIONS.md, "Catalog bodies read from the object") and renders the metadata.

use super::{Error, Principal, Result};
use crate::state::AppState;
use steward_core::{hosts_within, is_valid_secret_name, scopes};
use steward_store::{Actor, SecretRecord, StoreError};
use steward_wire::Credential;

/// A restriction as a `PUT` gives it: left out keeps a rotation's, `null` is anywhere, a list
/// is only there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restriction {
    Keep,
    Anywhere,
    Only(Vec<String>),
}

/// What `PUT /secrets/{name}` writes: the value (never shown, `Credential`'s `Debug` hides
/// it), a description (left out keeps a rotation's), and where it may go.
#[derive(Debug, Clone)]
pub struct Put {
    pub value: Credential,
    pub description: Option<String>,
    pub allowed_hosts: Restriction,
    pub allowed_placements: Restriction,
}

/// Refuses a secret name that is not `^[A-Z0-9_]+$`, naming `name`.
pub fn check_name(name: &str) -> Result<()> {
    if is_valid_secret_name(name) {
        Ok(())
    } else {
        Err(Error::validation("name", "must match ^[A-Z0-9_]+$"))
    }
}

/// Applies a restriction to the stored one. A rotation may narrow a restriction, never widen it.
fn narrowed(
    field: &str,
    change: Restriction,
    existing: Option<&Option<Vec<String>>>,
    within: impl Fn(Option<&[String]>, Option<&[String]>) -> bool,
) -> Result<Option<Vec<String>>> {
    let proposed = match change {
        Restriction::Keep => return Ok(existing.cloned().flatten()),
        Restriction::Anywhere => None,
        Restriction::Only(list) => Some(list),
    };
    if let Some(current) = existing {
        if !within(proposed.as_deref(), current.as_deref()) {
            return Err(Error::validation(
                field,
                "a rotation cannot widen where a secret may go; delete the secret and create it again to widen it",
            ));
        }
    }
    Ok(proposed)
}

fn placements_within(narrow: Option<&[String]>, wide: Option<&[String]>) -> bool {
    match (narrow, wide) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(n), Some(w)) => n.iter().all(|p| w.contains(p)),
    }
}

/// Creates or rotates the secret `name`.
pub async fn put(
    state: &AppState,
    principal: &Principal,
    name: &str,
    put: Put,
) -> Result<SecretRecord> {
    principal.require(scopes::SECRETS_WRITE)?;
    check_name(name)?;
    let env = &principal.env.id;
    let existing = state.store.secret(env, name).await?;
    let allowed_hosts = narrowed(
        "allowedHosts",
        put.allowed_hosts,
        existing.as_ref().map(|e| &e.allowed_hosts),
        hosts_within,
    )?;
    let allowed_placements = narrowed(
        "allowedPlacements",
        put.allowed_placements,
        existing.as_ref().map(|e| &e.allowed_placements),
        placements_within,
    )?;
    let (nonce, ciphertext) = state
        .vault
        .seal(env, name, &put.value.into_string())
        .map_err(|e| Error::internal("vault", &e))?;
    let now = state.clock.now();
    let record = SecretRecord {
        env_id: env.clone(),
        name: name.to_string(),
        nonce,
        ciphertext,
        description: put
            .description
            .or_else(|| existing.as_ref().and_then(|e| e.description.clone())),
        allowed_hosts,
        allowed_placements,
        version: 0,
        created_at: now,
        updated_at: now,
    };
    state
        .store
        .put_secret(
            &record,
            existing.as_ref().map(|e| e.version),
            &Actor::key(&principal.key.id, now),
        )
        .await
        .map_err(|e| match e {
            StoreError::VersionConflict { .. } => Error::conflict(
                "concurrent_modification",
                "the secret changed while this request ran; send it again",
            ),
            other => other.into(),
        })
}

/// A secret's metadata.
pub async fn get(state: &AppState, principal: &Principal, name: &str) -> Result<SecretRecord> {
    principal.require(scopes::SECRETS_READ)?;
    check_name(name)?;
    state
        .store
        .secret(&principal.env.id, name)
        .await?
        .ok_or_else(|| Error::not_found("secret"))
}

/// Every secret's metadata.
pub async fn list(state: &AppState, principal: &Principal) -> Result<Vec<SecretRecord>> {
    principal.require(scopes::SECRETS_READ)?;
    Ok(state.store.list_secrets(&principal.env.id).await?)
}

/// Deletes the secret `name`; 404 when there is none.
pub async fn delete(state: &AppState, principal: &Principal, name: &str) -> Result<()> {
    principal.require(scopes::SECRETS_WRITE)?;
    check_name(name)?;
    revoke_if_signed_in(state, principal, name).await?;
    let actor = Actor::key(&principal.key.id, state.clock.now());
    if state
        .store
        .delete_secret(&principal.env.id, name, &actor)
        .await?
    {
        Ok(())
    } else {
        Err(Error::not_found("secret"))
    }
}

/// Deleting a signed-in account's secret first revokes its grant at the provider (RFC 7009), so
/// the tokens stop working there too. A provider that does not confirm is logged and does not
/// keep the secret: the person asked for the account to go, and Steward no longer holds tokens.
async fn revoke_if_signed_in(state: &AppState, principal: &Principal, name: &str) -> Result<()> {
    let env = &principal.env.id;
    let signed_in = state
        .store
        .connection(env, name)
        .await?
        .is_some_and(|c| c.auth_kind == crate::integrations::AuthKind::Oauth.as_str());
    if !signed_in {
        return Ok(());
    }
    match crate::oauth::account::revoke(state, env, name).await {
        Ok(true) => tracing::info!(
            account = name,
            "revoked the account's grant at the provider"
        ),
        Ok(false) => tracing::info!(account = name, "the account has no revocation endpoint"),
        Err(reason) => {
            tracing::warn!(account = name, %reason, "the provider did not confirm the revocation")
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_rotation_narrows_but_never_widens_where_a_secret_may_go() {
        let stored = Some(list(&["header", "body"]));
        let narrower = narrowed(
            "allowedPlacements",
            Restriction::Only(list(&["header"])),
            Some(&stored),
            placements_within,
        );
        assert_eq!(narrower.unwrap(), Some(list(&["header"])));
        let wider = narrowed(
            "allowedPlacements",
            Restriction::Anywhere,
            Some(&stored),
            placements_within,
        )
        .unwrap_err();
        assert_eq!(
            wider.details,
            Some(serde_json::json!({"field": "allowedPlacements"}))
        );
        let kept = narrowed(
            "allowedPlacements",
            Restriction::Keep,
            Some(&stored),
            placements_within,
        );
        assert_eq!(kept.unwrap(), stored);
        let created = narrowed(
            "allowedPlacements",
            Restriction::Anywhere,
            None,
            placements_within,
        );
        assert_eq!(created.unwrap(), None);
    }

    #[test]
    fn a_put_never_shows_its_value() {
        let put = Put {
            value: Credential("sk_live_very_secret".into()),
            description: None,
            allowed_hosts: Restriction::Keep,
            allowed_placements: Restriction::Keep,
        };
        assert!(!format!("{put:?}").contains("sk_live_very_secret"));
    }
}
