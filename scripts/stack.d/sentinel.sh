# shellcheck shell=bash disable=SC2086
# scripts/stack.d/sentinel.sh: the three Redis Sentinels of --ha (16390-16392),
# the replica and sentinels coming up together, a Sentinel failover and the
# Redis half of a failback.
# Sourced by scripts/stack; needs its settings (STATE, the SENTINEL_* and Redis
# ports, DEADLINE_S), common.sh and redis.sh.
# (SC2086 is off: the unquoted ports and names, $REDIS_PORT and the like, are
# settings of scripts/stack, fixed and without spaces, which shellcheck cannot
# see from here.)

# --- Redis Sentinel (--ha) --------------------------------------------------

sentinel_dir()  { echo "$STATE/sentinel-$1"; }
sentinel_port() { echo $((SENTINEL_PORT_BASE + $1)); }
sentinel_runs() { pid_alive "$(sentinel_dir "$1")/sentinel.pid" && redis_ping_on "$(sentinel_port "$1")"; }
# sentinel_says N: the port of the primary sentinel N names (empty: no answer)
sentinel_says() {
    local a
    a=$(rcli "$(sentinel_port "$1")" SENTINEL get-master-addr-by-name $SENTINEL_MASTER | tr '\n' ' ')
    if [[ $a =~ ^127\.0\.0\.1\ ([0-9]+)\ $ ]]; then echo "${BASH_REMATCH[1]}"; fi
}
# sentinel_primary: what the first running sentinel that answers says
sentinel_primary() {
    local n p
    for n in "${SENTINEL_NODES[@]}"; do
        pid_alive "$(sentinel_dir "$n")/sentinel.pid" || continue
        p=$(sentinel_says "$n") && [ -n "$p" ] && { echo "$p"; return 0; }
    done
    return 0
}
# sentinels_agree PORT: every running sentinel (at least one) names PORT
sentinels_agree() {
    local n seen=0
    for n in "${SENTINEL_NODES[@]}"; do
        pid_alive "$(sentinel_dir "$n")/sentinel.pid" || continue
        [ "$(sentinel_says "$n")" = "$1" ] || return 1
        seen=1
    done
    [ $seen = 1 ]
}
# sentinel_field N FIELD: one field of SENTINEL master seckill
sentinel_field() {
    rcli "$(sentinel_port "$1")" SENTINEL master $SENTINEL_MASTER \
        | awk -v f="$2" 'NR % 2 { k = $0; next } k == f { print; exit }'
}
# sentinel_replicas N: "ADDRESS FLAGS LINK" per replica sentinel N knows
sentinel_replicas() {
    rcli "$(sentinel_port "$1")" SENTINEL replicas $SENTINEL_MASTER | awk '
        NR % 2 { k = $0; next }
        k == "name" { n = $0 } k == "flags" { f = $0 }
        k == "master-link-status" { print n, f, $0 }'
}
# sentinel_ready N: it answers, knows the primary, sees it up (when it runs,
# and that Redis does report itself a master),
# sees every other running Redis as a replica with its link up, and knows the
# other sentinels that run (they find each other through the primary's hello
# channel: a couple of seconds).
sentinel_ready() {
    local n=$1 p q m others=0 known
    redis_ping_on "$(sentinel_port "$n")" || return 1
    p=$(sentinel_says "$n"); [ -n "$p" ] || return 1
    if redis_runs "$p"; then
        redis_is_master "$p" && [ "$(sentinel_field "$n" flags)" = master ] || return 1
    fi
    q=$(redis_other_port "$p")
    if redis_runs "$q" && redis_linked "$q" "$p"; then
        sentinel_replicas "$n" | grep -Fx "127.0.0.1:$q slave ok" >/dev/null || return 1
    fi
    for m in "${SENTINEL_NODES[@]}"; do
        [ "$m" != "$n" ] && pid_alive "$(sentinel_dir "$m")/sentinel.pid" && others=$((others + 1))
    done
    known=$(sentinel_field "$n" num-other-sentinels)
    [ -n "$known" ] && [ "$known" -ge $others ]
}
# sentinels_settled: no running sentinel is making a failover, and all that
# answer name the same primary.
sentinels_settled() {
    local n a first=
    for n in "${SENTINEL_NODES[@]}"; do
        sentinel_runs "$n" || continue
        [[ $(sentinel_field "$n" flags) != *failover_in_progress* ]] || return 1
        a=$(sentinel_says "$n")
        [ -n "$first" ] || first=$a
        [ "$a" = "$first" ] || return 1
    done
}
sentinels_running() {
    local n c=0
    for n in "${SENTINEL_NODES[@]}"; do pid_alive "$(sentinel_dir "$n")/sentinel.pid" && c=$((c + 1)); done
    echo $c
}

# sentinel_confs_check: Sentinel keeps the current primary and epoch in its
# sentinel.conf, which is therefore kept; except when no sentinel runs to tell
# better and a file names a Redis that is not the running primary (e.g. after a
# failover, a plain `down` and `up`): every such file is written anew, before
# any sentinel starts (one with the old file would talk the others round).
sentinel_confs_check() {
    local n conf p named
    [ "$(sentinels_running)" = 0 ] || return 0
    p=$(redis_primary)
    redis_runs "$p" && [ "$(redis_role "$p")" = master ] || return 0
    for n in "${SENTINEL_NODES[@]}"; do
        conf=$(sentinel_dir "$n")/sentinel.conf
        [ -s "$conf" ] || continue
        named=$(sed -n "s/^sentinel monitor $SENTINEL_MASTER 127\.0\.0\.1 \([0-9]*\) .*/\1/p" "$conf")
        if [ "$named" != "$p" ]; then
            say "sentinel-$n: its sentinel.conf names 127.0.0.1:$named, the primary is 127.0.0.1:$p: written anew"
            rm -f "$conf"
        fi
    done
}

# sentinel_launch N: write sentinel.conf the first time, start sentinel N.
# Nothing when it already runs. (sentinel_confs_check first.)
sentinel_launch() {
    local n=$1 dir port conf p
    dir=$(sentinel_dir "$n"); port=$(sentinel_port "$n"); conf=$dir/sentinel.conf
    pid_alive "$dir/sentinel.pid" && return 0
    command -v redis-sentinel >/dev/null ||
        die "redis-sentinel is not installed (scripts/stack up installs it, outside the nemesis' hosts)"
    mkdir -p "$dir"
    p=$(redis_primary)
    if [ ! -s "$conf" ]; then
        # down-after 2 s, twice Sentinel's 1 s PING period: with 1 s a new
        # primary was once marked down again right after a switch.
        cat >"$conf" <<EOC
port $port
bind 127.0.0.1
daemonize no
logfile $dir/sentinel.log
dir $dir
sentinel resolve-hostnames no
sentinel monitor $SENTINEL_MASTER 127.0.0.1 $p $SENTINEL_QUORUM
sentinel down-after-milliseconds $SENTINEL_MASTER $SENTINEL_DOWN_AFTER_MS
sentinel failover-timeout $SENTINEL_MASTER 5000
sentinel parallel-syncs $SENTINEL_MASTER 1
EOC
    fi
    # It logs in to both Redis processes as the ACL user sentinel (the lines
    # are set again on every start: the password is the file's, and a conf
    # from before the ACL users has none). Sentinel rewrites this file itself.
    chmod 600 "$conf"
    sed -i '/^sentinel auth-user /d; /^sentinel auth-pass /d' "$conf"
    printf 'sentinel auth-user %s sentinel\nsentinel auth-pass %s %s\n' "$SENTINEL_MASTER" "$SENTINEL_MASTER" \
        "$(redis_password sentinel)" >>"$conf"
    ( in_host "sentinel-$n" setsid nohup redis-sentinel "$conf" ) >/dev/null 2>&1 </dev/null &
    echo $! >"$dir/sentinel.pid"
}
sentinel_wait() {
    local dir; dir=$(sentinel_dir "$1")
    wait_for "sentinel-$1" "$dir/sentinel.log" "$dir/sentinel.pid" sentinel_ready "$1"
    say "sentinel-$1 up on 127.0.0.1:$(sentinel_port "$1") (primary $SENTINEL_MASTER at 127.0.0.1:$(sentinel_says "$1"))"
}
sentinel_start() { sentinel_confs_check; sentinel_launch "$1"; sentinel_wait "$1"; }
stop_sentinel() { local f; f=$(sentinel_dir "$1")/sentinel.pid; if [ -f "$f" ]; then stop_pidfile "sentinel-$1" "$f"; fi; }
stop_sentinels() { local n; for n in "${SENTINEL_NODES[@]}"; do stop_sentinel "$n"; done; }

# redis_ha_up: the replica, then the sentinels (up --ha).
redis_ha_up() {
    local p q n
    redis_start redis-replica
    p=$(redis_primary); q=$(redis_other_port "$p")
    if [ -z "$(sentinel_primary)" ] && [ "$(redis_role "$q")" = master ]; then
        # both are primaries and no sentinel decides: the home primary stays one
        say "$(redis_name_of "$q") is a primary too: REPLICAOF 127.0.0.1 $p"
        rcli "$q" REPLICAOF 127.0.0.1 "$p" >/dev/null
    fi
    wait_for "$(redis_name_of "$q") (replication link to 127.0.0.1:$p)" \
        "$(redis_dir "$(redis_name_of "$q")")/redis.log" "$(redis_dir "$(redis_name_of "$q")")/redis.pid" \
        redis_linked "$q" "$p"
    sentinel_confs_check
    for n in "${SENTINEL_NODES[@]}"; do sentinel_launch "$n"; done
    for n in "${SENTINEL_NODES[@]}"; do sentinel_wait "$n"; done
}

# sentinel_failover: SENTINEL FAILOVER seckill on the first sentinel that
# answers; -NOGOODSLAVE (the replica is not known good yet) and -INPROG are
# retried with a backoff until the deadline.
sentinel_failover() {
    local end=$((SECONDS + DEADLINE_S)) delay=200 n out=
    while :; do
        out=
        for n in "${SENTINEL_NODES[@]}"; do
            sentinel_runs "$n" || continue
            out=$(rcli "$(sentinel_port "$n")" SENTINEL FAILOVER $SENTINEL_MASTER)
            break
        done
        case $out in
            OK) say "redis: SENTINEL FAILOVER $SENTINEL_MASTER accepted by sentinel-$n"; return 0 ;;
            NOGOODSLAVE*|INPROG*|"") ;;
            *) die "SENTINEL FAILOVER $SENTINEL_MASTER: $out" ;;
        esac
        [ $SECONDS -lt $end ] || die "SENTINEL FAILOVER $SENTINEL_MASTER not accepted within ${DEADLINE_S}s (last answer: ${out:-none})"
        sleep "$((delay / 1000)).$(printf '%03d' $((delay % 1000)))"
        delay=$((delay * 2)); [ $delay -le 2000 ] || delay=2000
    done
}

# redis_failback: both Redis and the three sentinels run, 16379 is the primary
# and 16380 its replica with the link up; the sentinels name 16379. Whatever
# the sentinels are doing is let finish first (a failover under way).
redis_failback() {
    local end=$((SECONDS + DEADLINE_S)) p name n started m
    until redis_home_ok; do
        [ $SECONDS -lt $end ] || die "redis: not back to 16379 primary, 16380 replica within ${DEADLINE_S}s (16379 $(redis_role $REDIS_PORT), 16380 $(redis_role $REDIS_REPLICA_PORT), sentinels name $(sentinel_primary))"
        wait_for "sentinels (a failover under way finished)" "$(sentinel_dir 1)/sentinel.log" "" sentinels_settled
        # Both Redis run: the primary first, so that the other one follows it.
        p=$(redis_primary)
        for name in "$(redis_name_of "$p")" "$(redis_name_of "$(redis_other_port "$p")")"; do
            pid_alive "$(redis_dir "$name")/redis.pid" || redis_start "$name"
        done
        started=()
        sentinel_confs_check
        for n in "${SENTINEL_NODES[@]}"; do
            pid_alive "$(sentinel_dir "$n")/sentinel.pid" && continue
            sentinel_launch "$n"; started+=("$n")
        done
        for n in "${started[@]}"; do sentinel_wait "$n"; done
        p=$(redis_primary)
        if [ "$p" = $REDIS_REPLICA_PORT ]; then
            # (each step gives way, and the loop looks again, when the sentinels
            # move the primary meanwhile)
            say "redis: the sentinels' primary is 127.0.0.1:$p; switching back to 127.0.0.1:$REDIS_PORT"
            if redis_is_master $REDIS_PORT; then
                # restarted as a primary before the sentinels' failover was known:
                # what the sentinels do some 8 s later, at once
                say "redis: a primary too; REPLICAOF 127.0.0.1 $p"
                rcli $REDIS_PORT REPLICAOF 127.0.0.1 "$p" >/dev/null
            fi
            poll $((end - SECONDS)) eval "redis_linked $REDIS_PORT $p || redis_moved $p" || true
            redis_linked $REDIS_PORT "$p" || continue
            m=$(redis_info "$p" master_repl_offset) || m=
            [ -n "$m" ] || continue
            poll $((end - SECONDS)) eval "redis_caught_up $REDIS_PORT $m || redis_moved $p" || true
            redis_caught_up $REDIS_PORT "$m" || continue
            redis_moved "$p" && continue
            sentinel_failover
            poll $((end - SECONDS)) sentinels_agree $REDIS_PORT || true
            poll $((end - SECONDS)) redis_is_master $REDIS_PORT || true
        fi
        if redis_is_master $REDIS_PORT && redis_is_master $REDIS_REPLICA_PORT \
            && [ "$(redis_primary)" = $REDIS_PORT ]; then
            # (the sentinels would do this too, some 8 s after a switch)
            say "redis-replica: REPLICAOF 127.0.0.1 $REDIS_PORT"
            rcli $REDIS_REPLICA_PORT REPLICAOF 127.0.0.1 $REDIS_PORT >/dev/null
        fi
        redis_home_ok || poll 5 redis_home_ok || true
    done
}
