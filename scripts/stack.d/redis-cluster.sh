# shellcheck shell=bash disable=SC2086
# scripts/stack.d/redis-cluster.sh: a Redis Cluster beside the plain stack
# (issue #31, `--cluster`): six redis-server processes in cluster mode on
# loopback, three primaries and three replicas, the same ACL users and
# password files as the standalone Redis (redis.sh), a short node timeout so
# that a failover in a test takes seconds.
# Sourced by scripts/stack; needs its settings (STATE, RCLUSTER_NODES,
# RCLUSTER_PORT_BASE, RCLUSTER_NODE_TIMEOUT_MS), common.sh and redis.sh (rcli,
# redis_conf, redis_write_acl, redis_password, redis_is_master, REDIS_FUNCTION_LIBS).
# (SC2086 is off for the same reason as in redis.sh: fixed settings.)
#
# Node N (1..6) listens on 127.0.0.1:16400+N, its cluster bus on +10000 (Redis's
# own rule), state in .stack/rcluster/node-N (redis.conf, nodes.conf, the AOF,
# redis.log, redis.pid). Nodes 1-3 start as the primaries and 4-6 as their
# replicas; after a failover the roles are whatever the Cluster made them:
# `status` reads them from the nodes, never from here.

RCLUSTER_DIR=$STATE/rcluster

rcluster_dir()  { echo "$RCLUSTER_DIR/node-$1"; }
rcluster_port() { echo $((RCLUSTER_PORT_BASE + $1)); }
rcluster_seeds() { local n; for n in "${RCLUSTER_NODES[@]}"; do printf '127.0.0.1:%s ' "$(rcluster_port "$n")"; done; }
# rcluster_runs N: our process for node N is alive and answers
rcluster_runs() { pid_alive "$(rcluster_dir "$1")/redis.pid" && redis_ping_on "$(rcluster_port "$1")"; }
# rcluster_field N FIELD: one field of CLUSTER INFO on node N
rcluster_field() { rcli "$(rcluster_port "$1")" CLUSTER INFO | tr -d '\r' | sed -n "s/^$2://p"; }
# rcluster_ok N: node N sees the whole cluster: state ok, every slot served
rcluster_ok() {
    [ "$(rcluster_field "$1" cluster_state)" = ok ] &&
        [ "$(rcluster_field "$1" cluster_slots_ok)" = 16384 ] &&
        [ "$(rcluster_field "$1" cluster_known_nodes)" = ${#RCLUSTER_NODES[@]} ]
}
rcluster_all_ok() { local n; for n in "${RCLUSTER_NODES[@]}"; do rcluster_ok "$n" || return 1; done; }
# rcluster_formed: some node already belongs to a cluster with slots (nodes.conf
# keeps that across restarts, so `create` runs once in the folder's life)
rcluster_formed() {
    local n s
    for n in "${RCLUSTER_NODES[@]}"; do
        s=$(rcluster_field "$n" cluster_slots_assigned)
        [ -n "$s" ] && [ "$s" != 0 ] && return 0
    done
    return 1
}
# rcluster_replicas_linked: every primary that serves slots has a replica
# whose link is up (CLUSTER NODES: a replica's flags say slave and its link
# state connected; the primary's INFO says how many replicas stream from it)
rcluster_replicas_linked() {
    local n port info
    for n in "${RCLUSTER_NODES[@]}"; do
        port=$(rcluster_port "$n")
        info=$(rcli "$port" INFO replication | tr -d '\r')
        if [[ $info == *$'\n'role:master* ]] && [ "$(rcluster_slots_of "$port")" != 0 ]; then
            [[ $info == *$'\n'connected_slaves:0* ]] && return 1
            [[ $info == *$'\n'slave0:*state=online* ]] || return 1
        fi
    done
    return 0
}
# rcluster_slots_of PORT: how many slots the node on PORT serves (0 for a replica)
rcluster_slots_of() {
    rcli "$1" CLUSTER NODES | tr -d '\r' | awk '$3 ~ /myself/ {
        s = 0
        for (i = 9; i <= NF; i++) {
            if ($i ~ /^\[/) continue                     # a slot being migrated
            if (split($i, r, "-") == 2) s += r[2] - r[1] + 1; else s++
        }
        print s }'
}

# rcluster_conf N: node N's redis.conf, the stack's (redis_conf) and the
# Cluster's own lines (rewritten on every start: the Cluster keeps its own
# state in nodes.conf, which we never touch).
rcluster_conf() {
    local dir
    dir=$(rcluster_dir "$1")
    redis_conf "$dir" "$(rcluster_port "$1")"
    cat >>"$dir/redis.conf" <<EOC
cluster-enabled yes
cluster-config-file nodes.conf
# Seconds, not Redis's 15: a primary SIGKILLed in a test is replaced by its
# replica about two node timeouts later.
cluster-node-timeout $RCLUSTER_NODE_TIMEOUT_MS
# A sale goes on for the items on healthy shards while one shard has no
# primary: each item lives on one slot, and no script touches two slots.
cluster-require-full-coverage no
EOC
}

# rcluster_start N: start node N (nothing when it runs) and wait until it
# answers; a node that was in the cluster rejoins from its nodes.conf.
rcluster_start() {
    local n=$1 dir port
    dir=$(rcluster_dir "$n"); port=$(rcluster_port "$n")
    mkdir -p "$dir"
    redis_write_acl
    if pid_alive "$dir/redis.pid"; then
        wait_for "rcluster-$n" "$dir/redis.log" "$dir/redis.pid" redis_ping_on "$port"
        [ "$(rcli "$port" ACL LOAD)" = OK ] || fail_with_log "rcluster-$n refused the ACL file $REDIS_ACL" "$dir/redis.log"
        return 0
    fi
    rcluster_conf "$n"
    # (in its own host when the nemesis names one: in_host, common.sh)
    ( in_host "rcluster-$n" setsid nohup redis-server "$dir/redis.conf" ) >/dev/null 2>&1 </dev/null &
    echo $! >"$dir/redis.pid"
    wait_for "rcluster-$n" "$dir/redis.log" "$dir/redis.pid" redis_ping_on "$port"
}

# rcluster_create: the slots over nodes 1-3, a replica each from 4-6, as
# `redis-cli --cluster create` does it (as the user stack, the password in the
# environment).
rcluster_create() {
    local log=$RCLUSTER_DIR/create.log
    # shellcheck disable=SC2046
    REDISCLI_AUTH=$(redis_password stack) redis-cli --user stack --cluster create $(rcluster_seeds) \
        --cluster-replicas 1 --cluster-yes >"$log" 2>&1 \
        || fail_with_log "redis-cli --cluster create failed" "$log"
    say "rcluster: created (slots over 127.0.0.1:$(rcluster_port 1)-$(rcluster_port 3), a replica each)"
}

# rcluster_functions_load: the project's function libraries (redis.sh's
# REDIS_FUNCTION_LIBS) on every primary: a Cluster shares no functions
# between shards, each primary replicates its own to its replica.
rcluster_functions_load() {
    local n port f name got
    for n in "${RCLUSTER_NODES[@]}"; do
        port=$(rcluster_port "$n")
        redis_is_master "$port" || continue
        for f in "${REDIS_FUNCTION_LIBS[@]}"; do
            name=$(sed -n '1s/^#!lua name=//p' "$ROOT/$f")
            got=$(rcli "$port" -x FUNCTION LOAD REPLACE <"$ROOT/$f")
            [ "$got" = "$name" ] || die "loading the Redis functions of $f on rcluster-$n: ${got:-no answer}"
        done
    done
}

rcluster_up() {
    local n t0
    t0=$(now_ms)
    mkdir -p "$RCLUSTER_DIR"
    for n in "${RCLUSTER_NODES[@]}"; do rcluster_start "$n"; done
    rcluster_formed || rcluster_create
    wait_for "the Redis Cluster (state ok on every node)" "$(rcluster_dir 1)/redis.log" "" rcluster_all_ok
    wait_for "the Redis Cluster's replicas (a link up for every primary)" "$(rcluster_dir 1)/redis.log" "" \
        rcluster_replicas_linked
    rcluster_functions_load
    say "rcluster up in $(took "$t0"): $(rcluster_seeds)(3 primaries, 3 replicas, the functions on each primary)"
}

# rcluster_start_one N: `start rcluster-N`: it rejoins, and the cluster is
# whole again (a restarted old primary comes back as its successor's replica).
rcluster_start_one() {
    rcluster_start "$1"
    wait_for "the Redis Cluster (state ok on every node)" "$(rcluster_dir "$1")/redis.log" "" rcluster_all_ok
    say "rcluster-$1 up on 127.0.0.1:$(rcluster_port "$1") ($(rcluster_role_note "$1"))"
}

stop_rcluster_one() { local f; f=$(rcluster_dir "$1")/redis.pid; if [ -f "$f" ]; then stop_pidfile "rcluster-$1" "$f"; fi; }
kill_rcluster_one() { kill_pidfile "rcluster-$1" "$(rcluster_dir "$1")/redis.pid"; }
stop_rcluster() { local n; for n in "${RCLUSTER_NODES[@]}"; do stop_rcluster_one "$n"; done; }

# rcluster_role_note N: "primary, 5461 slots" | "replica of 127.0.0.1:P, link up"
rcluster_role_note() {
    local port
    port=$(rcluster_port "$1")
    case $(redis_role "$port") in
        master) echo "primary, $(rcluster_slots_of "$port") slots" ;;
        slave)  echo "replica of 127.0.0.1:$(redis_info "$port" master_port), link $(redis_info "$port" master_link_status)" ;;
        *)      echo "role unknown" ;;
    esac
}

# rcluster_status: a line per node; returns 1 when a node is down or the
# cluster is not ok (the caller decides whether that counts).
rcluster_status() {
    local n dir bad=0 pid
    for n in "${RCLUSTER_NODES[@]}"; do
        dir=$(rcluster_dir "$n")
        if rcluster_runs "$n"; then
            pid=$(pid_of "$dir/redis.pid")
            say "rcluster-$n running (pid $pid) 127.0.0.1:$(rcluster_port "$n") $(rcluster_role_note "$n"), state $(rcluster_field "$n" cluster_state)"
        else say "rcluster-$n down"; bad=1; fi
    done
    return $bad
}
