//! `secrets`: a write-only vault. No endpoint returns a value.

use super::body::{self, optional_string};
use super::openapi as doc;
use super::{idempotent, views};
use crate::app;
use crate::app::secrets::Restriction;
use crate::auth::Caller;
use crate::envelope::ok;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Map, Value};
use steward_core::{scopes, HostRule, Placement};
use steward_wire::Credential;

/// A list of strings, each checked and written in its canonical form by `check` (which says
/// why an entry is refused): left out keeps, `null` is anywhere.
fn string_list(
    map: &Map<String, Value>,
    field: &str,
    check: impl Fn(&str) -> Result<String, String>,
) -> ApiResult<Restriction> {
    match map.get(field) {
        None => Ok(Restriction::Keep),
        Some(Value::Null) => Ok(Restriction::Anywhere),
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
            Ok(Restriction::Only(out))
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
    app::secrets::check_name(&name)?;
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
    let put = app::secrets::Put {
        value: Credential(value),
        description,
        allowed_hosts: hosts,
        allowed_placements: placements,
    };
    idempotent::run_matching(&state, &caller, &headers, request, &[earlier], || async {
        let stored = app::secrets::put(&state, &caller, &name, put).await?;
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
    app::secrets::check_name(&name)?;
    let secret = app::secrets::get(&state, &caller, &name).await?;
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
    let secrets = app::secrets::list(&state, &caller).await?;
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
    app::secrets::check_name(&name)?;
    let request = json!({"op": "secret.delete", "name": name});
    idempotent::run(&state, &caller, &headers, request, || async {
        app::secrets::delete(&state, &caller, &name).await?;
        Ok((
            StatusCode::OK,
            steward_wire::SecretDeleted {
                name,
                deleted: true,
            },
        ))
    })
    .await
}
