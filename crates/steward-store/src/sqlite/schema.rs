//! The embedded store's schema. Applied idempotently on open.

pub const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS environments (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    halted INTEGER NOT NULL DEFAULT 0,
    halt_reason TEXT,
    created_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY,
    env_id TEXT NOT NULL REFERENCES environments(id),
    name TEXT NOT NULL,
    scopes TEXT NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    expires_at INTEGER,
    revoked_at INTEGER,
    last_used_at INTEGER
);
CREATE TABLE IF NOT EXISTS secrets (
    env_id TEXT NOT NULL REFERENCES environments(id),
    name TEXT NOT NULL,
    nonce BLOB NOT NULL,
    ciphertext BLOB NOT NULL,
    description TEXT,
    allowed_hosts TEXT,
    allowed_placements TEXT,
    version INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (env_id, name)
);
CREATE TABLE IF NOT EXISTS actions (
    id TEXT PRIMARY KEY,
    env_id TEXT NOT NULL REFERENCES environments(id),
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    deleted_at INTEGER,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS actions_live_name ON actions(env_id, name) WHERE deleted_at IS NULL;
CREATE TABLE IF NOT EXISTS action_versions (
    action_id TEXT NOT NULL REFERENCES actions(id),
    version INTEGER NOT NULL,
    definition TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    created_by TEXT,
    PRIMARY KEY (action_id, version)
);
CREATE TABLE IF NOT EXISTS invocations (
    id TEXT PRIMARY KEY,
    env_id TEXT NOT NULL,
    action_id TEXT NOT NULL,
    action_name TEXT NOT NULL,
    action_version INTEGER NOT NULL,
    effect_id TEXT NOT NULL,
    governed INTEGER NOT NULL,
    state TEXT NOT NULL,
    input TEXT NOT NULL,
    input_fingerprint TEXT NOT NULL,
    operation_key TEXT,
    run_id TEXT,
    retry_of TEXT,
    response_status INTEGER,
    response_body TEXT,
    error TEXT,
    decision TEXT,
    approval_id TEXT,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    completed_at INTEGER
);
CREATE INDEX IF NOT EXISTS invocations_env_created ON invocations(env_id, created_at);
CREATE UNIQUE INDEX IF NOT EXISTS invocations_retry_of ON invocations(env_id, retry_of) WHERE retry_of IS NOT NULL;
CREATE TABLE IF NOT EXISTS effects (
    id TEXT PRIMARY KEY,
    env_id TEXT NOT NULL,
    invocation_id TEXT NOT NULL,
    action_id TEXT NOT NULL,
    action_name TEXT NOT NULL,
    operation_key TEXT,
    governed INTEGER NOT NULL,
    state TEXT NOT NULL,
    attempt_count INTEGER NOT NULL DEFAULT 0,
    external_reference TEXT,
    provider_idempotency_key TEXT,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    reconcile_after INTEGER,
    reconcile_count INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS effects_operation_key
    ON effects(env_id, action_id, operation_key) WHERE operation_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS effects_reconcile_due ON effects(reconcile_after) WHERE state = 'unknown';
CREATE TABLE IF NOT EXISTS attempts (
    effect_id TEXT NOT NULL,
    number INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    deadline_at INTEGER NOT NULL,
    finished_at INTEGER,
    status TEXT NOT NULL,
    response_status INTEGER,
    error TEXT,
    PRIMARY KEY (effect_id, number)
);
CREATE TABLE IF NOT EXISTS evidence (
    effect_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at INTEGER NOT NULL,
    kind TEXT NOT NULL,
    source TEXT NOT NULL,
    message TEXT NOT NULL,
    data TEXT,
    actor TEXT,
    PRIMARY KEY (effect_id, seq)
);
CREATE TABLE IF NOT EXISTS idempotency (
    env_id TEXT NOT NULL,
    key_id TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    invocation_id TEXT,
    response_status INTEGER,
    response_body TEXT,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (env_id, key_id, key)
);
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY,
    at INTEGER NOT NULL,
    env_id TEXT,
    actor TEXT,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    before TEXT,
    after TEXT,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
);
"#;

pub const APPROVAL_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY,
    env_id TEXT NOT NULL REFERENCES environments(id),
    status TEXT NOT NULL,
    title TEXT NOT NULL,
    description TEXT,
    payload TEXT NOT NULL,
    invocation_id TEXT,
    effect_id TEXT,
    action_id TEXT,
    action_version INTEGER,
    input_fingerprint TEXT,
    requested_by TEXT NOT NULL,
    required_approvals INTEGER NOT NULL,
    decision_origin TEXT,
    decided_at INTEGER,
    expires_at INTEGER,
    run_id TEXT,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS approvals_env_created ON approvals(env_id, created_at);
CREATE INDEX IF NOT EXISTS approvals_pending_expiry ON approvals(expires_at) WHERE status = 'pending';
CREATE TABLE IF NOT EXISTS approval_decisions (
    approval_id TEXT NOT NULL REFERENCES approvals(id),
    key_id TEXT NOT NULL,
    decision TEXT NOT NULL,
    note TEXT,
    at INTEGER NOT NULL,
    PRIMARY KEY (approval_id, key_id)
);
"#;

/// Governance: approval policies with immutable versions, impact limits, and the reservations
/// effects hold against limits.
pub const GOVERNANCE_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS policies (
    id TEXT PRIMARY KEY,
    env_id TEXT NOT NULL REFERENCES environments(id),
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    deleted_at INTEGER,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS policies_live_name ON policies(env_id, name) WHERE deleted_at IS NULL;
CREATE TABLE IF NOT EXISTS policy_versions (
    policy_id TEXT NOT NULL REFERENCES policies(id),
    version INTEGER NOT NULL,
    spec TEXT,
    change_note TEXT,
    created_at INTEGER NOT NULL,
    created_by TEXT,
    PRIMARY KEY (policy_id, version)
);
CREATE TABLE IF NOT EXISTS impact_limits (
    id TEXT PRIMARY KEY,
    env_id TEXT NOT NULL REFERENCES environments(id),
    name TEXT NOT NULL,
    dimension TEXT NOT NULL,
    unit TEXT NOT NULL,
    currency TEXT,
    period TEXT NOT NULL,
    amount INTEGER NOT NULL,
    action_name TEXT,
    archived_at INTEGER,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS impact_limits_env ON impact_limits(env_id, created_at);
CREATE TABLE IF NOT EXISTS impact_reservations (
    limit_id TEXT NOT NULL REFERENCES impact_limits(id),
    effect_id TEXT NOT NULL,
    env_id TEXT NOT NULL,
    amount INTEGER NOT NULL,
    window_start INTEGER NOT NULL,
    state TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (limit_id, effect_id)
);
CREATE INDEX IF NOT EXISTS impact_reservations_effect ON impact_reservations(effect_id);
CREATE INDEX IF NOT EXISTS impact_reservations_window ON impact_reservations(limit_id, window_start, state);
"#;

/// Replicas and the ownership of in-flight work. The embedded store is served by one process
/// at a time, but records owners the same way as the shared store, so that one recovery sweep
/// serves both. The `owner` columns are added to existing tables by [`OWNER_COLUMNS`].
pub const REPLICA_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS replicas (
    id TEXT PRIMARY KEY,
    started_at INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL
);
"#;

/// `(table, column)`: the replica owning a row's in-flight work. Added when missing, so a store
/// created by an earlier Steward opens; its rows have no owner, which recovery treats as a dead
/// one.
pub const OWNER_COLUMNS: &[(&str, &str)] = &[
    ("effects", "owner"),
    ("attempts", "owner"),
    ("idempotency", "owner"),
];

/// The effect states an effect leaves again, as SQL: `effects_open` holds the effects in them.
/// SQLite uses a partial index only where the query's WHERE clause implies the index's
/// condition, and it proves that for an `IN` list only when the query has the same list: a
/// query over open effects `AND`s [`OPEN_STATES_TERM`] to its own condition on `state`.
macro_rules! open_states {
    () => {
        "'awaiting_approval', 'ready', 'dispatching', 'unknown'"
    };
}

/// The condition of `effects_open`, for queries over open effects to repeat.
pub const OPEN_STATES_TERM: &str = concat!("state IN (", open_states!(), ")");

/// Indexes over the owner columns, created once the columns exist. `effects_open` is the one
/// index over effect states: the hot path writes it once per commit (an effect enters it `ready`
/// and leaves it settled), where an index over every state also moved each settled effect's
/// entry to the end of its state's run. The recovery sweep and listings of open effects (the
/// console's queue of unresolved ones) read it; the reconciler reads `effects_reconcile_due`;
/// listings of settled states scan the table, as the unfiltered listing does.
pub const OWNER_INDEXES: &str = concat!(
    "CREATE INDEX IF NOT EXISTS effects_open ON effects(state, owner) WHERE state IN (",
    open_states!(),
    ");"
);

/// Indexes that earlier schemas created and this one does not: `invocations_effect` (the
/// invocation of an effect is found through `effects.invocation_id`), `effects_state` and
/// `effects_in_flight` (replaced by `effects_open`).
pub const DROPPED_INDEXES: &str = r#"
DROP INDEX IF EXISTS invocations_effect;
DROP INDEX IF EXISTS effects_state;
DROP INDEX IF EXISTS effects_in_flight;
"#;

/// `(table, column, type)` added to tables created by an earlier Steward: a key's expiry,
/// revocation and last use. Their rows get `NULL`: no expiry, not revoked, never seen used.
pub const KEY_LIFECYCLE_COLUMNS: &[(&str, &str, &str)] = &[
    ("api_keys", "expires_at", "INTEGER"),
    ("api_keys", "revoked_at", "INTEGER"),
    ("api_keys", "last_used_at", "INTEGER"),
];

/// Store-wide settings, one value per name: the master key's check value.
pub const SETTINGS_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS settings (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"#;

/// Rebuilds an `idempotency` table from before `Idempotency-Key` was scoped to the calling API
/// key (SQLite cannot change a primary key in place). Its rows get the legacy scope `''`, which
/// still answers every key of their environment: which key sent a generic request was never
/// recorded, and an invoke row may name an invocation another key created.
pub const SCOPE_IDEMPOTENCY: &str = r#"
CREATE TABLE idempotency_scoped (
    env_id TEXT NOT NULL,
    key_id TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    invocation_id TEXT,
    response_status INTEGER,
    response_body TEXT,
    created_at INTEGER NOT NULL,
    owner TEXT,
    PRIMARY KEY (env_id, key_id, key)
);
INSERT INTO idempotency_scoped (env_id, key_id, key, fingerprint, kind, state, invocation_id,
    response_status, response_body, created_at, owner)
SELECT env_id, '', key, fingerprint, kind, state, invocation_id, response_status,
    response_body, created_at, owner FROM idempotency;
DROP TABLE idempotency;
ALTER TABLE idempotency_scoped RENAME TO idempotency;
"#;

/// Operator console sessions: the hash of each session token, never the token, with the key it
/// authenticates as and its expiry.
pub const CONSOLE_SESSION_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS console_sessions (
    id TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    key_id TEXT NOT NULL,
    env_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS console_sessions_key ON console_sessions(key_id);
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use steward_core::EffectState;

    #[test]
    fn the_open_states_are_the_states_that_are_not_terminal() {
        let names: Vec<String> = EffectState::ALL
            .iter()
            .filter(|s| !s.is_terminal())
            .map(|s| format!("'{}'", s.name()))
            .collect();
        assert_eq!(OPEN_STATES_TERM, format!("state IN ({})", names.join(", ")));
    }
}
