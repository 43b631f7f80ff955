# shellcheck shell=bash
# scripts/stack.d/kafka-cluster.sh: the three-node Kafka cluster of
# --brokers 3 (issue #9; brokers 19192-19194, controllers 19292-19294):
# configure, format, start, stop, wait for the ISR.
# Sourced by scripts/stack; needs its settings (the KAFKA3_* ones,
# ORDERS_PARTITIONS, DEADLINE_S), common.sh, kafka.sh and kafka-security.sh.

# --- Kafka, three-node cluster (--brokers 3) --------------------------------

kafka3_dir()  { echo "$KAFKA3_DIR/node$1"; }
kafka3_port() { echo $((KAFKA3_PORT_BASE + $1)); }

# Node N answers when the metadata it serves lists itself: it registered
# with the quorum and is unfenced.
kafka3_meta() {
    local port; port=$(kafka3_port "$1")
    kcat_as stack -b 127.0.0.1:"$port" -L -m 3 -q 2>/dev/null | grep -q "broker $1 at 127.0.0.1:$port"
}
kafka3_all_meta() { kcat_as stack -b "$KAFKA3_BOOTSTRAP" -L -m 3 -q 2>/dev/null | grep -q '^ 3 brokers:'; }

# kafka3_in_isr N: node N is in the ISR of every partition (all topics) it is a
# replica of. Fails when the metadata cannot be read.
kafka3_in_isr() {
    kcat_as stack -b "$KAFKA3_BOOTSTRAP" -L -m 3 -q 2>/dev/null | awk -v n="$1" '
        / brokers:$/ { seen = 1 }
        /^ +partition [0-9]+,/ {
            r = $0; sub(/.*replicas: /, "", r); sub(/[^0-9,].*/, "", r)
            i = $0; sub(/.*isrs: /, "", i);     sub(/[^0-9,].*/, "", i)
            if (index("," r ",", "," n ",") && !index("," i ",", "," n ",")) bad = 1
        }
        END { exit !seen || bad }'
}

kafka3_cluster_id() {
    local f=$KAFKA3_DIR/cluster.id id
    if [ ! -s "$f" ]; then
        # (a node formatted earlier keeps the cluster it has)
        id=$(sed -n 's/^cluster\.id=//p' "$KAFKA3_DIR"/node*/data/meta.properties 2>/dev/null | head -n 1)
        [ -n "$id" ] || id=$(kafka_new_id)
        echo "$id" >"$f"
    fi
    cat "$f"
}

# kafka3_launch N: write node N's configuration, format its storage the first
# time, start it. Nothing when it already runs.
kafka3_launch() {
    local n=$1 dir port cport
    dir=$(kafka3_dir "$n"); port=$(kafka3_port "$n"); cport=$((KAFKA3_CONTROLLER_PORT_BASE + n))
    pid_alive "$dir/kafka.pid" && return 0
    mkdir -p "$dir"
    # A node formatted before the stack had Kafka users: the cluster is
    # scratch (scale-out runs make their own topics), so it starts afresh.
    if [ -f "$dir/data/meta.properties" ] && [ ! -f "$dir/scram.done" ]; then
        say "kafka3-$n: storage older than the Kafka users; formatting it again"
        rm -rf "$dir/data"
        rm -f "$KAFKA3_DIR"/acls.v*
        [ -n "$(ls "$KAFKA3_DIR"/node*/data/meta.properties 2>/dev/null)" ] || rm -f "$KAFKA3_DIR/cluster.id"
    fi
    (umask 077; cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$KAFKA3_VOTERS
$(kafka_listener_props "$port" "$cport")
log.dirs=$dir/data
num.partitions=$ORDERS_PARTITIONS
default.replication.factor=3
min.insync.replicas=2
auto.create.topics.enable=false
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
group.initial.rebalance.delay.ms=0
log.retention.hours=168
EOF
    )
    kafka_log4j "$dir"
    if [ ! -f "$dir/data/meta.properties" ]; then
        local id
        id=$(kafka3_cluster_id)
        kafka_scram_format "$dir" "$id"
        say "kafka3-$n storage formatted (cluster $id)"
    fi
    kafka_launch "$dir" "$KAFKA3_HEAP" "kafka3-$1"
    say "kafka3-$n starting (pid $(pid_of "$dir/kafka.pid"))"
}

kafka3_prepare() {
    mkdir -p "$KAFKA_DIR" "$KAFKA3_DIR"
    kafka_fetch
    kafka_secrets
    kafka_tls
    kafka_clients
    use_kafka3
    # The tools (topic commands, storage format) log to kafka3/tools.log.
    cat >"$K_LOG4J" <<EOF
log4j.rootLogger=WARN, file
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File=$KAFKA3_DIR/tools.log
log4j.appender.file.MaxFileSize=5MB
log4j.appender.file.MaxBackupIndex=1
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
EOF
}

# kafka3_wait N: until node N answers and is back in its partitions' ISRs.
kafka3_wait() {
    local dir; dir=$(kafka3_dir "$1")
    wait_for "kafka3-$1" "$dir/kafka.log" "$dir/kafka.pid" kafka3_meta "$1"
    wait_for "kafka3-$1 (back in the ISR)" "$dir/kafka.log" "$dir/kafka.pid" kafka3_in_isr "$1"
    say "kafka3-$1 up on 127.0.0.1:$(kafka3_port "$1") (pid $(pid_of "$dir/kafka.pid"))"
}

# All nodes start before any is waited for: one alone has no quorum.
kafka3_up() {
    local n
    kafka3_prepare
    for n in "${KAFKA3_NODES[@]}"; do kafka3_launch "$n"; done
    for n in "${KAFKA3_NODES[@]}"; do
        wait_for "kafka3-$n" "$(kafka3_dir "$n")/kafka.log" "$(kafka3_dir "$n")/kafka.pid" kafka3_meta "$n"
    done
    wait_for "kafka3 (3 brokers)" "$(kafka3_dir 1)/kafka.log" "" kafka3_all_meta
    kafka_scram_users
    kafka_acls
    kafka_topics
    for n in "${KAFKA3_NODES[@]}"; do kafka3_wait "$n"; done
    say "kafka3 up: bootstrap $KAFKA3_BOOTSTRAP (topics $ORDERS_TOPIC, $DLQ_TOPIC, $PAYMENTS_TOPIC; RF 3, min ISR 2)"
}

# start kafka3-N: one node, e.g. after `stop` or `kill` in a fault test.
kafka3_start() {
    kafka3_prepare
    kafka3_launch "$1"
    kafka3_wait "$1"
}

stop_kafka3_node() {
    local dir; dir=$(kafka3_dir "$1")
    if [ -f "$dir/kafka.pid" ]; then stop_pidfile "kafka3-$1" "$dir/kafka.pid"; fi
}
# stop kafka3-N: the last node running has no controller quorum to finish a
# controlled shutdown with and would hang in it until stop_pidfile's SIGKILL
# 30 s later: it gets the SIGKILL straight away.
stop_kafka3_one() {
    local m others=0
    for m in "${KAFKA3_NODES[@]}"; do
        [ "$m" != "$1" ] && pid_alive "$(kafka3_dir "$m")/kafka.pid" && others=$((others + 1))
    done
    if [ $others -eq 0 ] && pid_alive "$(kafka3_dir "$1")/kafka.pid"; then
        say "kafka3-$1 is the last node running (no quorum for a controlled shutdown)"
        kill_kafka3_node "$1"
    else
        stop_kafka3_node "$1"
    fi
}
# kill kafka3-N: SIGKILL, no controlled shutdown (a crash).
kill_kafka3_node() { kill_pidfile "kafka3-$1" "$(kafka3_dir "$1")/kafka.pid"; }
# All nodes at once: stopped one by one, the last ones lose their quorum and
# wait for it in their controlled shutdown.
stop_kafka3() {
    local n
    [ -d "$KAFKA3_DIR" ] || return 0
    for n in "${KAFKA3_NODES[@]}"; do stop_kafka3_node "$n" & done
    wait
}
