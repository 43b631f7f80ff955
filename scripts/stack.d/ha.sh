# shellcheck shell=bash disable=SC2086
# scripts/stack.d/ha.sh: both engines' HA processes together: whether they are
# in use or run, `failback` and `down --ha`.
# Sourced by scripts/stack (last of the parts); needs its settings, common.sh,
# redis.sh, sentinel.sh, postgres.sh and standby.sh.
# (SC2086 is off: the unquoted ports and names, $REDIS_PORT and the like, are
# settings of scripts/stack, fixed and without spaces, which shellcheck cannot
# see from here.)

# ha_in_use: any of the HA processes' folders exists.
ha_in_use() {
    local n
    [ -d "$REDIS_REPLICA_DIR" ] || [ -d "$(readlink -f "$PG_LINK")/standby" ] && return 0
    for n in "${SENTINEL_NODES[@]}"; do [ -d "$(sentinel_dir "$n")" ] && return 0; done
    return 1
}

# redis_home_ok: 16379 the primary, 16380 its replica (link up), the three
# sentinels run and name 16379.
redis_home_ok() {
    local n
    redis_runs $REDIS_PORT && redis_is_master $REDIS_PORT && redis_runs $REDIS_REPLICA_PORT \
        && redis_linked $REDIS_REPLICA_PORT $REDIS_PORT || return 1
    for n in "${SENTINEL_NODES[@]}"; do
        sentinel_runs "$n" && [ "$(sentinel_says "$n")" = $REDIS_PORT ] || return 1
    done
}
# pg_home_ok: 15432 the primary, 15433 streams from it, synchronously.
pg_home_ok() {
    local home; home=$(readlink -f "$PG_LINK")
    pid_alive "$home/data/postmaster.pid" && pg_ready && pg_is_primary_on $PG_PORT \
        && pid_alive "$home/standby/postmaster.pid" && pg_streaming $PG_PORT "$PG_STANDBY_NAME" && pg_sync_is_on
}

# failback: both engines home, from whatever state a fault test left.
cmd_failback() {
    local t0; t0=$(now_ms)
    mkdir -p "$STATE"
    if ! ha_in_use; then
        say "failback: no HA processes here (scripts/stack up --ha starts them); nothing to do"
        return 0
    fi
    if redis_home_ok && pg_home_ok; then
        say "failback: nothing to do (redis 127.0.0.1:$REDIS_PORT primary, replica $REDIS_REPLICA_PORT; postgres 127.0.0.1:$PG_PORT primary, pg-standby $PG_STANDBY_PORT streaming, synchronous)"
        return 0
    fi
    if redis_home_ok; then say "failback: redis is home already"; else redis_failback; fi
    if pg_home_ok; then say "failback: postgres is home already"; else pg_failback; fi
    say "failback done in $(took "$t0"): redis 127.0.0.1:$REDIS_PORT primary with replica $REDIS_REPLICA_PORT; postgres 127.0.0.1:$PG_PORT primary with pg-standby $PG_STANDBY_PORT streaming, synchronous"
}

# ha_runs: one of the HA processes (the replica, a sentinel, pg-standby) runs.
ha_runs() {
    local n sb
    redis_runs $REDIS_REPLICA_PORT && return 0
    for n in "${SENTINEL_NODES[@]}"; do sentinel_runs "$n" && return 0; done
    sb=$(readlink -f "$PG_LINK" || true)/standby
    [ -e "$sb/PG_VERSION" ] && pid_alive "$sb/postmaster.pid"
}
ha_down() {
    # A failback starts the primaries it brings back: with no HA process
    # running there is nothing to fail back from, and a stack that is down
    # stays down.
    if ha_runs; then
        cmd_failback
        pg_sync_clear "the standby stops"
        stop_sentinels
        stop_redis_named redis-replica
        stop_pg_standby fast
    else
        say "no HA process runs"
    fi
    if redis_runs $REDIS_PORT && [ "$(redis_role $REDIS_PORT)" = slave ]; then
        say "redis: REPLICAOF NO ONE (it was a replica)"
        rcli $REDIS_PORT REPLICAOF NO ONE >/dev/null
    fi
    say "HA processes stopped; what else ran runs standalone"
}
