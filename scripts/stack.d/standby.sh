# shellcheck shell=bash disable=SC2086
# scripts/stack.d/standby.sh: the PostgreSQL hot standby of --ha (pg-standby,
# 15433): base backup, pg_rewind, start and stop, promote, and the PostgreSQL
# half of a failback.
# Sourced by scripts/stack; needs its settings (PG_PORT, PG_STANDBY_PORT,
# PG_STANDBY_NAME, PG_HOME_NAME, DEADLINE_S), common.sh and postgres.sh.
# (SC2086 is off: the unquoted ports and names, $REDIS_PORT and the like, are
# settings of scripts/stack, fixed and without spaces, which shellcheck cannot
# see from here.)

# --- PostgreSQL hot standby (--ha) ------------------------------------------

# pg_make_standby DATA PORT: DATA follows 127.0.0.1:PORT at its next start
# (standby.signal, primary_conninfo); never with synchronous_standby_names of
# its own (a base backup or pg_rewind copies the source's): promoted, it would
# wait for itself.
pg_make_standby() {
    local auto=$1/postgresql.auto.conf kv sed_args=()
    for kv in primary_conninfo=x synchronous_standby_names=x "${PG_FILE_SETTINGS[@]}"; do
        sed_args+=(-e "/^[[:space:]]*${kv%%=*}[[:space:]]*=/d")
    done
    as_pg sed -i "${sed_args[@]}" "$auto"
    {
        printf "primary_conninfo = 'host=%s port=%s user=postgres'\n" "$(readlink -f "$PG_LINK")" "$2"
        for kv in "${PG_FILE_SETTINGS[@]}"; do printf "%s = '%s'\n" "${kv%%=*}" "${kv#*=}"; done
    } | as_pg tee -a "$auto" >/dev/null
    as_pg touch "$1/standby.signal"
    pg_write_hba "$1"
}

# pg_clone DATA PORT: DATA anew, a base backup of 127.0.0.1:PORT that follows
# it (made aside, put in place when complete).
pg_clone() {
    local home; home=$(pg_home)
    rm -rf "$1.new"
    as_pg "$(pg_bin pg_basebackup)" -h "$home" -p "$2" -U postgres -D "$1.new" -R -X stream -c fast \
        >"$home/basebackup.log" 2>&1 || fail_with_log "pg_basebackup from 127.0.0.1:$2 failed" "$home/basebackup.log"
    pg_make_standby "$1.new" "$2"
    rm -rf "$1"
    mv "$1.new" "$1"
}

# pg_standby_create: a new standby/ from a base backup of 15432 (made aside,
# moved in place when complete).
pg_standby_create() {
    local home sb
    home=$(pg_home); sb=$home/standby
    pg_stop "$sb" fast pg-standby
    say "pg-standby: base backup of 127.0.0.1:$PG_PORT into $sb"
    pg_clone "$sb" $PG_PORT
}

# pg_rewind_from DATA PORT NAME: rewind the stopped cluster DATA to the
# timeline of the server on PORT (a crashed target gets crash recovery first),
# and make it follow PORT. When pg_rewind cannot, DATA is made anew from a base
# backup of PORT (the primary, which has every committed transaction).
pg_rewind_from() {
    local home; home=$(readlink -f "$PG_LINK")
    printf '== %s: pg_rewind %s from port %s\n' "$(date '+%F %T')" "$1" "$2" >>"$home/rewind.log"
    if ! as_pg "$(pg_bin pg_rewind)" --target-pgdata="$1" \
        --source-server="host=$home port=$2 user=postgres dbname=postgres" >>"$home/rewind.log" 2>&1; then
        say "$3: pg_rewind from 127.0.0.1:$2 failed ($(tail -n 1 "$home/rewind.log" | sed 's/^pg_rewind: //')); a new base backup of 127.0.0.1:$2 into $1 instead"
        pg_clone "$1" "$2"
        return 0
    fi
    pg_make_standby "$1" "$2"
    say "$3: pg_rewind from 127.0.0.1:$2: $(awk '/^== / { s = "" }
        /^pg_rewind: (servers diverged|no rewind required|Done!)/ { sub(/^pg_rewind: /, ""); s = s (s ? "; " : "") $0 }
        END { print s }' "$home/rewind.log")"
}

# pg_standby_up: 15433 runs as a hot standby of 15432, streams, and the
# primary waits for it (synchronous). A standby that cannot follow is made anew.
pg_standby_up() {
    local home data sb
    home=$(pg_home); data=$home/data; sb=$home/standby
    if [ "$(pg_ha_primary)" = $PG_STANDBY_PORT ]; then
        if ! pid_alive "$sb/postmaster.pid"; then
            pg_start "$sb" "$home/standby.log" "$(pg_opts_standby "$home")" pg-standby
            wait_for "pg-standby" "$home/standby.log" "$sb/postmaster.pid" pg_ready_on $PG_STANDBY_PORT
        fi
        say "pg-standby up on 127.0.0.1:$PG_STANDBY_PORT as the primary (it was promoted; scripts/stack failback makes it a standby again)"
        return 0
    fi
    { pid_alive "$data/postmaster.pid" && pg_ready; } \
        || die "pg-standby needs its primary: postgres (127.0.0.1:$PG_PORT) does not answer (scripts/stack start postgres)"
    if [ ! -s "$sb/PG_VERSION" ] \
        || [ "$(pg_control "$sb" 'Database system identifier')" != "$(pg_control "$data" 'Database system identifier')" ]; then
        pg_standby_create
    fi
    if ! pid_alive "$sb/postmaster.pid"; then
        pg_start "$sb" "$home/standby.log" "$(pg_opts_standby "$home")" pg-standby
    fi
    wait_for "pg-standby" "$home/standby.log" "$sb/postmaster.pid" pg_ready_on $PG_STANDBY_PORT
    # (a standby of an old stack ran on a copy of its trusting pg_hba.conf,
    # without TLS)
    pg_write_hba "$sb"
    as_pg "$(pg_bin pg_ctl)" -D "$sb" reload >/dev/null
    if [ "$(pg_q $PG_STANDBY_PORT 'SHOW ssl')" != on ]; then
        say "pg-standby runs without TLS: restarting it"
        as_pg_in pg-standby "$(pg_bin pg_ctl)" -D "$sb" -l "$home/standby.log" -w -t "$DEADLINE_S" -m fast \
            -o "$(pg_opts_standby "$home")" restart >/dev/null || fail_with_log "pg-standby failed to restart" "$home/standby.log"
        wait_for "pg-standby" "$home/standby.log" "$sb/postmaster.pid" pg_ready_on $PG_STANDBY_PORT
    fi
    if ! poll 30 pg_streaming $PG_PORT "$PG_STANDBY_NAME"; then
        say "pg-standby does not stream from 127.0.0.1:$PG_PORT (it cannot follow): a new base backup"
        pg_standby_create
        pg_start "$sb" "$home/standby.log" "$(pg_opts_standby "$home")" pg-standby
        wait_for "pg-standby" "$home/standby.log" "$sb/postmaster.pid" pg_ready_on $PG_STANDBY_PORT
        wait_for "pg-standby (streaming)" "$home/standby.log" "$sb/postmaster.pid" \
            pg_streaming $PG_PORT "$PG_STANDBY_NAME"
    fi
    pg_sync_set
    say "pg-standby up on 127.0.0.1:$PG_STANDBY_PORT (hot standby of 127.0.0.1:$PG_PORT, streaming, synchronous)"
}

# stop_pg_standby MODE [nosync]: the primary stops waiting for it first.
stop_pg_standby() {
    local sb; sb=$(readlink -f "$PG_LINK")/standby
    if [ "${2:-}" != nosync ] && [ -e "$sb/PG_VERSION" ] && pid_alive "$sb/postmaster.pid"; then
        pg_sync_clear "pg-standby stops"
    fi
    pg_stop "$sb" "$1" pg-standby
}

# pg_failback: 15432 the primary again, 15433 its standby, streaming, synchronous.
pg_failback() {
    local home data sb lsn
    home=$(pg_home); data=$home/data; sb=$home/standby
    if [ -s "$sb/PG_VERSION" ] && [ "$(pg_ha_primary)" = $PG_STANDBY_PORT ]; then
        say "postgres: pg-standby (127.0.0.1:$PG_STANDBY_PORT) is the primary; switching back to 127.0.0.1:$PG_PORT"
        if ! pid_alive "$sb/postmaster.pid"; then
            pg_start "$sb" "$home/standby.log" "$(pg_opts_standby "$home")" pg-standby
        fi
        wait_for "pg-standby" "$home/standby.log" "$sb/postmaster.pid" pg_ready_on $PG_STANDBY_PORT
        # (its new timeline into pg_control, where pg_rewind reads it)
        psql_on $PG_STANDBY_PORT -d postgres -c CHECKPOINT
        # 1. 15432 follows 15433
        if ! { pid_alive "$data/postmaster.pid" && pg_streaming $PG_STANDBY_PORT $PG_HOME_NAME; }; then
            pg_stop "$data" fast postgres
            pg_rewind_from "$data" $PG_STANDBY_PORT postgres
            pg_start "$data" "$home/postgres.log" "$(pg_opts_primary "$home") -c cluster_name=$PG_HOME_NAME" postgres
        fi
        wait_for "postgres" "$home/postgres.log" "$data/postmaster.pid" pg_ready
        wait_for "postgres (streaming from 127.0.0.1:$PG_STANDBY_PORT)" "$home/postgres.log" "$data/postmaster.pid" \
            pg_streaming $PG_STANDBY_PORT $PG_HOME_NAME
        say "postgres: a standby of 127.0.0.1:$PG_STANDBY_PORT, streaming"
        # 2. switch over: a clean shutdown sends all of 15433's WAL to 15432
        pg_stop "$sb" fast pg-standby
        lsn=$(pg_control "$sb" 'Latest checkpoint location')
        wait_for "postgres (replayed up to $lsn)" "$home/postgres.log" "$data/postmaster.pid" \
            pg_replayed $PG_PORT "$lsn"
        as_pg "$(pg_bin pg_ctl)" -D "$data" -w -t "$DEADLINE_S" promote >/dev/null \
            || fail_with_log "pg_ctl promote of postgres failed" "$home/postgres.log"
        wait_for "postgres (promotion)" "$home/postgres.log" "$data/postmaster.pid" pg_is_primary_on $PG_PORT
        as_pg rm -f "$data/standby.signal"
        psql_su -d postgres -c 'ALTER SYSTEM RESET primary_conninfo' >/dev/null
        # the home options again (no standby is attached yet: cheap), the new
        # timeline into pg_control
        as_pg_in postgres "$(pg_bin pg_ctl)" -D "$data" -l "$home/postgres.log" -w -t "$DEADLINE_S" -m fast \
            -o "$(pg_opts_primary "$home")" restart >/dev/null || fail_with_log "postgres failed to restart" "$home/postgres.log"
        wait_for "postgres" "$home/postgres.log" "$data/postmaster.pid" pg_ready
        psql_on $PG_PORT -d postgres -c CHECKPOINT
        say "postgres: promoted, 127.0.0.1:$PG_PORT is the primary again (timeline $(pg_timeline "$data"))"
        # 3. 15433 a standby of 15432 again
        pg_rewind_from "$sb" $PG_PORT pg-standby
    fi
    pid_alive "$data/postmaster.pid" || say "postgres: not running; starting it on 127.0.0.1:$PG_PORT"
    pg_start_primary
    pg_standby_up
}

# promote pg-standby: what a failover manager does when the primary is lost.
cmd_promote() {
    local home sb t0
    [ "${1:-}" = pg-standby ] || { echo "usage: scripts/stack promote pg-standby" >&2; exit 2; }
    home=$(readlink -f "$PG_LINK"); sb=$home/standby
    { pid_alive "$sb/postmaster.pid" && pg_ready_on $PG_STANDBY_PORT; } || die "pg-standby is not running"
    if pg_is_primary_on $PG_STANDBY_PORT; then say "pg-standby is a primary already"; return 0; fi
    t0=$(now_ms)
    as_pg "$(pg_bin pg_ctl)" -D "$sb" -w -t "$DEADLINE_S" promote >/dev/null \
        || fail_with_log "pg_ctl promote of pg-standby failed" "$home/standby.log"
    wait_for "pg-standby (out of recovery)" "$home/standby.log" "$sb/postmaster.pid" pg_is_primary_on $PG_STANDBY_PORT
    # (the new timeline into pg_control, where pg_rewind and pg_ha_primary read it)
    psql_on $PG_STANDBY_PORT -d postgres -c CHECKPOINT
    say "pg-standby promoted in $(took "$t0"): 127.0.0.1:$PG_STANDBY_PORT is the primary (timeline $(pg_timeline "$sb")); scripts/stack failback brings 127.0.0.1:$PG_PORT back"
}
