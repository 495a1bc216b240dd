//! Environments, keys, secrets and actions.

use super::audit_log::{append, Entry};
use super::conn::unavailable;
use super::rows::{self, query_all, query_one};
use crate::approval_change::Cancellation;
use crate::error::{StoreError, StoreResult};
use crate::records::*;
use rusqlite::{params, Connection, ErrorCode, Transaction};
use serde_json::json;
use steward_core::{ActionDefinition, ActionId, EnvironmentId, KeyId, Millis};

/// SQLite's extended result codes for the constraints Steward relies on.
const SQLITE_CONSTRAINT_FOREIGNKEY: i32 = 787;
const SQLITE_CONSTRAINT_PRIMARYKEY: i32 = 1555;
const SQLITE_CONSTRAINT_UNIQUE: i32 = 2067;

/// Maps a failed insert or update: a uniqueness rule is `Duplicate`, a missing parent row
/// (an environment that does not exist) is `NotFound`, anything else is `Unavailable`.
pub(crate) fn constraint(err: rusqlite::Error, what: &'static str) -> StoreError {
    match &err {
        rusqlite::Error::SqliteFailure(e, _) if e.code == ErrorCode::ConstraintViolation => {
            match e.extended_code {
                SQLITE_CONSTRAINT_UNIQUE | SQLITE_CONSTRAINT_PRIMARYKEY => {
                    StoreError::Duplicate { what }
                }
                SQLITE_CONSTRAINT_FOREIGNKEY => StoreError::NotFound {
                    what: "environment",
                },
                _ => unavailable(err),
            }
        }
        _ => unavailable(err),
    }
}

pub(crate) fn ensure_environment(
    tx: &Transaction<'_>,
    name: &str,
    new_id: &EnvironmentId,
    actor: &Actor,
) -> StoreResult<Environment> {
    let sql = format!(
        "SELECT {} FROM environments WHERE name = ?1",
        rows::ENVIRONMENT_COLUMNS
    );
    if let Some(env) = query_one(tx, &sql, &[&name], rows::environment)? {
        return Ok(env);
    }
    tx.execute(
        "INSERT INTO environments (id, name, halted, created_at) VALUES (?1, ?2, 0, ?3)",
        params![new_id.as_str(), name, actor.now.0],
    )
    .map_err(unavailable)?;
    append(
        tx,
        actor,
        Entry {
            env: Some(new_id.as_str()),
            kind: "environment.created",
            subject: new_id.as_str(),
            before: None,
            after: Some(json!({"name": name})),
        },
    )?;
    query_one(tx, &sql, &[&name], rows::environment)?.ok_or(StoreError::NotFound {
        what: "environment",
    })
}

pub(crate) fn environment(
    conn: &Connection,
    id: &EnvironmentId,
) -> StoreResult<Option<Environment>> {
    let sql = format!(
        "SELECT {} FROM environments WHERE id = ?1",
        rows::ENVIRONMENT_COLUMNS
    );
    query_one(conn, &sql, &[&id.as_str()], rows::environment)
}

pub(crate) fn insert_key(
    tx: &Transaction<'_>,
    key: &ApiKeyRecord,
    actor: &Actor,
) -> StoreResult<()> {
    let scopes = serde_json::to_string(&key.scopes).map_err(|e| rows::corrupt("scopes", e))?;
    tx.execute(
        "INSERT INTO api_keys (id, env_id, name, scopes, token_hash, created_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![key.id.as_str(), key.env_id.as_str(), key.name, scopes, key.token_hash, key.created_at.0, key.expires_at.map(|m| m.0)],
    )
    .map_err(|e| constraint(e, "key"))?;
    append(
        tx,
        actor,
        Entry {
            env: Some(key.env_id.as_str()),
            kind: "key.created",
            subject: key.id.as_str(),
            before: None,
            after: Some(key_audit(key)),
        },
    )
}

/// What the audit log says about a key: never its hash.
fn key_audit(key: &ApiKeyRecord) -> serde_json::Value {
    let mut view = json!({"name": key.name, "scopes": key.scopes});
    if let Some(at) = key.expires_at {
        view["expiresAt"] = json!(at.0);
    }
    if let Some(at) = key.revoked_at {
        view["revokedAt"] = json!(at.0);
    }
    view
}

pub(crate) fn key(conn: &Connection, id: &KeyId) -> StoreResult<Option<ApiKeyRecord>> {
    let sql = format!("SELECT {} FROM api_keys WHERE id = ?1", rows::KEY_COLUMNS);
    query_one(conn, &sql, &[&id.as_str()], rows::api_key)
}

pub(crate) fn revoke_key(tx: &Transaction<'_>, id: &KeyId, actor: &Actor) -> StoreResult<bool> {
    let Some(before) = key(tx, id)?.filter(|k| k.revoked_at.is_none()) else {
        return Ok(false);
    };
    tx.execute(
        "UPDATE api_keys SET revoked_at = ?1 WHERE id = ?2 AND revoked_at IS NULL",
        params![actor.now.0, id.as_str()],
    )
    .map_err(unavailable)?;
    let after = key(tx, id)?.ok_or(StoreError::NotFound { what: "key" })?;
    append(
        tx,
        actor,
        Entry {
            env: Some(before.env_id.as_str()),
            kind: "key.revoked",
            subject: id.as_str(),
            before: Some(key_audit(&before)),
            after: Some(key_audit(&after)),
        },
    )?;
    Ok(true)
}

pub(crate) fn rotate_key(
    tx: &Transaction<'_>,
    r: &KeyRotation,
    actor: &Actor,
) -> StoreResult<ApiKeyRecord> {
    let (old, old_expires_at, new) = r.plan(key(tx, &r.old)?, actor.now)?;
    tx.execute(
        "UPDATE api_keys SET expires_at = ?1 WHERE id = ?2",
        params![old_expires_at.0, r.old.as_str()],
    )
    .map_err(unavailable)?;
    let scopes = serde_json::to_string(&new.scopes).map_err(|e| rows::corrupt("scopes", e))?;
    tx.execute(
        "INSERT INTO api_keys (id, env_id, name, scopes, token_hash, created_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![new.id.as_str(), new.env_id.as_str(), new.name, scopes, new.token_hash, new.created_at.0, new.expires_at.map(|m| m.0)],
    )
    .map_err(|e| constraint(e, "key"))?;
    let after_old = key(tx, &r.old)?.ok_or(StoreError::NotFound { what: "key" })?;
    append(
        tx,
        actor,
        Entry {
            env: Some(old.env_id.as_str()),
            kind: "key.rotated",
            subject: r.old.as_str(),
            before: Some(key_audit(&old)),
            after: Some(
                json!({"old": key_audit(&after_old), "newKeyId": new.id, "new": key_audit(&new)}),
            ),
        },
    )?;
    key(tx, &new.id)?.ok_or(StoreError::NotFound { what: "key" })
}

pub(crate) fn mark_key_used(tx: &Transaction<'_>, id: &KeyId, at: Millis) -> StoreResult<()> {
    tx.execute(
        "UPDATE api_keys SET last_used_at = ?1 WHERE id = ?2 AND (last_used_at IS NULL OR last_used_at < ?1)",
        params![at.0, id.as_str()],
    )
    .map_err(unavailable)?;
    Ok(())
}

/// The settings row naming the master key's check value.
const MASTER_KEY_CHECK: &str = "master_key_check";

pub(crate) fn master_key_check(conn: &Connection) -> StoreResult<Option<String>> {
    query_one(
        conn,
        "SELECT value FROM settings WHERE name = ?1",
        &[&MASTER_KEY_CHECK],
        |row| rows::col::<String>(row, 0),
    )
}

pub(crate) fn init_master_key_check(
    tx: &Transaction<'_>,
    check: &str,
    actor: &Actor,
) -> StoreResult<String> {
    if let Some(stored) = master_key_check(tx)? {
        return Ok(stored);
    }
    tx.execute(
        "INSERT INTO settings (name, value) VALUES (?1, ?2)",
        params![MASTER_KEY_CHECK, check],
    )
    .map_err(unavailable)?;
    append(
        tx,
        actor,
        Entry {
            env: None,
            kind: "vault.key_check_recorded",
            subject: MASTER_KEY_CHECK,
            before: None,
            after: None,
        },
    )?;
    Ok(check.to_string())
}

pub(crate) fn any_secret(conn: &Connection) -> StoreResult<Option<SecretRecord>> {
    let sql = format!(
        "SELECT {} FROM secrets ORDER BY created_at, env_id, name LIMIT 1",
        rows::SECRET_COLUMNS
    );
    query_one(conn, &sql, &[], rows::secret)
}

pub(crate) fn key_by_hash(conn: &Connection, hash: &str) -> StoreResult<Option<ApiKeyRecord>> {
    let sql = format!(
        "SELECT {} FROM api_keys WHERE token_hash = ?1",
        rows::KEY_COLUMNS
    );
    query_one(conn, &sql, &[&hash], rows::api_key)
}

pub(crate) fn list_keys(conn: &Connection) -> StoreResult<Vec<ApiKeyRecord>> {
    let sql = format!(
        "SELECT {} FROM api_keys ORDER BY created_at, id",
        rows::KEY_COLUMNS
    );
    query_all(conn, &sql, &[], rows::api_key)
}

/// What the audit log may say about a secret: metadata only, never the value or ciphertext.
fn secret_audit(s: &SecretRecord) -> serde_json::Value {
    json!({
        "name": s.name,
        "version": s.version,
        "description": s.description,
        "allowedHosts": s.allowed_hosts,
        "allowedPlacements": s.allowed_placements,
    })
}

pub(crate) fn secret(
    conn: &Connection,
    env: &EnvironmentId,
    name: &str,
) -> StoreResult<Option<SecretRecord>> {
    let sql = format!(
        "SELECT {} FROM secrets WHERE env_id = ?1 AND name = ?2",
        rows::SECRET_COLUMNS
    );
    query_one(conn, &sql, &[&env.as_str(), &name], rows::secret)
}

pub(crate) fn put_secret(
    tx: &Transaction<'_>,
    s: &SecretRecord,
    expected_version: Option<u32>,
    actor: &Actor,
) -> StoreResult<SecretRecord> {
    let existing = secret(tx, &s.env_id, &s.name)?;
    let found = existing.as_ref().map(|e| e.version);
    if found != expected_version {
        return Err(StoreError::VersionConflict {
            expected: expected_version.unwrap_or(0),
            found: found.unwrap_or(0),
        });
    }
    let version = found.unwrap_or(0) + 1;
    let created_at = existing.as_ref().map(|e| e.created_at).unwrap_or(actor.now);
    let hosts = s.allowed_hosts.as_ref().map(|h| json!(h).to_string());
    let placements = s.allowed_placements.as_ref().map(|p| json!(p).to_string());
    tx.execute(
        "INSERT INTO secrets (env_id, name, nonce, ciphertext, description, allowed_hosts, allowed_placements, version, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
         ON CONFLICT (env_id, name) DO UPDATE SET nonce = excluded.nonce, ciphertext = excluded.ciphertext,
           description = excluded.description, allowed_hosts = excluded.allowed_hosts,
           allowed_placements = excluded.allowed_placements, version = excluded.version, updated_at = excluded.updated_at",
        params![s.env_id.as_str(), s.name, s.nonce, s.ciphertext, s.description, hosts, placements, version, created_at.0, actor.now.0],
    )
    .map_err(|e| constraint(e, "secret"))?;
    let stored = secret(tx, &s.env_id, &s.name)?.ok_or(StoreError::NotFound { what: "secret" })?;
    append(
        tx,
        actor,
        Entry {
            env: Some(s.env_id.as_str()),
            kind: if existing.is_some() {
                "secret.rotated"
            } else {
                "secret.created"
            },
            subject: &s.name,
            before: existing.as_ref().map(secret_audit),
            after: Some(secret_audit(&stored)),
        },
    )?;
    Ok(stored)
}

pub(crate) fn list_secrets(
    conn: &Connection,
    env: &EnvironmentId,
) -> StoreResult<Vec<SecretRecord>> {
    let sql = format!(
        "SELECT {} FROM secrets WHERE env_id = ?1 ORDER BY name",
        rows::SECRET_COLUMNS
    );
    query_all(conn, &sql, &[&env.as_str()], rows::secret)
}

pub(crate) fn delete_secret(
    tx: &Transaction<'_>,
    env: &EnvironmentId,
    name: &str,
    actor: &Actor,
) -> StoreResult<bool> {
    let Some(existing) = secret(tx, env, name)? else {
        return Ok(false);
    };
    tx.execute(
        "DELETE FROM secrets WHERE env_id = ?1 AND name = ?2",
        params![env.as_str(), name],
    )
    .map_err(unavailable)?;
    append(
        tx,
        actor,
        Entry {
            env: Some(env.as_str()),
            kind: "secret.deleted",
            subject: name,
            before: Some(secret_audit(&existing)),
            after: None,
        },
    )?;
    Ok(true)
}

fn insert_version(
    tx: &Transaction<'_>,
    id: &ActionId,
    version: u32,
    def: &ActionDefinition,
    actor: &Actor,
) -> StoreResult<String> {
    let raw = serde_json::to_string(def).map_err(|e| rows::corrupt("action definition", e))?;
    tx.execute(
        "INSERT INTO action_versions (action_id, version, definition, created_at, created_by) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![id.as_str(), version, raw, actor.now.0, actor.key.as_ref().map(|k| k.to_string())],
    )
    .map_err(unavailable)?;
    Ok(raw)
}

pub(crate) fn create_action(
    tx: &Transaction<'_>,
    a: &ActionRecord,
    actor: &Actor,
) -> StoreResult<()> {
    tx.execute(
        "INSERT INTO actions (id, env_id, name, version, created_at, updated_at) VALUES (?1, ?2, ?3, 1, ?4, ?4)",
        params![a.id.as_str(), a.env_id.as_str(), a.name, actor.now.0],
    )
    .map_err(|e| constraint(e, "action"))?;
    insert_version(tx, &a.id, 1, &a.definition, actor)?;
    append(
        tx,
        actor,
        Entry {
            env: Some(a.env_id.as_str()),
            kind: "action.created",
            subject: a.id.as_str(),
            before: None,
            after: Some(json!({"version": 1, "definition": a.definition})),
        },
    )
}

pub(crate) fn action(
    conn: &Connection,
    env: &EnvironmentId,
    reference: &str,
) -> StoreResult<Option<ActionRecord>> {
    let column = if reference.starts_with(ActionId::PREFIX) {
        "a.id"
    } else {
        "a.name"
    };
    let sql = format!(
        "SELECT {} FROM {} WHERE a.env_id = ?1 AND {column} = ?2 AND a.deleted_at IS NULL",
        rows::ACTION_COLUMNS,
        rows::ACTION_FROM
    );
    query_one(conn, &sql, &[&env.as_str(), &reference], rows::action)
}

pub(crate) fn update_action(
    tx: &Transaction<'_>,
    env: &EnvironmentId,
    id: &ActionId,
    expected: u32,
    def: &ActionDefinition,
    actor: &Actor,
) -> StoreResult<ActionRecord> {
    let current = action(tx, env, id.as_str())?.ok_or(StoreError::NotFound { what: "action" })?;
    if current.version != expected {
        return Err(StoreError::VersionConflict {
            expected,
            found: current.version,
        });
    }
    let version = expected + 1;
    tx.execute(
        "UPDATE actions SET version = ?1, name = ?2, updated_at = ?3 WHERE id = ?4 AND version = ?5",
        params![version, def.name, actor.now.0, id.as_str(), expected],
    )
    .map_err(|e| constraint(e, "action"))?;
    insert_version(tx, id, version, def, actor)?;
    append(
        tx,
        actor,
        Entry {
            env: Some(env.as_str()),
            kind: "action.updated",
            subject: id.as_str(),
            before: Some(json!({"version": expected, "definition": current.definition})),
            after: Some(json!({"version": version, "definition": def})),
        },
    )?;
    if let Some(why) = Cancellation::of_update(current.definition.enabled, def.enabled) {
        super::approvals::cancel_for_action(tx, env, id, why, actor.now)?;
    }
    action(tx, env, id.as_str())?.ok_or(StoreError::NotFound { what: "action" })
}

pub(crate) fn list_actions(
    conn: &Connection,
    env: &EnvironmentId,
) -> StoreResult<Vec<ActionRecord>> {
    let sql = format!(
        "SELECT {} FROM {} WHERE a.env_id = ?1 AND a.deleted_at IS NULL ORDER BY a.created_at, a.id",
        rows::ACTION_COLUMNS,
        rows::ACTION_FROM
    );
    query_all(conn, &sql, &[&env.as_str()], rows::action)
}

pub(crate) fn delete_action(
    tx: &Transaction<'_>,
    env: &EnvironmentId,
    id: &ActionId,
    actor: &Actor,
) -> StoreResult<bool> {
    let changed = tx
        .execute(
            "UPDATE actions SET deleted_at = ?1 WHERE env_id = ?2 AND id = ?3 AND deleted_at IS NULL",
            params![actor.now.0, env.as_str(), id.as_str()],
        )
        .map_err(unavailable)?;
    if changed > 0 {
        append(
            tx,
            actor,
            Entry {
                env: Some(env.as_str()),
                kind: "action.deleted",
                subject: id.as_str(),
                before: None,
                after: None,
            },
        )?;
        super::approvals::cancel_for_action(tx, env, id, Cancellation::ActionDeleted, actor.now)?;
    }
    Ok(changed > 0)
}

pub(crate) fn action_versions(
    conn: &Connection,
    env: &EnvironmentId,
    id: &ActionId,
) -> StoreResult<Vec<ActionVersion>> {
    let sql = "SELECT v.action_id, v.version, v.definition, v.created_at, v.created_by
               FROM action_versions v JOIN actions a ON a.id = v.action_id
               WHERE a.env_id = ?1 AND a.id = ?2 ORDER BY v.version";
    query_all(conn, sql, &[&env.as_str(), &id.as_str()], |row| {
        let raw: String = rows::col(row, 2)?;
        Ok(ActionVersion {
            action_id: ActionId::parse(&rows::col::<String>(row, 0)?)
                .map_err(|e| rows::corrupt("id", e))?,
            version: rows::col(row, 1)?,
            definition: rows::definition(&raw)?,
            created_at: steward_core::Millis(rows::col(row, 3)?),
            created_by: rows::col::<Option<String>>(row, 4)?
                .map(|k| steward_core::KeyId::parse(&k).map_err(|e| rows::corrupt("id", e)))
                .transpose()?,
        })
    })
}

/// Halts (`halted = true`, with a reason) or resumes an environment: the kill switch.
pub(crate) fn set_halted(
    tx: &Transaction<'_>,
    env: &EnvironmentId,
    halted: bool,
    reason: Option<&str>,
    actor: &Actor,
) -> StoreResult<Environment> {
    let before = environment(tx, env)?.ok_or(StoreError::NotFound {
        what: "environment",
    })?;
    tx.execute(
        "UPDATE environments SET halted = ?1, halt_reason = ?2 WHERE id = ?3",
        params![halted, if halted { reason } else { None }, env.as_str()],
    )
    .map_err(unavailable)?;
    append(
        tx,
        actor,
        Entry {
            env: Some(env.as_str()),
            kind: if halted {
                "environment.halted"
            } else {
                "environment.resumed"
            },
            subject: env.as_str(),
            before: Some(json!({"halted": before.halted, "reason": before.halt_reason})),
            after: Some(json!({"halted": halted, "reason": if halted { reason } else { None }})),
        },
    )?;
    environment(tx, env)?.ok_or(StoreError::NotFound {
        what: "environment",
    })
}

/// True while the environment is halted. Read inside the transaction that records an attempt,
/// so no attempt committed after a halt can be sent.
pub(crate) fn is_halted(conn: &Connection, env: &EnvironmentId) -> StoreResult<bool> {
    Ok(environment(conn, env)?.is_some_and(|e| e.halted))
}

/// Every invocation in the environment whose effect is `ready` (allowed to run, not attempted):
/// the work a halt parked, dispatched once on resume.
pub(crate) fn ready_invocations(
    conn: &Connection,
    env: &EnvironmentId,
) -> StoreResult<Vec<InvocationRecord>> {
    let sql = format!(
        "SELECT {} FROM invocations WHERE env_id = ?1 AND state = 'ready' ORDER BY created_at, id",
        rows::INVOCATION_COLUMNS
    );
    query_all(conn, &sql, &[&env.as_str()], rows::invocation)
}
