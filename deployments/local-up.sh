#!/usr/bin/env bash
# Bring up a local Prefect stack for the `pbg` deployment, then print its API URL.
#
#   deployments/local-up.sh                # server + work pool + deploy + worker
#   deployments/local-up.sh --postgres     # the same, the server's database on a private PostgreSQL
#   deployments/local-up.sh --worker-only  # a new worker for the running server (after a crash)
#
# Uses the PREFECT_HOME of the caller's environment (~/.prefect when unset): the server's
# SQLite database is $PREFECT_HOME/prefect.db (or set PREFECT_SERVER_DATABASE_CONNECTION_URL=
# postgresql+asyncpg://... for a PostgreSQL of your own before calling this), and PIDs and logs
# go to $PREFECT_HOME/pbg-local/. With --postgres, deployments/postgres.sh starts a PostgreSQL
# cluster of this stack (Debian's `postgresql` package; 127.0.0.1 only) and the server uses it.
# Steps:
#   1. `prefect server start --host 127.0.0.1 --port N` (a free port) in its own session,
#      through `python -m flows.prefect_host.prefect_server` (its SQLite write transactions take the write
#      lock first and wait for it instead of being refused), waiting for /api/health; its
#      task-run recorder and event persister write in batches (every second), its triggers
#      service is never busy with subflow events (step 2): a long run leaves no "database is
#      locked" error and drops no event;
#   2. the process work pool `pbg-local` (created if missing) and an automation that marks a
#      flow run CRASHED when its heartbeats stop (a killed worker leaves it RUNNING otherwise,
#      and `prefect flow-run retry` only retries runs in a terminal state);
#   3. `prefect deploy` of deployments/prefect.yaml with PBG_FLOW_ROOT = this repository;
#   4. `prefect worker start --pool pbg-local` in its own session, polling every 2 s, waiting
#      until the pool is READY.
# Progress goes to stderr; the last line on stdout is PREFECT_API_URL=http://127.0.0.1:N/api.
# deployments/local-down.sh stops it all.
#
# Environment: PBG_LOCAL_UP_TIMEOUT (seconds to wait for the server and the worker, default
# 240), PBG_CRASH_AFTER_SECONDS (no heartbeat for this long marks a flow run CRASHED, default
# 60; heartbeats come every 30 s), PBG_LOCAL_PORT (use this port instead of a free one),
# PBG_PG_BIN (--postgres: the directory of initdb and pg_ctl, found on PATH or under
# /usr/lib/postgresql/*/bin otherwise).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PREFECT_HOME="${PREFECT_HOME:-$HOME/.prefect}"
STATE="$PREFECT_HOME/pbg-local"
TIMEOUT="${PBG_LOCAL_UP_TIMEOUT:-240}"
CRASH_AFTER="${PBG_CRASH_AFTER_SECONDS:-60}"
POOL=pbg-local
AUTOMATION="pbg-local: mark flow runs without heartbeats crashed"

log() { printf 'local-up: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=deployments/postgres.sh
source "$ROOT/deployments/postgres.sh"

if [[ -x "$ROOT/.venv/bin/prefect" ]]; then
    PREFECT="$ROOT/.venv/bin/prefect"
    PYTHON="$ROOT/.venv/bin/python"
else
    PREFECT=$(command -v prefect) \
        || die "no prefect: neither $ROOT/.venv/bin/prefect nor \`prefect\` on PATH (run \`make setup\`)"
    PYTHON=$(command -v python3) || die "no python3 on PATH"
fi

# alive NAME: true when $STATE/NAME.pid names a running prefect process (not a zombie, not
# an unrelated process that reused the PID).
alive() {
    local pid state
    [[ -f "$STATE/$1.pid" ]] || return 1
    pid=$(<"$STATE/$1.pid")
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    state=$(ps -o stat= -p "$pid" 2>/dev/null) || return 1
    [[ "$state" != Z* ]] && ps -o args= -p "$pid" 2>/dev/null | grep -q prefect
}

# start_detached NAME CMD...: run CMD in its own session (so local-down.sh can stop its whole
# process group), output to $STATE/NAME.log, PID to $STATE/NAME.pid.
start_detached() {
    local name=$1
    shift
    setsid "$@" >"$STATE/$name.log" 2>&1 </dev/null &
    echo "$!" >"$STATE/$name.pid"
}

# tail_log NAME: the end of a log, for error messages.
tail_log() {
    log "last lines of $STATE/$1.log:"
    tail -n 30 "$STATE/$1.log" >&2 || true
}

free_port() {
    "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# http_json URL: GET URL, print the JSON body; fails (quietly) when unreachable.
http_json() {
    "$PYTHON" - "$1" <<'EOF' 2>/dev/null
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=5) as response:
    print(response.read().decode())
EOF
}

# wait_until NAME WHAT CHECK...: run CHECK every second until it succeeds; fail (with NAME's
# log) when process NAME exits or TIMEOUT seconds pass. WHAT says what is awaited.
wait_until() {
    local name=$1 what=$2 deadline=$((SECONDS + TIMEOUT))
    shift 2
    until "$@"; do
        alive "$name" || { tail_log "$name"; die "the $name exited while waiting for $what"; }
        if ((SECONDS >= deadline)); then
            tail_log "$name"
            die "waited ${TIMEOUT} s (PBG_LOCAL_UP_TIMEOUT) for $what"
        fi
        sleep 1
    done
}

server_healthy() { [[ "$(http_json "$API_URL/health")" == "true" ]]; }
pool_ready() { http_json "$API_URL/work_pools/$POOL" | grep -q '"status":"READY"'; }

ensure_work_pool() {
    if "$PREFECT" work-pool inspect "$POOL" >/dev/null 2>&1; then
        log "work pool $POOL exists"
    else
        log "creating the process work pool $POOL"
        "$PREFECT" work-pool create "$POOL" --type process >&2
    fi
}

# A flow run whose process died (worker killed, machine lost) stays RUNNING: this automation
# marks it CRASHED once its heartbeats (every PREFECT_FLOWS_HEARTBEAT_FREQUENCY = 30 s, set
# by prefect.yaml) stop for CRASH_AFTER seconds, so the UI's Retry button and
# `prefect flow-run retry` can resume it. It is Prefect's "detect zombie flows" automation:
# after each heartbeat of a flow run (for_each prefect.resource.id), expect another heartbeat
# or a terminal state of the same run within CRASH_AFTER seconds. Only the terminal states
# count besides heartbeats: a run that ended is never acted on. match_related keeps it to
# deployment runs (the `pbg` run; its subflows run in the same process and have no
# deployment), so the triggers service does no database write per subflow event, where
# SQLite's single writer made those writes collide ("database is locked") and drop events
# (before the server's writes began IMMEDIATE, flows/prefect_host/prefect_server.py; still one write fewer).
# An automation of this name from an earlier local-up.sh is replaced by this definition.
crash_automation_json() {
    cat <<EOF
{
  "name": "$AUTOMATION",
  "description": "Flow runs of a killed worker never report an end: mark them CRASHED so they can be retried.",
  "trigger": {
    "type": "event",
    "posture": "Proactive",
    "after": ["prefect.flow-run.heartbeat"],
    "expect": ["prefect.flow-run.heartbeat", "prefect.flow-run.Completed", "prefect.flow-run.Failed",
               "prefect.flow-run.Cancelled", "prefect.flow-run.Crashed"],
    "match": {"prefect.resource.id": "prefect.flow-run.*"},
    "match_related": {"prefect.resource.role": "deployment"},
    "for_each": ["prefect.resource.id"],
    "threshold": 1,
    "within": $CRASH_AFTER
  },
  "actions": [
    {"type": "change-flow-run-state", "state": "CRASHED",
     "message": "No heartbeat for $CRASH_AFTER s: the flow run's process is gone (worker killed?)"}
  ]
}
EOF
}

# ensure_crash_automation: create the automation, or replace the definition of one of this name.
ensure_crash_automation() {
    log "applying the automation '$AUTOMATION' (no heartbeat for ${CRASH_AFTER} s -> CRASHED)"
    crash_automation_json | "$PYTHON" -c '
import json, sys, urllib.request
api, definition = sys.argv[1], json.load(sys.stdin)

def call(method, path, body):
    request = urllib.request.Request(api + path, data=json.dumps(body).encode(), method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")

found = call("POST", "/automations/filter", {"automations": {"name": {"any_": [definition["name"]]}}})
if found:
    call("PUT", "/automations/" + found[0]["id"], definition)
else:
    call("POST", "/automations/", definition)
' "$API_URL" || die "could not create the automation '$AUTOMATION' on $API_URL"
}

deploy() {
    log "deploying deployments/prefect.yaml (PBG_FLOW_ROOT=$ROOT)"
    if ! (cd "$ROOT" && "$PREFECT" --no-prompt deploy --prefect-file deployments/prefect.yaml --all) \
        >"$STATE/deploy.log" 2>&1; then
        tail_log deploy
        die "prefect deploy failed"
    fi
}

start_worker() {
    log "starting a worker on $POOL (log: $STATE/worker.log)"
    # Poll every 2 s (default 10 s) so a `prefect deployment run` starts within seconds. Its
    # heartbeat stays at Prefect's 30 s: each one is a read-then-write transaction that holds
    # SQLite's write lock (it failed with "database is locked" before the server's writes
    # began IMMEDIATE, flows/prefect_host/prefect_server.py).
    PREFECT_WORKER_QUERY_SECONDS=2 PREFECT_WORKER_PREFETCH_SECONDS=5 \
        start_detached worker "$PREFECT" worker start --pool "$POOL" --type process
    wait_until worker "the work pool $POOL to be READY" pool_ready
}

mode=full
database=sqlite
case "${1:-}" in
    "") ;;
    --postgres) database=postgres ;;
    --worker-only) mode=worker ;;
    *) die "unknown argument '$1' (allowed: --postgres, --worker-only, or nothing)" ;;
esac
(($# <= 1)) || die "one argument at most (got: $*)"

# The server's task-run recorder and event persister write one transaction per event by
# default (dozens a second during training); in batches they commit about once a second each,
# so SQLite's single writer is free far more often. The task runs reach the UI <= 1 s later.
export PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE="${PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE:-1000}"
export PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL="${PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL:-1}"
export PREFECT_SERVER_SERVICES_EVENT_PERSISTER_BATCH_SIZE="${PREFECT_SERVER_SERVICES_EVENT_PERSISTER_BATCH_SIZE:-1000}"
export PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL="${PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL:-1}"

mkdir -p "$STATE"
export PBG_FLOW_ROOT="$ROOT"  # the deployment's pull step changes into it (prefect.yaml)
export PREFECT_SERVER_ANALYTICS_ENABLED=false

if [[ "$mode" == worker ]]; then
    if ! alive server || [[ ! -f "$STATE/api_url" ]]; then
        die "no running stack under $PREFECT_HOME: run deployments/local-up.sh without --worker-only"
    fi
    alive worker && die "a worker is still running under $PREFECT_HOME (PID $(<"$STATE/worker.pid")): stop it first"
    API_URL=$(<"$STATE/api_url")
    export PREFECT_API_URL="$API_URL"
    start_worker
else
    if alive server || alive worker; then
        die "a pbg-local stack is still running under $PREFECT_HOME (PIDs in $STATE):" \
            "run deployments/local-down.sh first"
    fi
    DATABASE_URL=""
    [[ "$database" == postgres ]] && DATABASE_URL=$(pg_start)
    PORT="${PBG_LOCAL_PORT:-$(free_port)}"
    API_URL="http://127.0.0.1:$PORT/api"
    rm -f "$STATE/api_url"
    log "starting the Prefect server on 127.0.0.1:$PORT (PREFECT_HOME=$PREFECT_HOME, log: $STATE/server.log)"
    unset PREFECT_API_URL  # the server must not talk to another one
    # --port does not reach the UI's settings: without PREFECT_UI_API_URL it calls port 4200.
    (
        export PREFECT_UI_API_URL="$API_URL"
        # --postgres: only the server's environment gets the URL (it holds the password).
        if [[ -n "$DATABASE_URL" ]]; then export PREFECT_SERVER_DATABASE_CONNECTION_URL="$DATABASE_URL"; fi
        # Prefect's `prefect server start`, run by flows.prefect_host.prefect_server so that its SQLite
        # writes take the lock first and wait for it (no "database is locked" refusals).
        export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
        start_detached server "$PYTHON" -m flows.prefect_host.prefect_server server start --host 127.0.0.1 --port "$PORT"
    )
    wait_until server "the Prefect server to answer on $API_URL/health" server_healthy
    echo "$API_URL" >"$STATE/api_url"
    export PREFECT_API_URL="$API_URL"
    log "server up at $API_URL"
    ensure_work_pool
    ensure_crash_automation
    deploy
    start_worker
fi
log "worker polling $POOL (PID $(<"$STATE/worker.pid")); UI: ${API_URL%/api}"
echo "PREFECT_API_URL=$API_URL"
