//! The embedded store's schema. Applied idempotently on open.
//!
//! Three of the tables the invoke hot path appends to, keyed by text, are `WITHOUT ROWID`
//! (`attempts`, `evidence`, `impact_reservations`): their rows live in their primary key's
//! B-tree, so an insert writes one B-tree where a rowid table writes two (the table and the
//! implicit index of its key). Their keys begin with an effect id, which grows with time, so an
//! effect's rows are new together at the end of the tree (`impact_reservations` is keyed by
//! effect, then limit, for that: by limit first, an effect's reservations under two limits would
//! sit on two pages, and a second index by effect would be needed).
//!
//! The other text-keyed tables keep their rowid. `invocations` rows carry the caller's input and
//! the provider's answer, of any size, and a `WITHOUT ROWID` row spills to overflow pages past
//! about a quarter of a page. `idempotency` is keyed by the client's `Idempotency-Key`, in no
//! order: its rows would be scattered over the B-tree and, with requests in flight at once, each
//! answer would rewrite a page of its own, where a rowid table keeps the newest rows together.
//! `effects` rows are larger, and its operation-key index would grow by the text key it would
//! point with. bench/PROFILE.md has the measurements. Stores created before are rebuilt on open
//! ([`ROWLESS`]).

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
) WITHOUT ROWID;
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
) WITHOUT ROWID;
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
    id INTEGER PRIMARY KEY,
    seq INTEGER UNIQUE,
    at INTEGER NOT NULL,
    env_id TEXT,
    actor TEXT,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    before TEXT,
    after TEXT,
    content_hash TEXT,
    prev_hash TEXT,
    hash TEXT
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
    PRIMARY KEY (effect_id, limit_id)
) WITHOUT ROWID;
-- A limit's usage in one window reads each reservation's state and amount from the table (the
-- amount was never in the index), so the index leaves `state` out: settling a reservation then
-- leaves its entry where it is.
CREATE INDEX IF NOT EXISTS impact_reservations_window ON impact_reservations(limit_id, window_start);
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

/// `(table, column, type)`: the fencing epochs (schema version 3; docs/DECISIONS.md, "Fencing
/// tokens"). An effect's epoch grows at each takeover and an attempt records the one it was
/// begun under; the audit sealer's and a webhook claim's grow at each new holder. Rows from
/// before start at epoch 0. Added before `attempts` is rebuilt rowless, whose copy
/// ([`ROWLESS`]) carries `fence`.
pub const FENCE_COLUMNS: &[(&str, &str, &str)] = &[
    ("effects", "fence", "INTEGER NOT NULL DEFAULT 0"),
    ("attempts", "fence", "INTEGER NOT NULL DEFAULT 0"),
    ("audit_head", "sealer_epoch", "INTEGER NOT NULL DEFAULT 0"),
    (
        "webhook_subscriptions",
        "lease_epoch",
        "INTEGER NOT NULL DEFAULT 0",
    ),
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
/// `effects_in_flight` (replaced by `effects_open`), `impact_reservations_effect` (the primary key
/// of `impact_reservations` begins with the effect), `audit_unsealed` (a partial index of the
/// unsealed events: the unique index on `audit.seq` holds them already, first and in `id` order,
/// so every event entered and left one index more than the sealer needs).
pub const DROPPED_INDEXES: &str = r#"
DROP INDEX IF EXISTS invocations_effect;
DROP INDEX IF EXISTS effects_state;
DROP INDEX IF EXISTS effects_in_flight;
DROP INDEX IF EXISTS impact_reservations_effect;
DROP INDEX IF EXISTS audit_unsealed;
"#;

/// A table stored `WITHOUT ROWID` since issue #13, and how a store created before rebuilds it.
pub struct Rowless {
    pub table: &'static str,
    /// The table as a store created now has it (the columns later schemas added included),
    /// under the name `<table>_rowless`.
    pub create: &'static str,
    /// Every column, copied as it is.
    pub columns: &'static str,
}

/// The tables stored `WITHOUT ROWID` (see the module's documentation). A store whose table still
/// has a rowid gets it rebuilt on open: created anew under a temporary name, every row copied, the old table (and its indexes)
/// dropped, the new one renamed; its indexes are then created again from the schema above.
pub const ROWLESS: &[Rowless] = &[
    Rowless {
        table: "attempts",
        create: r#"CREATE TABLE attempts_rowless (
    effect_id TEXT NOT NULL,
    number INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    deadline_at INTEGER NOT NULL,
    finished_at INTEGER,
    status TEXT NOT NULL,
    response_status INTEGER,
    error TEXT,
    owner TEXT,
    fence INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (effect_id, number)
) WITHOUT ROWID"#,
        columns: "effect_id, number, started_at, deadline_at, finished_at, status, response_status, error, owner, fence",
    },
    Rowless {
        table: "evidence",
        create: r#"CREATE TABLE evidence_rowless (
    effect_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at INTEGER NOT NULL,
    kind TEXT NOT NULL,
    source TEXT NOT NULL,
    message TEXT NOT NULL,
    data TEXT,
    actor TEXT,
    PRIMARY KEY (effect_id, seq)
) WITHOUT ROWID"#,
        columns: "effect_id, seq, at, kind, source, message, data, actor",
    },
    Rowless {
        table: "impact_reservations",
        create: r#"CREATE TABLE impact_reservations_rowless (
    limit_id TEXT NOT NULL REFERENCES impact_limits(id),
    effect_id TEXT NOT NULL,
    env_id TEXT NOT NULL,
    amount INTEGER NOT NULL,
    window_start INTEGER NOT NULL,
    state TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (effect_id, limit_id)
) WITHOUT ROWID"#,
        columns: "limit_id, effect_id, env_id, amount, window_start, state, created_at, updated_at",
    },
];

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

/// Rebuilds an `audit` table from before sealing (issue #13), where every event was chained as it
/// was written (`seq` was the primary key). Its events become the sealed prefix: their ids are
/// their sequence numbers and their hashes are kept (they have no content hash: their chain
/// hash covers their content).
pub const SEAL_AUDIT_TABLE: &str = r#"
CREATE TABLE audit_sealed (
    id INTEGER PRIMARY KEY,
    seq INTEGER UNIQUE,
    at INTEGER NOT NULL,
    env_id TEXT,
    actor TEXT,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    before TEXT,
    after TEXT,
    content_hash TEXT,
    prev_hash TEXT,
    hash TEXT
);
INSERT INTO audit_sealed (id, seq, at, env_id, actor, kind, subject, before, after, prev_hash, hash)
SELECT seq, seq, at, env_id, actor, kind, subject, before, after, prev_hash, hash FROM audit;
DROP TABLE audit;
ALTER TABLE audit_sealed RENAME TO audit;
"#;

/// The sealer's side of the audit log: the one row holding the chain's head and the sealer's
/// lease (seeded by `audit_log::migrate`). The unsealed events are found without a scan through
/// the unique index on `seq`, which holds them first (`seq` NULL), in `id` order.
pub const AUDIT_SEAL_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS audit_head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL,
    sealer TEXT,
    lease_until INTEGER NOT NULL,
    sealed_at INTEGER
);
"#;

/// Links between effects, written with the effect that makes them (`crate::links`): `depends_on`
/// rows name an effect that had to hold `outcome` when this one was recorded, a `compensates`
/// row the settled effect this one undoes. Keyed by the new effect, which grows with time;
/// `effect_links_target` finds an effect's compensations.
pub const LINKS_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS effect_links (
    effect_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    target_id TEXT NOT NULL,
    outcome TEXT,
    PRIMARY KEY (effect_id, kind, target_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS effect_links_target ON effect_links(target_id, kind);
CREATE UNIQUE INDEX IF NOT EXISTS effect_links_one_per_preview ON effect_links(target_id)
    WHERE kind = 'preview';
CREATE TABLE IF NOT EXISTS previews (
    id TEXT PRIMARY KEY,
    env_id TEXT NOT NULL,
    action_id TEXT NOT NULL,
    action_name TEXT NOT NULL,
    action_version INTEGER NOT NULL,
    input TEXT NOT NULL,
    input_fingerprint TEXT NOT NULL,
    request_digest TEXT NOT NULL,
    body TEXT NOT NULL,
    run_id TEXT,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    refreshes TEXT,
    superseded_by TEXT
);
"#;

/// Per-key budgets (`crate::budget`): one row per key that ever had one, naming the hidden
/// impact limit row its reservations count against. A deleted budget keeps its row (with
/// `deleted_at`) so a later put reuses its limit row and its month's usage.
pub const BUDGET_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS budgets (
    key_id TEXT PRIMARY KEY,
    env_id TEXT NOT NULL REFERENCES environments(id),
    limit_id TEXT NOT NULL UNIQUE REFERENCES impact_limits(id),
    monthly_cost_cents_cap INTEGER,
    dimension_caps TEXT NOT NULL,
    alert_threshold REAL NOT NULL,
    enabled INTEGER NOT NULL,
    deleted_at INTEGER,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS budgets_env ON budgets(env_id, key_id);
"#;

/// Connected accounts (`crate::connection`): one row per secret that holds an integration's
/// credential, with the provider's last answer about it. No part of the credential.
pub const CONNECTION_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS connections (
    env_id TEXT NOT NULL REFERENCES environments(id),
    secret_name TEXT NOT NULL,
    integration_id TEXT NOT NULL,
    auth_kind TEXT NOT NULL,
    description TEXT,
    health_status TEXT NOT NULL,
    health_reason TEXT,
    checked_at INTEGER NOT NULL,
    secret_created_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (env_id, secret_name)
);
"#;

/// Columns of schema version 3, added on open when missing: edit-and-approve
/// (`crate::input_edit`: an invocation's edited input and the edit's fingerprint, editor and
/// time, and an approval's edit) and shadow policies (what they would have decided, on the
/// invocation).
pub const EDIT_COLUMNS: &[(&str, &str)] = &[
    ("invocations", "edited_input"),
    ("invocations", "input_edit"),
    ("approvals", "edit"),
    ("invocations", "shadow_decisions"),
];

/// OAuth consent sessions (`crate::connection::ConnectionSession`): no token, only the
/// digest of each session's `state` and its sealed PKCE verifier.
pub const CONNECTION_SESSION_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS connection_sessions (
    id TEXT PRIMARY KEY,
    env_id TEXT NOT NULL REFERENCES environments(id),
    integration_id TEXT NOT NULL,
    secret_name TEXT NOT NULL,
    description TEXT,
    state_digest TEXT NOT NULL UNIQUE,
    verifier_sealed TEXT NOT NULL,
    redirect_uri TEXT NOT NULL,
    reason TEXT,
    status TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS connection_sessions_env ON connection_sessions(env_id, id);
"#;

/// Columns runs add to existing tables, added on open when missing: the span an invocation
/// was made under.
pub const RUN_COLUMNS: &[(&str, &str)] = &[("invocations", "parent_span_id")];

/// Runs, their spans and feedback (`runs.rs`). The columns are what lists filter and order on;
/// the rest of each record is one JSON document.
pub const RUN_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    env_id TEXT NOT NULL REFERENCES environments(id),
    status TEXT NOT NULL,
    name TEXT,
    agent_id TEXT,
    user_id TEXT,
    trace_id TEXT NOT NULL,
    body TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    ended_at INTEGER,
    updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_env_started ON runs(env_id, started_at);
CREATE TABLE IF NOT EXISTS run_spans (
    run_id TEXT NOT NULL REFERENCES runs(id),
    span_id TEXT NOT NULL,
    parent_span_id TEXT,
    document TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (run_id, span_id)
);
CREATE TABLE IF NOT EXISTS run_feedback (
    id TEXT PRIMARY KEY,
    env_id TEXT NOT NULL REFERENCES environments(id),
    run_id TEXT NOT NULL REFERENCES runs(id),
    span_id TEXT,
    document TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS run_feedback_run ON run_feedback(run_id, created_at);
CREATE INDEX IF NOT EXISTS invocations_run ON invocations(env_id, run_id) WHERE run_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS approvals_run ON approvals(env_id, run_id) WHERE run_id IS NOT NULL;
"#;

/// Signed receipts (`crate::receipts`): the signing keys (the private half sealed by the
/// vault), the issuer's cursor over the sealed audit log, and the receipts, chained per
/// environment, one per settlement event (`audit_seq` is unique).
pub const RECEIPT_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS receipt_keys (
    id TEXT PRIMARY KEY,
    public_key TEXT NOT NULL UNIQUE,
    nonce BLOB NOT NULL,
    sealed BLOB NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS receipt_cursor (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    audit_seq INTEGER NOT NULL
);
INSERT OR IGNORE INTO receipt_cursor (id, audit_seq) VALUES (1, 0);
CREATE TABLE IF NOT EXISTS receipts (
    env_id TEXT NOT NULL REFERENCES environments(id),
    seq INTEGER NOT NULL,
    effect_id TEXT NOT NULL,
    audit_seq INTEGER NOT NULL UNIQUE,
    key_id TEXT NOT NULL REFERENCES receipt_keys(id),
    digest TEXT NOT NULL,
    previous_digest TEXT NOT NULL,
    body TEXT NOT NULL,
    issued_at INTEGER NOT NULL,
    PRIMARY KEY (env_id, seq)
);
CREATE INDEX IF NOT EXISTS receipts_effect ON receipts(env_id, effect_id, seq);
"#;

/// Holds (`store::Holds`): an operator's hold on an action, an operation key, or that key under
/// that action. At most one hold per environment and target.
pub const HOLD_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS holds (
    id TEXT PRIMARY KEY,
    env_id TEXT NOT NULL REFERENCES environments(id),
    action_name TEXT,
    operation_key TEXT,
    reason TEXT,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    CHECK (action_name IS NOT NULL OR operation_key IS NOT NULL)
);
CREATE UNIQUE INDEX IF NOT EXISTS holds_target
    ON holds(env_id, COALESCE(action_name, ''), COALESCE(operation_key, ''));
"#;

#[cfg(test)]
mod tests {
    use super::super::conn::{unavailable, Pool};
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

    /// The queries over the tables and indexes issue #13 changed (and the hot path's others),
    /// each with the index its plan must use. The SQL is the store's, with its parameters
    /// unbound.
    fn plans() -> Vec<(String, &'static str)> {
        let open = OPEN_STATES_TERM;
        let (inv, eff) = (
            super::super::rows::INVOCATION_COLUMNS,
            super::super::rows::EFFECT_COLUMNS,
        );
        let orphaned = "(e.owner IS NULL OR (e.owner <> ?1 AND NOT EXISTS (
            SELECT 1 FROM replicas r WHERE r.id = e.owner AND r.heartbeat_at >= ?2)))";
        vec![
            // The invoke hot path.
            ("SELECT fingerprint, state, invocation_id FROM idempotency WHERE env_id = ?1 AND key = ?2 AND key_id IN (?3, ?4) ORDER BY key_id DESC".into(),
             "SEARCH idempotency USING INDEX sqlite_autoindex_idempotency_1 (env_id=? AND key_id=? AND key=?)"),
            (format!("SELECT {inv} FROM invocations WHERE env_id = ?1 AND id = ?2"),
             "SEARCH invocations USING INDEX sqlite_autoindex_invocations_1 (id=?)"),
            ("SELECT id FROM invocations WHERE env_id = ?1 AND retry_of = ?2".into(),
             "SEARCH invocations USING INDEX invocations_retry_of (env_id=? AND retry_of=?)"),
            ("SELECT e.id, e.invocation_id FROM effects e WHERE e.env_id = ?1 AND e.action_id = ?2 AND e.operation_key = ?3".into(),
             "SEARCH e USING INDEX effects_operation_key (env_id=? AND action_id=? AND operation_key=?)"),
            (format!("SELECT {inv} FROM invocations WHERE env_id = ?1 AND id = (SELECT invocation_id FROM effects WHERE env_id = ?1 AND action_id = ?2 AND operation_key = ?3)"),
             "SEARCH effects USING INDEX effects_operation_key (env_id=? AND action_id=? AND operation_key=?)"),
            (format!("SELECT {inv} FROM invocations WHERE env_id = ?1 AND id = (SELECT invocation_id FROM effects WHERE id = ?2)"),
             "SEARCH effects USING INDEX sqlite_autoindex_effects_1 (id=?)"),
            ("SELECT COALESCE(MAX(seq), 0) + 1 FROM evidence WHERE effect_id = ?1".into(),
             "SEARCH evidence USING PRIMARY KEY (effect_id=?)"),
            ("SELECT state FROM effects WHERE env_id = ?1 AND id = ?2".into(),
             "SEARCH effects USING INDEX sqlite_autoindex_effects_1 (id=?)"),
            ("UPDATE attempts SET finished_at = ?1, status = ?2, response_status = ?3, error = ?4 WHERE effect_id = ?5 AND number = ?6".into(),
             "SEARCH attempts USING PRIMARY KEY (effect_id=? AND number=?)"),
            ("UPDATE effects SET state = ?1, updated_at = ?2, attempt_count = COALESCE(?3, attempt_count), external_reference = COALESCE(?4, external_reference), owner = COALESCE(?5, owner) WHERE id = ?6".into(),
             "SEARCH effects USING INDEX sqlite_autoindex_effects_1 (id=?)"),
            ("UPDATE invocations SET state = ?1, response_status = COALESCE(?2, response_status), response_body = COALESCE(?3, response_body), error = COALESCE(?4, error), completed_at = COALESCE(completed_at, ?5) WHERE id = (SELECT invocation_id FROM effects WHERE id = ?6)".into(),
             "SEARCH invocations USING INDEX sqlite_autoindex_invocations_1 (id=?)"),
            ("UPDATE idempotency SET state = 'done' WHERE env_id = ?1 AND key = ?2 AND key_id IN (?3, ?4) AND kind = 'invoke'".into(),
             "SEARCH idempotency USING INDEX sqlite_autoindex_idempotency_1 (env_id=? AND key_id=? AND key=?)"),
            ("UPDATE idempotency SET state = 'done' WHERE env_id = ?1 AND key = ?2 AND kind = 'invoke'
               AND key_id IN ((SELECT created_by FROM invocations WHERE id = (SELECT invocation_id FROM effects WHERE id = ?3)), ?4)
               AND invocation_id = (SELECT invocation_id FROM effects WHERE id = ?3)".into(),
             "SEARCH idempotency USING INDEX sqlite_autoindex_idempotency_1 (env_id=? AND key_id=? AND key=?)"),
            ("SELECT 1 FROM impact_reservations WHERE effect_id = ?1 LIMIT 1".into(),
             "SEARCH impact_reservations USING PRIMARY KEY (effect_id=?)"),
            ("SELECT state, COALESCE(SUM(amount), 0) FROM impact_reservations WHERE limit_id = ?1 AND window_start = ?2 GROUP BY state".into(),
             "impact_reservations_window (limit_id=? AND window_start=?)"),
            ("UPDATE impact_reservations SET state = ?1, updated_at = ?2 WHERE effect_id = ?3 AND state = ?4".into(),
             "SEARCH impact_reservations USING PRIMARY KEY (effect_id=?)"),
            // Other generic `Idempotency-Key` requests.
            ("SELECT fingerprint, state, response_status, response_body FROM idempotency WHERE env_id = ?1 AND key = ?2 AND key_id IN (?3, ?4) ORDER BY key_id DESC".into(),
             "SEARCH idempotency USING INDEX sqlite_autoindex_idempotency_1 (env_id=? AND key_id=? AND key=?)"),
            ("UPDATE idempotency SET state = 'done', response_status = ?1, response_body = ?2 WHERE env_id = ?3 AND key_id = ?5 AND key = ?4 AND kind = 'generic'".into(),
             "SEARCH idempotency USING INDEX sqlite_autoindex_idempotency_1 (env_id=? AND key_id=? AND key=?)"),
            ("DELETE FROM idempotency WHERE env_id = ?1 AND key_id = ?3 AND key = ?2 AND kind = 'generic' AND state = 'in_progress'".into(),
             "SEARCH idempotency USING INDEX sqlite_autoindex_idempotency_1 (env_id=? AND key_id=? AND key=?)"),
            // One effect in detail.
            ("SELECT number, started_at, deadline_at, finished_at, status, response_status, error, owner FROM attempts WHERE effect_id = ?1 ORDER BY number".into(),
             "SEARCH attempts USING PRIMARY KEY (effect_id=?)"),
            ("SELECT seq, at, kind, source, message, data, actor FROM evidence WHERE effect_id = ?1 ORDER BY seq".into(),
             "SEARCH evidence USING PRIMARY KEY (effect_id=?)"),
            ("SELECT r.limit_id, l.name, r.amount, r.window_start, r.state FROM impact_reservations r JOIN impact_limits l ON l.id = r.limit_id WHERE r.effect_id = ?1 ORDER BY l.name, r.limit_id".into(),
             "SEARCH r USING PRIMARY KEY (effect_id=?)"),
            ("UPDATE effects SET reconcile_after = ?1, reconcile_count = reconcile_count + 1 WHERE env_id = ?2 AND id = ?3".into(),
             "SEARCH effects USING INDEX sqlite_autoindex_effects_1 (id=?)"),
            // The audit sealer: unsealed events through the unique index on `seq`.
            ("SELECT id, content_hash FROM audit WHERE seq IS NULL ORDER BY id LIMIT ?1".into(),
             "SEARCH audit USING INDEX sqlite_autoindex_audit_1 (seq=?)"),
            ("SELECT id, content_hash FROM audit WHERE seq IS NULL AND id > ?1 ORDER BY id LIMIT ?2".into(),
             "SEARCH audit USING INDEX sqlite_autoindex_audit_1 (seq=? AND rowid>?)"),
            ("SELECT EXISTS (SELECT 1 FROM audit WHERE seq IS NULL)".into(),
             "SEARCH audit USING COVERING INDEX sqlite_autoindex_audit_1 (seq=?)"),
            ("UPDATE audit SET seq = ?1, prev_hash = ?2, hash = ?3 WHERE id = ?4 AND seq IS NULL".into(),
             "SEARCH audit USING INTEGER PRIMARY KEY (rowid=?)"),
            // Open effects: the reconciler, the recovery sweep, the queue of unresolved effects.
            ("SELECT COUNT(*) FROM effects WHERE state = 'unknown'".into(),
             "effects_reconcile_due"),
            ("SELECT env_id, id, invocation_id, reconcile_count FROM effects WHERE state = 'unknown' AND (reconcile_after IS NULL OR reconcile_after <= ?1) ORDER BY COALESCE(reconcile_after, updated_at), id LIMIT ?2".into(),
             "effects_reconcile_due"),
            (format!("SELECT e.env_id, e.id, e.invocation_id, e.state, e.attempt_count, e.owner,
                EXISTS (SELECT 1 FROM approvals a WHERE a.effect_id = e.id AND a.status = 'approved')
                FROM effects e WHERE e.{open} AND e.state IN ('ready', 'dispatching') AND {orphaned}
                ORDER BY e.created_at, e.id"),
             "SEARCH e USING INDEX effects_open (state=?)"),
            (format!("SELECT {eff} FROM effects WHERE env_id = ?1 AND governed = 1 AND (?2 IS NULL OR action_id = ?2) AND state IN ('dispatching','unknown') AND {open} ORDER BY created_at DESC, id DESC LIMIT ?3 OFFSET ?4"),
             "SEARCH effects USING INDEX effects_open (state=?)"),
            (format!("SELECT COUNT(*) FROM effects WHERE env_id = ?1 AND governed = 1 AND (?2 IS NULL OR action_id = ?2) AND state IN ('unknown') AND {open}"),
             "SEARCH effects USING INDEX effects_open (state=?)"),
        ]
    }

    #[test]
    fn the_hot_path_and_open_effects_queries_search_an_index() {
        let dir = tempfile::tempdir().unwrap();
        let pool = Pool::open(&dir.path().join("steward.db")).unwrap();
        let mut failed = vec![];
        for (sql, want) in plans() {
            let plan: Vec<String> = pool
                .read(|c| {
                    let mut stmt = c
                        .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                        .map_err(unavailable)?;
                    let unbound = vec![rusqlite::types::Null; stmt.parameter_count()];
                    let rows = stmt
                        .query_map(rusqlite::params_from_iter(unbound), |r| r.get(3))
                        .map_err(unavailable)?;
                    rows.collect::<Result<_, _>>().map_err(unavailable)
                })
                .unwrap();
            if !plan.iter().any(|step| step.contains(want)) {
                failed.push(format!("{sql}\n  wanted: {want}\n  plan: {plan:?}"));
            }
        }
        assert!(failed.is_empty(), "{}", failed.join("\n"));
    }
}
