//! `secrets`: a write-only vault. No endpoint returns a value.

use super::body::{self, optional_string};
use super::openapi as doc;
use super::{idempotent, views};
use crate::auth::Caller;
use crate::envelope::ok;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Map, Value};
use steward_core::{hosts_within, is_valid_secret_name, scopes, HostRule, Placement};
use steward_store::{Actor, SecretRecord, StoreError};

/// A field that may be left out (keep), sent as null (clear), or given.
enum Field<T> {
    Absent,
    Null,
    Given(T),
}

/// A list of strings, each checked and written in its canonical form by `check` (which says
/// why an entry is refused).
fn string_list(
    map: &Map<String, Value>,
    field: &str,
    check: impl Fn(&str) -> Result<String, String>,
) -> ApiResult<Field<Vec<String>>> {
    match map.get(field) {
        None => Ok(Field::Absent),
        Some(Value::Null) => Ok(Field::Null),
        Some(Value::Array(items)) => {
            let mut out: Vec<String> = Vec::new();
            for item in items {
                let checked = match item.as_str() {
                    Some(s) => check(s),
                    None => Err("is not a string".to_string()),
                };
                match checked {
                    Ok(s) if !out.contains(&s) => out.push(s),
                    Ok(_) => {}
                    Err(why) => {
                        return Err(ApiError::validation(
                            field,
                            format!("contains an invalid entry {item}: it {why}"),
                        ))
                    }
                }
            }
            Ok(Field::Given(out))
        }
        Some(_) => Err(ApiError::validation(
            field,
            "must be a list of strings or null",
        )),
    }
}

/// An `allowedHosts` entry: `[https://|http://]host[:port]`, `.domain[:port]` or `[v6][:port]`.
fn valid_host(entry: &str) -> Result<String, String> {
    HostRule::parse(entry)
        .map(|rule| rule.to_string())
        .map_err(|e| e.to_string())
}

fn valid_placement(entry: &str) -> Result<String, String> {
    let entry = entry.trim().to_ascii_lowercase();
    match Placement::parse(&entry) {
        Some(_) => Ok(entry),
        None => Err("is not url, header or body".to_string()),
    }
}

fn check_name(name: &str) -> ApiResult<()> {
    if is_valid_secret_name(name) {
        Ok(())
    } else {
        Err(ApiError::validation("name", "must match ^[A-Z0-9_]+$"))
    }
}

/// Applies a field to the stored restriction. A rotation may narrow a restriction, never widen it.
fn narrowed(
    field: &str,
    change: Field<Vec<String>>,
    existing: Option<&Option<Vec<String>>>,
    within: impl Fn(Option<&[String]>, Option<&[String]>) -> bool,
) -> ApiResult<Option<Vec<String>>> {
    let proposed = match change {
        Field::Absent => return Ok(existing.cloned().flatten()),
        Field::Null => None,
        Field::Given(list) => Some(list),
    };
    if let Some(current) = existing {
        if !within(proposed.as_deref(), current.as_deref()) {
            return Err(ApiError::validation(
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

#[utoipa::path(
    put,
    path = "/secrets/{name}",
    operation_id = "secrets_put",
    tag = "secrets",
    params(doc::SecretPath, doc::IdempotencyHeader),
    request_body = doc::SecretBody,
    responses(
        (status = 200, description = "the secret's metadata after the write", body = doc::Single<doc::Secret>),
        doc::Guarded,
        doc::Invalid,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn put(
    State(state): State<AppState>,
    caller: Caller,
    Path(doc::SecretPath { name }): Path<doc::SecretPath>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::SECRETS_WRITE)?;
    check_name(&name)?;
    let map = body::object(&bytes)?;
    body::only_known_to::<doc::SecretBody>(&map)?;
    let value = match map.get("value") {
        Some(Value::String(v)) if !v.is_empty() => v.clone(),
        _ => {
            return Err(ApiError::validation(
                "value",
                "is required and must be a non-empty string",
            ))
        }
    };
    let description = optional_string(&map, "description")?;
    let hosts = string_list(&map, "allowedHosts", valid_host)?;
    let placements = string_list(&map, "allowedPlacements", valid_placement)?;
    // The value is fingerprinted by its tag; a request recorded with an earlier version's tag
    // (`Vault::tags`) is still recognised.
    let [request, earlier] = state.vault.tags(&value).map(|tag| {
        let mut fingerprinted = map.clone();
        fingerprinted.insert("value".into(), json!(tag));
        json!({"op": "secret.put", "name": name, "body": fingerprinted})
    });
    idempotent::run_matching(&state, &caller, &headers, request, &[earlier], || async {
        let env = &caller.env.id;
        let existing = state.store.secret(env, &name).await?;
        let allowed_hosts = narrowed(
            "allowedHosts",
            hosts,
            existing.as_ref().map(|e| &e.allowed_hosts),
            hosts_within,
        )?;
        let allowed_placements = narrowed(
            "allowedPlacements",
            placements,
            existing.as_ref().map(|e| &e.allowed_placements),
            placements_within,
        )?;
        let (nonce, ciphertext) = state
            .vault
            .seal(env, &name, &value)
            .map_err(|e| ApiError::internal("vault", &e))?;
        let now = state.clock.now();
        let record = SecretRecord {
            env_id: env.clone(),
            name: name.clone(),
            nonce,
            ciphertext,
            description: description
                .or_else(|| existing.as_ref().and_then(|e| e.description.clone())),
            allowed_hosts,
            allowed_placements,
            version: 0,
            created_at: now,
            updated_at: now,
        };
        let stored = state
            .store
            .put_secret(
                &record,
                existing.as_ref().map(|e| e.version),
                &Actor::key(&caller.key.id, now),
            )
            .await
            .map_err(|e| match e {
                StoreError::VersionConflict { .. } => ApiError::conflict(
                    "concurrent_modification",
                    "the secret changed while this request ran; send it again",
                ),
                other => other.into(),
            })?;
        Ok((StatusCode::OK, views::secret(&stored)))
    })
    .await
}

#[utoipa::path(
    get,
    path = "/secrets/{name}",
    operation_id = "secrets_get",
    tag = "secrets",
    params(doc::SecretPath),
    responses(
        (status = 200, description = "the secret's metadata; never its value", body = doc::Single<doc::Secret>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(doc::SecretPath { name }): Path<doc::SecretPath>,
) -> ApiResult<Response> {
    caller.require(scopes::SECRETS_READ)?;
    check_name(&name)?;
    let secret = state
        .store
        .secret(&caller.env.id, &name)
        .await?
        .ok_or_else(|| ApiError::not_found("secret"))?;
    Ok(ok(views::secret(&secret)))
}

#[utoipa::path(
    get,
    path = "/secrets",
    operation_id = "secrets_list",
    tag = "secrets",
    responses(
        (status = 200, description = "the secrets' metadata; never a value", body = doc::List<doc::Secret>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn list(State(state): State<AppState>, caller: Caller) -> ApiResult<Response> {
    caller.require(scopes::SECRETS_READ)?;
    let secrets = state.store.list_secrets(&caller.env.id).await?;
    Ok(ok(secrets.iter().map(views::secret).collect::<Vec<_>>()))
}

#[utoipa::path(
    delete,
    path = "/secrets/{name}",
    operation_id = "secrets_delete",
    tag = "secrets",
    params(doc::SecretPath, doc::IdempotencyHeader),
    responses(
        (status = 200, description = "`{\"name\", \"deleted\": true}`", body = doc::Single<doc::SecretDeleted>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::Conflict,
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(doc::SecretPath { name }): Path<doc::SecretPath>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    caller.require(scopes::SECRETS_WRITE)?;
    check_name(&name)?;
    let request = json!({"op": "secret.delete", "name": name});
    idempotent::run(&state, &caller, &headers, request, || async {
        let actor = Actor::key(&caller.key.id, state.clock.now());
        if state
            .store
            .delete_secret(&caller.env.id, &name, &actor)
            .await?
        {
            Ok((
                StatusCode::OK,
                steward_wire::SecretDeleted {
                    name,
                    deleted: true,
                },
            ))
        } else {
            Err(ApiError::not_found("secret"))
        }
    })
    .await
}
