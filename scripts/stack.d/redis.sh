# shellcheck shell=bash disable=SC2086
# scripts/stack.d/redis.sh: the two Redis processes (redis 16379, the home
# primary, and redis-replica 16380 for --ha), who follows whom, their ACL users
# and passwords (issue #19), the redis-cli command.
# Sourced by scripts/stack; needs its settings (STATE, REDIS_PORT,
# REDIS_REPLICA_PORT, the SENTINEL_* ports), common.sh, and sentinel.sh
# (sentinel_primary: the sentinels have the last word on the primary).
# (SC2086 is off: the unquoted ports and names, $REDIS_PORT and the like, are
# settings of scripts/stack, fixed and without spaces, which shellcheck cannot
# see from here.)

# --- Redis ------------------------------------------------------------------

REDIS_DIR=$STATE/redis
REDIS_REPLICA_DIR=$STATE/redis-replica

# rcli PORT ARGS...: redis-cli on loopback (errors come back as text, exit 0),
# as the ACL user stack on a Redis, the password in the environment (never on
# a command line); a Sentinel's own port takes no AUTH (docs/security.md).
rcli() {
    local port=$1; shift
    if [ "$port" -gt $SENTINEL_PORT_BASE ] && [ "$port" -le $((SENTINEL_PORT_BASE + ${#SENTINEL_NODES[@]})) ]; then
        redis-cli -h 127.0.0.1 -p "$port" "$@" 2>/dev/null
    else
        REDISCLI_AUTH=$(redis_password stack) redis-cli --user stack -h 127.0.0.1 -p "$port" "$@" 2>/dev/null
    fi
}
redis_ping_on() { [ "$(rcli "$1" ping)" = PONG ]; }
redis_ping()    { redis_ping_on $REDIS_PORT; }
# redis_role PORT: master | slave (ROLE's first element; empty when it does not answer)
redis_role()    { rcli "$1" ROLE | sed -n 1p; }
redis_is_master() { [ "$(redis_role "$1")" = master ]; }
# redis_info PORT FIELD: one field of INFO replication
redis_info()    { rcli "$1" INFO replication | tr -d '\r' | sed -n "s/^$2://p"; }
# redis_linked PORT PRIMARY_PORT: PORT is a replica of PRIMARY_PORT with its link up
redis_linked() {
    local info
    info=$(rcli "$1" INFO replication | tr -d '\r')
    [[ $info == *$'\n'role:slave* && $info == *$'\n'master_port:$2* && $info == *$'\n'master_link_status:up* ]]
}
# redis_caught_up PORT OFFSET: the replica on PORT has processed up to OFFSET
redis_caught_up() { local o; o=$(redis_info "$1" slave_repl_offset); [ -n "$o" ] && [ "$o" -ge "$2" ]; }
# redis_linked_or_promoted PORT PRIMARY_PORT: linked, or the sentinels made
# PORT a primary meanwhile (a failover while it started)
redis_linked_or_promoted() { redis_linked "$1" "$2" || redis_is_master "$1"; }
# redis_moved PORT: the sentinels no longer name PORT as the primary
redis_moved() { [ "$(sentinel_primary)" != "$1" ]; }

# The two Redis processes by name: redis (16379, home primary) and redis-replica.
redis_dir()   { if [ "$1" = redis ]; then echo "$REDIS_DIR"; else echo "$REDIS_REPLICA_DIR"; fi; }
redis_port()  { if [ "$1" = redis ]; then echo $REDIS_PORT; else echo $REDIS_REPLICA_PORT; fi; }
redis_name_of() { if [ "$1" = $REDIS_PORT ]; then echo redis; else echo redis-replica; fi; }
redis_other_port() { if [ "$1" = $REDIS_PORT ]; then echo $REDIS_REPLICA_PORT; else echo $REDIS_PORT; fi; }
# redis_runs PORT: our process for PORT is alive and answers
redis_runs()  { pid_alive "$(redis_dir "$(redis_name_of "$1")")/redis.pid" && redis_ping_on "$1"; }

# redis_primary: the port of the current primary: what the sentinels say, else
# a running Redis that is a master (16379 first), else 16379.
redis_primary() {
    local p
    p=$(sentinel_primary)
    if [ -z "$p" ]; then
        for p in $REDIS_PORT $REDIS_REPLICA_PORT ""; do
            [ -n "$p" ] && redis_runs "$p" && [ "$(redis_role "$p")" = master ] && break
        done
    fi
    echo "${p:-$REDIS_PORT}"
}

# redis_upstream PORT: sets UPSTREAM to the port the Redis on PORT is to
# replicate from (empty: it starts as the primary) and UPSTREAM_WHY: the
# primary the sentinels name; else the other Redis when it runs as a primary
# (no sentinel answers, or they still name PORT while their failover to the
# other one is under way: never two primaries); else 16379.
redis_upstream() {
    local me=$1 other s
    other=$(redis_other_port "$me")
    s=$(sentinel_primary)
    UPSTREAM='' UPSTREAM_WHY=''
    if [ -n "$s" ] && [ "$s" != "$me" ]; then
        UPSTREAM=$s UPSTREAM_WHY="the sentinels' primary"
    elif redis_runs "$other" && redis_is_master "$other"; then
        UPSTREAM=$other UPSTREAM_WHY="a running primary"
    elif [ -z "$s" ] && [ "$me" != $REDIS_PORT ]; then
        UPSTREAM=$REDIS_PORT UPSTREAM_WHY="the home primary"
    fi
}

# --- Redis ACL users and their passwords (issue #19) -------------------------
#
# One ACL user per program (producer, consumer, admin), plus the stack's own:
# replica (replication), sentinel (what Sentinel sends), stack (everything:
# this script and the tests' fixtures). Each has a random password generated
# on the first `up` into .stack/secrets/redis-<user> (mode 0600); the users
# and their rules are written to .stack/redis-acl.conf (mode 0600, `aclfile`
# of both Redis processes) on every start; the user default is off. The rules
# are the table in docs/security.md: keep the two in step.
REDIS_USERS=(producer consumer admin replica sentinel stack)
REDIS_ACL=$STATE/redis-acl.conf
# The key prefixes the dev ACL opens: the configurations' (seckill), the
# tests' (sktest-PID-RAND, sktest-TAG) and the benchmarks' (bench*, openloop*,
# zipf*). A glob prefix is wider than a literal one (docs/security.md).
REDIS_ACL_PREFIXES=(seckill 'sktest-*' 'bench*' 'openloop*' 'zipf*')

redis_password() { cat "$SECRETS_DIR/redis-$1"; }


redis_secrets() { stack_secrets redis redis user "${REDIS_USERS[@]}"; }

# redis_acl_sel KIND COMMANDS PREFIX...: one selector, KIND's pattern for
# every prefix (KIND starts with ~ or %R~, PFX stands for the prefix).
redis_acl_sel() {
    local kind=$1 cmds=$2 q out='('; shift 2
    for q in "$@"; do out+="${kind//PFX/$q} "; done
    printf ' %s' "$out$cmds)"
}

# redis_acl_rules ROLE PREFIX...: the rules of one program's user (no name,
# no password). docs/security.md holds the same as a template for other
# prefixes: keep the two in step.
#
# Issue #34: the programs run Redis functions an operator loaded (FCALL; see
# common/redis/rfunc.h), never Lua of their own: no +eval, +evalsha, +script|load
# or +function|load for a daemon. Redis checks every command a function runs
# against the caller's rules too, so each program keeps the plain commands
# its functions run, but each command only on the keys it belongs to: the
# root rules hold what takes no key (and FCALL, on the keys the functions
# declare), and one selector per kind of key holds that kind's commands
# (Redis 7.0, "(...)"). Read-only patterns (%R~) only for keys no function
# declares: Redis 7.0 checks FCALL's keys as read-write whatever the
# function does with them.
redis_acl_rules() {
    local role=$1 p; shift
    # Every program: connect (ROLE when asking Sentinels, SELECT with
    # redis.db), call its functions and check they are loaded (FUNCTION
    # LIST; the version function is called with FCALL); on a Redis Cluster,
    # read the slot map and follow an ASK redirection (common/redis/rcluster.h).
    printf '%s' 'resetchannels -@all +ping +role +select +fcall +function|list +cluster|slots +asking'
    case $role in
        producer)
            printf ' %s' '+time +wait'
            for p in "$@"; do
                printf ' %s' "~$p:{item:*}:stock" "~$p:{item:*}:buyers" "~$p:{item:*}:pending" \
                    "~$p:{item:*}:unpub" "~$p:{item:*}:orders" "~$p:{item:*}:window" \
                    "~$p:{item:*}:queue" "~$p:{item:*}:queue:*" "~$p:{item:*}:xout" "~$p:{item:*}:xin"
            done
            # stock: read, reserve (DECR), give back (INCR), units moved
            # between an item's buckets (DECRBY, INCRBY: seckill_xfer_out and
            # seckill_xfer_in, common/sale/xfer.h); never SET.
            redis_acl_sel '~PFX:{item:*}:stock' '+get +decr +incr +decrby +incrby +exists' "$@"
            # buyers: SREM only for a give-back (restore: Kafka did not take the order).
            redis_acl_sel '~PFX:{item:*}:buyers' '+sismember +sadd +srem +scard +sscan' "$@"
            redis_acl_sel '~PFX:{item:*}:pending' '+hset +hget +hexists +hdel +hlen' "$@"
            redis_acl_sel '~PFX:{item:*}:unpub' '+zadd +zrem +zscore +zrangebyscore +zcard' "$@"
            redis_acl_sel '~PFX:{item:*}:orders' '+hset +hget +hdel +hincrby' "$@"
            # the transfers' records at each end (xfer.h): given, received;
            # HLEN: the sweeper counts both to find one left half done
            redis_acl_sel '~PFX:{item:*}:xout' '+hget +hset +hgetall +hlen' "$@"
            redis_acl_sel '~PFX:{item:*}:xin' '+hsetnx +hexists +hlen' "$@"
            # the sale window is seckillctl's: the producer only reads it
            redis_acl_sel '%R~PFX:{item:*}:window' '+hget +hmget' "$@"
            # the order index (orderidx.h) and its older per-order keys
            redis_acl_sel '~PFX:order:*' '+hset +hget +get +pexpire' "$@"
            redis_acl_sel '%R~PFX:items' '+smembers' "$@"
            # the waiting room (issue #58; its functions in the producer's
            # library say what each key holds): the queue hash (seed, serving
            # boundary, counters, lease), the pre-queue, the line, who asked
            # when, the admissions outstanding and spent
            redis_acl_sel '~PFX:{item:*}:queue' '+hget +hmget +hset +hsetnx +hincrby' "$@"
            redis_acl_sel '~PFX:{item:*}:queue:pre' '+sadd +sismember +spop +scard' "$@"
            redis_acl_sel '~PFX:{item:*}:queue:line' '+zadd +zscore +zcount +zrangebyscore' "$@"
            redis_acl_sel '~PFX:{item:*}:queue:seen' '+hset +hget' "$@"
            redis_acl_sel '~PFX:{item:*}:queue:adm' '+zadd +zscore +zrem +zcard +zremrangebyscore' "$@"
            redis_acl_sel '~PFX:{item:*}:queue:used' '+zadd +zscore +zremrangebyscore' "$@" ;;
        consumer)
            # WAIT: settle's clears held by redis.min_replicas_ack replicas
            printf ' %s' '+time +wait'
            for p in "$@"; do
                printf ' %s' "~$p:{item:*}:pending" "~$p:{item:*}:unpub" "~$p:{item:*}:orders" \
                    "~$p:{item:*}:stock" "~$p:{item:*}:buyers" "~$p:{item:*}:returned" "~$p:lock:*"
            done
            redis_acl_sel '~PFX:{item:*}:pending' '+hdel' "$@"
            redis_acl_sel '~PFX:{item:*}:unpub' '+zrem' "$@"
            # HINCRBY: seckill_return counts the units it gives back (given_back);
            # seckill_mark reads an order's state with HMGET before it moves it on
            redis_acl_sel '~PFX:{item:*}:orders' '+hmget +hset +hincrby' "$@"
            # settle asks whether the item's stock is there; seckill_return
            # gives a unit of an expired order back (INCR; never DECR, SET or DEL)
            redis_acl_sel '~PFX:{item:*}:stock' '+exists +incr' "$@"
            # seckill_return takes a returned order's buyer out (sale.rebuy_after_cancel);
            # it never adds one nor reads the set
            redis_acl_sel '~PFX:{item:*}:buyers' '+srem' "$@"
            # the orders given back, each once (seckill_return's SADD)
            redis_acl_sel '~PFX:{item:*}:returned' '+sadd' "$@"
            # which slot holds an order's reservation: the buckets the
            # item's window names (common/sale/bkmap.h); read, never written
            redis_acl_sel '%R~PFX:{item:*}:window' '+hget' "$@"
            redis_acl_sel '~PFX:lock:*' '+hmget +hset +hdel +pexpire' "$@" ;;
        admin)
            # seckillctl: every key of its prefixes, and it loads the
            # functions (seckillctl functions load).
            # INCRBY, HINCRBY: seckill_stock_change (item add-stock, item withdraw)
            # HSETNX: reconcile --fix finishes a transfer between an item's
            # slots (seckill_xfer_in records its id in the receiver's :xin;
            # common/sale/xfer.h)
            printf ' %s' '+function|load +get +set +del +exists +mget +pttl +pexpire +time +wait +hget +hmget +hset' \
                '+hdel +hexists +hlen +hgetall +sadd +scard +smembers +zadd +zrem +zcard +zrange +zrangebyscore +info' \
                '+incrby +hincrby +hsetnx'
            for p in "$@"; do printf ' %s' "~$p:*"; done ;;
    esac
}

# redis_write_acl: .stack/redis-acl.conf from the password files (rewritten
# on every start; a running Redis reads it again on ACL LOAD).
redis_write_acl() {
    local u
    redis_secrets
    (umask 077
     {
         # default: off, no password: no connection is ever default (NOAUTH).
         # Its rules still matter: Redis 7.0 replays the AOF's MULTI/EXEC
         # blocks (the effects of scripts) as default and checks them against
         # them, so with -@all a restart would drop every script's writes.
         echo "user default off resetpass ~* &* +@all"
         for u in producer consumer admin; do
             echo "user $u on >$(redis_password "$u") $(redis_acl_rules "$u" "${REDIS_ACL_PREFIXES[@]}")"
         done
         # Replication: the replica's PSYNC and REPLCONF, as `masteruser`.
         echo "user replica on >$(redis_password replica) resetchannels -@all +psync +replconf +ping"
         # Sentinel (redis.io, "Sentinel and Redis authentication"): what it
         # sends to monitor, announce itself on __sentinel__:hello and fail over.
         echo "user sentinel on >$(redis_password sentinel) resetchannels &__sentinel__:hello -@all" \
             "+client|setname +client|kill +subscribe +publish +ping +info +multi +exec +slaveof +replicaof" \
             "+config|rewrite +role +script|kill"
         echo "user stack on >$(redis_password stack) ~* &* +@all"
     } >"$REDIS_ACL.new")
    mv "$REDIS_ACL.new" "$REDIS_ACL"
}

# redis_conf DIR PORT: DIR/redis.conf (mode 0600: it holds masterauth), what
# every Redis of the stack runs with, the Cluster's nodes too (redis-cluster.sh
# adds its own lines after these).
redis_conf() {
    local dir=$1 port=$2
    (umask 077; : >"$dir/redis.conf"); chmod 600 "$dir/redis.conf"
    cat >"$dir/redis.conf" <<EOC
bind 127.0.0.1
port $port
daemonize no
logfile $dir/redis.log
dir $dir
# AOF so that a restart keeps stock, buyers and reservations.
appendonly yes
appendfsync everysec
# Rewrite the AOF once it has grown by 1 GB, not Redis's 64 MB: each rewrite
# forks and fdatasyncs the AOF manifest and its folder on the main thread at
# its start and end, and under load each start stalled every reservation
# for 100-370 ms (issue #30: the open loop's p99 at 7,000/s 193 ms with
# rewrites, 11 ms without). An order adds ~0.8 KB, so at 64 MB a sale
# rewrote every ~80,000 orders; 1 GB still bounds the replay on a restart.
auto-aof-rewrite-min-size 1gb
save ""
# A replica that (re)connects gets its full sync at once, not 5 s later
# (either Redis may be the primary).
repl-diskless-sync-delay 0
# ACL users (docs/security.md); as a replica it logs in as replica. DEBUG
# from loopback, so that the ACL decides who may (the user stack).
enable-debug-command local
aclfile $REDIS_ACL
masteruser replica
EOC
    # masterauth: the replica user's password; the file is the secret's mode.
    (umask 077; printf 'masterauth %s\n' "$(redis_password replica)" >>"$dir/redis.conf")
}

# redis_start NAME: redis (16379) or redis-replica (16380); nothing when it
# already runs. A Redis started here follows the current primary (redis_upstream).
redis_start() {
    local name=$1 dir port pidfile
    dir=$(redis_dir "$name"); port=$(redis_port "$name"); pidfile=$dir/redis.pid
    mkdir -p "$dir"
    redis_write_acl
    if pid_alive "$pidfile" && [ "$(redis-cli -h 127.0.0.1 -p "$port" PING 2>/dev/null)" = PONG ]; then
        # It lets anyone in as default: started before the ACL users existed.
        say "$name runs without the ACL users (started before issue #19): restarting it"
        stop_redis_named "$name"
    fi
    if pid_alive "$pidfile"; then
        # Running, or still on its way out after a SHUTDOWN: wait to see which.
        local end=$((SECONDS + 10))
        while pid_alive "$pidfile" && ! redis_ping_on "$port" && [ $SECONDS -lt $end ]; do sleep 0.1; done
        if pid_alive "$pidfile"; then
            redis_ping_on "$port" || fail_with_log "$name (pid $(pid_of "$pidfile")) runs but does not answer" "$dir/redis.log"
            # The rules may have changed since it started (a new release of
            # the project): it reads the file written above again.
            [ "$(rcli "$port" ACL LOAD)" = OK ] || fail_with_log "$name refused the ACL file $REDIS_ACL" "$dir/redis.log"
            say "$name up on 127.0.0.1:$port"
            return 0
        fi
    fi
    redis_upstream "$port"
    if [ -n "$UPSTREAM" ] && ! redis_runs "$UPSTREAM"; then
        # its primary is down too: that one first (it starts as the primary)
        local up=$UPSTREAM why=$UPSTREAM_WHY
        redis_start "$(redis_name_of "$up")"
        UPSTREAM=$up UPSTREAM_WHY=$why
    fi
    redis_conf "$dir" "$port"
    if [ -n "$UPSTREAM" ]; then
        printf '# %s\nreplicaof 127.0.0.1 %s\n' "$UPSTREAM_WHY" "$UPSTREAM" >>"$dir/redis.conf"
        say "$name: starting as a replica of 127.0.0.1:$UPSTREAM ($UPSTREAM_WHY)"
    fi
    # In the foreground under setsid, so that the pid is ours from the start.
    ( in_host "$name" setsid nohup redis-server "$dir/redis.conf" ) >/dev/null 2>&1 </dev/null &
    echo $! >"$pidfile"
    wait_for "$name" "$dir/redis.log" "$pidfile" redis_ping_on "$port"
    if [ -n "$UPSTREAM" ]; then
        wait_for "$name (replication link to 127.0.0.1:$UPSTREAM)" "$dir/redis.log" "$pidfile" \
            redis_linked_or_promoted "$port" "$UPSTREAM"
        if redis_linked "$port" "$UPSTREAM"; then
            say "$name up on 127.0.0.1:$port (replica of 127.0.0.1:$UPSTREAM, link up)"
        else
            say "$name up on 127.0.0.1:$port (a primary: the sentinels promoted it while it started)"
        fi
    else
        say "$name up on 127.0.0.1:$port"
    fi
}
redis_up() { redis_start redis; }

# The programs' Redis functions (issue #34, common/redis/rfunc.h): every library
# file of the checkout, FUNCTION LOAD REPLACE on the primary, as what
# `seckillctl functions load` does in production (no build needed here).
# The daemons never load code and refuse to start without them. REPLACE
# always: the stack runs this checkout's code, even over a newer library
# another checkout loaded. Functions are replicated and kept in the AOF: a
# replica has them, and a restart keeps them.
REDIS_FUNCTION_LIBS=(common/sale/lua/seckill_lock.lua producer/lua/seckill_producer.lua
                     consumer/lua/seckill_consumer.lua ctl/lua/seckill_ctl.lua consumer/lua/seckill_return.lua)
redis_functions_load() {
    local f name got port
    port=$(redis_primary)
    for f in "${REDIS_FUNCTION_LIBS[@]}"; do
        name=$(sed -n '1s/^#!lua name=//p' "$ROOT/$f")
        got=$(rcli "$port" -x FUNCTION LOAD REPLACE <"$ROOT/$f")
        [ "$got" = "$name" ] || die "loading the Redis functions of $f on 127.0.0.1:$port: ${got:-no answer}"
    done
    say "redis functions loaded on 127.0.0.1:$port (${REDIS_FUNCTION_LIBS[*]##*/})"
}

stop_redis_named() { local f; f=$(redis_dir "$1")/redis.pid; if [ -f "$f" ]; then stop_pidfile "$1" "$f"; fi; }
kill_redis_named() { kill_pidfile "$1" "$(redis_dir "$1")/redis.pid"; }

stop_redis() { stop_redis_named redis; }

# redis_role_note PORT: the role part of a status line (cmd_status).
redis_role_note() {
    case $(redis_role "$1") in
        master) echo "role master" ;;
        slave)  echo "role replica of 127.0.0.1:$(redis_info "$1" master_port), link $(redis_info "$1" master_link_status)" ;;
        *)      echo "role unknown" ;;
    esac
}

# redis_cli_as [USER] [REDIS-CLI ARGS]: redis-cli on the Redis 127.0.0.1:16379
# (or -p PORT) as USER (producer, consumer, admin, replica, sentinel, stack;
# default stack), the password through REDISCLI_AUTH, never argv.
redis_cli_as() {
    local u=stack
    if [ $# -gt 0 ] && [[ " ${REDIS_USERS[*]} " == *" $1 "* ]]; then u=$1; shift; fi
    [ -s "$SECRETS_DIR/redis-$u" ] || die "no password for Redis user $u in $SECRETS_DIR (scripts/stack up makes them)"
    REDISCLI_AUTH=$(redis_password "$u") exec redis-cli --user "$u" -h 127.0.0.1 -p $REDIS_PORT "$@"
}
