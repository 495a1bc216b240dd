#!/usr/bin/env bash
# The PostgreSQL floor: what the database itself commits on this machine when it does, per
# request, the transactions, statements and rows Steward's workload (a) does on PostgreSQL, with
# no Steward in between: `pgbench` running a custom script, at the same concurrencies and
# duration as `steward bench`. Steward PostgreSQL (a) is reported as a ratio of it (report.py).
#
#   bench/pg-floor.sh OUT.json                       # CONCURRENCY=1,16,64 DURATION_S=10
#   PG_URL=postgres://postgres@127.0.0.1:5432/postgres CONCURRENCY=64 DURATION_S=5 bench/pg-floor.sh /tmp/floor.json
#
# Per request (one pgbench "transaction" = one run of the script = one invoke), counted from a
# statement log of Steward's (a) at concurrency 1 without group commit (`log_statement = all`
# on a scratch database, 347 requests: 30 statements, 2.2 write and 3.3 read-only transactions
# per request; bench/PROFILE.md "Group commit (#27)"):
#
# - one read-only REPEATABLE READ transaction of 6 lookups (the caller's key, its environment,
#   the action, its secret, its policies, the earlier request under the `Idempotency-Key`);
# - the intent and the attempt, one READ COMMITTED transaction: the environment's advisory lock
#   shared, the kill switch, the live limits, the budget and reservation checks, the request's
#   key and the operation key's lookups; 4 inserts (the invocation, the effect, the request's
#   key, the "accepted" evidence); one statement that moves the effect and inserts the attempt
#   and its evidence; the audit events (2 rows); COMMIT;
# - the answer, one READ COMMITTED transaction: one statement that moves the effect and closes
#   the attempt, settles the invocation, marks the request answered and inserts the response's
#   evidence; the audit event (1 row); the receipt (1 row); COMMIT;
# - one read-only transaction of 6 lookups: the effect, its attempts, evidence, reservations
#   and links, read back for the answer.
#
# So 4 transactions, 2 of them write commits that wait for a WAL flush, 28 statements, 11 rows
# inserted and 5 updated, with rows of Steward's sizes and random text keys. Not included: the
# audit sealer's updates (3 rows per request, in batches off the request's path). The tables are the
# script's own (`floor_*`), in a database of their own (`steward_pg_floor`, dropped at the end).
#
# Writes OUT.json: [{"concurrency", "requests", "seconds", "throughput", "latencyAvgMs",
# "machineBusyPct", "cpuUs": {"client", "postgres"}}]: CPU per request taken as `steward bench`
# takes it (crates/steward/src/commands/bench/procfs.rs): the machine's busy share from
# /proc/stat, every `postgres` process's user + system ticks plus those of the children it
# reaped (the pgbench backends exit at its end: the postmaster has their ticks), and pgbench's
# ("client") through this shell, which waits for it.
set -euo pipefail

OUT="${1:?usage: bench/pg-floor.sh OUT.json}"
PG_URL="${PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
CONCURRENCY="${CONCURRENCY:-1,16,64}"
DURATION_S="${DURATION_S:-10}"
DB="${PG_FLOOR_DB:-steward_pg_floor}"
URL="${PG_URL%/*}/$DB"
case "$PG_URL" in *\?*) URL="${PG_URL%%\?*}"; URL="${URL%/*}/$DB?${PG_URL#*\?}" ;; esac
command -v pgbench >/dev/null || { echo "pg-floor: pgbench is not installed (apt-get install postgresql-contrib)" >&2; exit 1; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"; psql "$PG_URL" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true' EXIT

psql "$PG_URL" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" >/dev/null
psql "$URL" -q <<'SQL'
CREATE TABLE floor_keys (hash TEXT PRIMARY KEY, env_id TEXT NOT NULL, scopes TEXT NOT NULL);
CREATE TABLE floor_envs (id TEXT PRIMARY KEY, halted BOOLEAN NOT NULL DEFAULT false);
CREATE TABLE floor_actions (env_id TEXT, name TEXT, definition TEXT NOT NULL, PRIMARY KEY (env_id, name));
CREATE TABLE floor_policies (env_id TEXT, id TEXT, spec TEXT NOT NULL, PRIMARY KEY (env_id, id));
CREATE TABLE floor_limits (env_id TEXT, id TEXT, live BOOLEAN NOT NULL, PRIMARY KEY (env_id, id));
CREATE TABLE floor_invocations (id TEXT PRIMARY KEY, env_id TEXT NOT NULL, created_at BIGINT NOT NULL,
    state TEXT NOT NULL, input TEXT NOT NULL, response TEXT);
CREATE INDEX floor_invocations_env_created ON floor_invocations (env_id, created_at);
CREATE TABLE floor_effects (id TEXT PRIMARY KEY, env_id TEXT NOT NULL, invocation_id TEXT NOT NULL,
    operation_key TEXT NOT NULL, state TEXT NOT NULL, attempts INT NOT NULL DEFAULT 0,
    fence BIGINT NOT NULL DEFAULT 0, owner TEXT, created_at BIGINT NOT NULL);
CREATE UNIQUE INDEX floor_effects_operation_key ON floor_effects (env_id, operation_key);
CREATE INDEX floor_effects_open ON floor_effects (env_id, created_at) WHERE state IN ('ready', 'dispatching');
CREATE TABLE floor_attempts (effect_id TEXT, number INT, status TEXT NOT NULL, started_at BIGINT NOT NULL,
    finished_at BIGINT, owner TEXT, fence BIGINT, PRIMARY KEY (effect_id, number));
CREATE TABLE floor_evidence (effect_id TEXT, seq INT, kind TEXT NOT NULL, detail TEXT NOT NULL,
    PRIMARY KEY (effect_id, seq));
CREATE TABLE floor_idempotency (env_id TEXT, key TEXT, key_id TEXT, state TEXT NOT NULL,
    invocation_id TEXT, PRIMARY KEY (env_id, key));
CREATE TABLE floor_receipts (id BIGSERIAL PRIMARY KEY, effect_id TEXT NOT NULL, digest TEXT NOT NULL,
    signature TEXT NOT NULL);
CREATE TABLE floor_links (effect_id TEXT, target_id TEXT, kind TEXT, PRIMARY KEY (effect_id, target_id));
CREATE TABLE floor_reservations (effect_id TEXT, limit_id TEXT, amount BIGINT, PRIMARY KEY (effect_id, limit_id));
CREATE TABLE floor_budgets (env_id TEXT, key_id TEXT, amount BIGINT, PRIMARY KEY (env_id, key_id));
CREATE TABLE floor_secrets (env_id TEXT, name TEXT, ciphertext TEXT NOT NULL, PRIMARY KEY (env_id, name));
CREATE TABLE floor_audit (id BIGSERIAL PRIMARY KEY, at BIGINT NOT NULL, env_id TEXT, kind TEXT NOT NULL,
    subject TEXT NOT NULL, after TEXT, content_hash TEXT NOT NULL, seq BIGINT);
INSERT INTO floor_envs VALUES ('env-bench');
INSERT INTO floor_keys VALUES (md5('key'), 'env-bench', 'invoke,read');
INSERT INTO floor_actions VALUES ('env-bench', 'refund', repeat('d', 600));
INSERT INTO floor_policies VALUES ('env-bench', 'p1', repeat('p', 200));
SQL

cat >"$WORK/request.sql" <<'SQL'
\set k random(1, 9000000000000000000)
BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY;
SELECT env_id, scopes FROM floor_keys WHERE hash = md5('key');
SELECT id, halted FROM floor_envs WHERE id = 'env-bench';
SELECT definition FROM floor_actions WHERE env_id = 'env-bench' AND name = 'refund';
SELECT ciphertext FROM floor_secrets WHERE env_id = 'env-bench' AND name = 'stripe';
SELECT spec FROM floor_policies WHERE env_id = 'env-bench';
SELECT state FROM floor_idempotency WHERE env_id = 'env-bench' AND key = md5(:k || 'idem');
COMMIT;
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT pg_advisory_xact_lock_shared(1398031702, hashtext('env-bench'));
SELECT halted FROM floor_envs WHERE id = 'env-bench';
SELECT id FROM floor_limits WHERE env_id = 'env-bench' AND live;
SELECT 1 FROM floor_budgets WHERE env_id = 'env-bench' AND key_id = 'key-1';
SELECT 1 FROM floor_reservations WHERE effect_id = md5(:k || 'eff');
SELECT state FROM floor_idempotency WHERE env_id = 'env-bench' AND key = md5(:k || 'idem');
SELECT id, state FROM floor_effects WHERE env_id = 'env-bench' AND operation_key = md5(:k || 'op');
INSERT INTO floor_invocations VALUES (md5(:k || 'inv'), 'env-bench', :k, 'ready', repeat('i', 400), NULL);
INSERT INTO floor_effects (id, env_id, invocation_id, operation_key, state, created_at)
    VALUES (md5(:k || 'eff'), 'env-bench', md5(:k || 'inv'), md5(:k || 'op'), 'ready', :k);
INSERT INTO floor_idempotency VALUES ('env-bench', md5(:k || 'idem'), 'key-1', 'in_progress', md5(:k || 'inv'));
INSERT INTO floor_evidence VALUES (md5(:k || 'eff'), 1, 'accepted', repeat('e', 60));
WITH moved AS (UPDATE floor_effects SET state = 'dispatching', attempts = 1, fence = fence + 1, owner = 'replica-1'
        WHERE id = md5(:k || 'eff') AND state = 'ready' RETURNING id, fence),
    attempt AS (INSERT INTO floor_attempts SELECT id, 1, 'dispatching', :k, NULL, 'replica-1', fence FROM moved RETURNING effect_id)
INSERT INTO floor_evidence SELECT effect_id, 2, 'attempt', repeat('a', 40) FROM attempt;
INSERT INTO floor_audit (at, env_id, kind, subject, after, content_hash)
    SELECT :k, 'env-bench', kind, md5(:k || 'eff'), repeat('x', 120), md5(:k || kind)
    FROM unnest(ARRAY['effect.created', 'effect.transition']) AS kind;
COMMIT;
BEGIN ISOLATION LEVEL READ COMMITTED;
WITH moved AS (UPDATE floor_effects SET state = 'succeeded' WHERE id = md5(:k || 'eff') AND state = 'dispatching'
        RETURNING id, invocation_id),
    closed AS (UPDATE floor_attempts SET status = 'succeeded', finished_at = :k
        WHERE effect_id = md5(:k || 'eff') AND number = 1 RETURNING effect_id),
    settled AS (UPDATE floor_invocations SET state = 'succeeded', response = repeat('r', 200)
        WHERE id IN (SELECT invocation_id FROM moved) RETURNING id),
    answered AS (UPDATE floor_idempotency SET state = 'done'
        WHERE env_id = 'env-bench' AND key = md5(:k || 'idem') RETURNING key)
INSERT INTO floor_evidence SELECT id, 3, 'response', repeat('s', 60) FROM moved;
INSERT INTO floor_audit (at, env_id, kind, subject, after, content_hash)
    VALUES (:k, 'env-bench', 'effect.transition', md5(:k || 'eff'), repeat('x', 120), md5(:k || 'done'));
INSERT INTO floor_receipts (effect_id, digest, signature) VALUES (md5(:k || 'eff'), md5(:k || 'r'), repeat('g', 88));
COMMIT;
BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY;
SELECT * FROM floor_effects WHERE id = md5(:k || 'eff');
SELECT * FROM floor_attempts WHERE effect_id = md5(:k || 'eff');
SELECT * FROM floor_evidence WHERE effect_id = md5(:k || 'eff');
SELECT * FROM floor_reservations WHERE effect_id = md5(:k || 'eff');
SELECT * FROM floor_links WHERE effect_id = md5(:k || 'eff');
SELECT * FROM floor_links WHERE target_id = md5(:k || 'eff');
COMMIT;
SQL

TICK_HZ=$(getconf CLK_TCK)
# Sets MACHINE_BUSY and MACHINE_TOTAL: /proc/stat's aggregate line, idle and iowait not busy.
machine_ticks() {
    local label user nice system idle iowait irq softirq steal rest
    read -r label user nice system idle iowait irq softirq steal rest </proc/stat
    MACHINE_TOTAL=$((user + nice + system + idle + iowait + irq + softirq + steal))
    MACHINE_BUSY=$((MACHINE_TOTAL - idle - iowait))
}
# Sets TICKS to utime + stime (+ cutime + cstime with "children") of the /proc/PID/stat line $1;
# the command name may hold spaces and parentheses, so fields count from the last ')'.
stat_ticks() {
    local fields
    read -r -a fields <<<"${1##*) }"
    if [ "${2:-}" = children ]; then
        TICKS=$((fields[11] + fields[12] + fields[13] + fields[14]))
    else
        TICKS=$((fields[11] + fields[12]))
    fi
}
# Sets POSTGRES_TICKS: every process named postgres, with the children it reaped.
postgres_ticks() {
    local f line comm
    POSTGRES_TICKS=0
    for f in /proc/[0-9]*/stat; do
        read -r line 2>/dev/null <"$f" || continue
        comm="${line#*(}"
        comm="${comm%)*}"
        [ "$comm" = postgres ] || continue
        stat_ticks "$line" children
        POSTGRES_TICKS=$((POSTGRES_TICKS + TICKS))
    done
}
# Waits (at most 5 s) until pgbench's backends have exited and the postmaster has reaped them, so
# their ticks are in its children's: no postgres process serves $DB and none is a zombie.
backends_reaped() {
    local f pid line state
    for _ in $(seq 1 100); do
        local busy=0
        for f in /proc/[0-9]*/stat; do
            read -r line 2>/dev/null <"$f" || continue
            case "$line" in *"(postgres) "*) ;; *) continue ;; esac
            pid="${f#/proc/}"; pid="${pid%/stat}"
            state="${line##*) }"; state="${state%% *}"
            if [ "$state" = Z ] || tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q " $DB "; then
                busy=1
                break
            fi
        done
        [ $busy = 0 ] && return 0
        sleep 0.05
    done
}
# Sets CHILD_TICKS: the children of this shell it waited for (cutime + cstime).
child_ticks() {
    local line fields
    read -r line </proc/$$/stat
    read -r -a fields <<<"${line##*) }"
    CHILD_TICKS=$((fields[13] + fields[14]))
}

echo "[" >"$WORK/rows"
first=1
for c in ${CONCURRENCY//,/ }; do
    threads=$(( c < $(nproc) ? c : $(nproc) ))
    machine_ticks; postgres_ticks; child_ticks
    busy0=$MACHINE_BUSY total0=$MACHINE_TOTAL pg0=$POSTGRES_TICKS client0=$CHILD_TICKS
    pgbench -n -M prepared -f "$WORK/request.sql" -c "$c" -j "$threads" -T "$DURATION_S" "$URL" \
        >"$WORK/pgbench-$c.out" 2>"$WORK/pgbench-$c.err" \
        || { cat "$WORK/pgbench-$c.err" >&2; exit 1; }
    child_ticks; backends_reaped; machine_ticks; postgres_ticks
    requests=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$WORK/pgbench-$c.out")
    failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$WORK/pgbench-$c.out")
    tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$WORK/pgbench-$c.out")
    latency=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' "$WORK/pgbench-$c.out")
    # Per request, in microseconds (the counts include pgbench's connection set-up and tear-down).
    cpu=$(awk -v n="${requests:-0}" -v hz="$TICK_HZ" -v busy=$((MACHINE_BUSY - busy0)) \
        -v total=$((MACHINE_TOTAL - total0)) -v pg=$((POSTGRES_TICKS - pg0)) -v client=$((CHILD_TICKS - client0)) \
        'BEGIN { n = n > 0 ? n : 1; printf "%.1f %.1f %.1f", (total > 0 ? 100 * busy / total : 0), client * 1e6 / hz / n, pg * 1e6 / hz / n }')
    read -r busy_pct client_us postgres_us <<<"$cpu"
    echo "pg-floor: c=$c $tps/s (latency average $latency ms, $requests requests, ${failed:-0} failed;" \
        "machine busy $busy_pct %, CPU per request: pgbench $client_us us, postgres $postgres_us us)" >&2
    [ $first = 1 ] || echo "," >>"$WORK/rows"
    first=0
    printf '{"concurrency": %s, "requests": %s, "failed": %s, "seconds": %s, "throughput": %s, "latencyAvgMs": %s, "machineBusyPct": %s, "cpuUs": {"client": %s, "postgres": %s}}\n' \
        "$c" "$requests" "${failed:-0}" "$DURATION_S" "$tps" "${latency:-0}" "$busy_pct" "$client_us" "$postgres_us" >>"$WORK/rows"
done
echo "]" >>"$WORK/rows"
cp "$WORK/rows" "$OUT"
