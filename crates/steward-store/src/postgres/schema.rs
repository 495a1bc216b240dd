//! The PostgreSQL schema, as numbered migrations applied on connect.
//!
//! The same tables, columns, unique indexes and foreign keys as the embedded store's schema, in
//! PostgreSQL's types: times are `BIGINT` milliseconds, flags `BOOLEAN`, JSON documents `TEXT`
//! (kept byte for byte, as the audit hashes and fingerprints were computed over them), sealed
//! values `BYTEA`. Identifiers and names that lists are ordered by use the `"C"` collation, so
//! they sort byte-wise as SQLite's `BINARY` does, whatever the database's locale.
//!
//! Migrations run in one transaction behind the write lock, so replicas starting together apply
//! each one exactly once, and running writers never see a half-migrated schema. A migration is
//! never edited once released: changes are new entries at the end of [`MIGRATIONS`].

use super::conn::{Tx, WRITE_LOCK_SQL};
use crate::error::{StoreError, StoreResult};

/// `(version, name, SQL)`, applied in order. Migrations from 7 on create with `IF NOT EXISTS`:
/// the upgrade tests take a database back by forgetting versions, and run them again.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "initial", INITIAL),
    (2, "governance", GOVERNANCE),
    (3, "replicas", REPLICAS),
    (4, "key lifecycle and scoped idempotency", KEY_LIFECYCLE),
    (5, "operator console sessions", CONSOLE_SESSIONS),
    (6, "audit sealing", AUDIT_SEALING),
    (7, "effect links", LINKS),
    (8, "per-key budgets", BUDGETS),
    (9, "connected accounts", CONNECTIONS),
    (10, "execution-bound previews", PREVIEWS),
    (11, "webhooks", super::webhooks::WEBHOOKS),
    (12, "runs, spans and feedback", RUNS),
    (
        13,
        "impact limits narrowed by resource",
        LIMIT_RESOURCE_PREFIX,
    ),
    (
        14,
        "webhook dead-letter redelivery",
        super::webhooks::REDELIVERY,
    ),
    (15, "unkeyed invokes setting", UNKEYED_INVOKES),
    (16, "fencing epochs", FENCING),
    (17, "edit and approve, shadow policies", EDIT_AND_APPROVE),
    (18, "oauth consent sessions", CONNECTION_SESSIONS),
    (19, "signed receipts", RECEIPTS),
    (20, "approval channels", APPROVAL_CHANNELS),
    (21, "holds", HOLDS),
];

/// Holds (`store::Holds`): an operator's hold on an action, an operation key, or that key under
/// that action. At most one hold per environment and target.
const HOLDS: &str = r#"
CREATE TABLE IF NOT EXISTS holds (
    id TEXT COLLATE "C" PRIMARY KEY,
    env_id TEXT COLLATE "C" NOT NULL REFERENCES environments(id),
    action_name TEXT,
    operation_key TEXT COLLATE "C",
    reason TEXT,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    CHECK (action_name IS NOT NULL OR operation_key IS NOT NULL)
);
CREATE UNIQUE INDEX IF NOT EXISTS holds_target
    ON holds(env_id, COALESCE(action_name, ''), COALESCE(operation_key, ''));
"#;

/// The fencing epochs (docs/DECISIONS.md, "Fencing tokens"): an effect's grows at each
/// takeover and an attempt records the one it was begun under; the audit sealer's and a webhook
/// claim's grow at each new holder. Existing rows start at epoch 0, and so do rows a replica of
/// the previous version writes while a rolling upgrade runs.
const FENCING: &str = r#"
ALTER TABLE effects ADD COLUMN IF NOT EXISTS fence BIGINT NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN IF NOT EXISTS fence BIGINT NOT NULL DEFAULT 0;
ALTER TABLE audit_head ADD COLUMN IF NOT EXISTS sealer_epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE webhook_subscriptions ADD COLUMN IF NOT EXISTS lease_epoch BIGINT NOT NULL DEFAULT 0;
"#;

/// Edit-and-approve (`crate::input_edit`): an invocation's edited input and the edit's
/// fingerprint, editor and time; an approval's edit. Shadow policies: what they would have
/// decided, on the invocation.
const EDIT_AND_APPROVE: &str = r#"
ALTER TABLE invocations ADD COLUMN IF NOT EXISTS edited_input TEXT;
ALTER TABLE invocations ADD COLUMN IF NOT EXISTS input_edit TEXT;
ALTER TABLE approvals ADD COLUMN IF NOT EXISTS edit TEXT;
ALTER TABLE invocations ADD COLUMN IF NOT EXISTS shadow_decisions TEXT;
"#;

/// Approval channels (issue #29 item 2): a subscription that delivers by Slack or email keeps
/// its kind and settings here (never a credential: those are sealed as its secret); `NULL` is a
/// signed webhook.
const APPROVAL_CHANNELS: &str = r#"
ALTER TABLE webhook_subscriptions ADD COLUMN IF NOT EXISTS channel TEXT;
"#;

/// The environment's `unkeyedInvokes` setting; `NULL` (every environment before it) is
/// `accept`.
const UNKEYED_INVOKES: &str = r#"
ALTER TABLE environments ADD COLUMN IF NOT EXISTS unkeyed_invokes TEXT;
"#;

/// `resourcePrefix` on impact limits.
const LIMIT_RESOURCE_PREFIX: &str = r#"
ALTER TABLE impact_limits ADD COLUMN IF NOT EXISTS resource_prefix TEXT;
"#;

/// Links between effects (`crate::links`), as in the embedded store.
const LINKS: &str = r#"
CREATE TABLE IF NOT EXISTS effect_links (
    effect_id TEXT COLLATE "C" NOT NULL,
    kind TEXT NOT NULL,
    target_id TEXT COLLATE "C" NOT NULL,
    outcome TEXT,
    PRIMARY KEY (effect_id, kind, target_id)
);
CREATE INDEX IF NOT EXISTS effect_links_target ON effect_links(target_id, kind);
"#;

/// Execution-bound previews (`crate::previews`), and the rule that one binds one effect.
const PREVIEWS: &str = r#"
CREATE UNIQUE INDEX IF NOT EXISTS effect_links_one_per_preview ON effect_links(target_id) WHERE kind = 'preview';
CREATE TABLE IF NOT EXISTS previews (
    id TEXT COLLATE "C" PRIMARY KEY,
    env_id TEXT COLLATE "C" NOT NULL,
    action_id TEXT COLLATE "C" NOT NULL,
    action_name TEXT NOT NULL,
    action_version BIGINT NOT NULL,
    input TEXT NOT NULL,
    input_fingerprint TEXT NOT NULL,
    request_digest TEXT NOT NULL,
    body TEXT NOT NULL,
    run_id TEXT,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    refreshes TEXT,
    superseded_by TEXT
);
"#;

const INITIAL: &str = r#"
CREATE TABLE environments (
    id TEXT COLLATE "C" PRIMARY KEY,
    name TEXT COLLATE "C" NOT NULL UNIQUE,
    halted BOOLEAN NOT NULL DEFAULT FALSE,
    halt_reason TEXT,
    created_at BIGINT NOT NULL
);
CREATE TABLE api_keys (
    id TEXT COLLATE "C" PRIMARY KEY,
    env_id TEXT COLLATE "C" NOT NULL REFERENCES environments(id),
    name TEXT NOT NULL,
    scopes TEXT NOT NULL,
    token_hash TEXT COLLATE "C" NOT NULL UNIQUE,
    created_at BIGINT NOT NULL
);
CREATE TABLE secrets (
    env_id TEXT COLLATE "C" NOT NULL REFERENCES environments(id),
    name TEXT COLLATE "C" NOT NULL,
    nonce BYTEA NOT NULL,
    ciphertext BYTEA NOT NULL,
    description TEXT,
    allowed_hosts TEXT,
    allowed_placements TEXT,
    version BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (env_id, name)
);
CREATE TABLE actions (
    id TEXT COLLATE "C" PRIMARY KEY,
    env_id TEXT COLLATE "C" NOT NULL REFERENCES environments(id),
    name TEXT COLLATE "C" NOT NULL,
    version BIGINT NOT NULL,
    deleted_at BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX actions_live_name ON actions(env_id, name) WHERE deleted_at IS NULL;
CREATE TABLE action_versions (
    action_id TEXT COLLATE "C" NOT NULL REFERENCES actions(id),
    version BIGINT NOT NULL,
    definition TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    created_by TEXT,
    PRIMARY KEY (action_id, version)
);
CREATE TABLE invocations (
    id TEXT COLLATE "C" PRIMARY KEY,
    env_id TEXT COLLATE "C" NOT NULL,
    action_id TEXT COLLATE "C" NOT NULL,
    action_name TEXT NOT NULL,
    action_version BIGINT NOT NULL,
    effect_id TEXT COLLATE "C" NOT NULL,
    governed BOOLEAN NOT NULL,
    state TEXT NOT NULL,
    input TEXT NOT NULL,
    input_fingerprint TEXT NOT NULL,
    operation_key TEXT COLLATE "C",
    run_id TEXT,
    retry_of TEXT COLLATE "C",
    response_status BIGINT,
    response_body TEXT,
    error TEXT,
    decision TEXT,
    approval_id TEXT,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    completed_at BIGINT
);
CREATE INDEX invocations_env_created ON invocations(env_id, created_at);
CREATE INDEX invocations_effect ON invocations(effect_id);
CREATE UNIQUE INDEX invocations_retry_of ON invocations(env_id, retry_of) WHERE retry_of IS NOT NULL;
CREATE TABLE effects (
    id TEXT COLLATE "C" PRIMARY KEY,
    env_id TEXT COLLATE "C" NOT NULL,
    invocation_id TEXT COLLATE "C" NOT NULL,
    action_id TEXT COLLATE "C" NOT NULL,
    action_name TEXT NOT NULL,
    operation_key TEXT COLLATE "C",
    governed BOOLEAN NOT NULL,
    state TEXT NOT NULL,
    attempt_count BIGINT NOT NULL DEFAULT 0,
    external_reference TEXT,
    provider_idempotency_key TEXT,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    reconcile_after BIGINT,
    reconcile_count BIGINT NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX effects_operation_key
    ON effects(env_id, action_id, operation_key) WHERE operation_key IS NOT NULL;
CREATE INDEX effects_state ON effects(state);
CREATE INDEX effects_env_created ON effects(env_id, created_at);
CREATE INDEX effects_reconcile_due ON effects(reconcile_after) WHERE state = 'unknown';
CREATE TABLE attempts (
    effect_id TEXT COLLATE "C" NOT NULL,
    number BIGINT NOT NULL,
    started_at BIGINT NOT NULL,
    deadline_at BIGINT NOT NULL,
    finished_at BIGINT,
    status TEXT NOT NULL,
    response_status BIGINT,
    error TEXT,
    PRIMARY KEY (effect_id, number)
);
CREATE TABLE evidence (
    effect_id TEXT COLLATE "C" NOT NULL,
    seq BIGINT NOT NULL,
    at BIGINT NOT NULL,
    kind TEXT NOT NULL,
    source TEXT NOT NULL,
    message TEXT NOT NULL,
    data TEXT,
    actor TEXT,
    PRIMARY KEY (effect_id, seq)
);
CREATE TABLE idempotency (
    env_id TEXT COLLATE "C" NOT NULL,
    key TEXT COLLATE "C" NOT NULL,
    fingerprint TEXT NOT NULL,
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    invocation_id TEXT,
    response_status BIGINT,
    response_body TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (env_id, key)
);
CREATE INDEX idempotency_in_progress ON idempotency(state) WHERE state = 'in_progress';
CREATE TABLE audit (
    seq BIGINT PRIMARY KEY,
    at BIGINT NOT NULL,
    env_id TEXT,
    actor TEXT,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    before TEXT,
    after TEXT,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
);
CREATE TABLE approvals (
    id TEXT COLLATE "C" PRIMARY KEY,
    env_id TEXT COLLATE "C" NOT NULL REFERENCES environments(id),
    status TEXT NOT NULL,
    title TEXT NOT NULL,
    description TEXT,
    payload TEXT NOT NULL,
    invocation_id TEXT COLLATE "C",
    effect_id TEXT COLLATE "C",
    action_id TEXT COLLATE "C",
    action_version BIGINT,
    input_fingerprint TEXT,
    requested_by TEXT NOT NULL,
    required_approvals BIGINT NOT NULL,
    decision_origin TEXT,
    decided_at BIGINT,
    expires_at BIGINT,
    run_id TEXT,
    created_at BIGINT NOT NULL
);
CREATE INDEX approvals_env_created ON approvals(env_id, created_at);
CREATE INDEX approvals_effect ON approvals(effect_id) WHERE effect_id IS NOT NULL;
CREATE INDEX approvals_pending_expiry ON approvals(expires_at) WHERE status = 'pending';
CREATE TABLE approval_decisions (
    approval_id TEXT COLLATE "C" NOT NULL REFERENCES approvals(id),
    key_id TEXT COLLATE "C" NOT NULL,
    decision TEXT NOT NULL,
    note TEXT,
    at BIGINT NOT NULL,
    PRIMARY KEY (approval_id, key_id)
);
"#;

/// Approval policies with immutable versions, impact limits, and the reservations effects hold
/// against limits.
const GOVERNANCE: &str = r#"
CREATE TABLE policies (
    id TEXT COLLATE "C" PRIMARY KEY,
    env_id TEXT COLLATE "C" NOT NULL REFERENCES environments(id),
    name TEXT COLLATE "C" NOT NULL,
    version BIGINT NOT NULL,
    deleted_at BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX policies_live_name ON policies(env_id, name) WHERE deleted_at IS NULL;
CREATE TABLE policy_versions (
    policy_id TEXT COLLATE "C" NOT NULL REFERENCES policies(id),
    version BIGINT NOT NULL,
    spec TEXT,
    change_note TEXT,
    created_at BIGINT NOT NULL,
    created_by TEXT,
    PRIMARY KEY (policy_id, version)
);
CREATE TABLE impact_limits (
    id TEXT COLLATE "C" PRIMARY KEY,
    env_id TEXT COLLATE "C" NOT NULL REFERENCES environments(id),
    name TEXT NOT NULL,
    dimension TEXT NOT NULL,
    unit TEXT NOT NULL,
    currency TEXT,
    period TEXT NOT NULL,
    amount BIGINT NOT NULL,
    action_name TEXT,
    archived_at BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX impact_limits_env ON impact_limits(env_id, created_at);
CREATE TABLE impact_reservations (
    limit_id TEXT COLLATE "C" NOT NULL REFERENCES impact_limits(id),
    effect_id TEXT COLLATE "C" NOT NULL,
    env_id TEXT COLLATE "C" NOT NULL,
    amount BIGINT NOT NULL,
    window_start BIGINT NOT NULL,
    state TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (limit_id, effect_id)
);
CREATE INDEX impact_reservations_effect ON impact_reservations(effect_id);
CREATE INDEX impact_reservations_window ON impact_reservations(limit_id, window_start, state);
"#;

/// Replicas with their heartbeats and the database session they heartbeat on, and the replica
/// owning each piece of in-flight work: an effect `ready` or `dispatching`, an attempt, an
/// in-flight `Idempotency-Key` marker. Rows from before this migration have no owner, which
/// recovery treats as a dead one.
const REPLICAS: &str = r#"
CREATE TABLE replicas (
    id TEXT COLLATE "C" PRIMARY KEY,
    started_at BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL,
    session_pid INTEGER,
    session_started TIMESTAMPTZ
);
ALTER TABLE effects ADD COLUMN owner TEXT COLLATE "C";
ALTER TABLE attempts ADD COLUMN owner TEXT COLLATE "C";
ALTER TABLE idempotency ADD COLUMN owner TEXT COLLATE "C";
CREATE INDEX effects_in_flight ON effects(state, owner) WHERE state IN ('ready', 'dispatching');
"#;

/// A key's expiry, revocation and last use (existing keys: no expiry, not revoked, never seen
/// used); `Idempotency-Key` records scoped to the API key that sent them, existing rows given
/// the legacy scope `''`, which still answers every key of their environment (which key sent
/// a generic request was never recorded); and store-wide settings (the master key's check
/// value).
const KEY_LIFECYCLE: &str = r#"
ALTER TABLE api_keys ADD COLUMN expires_at BIGINT;
ALTER TABLE api_keys ADD COLUMN revoked_at BIGINT;
ALTER TABLE api_keys ADD COLUMN last_used_at BIGINT;
ALTER TABLE idempotency ADD COLUMN key_id TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE idempotency ALTER COLUMN key_id DROP DEFAULT;
ALTER TABLE idempotency DROP CONSTRAINT idempotency_pkey;
ALTER TABLE idempotency ADD PRIMARY KEY (env_id, key_id, key);
CREATE TABLE settings (
    name TEXT COLLATE "C" PRIMARY KEY,
    value TEXT NOT NULL
);
"#;

/// Operator console sessions: the hash of each session token, never the token, with the key it
/// authenticates as and its expiry.
const CONSOLE_SESSIONS: &str = r#"
CREATE TABLE console_sessions (
    id TEXT COLLATE "C" PRIMARY KEY,
    token_hash TEXT COLLATE "C" NOT NULL UNIQUE,
    key_id TEXT COLLATE "C" NOT NULL REFERENCES api_keys(id),
    env_id TEXT COLLATE "C" NOT NULL REFERENCES environments(id),
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX console_sessions_key ON console_sessions(key_id);
"#;

/// Audit events written unsealed and sealed into the chain afterwards (issue #13): an insertion
/// id from an identity column (existing events get their sequence number), the event's own
/// content hash, and the chain fields filled in by the sealer. Existing events keep their
/// sequence numbers and hashes: they are the sealed prefix (no content hash: their chain hash
/// covers their content). `audit_head` holds the chain's head, seeded with the last existing
/// event (or the genesis hash, `crate::audit::GENESIS_HASH`), and the sealer's lease.
const AUDIT_SEALING: &str = r#"
ALTER TABLE audit ADD COLUMN id BIGINT;
UPDATE audit SET id = seq;
ALTER TABLE audit ALTER COLUMN id SET NOT NULL;
ALTER TABLE audit DROP CONSTRAINT audit_pkey;
ALTER TABLE audit ADD PRIMARY KEY (id);
ALTER TABLE audit ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY;
SELECT setval(pg_get_serial_sequence('audit', 'id'), COALESCE(MAX(id), 0) + 1, false) FROM audit;
ALTER TABLE audit ALTER COLUMN seq DROP NOT NULL;
ALTER TABLE audit ALTER COLUMN prev_hash DROP NOT NULL;
ALTER TABLE audit ALTER COLUMN hash DROP NOT NULL;
ALTER TABLE audit ADD COLUMN content_hash TEXT;
CREATE UNIQUE INDEX audit_seq ON audit(seq);
CREATE INDEX audit_unsealed ON audit(id) WHERE seq IS NULL;
CREATE TABLE audit_head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq BIGINT NOT NULL,
    hash TEXT NOT NULL,
    sealer TEXT COLLATE "C",
    lease_until BIGINT NOT NULL,
    sealed_at BIGINT
);
INSERT INTO audit_head (id, seq, hash, lease_until)
SELECT 1, COALESCE(MAX(seq), 0),
       COALESCE((SELECT hash FROM audit ORDER BY seq DESC LIMIT 1),
                'sha256:0000000000000000000000000000000000000000000000000000000000000000'),
       0
FROM audit;
"#;

/// Per-key budgets (`crate::budget`): one row per key that ever had one, naming the hidden
/// impact limit row its reservations count against; a deleted budget keeps its row.
const BUDGETS: &str = r#"
CREATE TABLE IF NOT EXISTS budgets (
    key_id TEXT COLLATE "C" PRIMARY KEY,
    env_id TEXT COLLATE "C" NOT NULL REFERENCES environments(id),
    limit_id TEXT COLLATE "C" NOT NULL UNIQUE REFERENCES impact_limits(id),
    monthly_cost_cents_cap BIGINT,
    dimension_caps TEXT NOT NULL,
    alert_threshold DOUBLE PRECISION NOT NULL,
    enabled BOOLEAN NOT NULL,
    deleted_at BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS budgets_env ON budgets(env_id, key_id);
"#;

/// Connected accounts (`crate::connection`): one row per secret that holds an integration's
/// credential, with the provider's last answer about it. No part of the credential.
const CONNECTIONS: &str = r#"
CREATE TABLE IF NOT EXISTS connections (
    env_id TEXT COLLATE "C" NOT NULL REFERENCES environments(id),
    secret_name TEXT COLLATE "C" NOT NULL,
    integration_id TEXT NOT NULL,
    auth_kind TEXT NOT NULL,
    description TEXT,
    health_status TEXT NOT NULL,
    health_reason TEXT,
    checked_at BIGINT NOT NULL,
    secret_created_at BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (env_id, secret_name)
);
"#;

/// OAuth consent sessions (`crate::connection::ConnectionSession`): no token, only the
/// digest of each session's `state` and its sealed PKCE verifier.
const CONNECTION_SESSIONS: &str = r#"
CREATE TABLE IF NOT EXISTS connection_sessions (
    id TEXT COLLATE "C" PRIMARY KEY,
    env_id TEXT COLLATE "C" NOT NULL REFERENCES environments(id),
    integration_id TEXT NOT NULL,
    secret_name TEXT COLLATE "C" NOT NULL,
    description TEXT,
    state_digest TEXT COLLATE "C" NOT NULL UNIQUE,
    verifier_sealed TEXT NOT NULL,
    redirect_uri TEXT NOT NULL,
    reason TEXT,
    status TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS connection_sessions_env ON connection_sessions(env_id, id);
"#;

/// The schema version this build migrates to: the last of [`MIGRATIONS`].
pub(crate) fn current_version() -> i64 {
    MIGRATIONS.last().map_or(0, |(version, _, _)| *version)
}

/// Brings the schema up to date; a no-op when it is. Refuses a database migrated by a newer
/// Steward, whose schema this one does not know.
pub(crate) async fn migrate(tx: &Tx<'_>) -> StoreResult<()> {
    // Also taken by `begin(Write)`; taken here so this function is safe on its own.
    tx.execute(WRITE_LOCK_SQL, &[]).await?;
    // A migration rewrites whole tables: it is not bound by the session's statement timeout
    // (`conn::STATEMENT_TIMEOUT_MS`), which ends with this transaction.
    tx.batch("SET LOCAL statement_timeout = 0").await?;
    // Created only where it is missing: `CREATE TABLE IF NOT EXISTS` on an existing table makes
    // the server send a NOTICE, which every start would log.
    tx.batch(
        "DO $$ BEGIN
            IF to_regclass('steward_migrations') IS NULL THEN
                CREATE TABLE steward_migrations (
                    version BIGINT PRIMARY KEY,
                    name TEXT NOT NULL,
                    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
                );
            END IF;
        END $$",
    )
    .await?;
    let row = tx
        .query_first(
            "SELECT COALESCE(MAX(version), 0) FROM steward_migrations",
            &[],
        )
        .await?;
    let applied: i64 = match row {
        Some(row) => super::rows::col(&row, 0)?,
        None => 0,
    };
    let known = current_version();
    if applied > known {
        return Err(StoreError::Unavailable {
            message: format!(
                "the database schema is at version {applied}, newer than this Steward knows \
                 ({known}); upgrade Steward"
            ),
            source: None,
        });
    }
    for (version, name, sql) in MIGRATIONS.iter().filter(|(v, _, _)| *v > applied) {
        tracing::info!(version, name, "applying PostgreSQL schema migration");
        tx.batch(sql).await?;
        tx.execute(
            "INSERT INTO steward_migrations (version, name) VALUES ($1, $2)",
            &[version, name],
        )
        .await?;
    }
    tracing::info!(version = known, "PostgreSQL schema is current");
    Ok(())
}

/// Runs, their spans and feedback (`runs.rs`).
const RUNS: &str = r#"
CREATE TABLE IF NOT EXISTS runs (
    id TEXT COLLATE "C" PRIMARY KEY,
    env_id TEXT COLLATE "C" NOT NULL REFERENCES environments(id),
    status TEXT NOT NULL,
    name TEXT,
    agent_id TEXT,
    user_id TEXT,
    trace_id TEXT NOT NULL,
    body TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    ended_at BIGINT,
    updated_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_env_started ON runs(env_id, started_at);
CREATE TABLE IF NOT EXISTS run_spans (
    run_id TEXT COLLATE "C" NOT NULL REFERENCES runs(id),
    span_id TEXT COLLATE "C" NOT NULL,
    parent_span_id TEXT,
    document TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    seq BIGINT NOT NULL,
    PRIMARY KEY (run_id, span_id)
);
CREATE TABLE IF NOT EXISTS run_feedback (
    id TEXT COLLATE "C" PRIMARY KEY,
    env_id TEXT COLLATE "C" NOT NULL REFERENCES environments(id),
    run_id TEXT COLLATE "C" NOT NULL REFERENCES runs(id),
    span_id TEXT,
    document TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS run_feedback_run ON run_feedback(run_id, created_at);
CREATE INDEX IF NOT EXISTS invocations_run ON invocations(env_id, run_id) WHERE run_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS approvals_run ON approvals(env_id, run_id) WHERE run_id IS NOT NULL;
ALTER TABLE invocations ADD COLUMN IF NOT EXISTS parent_span_id TEXT;
"#;

/// Signed receipts (`crate::receipts`): the signing keys (the private half sealed by the
/// vault), the issuer's cursor over the sealed audit log, and the receipts, chained per
/// environment, one per settlement event (`audit_seq` is unique).
const RECEIPTS: &str = r#"
CREATE TABLE IF NOT EXISTS receipt_keys (
    id TEXT COLLATE "C" PRIMARY KEY,
    public_key TEXT NOT NULL UNIQUE,
    nonce BYTEA NOT NULL,
    sealed BYTEA NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS receipt_cursor (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    audit_seq BIGINT NOT NULL
);
INSERT INTO receipt_cursor (id, audit_seq) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
CREATE TABLE IF NOT EXISTS receipts (
    env_id TEXT COLLATE "C" NOT NULL REFERENCES environments(id),
    seq BIGINT NOT NULL,
    effect_id TEXT COLLATE "C" NOT NULL,
    audit_seq BIGINT NOT NULL UNIQUE,
    key_id TEXT COLLATE "C" NOT NULL REFERENCES receipt_keys(id),
    digest TEXT NOT NULL,
    previous_digest TEXT NOT NULL,
    body TEXT NOT NULL,
    issued_at BIGINT NOT NULL,
    PRIMARY KEY (env_id, seq)
);
CREATE INDEX IF NOT EXISTS receipts_effect ON receipts(env_id, effect_id, seq);
"#;

#[cfg(test)]
mod tests {
    use super::MIGRATIONS;

    #[test]
    fn the_audit_head_starts_at_the_genesis_hash() {
        assert!(super::AUDIT_SEALING.contains(crate::audit::GENESIS_HASH));
    }

    #[test]
    fn migrations_are_numbered_one_by_one() {
        for (i, (version, _, _)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(*version, i as i64 + 1, "migration {i} is misnumbered");
        }
    }
}
