# PostgreSQL for the local stack (`local-up.sh --postgres`); sourced by local-up.sh and local-down.sh.
#
# SQLite allows one writer at a time, and Prefect's server has several (API, task-run recorder,
# event persister, triggers, worker heartbeats): on SQLite they wait for each other
# (flows/prefect_host/prefect_server.py begins their transactions IMMEDIATE). PostgreSQL has row locks and
# many writers at once, what production servers use. This runs Debian's PostgreSQL (package `postgresql`: initdb, pg_ctl, psql) as a
# private cluster of the stack:
#   - a directory $STATE/postgres (as root: ${TMPDIR:-/tmp}/pbg-local-postgres-<hash of
#     $STATE>, owned by the `postgres` user, since PostgreSQL refuses to run as root and must
#     reach its directory) holding the cluster (data/) and its log (server.log); the directory
#     is recorded in $STATE/postgres.dir and kept by local-down.sh, as the SQLite database is;
#   - listening on 127.0.0.1 only, on a free port, no Unix socket; user `prefect` with a
#     random password ($STATE/postgres.password, mode 600), database `prefect`;
# Needs: STATE, TIMEOUT, PYTHON, log, die, free_port (local-up.sh defines them).

# pg_bin: the directory of initdb/pg_ctl (PBG_PG_BIN, else next to `pg_ctl` on PATH, else
# the newest /usr/lib/postgresql/*/bin, where Debian puts them).
pg_bin() {
    local found
    if [[ -n "${PBG_PG_BIN:-}" ]]; then
        echo "$PBG_PG_BIN"
        return
    fi
    if found=$(command -v pg_ctl) && [[ -x "$(dirname "$(readlink -f "$found")")/initdb" ]]; then
        dirname "$(readlink -f "$found")"
        return
    fi
    found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    [[ -n "$found" ]] || return 1
    echo "$found"
}

# as_pg CMD...: run CMD as the cluster's owner (the `postgres` user when we are root).
as_pg() {
    if ((EUID == 0)); then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# pg_data_dir: where this stack's cluster lives (see above).
pg_data_dir() {
    if [[ -f "$STATE/postgres.dir" ]]; then
        cat "$STATE/postgres.dir"
    elif ((EUID == 0)); then
        echo "${TMPDIR:-/tmp}/pbg-local-postgres-$(printf '%s' "$STATE" | sha1sum | cut -c1-12)"
    else
        echo "$STATE/postgres"
    fi
}

# pg_init DIR BIN: a new cluster in DIR/data with the user `prefect` and a random password.
pg_init() {
    local dir=$1 bin=$2
    if ((EUID == 0)); then
        id postgres >/dev/null 2>&1 || die "running as root, PostgreSQL needs the user 'postgres' (Debian's package creates it)"
        install -d -m 700 -o postgres -g "$(id -gn postgres)" "$dir"
    else
        install -d -m 700 "$dir"
    fi
    (umask 077 && "$PYTHON" -c 'import secrets; print(secrets.token_hex(24))' >"$STATE/postgres.password")
    # initdb reads the password from a file its user can read: one next to the new cluster.
    cp "$STATE/postgres.password" "$dir/.pwfile"
    if ((EUID == 0)); then chown postgres "$dir/.pwfile"; fi
    log "creating a PostgreSQL cluster in $dir/data"
    if ! as_pg "$bin/initdb" -D "$dir/data" -U prefect --pwfile="$dir/.pwfile" --auth-host=scram-sha-256 \
        --auth-local=reject -E UTF8 --locale=C.UTF-8 >"$STATE/postgres-init.log" 2>&1; then
        rm -f "$dir/.pwfile"
        tail -n 20 "$STATE/postgres-init.log" >&2
        die "initdb failed (log: $STATE/postgres-init.log)"
    fi
    rm -f "$dir/.pwfile"
}

# pg_start: start (creating if needed) the stack's cluster; prints the server's database URL.
pg_start() {
    local bin dir port password url
    bin=$(pg_bin) || die "--postgres: no PostgreSQL found (install Debian's \`postgresql\`, or set PBG_PG_BIN to the directory of initdb and pg_ctl)"
    dir=$(pg_data_dir)
    [[ -f "$dir/data/PG_VERSION" ]] || pg_init "$dir" "$bin"
    echo "$dir" >"$STATE/postgres.dir"
    if as_pg "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        log "a PostgreSQL of an earlier stack still runs in $dir/data: stopping it"
        as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2
    fi
    port=$(free_port)
    log "starting PostgreSQL on 127.0.0.1:$port (data: $dir, log: $dir/server.log)"
    as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t "$TIMEOUT" \
        -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=''" start >&2 \
        || { tail -n 20 "$dir/server.log" >&2; die "PostgreSQL did not start (log: $dir/server.log)"; }
    password=$(<"$STATE/postgres.password")
    url="postgresql://prefect@127.0.0.1:$port"
    if [[ -z "$(PGPASSWORD=$password "$bin/psql" -d "$url/postgres" -tAc "SELECT 1 FROM pg_database WHERE datname = 'prefect'")" ]]; then
        PGPASSWORD=$password "$bin/psql" -d "$url/postgres" -qc "CREATE DATABASE prefect" >&2 \
            || die "could not create the database 'prefect' on 127.0.0.1:$port"
    fi
    echo "postgresql+asyncpg://prefect:$password@127.0.0.1:$port/prefect"
}

# pg_stop: stop the stack's cluster, if one was started (local-down.sh).
pg_stop() {
    local bin dir
    [[ -f "$STATE/postgres.dir" ]] || return 0
    dir=$(<"$STATE/postgres.dir")
    bin=$(pg_bin) || { log "no PostgreSQL binaries found: cannot stop the cluster in $dir"; return 1; }
    if as_pg "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        log "stopping PostgreSQL ($dir/data)"
        as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2
    fi
}
