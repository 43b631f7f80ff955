# shellcheck shell=bash disable=SC2086
# scripts/stack.d/kafka.sh: the single Kafka node (KRaft, 19092): its jars from
# Maven, start and stop, and the topic code that works on the single node or,
# after use_kafka3, on the three-node cluster.
# Sourced by scripts/stack; needs its settings (ROOT, STATE, KAFKA_PORT,
# KAFKA_CONTROLLER_PORT, KAFKA_HEAP, KAFKA3_BOOTSTRAP, the topics), common.sh
# and kafka-security.sh (kcat_as, the listeners, users and ACLs).
# (SC2086 is off: the unquoted ports and names, $REDIS_PORT and the like, are
# settings of scripts/stack, fixed and without spaces, which shellcheck cannot
# see from here.)

# --- Kafka ------------------------------------------------------------------

KAFKA_DIR=$STATE/kafka
KAFKA3_DIR=$STATE/kafka3
# The payments topic (kafka.payments_topic, issue #44): the shop's payment
# service publishes there as Kafka user payment, keyed by the user id, so it
# has the orders topic's partitions.
PAYMENTS_TOPIC=seckill.payments

# The Kafka the topic code and the tools talk to: the single node (default) or
# the three-node cluster (--brokers 3). Set by use_kafka / use_kafka3.
use_kafka() {
    K_BOOTSTRAP=127.0.0.1:$KAFKA_PORT K_RF=1 K_DIR=$KAFKA_DIR
    K_LOG4J=$KAFKA_DIR/log4j.properties K_TOPIC_CONFIG=()
}
use_kafka3() {
    K_BOOTSTRAP=$KAFKA3_BOOTSTRAP K_RF=3 K_DIR=$KAFKA3_DIR
    K_LOG4J=$KAFKA3_DIR/tools-log4j.properties K_TOPIC_CONFIG=(--config min.insync.replicas=2)
}
use_kafka

# The jars always live with the single node; any Kafka tool runs through here.
kafka_java() { java -Xms128m -Xmx"$KAFKA_HEAP" -Djava.awt.headless=true \
                    -Dlog4j.configuration="file:$K_LOG4J" \
                    -cp "$KAFKA_DIR/libs/*" "$@"; }
kafka_meta() { kcat_as stack -b 127.0.0.1:$KAFKA_PORT -L -m 3 -q 2>/dev/null | grep -q 'broker 1 at'; }

# kafka_log4j DIR: the broker in DIR logs to DIR/kafka.log.
kafka_log4j() {
    cat >"$1/log4j.properties" <<EOF
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File=$1/kafka.log
log4j.appender.file.MaxFileSize=20MB
log4j.appender.file.MaxBackupIndex=2
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
EOF
}

kafka_new_id() {
    local id
    id=$(kafka_java kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)
    [ -n "$id" ] || die "could not generate a Kafka cluster id"
    echo "$id"
}

# kafka_launch DIR HEAP SERVICE: start the broker of DIR/server.properties, pid in
# DIR/kafka.pid. setsid: the broker must outlive this shell and its job control.
# Every stop of the JVM (GC pauses and other safepoints) is logged to
# DIR/gc.log with wall-clock times, as Kafka's own launcher does (two files of
# 20 MB at most): a latency spike on the produce path can be lined up with it.
# The heap is fixed (-Xms = -Xmx, as Kafka's operations guide has it): the log
# cleaner holds a 128 MB dedupe buffer on the heap for good, and with -Xms128m
# G1 kept the heap near 280 MB, so that buffer alone sat above the 45 %
# occupancy at which G1 starts a concurrent mark: a mark cycle after every
# other young GC, each with a Remark pause of 7-21 ms that freed nothing, on
# top of a young pause every 2-4 s (issue #30: 1.5 ms of stopped broker per
# 1,000 orders, 0.3 ms with the heap fixed). MaxGCPauseMillis=20: Kafka's own
# launcher's goal (G1's default is 200 ms).
kafka_launch() {
    ( in_host "$3" setsid nohup java -Xms"$2" -Xmx"$2" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
        -Xlog:gc,safepoint:file="$1/gc.log":time,uptime:filecount=2,filesize=20m \
        -Dlog4j.configuration="file:$1/log4j.properties" \
        -cp "$KAFKA_DIR/libs/*" kafka.Kafka "$1/server.properties" ) \
        >"$1/stdout.log" 2>&1 </dev/null &
    echo $! >"$1/kafka.pid"
}

kafka_fetch() {
    [ -f "$KAFKA_DIR/libs/.complete" ] && return 0
    say "resolving Kafka jars from Maven Central (cached in ~/.m2)"
    rm -rf "$KAFKA_DIR/libs"
    mvn -q -B -f "$ROOT/scripts/kafka-pom.xml" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$KAFKA_DIR/libs" >"$KAFKA_DIR/mvn.log" 2>&1 \
        || fail_with_log "mvn could not resolve the Kafka jars" "$KAFKA_DIR/mvn.log"
    touch "$KAFKA_DIR/libs/.complete"
}

# kafka_single_props: the single node's server.properties, but its listeners.
kafka_single_props() {
    cat <<EOP
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
log.dirs=$KAFKA_DIR/data
num.partitions=$ORDERS_PARTITIONS
auto.create.topics.enable=false
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.hours=168
EOP
}

kafka_up() {
    mkdir -p "$KAFKA_DIR"
    kafka_fetch
    kafka_secrets
    kafka_tls
    kafka_clients
    if ! pid_alive "$KAFKA_DIR/kafka.pid"; then
        kafka_log4j "$KAFKA_DIR"
        (umask 077; { kafka_single_props; kafka_listener_props $KAFKA_PORT $KAFKA_CONTROLLER_PORT; } \
            >"$KAFKA_DIR/server.properties")
        if [ ! -f "$KAFKA_DIR/data/meta.properties" ]; then
            local id
            id=$(kafka_new_id)
            kafka_scram_format "$KAFKA_DIR" "$id"
            say "kafka storage formatted (cluster $id)"
        elif [ ! -f "$KAFKA_DIR/scram.done" ]; then
            # (plaintext, from plain.properties: server.properties is not read)
            kafka_scram_upgrade
        fi
        kafka_launch "$KAFKA_DIR" "$KAFKA_HEAP" kafka
    fi
    wait_for "kafka" "$KAFKA_DIR/kafka.log" "$KAFKA_DIR/kafka.pid" kafka_meta
    kafka_scram_users
    kafka_acls
    kafka_topics
    say "kafka up on 127.0.0.1:$KAFKA_PORT, TLS and SCRAM (topics $ORDERS_TOPIC, $DLQ_TOPIC, $PAYMENTS_TOPIC)"
    kafka_warm
}

# The warm-up (issue #56): a broker just started is a JVM whose compiler has
# not yet compiled the paths a sale runs; `perf` over a first `make demo`
# showed its JIT compiler on 14-19 of each 25 ms step's 50 samples in the
# sale's first 150 ms, and that first sale took 0.6 s where a warm broker's
# took 0.25-0.34 s. A production broker has been running for days. So the
# stack sends, once per broker process, what a sale sends: many small
# idempotent acks=all produce requests over TLS and SCRAM (one message per
# batch, to every partition) and the fetches that read them back, to a topic
# of its own. SECKILL_KAFKA_WARMUP=0 leaves it cold (make bench's cold
# figure); SECKILL_KAFKA_WARMUP_MSGS sets how many (20000: 5-10 s here).
WARM_TOPIC=seckill.warmup
kafka_warm() {
    local n=${SECKILL_KAFKA_WARMUP_MSGS:-20000} t0=$SECONDS
    if [ "${SECKILL_KAFKA_WARMUP:-1}" = 0 ]; then
        say "kafka: not warmed up (SECKILL_KAFKA_WARMUP=0): the first sale meets a cold broker"
        return 0
    fi
    [ "$(cat "$KAFKA_DIR/warm.pid" 2>/dev/null)" = "$(cat "$KAFKA_DIR/kafka.pid")" ] && return 0
    kafka_has_topic "$WARM_TOPIC" || kafka_topic_create "$WARM_TOPIC" "$ORDERS_PARTITIONS"
    seq "$n" | awk '{printf "%d|{\"v\":1,\"warm\":%d}\n", $1 % 997, $1}' |
        kcat -q -F "$KAFKA_CLIENTS/stack.kcat" -b "$K_BOOTSTRAP" -P -t "$WARM_TOPIC" -K '|' \
            -X enable.idempotence=true -X acks=all -X linger.ms=0 -X batch.num.messages=1 ||
        { say "kafka: the warm-up's produce failed; the broker stays cold"; return 0; }
    # (what was just written, per partition: the topic keeps earlier warm-ups)
    kcat -q -F "$KAFKA_CLIENTS/stack.kcat" -b "$K_BOOTSTRAP" -C -t "$WARM_TOPIC" -e \
        -o "-$((n / ORDERS_PARTITIONS + 1))" -X fetch.wait.max.ms=5 -X fetch.message.max.bytes=4096 >/dev/null ||
        { say "kafka: the warm-up's fetch failed; the broker is half warm"; return 0; }
    cp "$KAFKA_DIR/kafka.pid" "$KAFKA_DIR/warm.pid"
    say "kafka: warmed up in $((SECONDS - t0)) s ($n idempotent acks=all messages, one per batch, fetched back):" \
        "a production broker is warm, and a cold one's first sale is slower"
}

# (the topic code below works on the Kafka chosen by use_kafka / use_kafka3)
# kafka_topic_everywhere NAME yes|no: every broker that answers (at least one)
# has the topic (yes) or does not (no). Each broker is asked itself: a new or
# deleted topic reaches the brokers' metadata one by one.
kafka_topic_everywhere() {
    local b out answered=0 there
    for b in ${K_BOOTSTRAP//,/ }; do
        out=$(kcat_as stack -b "$b" -L -t "$1" -m 3 -q 2>/dev/null) || continue
        answered=1 there=no
        if grep -Eq "topic \"$1\" with [1-9][0-9]* partitions" <<<"$out"; then there=yes; fi
        [ "$there" = "$2" ] || return 1
    done
    [ $answered = 1 ]
}
kafka_has_topic()   { kafka_topic_everywhere "$1" yes; }
kafka_lacks_topic() { kafka_topic_everywhere "$1" no; }

# kafka_topic_create NAME PARTITIONS: create if missing, wait until it is seen.
kafka_topic_create() {
    kafka_java org.apache.kafka.tools.TopicCommand --bootstrap-server "$K_BOOTSTRAP" \
        --command-config "$KAFKA_CLIENTS/admin.properties" --create --if-not-exists --topic "$1" --partitions "$2" --replication-factor "$K_RF" \
        "${K_TOPIC_CONFIG[@]}" >"$K_DIR/topics.log" 2>&1 \
        || fail_with_log "creating topic $1 failed" "$K_DIR/topics.log"
    wait_for "topic $1" "$K_DIR/topics.log" "" kafka_has_topic "$1"
}

kafka_topics() {
    local t parts
    for t in "$ORDERS_TOPIC" "$DLQ_TOPIC" "$PAYMENTS_TOPIC"; do
        kafka_has_topic "$t" && continue
        parts=$ORDERS_PARTITIONS; [ "$t" = "$DLQ_TOPIC" ] && parts=1
        kafka_topic_create "$t" "$parts"
    done
}

stop_kafka() { if [ -f "$KAFKA_DIR/kafka.pid" ]; then stop_pidfile kafka "$KAFKA_DIR/kafka.pid"; fi; }
