#!/usr/bin/env bash
# Stop the local Prefect stack that deployments/local-up.sh started for this PREFECT_HOME
# (~/.prefect when unset): first the worker, then the server, each by its recorded PID.
#
# Each was started in its own session. The worker's flow-run subprocesses get a process group
# of their own (Prefect's choice), their HOGWILD children in it: so every member of the
# recorded process's group and every descendant of it gets SIGTERM (a flow run stopped so
# ends CRASHED and can be retried), a second one after 3 s, then SIGKILL after a grace period
# (PBG_LOCAL_DOWN_GRACE seconds, default 15). Then the PostgreSQL of `local-up.sh --postgres`,
# if there is one (pg_ctl stop -m fast). Succeeds with a message when nothing runs.
# The databases and logs stay; only the PID files are removed.
set -euo pipefail

export PREFECT_HOME="${PREFECT_HOME:-$HOME/.prefect}"
STATE="$PREFECT_HOME/pbg-local"
GRACE="${PBG_LOCAL_DOWN_GRACE:-15}"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log() { printf 'local-down: %s\n' "$*" >&2; }
# shellcheck source=deployments/postgres.sh
source "$ROOT/deployments/postgres.sh"

# descendants PID: every process below PID, children first listed after their parent.
descendants() {
    local child
    for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
        echo "$child"
        descendants "$child"
    done
}

# members PID: the process group PID leads, plus descendants of PID outside it.
members() {
    {
        ps -e -o pid=,pgid= | awk -v g="$1" '$2 == g { print $1 }'
        descendants "$1"
    } | sort -un
}

# any_alive PID...: true while one of them still runs (a zombie waiting to be reaped is done).
any_alive() {
    local pid state
    for pid in "$@"; do
        state=$(ps -o stat= -p "$pid" 2>/dev/null) || continue
        [[ "$state" == Z* ]] || return 0
    done
    return 1
}

# stop NAME: stop the process recorded in $STATE/NAME.pid with everything it started.
stop() {
    local name=$1 file="$STATE/$1.pid" pid
    if [[ ! -f "$file" ]]; then
        return 0
    fi
    pid=$(<"$file")
    # Not running, or the PID now belongs to an unrelated process: nothing of ours to stop.
    if ! [[ "$pid" =~ ^[0-9]+$ ]] || ! any_alive "$pid" || ! ps -o args= -p "$pid" | grep -q prefect; then
        log "$name (PID $pid) is not running"
        rm -f "$file"
        return 0
    fi
    local -a pids
    mapfile -t pids < <(members "$pid")
    log "stopping $name (PID $pid, ${#pids[@]} processes)"
    kill -TERM "${pids[@]}" 2>/dev/null || true
    local deadline=$((SECONDS + GRACE)) again=$((SECONDS + 3))
    while any_alive "${pids[@]}" && ((SECONDS < deadline)); do
        if ((again > 0 && SECONDS >= again)); then
            # A Prefect worker turns the first SIGTERM into SIGINT (stop polling) and may keep
            # running after it; a second SIGTERM makes it exit at once (Prefect's own rule).
            kill -TERM "${pids[@]}" 2>/dev/null || true
            again=0
        fi
        sleep 0.5
    done
    if any_alive "${pids[@]}"; then
        log "$name did not exit within ${GRACE} s: SIGKILL"
        # Children started meanwhile (a flow run picked up during shutdown) count too.
        mapfile -t -O "${#pids[@]}" pids < <(members "$pid")
        kill -KILL "${pids[@]}" 2>/dev/null || true
        while any_alive "${pids[@]}"; do
            sleep 0.2
        done
    fi
    rm -f "$file"
    log "$name stopped"
}

if [[ ! -f "$STATE/worker.pid" && ! -f "$STATE/server.pid" && ! -f "$STATE/postgres.dir" ]]; then
    log "nothing to stop: no pbg-local stack recorded under $PREFECT_HOME"
    exit 0
fi
stop worker
stop server
pg_stop
rm -f "$STATE/api_url"
